"""bench/pull_floor.py as docs/benchmarks/rebuild.md runs it (there on a compile environment; here on a small image of two layers
that the test builds and pushes): each form of the image pulled into a fresh second engine, the result file
written. No timing is asserted: the figures are checked for being there, the forms for being the same image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from tests.engine.conftest import ImageCleanup, docker_cli

PROJECT = Path(__file__).resolve().parents[2]


def test_pull_floor_pulls_each_form_into_a_fresh_engine(registry: str, image_cleanup: ImageCleanup,
                                                        tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    (ctx / "a").mkdir(parents=True)
    for i in range(20):
        (ctx / "a" / f"f{i}").write_bytes(os.urandom(4096) + bytes(60_000))
    (ctx / "b").write_text("second layer\n")
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY a /a\nCOPY b /b\n")
    ref = image_cleanup(f"{registry}/buildctl-test/pullfloor-{uuid.uuid4().hex[:8]}:one")
    docker_cli("build", "-q", "-t", ref, str(ctx))
    docker_cli("push", "-q", ref)
    out = tmp_path / "results"
    done = subprocess.run([sys.executable, str(PROJECT / "bench" / "pull_floor.py"), ref, "--reps", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [result] = list(out.glob("*-pullfloor.json"))
    res = json.loads(result.read_text())
    forms = ["gzip", "tar", *(["zstd"] if shutil.which("zstd") else [])]
    assert sorted(res["forms"]) == sorted(forms) and res["load_before"] and res["load_after"]
    for form in ("gzip", "tar"):  # every engine pulls these: each pull has its seconds
        [pull] = res["pulls"][form]
        assert pull["seconds"] > 0, (form, pull)
    assert res["forms"]["tar"]["bytes"] > res["forms"]["gzip"]["bytes"]  # the layers' own bytes, uncompressed
    if "zstd" in forms:  # pulled, or refused by an engine that cannot unpack zstd (Debian 12's 20.10) with its error
        [pull] = res["pulls"]["zstd"]
        assert pull["seconds"] is not None or "tar" in pull["error"], pull
    # every form is the same image: its config (the image id) and the layers' uncompressed content
    ids = set()
    for form in forms:
        if form == "zstd" and res["pulls"]["zstd"][0]["seconds"] is None:
            continue
        host, _, rest = ref.partition("/")
        name = f"{host}/{rest.rpartition(':')[0]}:{res['forms'][form]['tag']}"
        docker_cli("pull", "-q", name)
        image_cleanup(name)
        ids.add(docker_cli("image", "inspect", "--format", "{{.Id}}", name).strip())
    assert len(ids) == 1, ids
    assert f"gzip layers, {res['forms']['gzip']['bytes']:,} bytes: median" in done.stdout
