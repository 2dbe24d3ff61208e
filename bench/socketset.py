"""The sockets one relay or test server opened, every one closed by its close() (none left to the GC).

A relay's threads block in accept() and recv(); closing from another thread does not wake them, and a
socket that a thread still holds when the relay is dropped is reported by the garbage collector as an
unclosed socket inside whichever test runs then. So every socket a relay makes is registered here the
moment it exists; close() shuts each one down (which wakes the blocked calls) and closes it, and a
socket registered after close() (an accept() that raced it) is closed at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class SocketSet:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.closed = False

    def add(self, *socks: socket.socket) -> bool:
        """Register ``socks``; False (and closed at once) when the set is already closed."""
        with self._lock:
            if not self.closed:
                self._socks.extend(socks)
                return True
        for s in socks:
            _close(s)
        return False

    def close(self) -> None:
        with self._lock:
            self.closed = True
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
