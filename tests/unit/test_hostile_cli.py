"""Hostile input, second pass, the command line and the environment: engine and registry addresses
(--engine, DOCKER_HOST, --registry, an image's registry host), output folders (--out, --report-dir, --junit),
smoke's --timeout and the earlier reports a nightly reads from its report folder. Each defect an adversarial
run of every command found (a Python traceback, or an error only after the work was done) is reproduced here
and refused with a clear error instead.

Every test makes its own files under tmp_path; nothing reaches an engine, a registry or the network (a
value that would is refused before it is used).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from buildctl import cli, safepath, syntax
from buildctl.commands import smoke as smoke_cmd
from buildctl.engine.engine import Engine
from buildctl.errors import EngineError, PushError, UsageError
from buildctl.registry.registry import RegistryClient
from buildctl.services import nightly, wiring
from tests.unit.hostile_project import make_project, run


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_project(tmp_path, monkeypatch)


# -------------------------------------------------------------------------------- engine and registry


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:99999", "tcp://[::1"])
def test_an_engine_address_urllib_refuses_is_an_engine_error(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCKER_HOST=tcp://127.0.0.1:99999 (or --engine so): plan, build, smoke, lock and bom ended in urllib's
    ValueError from inside docker-py; it is an EngineError naming the address (exit 8)."""
    with pytest.raises(EngineError, match="is not a Docker engine address"):
        Engine(address).ping()
    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(EngineError, match=r"is not a Docker engine address") as info:
        Engine().inspect_image("x:1")
    assert address in str(info.value)


@pytest.mark.parametrize("host", ["[zz]:9", "[:::]:5000", "127.0.0.1:99999", "127.0.0.1:0", "", "a b", "a/b"])
def test_a_registry_host_urllib_cannot_take_is_refused_before_use(host: str) -> None:
    """`evidence [zz]:9/a/b:c` ended in ipaddress's ValueError inside urllib; port 99999 went to another port."""
    with pytest.raises(PushError, match="not a registry host"):
        RegistryClient(host)


@pytest.mark.parametrize("host", ["127.0.0.1:5000", "[::1]:5000", "localhost", "nvcr.io", "a-b.example:65535"])
def test_registry_hosts_that_are_fine(host: str) -> None:
    assert syntax.host_port(host) is None
    assert RegistryClient(host).host == host


@pytest.mark.parametrize("argv", [["plan", "t"], ["build", "t"], ["push", "t"], ["bump", "t"],
                                  ["nightly", "t", "--no-push"]])
