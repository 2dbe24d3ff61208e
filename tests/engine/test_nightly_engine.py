"""`buildctl nightly demo` against the real engine and the test registry.

The project is a copy of pins/demo.yaml pointing at the test registry (tests.engine.test_build's
write_project); the nightly locks it itself (pip and apt resolved inside the demo base), builds, runs the
smoke gate, pushes and moves `nightly`. The second test makes the smoke gate fail and shows that nothing
is pushed and `nightly` does not move; its project leaves out the demo's own apt packages (``light_project``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.services import target
from tests.engine.test_build import base_env, write_project
from tests.helpers import unique


def _project(registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, apt: bool) -> tuple[Path, str]:
    repository = f"buildctl-test/{unique('n')}"
    root = write_project(tmp_path / "project", registry, repository, apt=apt)
    base_env(monkeypatch, tmp_path / "cache")
    return root, repository


@pytest.fixture
def project(registry: str, registry_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The whole demo stack, its apt packages included (the nightly resolves them inside the base)."""
    return _project(registry, tmp_path, monkeypatch, apt=True)


@pytest.fixture
def light_project(registry: str, registry_base: str, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The demo stack without its own apt packages: for the tests whose subject is the gate or promotion."""
    return _project(registry, tmp_path, monkeypatch, apt=False)


def _cleanup_built(root: Path, image_cleanup: Any, *, skip_smoke: bool = False) -> None:
    t = target.load(root, load_config(), "demo", None, skip_smoke=skip_smoke)
    for n in t.graph.nodes:
        if n.kind != "base":
            image_cleanup(t.refs[n.name])


def test_nightly_locks_builds_pushes_and_moves_nightly_after_smoke(
        project: tuple[Path, str], engine: Engine, registry: str, image_cleanup: Any, tmp_path: Path) -> None:
    root, repository = project
    reports = tmp_path / "reports"
    code = cli.main(["--project", str(root), "-q", "nightly", "demo", "--report-dir", str(reports), "--json"])
    assert (root / "pins" / "demo.lock.json").is_file()  # locked by the nightly itself
    _cleanup_built(root, image_cleanup)
    data = json.loads((reports / "latest.json").read_text())
    run = data["runs"][0]
    assert code == 0, json.dumps(run["stages"], indent=1)
    assert [(s["stage"], s["status"]) for s in run["stages"]] == [
        ("lock", "ok"), ("build", "ok"), ("push", "ok"), ("promote", "ok")]
    assert run["build"]["smoke"] == "passed"
    public = f"{registry}/{repository}"
    lock_hash = run["lock"]["hash"]
    pushed = run["push"]["pushed"]
    immutable = f"{public}:demo-default-{lock_hash[:16]}"
    assert immutable in pushed
    assert any(ref.startswith(f"{public}:nightly-") for ref in pushed)
    assert f"{public}:nightly" in run["push"]["promoted"]
    # the moving tag points at exactly the image the immutable tag names, as the registry says
    assert engine.registry_digest(f"{public}:nightly") == engine.registry_digest(immutable) == pushed[immutable]
    for ref in (*pushed, *run["push"]["promoted"]):
        image_cleanup(ref)
    page = (reports / "latest.md").read_text()
    assert "# Nightly" in page and "all green" in page and f"moved `{public}:nightly`" in page

    # a second nightly with nothing changed: lock current, nothing built, same keys as last night
    code = cli.main(["--project", str(root), "-q", "nightly", "demo", "--report-dir", str(reports)])
    again = json.loads((reports / "latest.json").read_text())["runs"][0]
    assert code == 0
    assert again["lock"]["drift"] == [] and again["build"]["built"] == []
    assert again["since_previous"] == ["nothing: every node key is the same as last night"]


def test_nightly_does_not_move_when_the_smoke_gate_fails(
        light_project: tuple[Path, str], engine: Engine, registry: str, image_cleanup: Any, tmp_path: Path) -> None:
    root, repository = light_project
    manifest = root / "pins" / "demo.yaml"
    # the demo image has no DeepEP: requiring the hybridep check must stop the build at the gate
    text = manifest.read_text()
    required = "required: [versions, protected, imports, requirements]"
    assert required in text, "the demo's smoke.required changed: update this test's edit"  # a no-op edit passed unseen
    manifest.write_text(text.replace(required, "required: [versions, protected, imports, requirements, hybridep]"))
    reports = tmp_path / "reports"
    code = cli.main(["--project", str(root), "-q", "nightly", "demo", "--report-dir", str(reports)])
    _cleanup_built(root, image_cleanup)
    run = json.loads((reports / "latest.json").read_text())["runs"][0]
    assert code == 1
    stages = {s["stage"]: s for s in run["stages"]}
    assert stages["build"]["status"] == "failed" and "hybridep" in stages["build"]["summary"]
    assert stages["push"]["status"] == "skipped" and stages["promote"]["status"] == "skipped"
    assert engine.registry_digest(f"{registry}/{repository}:nightly") is None
    assert "**build failed**" in (reports / "latest.md").read_text()
