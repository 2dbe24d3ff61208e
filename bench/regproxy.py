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

from bench.socketset import SocketSet


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
    """``(127.0.0.1:PORT, counter)`` of a relay to ``upstream`` (HOST:PORT) while the block runs; on exit
    every socket it opened is closed (connections still open are cut), and its threads end."""
    host, port = upstream.rsplit(":", 1)
    counter = Counter()
    socks = SocketSet()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    socks.add(server)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    threads: list[threading.Thread] = []

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            if not socks.add(client):
                return
            try:
                remote = socket.create_connection((host, int(port)), timeout=30)
            except OSError:
                client.close()
                continue
            if not socks.add(remote):
                return
            remote.settimeout(None)
            t = threading.Thread(target=_connection, args=(client, remote, counter), daemon=True)
            t.start()
            threads.append(t)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", counter
    finally:
        socks.close()
        thread.join(timeout=5)
        for t in threads:
            t.join(timeout=5)
