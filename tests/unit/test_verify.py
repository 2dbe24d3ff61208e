"""verify.py: contract checks, the probe's parsing, records and changes, the whole flow on a data fake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildctl.errors import UnreachableError, UsageError
from buildctl.lock.lockfile import LockedBase, VariantLock
from buildctl.manifest.model import BaseContract, Variant
from buildctl.ship import verify
from tests.unit.fakes_ship import FakeEngine, Image, Run

REF = "127.0.0.1:5999/buildctl/demo-base:bookworm"
NAME = "127.0.0.1:5999/buildctl/demo-base"
OLD = "sha256:" + "0" * 64
NEW = "sha256:" + "f" * 64
VARIANT = Variant(name="bookworm", image=REF, platform="linux/amd64", cuda="0", python="3.11")
CONTRACT = BaseContract(env={"PYTHON_VERSION": "3.11"}, env_prefix={"DEMO_BASE_VERSION": "bookworm-"},
                        env_present=("PIP_CONSTRAINT",), python="3.11")
ENV = {"PYTHON_VERSION": "3.11", "DEMO_BASE_VERSION": "bookworm-1", "PIP_CONSTRAINT": "/etc/pip/c.txt"}
PROBE_NO_TORCH = json.dumps({"python": "3.11.2", "errors": {"torch": "ModuleNotFoundError: No module named 'torch'",
                                                           "nvcc": "CUDA_HOME is not set"}})


def lock(digest: str) -> VariantLock:
    return VariantLock(base=LockedBase(ref=REF, digest=digest, platform="linux/amd64"))


def fake(digest: str = OLD, env: dict[str, str] | None = None, probe: str = PROBE_NO_TORCH,
         platform: str = "linux/amd64") -> FakeEngine:
    image = Image(env=ENV if env is None else env, platform=platform, repo_digests=(f"{NAME}@{digest}",),
                  labels={"org.opencontainers.image.title": "demo"})
    return FakeEngine(images={f"{NAME}@{digest}": image}, registry={REF: digest},
                      run_result=Run(stdout="noise\n" + probe + "\n"))


def run(engine: FakeEngine, tmp_path: Path, locked: str | None = OLD, *, when: str = "2026-01-01T00:00:00Z",
        contract: BaseContract = CONTRACT) -> verify.VerifyResult:
    return verify.verify(alias="demo-base", stack="demo", variant=VARIANT, contract=contract,
                         lock=lock(locked) if locked else None, engine=engine, mirrors={},
                         store=verify.BaseRecords(tmp_path), clock=lambda: when)


@pytest.mark.parametrize(("want", "have", "ok"), [
    ("9.14", "9.14.0", True), ("9.1", "9.14.0", False), ("2.9", "2.9.0a0+git1234", True),
    ("2.9.0", "2.9.0a0+git1234", True), ("13.0", "13.0", True), ("13", "12.9", False), ("3.11", "3.1", False),
    ("12.3", "12.30.1", False),
])
def test_version_matches_component_wise(want: str, have: str, ok: bool) -> None:
    assert verify.version_matches(want, have) is ok


def test_the_demo_base_passes_as_locked_and_records_its_config(tmp_path: Path) -> None:
    eng = fake()
    result = run(eng, tmp_path)
    assert result.ok, verify.render(result)
    assert not [c for c in eng.calls if c[0] == "pull"]  # the engine had it: RepoDigests name the digest
    run_call = next(c for c in eng.calls if c[0] == "run")
    assert run_call[1][0] == f"{NAME}@{OLD}" and run_call[1][1][:2] == ("python3", "-c") and run_call[1][2] == "none"
    record = verify.BaseRecords(tmp_path).get(OLD)
    assert record is not None and record.env == ENV and record.probe is not None and record.probe.python == "3.11.2"
    assert result.changes == () and result.baseline == OLD


def test_render_is_exact(tmp_path: Path) -> None:
    assert verify.render(run(fake(), tmp_path)) == (
        f"verify demo-base (demo/bookworm): {REF}\n"
        f"  ok    digest                 {OLD}: as locked\n"
        "  ok    platform               linux/amd64\n"
        "  ok    env PYTHON_VERSION     3.11\n"
        "  ok    env DEMO_BASE_VERSION  bookworm-1 (expected bookworm-*)\n"
        "  ok    env PIP_CONSTRAINT     /etc/pip/c.txt\n"
        "  ok    python                 3.11.2 (expected 3.11*)\n"
        "  info  torch                  (none): not required by the contract; ModuleNotFoundError: No module named 'torch'\n"
        "  info  torch.version.cuda     (none): not required by the contract; ModuleNotFoundError: No module named 'torch'\n"
        "  info  cuDNN (torch)          (none): not required by the contract; ModuleNotFoundError: No module named 'torch'\n"
        "  info  nvcc                   (missing): not required by the contract\n"
        f"changes against the locked base ({OLD}): none\n"
        "result: ok\n")


def test_a_moved_tag_fails_naming_both_digests_and_shows_what_changed(tmp_path: Path) -> None:
    run(fake(OLD), tmp_path, when="2026-01-01T00:00:00Z")  # the verify while the lock was current
    moved = fake(NEW, env={**ENV, "DEMO_BASE_VERSION": "bookworm-2", "EXTRA": "1"})
    result = run(moved, tmp_path, locked=OLD, when="2026-01-02T00:00:00Z")
    assert not result.ok
    [digest] = [c for c in result.failures if c.name == "digest"]
    assert (digest.expected, digest.actual) == (OLD, NEW)
    text = verify.render(result)
    assert f"expected {OLD}, got {NEW}" in text
    assert result.changes == (
        verify.BaseChange(kind="env", key="DEMO_BASE_VERSION", old="bookworm-1", new="bookworm-2"),
        verify.BaseChange(kind="env", key="EXTRA", old=None, new="1"))
    assert "  env DEMO_BASE_VERSION: bookworm-1 -> bookworm-2\n  env EXTRA: (unset) -> 1\n" in text
    assert text.endswith("result: FAILED (1 check: digest)\n")


def test_a_moved_tag_without_a_kept_record_says_so(tmp_path: Path) -> None:
    result = run(fake(NEW), tmp_path, locked=OLD)
    assert result.changes is None and "no record of the locked base" in verify.render(result)


def test_without_a_lock_changes_are_measured_against_the_last_verified_digest(tmp_path: Path) -> None:
    run(fake(OLD), tmp_path, locked=None, when="2026-01-01T00:00:00Z")
    result = run(fake(NEW, env={**ENV, "PYTHON_VERSION": "3.12"}), tmp_path, locked=None, when="2026-01-02T00:00:00Z")
    assert result.baseline == OLD
    assert [c.key for c in result.changes or ()] == ["PYTHON_VERSION"]
    assert [c.name for c in result.failures] == ["env PYTHON_VERSION"]


def test_every_contract_miss_is_reported_not_raised(tmp_path: Path) -> None:
    contract = BaseContract(env={"CUDA_HOME": "/usr/local/cuda"}, env_prefix={"CUDA_VERSION": "13."},
                            env_present=("NVIDIA_PYTORCH_VERSION",), python="3.12", torch="2.9", torch_cuda="13.0",
                            cudnn="9.14", nvcc=True)
    result = run(fake(), tmp_path, contract=contract)
    assert [c.name for c in result.failures] == [
        "env CUDA_HOME", "env CUDA_VERSION", "env NVIDIA_PYTORCH_VERSION", "python", "torch",
        "torch.version.cuda", "cuDNN (torch)", "nvcc"]
    torch = next(c for c in result.checks if c.name == "torch")
    assert torch.note == "ModuleNotFoundError: No module named 'torch'"


def test_an_ngc_like_probe_meets_an_ngc_contract() -> None:
    contract = BaseContract(python="3.12", torch="2.9", torch_cuda="13.0", cudnn="9.14", nvcc=True)
    probe = verify.BaseProbe(python="3.12.3", torch="2.9.0a0+50eac811a6.nv25.09", torch_cuda="13.0",
                             cudnn="9.14.0", cuda_home="/usr/local/cuda", nvcc="/usr/local/cuda/bin/nvcc")
    assert [c.status for c in verify.check_probe(contract, probe)] == ["ok"] * 5


def test_a_foreign_platform_skips_the_probe_and_says_why(tmp_path: Path) -> None:
    variant_arm = Variant(name="bookworm", image=REF, platform="linux/arm64", cuda="0")
    eng = fake(platform="linux/arm64")
    result = verify.verify(alias="demo-base", stack="demo", variant=variant_arm, contract=CONTRACT, lock=lock(OLD),
                           engine=eng, mirrors={}, store=verify.BaseRecords(tmp_path))
    assert result.ok
    assert not [c for c in eng.calls if c[0] == "run"]
    assert {c.status for c in result.checks if c.name in ("python", "torch", "nvcc")} == {"skip"}
    assert "emulation" in next(c for c in result.checks if c.name == "python").note


def test_a_missing_image_is_pulled_by_digest_for_the_variant_platform(tmp_path: Path) -> None:
    eng = fake()
    del eng.images[f"{NAME}@{OLD}"]
    eng.images[NAME] = Image(env=ENV, repo_digests=(f"{NAME}@{OLD}",))
    run(eng, tmp_path)
    assert ("pull", f"{NAME}@{OLD}") in eng.calls


def test_a_mirror_is_used_for_the_lookup(tmp_path: Path) -> None:
    eng = fake()
    eng.registry = {"mirror.example:5000/buildctl/demo-base:bookworm": OLD}
    eng.images = {f"mirror.example:5000/buildctl/demo-base@{OLD}": Image(env=ENV)}
    result = verify.verify(alias="demo-base", stack="demo", variant=VARIANT, contract=CONTRACT, lock=lock(OLD),
                           engine=eng, mirrors={"127.0.0.1:5999": "mirror.example:5000"},
                           store=verify.BaseRecords(tmp_path))
    assert result.ok and result.checked_ref == "mirror.example:5000/buildctl/demo-base:bookworm"
    assert "(mirror of 127.0.0.1:5999/buildctl/demo-base:bookworm)" in verify.render(result).splitlines()[0]


def test_a_missing_tag_is_a_failure_and_nothing_is_run(tmp_path: Path) -> None:
    eng = fake()
    eng.registry = {}
    result = run(eng, tmp_path)
    assert [c.name for c in result.failures] == ["digest"] and not [c for c in eng.calls if c[0] == "run"]


def test_an_unreachable_registry_is_a_clear_error(tmp_path: Path) -> None:
    eng = fake()
    eng.registry_error = UnreachableError("registry nvcr.io cannot be reached", why="no such host", fix="")
    with pytest.raises(UnreachableError) as info:
        run(eng, tmp_path)
    assert "cannot verify demo-base (demo/bookworm)" in str(info.value)
    assert "BUILDCTL_REGISTRY_MIRRORS='127.0.0.1:5999=HOST:PORT'" in str(info.value)


@pytest.mark.parametrize(("result", "error"), [
    (Run(exit_code=127, stderr='exec: "python3": executable file not found in $PATH'), "no python3 in the image"),
    (Run(exit_code=1, stderr="Traceback\nSyntaxError: bad"), "the probe exited 1: SyntaxError: bad"),
    (Run(exit_code=137, timed_out=True), "the probe timed out"),
])
def test_a_probe_that_did_not_run_says_why(result: Run, error: str) -> None:
    probe = verify.parse_probe(result)
    assert probe.python is None and error in probe.errors["python"]
    checks = verify.check_probe(BaseContract(python="3.11"), probe)
    assert checks[0].status == "fail" and error in checks[0].note


def _pins(tmp_path: Path, stacks: dict[str, str]) -> Path:
    d = tmp_path / "pins"
    d.mkdir()
    for name, alias in stacks.items():
        (d / f"{name}.yaml").write_text(
            f"stack: {name}\nbase:\n  alias: {alias}\nvariants:\n  v1:\n    image: x/y:1\n"
            "    platform: linux/amd64\n    cuda: '13'\n")
    return d


def test_find_base_prefers_the_default_stack_then_the_only_match(tmp_path: Path) -> None:
    d = _pins(tmp_path, {"big": "nvcr-base", "other": "nvcr-base", "demo": "demo-base"})
    assert verify.find_base(d, "nvcr-base", None, "big")[1].stack == "big"
    assert verify.find_base(d, "demo-base", None, "big")[1].stack == "demo"
    with pytest.raises(UsageError, match="several stacks: big, other"):
        verify.find_base(d, "nvcr-base", None, "demo")
    with pytest.raises(UsageError, match=r"known base aliases: nvcr-base \(big\), demo-base \(demo\)"):
        verify.find_base(d, "nvcr", None, "big")
    with pytest.raises(UsageError, match="the base of stack demo is 'demo-base'"):
        verify.find_base(d, "nvcr-base", "demo", "big")


def test_a_lock_of_another_base_is_a_failure_not_a_comparison(tmp_path: Path) -> None:
    other = VariantLock(base=LockedBase(ref="127.0.0.1:5999/buildctl/other:1", digest=OLD, platform="linux/amd64"))
    result = verify.verify(alias="demo-base", stack="demo", variant=VARIANT, contract=CONTRACT, lock=other,
                           engine=fake(), mirrors={}, store=verify.BaseRecords(tmp_path))
    assert [c.name for c in result.failures] == ["digest"] and result.locked_digest is None
    assert "the lock is of 127.0.0.1:5999/buildctl/other:1" in verify.render(result)
