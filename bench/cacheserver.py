"""The bench's own compiler-cache server: a redis-server (Debian's package) on a free loopback port.

Started empty for one run and stopped after it, as bench/engine2.py does with the second engine: every
buildctl build of the run uses it (config ``compile_cache``, ``BUILDCTL_COMPILE_CACHE=redis://127.0.0.1:PORT``),
so that (c2)'s second builder shares it, and the registry, with the first and nothing else.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


class CacheServerError(Exception):
    """The cache server could not be started (the message says why)."""


def missing() -> str:
    """Why no server can be started here ("": one can)."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    return ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A fresh redis-server on 127.0.0.1 (no persistence); yields its ``redis://127.0.0.1:PORT``; stopped on exit."""
    why = missing()
    if why:
        raise CacheServerError(why)
    folder = Path(tempfile.mkdtemp(prefix="buildctl-bench-redis-"))
    log = folder / "redis.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(5):  # a port found free can be taken before the server binds it: try another
            port = _free_port()
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--daemonize", "no", "--dir", str(folder), "--protected-mode", "yes"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + 20
            while proc.poll() is None and not _pong(port) and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None and _pong(port):
                break
            _stop(proc)
            proc = None
        if proc is None:
            tail = log.read_text(errors="replace").splitlines()[-10:]
            raise CacheServerError("redis-server did not come up:\n    " + "\n    ".join(tail))
        yield f"redis://127.0.0.1:{port}"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
