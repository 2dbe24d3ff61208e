"""Retrying what a registry may answer differently a moment later: the ONE policy every registry call uses.

A registry (or whatever sits in front of it) now and then answers 500, 502, 503, 504 or 429, resets a
connection or lets a request time out; the same request a few seconds later passes. Every call that asks
a registry goes through ``retry`` here: registry.py's HTTP requests (look-ups, blob uploads, manifests,
referrers, the lock attach) and the engine's push, pull and digest look-up (engine/transfer.py, for node
pushes during a build, base pulls, the push stage and promotion alike).

- transient: HTTP 5xx, 429 (its ``Retry-After`` honoured up to ``max_delay``), a connection reset, cut
  (EOF, broken pipe) or timed out; retried with exponential backoff;
- anything else is not retried: a 4xx other than 429 (refused credentials, an unknown name), a refused
  connection (no registry listens there: retrying would only delay the message), a certificate that
  is not trusted;
- bounded twice: ``attempts`` tries in all, and no new attempt starts past ``budget`` seconds since the
  first (a Retry-After longer than the time left ends the retries at once); a timeout is retried once only
  (``once_for_timeouts``): a registry that never answers fails after about two timeouts.

``BUILDCTL_REGISTRY_RETRIES`` (attempts) and ``BUILDCTL_REGISTRY_RETRY_BUDGET`` (seconds) set the policy
for a run (``policy_from_env``); tests use a fast policy.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

# Words of a transient failure in the text of an engine's error (the engine reports a registry's answer
# as text: "received unexpected HTTP status: 503 Service Unavailable", "toomanyrequests", "EOF", ...).
_TRANSIENT_TEXT = re.compile(
    r"unexpected http status: (5\d\d|429)|status code (5\d\d|429)|http (5\d\d|429)\b|\b(500 internal server error|"
    r"502 bad gateway|503 service unavailable|504 gateway time-?out|429 too many requests)\b|toomanyrequests|"
    r"connection reset|broken pipe|\beof\b|i/o timeout|timed out|timeout exceeded|context deadline exceeded|"
    r"tls handshake timeout|server closed idle connection|connection aborted|remote end closed",
    re.IGNORECASE)
# Words that say the request itself, or the place, is wrong: never retried even when the text above matches too.
_PERMANENT_TEXT = re.compile(
    r"connection refused|no such host|unauthorized|authentication required|denied|manifest unknown|"
    r"name unknown|blob unknown|no such image|does not exist locally|invalid reference|x509:|no space left",
    re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff: ``attempts`` tries in all, waiting first_delay, x factor, ... up to max_delay, no new
    attempt past ``budget`` seconds since the first."""

    attempts: int = 4
    first_delay: float = 2.0
    factor: float = 2.0
    max_delay: float = 30.0
    budget: float = 120.0

    def delay(self, failed_attempts: int) -> float:
        return float(min(self.max_delay, self.first_delay * self.factor ** (failed_attempts - 1)))


DEFAULT = Backoff()


def policy_from_env(env: Mapping[str, str] = os.environ, base: Backoff = DEFAULT) -> Backoff:
    """``base`` with BUILDCTL_REGISTRY_RETRIES / BUILDCTL_REGISTRY_RETRY_BUDGET applied where set and valid."""
    attempts, budget = base.attempts, base.budget
    raw = env.get("BUILDCTL_REGISTRY_RETRIES", "").strip()
    if raw.isdigit() and 1 <= int(raw) <= 20:
        attempts = int(raw)
    raw = env.get("BUILDCTL_REGISTRY_RETRY_BUDGET", "").strip()
    try:
        value = float(raw) if raw else budget
    except ValueError:
        value = budget
    if 0 <= value <= 3600:
        budget = value
    first = min(base.first_delay, budget / 8)
    return Backoff(attempts=attempts, first_delay=first, factor=base.factor,
                   max_delay=min(base.max_delay, max(first, budget / 2)), budget=budget)


_TIMEOUT_TEXT = re.compile(r"timed out|timeout|deadline exceeded", re.IGNORECASE)


def once_for_timeouts(transient: Callable[[BaseException], float | None],
                      is_timeout: Callable[[BaseException], bool]) -> Callable[[BaseException], float | None]:
    """``transient`` for one call, except that a timeout is retried once only: one slow answer passes, a
    registry that never answers fails after about two timeouts, not after the whole backoff."""
    seen = [0]

    def check(exc: BaseException) -> float | None:
        wait = transient(exc)
        if wait is not None and is_timeout(exc):
            seen[0] += 1
            if seen[0] > 1:
                return None
        return wait
    return check


def timeout_text(text: str) -> bool:
    return bool(_TIMEOUT_TEXT.search(text))


def transient_text(text: str) -> bool:
    """Whether an error's text says a transient failure (and nothing that makes it permanent)."""
    return bool(_TRANSIENT_TEXT.search(text)) and not _PERMANENT_TEXT.search(text)


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds only; an HTTP date counts as absent)."""
    if value is None:
        return None
    value = value.strip()
    return float(value) if value.isdigit() and len(value) < 8 else None


# Hosts whose retries ran out in this process: later calls to them are tried once until one passes, so that a
# registry that keeps failing costs the backoff once per run, not once per look-up (a plan asks for many).
_GAVE_UP: set[str] = set()


def retry(call: Callable[[], T], *, transient: Callable[[BaseException], float | None], policy: Backoff = DEFAULT,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
          on_retry: Callable[[int, BaseException, float], None] = lambda _n, _e, _w: None,
          host: str = "") -> tuple[T, int]:
    """``call()`` until it returns; (its value, attempts made).

    ``transient(exc)`` says whether a failure may pass: None for no (the exception propagates at once), else
    the wait the answer asked for (a Retry-After, in seconds; 0 for the policy's own). Past the last attempt
    or the budget, the last transient failure propagates as it is, with ``retry_attempts`` set on it (an
    attribute, so a caller above does not retry it again). With ``host``: once a call to it ran out of
    retries, later ones are tried once, until one passes."""
    if host in _GAVE_UP:
        policy = replace(policy, attempts=1)
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            value = call()
        except Exception as exc:
            asked = transient(exc)
            if asked is None:
                if attempt > 1:  # it was retried: say so, and spare later calls to the host the backoff
                    exc.retry_attempts = attempt  # type: ignore[attr-defined]
                    if host:
                        _GAVE_UP.add(host)
                raise
            wait = max(policy.delay(attempt), min(asked, policy.max_delay)) if asked else policy.delay(attempt)
            over = asked > policy.max_delay or clock() - start + wait > policy.budget
            if attempt >= policy.attempts or over:
                exc.retry_attempts = attempt  # type: ignore[attr-defined]
                if host and attempt > 1:
                    _GAVE_UP.add(host)
                raise
            on_retry(attempt, exc, wait)
            sleep(wait)
        else:
            _GAVE_UP.discard(host)
            return value, attempt


def attempts_made(exc: BaseException) -> int:
    """How many attempts ``retry`` made before ``exc`` propagated (0: it did not go through ``retry``)."""
    value = getattr(exc, "retry_attempts", 0)
    return value if isinstance(value, int) else 0
