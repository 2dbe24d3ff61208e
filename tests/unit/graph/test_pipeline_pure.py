"""The pure helpers of the build pipeline: job sizing, the one LABEL instruction, wheels out of images."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from buildctl.builder.pipeline import compile_jobs, extract_wheel, label_instruction


def test_compile_jobs_follow_cores_and_memory() -> None:
    assert compile_jobs(cores=64, memory_gib=512, per_job_gib=8, concurrent=1) == 64
    assert compile_jobs(cores=64, memory_gib=128, per_job_gib=8, concurrent=1) == 16  # memory binds (nvcc)
    assert compile_jobs(cores=64, memory_gib=128, per_job_gib=8, concurrent=2) == 8  # two compiles share
    assert compile_jobs(cores=2, memory_gib=1, per_job_gib=8, concurrent=1) == 1  # never zero
    assert compile_jobs(cores=16, memory_gib=100, per_job_gib=0, concurrent=4) == 4


def test_label_instruction() -> None:
    assert label_instruction({}) == ""
    assert label_instruction({"b": 'x$y "q"', "a": '{"k": [1]}'}) == (
        'LABEL "a"="{\\"k\\": [1]}" \\\n      "b"="x\\$y \\"q\\""\n')


def _save_tar(tmp: Path, files: dict[str, bytes]) -> Path:
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    out = tmp / "image.tar"
    with tarfile.open(out, "w") as t:
        for name, data in {"abc/layer.tar": layer.getvalue(),
                           "manifest.json": json.dumps([{"Layers": ["abc/layer.tar"]}]).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out


def test_extract_wheel(tmp_path: Path) -> None:
    tar = _save_tar(tmp_path, {"wheel/": b"", "wheel/fastmath-0.2.0-cp311-cp311-linux_x86_64.whl": b"PK-wheel"})
    found = extract_wheel(tar, tmp_path / "out")
    assert found == tmp_path / "out" / "fastmath-0.2.0-cp311-cp311-linux_x86_64.whl"
    assert found.read_bytes() == b"PK-wheel"
    assert extract_wheel(_save_tar(tmp_path, {"etc/x.whl": b"no"}), tmp_path / "out2") is None