@pytest.mark.parametrize("registry", ["not a registry", "127.0.0.1:99999", "[::1", "-x"])
def test_registry_option_is_checked_like_the_configuration(project: Path, argv: list[str], registry: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--registry was used as given: `push t --registry "not a registry"` asked the engine for
    `not a registry/buildctl/t/...`. It is checked as the configuration's registry is (exit 2)."""
    assert run(project, *argv, f"--registry={registry}") == 2
    err = capsys.readouterr().err
    assert f"--registry {registry!r}" in err and "Traceback" not in err


def test_registry_option_that_is_fine_passes() -> None:
    wiring.check_registry_arg("127.0.0.1:5000/mirror")
    wiring.check_registry_arg(None)


# ---------------------------------------------------------------------------------- output locations


def test_a_folder_option_naming_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """`build --dry-run --out FILE` and `nightly --report-dir FILE` ended in FileExistsError, after the
    sources were prepared or the whole night ran; the folder is checked first, and not made (a run that stops
    early leaves nothing behind)."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for path in (tmp_path / "file", tmp_path / "file" / "below", tmp_path / "loop"):
        with pytest.raises(UsageError, match=r"--out .*: cannot use it as a folder"):
            safepath.usable_folder(path, "--out")
    assert safepath.usable_folder(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()


def test_nightly_refuses_a_report_dir_that_is_a_file_before_it_runs(project: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (project / "reports").write_text("x")
    assert run(project, "nightly", "t", "--no-push", "--report-dir", str(project / "reports")) == 2
    err = capsys.readouterr().err
    assert "--report-dir" in err and "cannot use it as a folder" in err and "Traceback" not in err
    assert not (project / "cache" / "reports" / "nightly").exists()


def test_nightly_refuses_a_cache_whose_reports_is_a_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "cache").mkdir()
    (project / "cache" / "reports").write_text("x")
    assert run(project, "nightly", "t", "--no-push") == 2
    assert "the nightly reports' folder" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "86401"])
def test_smoke_timeout_is_checked_before_a_container_starts(project: Path, timeout: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`smoke IMAGE --timeout nan` (0, -1, inf) went to the engine's wait as its read timeout: urllib3's or the
    socket's ValueError / OverflowError once the container ran. It is a usage error first, as the manifest's
    smoke.timeout_s is bounded."""
    assert run(project, "smoke", "x:1", "--timeout", timeout) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --timeout must be") and "Traceback" not in err


def test_smoke_junit_that_is_a_folder_is_refused_first(tmp_path: Path) -> None:
    args = argparse.Namespace(timeout=900.0, python=None, junit=tmp_path)
    with pytest.raises(UsageError, match="is a folder"):
        smoke_cmd._check_options(args)
    smoke_cmd._check_options(argparse.Namespace(timeout=None, python="/usr/bin/python3.12", junit=tmp_path / "r.xml"))


@pytest.mark.parametrize("python", ["python3; id", "-c", "a b", "py\nthon", "../x"])
def test_smoke_python_is_held_to_the_manifest_rule(python: str) -> None:
    """--python went to the container as its program unchecked (smoke.python in a manifest is checked)."""
    with pytest.raises(UsageError, match="--python"):
        smoke_cmd._check_options(argparse.Namespace(timeout=None, python=python, junit=None))


@pytest.mark.parametrize("out", ["folder", "no-parent"])
def test_provenance_out_is_checked_before_the_engine_is_asked(project: Path, out: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`provenance IMAGE --out FOLDER` ended in IsADirectoryError (and --out in a missing folder in
    FileNotFoundError) once the statement was made; it is refused first (exit 2), with no engine asked."""
    path = project if out == "folder" else project / "none" / "p.json"
    assert run(project, "provenance", "x:1", "--out", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {path} ") and "Traceback" not in err


# ------------------------------------------------------------------------------- earlier nightly reports


@pytest.mark.parametrize("text", ['[]', 'null', '{"runs": 5}', '{"runs": [1, "x", null]}', '{"runs": [{"build": 1}]}',
                                  '{"runs": [{"build": {"a": 1}, "stack": [], "variant": {}}]}',
                                  '{"runs": [{"build": {"node_keys": [1]}, "stack": "t", "variant": "v"}]}',
                                  '{"runs": [{"build": {"node_keys": {"a": 1}}, "stack": "t", "variant": "v"}]}',
                                  '{"runs": [{"build": {"node_keys": {}}, "lock": 5, "stack": "t", "variant": "v"}]}',
                                  '{"runs": [{"build": {}, "lock": {"hash": 5}, "stack": "t", "variant": "v"}]}',
                                  pytest.param("\udcff", id="not-utf-8"), pytest.param("[" * 10_000, id="deep")])
def test_an_earlier_nightly_report_of_another_shape_is_passed_over(tmp_path: Path, text: str) -> None:
    """A 2*.json in the report folder (any --report-dir) that is JSON of another shape ended the nightly in an
    AttributeError, KeyError or TypeError before its first stage (previous_runs); not UTF-8, in a
    UnicodeDecodeError. Such a report is passed over, as one that is not JSON already was."""
    (tmp_path / "20260101T000000Z-1.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    good = {"runs": [{"build": {"node_keys": {"a": "k"}}, "lock": {"hash": "h"}, "stack": "t", "variant": "w"}]}
    (tmp_path / "20260102T000000Z-1.json").write_text(json.dumps(good))
    assert list(nightly.previous_runs(tmp_path)) == [("t", "w")]


# ------------------------------------------------------------------------------------------- --project


@pytest.mark.parametrize("kind", ["missing", "file", "loop"])
def test_project_must_be_a_folder(tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--project naming nothing (a typo) made `pins check` pass on a project with no stacks (exit 0); a symlink
    loop ended every command in a RuntimeError from Path.resolve. Both are usage errors (exit 2)."""
    where = tmp_path / "p"
    if kind == "file":
        where.write_text("x")
    elif kind == "loop":
        where.symlink_to(where)
    assert cli.main(["--project", str(where), "pins", "check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --project {where}") and "Traceback" not in err


def test_project_that_is_a_folder_is_taken_resolved(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert cli.project_folder(tmp_path / "link") == (tmp_path / "real").resolve()
