"""buildctl.builder.smoke: expectations from manifest + lock, label round trip, report parsing, the runner with a
fake engine, the gate. The real reports used here are the H200 run's (tests/data/gpu/)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from buildctl.builder import smoke
from buildctl.errors import ManifestError, SmokeFailed, UsageError
from buildctl.graph import smoke_expect
from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedPip, VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import SMOKE_CHECKS, GpuTier

ROOT = Path(__file__).resolve().parents[2]
GPU_DATA = ROOT / "tests" / "data" / "gpu"
FASTMATH_TREE = "9" * 40
TRAINER_TREE = "a" * 40


def demo_lock() -> VariantLock:
    return VariantLock(
        base=LockedBase(ref="127.0.0.1:5000/buildctl/demo-base:bookworm", digest="sha256:" + "0" * 64,
                        platform="linux/amd64"),
        apt={"jq": "1.6-2.1", "less": "590-2.1~deb12u2"},
        pip=(LockedPip(name="six", version="1.16.0", hashes=("sha256:" + "1" * 64,)),
             LockedPip(name="tomli", version="2.0.1")),
        components={
            "fastmath": LockedComponent(name="fastmath", repo="r", commit="2ce4723579053c914fae1dee4bc38f8fd4da5557",
                                        tree=FASTMATH_TREE),
            "demo-trainer": LockedComponent(name="demo-trainer", repo="r",
                                            commit="a4bea73b84bdd017517e49ddea57e3ed6685840c", tree=TRAINER_TREE),
        },
    )


def test_expect_for_the_demo_stack() -> None:
    m = pins.load(ROOT / "pins" / "demo.yaml")
    e = smoke_expect.expect_for(m, demo_lock(), m.variant("default"), base_packages={"PyYAML": "6.0", "pip": "23.0.1"})
    assert e.suite_json() == {
        "schema": 1, "stack": "demo", "variant": "default",
        "required": ["versions", "protected", "imports", "requirements"],
        "gpu_tier": "waived", "gpu_waiver": "the demo stack has no GPU code",
        "python_path": ["/opt/demo-trainer"], "driver_stub": "auto",
        "checks": {
            "attention": {"backend": "auto", "source": "--attention-backend auto (demo entrypoint)",
                          "use_flash_attn": False},
            "imports": {"modules": ["fastmath", "six", "tomli", "yaml"]},
            "protected": {"patterns": ["PyYAML"], "replace": [], "base": {"PyYAML": "6.0", "pip": "23.0.1"}},
            "requirements": {"baseline": "/usr/local/lib/buildctl-pip-check-base.txt"},
            "versions": {
                "distributions": [{"name": "six", "version": "1.16.0"}, {"name": "tomli", "version": "2.0.1"}],
                "components": [
                    {"name": "fastmath", "dist": "fastmath", "module": "fastmath", "sha": FASTMATH_TREE},
                    {"name": "demo-trainer", "path": "/opt/demo-trainer", "record": ".buildctl-commit",
                     "sha": TRAINER_TREE},
                ],
            },
        },
    }
    assert (e.python, e.timeout_s) == ("python3", 300.0)


def test_expect_for_deepseek_hopper_without_lock() -> None:
    m = pins.load(ROOT / "pins" / "deepseek-v3-gb200.yaml")
    e = smoke_expect.expect_for(m, None, m.variant("hopper"))
    c = e.checks
    assert c["cudnn"] == {"version": "9.14.0.64", "package": "libcudnn9-cuda-13"}
    assert c["arch"] == {"archs": ["9.0"], "dists": ["transformer_engine", "deep_ep"]}
    # the launch's MoE shape, which the GPU tier's 2-rank round trip scales down (the hopper variant's EP 8)
    assert c["hybridep"] == {"megatron": True, "roundtrip": {
        "hidden_size": 7168, "num_experts": 256, "expert_model_parallel_size": 8, "moe_router_topk": 8,
        "moe_hybridep_num_sms": 32, "seq_length": 4096, "micro_batch_size": 1}}
    # the launch's FP8 recipe, from the baked --fp8-recipe / --fp8-format (the hopper variant's tensorwise)
    assert c["fp8"] == {"recipe": "tensorwise", "format": "e4m3", "archs": ["9.0"],
                        "source": "the deepseek-v3-gb200 hopper launch"}
    assert c["attention"] == {"use_flash_attn": True}  # no --attention-backend: Megatron's default (auto)
    assert c["megatron-args"]["argv0"] == "pretrain_gpt.py"
    args = c["megatron-args"]["args"]
    assert args[args.index("--moe-layer-freq") + 1] == "([0]*3+[1]*58)"
    assert not any("${" in a for a in args)  # site paths expanded to their defaults
    te, deepep, megatron = c["versions"]["components"]
    assert "sha" not in te  # PRs on top: the tree SHA is only known once locked, and the entry says so
    assert te["unlocked"] == ("the manifest pins 70f536662ae1 with cherry-pick d2945c6a571e, cherry-pick dd7ab715a55d, PR #2146, PR #2150 on "
                              "top; the commit of the prepared tree is known only once `buildctl lock` has prepared it")
    assert deepep["sha"] == "3f601f7ac1c062c46502646ff04c535013bfca00" and "unlocked" not in deepep
    assert megatron == {"name": "megatron-lm", "path": "/opt/megatron-lm", "record": ".buildctl-commit",
                        "sha": "effebd81f410bc6566fffee6c320b6f8f762e06d"}
    assert e.python_path == ("/opt/megatron-lm",)


def test_required_check_without_anything_to_check_is_a_manifest_error() -> None:
    m = pins.load(ROOT / "pins" / "demo.yaml")
    bad = replace(m, smoke=replace(m.smoke, required=("versions", "cudnn")))
    with pytest.raises(ManifestError, match=r"smoke\.required lists 'cudnn' but the stack pins no cuDNN"):
        smoke_expect.expect_for(bad, demo_lock(), m.variant("default"))


def test_label_round_trip_plain_and_base64() -> None:
    m = pins.load(ROOT / "pins" / "demo.yaml")
    e = smoke_expect.expect_for(m, demo_lock(), m.variant("default"))
    value = e.label_value()
    assert value == json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))  # canonical
    assert smoke_expect.decode_label(value) == e
    assert smoke_expect.decode_label(base64.b64encode(value.encode()).decode()) == e
    assert e.gpu_tier is GpuTier.WAIVED
    with pytest.raises(UsageError, match="schema 2 is not supported"):
        smoke_expect.decode_label(json.dumps({"schema": 2}))
    with pytest.raises(UsageError, match="neither JSON nor base64 JSON"):
        smoke_expect.decode_label("not json at all")


# ------------------------------------------------------------------------------------------- reports


def real(name: str) -> str:
    return (GPU_DATA / name).read_text()


def test_parse_the_h200_gpu_report() -> None:
    r = smoke.parse_report(real("report-gpu.json"), image="h200", image_id="sha256:" + "f" * 64, exit_code=1)
    by = {c.name: c for c in r.checks}
    assert by["mxfp8"].status == "unsupported"
    assert by["mxfp8"].satisfied
    assert by["mxfp8"].summary.endswith("Device compute capability 10.0 or higher required for MXFP8 execution.")
    assert by["attention"].details["allowed"] == {"flash": False, "fused": True, "unfused": True}
    assert by["attention"].details["selected"] == "FusedAttention (sub-backend 1)"
    assert (by["protected"].status, by["protected"].deferred) == ("skipped", "build")
    assert [c.name for c in r.failed] == ["cudnn"]
    assert r.summary() == "gpu tier FAILED: cudnn"
    with pytest.raises(SmokeFailed, match="contradicts its checks"):
        smoke.parse_report(real("report-gpu.json"), image="h200", image_id="x", exit_code=0)


def test_parse_rejects_what_is_not_a_report() -> None:
    with pytest.raises(SmokeFailed, match="its output is not JSON") as e:
        smoke.parse_report("Traceback (most recent call last):\n", image="img", image_id="x", exit_code=1)
    assert "output began: Traceback (most recent call last):" in str(e.value)
    with pytest.raises(SmokeFailed, match="not a smoke report of schema 1"):
        smoke.parse_report('{"schema": 9}', image="img", image_id="x", exit_code=1)


def outcome(name: str, status: str, *, required: bool = True, deferred: str | None = None) -> smoke.CheckOutcome:
    return smoke.CheckOutcome(name=name, status=status, summary=f"{name} is {status}", required=required,  # type: ignore[arg-type]
                              deferred=deferred, duration_s=0.25)  # type: ignore[arg-type]


def test_render_junit_exact() -> None:
    r = smoke.SmokeReport(tier="build", ok=False, image="demo:1", image_id="sha256:ab", stack="demo", variant="default",
                          checks=(outcome("versions", "pass"), outcome("imports", "fail"),
                                  outcome("mxfp8", "skipped", deferred="gpu"), outcome("arch", "fail", required=False)),
                          duration_s=1.5)
    assert smoke.render_junit(r) == """<?xml version="1.0" encoding="utf-8"?>
