"""A TCP relay on 127.0.0.1 in front of a real registry that accepts every connection but stalls blob transfers.

Requests pass through unchanged until one moves a blob: a push's upload (``PATCH``/``PUT`` to
``/blobs/uploads/``) or, in pull mode, a blob download (``GET /v2/.../blobs/sha256:...``). From that
request on, the relay stops moving bytes on that connection in both directions and keeps it open, as a
registry behind a broken proxy or a saturated link does: the client's writes fill the socket buffers and
no answer ever comes. Everything else (``/v2/``, manifests, HEAD checks, starting an upload) is relayed,
so the client sees a registry that answers and then hangs.

A test helper (local processes only), used by the engine tests of stalled pushes and pulls.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable
from typing import Literal

from bench.socketset import SocketSet

Mode = Literal["push", "pull"]

_PUSH = re.compile(rb"^(PATCH|PUT) /v2/\S+/blobs/uploads/", re.MULTILINE)
_PULL = re.compile(rb"^GET /v2/\S+/blobs/sha256:", re.MULTILINE)


class StallProxy:
    def __init__(self, upstream: str, *, mode: Mode) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.pattern = _PUSH if mode == "push" else _PULL
        self.stalled = 0  # connections frozen so far
        self.connections = 0
        self._lock = threading.Lock()
        self._socks = SocketSet()  # every socket of the proxy, closed by close()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._socks.add(self._listener)
        self._closed = threading.Event()
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._start(self._accept)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name="stallproxy", daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._socks.add(client):
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            if not self._socks.add(server):
                return
            server.settimeout(None)
            frozen = threading.Event()
            with self._lock:
                self.connections += 1
            self._start(self._pump, client, server, frozen, True)
            self._start(self._pump, server, client, frozen, False)

    def _pump(self, src: socket.socket, dst: socket.socket, frozen: threading.Event, from_client: bool) -> None:
        try:
            while not frozen.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if from_client and self.pattern.search(data):
                    with self._lock:
                        self.stalled += 1
                    frozen.set()
                    # Hold the connection: read nothing more from the client, answer nothing.
                    self._closed.wait()
                    return
                if frozen.is_set():
                    self._closed.wait()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not frozen.is_set():
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close every socket of the proxy (held connections are cut) and wait for its threads."""
        self._closed.set()
        self._socks.close()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout=5)
