"""`python -m smoke` as a program, in subprocesses of Python 3.10, 3.11 and 3.12, over MIMIC module trees.

The Transformer Engine, DeepEP, Megatron-LM and torch trees are mimics of their layouts written into
tmp folders (tests/unit/smoke/smoke_mimic.py) and reached through PYTHONPATH; the CUDA driver stub is a
tiny shared library compiled here with gcc, standing in for the toolkit's lib64/stubs/libcuda.so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.unit.smoke import smoke_mimic as mimic

ROOT = Path(__file__).resolve().parents[3]
TE_SHA = "d2945c6a571e3978677614d1fe08779966a5a4ef"


def interpreters() -> list[str]:
    """This Python, and 3.10 / 3.12 where this machine has them (pyenv or PATH)."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    for v in ("3.10", "3.12"):
        for cand in (shutil.which(f"python{v}"), *sorted(Path.home().glob(f".pyenv/versions/{v}.*/bin/python{v}"))):
            if cand and subprocess.run([str(cand), "-c", "0"], capture_output=True).returncode == 0:
                found[v] = str(cand)
                break
    return [found[k] for k in sorted(found)]


PYTHONS = interpreters()


def run_suite(python: str, expect: dict[str, Any], tmp: Path, *, pythonpath: list[Path], tier: str = "build",
              env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Path]:
    exp = tmp / "expect.json"
    exp.write_text(json.dumps({"schema": 1, "stack": "it", "variant": "v", **expect}))
    junit = tmp / "out.xml"
    full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(map(str, pythonpath)), **(env or {})}
    p = subprocess.run([python, "-m", "smoke", "--expect", str(exp), "--tier", tier, "--junit", str(junit)],
                       cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout), junit


@pytest.fixture
def site(tmp_path: Path) -> Path:
    s = tmp_path / "site"
    mimic.torch(s)
    mimic.transformer_engine(s, layout="new", version="2.10.0.dev0+d2945c6")
    mimic.deep_ep(s, hybrid=True)
    mimic.megatron(s, flags=("--num-layers", "--attention-backend"))
    mimic.dist_info(s, "PyYAML", "6.0")
    return s


@pytest.mark.parametrize("python", PYTHONS)
def test_build_tier_passes_over_mimic_trees(python: str, site: Path, tmp_path: Path) -> None:
    expect = {
        "required": ["versions", "imports", "mxfp8", "attention", "megatron-args"],
        "checks": {
            "versions": {"distributions": [{"name": "PyYAML", "version": "6.0"}],
                         "components": [{"name": "transformer-engine", "dist": "transformer_engine",
                                         "version": "2.10.0.dev0", "sha": TE_SHA}]},
            "imports": {"modules": ["json", "deep_ep:HybridEPBuffer", "transformer_engine.pytorch:Linear"]},
            "mxfp8": {},
            "attention": {"backend": "fused"},
            "megatron-args": {"args": ["--num-layers", "61", "--attention-backend", "fused"]},
        },
    }
    rc, report, junit = run_suite(python, expect, tmp_path, pythonpath=[site], env={"NVTE_FUSED_ATTN": "1"})
    assert rc == 0, json.dumps(report, indent=1)
    assert report["ok"] is True
    assert [(c["name"], c["status"]) for c in report["checks"]] == [
        ("versions", "pass"), ("imports", "pass"), ("mxfp8", "pass"), ("attention", "pass"), ("megatron-args", "pass")]
    assert report["python"]["executable"] == python or Path(report["python"]["executable"]).name.startswith("python")
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("5", "0")


@pytest.mark.parametrize("python", PYTHONS)
def test_build_tier_failure_exit_status_and_python_text(python: str, site: Path, tmp_path: Path) -> None:
    (site / "deep_ep" / "__init__.py").write_text("class Buffer:\n    pass\n")  # DeepEP main: no HybridEPBuffer
    expect = {"required": ["imports"], "checks": {"imports": {"modules": ["deep_ep:HybridEPBuffer"]},
                                                  "megatron-args": {"args": ["--num-layer", "61"]}}}
    rc, report, junit = run_suite(python, expect, tmp_path, pythonpath=[site])
    assert rc == 1
    assert report["failed"] == ["imports"]
    by = {c["name"]: c for c in report["checks"]}
    assert by["imports"]["summary"] == \
        "deep_ep:HybridEPBuffer: AttributeError: module 'deep_ep' has no attribute 'HybridEPBuffer'"
    # not required: reported, but does not decide the exit status
    assert by["megatron-args"]["status"] == "fail"
    assert "unrecognized arguments: --num-layer 61" in by["megatron-args"]["summary"]
    assert ET.parse(junit).getroot().get("failures") == "1"


