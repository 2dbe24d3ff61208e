"""The demo stack's git sources: demo/make_sources.py is reproducible, the committed bundles are what it
makes, and buildctl.sources.sources reads them (PR refs included) and prepares trees that build and run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from buildctl.sources.prepare import PrHead
from buildctl.sources.sources import Sources
from tests.helpers import load_script

PROJECT = Path(__file__).resolve().parents[2]
SCRIPT = PROJECT / "demo" / "make_sources.py"


@pytest.fixture(scope="module")
def make_sources() -> ModuleType:
    return load_script("demo_make_sources", SCRIPT)  # (its dataclasses look their module up while it loads)


@pytest.fixture(scope="module")
def demo_heads(make_sources: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    heads: dict[str, dict[str, str]] = make_sources.make(tmp_path_factory.mktemp("demo-sources"))
    return heads


def test_two_runs_write_byte_identical_bundles_equal_to_the_committed_ones(
        make_sources: ModuleType, tmp_path: Path) -> None:
    first, second = make_sources.make(tmp_path / "a"), make_sources.make(tmp_path / "b")
    assert first == second
    for name in ("fastmath", "demo-trainer"):
        made = (tmp_path / "a" / f"{name}.bundle").read_bytes()
        assert made == (tmp_path / "b" / f"{name}.bundle").read_bytes()
        assert made == (PROJECT / "demo" / "sources" / f"{name}.bundle").read_bytes(), (
            f"demo/sources/{name}.bundle is out of date: run python3 demo/make_sources.py and commit it")
    assert set(first["fastmath"]) == {"refs/heads/main", "refs/pull/7/head", "refs/tags/v0.2.0"}
    assert set(first["demo-trainer"]) == {"refs/heads/main", "refs/pull/3/head"}
    assert subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, check=False).returncode == 0


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def test_fastmath_bundle_pr_applies_builds_and_reports_the_tree_sha(
        tmp_path: Path, demo_heads: dict[str, dict[str, str]]) -> None:
    # pins/demo.yaml names the bundle relative to pins/
    s = Sources(cache=tmp_path / "cache", base_dir=PROJECT / "pins")
    repo = "../demo/sources/fastmath.bundle"
    main = s.branch_head(repo, "main")
    assert main == demo_heads["fastmath"]["refs/heads/main"]
    assert s.resolve_commit(repo, main[:7], branch="main") == main
    pr = s.pr_head(repo, 7)
    assert pr == demo_heads["fastmath"]["refs/pull/7/head"]
    assert s.submodules(repo, main) == {}

    prepared = s.prepare(repo, main, prs=[PrHead(number=7, head=pr)])
    assert prepared.tree != main
    src = s.export(prepared, tmp_path / "fastmath")
    build = _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], src)
    assert build.returncode == 0, build.stderr
    probe = _run([sys.executable, "-c", "import json, fastmath; print(json.dumps([fastmath.__version__, "
                  "fastmath.clamp(7.0, 0.0, 1.0), fastmath.scale([1, 2], 3), fastmath.dot([1, 2], [3, 4])]))"], src)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [f"0.2.0+{prepared.short}", 1.0, [3.0, 6.0], 11.0]


def test_demo_trainer_bundle_pr_adds_its_flag(tmp_path: Path, demo_heads: dict[str, dict[str, str]]) -> None:
    s = Sources(cache=tmp_path / "cache", base_dir=PROJECT / "pins")
    repo = "../demo/sources/demo-trainer.bundle"
    main = s.branch_head(repo, "main")
    pr = s.pr_head(repo, 3)
    assert (main, pr) == (demo_heads["demo-trainer"]["refs/heads/main"], demo_heads["demo-trainer"]["refs/pull/3/head"])
    plain = s.export(s.prepare(repo, main), tmp_path / "plain")
    patched = s.export(s.prepare(repo, main, prs=[PrHead(number=3, head=pr)]), tmp_path / "patched")
    args = ["--layers", "2", "--hidden", "64", "--attention-backend", "flash", "--recompute-granularity", "full"]

    before = _run([sys.executable, "train.py", *args], plain)
    assert before.returncode == 2 and "unrecognized arguments: --recompute-granularity full" in before.stderr
    after = _run([sys.executable, "train.py", *args], patched)
    assert after.returncode == 0, after.stderr
    out = json.loads(after.stdout)
    assert out["command"] == ["torchrun", "--nproc-per-node=1", "-m", "demo_trainer.loop", *args]
    assert out["env"] == {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}
    assert out["args"]["recompute_granularity"] == "full" and out["args"]["attention_backend"] == "flash"
    # main's own checks survive the cherry-pick
    bad = _run([sys.executable, "train.py", "--layers", "2", "--hidden", "64", "--pipeline-layout", "Et|tL"], patched)
    assert bad.returncode == 2 and "--pipeline-layout needs --pipeline-parallel 2 or more" in bad.stderr
    choice = _run([sys.executable, "train.py", "--layers", "2", "--hidden", "64", "--precision", "fp4"], patched)
    assert choice.returncode == 2 and "invalid choice: 'fp4'" in choice.stderr
