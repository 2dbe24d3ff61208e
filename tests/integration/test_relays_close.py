"""The tests' relays and servers leave no socket open and no thread running once closed (issue 21).

A socket a relay thread still holds when the relay is dropped is reported later by the garbage collector,
inside some unrelated test; so each relay is driven here against a local HTTP server (a request through
it, a connection left idle, for the stall proxy a stalled upload) and closed, and then the process's open
descriptors and threads are what they were before.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench import regproxy
from tests.engine.shiptools import Relay
from tests.integration.pyindex import serve
from tests.stallproxy import StallProxy


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def settled(before: set[int], threads: int) -> tuple[set[int], int]:
    """Descriptors opened since ``before`` and threads above ``threads``, once both stop falling (bounded)."""
    deadline = time.monotonic() + 10
    while True:
        extra, running = open_fds() - before, threading.active_count() - threads
        if (not extra and running <= 0) or time.monotonic() > deadline:
            return extra, running
        time.sleep(0.05)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "index.html").write_text("registry\n")
    with serve(tmp_path) as url:
        yield url.removeprefix("http://")


def drive(addr: str) -> socket.socket:
    """A request through the relay at ``addr``, answered; then a connection left open and idle."""
    with urllib.request.urlopen(f"http://{addr}/v2/", timeout=10) as r:
        assert r.read() == b"registry\n"
    host, port = addr.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def check_closes(start: Callable[[str], tuple[str, Callable[[], None]]], upstream: str) -> None:
    before, threads = open_fds(), threading.active_count()
    addr, close = start(upstream)
    idle = drive(addr)
    time.sleep(0.2)  # the relay has accepted the idle connection and dialled upstream
    close()
    assert idle.recv(1) == b""  # the relay cut what was still open
    idle.close()
    extra, running = settled(before, threads)
    assert not extra, f"descriptors left open: {sorted(extra)}"
    assert running <= 0, f"{running} thread(s) left running"


def test_the_counting_relay_closes_everything(upstream: str) -> None:
    def start(up: str) -> tuple[str, Callable[[], None]]:
        cm = regproxy.relay(up)
        addr, _ = cm.__enter__()

        def close() -> None:
            cm.__exit__(None, None, None)
        return addr, close
    check_closes(start, upstream)


def test_the_recording_relay_closes_everything(upstream: str) -> None:
    def start(up: str) -> tuple[str, Callable[[], None]]:
        r = Relay(upstream=up)
        return r.addr, r.close
    check_closes(start, upstream)


def test_the_stall_proxy_closes_everything_a_stalled_upload_included(upstream: str) -> None:
    before, threads = open_fds(), threading.active_count()
    p = StallProxy(upstream, mode="push")
    host, port = p.address.split(":")
    with urllib.request.urlopen(f"http://{p.address}/v2/", timeout=10) as r:  # relayed
        assert r.read() == b"registry\n"
    stuck = socket.create_connection((host, int(port)), timeout=10)
    stuck.sendall(b"PATCH /v2/x/blobs/uploads/1 HTTP/1.1\r\nHost: r\r\nContent-Length: 9\r\n\r\n")
    deadline = time.monotonic() + 10
    while p.stalled < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.stalled == 1
    p.close()
    assert stuck.recv(1) == b""
    stuck.close()
    extra, running = settled(before, threads)
    assert not extra, f"descriptors left open: {sorted(extra)}"
    assert running <= 0, f"{running} thread(s) left running"


def test_the_index_server_closes_a_connection_left_idle(tmp_path: Path) -> None:
    before, threads = open_fds(), threading.active_count()
    with serve(tmp_path) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = socket.create_connection((host, int(port)), timeout=10)
        time.sleep(0.1)
    assert idle.recv(1) == b""  # server_close cut the silent connection and waited for its thread
    idle.close()
    extra, running = settled(before, threads)
    assert not extra and running <= 0, (sorted(extra), running)
