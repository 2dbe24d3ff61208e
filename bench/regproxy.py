"""A TCP relay in front of the registry that counts the bytes each way (what a push uploads).

Every byte a client sends to the registry through it (HTTP headers, manifests, layer blobs) counts as
uploaded; the registry itself is the real one, so "layer already exists" answers are the registry's own.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Counter:
    up: int = 0  # client -> registry
    down: int = 0  # registry -> client
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, up: int, n: int) -> None:
        with self.lock:
            if up:
                self.up += n
            else:
                self.down += n

    def snapshot(self) -> tuple[int, int]:
        with self.lock:
            return self.up, self.down


def _pump(src: socket.socket, dst: socket.socket, counter: Counter, up: bool) -> None:
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            counter.add(up, len(data))
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _connection(client: socket.socket, remote: socket.socket, counter: Counter) -> None:
    """Both directions of one connection; both sockets closed once each side has said it is done."""
    down = threading.Thread(target=_pump, args=(remote, client, counter, False), daemon=True)
    down.start()
    try:
        _pump(client, remote, counter, True)
        down.join()
    finally:
        for s in (client, remote):
            s.close()


@contextlib.contextmanager
def relay(upstream: str) -> Iterator[tuple[str, Counter]]:
    """``(127.0.0.1:PORT, counter)`` of a relay to ``upstream`` (HOST:PORT) while the block runs."""
    host, port = upstream.rsplit(":", 1)
    counter = Counter()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                remote = socket.create_connection((host, int(port)), timeout=30)
                remote.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=_connection, args=(client, remote, counter), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", counter
    finally:
        stop.set()
        server.close()
        thread.join(timeout=5)