def test_gpu_tier_without_a_device_is_not_a_pass(site: Path, tmp_path: Path) -> None:
    expect = {"required": ["mxfp8", "attention", "protected"],
              "checks": {"protected": {"patterns": ["torch"], "base": {"torch": "2.9.0+mimic"}}}}
    rc, report, _ = run_suite(sys.executable, expect, tmp_path, pythonpath=[site], tier="gpu")
    assert rc == 1
    by = {c["name"]: c for c in report["checks"]}
    assert by["mxfp8"]["status"] == "skipped" and by["mxfp8"]["deferred"] is None
    assert by["mxfp8"]["summary"].startswith("no GPU: no GPU device in this container")
    assert (by["protected"]["status"], by["protected"]["deferred"]) == ("skipped", "build")
    assert report["failed"] == ["mxfp8", "attention"]


def test_bad_expect_exits_2_with_a_report(tmp_path: Path) -> None:
    exp = tmp_path / "expect.json"
    exp.write_text('{"schema": 1, "required": ["mxfp4"]}')
    p = subprocess.run([sys.executable, "-m", "smoke", "--expect", str(exp)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    report = json.loads(p.stdout)
    assert report["ok"] is False
    assert report["error"].startswith(f"expect.json: {exp}: required: unknown check 'mxfp4'")


STUB_C = "int cuInit(unsigned int flags) { return 34; /* CUDA_ERROR_STUB_LIBRARY */ }\n"
NEEDS_LIBCUDA = """
import ctypes
# like an extension linked against libcuda: loading it needs libcuda.so.1 on the library path
lib = ctypes.CDLL("libcuda.so.1")
INIT = lib.cuInit(0)
"""


def test_driver_stub_stands_in_for_libcuda_in_probes_only(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "lib64" / "stubs").mkdir(parents=True)
    src = tmp_path / "stub.c"
    src.write_text(STUB_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(cuda / "lib64/stubs/libcuda.so"), str(src)], check=True)
    site = tmp_path / "site"
    mimic.write(site, "needs_libcuda/__init__.py", NEEDS_LIBCUDA)
    expect = {"required": ["imports"], "checks": {"imports": {"modules": ["needs_libcuda:INIT"]}}}
    env = {"CUDA_HOME": str(cuda), "LD_LIBRARY_PATH": "/nonexistent"}

    rc, report, _ = run_suite(sys.executable, expect, tmp_path, pythonpath=[site], env=env)
    assert rc == 0, json.dumps(report, indent=1)
    assert report["driver"]["stub"] == str(cuda / "lib64/stubs/libcuda.so")
    assert report["driver"]["note"].endswith("as libcuda.so.1 (LD_LIBRARY_PATH of the probes only)")
    (row,) = report["checks"][0]["details"]["imports"]
    assert row["libcuda_loaded"] == [str(cuda / "lib64/stubs/libcuda.so")]  # the stub, mapped into the probe

    rc, report, _ = run_suite(sys.executable, {**expect, "driver_stub": "never"}, tmp_path, pythonpath=[site], env=env)
    assert rc == 0  # the failure to load libcuda is a device matter: deferred to the GPU tier
    (imports,) = report["checks"]
    assert (imports["status"], imports["deferred"]) == ("skipped", "gpu")
    assert "libcuda.so.1: cannot open shared object file" in imports["summary"]


RANK_ENV = """
import os
# MIMIC module: reports the rendezvous environment the launcher gave its rank
__version__ = "/".join(os.environ.get(k, "-") for k in (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS"))
"""


def test_rank_launcher_starts_two_processes_and_ends_them_on_timeout(tmp_path: Path) -> None:
    """The suite's own launcher of ranks (prober.probe_ranks), real processes, with a MIMIC module as the probe's
    subject: each rank gets its own RANK/LOCAL_RANK, one localhost rendezvous, and NVLink multicast off."""
    sys.path.insert(0, str(ROOT))
    try:
        from smoke.driver import Driver
        from smoke.prober import SubprocessProber
    finally:
        sys.path.pop(0)
    site = tmp_path / "site"
    mimic.write(site, "rankenv/__init__.py", RANK_ENV)
    mimic.write(site, "hangs/__init__.py", "import time\nwhile True:\n    time.sleep(1)\n")
    drv = Driver(device=True, stub=None, stub_dir=None, mode="never", note="test")
    prober = SubprocessProber(python=sys.executable, python_path=[str(site)], driver=drv, timeout=60,
                              base_env={"PATH": os.environ["PATH"], "NCCL_NVLS_ENABLE": "1"}, tmp=str(tmp_path))
    results = prober.probe_ranks("import", {"module": "rankenv"}, ranks=2, timeout=60)
    assert [r.data["version"] for r in results] == ["0/0/2/127.0.0.1/0/1/1", "1/1/2/127.0.0.1/0/1/1"]
    assert all("MASTER_PORT" in r.how for r in results)

    results = prober.probe_ranks("import", {"module": "hangs"}, ranks=2, timeout=2)
    assert [r.timed_out for r in results] == [True, True]
    assert results[1].error_text() == "Timeout: rank 1 of probe import had not answered after 2 s"
