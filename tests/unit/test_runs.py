"""Run owners (host, pid, start time) and the sweep of dead runs' temporary folders; the stall watch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildctl import runs
from buildctl.engine.transfer import _Stalled, _Watch


def test_this_process_is_alive_and_a_pid_reused_by_another_process_is_not() -> None:
    me = runs.Owner.parse(runs.owner())
    assert me is not None and me.pid == os.getpid() and not me.dead()
    assert runs.Owner(host=me.host, pid=me.pid, start=me.start + 1).dead()  # same pid, another start time
    assert runs.Owner(host="some-other-host", pid=1, start=1).dead() is False  # unknown there: never touched
    assert runs.Owner.parse("not an owner") is None and not runs.dead_owner("../etc")


def test_sweep_removes_only_dead_runs_folders(tmp_path: Path) -> None:
    me = runs.Owner.parse(runs.owner())
    assert me is not None
    dead = f"{me.host}.{me.pid}.{me.start + 7}"
    (tmp_path / f"run-{dead}" / "out-wheel-x").mkdir(parents=True)
    mine = runs.scratch(tmp_path)
    (tmp_path / "run-garbage name").mkdir()
    (tmp_path / "unrelated").mkdir()
    removed = runs.sweep_scratch(tmp_path)
    assert removed == [tmp_path / f"run-{dead}"]
    assert mine.is_dir() and (tmp_path / "run-garbage name").is_dir() and (tmp_path / "unrelated").is_dir()
    wheels = tmp_path / "wheels" / "fastmath"
    (wheels / f"run-{dead}-abc123_x").mkdir(parents=True)
    (wheels / f"run-{runs.owner()}-zzz").mkdir()
    assert runs.sweep_scratch(tmp_path / "wheels", nested=True) == [wheels / f"run-{dead}-abc123_x"]


def test_the_stall_watch_names_the_layers_in_flight() -> None:
    w = _Watch(stall_timeout=0.0)
    w.see({"status": "Preparing", "id": "aaa"})
    w.see({"status": "Pushing", "id": "bbb", "progressDetail": {"current": 10, "total": 20}})
    w.see({"status": "Pushed", "id": "aaa"})
    with pytest.raises(_Stalled) as stalled:
        w.see({"status": "Pushing", "id": "bbb", "progressDetail": {"current": 10, "total": 20}})  # no change
    assert stalled.value.describe("push", {"bbb": "sha256:bbbfull"}) == "uploading layer sha256:bbbfull after 10 bytes"
