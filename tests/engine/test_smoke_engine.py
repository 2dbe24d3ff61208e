"""The smoke suite in real containers of the demo base image (python3.11, PyYAML, pip), through the engine.

Nothing here installs a package named after Transformer Engine, DeepEP or Megatron-LM: the hybridep
check fails in these containers with the ImportError Python raises there, which is the point.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.builder import smoke
from buildctl.engine.engine import Engine
from buildctl.errors import SmokeFailed
from buildctl.graph import smoke_expect
from tests.helpers import unique

PROJECT = Path(__file__).resolve().parents[2]


def base_expectation() -> smoke_expect.Expectation:
    """What the demo base itself must show: its pip and PyYAML, PyYAML unchanged from its constraint file."""
    return smoke_expect.Expectation(
        stack="demo", variant="base", required=("versions", "protected", "imports"), timeout_s=180,
        checks={
            "versions": {"distributions": [{"name": "PyYAML", "version": "6.0"}, {"name": "pip", "version": "23.0.1"}]},
            "protected": {"patterns": ["PyYAML"]},  # base versions from the image's PIP_CONSTRAINT file
            "imports": {"modules": ["json", "yaml", "yaml:safe_load"]},
        },
    )


def with_hybridep(e: smoke_expect.Expectation) -> smoke_expect.Expectation:
    return replace(e, variant="base-hybridep", required=(*e.required, "hybridep"),
                   checks={**e.checks, "hybridep": {"megatron": False}})


def test_demo_base_required_checks_pass(engine: Engine, demo_base: str, tmp_path: Path) -> None:
    r = smoke.run_smoke(engine, demo_base, base_expectation(), report_dir=tmp_path)
    assert r.ok, json.dumps(r.raw, indent=1)
    assert [(c.name, c.status) for c in r.checks] == [("versions", "pass"), ("protected", "pass"), ("imports", "pass")]
    assert r.python["version"].startswith("3.11.")
    by = {c.name: c for c in r.checks}
    assert by["protected"].details["base_from"] == "the base's constraint file /etc/pip/constraint.txt"
    assert by["protected"].details["unchanged"] == ["pyyaml"]
    assert [i["file"] for i in by["imports"].details["imports"]][1].startswith("/usr/lib/python3/dist-packages/yaml/")
    assert r.report_path is not None and json.loads(r.report_path.read_text())["report"]["ok"] is True
    smoke.gate(r)


def test_required_hybridep_fails_with_the_import_error_python_raised(engine: Engine, demo_base: str,
                                                                     tmp_path: Path) -> None:
    r = smoke.run_smoke(engine, demo_base, with_hybridep(base_expectation()), report_dir=tmp_path)
    assert not r.ok
    assert [c.name for c in r.failed] == ["hybridep"]
    hybridep = r.failed[0]
    assert "from deep_ep import HybridEPBuffer: ModuleNotFoundError: No module named 'deep_ep'" in hybridep.summary
    assert "CUDA_HOME is not set" in hybridep.summary
    assert hybridep.details["from deep_ep import HybridEPBuffer"]["error"]["traceback"][-1] == \
        "ModuleNotFoundError: No module named 'deep_ep'"
    with pytest.raises(SmokeFailed) as e:
        smoke.gate(r)
    assert e.value.what == f"smoke build tier failed on {demo_base}: hybridep"
    assert e.value.exit_code == 10


def test_build_gate_stops_on_the_failing_image(engine: Engine, demo_base: str, image_cleanup: object,
                                               tmp_path: Path) -> None:
    ok_ref = labelled(engine, demo_base, image_cleanup, tmp_path, base_expectation())
    bad_ref = labelled(engine, demo_base, image_cleanup, tmp_path, with_hybridep(base_expectation()))
    gate = smoke.BuildGate(report_dir=tmp_path / "reports")
    assert gate(engine, ok_ref, log_file=tmp_path / "ok.log") == "build tier passed: 3 required check(s)"
    with pytest.raises(SmokeFailed, match="hybridep"):
        gate(engine, bad_ref, log_file=tmp_path / "bad.log")
    assert "No module named 'deep_ep'" in (tmp_path / "bad.log").read_text()


def labelled(engine: Engine, base: str, image_cleanup: object, tmp_path: Path, e: smoke_expect.Expectation) -> str:
    """The demo base with the expectation recorded as the build records it (labels only, no layer)."""
    context = tmp_path / unique("ctx")
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\n")
    ref = f"buildctl-test-smoke:{unique()}"
    image_cleanup(ref)  # type: ignore[operator]
    engine.build(context_dir=context, dockerfile="Dockerfile", tag=ref,
                 labels={smoke_expect.EXPECT_LABEL: e.label_value(), smoke_expect.PYTHON_LABEL: "python3"})
    return ref


def test_cli_reads_the_expectation_from_the_label(engine: Engine, demo_base: str, image_cleanup: object,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    ref = labelled(engine, demo_base, image_cleanup, tmp_path, base_expectation())
    junit = tmp_path / "out" / "smoke.xml"
    rc = cli.main(["--project", str(PROJECT), "smoke", ref, "--json", "--junit", str(junit)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["ok"] is True and out["tier"] == "build"
    saved = Path(out["report_path"])
    assert saved.parent == tmp_path / "cache" / "reports" / "smoke" / "demo" / "base"
    assert 'failures="0"' in junit.read_text()

    bad = labelled(engine, demo_base, image_cleanup, tmp_path, with_hybridep(base_expectation()))
    rc = cli.main(["--project", str(PROJECT), "smoke", bad])
    captured = capsys.readouterr()
    assert rc == 10
    assert "hybridep" in captured.out
    assert "smoke build tier failed on" in captured.err
    assert "No module named 'deep_ep'" in captured.err
