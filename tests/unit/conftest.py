"""Unit tests are pure: they cannot start a process or open a network connection.

Like cibuildwheel's autouse ``mock_protection`` fixture: anything that would start a process or
reach the engine, a registry or an index raises instead, so that a unit test that accidentally
depends on the machine fails loudly here rather than passing on one machine and hanging on another.
Fakes (small Protocol implementations) stand in for the engine and other external systems.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest


class ForbiddenInUnitTests(AssertionError):
    pass


def _forbid(what: str) -> Callable[..., NoReturn]:
    def fail(*args: object, **kwargs: object) -> NoReturn:
        raise ForbiddenInUnitTests(
            f"unit tests may not {what} (called with {args[:2]!r}); use a fake, "
            "or move the test to tests/integration or tests/engine"
        )

    return fail


@pytest.fixture(autouse=True)
def no_processes_no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess, "Popen", _forbid("start a process (subprocess.Popen)"))
    monkeypatch.setattr(os, "system", _forbid("start a process (os.system)"))
    for name in ("posix_spawn", "posix_spawnp", "fork", "forkpty"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _forbid(f"start a process (os.{name})"))
    for name in ("execv", "execve", "execvp", "execvpe"):
        monkeypatch.setattr(os, name, _forbid(f"replace the process (os.{name})"))
    # Every TCP and unix-socket client goes through these: the Docker socket, registries, indexes.
    monkeypatch.setattr(socket.socket, "connect", _forbid("open a network connection"))
    monkeypatch.setattr(socket.socket, "connect_ex", _forbid("open a network connection"))
    monkeypatch.setattr(socket, "create_connection", _forbid("open a network connection"))
    yield
