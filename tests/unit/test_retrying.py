"""retrying.py, the one retry policy of every registry call (issue 33 item 14), and the words of its failures
(item 18): pure logic, a fake clock and sleep."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from buildctl import retrying
from buildctl.engine.transfer import _registry_fix, _transient
from buildctl.errors import EngineError, PushError, PushStalled, UnreachableError

POLICY = retrying.Backoff(attempts=4, first_delay=1.0, factor=2.0, max_delay=5.0, budget=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


class Busy(Exception):
    def __init__(self, retry_after: float = 0.0) -> None:
        super().__init__("busy")
        self.retry_after = retry_after


def failing(n: int, exc: Exception) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= n:
            raise exc
        return "done"
    return calls, call


def transient(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, Busy) else None


def test_errs_n_times_then_passes_with_exponential_backoff() -> None:
    clock = Clock()
    calls, call = failing(3, Busy())
    assert retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock) == ("done", 4)
    assert clock.waits == [1.0, 2.0, 4.0] and len(calls) == 4


def test_gives_up_after_the_attempts_and_says_how_many() -> None:
    clock = Clock()
    calls, call = failing(10, Busy())
    with pytest.raises(Busy) as err:
        retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock)
    assert len(calls) == 4 and retrying.attempts_made(err.value) == 4


def test_the_time_budget_ends_the_retries_before_the_attempts_do() -> None:
    clock = Clock()
    calls, call = failing(10, Busy())
    policy = retrying.Backoff(attempts=10, first_delay=4.0, factor=2.0, max_delay=30.0, budget=10.0)
    with pytest.raises(Busy):
        retrying.retry(call, transient=transient, policy=policy, sleep=clock.sleep, clock=clock)
    assert clock.waits == [4.0] and len(calls) == 2  # 4 + 8 would pass the 10 s budget


def test_retry_after_is_honoured_within_the_bound_and_past_it_not_waited_for() -> None:
    clock = Clock()
    _calls, call = failing(1, Busy(retry_after=3.0))
    retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock)
    assert clock.waits == [3.0]
    clock = Clock()
    calls, call = failing(1, Busy(retry_after=600.0))
    with pytest.raises(Busy):
        retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock)
    assert clock.waits == [] and len(calls) == 1


def test_a_failure_that_will_not_pass_is_raised_at_once() -> None:
    clock = Clock()
    calls, call = failing(1, ValueError("no"))
    with pytest.raises(ValueError):
        retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.waits == []


@pytest.mark.parametrize(("text", "transient_"), [
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ("received unexpected HTTP status: 500 Internal Server Error", True),
    ("toomanyrequests: retry later", True),
    ("Patch http://r/v2/x/blobs/uploads/1: EOF", True),
    ("write tcp 127.0.0.1:1->127.0.0.1:2: write: connection reset by peer", True),
    ("net/http: request canceled (Client.Timeout exceeded while awaiting headers) i/o timeout", True),
    ("dial tcp 127.0.0.1:5999: connect: connection refused", False),
    ("manifest unknown: manifest unknown", False),
    ("unauthorized: authentication required", False),
    ("received unexpected HTTP status: 404 Not Found", False),
    ("no space left on device", False),
])
def test_what_counts_as_transient(text: str, transient_: bool) -> None:
    assert retrying.transient_text(text) is transient_


def test_the_engine_retries_transient_registry_errors_but_not_stalls_nor_refusals() -> None:
    assert _transient(PushError("push of r/x:1 failed", why="received unexpected HTTP status: 502 Bad Gateway")) == 0.0
    assert _transient(UnreachableError("registry r cut the connection", why="EOF")) == 0.0
    assert _transient(EngineError("looking up r/x:1 failed", why="toomanyrequests")) == 0.0
    assert _transient(PushStalled("push of r/x:1 stalled", why="EOF")) is None
    assert _transient(PushError("push of r/x:1 failed", why="denied: requested access is refused")) is None


def test_start_the_registry_only_when_it_refused_the_connection() -> None:
    """Item 18: an HTTP 500 or a cut upload is no registry that is down."""
    for text in ("received unexpected HTTP status: 500 Internal Server Error", "Patch http://x/blobs/uploads/: EOF"):
        fix = _registry_fix("127.0.0.1:5000", text)
        assert "start the registry" not in fix and "failed on its side or the connection to it was cut" in fix
    assert "start the registry" in _registry_fix("127.0.0.1:5000", "dial tcp 127.0.0.1:5000: connect: connection refused")
    assert "ran out of disk space" in _registry_fix("127.0.0.1:5000", "write /var/lib/registry/x: no space left on device")


def test_the_policy_from_the_environment_is_bounded() -> None:
    p = retrying.policy_from_env({"BUILDCTL_REGISTRY_RETRIES": "6", "BUILDCTL_REGISTRY_RETRY_BUDGET": "8"})
    assert (p.attempts, p.budget) == (6, 8.0) and p.first_delay <= 1.0 and p.max_delay <= 4.0
    bad = retrying.policy_from_env({"BUILDCTL_REGISTRY_RETRIES": "0", "BUILDCTL_REGISTRY_RETRY_BUDGET": "nan"})
    assert (bad.attempts, bad.budget) == (retrying.DEFAULT.attempts, retrying.DEFAULT.budget)


def test_a_host_that_ran_out_of_retries_is_tried_once_until_a_call_passes() -> None:
    """A plan looks up many refs: a registry that keeps failing costs the backoff once, not once per look-up."""
    host = "gave-up.test:5000"
    clock = Clock()
    _calls, call = failing(10, Busy())
    with pytest.raises(Busy):
        retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock, host=host)
    calls, call = failing(10, Busy())
    with pytest.raises(Busy) as err:
        retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock, host=host)
    assert len(calls) == 1 and retrying.attempts_made(err.value) == 1
    _calls, call = failing(0, Busy())
    retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock, host=host)
    calls, call = failing(2, Busy())  # it passed once: retried again
    assert retrying.retry(call, transient=transient, policy=POLICY, sleep=clock.sleep, clock=clock,
                          host=host) == ("done", 3)


def test_a_timeout_is_retried_once_only() -> None:
    """One slow answer passes; a registry that never answers fails after two timeouts, not the whole backoff."""
    clock = Clock()
    calls, call = failing(10, TimeoutError("timed out"))
    check = retrying.once_for_timeouts(lambda _e: 0.0, lambda e: isinstance(e, TimeoutError))
    with pytest.raises(TimeoutError) as err:
        retrying.retry(call, transient=check, policy=POLICY, sleep=clock.sleep, clock=clock)
    assert len(calls) == 2 and clock.waits == [1.0] and retrying.attempts_made(err.value) == 2
