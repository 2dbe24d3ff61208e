"""Commands report a lock edited by hand as such, never as a manifest that moved on (issue 11, defect 6).

plan and lock --check run here as processes of their own kind would (the CLI, no engine reachable), on a
project this test writes; the lock is written through lockfile.write_data and then edited by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.lock import lockfile
from buildctl.manifest import pins


def edit_raw(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


MINIMAL = """\
schema: 1
stack: t
base: {alias: t-base}
variants:
  default: {image: "127.0.0.1:9/none/base:1", platform: linux/amd64, cuda: "13"}
"""


def test_defect6_commands_report_a_hand_edited_lock_not_a_moved_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pins").mkdir()
    (tmp_path / "images").symlink_to(Path(__file__).resolve().parents[2] / "images")
    manifest = tmp_path / "pins" / "t.yaml"
    manifest.write_text(MINIMAL)
    lock = tmp_path / "pins" / "t.lock.json"
    lockfile.write_data(lock, {"schema": 2, "stack": "t", "manifest_sha256": pins.manifest_sha256(manifest),
                               "variants": {"default": {"base": {"ref": "127.0.0.1:9/none/base:1",
                                                                 "digest": "sha256:" + "0" * 64,
                                                                 "platform": "linux/amd64"}}}})
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert cli.main(["--project", str(tmp_path), "plan", "t"]) == 0
    edit_raw(lock, lambda d: d["variants"]["default"]["base"].update(digest="sha256:" + "9" * 64))
    capsys.readouterr()
    for argv in (["plan", "t"], ["lock", "t", "--check"]):
        assert cli.main(["--project", str(tmp_path), *argv]) == 4, argv
        err = capsys.readouterr().err
        assert "edited by hand" in err and "changed variants.default.base" in err and "Traceback" not in err
        assert "manifest changed" not in err
