"""The project the hostile-input tests (test_hostile_loaders, test_hostile_cli, test_hostile_leftovers) mutate:
one valid stack ``t`` (no lock), its configuration and cache under the test's folder, and the CLI run in it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from buildctl import cli

MANIFEST = textwrap.dedent("""\
    schema: 1
    stack: t
    base: {alias: demo-base}
    variants:
      v: {image: "127.0.0.1:5000/demo:1", platform: linux/amd64, cuda: "13"}
    """)


def make_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project of one valid stack ``t`` (no lock), its configuration and cache under tmp_path."""
    (tmp_path / "pins").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "pins" / "t.yaml").write_text(MANIFEST)
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    for var in ("BUILDCTL_REGISTRY", "BUILDCTL_BUILDERS", "BUILDCTL_BACKEND", "DOCKER_HOST"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def run(project: Path, *argv: str) -> int:
    """`buildctl --project PROJECT -q ARGV...`, in this process."""
    return cli.main(["--project", str(project), "-q", *argv])
