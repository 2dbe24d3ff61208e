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


# -- item 7: a manifest with CRLF line ends can be bumped (one hashing of the manifest's bytes everywhere)

CRLF = MINIMAL.replace("\n", "\r\n") + ("components:\r\n  lib:\r\n    repo: ../up.git\r\n"
                                        "    commit: 0123456789abcdef0123456789abcdef01234567 # keep me\r\n"
                                        "    branch: main\r\n")


def test_a_crlf_manifest_locked_as_lock_does_is_current_for_bump(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from buildctl.services import bump

    manifest, lock = _project(tmp_path, monkeypatch, CRLF.encode())
    _write_lock(manifest, lock)  # manifest_sha256: what `lock` records, of the file's bytes
    text = pins.read_text_exact(manifest)
    assert text == CRLF and pins.text_sha256(text) == pins.manifest_sha256(manifest)
    assert bump._current(manifest, text, "t").manifest_sha256 == pins.manifest_sha256(manifest)  # no LockError


def test_bumps_edit_of_a_crlf_manifest_keeps_crlf_and_hashes_as_lock_will(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from buildctl.manifest import edit
    from buildctl.safepath import write_atomic_both

    manifest, lock = _project(tmp_path, monkeypatch, CRLF.encode())
    text = pins.read_text_exact(manifest)
    new = edit.apply(text, [edit.Edit(path=("components", "lib", "commit"), value="f" * 40)], str(manifest))
    assert new == CRLF.replace("0123456789abcdef0123456789abcdef01234567", "f" * 40)
    assert edit.changed_lines(text, new) == [9]
    write_atomic_both((lock, "{}\n"), (manifest, new))  # what bump writes
    assert manifest.read_bytes() == new.encode() and manifest.read_bytes().count(b"\r\n") == CRLF.count("\n")
    assert pins.manifest_sha256(manifest) == pins.text_sha256(new)  # what the bumped lock records
    assert pins.load(manifest).component("lib").commit == "f" * 40


# -- item 8: files buildctl writes get the mode a plain write gives (0644 under umask 022), not mkstemp's 0600


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_lock_and_bump_writes_get_the_mode_a_plain_write_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               umask: int, mode: int) -> None:
    import os

    from buildctl.safepath import write_atomic, write_atomic_both

    manifest, lock = _project(tmp_path, monkeypatch)
    old = os.umask(umask)
    try:
        _write_lock(manifest, lock)  # lockfile.write -> write_atomic, as `buildctl lock` writes
        assert lock.stat().st_mode & 0o777 == mode
        a, b = tmp_path / "pins" / "a.yaml", tmp_path / "pins" / "b.lock.json"
        write_atomic_both((a, "x\n"), (b, "{}\n"))  # as `buildctl bump` writes
        assert a.stat().st_mode & 0o777 == mode and b.stat().st_mode & 0o777 == mode
        a.chmod(0o600)  # a file that exists keeps its own mode, as a plain write keeps it
        write_atomic(a, "y\n")
        assert a.stat().st_mode & 0o777 == 0o600 and a.read_text() == "y\n"
    finally:
        os.umask(old)
    assert not list((tmp_path / "pins").glob(".*.tmp"))


# -- item 10: no validation pattern ends in `$` (it matches before a final "\n"): \Z, or fullmatch


def test_no_pattern_in_buildctl_ends_in_a_dollar_that_lets_a_trailing_newline_through() -> None:
    import re

    from buildctl import syntax

    root = Path(__file__).resolve().parents[2] / "buildctl"
    literal = re.compile(r'\b(?:r|rf|fr)"[^"\n]*?(?<!\\)\$"')
    found = [f"{p.relative_to(root.parent)}:{n}" for p in sorted(root.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
    for value in ("0123456789abcdef0123456789abcdef01234567\n", "ok-name\n", "1.2.3\n"):
        assert not (syntax.FULL_SHA_RE.match(value) or syntax.NAME_RE.match(value) or syntax.VERSION_RE.match(value))


# -- item 11: the "did you mean" of a profile's drop does not steer the user to copy a typo of the base launch


@pytest.mark.parametrize("edit, where, typo", [
    (("    - --data-path: /data/x", "    - --data-pth: /data/x"), "entrypoint.args", "--data-pth"),  # typo in the base
    (("full-8: {gpus: 8, args: [--lr: \"1e-4\"]}", "full-8: {gpus: 8, args: [--lr: \"1e-4\", --data-pth: /d]}"),
     None, None),  # the base is right and the profile drops it by name: no error at all
])
def test_a_drop_whose_close_match_is_a_typo_in_the_base_says_where_the_typo_is(
        edit: tuple[str, str], where: str | None, typo: str | None) -> None:
    from tests.unit.test_profiles_derived import BASE, errors_of, load

    assert edit[0] in BASE
    text = BASE.replace(*edit)
    if where is None:
        load(text)
        return
    errors = errors_of(text)
    [drop] = [e for e in errors if "drop: --data-path is not in the arguments it starts from" in e]
    assert f"{where} has {typo!r}" in drop and f"the typo is in {where}: correct it there" in drop
    assert f"did you mean {typo!r}?" not in drop  # the bare hint that told the user to copy the typo


def test_a_typo_in_an_extended_profile_is_named_with_that_profile() -> None:
    from tests.unit.test_profiles_derived import BASE, errors_of

    text = BASE.replace('full-8: {gpus: 8, args: [--lr: "1e-4"]}',
                        'full-8: {gpus: 8, args: [--lr: "1e-4", --mock-dta]}').replace(
        "drop: [--data-path]", "drop: [--data-path, --mock-data]").replace(
        "--data-path: replaced by --mock-data", "--data-path: replaced by --mock-data\n        --mock-data: x")
    errors = errors_of(text)
    [drop] = [e for e in errors if "drop: --mock-data is not in the arguments it starts from" in e]
    assert "entrypoint.profiles.full-8.args has '--mock-dta'" in drop
