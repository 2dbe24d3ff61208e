"""schedule.join: waiting for a worker thread after SIGINT/SIGTERM, including one whose start() the signal cut.

In tests/engine/test_interrupts.py (CI run of 2026-12-03) a SIGINT landed inside `Thread.start()`, while it
waited for the new thread to say that it runs; `Thread.join` then raised "cannot join thread before it is
started" and the build exited 1 with a traceback instead of 130. Here the two states a cut start leaves are
made directly: a thread object never started, and one that starts a moment later.
"""

from __future__ import annotations

import threading
import time

from buildctl.builder.schedule import join


def test_a_thread_that_never_started_is_left_after_the_settle_wait() -> None:
    th = threading.Thread(target=lambda: None, daemon=True)  # start() cut before the thread existed
    start = time.monotonic()
    join(th, time.monotonic() + 60, settle_s=0.3)  # no RuntimeError
    assert 0.3 <= time.monotonic() - start < 5


def test_a_thread_that_starts_late_is_joined() -> None:
    ran = threading.Event()

    def work() -> None:
        time.sleep(0.2)
        ran.set()
    th = threading.Thread(target=work, daemon=True)
    threading.Timer(0.2, th.start).start()  # start() still under way when join begins
    join(th, time.monotonic() + 60)
    assert ran.is_set() and not th.is_alive()


def test_a_running_thread_is_waited_for_until_the_deadline() -> None:
    stop = threading.Event()
    th = threading.Thread(target=stop.wait, daemon=True)
    th.start()
    start = time.monotonic()
    join(th, time.monotonic() + 0.3)
    assert th.is_alive() and time.monotonic() - start < 5
    stop.set()
    join(th, time.monotonic() + 5)
    assert not th.is_alive()
