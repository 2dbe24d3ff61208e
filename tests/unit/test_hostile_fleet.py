"""Hostile input, fourth pass: what came after the first three, the fleet's settings and the compiler cache's
reports. The configuration's compile_cache, builders (flat and by platform), download and git mirrors read from
config.toml and the environment; the records and compile statistics `plan` and `build` read back from the cache
and from a compile's /out; the bench scripts' own arguments. Each defect a scripted run found (a Python traceback,
a hang, a value refused only where it was used, after work was done) is reproduced here and refused where it is
loaded instead.

Every test makes its own files under tmp_path; nothing reaches an engine, a registry or the network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl.config import load_config
from buildctl.errors import ManifestError
from tests.unit.hostile_project import make_project, run


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_project(tmp_path, monkeypatch)


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "config.toml").write_text(text)
    return {"BUILDCTL_CONFIG": str(tmp_path / "config.toml"), "HOME": str(tmp_path)}


# ------------------------------------------------------------------------------------------ configuration


def test_a_configuration_integer_of_more_digits_than_int_reads_is_a_configuration_error(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`network_timeout = 999...` (5,000 digits) in config.toml ended every command in tomllib's ValueError (Python
    converts at most 4,300 digits; tomllib raises that, not its TOMLDecodeError); it is a configuration error at
    that line (exit 3)."""
    text = "network_timeout = 5\nstall_timeout = " + "9" * 5000 + "\n"
    (project / "none.toml").write_text(text)
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(project / "none.toml"), "HOME": str(project)})
    assert (info.value.location.line, info.value.location.column) == (2, 17)
    assert run(project, "pins", "check") == 3
    err = capsys.readouterr().err
    assert "none.toml:2:17: cannot read this value: Exceeds the limit" in err and "Traceback" not in err
