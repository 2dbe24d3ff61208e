"""What a run does in the background beside its node tasks.

- ``Pushes``: a node's push (and a compiled wheel's one-file image) runs in the background: its children build
  while its layers go to the registry. The run waits for every one before it ends (Scheduler.execute), and a
  node another engine needs is pulled only once its push ended (Steps.ensure); one that failed fails the run
  as a failed node does.
- ``EarlyPull``: the pulls the plan asks for start while the host prepares sources and downloads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from buildctl.errors import BuildctlError

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine


class Pushes:
    """The pushes of one run, by node. ``threads`` is the run's list of worker threads (RunState.threads): an
    interrupted run cuts their streams (Engine.cancel) and waits for them as for the node tasks."""

    def __init__(self, threads: list[threading.Thread]) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._errors: dict[str, BaseException] = {}
        self._reported: set[str] = set()

    def start(self, name: str, push: Callable[[], object]) -> None:
        def run() -> None:
            try:
                push()
            except BaseException as exc:  # handed to whoever waits for it
                with self._lock:
                    self._errors[name] = exc

        th = threading.Thread(target=run, name=f"buildctl-push-{name}", daemon=True)
        with self._lock:
            self._running[name] = th
        self._threads.append(th)  # list.append is atomic; Scheduler.stop reads the list after the workers stopped
        th.start()

    def wait(self, name: str) -> None:
        """Until the push of node ``name`` (if this run pushes it) ended; its failure raised here."""
        with self._lock:
            th = self._running.get(name)
        if th is not None:
            _join(th)
        with self._lock:
            exc = self._errors.get(name)
        if exc is not None:
            raise exc

    def wait_all(self) -> None:
        """Until every push started so far ended (their failures: ``new_failures``)."""
        with self._lock:
            threads = list(self._running.values())
        for th in threads:
            _join(th)

    def new_failures(self) -> list[tuple[str, BaseException]]:
        """Failed pushes not reported before: (node, error), each once."""
        with self._lock:
            out = [(n, e) for n, e in self._errors.items() if n not in self._reported]
            self._reported.update(n for n, _ in out)
        return out


class EarlyPull:
    """One image pulled in the background before its node's task runs (Steps.pull_early)."""

    def __init__(self, engine: Engine, thread: threading.Thread) -> None:
        self.engine = engine
        self.thread = thread
        self.ok = False

    @classmethod
    def start(cls, engine: Engine, ref: str, threads: list[threading.Thread], *, platform: str | None,
              then: Callable[[], None] = lambda: None) -> EarlyPull:
        """Pull ``ref`` into ``engine`` in a thread of its own (put in ``threads``); ``then`` runs in it once the
        image is there (the node's record: an interrupted run leaves no tag without one)."""
        pull = cls(engine, threading.Thread(target=lambda: pull._run(ref, platform, then), name=f"buildctl-pull-{ref}",
                                            daemon=True))
        threads.append(pull.thread)
        pull.thread.start()
        return pull

    def _run(self, ref: str, platform: str | None, then: Callable[[], None]) -> None:
        try:
            self.engine.pull(ref, platform=platform)
        except BuildctlError:  # its task pulls again and reports what fails
            return
        then()
        self.ok = True

    def wait(self, engine: Engine) -> bool:
        """Whether the image is in ``engine`` now: this pull ended there without an error."""
        _join(self.thread)
        return self.ok and engine is self.engine


def _join(thread: threading.Thread) -> None:
    """Until ``thread`` ended, in bounded waits: Ctrl-C stays deliverable to the main thread."""
    while thread.is_alive():
        thread.join(timeout=0.5)
