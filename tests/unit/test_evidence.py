"""Smoke evidence (ship/evidence.py), layer sizes and budgets (ship/sizes.py), the suite hash (smoke/suite.py
and builder/smoke.py), the referrers tag: pure logic over real reports from tests/data/gpu."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import smoke.suite
from buildctl.builder import smoke as host_smoke
from buildctl.errors import ManifestErrors
from buildctl.manifest import pins
from buildctl.registry.registry import referrers_tag
from buildctl.ship import evidence as ev
from buildctl.ship import sizes

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
PROJECT = Path(__file__).resolve().parents[2]
SUBJECT = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
SUITE = "sha256:" + "c" * 64
OLD_SUITE = "sha256:" + "d" * 64


def gpu_report(**over: Any) -> dict[str, Any]:
    """The H200 train report of bert-proxy-1gpu, with what this suite records since (driver, hash, subject)."""
    real = json.loads((DATA / "h200-train" / "attempt2" / "smoke-bert-proxy-1gpu.json").read_text())
    gpu = {**real["driver"]["gpu"], "driver_version": "580.159.04"}
    return {**real, "stack": "demo", "variant": "default", "subject": SUBJECT, "suite_hash": SUITE,
            "driver": {**real["driver"], "gpu": gpu}, **over}


def build_report(**over: Any) -> dict[str, Any]:
    real = json.loads((DATA / "h200-hopper" / "report-build.json").read_text())
    return {**real, "stack": "demo", "variant": "default", "subject": SUBJECT, "suite_hash": SUITE, **over}


def accept(report: dict[str, Any]) -> ev.SmokeEvidence:
    return ev.from_report(report, where="r.json", subject=SUBJECT, suite_hash=SUITE, stack="demo", variant="default",
                          attached_by="buildctl evidence attach")


# ------------------------------------------------------------------------------------------ the schema


def test_a_gpu_report_names_the_gpu_and_driver_and_round_trips_through_the_payload() -> None:
    e = accept(gpu_report())
    assert (e.tier, e.ok, e.gpu) == ("gpu", True, ev.Gpu(name="NVIDIA H200", driver="580.159.04", capability="9.0",
                                                           count=1))
    assert e.annotations() == {ev.TIER_ANNOTATION: "gpu", ev.SUITE_ANNOTATION: SUITE, ev.OK_ANNOTATION: "true",
                               ev.GPU_ANNOTATION: "NVIDIA H200; driver 580.159.04"}
    back = ev.from_payload(e.to_payload(), where="artifact", subject=SUBJECT, artifact=OTHER)
    assert back.to_json() == e.to_json() and back.artifact == OTHER


@pytest.mark.parametrize(("change", "message"), [
    ({"subject": ""}, "names no image"),
    ({"subject": OTHER}, f"is for the image {OTHER}, not for {SUBJECT}"),
    ({"suite_hash": OLD_SUITE}, f"made by another smoke suite ({OLD_SUITE})"),
    ({"suite_hash": None}, "made by another smoke suite (one that records no hash)"),
    ({"stack": "verl"}, "stack: the report is for 'verl', the image is 'demo'"),
    ({"schema": 2}, "not a smoke report of schema 1"),
    ({"tier": "cpu"}, "tier: expected build or gpu"),
    ({"started": "yesterday"}, "started: expected a UTC time"),
    ({"ok": False}, "its verdict (ok=False) contradicts its checks"),
    ({"checks": [{"name": "train", "status": "maybe", "required": True, "deferred": None}]}, "checks[0]: not a check"),
])
def test_a_report_that_is_not_evidence_for_this_image_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ev.EvidenceRefused, match=r"^r\.json: ") as got:
        accept(gpu_report(**change))
    assert message in got.value.what


@pytest.mark.parametrize(("gpu", "message"), [
    ({"available": False}, "saw no GPU"),
    ({"name": "H200\n\x1b[31m"}, "driver.gpu.name"),
    ({"driver_version": None}, "driver.gpu.driver_version"),
    ({"driver_version": "580; rm -rf /"}, "driver.gpu.driver_version"),
    ({"capability": "sm90"}, "driver.gpu.capability"),
    ({"count": True}, "driver.gpu.count"),
])
def test_a_gpu_tier_report_must_name_a_gpu_model_and_driver(gpu: dict[str, Any], message: str) -> None:
    report = gpu_report()
    report["driver"]["gpu"].update(gpu)
    with pytest.raises(ev.EvidenceRefused, match=message):
        accept(report)


def test_a_failed_report_is_evidence_of_failure() -> None:
    real = json.loads((DATA / "h200-hopper" / "report-gpu.json").read_text())  # cudnn failed on the H200
    real["driver"]["gpu"]["driver_version"] = "580.159.04"
    e = accept({**real, "stack": "demo", "variant": "default", "subject": SUBJECT, "suite_hash": SUITE})
    assert not e.ok and e.failed == ("cudnn",)


def test_a_payload_naming_another_subject_or_not_made_by_buildctl_is_refused() -> None:
    payload = accept(gpu_report()).to_payload()
    with pytest.raises(ev.EvidenceRefused, match="not the image it is attached to"):
        ev.from_payload(payload, where="a", subject=OTHER)
    doc = json.loads(payload)
    with pytest.raises(ev.EvidenceRefused, match="attached_by"):
        ev.from_payload(json.dumps({**doc, "attached_by": "me"}).encode(), where="a", subject=SUBJECT)
    with pytest.raises(ev.EvidenceRefused, match="contradict"):
        ev.from_payload(json.dumps({**doc, "ok": False}).encode(), where="a", subject=SUBJECT)
    with pytest.raises(ev.EvidenceRefused, match="not JSON"):
        ev.from_payload(b"{", where="a", subject=SUBJECT)


def test_carried_evidence_names_the_tested_image_and_reads_back_for_the_final_one() -> None:
    gate = ev.from_report(build_report(), where="gate", subject=SUBJECT, suite_hash=SUITE, stack="demo",
                          variant="default", attached_by="smoke gate")
    final = ev.carried(gate, subject=OTHER, tested=f"reg/demo/assemble@{SUBJECT}")
    back = ev.from_payload(final.to_payload(), where="a", subject=OTHER)
    assert (back.subject, back.tested, back.attached_by) == (OTHER, f"reg/demo/assemble@{SUBJECT}", "buildctl push")
    assert (back.ok, back.failed) == (False, ("versions", "cudnn", "attention"))  # the H200 build tier's verdict


# ------------------------------------------------------------------------------------------ deciding


def evidence(tier: ev.Tier, *, suite: str = SUITE, ok: bool = True, started: str = "2026-12-02T04:00:00Z",
             gpu: ev.Gpu | None = None) -> ev.SmokeEvidence:
    return ev.SmokeEvidence(tier=tier, subject=SUBJECT, suite_hash=suite, ok=ok, stack="demo", variant="default",
                            started=started, attached_by="buildctl push", gpu=gpu, failed=() if ok else ("imports",),
                            artifact=f"art-{tier}-{started}")


H200 = ev.Gpu(name="NVIDIA H200", driver="580.159.04")


def test_promotion_needs_build_and_gpu_evidence_of_this_suite_or_a_waiver() -> None:
    build, gpu = evidence("build"), evidence("gpu", gpu=H200)
    assert ev.decide([build, gpu], subject=SUBJECT, suite_hash=SUITE, gpu_waiver=None).ok
    missing = ev.decide([build], subject=SUBJECT, suite_hash=SUITE, gpu_waiver=None)
    assert not missing.ok and missing.reason.startswith(f"no gpu-tier smoke evidence in the registry for {SUBJECT}")
    waived = ev.decide([build], subject=SUBJECT, suite_hash=SUITE, gpu_waiver="no GPU code")
    assert waived.ok and waived.notes == ("GPU tier waived by the manifest: no GPU code",)
    assert ev.decide([], subject=SUBJECT, suite_hash=SUITE, gpu_waiver="x").reason.startswith("no build-tier")


def test_evidence_of_another_suite_is_set_aside_and_the_newest_of_this_suite_decides() -> None:
    old = ev.decide([evidence("build", suite=OLD_SUITE)], subject=SUBJECT, suite_hash=SUITE, gpu_waiver="x")
    assert not old.ok and "made by another smoke suite (sha256:ddddddddddd" in old.reason
    later_failed = [evidence("build"), evidence("build", ok=False, started="2026-12-03T00:00:00Z")]
    d = ev.decide(later_failed, subject=SUBJECT, suite_hash=SUITE, gpu_waiver="x")
    assert not d.ok and "says the suite failed: imports" in d.reason
    fixed = [*later_failed, evidence("build", started="2026-12-04T00:00:00Z")]
    assert ev.decide(fixed, subject=SUBJECT, suite_hash=SUITE, gpu_waiver="x").ok


def test_reuse_needs_the_same_suite_tier_and_gpu() -> None:
    found = [evidence("build"), evidence("gpu", gpu=H200)]
    assert ev.reusable(found, tier="build", suite_hash=SUITE) == found[0]
    assert ev.reusable(found, tier="build", suite_hash=OLD_SUITE) is None
    assert ev.reusable(found, tier="gpu", suite_hash=SUITE, gpu=H200) == found[1]
    assert ev.reusable(found, tier="gpu", suite_hash=SUITE, gpu=ev.Gpu(name="NVIDIA H200", driver="590.1")) is None
    assert ev.reusable([evidence("build", ok=False)], tier="build", suite_hash=SUITE) is None


def test_the_referrers_tag_is_derived_from_the_digest() -> None:
    assert referrers_tag(SUBJECT) == "sha256-" + "a" * 64
    with pytest.raises(ValueError, match="not a sha256 digest"):
        referrers_tag("sha256:../../x")


# ------------------------------------------------------------------------------------------ sizes


def layer(n: int, size: int) -> sizes.Layer:
    return sizes.Layer(digest=f"sha256:{n:064x}", size=size, diff_id=f"sha256:{n + 1000:064x}")


def test_layers_added_or_rewritten_count_shared_and_same_do_not() -> None:
    old = [layer(1, 100), layer(2, 200), layer(3, 300)]
    new = [layer(1, 100), layer(3, 300), layer(4, 40), layer(5, 5)]
    delta = sizes.layer_delta(new, old)
    assert [(c.status, c.new_bytes) for c in delta] == [("same", 0), ("shared", 0), ("rewritten", 40), ("added", 5)]
    image = sizes.RemoteImage(repository="r/x", digest=SUBJECT, config=OTHER, layers=tuple(new))
    promoted = sizes.RemoteImage(repository="r/x", digest=OTHER, config=OTHER, layers=tuple(old))
    at = sizes.size_report(image, promoted, against_tag="r/x:v-nightly", budget=45, fail=True)
    assert (at.new_bytes, at.total, at.over) == (45, 445, False)
    over = sizes.size_report(image, promoted, against_tag="r/x:v-nightly", budget=44, fail=True)
    assert over.over and "OVER the budget of 44 bytes by 1" in over.summary()
    first = sizes.size_report(image, None, against_tag="r/x:v-nightly", budget=1, fail=True)
    assert first.new_bytes == 445 and not first.over and "no image under r/x:v-nightly yet" in first.summary()
    assert sizes.begins_with(image, sizes.RemoteImage(repository="r/x", digest=OTHER, config=OTHER,
                                                      layers=(layer(1, 100), layer(3, 300))))
    assert not sizes.begins_with(image, promoted)


def test_a_budget_is_validated_at_load_with_file_line_and_key(tmp_path: Path) -> None:
    text = (PROJECT / "pins" / "demo.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(text.replace("\npush:\n", "\nbudget: {bytes: 500000, fail: true}\npush:\n"))
    m = pins.load(path)
    assert m.budget is not None and (m.budget.bytes, m.budget.fail) == (500_000, True)
    for bad, message in (("{bytes: -5}", "budget.bytes: must be more than 0"),
                         ("{bytes: lots}", "budget.bytes: expected an integer"),
                         ("{byts: 5}", "budget.byts: unknown key")):
        path.write_text(text.replace("\npush:\n", f"\nbudget: {bad}\npush:\n"))
        with pytest.raises(ManifestErrors) as got:
            pins.load(path)
        line = text[:text.index("\npush:\n")].count("\n") + 2
        assert f"{path}:{line}:" in str(got.value) and message in str(got.value)


# ------------------------------------------------------------------------------------------ the suite


def test_the_suite_hashes_itself_as_buildctl_hashes_what_it_copies() -> None:
    assert smoke.suite.suite_hash() == host_smoke.suite_hash()
    assert host_smoke.suite_hash().startswith("sha256:") and len(host_smoke.suite_hash()) == 71


def test_a_change_to_one_file_of_the_suite_changes_its_hash(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "__main__.py").write_text("x = 1\n")
    (tmp_path / "checks" / "a.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not code")
    before = smoke.suite.suite_hash(str(tmp_path))
    assert before == host_smoke.suite_hash(tmp_path)
    (tmp_path / "notes.txt").write_text("other")
    assert smoke.suite.suite_hash(str(tmp_path)) == before
    (tmp_path / "checks" / "a.py").write_text("y = 3\n")
    assert smoke.suite.suite_hash(str(tmp_path)) != before


@pytest.mark.parametrize(("text", "version"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 2025\nGCC version:  gcc 12\n",
     "580.159.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n",
     "570.86.15"),
    ("something else\n", ""),
])
def test_the_driver_version_is_read_from_the_kernel_module_line(text: str, version: str) -> None:
    assert smoke.suite.driver_version(text) == version


def test_the_suite_is_told_the_registry_digest_of_the_image_it_tests() -> None:
    repo_digests = (f"127.0.0.1:5000/demo/assemble@{SUBJECT}", f"other.example/demo@{OTHER}")
    assert host_smoke.registry_digest("127.0.0.1:5000/demo/assemble:k1", repo_digests) == SUBJECT
    assert host_smoke.registry_digest(f"127.0.0.1:5000/demo@{OTHER}", ()) == OTHER
    assert host_smoke.registry_digest("buildctl-demo-base:bookworm", repo_digests) == ""  # never pushed: none
    two = (f"r.example/x@{SUBJECT}", f"r.example/x@{OTHER}")  # the tag moved since: which one is unknown
    assert host_smoke.registry_digest("r.example/x:latest", two) == ""
