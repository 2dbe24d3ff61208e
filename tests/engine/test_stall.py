"""Issue 11, defect 4: a registry that accepts the connection but stalls blob transfers.

A TCP relay on 127.0.0.1 (tests/stallproxy.py) sits in front of the test registry (a real
docker-registry): it relays /v2/, HEAD checks and upload starts, and freezes the connection of the
first request that moves a blob. Before the fix a push through it hung without a word (killed at 400 s
in the issue); now each attempt is abandoned after ``stall_timeout`` seconds without a byte moving, and
after ``attempts`` of them the push fails naming the registry and the layer.

The push runs in a thread with a generous bound (far above stall_timeout x attempts), so that the old
code, which ignores the stall settings, fails the test instead of hanging it. That bound is a liveness
check, not a performance claim.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from buildctl.engine.engine import Engine
from buildctl.errors import BuildctlError, PullStalled, PushStalled
from tests.helpers import unique
from tests.stallproxy import Mode, StallProxy

STALL = 2.0
ATTEMPTS = 2
BOUND = 90.0  # seconds; a stalled transfer that is not bounded would take the engine's 400+ s


@pytest.fixture
def stalling(registry: str) -> Iterator[Callable[[Mode], StallProxy]]:
    made: list[StallProxy] = []

    def make(mode: Mode) -> StallProxy:
        p = StallProxy(registry, mode=mode)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


def _small_image(engine: Engine, tmp_path: Path, ref: str) -> None:
    """A one-layer image whose layer no registry has (300 kB of random bytes)."""
    (tmp_path / "blob").write_bytes(os.urandom(300_000))
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n")
    engine.build(context_dir=tmp_path, dockerfile="Dockerfile", tag=ref, labels={})


def _bounded(call: Callable[[], Any]) -> tuple[BaseException | None, float]:
    box: list[BaseException | None] = [None]

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test thread
            box[0] = exc
    start = time.monotonic()
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(BOUND)
    assert not th.is_alive(), f"the transfer still hangs after {BOUND:g} s (stall {STALL:g} s x {ATTEMPTS})"
    return box[0], time.monotonic() - start


def _stall_engine() -> Engine:
    e = Engine(name=unique("stall-"))
    # set after construction, so that the old Engine (no such parameters) runs the same test and hangs
    e.stall_timeout = STALL
    e.attempts = ATTEMPTS
    return e


def test_defect4_a_stalled_push_fails_in_bounded_time_naming_registry_and_layer(
        stalling: Callable[[Mode], StallProxy], tmp_path: Path, image_cleanup: Any) -> None:
    proxy = stalling("push")
    e = _stall_engine()
    ref = image_cleanup(f"{proxy.address}/buildctl-test/{unique('stall')}:x")
    _small_image(e, tmp_path, ref)
    layer = e.inspect_image(ref).layers[-1]
    progress: list[str] = []
    exc, seconds = _bounded(lambda: e.push(ref, on_progress=lambda p: progress.append(str(p))))
    e.close()
    print(f"stalled push: error after {seconds:.1f} s (stall_timeout {STALL:g} s, {ATTEMPTS} attempts)")
    assert isinstance(exc, PushStalled), exc
    assert proxy.stalled >= 1  # the relay did freeze an upload: the stall is real, not a refused connection
    assert proxy.address in exc.what and layer in exc.what and f"{ATTEMPTS} attempt(s)" in exc.what
    assert exc.exit_code == 11 and exc.fix
    assert any("attempt 2 of 2" in p for p in progress)  # the retry is said, not silent


def test_defect4_a_stalled_pull_fails_in_bounded_time(stalling: Callable[[Mode], StallProxy], registry: str,
                                                       tmp_path: Path, image_cleanup: Any) -> None:
    e = _stall_engine()
    name = f"buildctl-test/{unique('stallpull')}:x"
    direct = f"{registry}/{name}"
    _small_image(e, tmp_path, direct)
    e.push(direct)
    e.remove_image(direct)  # the layer leaves the engine with its only image
    proxy = stalling("pull")
    via = image_cleanup(f"{proxy.address}/{name}")
    exc, seconds = _bounded(lambda: e.pull(via))
    e.close()
    print(f"stalled pull: error after {seconds:.1f} s")
    assert isinstance(exc, PullStalled), exc
    assert isinstance(exc, BuildctlError) and exc.exit_code == 6
    assert proxy.stalled >= 1 and proxy.address in exc.what and "downloading blob" in exc.what
