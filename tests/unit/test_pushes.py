"""builder/pushes.py and the scheduler's part in it: pushes (and a wheel's one-file image) run in the background
while the node's children build; the run waits for them, and one that failed fails the run. Fakes only: the
engine tests (test_build, test_far_builder, test_interrupts) build and push for real."""

from __future__ import annotations

import functools
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from buildctl.builder.pushes import EarlyPull, Pushes
from buildctl.builder.schedule import Scheduler
from buildctl.errors import BuildctlError, PushError


def test_a_push_runs_beside_the_caller_and_wait_returns_once_it_ended() -> None:
    threads: list[threading.Thread] = []
    pushes = Pushes(threads)
    go = threading.Event()
    done: list[str] = []
    def push() -> None:
        go.wait(5)
        done.append("python")

    pushes.start("python", push)
    assert threads and threads[0].is_alive() and not done  # the caller went on
    go.set()
    pushes.wait("python")
    assert done == ["python"]
    pushes.wait("never-pushed")  # a node this run does not push: nothing to wait for


def test_a_failed_push_is_raised_to_whoever_waits_for_it_and_reported_once() -> None:
    pushes = Pushes([])
    pushes.start("assemble", lambda: (_ for _ in ()).throw(PushError("push of x failed", why="registry down")))
    with pytest.raises(PushError, match="push of x failed"):
        pushes.wait("assemble")
    pushes.wait_all()
    failed = pushes.new_failures()
    assert [n for n, _ in failed] == ["assemble"] and pushes.new_failures() == []


def test_wait_all_waits_for_every_push() -> None:
    pushes = Pushes([])
    done: list[str] = []
    def push(name: str, delay: float) -> None:
        time.sleep(delay)
        done.append(name)

    for name, delay in (("a", 0.3), ("b", 0.1)):
        pushes.start(name, functools.partial(push, name, delay))
    pushes.wait_all()
    assert sorted(done) == ["a", "b"]


class _Engine:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.pulled: list[tuple[str, str | None]] = []

    def pull(self, ref: str, platform: str | None = None) -> None:
        if self.fail:
            raise BuildctlError(f"pull of {ref} failed")
        self.pulled.append((ref, platform))


def test_an_early_pull_says_whether_the_image_is_in_that_engine() -> None:
    e, other = cast(Any, _Engine()), cast(Any, _Engine())
    recorded: list[str] = []
    pull = EarlyPull.start(e, "r/python:k", [], platform=None, then=lambda: recorded.append("python"))
    assert pull.wait(e) and e.pulled == [("r/python:k", None)]
    assert recorded == ["python"]  # the node's record, in the pull's own thread
    assert not pull.wait(other)  # another engine: its task pulls there


def test_an_early_pull_that_failed_leaves_the_pull_to_its_task() -> None:
    e = cast(Any, _Engine(fail=True))
    recorded: list[str] = []
    assert not EarlyPull.start(e, "r/python:k", [], platform="linux/amd64", then=lambda: recorded.append("x")).wait(e)
    assert recorded == []


class _Progress:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def node(self, name: str, state: str, detail: str = "") -> None:
        self.lines.append((name, state, detail))


class _Graph:
    def __init__(self, parents: dict[str, list[str]]) -> None:
        self.parents = parents

    def names(self) -> list[str]:
        return list(self.parents)

    def node(self, name: str) -> Any:
        return SimpleNamespace(parents=self.parents[name])


def _state(parents: dict[str, list[str]]) -> Any:
    threads: list[threading.Thread] = []
    return SimpleNamespace(g=_Graph(parents), opt=SimpleNamespace(jobs=2), lock=threading.Lock(), running=set(),
                           threads=threads, progress=_Progress(), pushes=Pushes(threads), cancelled=threading.Event())


def test_the_scheduler_waits_for_the_pushes_and_a_failed_one_fails_the_run() -> None:
    s = _state({"python": [], "assemble": ["python"], "entrypoint": ["assemble"]})
    order: list[str] = []
    slow = threading.Event()

    def work(name: str, action: str, publish: bool) -> None:
        order.append(name)
        if name == "python":  # its push fails once assemble is under way
            s.pushes.start(name, lambda: (slow.wait(5), (_ for _ in ()).throw(PushError("push of python failed"))))
        if name == "assemble":
            slow.set()
            time.sleep(0.2)

    with pytest.raises(PushError, match="push of python failed"):
        Scheduler(s).execute({"python": "build", "assemble": "build", "entrypoint": "build"}, set(), work)
    assert order[:2] == ["python", "assemble"]  # assemble did not wait for python's push
    assert ("python", "failed", "push of python failed") in s.progress.lines
    assert "entrypoint" not in order  # nothing starts after a failure


def test_the_scheduler_returns_only_once_the_last_push_ended() -> None:
    s = _state({"python": [], "assemble": ["python"]})
    pushed: list[str] = []

    def push(name: str) -> None:
        time.sleep(0.3)
        pushed.append(name)

    def work(name: str, action: str, publish: bool) -> None:
        s.pushes.start(name, functools.partial(push, name))

    Scheduler(s).execute({"python": "build", "assemble": "build"}, set(), work)
    assert sorted(pushed) == ["assemble", "python"]
