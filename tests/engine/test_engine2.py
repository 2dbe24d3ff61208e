"""bench/engine2.py, the one second-engine helper of bench and tests: it leaves nothing behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench import engine2
from buildctl.engine.engine import Engine
from tests.helpers import unavailable


def test_a_second_engine_leaves_no_bridge_mount_or_folder(engine: Engine) -> None:
    bridges: list[str] = []
    folders: list[Path] = []
    try:
        with engine2.second_engine(bridges, folders) as e2:
            e2.ping()
            [state] = folders
            assert engine2.mounts_under(state), "a running dockerd mounts inside its folder (what is cleaned)"
            assert (state / "exec").is_dir()
    except engine2.SecondEngineError as exc:
        unavailable(str(exc))
    [state] = folders
    [bridge] = bridges
    assert not engine2.mounts_under(state)
    assert not state.exists()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f" {bridge}:" not in links and f" {bridge}@" not in links
    engine.ping()  # the shared engine is untouched


def test_remove_folder_unmounts_what_is_mounted_inside(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    (folder / "exec" / "netns").mkdir(parents=True)
    (folder / "exec" / "netns" / "default").touch()
    (folder / "root").mkdir()
    done = subprocess.run(["mount", "--bind", str(folder / "root"), str(folder / "root")], capture_output=True)
    if done.returncode != 0:
        unavailable(f"mount --bind needs root: {done.stderr.decode().strip()}")
    subprocess.run(["mount", "--bind", "/proc/self/ns/net", str(folder / "exec" / "netns" / "default")],
                   check=True)
    assert len(engine2.mounts_under(folder)) == 2
    engine2.remove_folder(folder)
    assert not engine2.mounts_under(folder)
    assert not folder.exists()
