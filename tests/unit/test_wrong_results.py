"""Wrong results of issue 33 (items 7 to 11), each reproduced from its description and checked fixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.lock import lockfile
from buildctl.manifest import pins

MINIMAL = """\
schema: 1
stack: t
base: {alias: t-base}
variants:
  default: {image: "127.0.0.1:9/none/base:1", platform: linux/amd64, cuda: "13"}
"""
DIGEST = "sha256:" + "0" * 64


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | bytes = MINIMAL) -> tuple[Path, Path]:
    (tmp_path / "pins").mkdir()
    manifest = tmp_path / "pins" / "t.yaml"
    if isinstance(text, str):
        manifest.write_text(text)
    else:
        manifest.write_bytes(text)
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return manifest, tmp_path / "pins" / "t.lock.json"


def _write_lock(manifest: Path, lock: Path) -> None:
    lockfile.write_data(lock, {"schema": 2, "stack": "t", "manifest_sha256": pins.manifest_sha256(manifest),
                               "variants": {"default": {"base": {"ref": "127.0.0.1:9/none/base:1", "digest": DIGEST,
                                                                 "platform": "linux/amd64"}}}})


def _edit_raw(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# -- item 9: pins show says of a hand-edited lock what plan, build and lock say


def test_pins_show_refuses_a_hand_edited_lock_as_plan_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    manifest, lock = _project(tmp_path, monkeypatch)
    _write_lock(manifest, lock)
    assert cli.main(["--project", str(tmp_path), "pins", "show", "t", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["locked"] is True and shown["lock"]["matches_manifest"] is True and shown["lock_refused"] is None
    assert shown["base"]["digest"] == DIGEST

    edited = "sha256:" + "9" * 64
    _edit_raw(lock, lambda d: d["variants"]["default"]["base"].update(digest=edited))
    assert cli.main(["--project", str(tmp_path), "plan", "t"]) == 4
    plan_err = capsys.readouterr().err
    assert "edited by hand" in plan_err

    assert cli.main(["--project", str(tmp_path), "pins", "show", "t", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["locked"] is False and shown["lock"] is None
    assert "edited by hand" in shown["lock_refused"] and "changed variants.default.base" in shown["lock_refused"]
    assert shown["base"]["digest"] is None  # the edited value is not shown as locked
    assert cli.main(["--project", str(tmp_path), "pins", "show", "t"]) == 0
    out = capsys.readouterr().out
    assert "matches the manifest" not in out and edited not in out
    assert "lock: refused, as plan, build and lock refuse it" in out and "edited by hand" in out
