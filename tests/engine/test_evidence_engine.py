"""Promotion on evidence in the registry, and size budgets: `buildctl nightly demo` and `buildctl evidence` against
the real engine and the test registry (Debian's docker-registry: no referrers API, so the referrers tag).

One project goes through four nightlies, each a step of the story:

1. the demo as it is (GPU tier waived, a size budget of 1 byte that fails): the gate's report goes to the
   registry beside the assembled image and the final one, promotion reads it back and moves `nightly`
   (the first image of a variant is held to no budget);
2. only the launch changes: the gate reuses the assembled image's evidence (the suite does not run) and the
   rewritten entrypoint layer is over the budget, so `nightly` does not move;
3. the GPU tier becomes required (budget reported only): no GPU-tier evidence, `nightly` does not move;
   then a real H200 GPU-tier report (tests/data/gpu/h200-train) goes through `buildctl evidence attach`,
   which refuses it until it names this image's digest and this suite;
4. nothing changes: the GPU-tier evidence is read back and `nightly` moves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.builder import smoke
from buildctl.engine.engine import Engine
from buildctl.registry.registry import RegistryClient, referrers_tag
from tests.engine.test_nightly_engine import _cleanup_built
from tests.engine.test_nightly_engine import light_project as light_project  # the fixture

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu" / "h200-train"


def nightly(root: Path, reports: Path) -> tuple[int, dict[str, Any]]:
    code = cli.main(["--project", str(root), "-q", "nightly", "demo", "--report-dir", str(reports)])
    run: dict[str, Any] = json.loads((reports / "latest.json").read_text())["runs"][0]
    return code, run


def stages(run: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {s["stage"]: (s["status"], s["summary"]) for s in run["stages"]}


def final_of(run: dict[str, Any]) -> tuple[str, str]:
    """(repository@digest, digest) of the final image a nightly pushed, as its promotion check read it (the
    lock-hash and dated tags keep the first image pushed under them)."""
    image: str = run["push"]["checks"][0]["image"]
    return image, image.rpartition("@")[2]


def evidence_cli(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["-q", "evidence", *words])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_promotion_reads_evidence_from_the_registry_and_holds_the_size_budget(
        light_project: tuple[Path, str], engine: Engine, registry: str, image_cleanup: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    root, repository = light_project  # the demo without its own apt packages: the story is promotion's
    public = f"{registry}/{repository}"
    manifest = root / "pins" / "demo.yaml"
    reports = tmp_path / "reports"
    text = manifest.read_text()
    assert "\npush:\n" in text
    manifest.write_text(text.replace("\npush:\n", "\nbudget:\n  bytes: 1\n  fail: true\n\npush:\n"))

    # 1. GPU tier waived: the build-tier evidence in the registry is what promotion needs
    code, run = nightly(root, reports)
    _cleanup_built(root, image_cleanup)
    for ref in run["push"]["pushed"]:
        image_cleanup(ref)
    assert code == 0, json.dumps(run["stages"], indent=1)
    first_ref, first = final_of(run)
    assert engine.registry_digest(f"{public}:nightly") == first
    [check] = run["push"]["checks"]
    assert [u["tier"] for u in check["evidence"]["used"]] == ["build"]
    assert check["evidence"]["notes"] == ["GPU tier waived by the manifest: the demo stack has no GPU code"]
    assert check["sizes"]["against"] == "" and not check["sizes"]["over"]  # nothing promoted before
    code, out = evidence_cli(capsys, "--json", first_ref)
    listing = json.loads(out)
    assert code == 0 and listing["image"] == f"{public}@{first}" and listing["problems"] == []
    [build] = listing["evidence"]
    assert (build["tier"], build["ok"], build["current_suite"], build["attached_by"]) == \
        ("build", True, True, "buildctl push")
    assert build["suite_hash"] == smoke.suite_hash() and build["tested"].startswith(f"{public}/assemble@")
    # the gate told the suite the assembled image's registry digest, so its own report names what it tested
    [gate_report] = (tmp_path / "cache" / "reports" / "smoke" / "demo" / "default").glob("*.build.json")
    assert json.loads(gate_report.read_text())["report"]["subject"] == build["tested"].rpartition("@")[2]
    # Debian's registry has no referrers API: the artifact is listed under the referrers tag of the digest
    got = RegistryClient(registry).manifest(repository, referrers_tag(first))
    assert got is not None
    index = json.loads(got[0])
    smoke_artifacts = [m for m in index["manifests"]  # the nightly's lock archive is listed there too
                       if m["artifactType"] == "application/vnd.buildctl.smoke.evidence.v1+json"]
    assert [m["digest"] for m in smoke_artifacts] == [build["artifact"]]
    assert smoke_artifacts[0]["annotations"]["io.buildctl.smoke.suite"] == smoke.suite_hash()

    # 2. only the launch changes: the assembled image is the same, so its evidence is reused; the new
    #    entrypoint layer is over the 1-byte budget, so nothing moves
    text = manifest.read_text()
    manifest.write_text(text.replace("- --global-batch-size: 16", "- --global-batch-size: 32"))
    code, run = nightly(root, reports)
    _cleanup_built(root, image_cleanup)
    for ref in run["push"]["pushed"]:
        image_cleanup(ref)
    assert code == 1 and run["build"]["built"] == ["entrypoint"]
    smoke_log = (Path(str(tmp_path / "cache")) / "logs" / "demo" / "default" / "smoke.log").read_text()
    assert "reused evidence sha256:" in smoke_log and f"{public}/assemble@sha256:" in smoke_log
    status, summary = stages(run)["promote"]
    assert status == "failed" and "size budget" in summary and "OVER the budget of 1 bytes" in summary
    sizes = run["push"]["checks"][0]["sizes"]
    assert sizes["against"] == f"{public}@{first}" and sizes["over"] and sizes["fail"]
    changed = [x for x in sizes["layers"] if x["status"] != "same"]
    assert changed and all(x["status"] in ("rewritten", "added") for x in changed)
    assert sizes["new_bytes"] == sum(x["size"] for x in changed) > 1
    assert engine.registry_digest(f"{public}:nightly") == first  # not moved
    assert "**OVER BUDGET**" in (reports / "latest.md").read_text()

    # 3. the GPU tier required (budget reported only): the build tier alone does not move `nightly`
    text = manifest.read_text()
    manifest.write_text(text.replace("  gpu_tier: waived\n  gpu_waiver: the demo stack has no GPU code\n", "")
                        .replace("  fail: true\n", "  fail: false\n"))
    code, run = nightly(root, reports)
    _cleanup_built(root, image_cleanup)
    for ref in run["push"]["pushed"]:
        image_cleanup(ref)
    third_ref, third = final_of(run)
    status, summary = stages(run)["promote"]
    assert code == 1 and status == "failed" and f"no gpu-tier smoke evidence in the registry for {third}" in summary
    assert run["push"]["checks"][0]["sizes"]["over"] and "(reported only)" in (reports / "latest.md").read_text()

    # a real GPU-tier report from an H200 (the train check of bert-proxy-1gpu): attach checks what it names
    real = json.loads((DATA / "attempt2" / "smoke-bert-proxy-1gpu.json").read_text())
    assert real["tier"] == "gpu" and real["ok"] and real["driver"]["gpu"]["name"] == "NVIDIA H200"
    readme = (DATA / "README.md").read_text()
    driver = re.search(r"driver (\d+\.\d+\.\d+)", readme)
    assert driver is not None
    # what this suite writes since the run: the driver, the suite hash, the subject (--image-digest)
    adapted = {**real, "stack": "demo", "variant": "default", "suite_hash": smoke.suite_hash(), "subject": third,
               "driver": {**real["driver"], "gpu": {**real["driver"]["gpu"], "driver_version": driver.group(1)}}}
    attempts = {
        "as-recorded": (real, "names no image"),
        "other-image": ({**adapted, "subject": first}, f"is for the image {first}"),
        "other-suite": ({**adapted, "suite_hash": "sha256:" + "0" * 64}, "made by another smoke suite"),
        "no-driver": ({**adapted, "driver": real["driver"]}, "driver.gpu.driver_version"),
        "adapted": (adapted, ""),
    }
    for name, (report, refusal) in attempts.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        code, out = evidence_cli(capsys, "attach", third_ref, str(path))
        if refusal:
            assert code == 15 and refusal in out, (name, out)
        else:
            assert code == 0 and "gpu tier passed on 1x NVIDIA H200, driver 580.159.04" in out, out
    code, out = evidence_cli(capsys, third_ref)
    assert code == 0 and "2 smoke evidence artifact(s)" in out and "gpu tier passed" in out

    # 4. nothing changed: promotion reads the GPU-tier evidence back and moves `nightly`
    code, run = nightly(root, reports)
    assert code == 0, json.dumps(run["stages"], indent=1)
    assert run["build"]["built"] == []
    assert sorted(u["tier"] for u in run["push"]["checks"][0]["evidence"]["used"]) == ["build", "gpu"]
    assert engine.registry_digest(f"{public}:nightly") == third
    for ref in (*run["push"]["pushed"], *run["push"]["promoted"]):
        image_cleanup(ref)
    # `buildctl push --promote` reads the same evidence and moves `latest`
    assert cli.main(["--project", str(root), "-q", "push", "demo", "--promote"]) == 0
    assert engine.registry_digest(f"{public}:latest") == engine.registry_digest(f"{public}:default-latest") == third
    image_cleanup(f"{public}:latest")
    image_cleanup(f"{public}:default-latest")
