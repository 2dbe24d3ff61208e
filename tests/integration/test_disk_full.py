"""A full disk on buildctl's write paths (issue 33 item 13), and the leftovers of a writer killed mid-write (item 17).

Each test that needs a full disk mounts a small tmpfs of its own (``size=256k``, as root), fills it, and unmounts
it at the end; where mounting is impossible (not root, no CAP_SYS_ADMIN) it is skipped, saying why. A full disk
must give a DiskFull (exit 16) naming the file that could not be written, keep what was there whole, and leave
no temporary file behind; the nightly's report says what happened, or stderr says that it could not be written.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from buildctl import cli, runs, safepath
from buildctl.builder.schedule import Scheduler
from buildctl.errors import DiskFull
from buildctl.registry.credentials import Redactor
from buildctl.services import nightly
from buildctl.ship import push

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for this test only."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def fill(folder: Path) -> None:
    """Fill the filesystem of ``folder`` to the last byte."""
    with (folder / ".filler").open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        try:
            while True:
                f.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


def test_a_full_disk_names_the_file_keeps_the_old_one_whole_and_leaves_no_temp(small_fs: Path) -> None:
    pins = small_fs / "pins"
    lock = pins / "demo.lock.json"
    safepath.write_atomic(lock, '{"old": true}\n')
    fill(small_fs)
    with pytest.raises(DiskFull) as err:
        safepath.write_atomic(lock, json.dumps({"new": "x" * 300_000}))
    assert str(lock) in err.value.what and "no space left on device" in err.value.what
    assert err.value.exit_code == 16
    assert lock.read_text() == '{"old": true}\n' and temps(small_fs) == []


def test_manifest_and_lock_on_a_full_disk_stay_both_old(small_fs: Path) -> None:
    manifest, lock = small_fs / "demo.yaml", small_fs / "demo.lock.json"
    safepath.write_atomic(manifest, "old manifest\n")
    safepath.write_atomic(lock, "old lock\n")
    fill(small_fs)
    with pytest.raises(DiskFull, match=r"cannot write .*demo"):
        safepath.write_atomic_both((manifest, "new manifest\n"), (lock, "new lock " + "x" * 300_000))
    assert (manifest.read_text(), lock.read_text()) == ("old manifest\n", "old lock\n")
    assert temps(small_fs) == []


def test_the_build_lock_file_on_a_full_cache_is_named(small_fs: Path) -> None:
    fill(small_fs)
    state = SimpleNamespace(config=SimpleNamespace(cache=SimpleNamespace(root=small_fs / "cache")),
                            g=SimpleNamespace(stack="demo", variant="default"), progress=None)
    (small_fs / "cache").mkdir()
    with pytest.raises(DiskFull) as err, Scheduler(cast(Any, state)).exclusive():
        raise AssertionError("the build went on with a full cache")
    assert str(small_fs / "cache" / "locks" / "demo.default.lock") in err.value.what


class _Steps:
    """The nightly's stages as data (the unit tests' FakeSteps, reduced): a green night."""

    def lock(self, stack: str, variant: str) -> nightly.LockStep:
        return nightly.LockStep(lock_hash="a" * 64, drift=(), written=False)

    def build(self, stack: str, variant: str) -> nightly.BuildStep:
        return nightly.BuildStep(final_image="f:k", node_keys={"entrypoint": "k"}, built=(), reused=("entrypoint",),
                                 smoke="passed")

    def push(self, stack: str, variant: str, *, tags: Sequence[str], moving: Sequence[str]) -> nightly.PushStep:
        return nightly.PushStep(pushed={f"r/{stack}:{t}": "sha256:" + "d" * 64 for t in tags},
                                promoted=tuple(f"r/{stack}:{m}" for m in moving), not_promoted=(), failed=())


def test_a_nightly_report_that_cannot_be_written_is_handed_back_and_latest_stays_whole(small_fs: Path) -> None:
    reports = small_fs / "nightly"
    _report, first = nightly.run(_Steps(), [("demo", "default", True)], report_dir=reports)
    before = (reports / "latest.json").read_text()
    fill(small_fs)
    with pytest.raises(nightly.ReportUnwritten) as err:
        nightly.run(_Steps(), [("demo", "default", True)], report_dir=reports)
    assert "the nightly report could not be written: cannot write" in err.value.what and err.value.exit_code == 16
    assert err.value.report.ok and err.value.report.runs[0].stack == "demo"  # what the command prints instead
    assert (reports / "latest.json").read_text() == before
    assert sorted(p.name for p in reports.glob("2*")) == [first.name, first.with_suffix(".md").name]
    assert temps(small_fs) == []


def test_a_push_report_on_a_full_cache_is_named(small_fs: Path) -> None:
    fill(small_fs)
    sink = push.ReportSink(small_fs / "reports", "demo", "default", "2026-12-04T01:02:03Z", Redactor())
    with pytest.raises(DiskFull) as err:
        sink.write(push.PushReport(stack="demo", variant="default", registry="r", started="s"))
    assert str(sink.path) in err.value.what and temps(small_fs) == []


def test_a_writer_killed_between_write_and_rename_leaves_a_temp_the_next_command_sweeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 17: SIGKILL at the rename leaves ``.<name>.<owner>.<random>.tmp``; the next command removes it because
    its owner is dead, and leaves a live writer's alone."""
    project = tmp_path / "project"
    (project / "pins").mkdir(parents=True)
    (project / "pins" / "demo.yaml").write_text((ROOT / "pins" / "demo.yaml").read_text())
    lock = project / "pins" / "demo.lock.json"
    code = ("import os, signal, sys; from pathlib import Path; from buildctl import safepath\n"
            "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
            "safepath.write_atomic(Path(sys.argv[1]), 'half-done')\n")
    done = subprocess.run([sys.executable, "-c", code, str(lock)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)
    assert done.returncode == -signal.SIGKILL
    [left] = list((project / "pins").glob(".*.tmp"))
    assert left.name.startswith(".demo.lock.json.") and not lock.exists()
    mine = project / "pins" / f".demo.yaml.{runs.owner()}.abcdefgh.tmp"  # a live writer's (this process)
    mine.write_text("being written")
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    assert cli.main(["--project", str(project), "pins", "check"]) == 0
    assert not left.exists() and mine.exists()


def test_a_compiled_wheel_kept_on_a_full_cache_is_named_and_leaves_no_part(small_fs: Path, tmp_path: Path) -> None:
    """A compile that finished, its wheel copied into the wheel cache on a full disk: DiskFull naming the wheel's
    place, and no part of it anywhere under the wheel cache (a later run must never find a truncated wheel)."""
    from buildctl.builder.steps import keep_wheel

    made = tmp_path / "fastmath-0.2.0-cp311-cp311-linux_x86_64.whl"
    made.write_bytes(os.urandom(200 * 1024))  # more than the filesystem keeps free once filled
    final = small_fs / "wheels" / "fastmath" / ("k" * 64)
    final.parent.mkdir(parents=True)
    fill(small_fs)
    with pytest.raises(DiskFull) as err:
        keep_wheel(final, made)
    assert str(final / made.name) in err.value.what and err.value.exit_code == 16
    assert not final.exists()
    assert [p.name for p in final.parent.iterdir()] == []  # the run's folder with the part went too
