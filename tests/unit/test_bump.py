"""The pure parts of `buildctl bump`: which components, what the report says, both files or neither."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from buildctl.errors import DiskFull, UsageError
from buildctl.manifest import pins
from buildctl.safepath import write_atomic_both
from buildctl.services.bump import BumpReport, Moved, choose

OLD, NEW = "a" * 40, "b" * 40


def test_the_components_that_follow_a_branch_are_chosen_and_others_refused(project_root: Path) -> None:
    m = pins.load(project_root / "pins" / "demo.yaml")
    assert [c.name for c in choose(m, [])] == ["fastmath", "demo-trainer"]
    assert [c.name for c in choose(m, ["demo-trainer", "demo-trainer"])] == ["demo-trainer"]
    with pytest.raises(UsageError, match="no component 'nope'"):
        choose(m, ["nope"])
    fixed = replace(m, components=tuple(replace(c, branch=None) for c in m.components))
    with pytest.raises(UsageError, match="names no branch"):
        choose(fixed, ["fastmath"])
    with pytest.raises(UsageError, match="no component of demo names a branch"):
        choose(fixed, [])


def test_the_report_names_the_failing_stage_check_and_range() -> None:
    moved = (Moved(component="fastmath", branch="main", old=OLD, new=NEW),)
    failed = BumpReport(stack="demo", moved=moved, ok=False, failed_stage="smoke", failed_variant="default",
                        failed_checks=("imports",), exit_code=10)
    assert failed.summary() == ("demo: bump refused, smoke of default failed (check imports) for fastmath "
                                f"{OLD[:12]}..{NEW[:12]}: nothing was changed")
    assert failed.to_json()["moved"][0]["range"] == f"{OLD}..{NEW}"
    assert failed.to_json()["failed"]["checks"] == ["imports"]
    assert BumpReport(stack="demo").summary() == "demo: nothing to bump (every branch head is the locked commit)"
    ok = BumpReport(stack="demo", moved=moved, written=True, promoted=("r/x:latest",))
    assert ok.summary() == f"demo: bumped fastmath {OLD[:12]}..{NEW[:12]}; moved r/x:latest"
    assert ok.to_json()["failed"] is None


def test_both_files_are_written_or_neither(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock, manifest = tmp_path / "s.lock.json", tmp_path / "s.yaml"
    lock.write_text("old lock\n")
    manifest.write_text("old manifest\n")
    write_atomic_both((lock, "new lock\n"), (manifest, "new manifest\n"))
    assert (lock.read_text(), manifest.read_text()) == ("new lock\n", "new manifest\n")

    real = os.replace
    calls: list[str] = []

    def second_fails(src: str, dst: os.PathLike[str] | str) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(DiskFull, match=r"cannot write .*s\.yaml: no space left"):  # names the file (issue 33 item 13)
        write_atomic_both((lock, "newer lock\n"), (manifest, "newer manifest\n"))
    monkeypatch.undo()
    assert (lock.read_text(), manifest.read_text()) == ("new lock\n", "new manifest\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.lock.json", "s.yaml"]  # no temporary file left


def test_a_first_file_that_did_not_exist_is_removed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.replace
    calls: list[str] = []

    def second_fails(src: str, dst: os.PathLike[str] | str) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(KeyboardInterrupt):
        write_atomic_both((tmp_path / "a", "A"), (tmp_path / "b", "B"))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