<testsuite name="buildctl.smoke.build" tests="4" failures="1" errors="0" skipped="2" time="1.500">
  <properties>
    <property name="image" value="demo:1" />
  </properties>
  <testcase classname="smoke.build" name="versions" time="0.250" />
  <testcase classname="smoke.build" name="imports" time="0.250">
    <failure message="fail: imports is fail" />
  </testcase>
  <testcase classname="smoke.build" name="mxfp8" time="0.250">
    <skipped message="skipped: mxfp8 is skipped" />
  </testcase>
  <testcase classname="smoke.build" name="arch" time="0.250">
    <skipped message="fail (not required): arch is fail" />
  </testcase>
</testsuite>
"""


def test_gate_lists_failing_required_checks() -> None:
    ok = smoke.SmokeReport(tier="build", ok=True, image="i", image_id="x", stack="s", variant="v",
                           checks=(outcome("versions", "pass"), outcome("mxfp8", "unsupported")))
    smoke.gate(ok)
    bad = replace(ok, ok=False, checks=(outcome("versions", "fail"), outcome("hybridep", "skipped"),
                                        outcome("arch", "fail", required=False)))
    with pytest.raises(SmokeFailed) as e:
        smoke.gate(bad)
    assert e.value.what == "smoke build tier failed on i: versions, hybridep"
    assert "hybridep: skipped: hybridep is skipped" in e.value.why
    assert "arch" not in e.value.why


# ------------------------------------------------------------------------------ runner with a fake engine


@dataclass(frozen=True)
class FakeImage:
    id: str
    labels: Mapping[str, str]
    repo_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class FakeRun:
    exit_code: int
    stdout: str
    stderr: str = ""
    timed_out: bool = False


@dataclass
class FakeEngine:
    """Answers inspect_image from ``labels`` and run() with ``answer``, recording each run."""

    answer: FakeRun
    labels: dict[str, str] = field(default_factory=dict)
    runs: list[dict[str, object]] = field(default_factory=list)

    def inspect_image(self, ref: str) -> FakeImage:
        return FakeImage(id="sha256:" + "c" * 64, labels=self.labels)

    def run(self, image: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            files: Mapping[str, bytes] | None = None, workdir: str | None = None, gpus: bool = False,
            timeout: float) -> FakeRun:
        self.runs.append({"image": image, "command": list(command), "files": dict(files or {}), "workdir": workdir,
                          "gpus": gpus, "timeout": timeout, "env": dict(env or {})})
        return self.answer


def expectation() -> smoke_expect.Expectation:
    m = pins.load(ROOT / "pins" / "demo.yaml")
    return smoke_expect.expect_for(m, demo_lock(), m.variant("default"))


def test_run_smoke_copies_the_suite_and_saves_the_report(tmp_path: Path) -> None:
    eng = FakeEngine(answer=FakeRun(exit_code=1, stdout=real("report-gpu.json"), stderr="probe noise\n"),
                     labels={smoke_expect.EXPECT_LABEL: expectation().label_value(), smoke_expect.PYTHON_LABEL: "python3.12"})
    r = smoke.run_smoke(eng, "img:1", None, gpus=True, report_dir=tmp_path)
    (call,) = eng.runs
    assert call["command"] == ["python3.12", "-m", "smoke", "--expect", "/tmp/buildctl-smoke/expect.json",
                               "--tier", "gpu"]
    assert (call["gpus"], call["workdir"], call["timeout"]) == (True, "/tmp/buildctl-smoke", 300.0)
    files = call["files"]
    assert isinstance(files, dict)
    assert "/tmp/buildctl-smoke/smoke/__main__.py" in files
    assert "/tmp/buildctl-smoke/smoke/checks/mxfp8.py" in files
    sent = json.loads(files["/tmp/buildctl-smoke/expect.json"])
    assert sent["stack"] == "demo" and "runner" not in sent
    assert r.report_path == tmp_path / "cccccccccccc.gpu.json"
    assert r.junit_path is not None and r.junit_path.read_text().startswith("<?xml")
    assert (tmp_path / "cccccccccccc.gpu.log").read_text().count("probe noise") == 1
    again = smoke.recorded(tmp_path, "sha256:" + "c" * 64, "gpu")
    assert again is not None and again.checks == r.checks and again.report_path == r.report_path
    assert smoke.recorded(tmp_path, "sha256:" + "c" * 64, "build") is None


def test_run_smoke_timeout_and_missing_interpreter(tmp_path: Path) -> None:
    eng = FakeEngine(answer=FakeRun(exit_code=137, stdout="", timed_out=True))
    with pytest.raises(SmokeFailed, match="ran past 5 s and was stopped"):
        smoke.run_smoke(eng, "img:1", expectation(), timeout=5, report_dir=tmp_path)
    eng = FakeEngine(answer=FakeRun(exit_code=127, stdout="", stderr="exec: python3: not found\n"))
    with pytest.raises(SmokeFailed) as e:
        smoke.run_smoke(eng, "img:1", expectation(), report_dir=tmp_path)
    assert e.value.what == "the smoke suite did not run in img:1: `python3 -m smoke` exited 127"
    assert e.value.why == "exec: python3: not found"


def test_image_without_expectation_label(tmp_path: Path) -> None:
    eng = FakeEngine(answer=FakeRun(exit_code=0, stdout=""))
    with pytest.raises(UsageError, match=r"carries no io\.buildctl\.smoke\.expect label"):
        smoke.run_smoke(eng, "img:1", None, report_dir=tmp_path)
    assert eng.runs == []


def test_build_gate_writes_its_log_and_raises(tmp_path: Path) -> None:
    eng = FakeEngine(answer=FakeRun(exit_code=1, stdout=real("report-build.json")),
                     labels={smoke_expect.EXPECT_LABEL: expectation().label_value()})
    gate = smoke.BuildGate(report_dir=tmp_path / "reports")
    with pytest.raises(SmokeFailed, match="smoke build tier failed on img:1: cudnn"):
        gate(eng, "img:1", log_file=tmp_path / "smoke.log")
    log = (tmp_path / "smoke.log").read_text()
    assert log.startswith("build tier FAILED: cudnn\n")
    assert "nvidia-cudnn-cu13 9.19.0.56 is installed besides libcudnn9-cuda-13 9.14.0.64-1" in log


@pytest.mark.parametrize("stack", ["demo", "deepseek-v3-gb200", "megatron-bert", "verl-vllm"])
def test_every_manifests_expectation_is_read_by_the_suite(stack: str) -> None:
    """What buildctl writes (expect.json, and the label with its runner part) is what smoke/ reads."""
    from smoke.expect import Section, parse

    m = pins.load(ROOT / "pins" / f"{stack}.yaml")
    for v in m.variants:
        e = smoke_expect.expect_for(m, None, v)
        for data in (e.suite_json(), json.loads(e.label_value())):
            read = parse(data)
            assert read.required == e.required
            assert read.selected == tuple(n for n in SMOKE_CHECKS if n in e.required or n in e.checks)
            for name in read.selected:
                sec = Section(name, read.section(name))
                assert sec.data == e.checks.get(name, {})
