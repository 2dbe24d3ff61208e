"""The run's executor: one run per stack at a time, the tasks in parallel over the engines, leftovers and interrupts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from buildctl import runs
from buildctl.builder.state import Action, RunState
from buildctl.errors import BuildctlError, BuildFailed, disk_full

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine


class Scheduler:
    def __init__(self, state: RunState) -> None:
        self.s = state

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """One run per stack, variant and cache: the second waits (saying for whom), then reuses the first's work."""
        folder = self.s.config.cache.root / "locks"
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.s.g.stack}.{self.s.g.variant}")
        path = folder / f"{slug}.lock"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            f = path.open("a+b", buffering=0)  # unbuffered: a write that fails is not tried again at close
        except OSError as exc:
            if full := disk_full(path, exc):
                raise full from exc
            raise
        with f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().decode("utf-8", "replace").strip() or "another process"
                # short: a progress line keeps 100 characters of detail
                self.s.progress.node("lock", "waiting", f"{holder} builds {self.s.g.stack}/{self.s.g.variant} with this "
                                     "cache: waiting, then reusing its work")
                fcntl.flock(f, fcntl.LOCK_EX)
                self.s.progress.node("lock", "acquired", "the other build finished; going on")
            f.seek(0)
            f.truncate()
            try:
                f.write(f"pid {os.getpid()}\n".encode())
            except OSError as exc:  # the cache is full from the start: say so before any work
                if full := disk_full(path, exc):
                    raise full from exc
                raise
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    f.seek(0)
                    f.truncate()
                fcntl.flock(f, fcntl.LOCK_UN)

    def remove_leftovers(self) -> None:
        """What runs that died left behind: their containers and temporary tags, their temporary folders."""
        containers: list[str] = []
        tags: list[str] = []
        for e in self.s.engines:
            c, t = e.remove_leftovers()
            containers += c
            tags += t
        images: list[str] = []
        for dead in runs.dead_scratch(self.s.config.cache.root / "tmp"):  # step images of killed classic builds
            for e in self.s.engines:
                journal = dead / runs.journal_name(e.address)
                with contextlib.suppress(OSError):
                    images += e.remove_intermediates(journal.read_text().split())
        folders = runs.sweep_scratch(self.s.config.cache.root / "tmp")
        folders += runs.sweep_scratch(self.s.config.cache.wheels, nested=True)
        if containers or tags or folders or images:
            self.s.progress.node("leftovers", "removed", f"left by runs that died: {len(containers)} container(s), "
                                 f"{len(tags)} temporary tag(s), {len(images)} untagged step image(s), "
                                 f"{len(folders)} temporary folder(s)")

    def stop(self, signame: str) -> str:
        """After SIGINT/SIGTERM: cut running work, wait for the workers, remove what this run started; say what."""
        self.s.cancelled.set()
        stopped = sorted(self.s.running)
        removed: list[str] = []
        for e in self.s.engines:
            removed += e.cancel()
        deadline = time.monotonic() + 60
        for th in self.s.threads:
            join(th, deadline)
        tags = 0
        for e in self.s.engines:
            with contextlib.suppress(BuildctlError):
                tags += e.remove_own_part_tags()
            e.resume()
        folders = sum(1 for _ in self.s.scratch.iterdir()) if self.s.scratch.is_dir() else 0
        shutil.rmtree(self.s.scratch, ignore_errors=True)
        alive = [th.name.removeprefix("buildctl-") for th in self.s.threads if th.is_alive()]
        return (f"stopped {', '.join(stopped) if stopped else 'before any node started'}; removed "
                f"{len(removed)} container(s), {tags} temporary tag(s) and {folders} temporary folder(s) of this run"
                + (f"; still stopping: {', '.join(alive)}" if alive else "")
                + "; nothing half-done was tagged or recorded: run the same command again to resume")

    def execute(self, actions: Mapping[str, Action], publish: set[str],
                work: Callable[[str, Action, bool], None]) -> None:
        """Run the tasks, each when its parents are done, at most ``jobs`` at once.

        Workers are daemon threads. On SIGINT/SIGTERM the main thread raises here; ``run`` then cancels the
        engines' work (streams cut: the engine cancels the builds and removes their containers; compile and
        smoke containers removed) and waits for the workers to unwind. After a failure no new task starts;
        the running ones finish.
        """
        tasks = {n for n, a in actions.items() if a in ("pull", "build")} | publish
        deps = {n: {p for p in self.s.g.node(n).parents if p in tasks} if actions[n] == "build" else set()
                for n in tasks}
        done: set[str] = set()
        started: set[str] = set()
        running: set[str] = set()
        failures: list[BaseException] = []
        finished: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()

        def task(name: str) -> None:
            if self.s.cancelled.is_set():  # started after a signal stopped the run (see join): nothing to do
                finished.put((name, BuildFailed(f"{name}: cancelled", why="the build was interrupted")))
                return
            try:
                work(name, actions[name], name in publish)
                finished.put((name, None))
            except BaseException as exc:  # handed to the main thread, which raises it
                finished.put((name, exc))

        jobs = max(1, self.s.opt.jobs)
        try:
            while True:
                self._push_failures(failures)  # a failed push counts before anything else starts
                if not failures:
                    for n in self.s.g.names():  # topological order: parents first
                        if n in tasks and n not in started and deps[n] <= done and len(running) < jobs:
                            started.add(n)
                            running.add(n)
                            th = threading.Thread(target=task, args=(n,), name=f"buildctl-{n}", daemon=True)
                            self.s.threads.append(th)
                            with self.s.lock:
                                self.s.running.add(n)
                            th.start()
                if not running:
                    self.s.pushes.wait_all()  # the pushes still going finish, as running tasks do
                    self._push_failures(failures)
                    break
                try:
                    n, exc = finished.get(timeout=0.5)  # a bounded wait keeps Ctrl-C responsive
                except queue.Empty:
                    continue
                running.discard(n)
                with self.s.lock:
                    self.s.running.discard(n)
                if exc is None:
                    done.add(n)
                else:
                    failures.append(exc)
                    self.s.progress.node(n, "failed", getattr(exc, "what", str(exc)))
        except BaseException:
            self.s.cancelled.set()  # whatever still finishes keeps no wheel and pushes nothing
            raise
        if failures:
            raise failures[0]

    def _push_failures(self, failures: list[BaseException]) -> None:
        """A push that failed (builder/pushes.py) stops the run as a failed node does."""
        for n, exc in self.s.pushes.new_failures():
            failures.append(exc)
            self.s.progress.node(n, "failed", getattr(exc, "what", str(exc)))

    @contextlib.contextmanager
    def engine(self, prefer: Sequence[str] = ()) -> Iterator[Engine]:
        """The engine for a task: an idle one that already holds a parent (no pull), else the least busy.

        A parent is pulled from the registry in seconds, so an idle engine beats a busy one that has it.
        """
        with self.s.lock:
            idle = min(self.s.busy.values())
            holders = [e for e in self.s.engines if self.s.busy[e.name] == idle
                       and any(e.name in self.s.where.get(p, ()) for p in prefer)]
            e = min(holders or self.s.engines, key=lambda x: (self.s.busy[x.name], self.s.engines.index(x)))
            self.s.busy[e.name] += 1
        try:
            yield e
        finally:
            with self.s.lock:
                self.s.busy[e.name] -= 1


def join(thread: threading.Thread, deadline: float, *, settle_s: float = 2.0) -> None:
    """Wait for ``thread`` until ``deadline`` (monotonic). A signal can land inside ``thread.start()`` while it waits for the
    new thread to say that it runs (seen in tests/engine/test_interrupts.py: SIGINT as a node's pull began): the
    thread runs all the same, but ``join`` refuses it (RuntimeError) until it has said so. This waits for that,
    ``settle_s`` at the most: a start cut before the thread existed never says so, and such a thread, or one
    that starts later still, does nothing (its task returns at once once the run is cancelled)."""
    settle = min(deadline, time.monotonic() + settle_s)
    while True:
        try:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
            return
        except RuntimeError:  # not started yet
            if time.monotonic() >= settle:
                return
            time.sleep(0.01)
