"""The nightly job's logic: stage order, promotion only after smoke, reports, changes since last night."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from buildctl.errors import BuildFailed, UnreachableError
from buildctl.services import nightly
from buildctl.services.nightly import BuildStep, LockStep, PushStep


@dataclass
class FakeSteps:
    """Data in, calls recorded: no engine, no registry."""

    lock_hash: str = "a" * 64
    drift: tuple[str, ...] = ()
    smoke: str = "passed"
    keys: dict[str, str] = field(default_factory=lambda: {"system": "k1", "python": "k2", "entrypoint": "k3"})
    fail: dict[str, Exception] = field(default_factory=dict)
    push_failed: tuple[str, ...] = ()
    not_moved: tuple[str, ...] = ()  # moving tags that failed ("tag: why"), the others moved
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def lock(self, stack: str, variant: str) -> LockStep:
        self.calls.append(("lock", stack, variant))
        if "lock" in self.fail:
            raise self.fail["lock"]
        return LockStep(lock_hash=self.lock_hash, drift=self.drift, written=bool(self.drift))

    def build(self, stack: str, variant: str) -> BuildStep:
        self.calls.append(("build", stack, variant))
        if "build" in self.fail:
            raise self.fail["build"]
        return BuildStep(final_image=f"{stack}-final:{self.keys['entrypoint']}", node_keys=dict(self.keys),
                         built=("python",), reused=("system", "entrypoint"), smoke=self.smoke)

    def push(self, stack: str, variant: str, *, tags: Sequence[str], moving: Sequence[str]) -> PushStep:
        self.calls.append(("push", stack, variant, *tags, "|", *moving))
        pushed = {f"reg/{stack}:{t}": "sha256:" + "d" * 64 for t in tags}
        failed = {x.split(":")[0] for x in self.not_moved}
        return PushStep(pushed=pushed, promoted=tuple(f"reg/{stack}:{m}" for m in moving if m not in failed),
                        not_promoted=tuple(f"reg/{stack}:{x}" for x in self.not_moved), failed=self.push_failed)


def clock() -> datetime:
    return datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)


def test_green_run_pushes_immutable_tags_then_moves_nightly(tmp_path: Path) -> None:
    steps = FakeSteps()
    report, path = nightly.run(steps, [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    assert report.ok
    push_call = next(c for c in steps.calls if c[0] == "push")
    assert push_call == ("push", "demo", "default", "demo-default-" + "a" * 16, "default-nightly-20261130",
                         "nightly-20261130", "|", "nightly")
    r = report.runs[0]
    assert [(s.stage, s.status) for s in r.stages] == [("lock", "ok"), ("build", "ok"), ("push", "ok"),
                                                        ("promote", "ok")]
    assert path.name == f"20261130T020000Z-{os.getpid()}.json"  # two runs in one second: a report each
    assert json.loads((tmp_path / "latest.json").read_text())["ok"] is True
    page = (tmp_path / "latest.md").read_text()
    assert "# Nightly 2026-11-30: all green" in page
    assert "built: python; reused: system, entrypoint" in page
    assert "no previous nightly" in page


def test_nightly_is_not_moved_when_smoke_was_skipped(tmp_path: Path) -> None:
    steps = FakeSteps(smoke="skipped")
    report, _ = nightly.run(steps, [("demo", "default", False)], report_dir=tmp_path, clock=clock)
    push_call = next(c for c in steps.calls if c[0] == "push")
    assert push_call[-1] == "|"  # no moving tag asked for
    assert "nightly-20261130" not in push_call  # only the default variant gets the bare day tag
    promote = report.runs[0].stages[-1]
    assert (promote.stage, promote.status) == ("promote", "skipped")
    assert "smoke skipped" in promote.summary


def test_a_failed_stage_skips_the_rest_and_other_stacks_still_run(tmp_path: Path) -> None:
    steps = FakeSteps(fail={"build": BuildFailed("node python failed", why="pip said no", fix="see the log")})
    report, _ = nightly.run(steps, [("a", "v", True), ("b", "v", True)], report_dir=tmp_path, clock=clock)
    assert not report.ok
    a = report.runs[0]
    assert [(s.stage, s.status) for s in a.stages] == [("lock", "ok"), ("build", "failed"), ("push", "skipped"),
                                                        ("promote", "skipped")]
    assert "pip said no" in a.stages[1].summary and a.stages[1].fix == "see the log"
    assert [c[:2] for c in steps.calls].count(("lock", "b")) == 1
    assert not any(c[0] == "push" for c in steps.calls)
    assert "**build failed**: node python failed (pip said no) - fix: see the log" in (tmp_path / "latest.md").read_text()


def test_a_full_disk_in_a_stage_fails_it_naming_the_file_and_any_other_os_error_goes_on(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/cache/x.part")
    report, _ = nightly.run(FakeSteps(fail={"build": full}), [("demo", "default", True)], report_dir=tmp_path / "r",
                            clock=clock)
    build = report.runs[0].stages[1]
    assert (build.stage, build.status) == ("build", "failed")
    assert build.summary.startswith("cannot write /cache/x.part: no space left on device (")
    assert build.fix.startswith("free space on the filesystem that holds /cache/x.part")
    assert [s.status for s in report.runs[0].stages[2:]] == ["skipped", "skipped"]
    with pytest.raises(PermissionError):
        nightly.run(FakeSteps(fail={"lock": PermissionError(errno.EACCES, "Permission denied", "/x")}),
                    [("demo", "default", True)], report_dir=tmp_path / "s", clock=clock)


def test_unreachable_base_fails_the_lock_stage(tmp_path: Path) -> None:
    steps = FakeSteps(fail={"lock": UnreachableError("cannot reach nvcr.io", fix="configure registry_mirrors")})
    report, _ = nightly.run(steps, [("deepseek-v3-gb200", "cuda13", True)], report_dir=tmp_path, clock=clock)
    assert report.runs[0].stages[0].status == "failed"
    assert report.runs[0].build is None


def test_push_failure_is_reported_and_nothing_is_promoted(tmp_path: Path) -> None:
    steps = FakeSteps(push_failed=("reg/demo:x: connection reset",))
    report, _ = nightly.run(steps, [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    stages = {s.stage: s.status for s in report.runs[0].stages}
    assert stages == {"lock": "ok", "build": "ok", "push": "failed", "promote": "skipped"}


def test_a_moving_tag_that_failed_fails_promote_saying_what_moved_and_what_did_not(tmp_path: Path) -> None:
    """Issue 33 item 16: the report of the night lists exactly what moved and what did not."""
    steps = FakeSteps(not_moved=("nightly: push of reg/demo:nightly failed: connection refused",))
    report, path = nightly.run(steps, [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    stage = report.runs[0].stages[-1]
    assert (stage.stage, stage.status) == ("promote", "failed") and not report.ok
    assert stage.summary.startswith("not moved: reg/demo:nightly: push of")
    assert json.loads(path.read_text())["ok"] is False


def test_two_nightlies_in_the_same_second_keep_a_report_each(tmp_path: Path) -> None:
    """Issue 33 item 15: the same second (and here the same process): two reports, latest.* the last one's."""
    _r1, first = nightly.run(FakeSteps(), [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    _r2, second = nightly.run(FakeSteps(lock_hash="b" * 64), [("demo", "default", True)], report_dir=tmp_path,
                              clock=clock)
    assert first != second and first.is_file() and second.is_file()
    assert json.loads(first.read_text())["runs"][0]["lock"]["hash"] == "a" * 64
    assert (tmp_path / "latest.json").read_text() == second.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_no_push_builds_and_reports_only(tmp_path: Path) -> None:
    steps = FakeSteps()
    report, _ = nightly.run(steps, [("demo", "default", True)], report_dir=tmp_path, push=False, clock=clock)
    assert report.ok and not any(c[0] == "push" for c in steps.calls)


def test_changes_since_the_previous_nightly(tmp_path: Path) -> None:
    nightly.run(FakeSteps(), [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    later = FakeSteps(lock_hash="b" * 64, drift=("pip six 1.16.0 -> 1.17.0",),
                      keys={"system": "k1", "python": "k9", "entrypoint": "k3", "extra": "k4"})
    report, _ = nightly.run(later, [("demo", "default", True)], report_dir=tmp_path,
                            clock=lambda: datetime(2026, 12, 1, 2, 0, tzinfo=UTC))
    changes = report.runs[0].since_previous
    assert changes == ("lock " + "a" * 16 + " -> " + "b" * 16, "node extra: new", "node python: key k2 -> k9")
    assert "re-locked: pip six 1.16.0 -> 1.17.0" in report.runs[0].stages[0].summary


def test_unchanged_nightly_says_nothing_changed(tmp_path: Path) -> None:
    nightly.run(FakeSteps(), [("demo", "default", True)], report_dir=tmp_path, clock=clock)
    report, _ = nightly.run(FakeSteps(), [("demo", "default", True)], report_dir=tmp_path,
                            clock=lambda: datetime(2026, 12, 1, 2, 0, tzinfo=UTC))
    assert report.runs[0].since_previous == ("nothing: every node key is the same as last night",)


@dataclass
class FakeBumper:
    ok: bool
    calls: list[str] = field(default_factory=list)

    def bump(self, stack: str) -> nightly.BumpStep:
        self.calls.append(stack)
        if not self.ok:
            return nightly.BumpStep(ok=False, summary=f"{stack}: bump refused, smoke of default failed (check imports)",
                                    fix="fix the branch")
        return nightly.BumpStep(ok=True, summary=f"{stack}: bumped fastmath aaaa..bbbb")


def test_a_green_bump_runs_once_per_stack_before_its_variants(tmp_path: Path) -> None:
    steps, bumper = FakeSteps(), FakeBumper(ok=True)
    report, _ = nightly.run(steps, [("demo", "default", True), ("demo", "other", False), ("x", "v", True)],
                            report_dir=tmp_path, clock=clock, bumper=bumper, bump_stacks=["demo"])
    assert bumper.calls == ["demo"]
    assert report.ok
    assert [s.stage for s in report.runs[0].stages] == ["bump", "lock", "build", "push", "promote"]
    assert [s.stage for s in report.runs[2].stages] == ["lock", "build", "push", "promote"]  # not asked to bump
    assert any(c[-1] == "nightly" for c in steps.calls if c[0] == "push")


def test_a_red_bump_is_a_red_day_for_its_stack_and_nothing_moves(tmp_path: Path) -> None:
    steps, bumper = FakeSteps(), FakeBumper(ok=False)
    report, _ = nightly.run(steps, [("demo", "default", True)], report_dir=tmp_path, clock=clock, bumper=bumper,
                            bump_stacks=["demo"])
    assert not report.ok
    assert [(s.stage, s.status) for s in report.runs[0].stages] == [
        ("bump", "failed"), ("lock", "skipped"), ("build", "skipped"), ("push", "skipped"), ("promote", "skipped")]
    assert not [c for c in steps.calls if c[0] in ("push", "build")]  # no tag pushed or moved
    assert "**bump failed**: demo: bump refused" in (tmp_path / "latest.md").read_text()
