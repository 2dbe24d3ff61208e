"""Who a run is, whether it is still alive, and the temporary folder of each run.

Everything a build run leaves in the engine or on disk while it works (compile and smoke containers,
temporary tags, scratch folders) carries its owner: ``<host>.<pid>.<start>``, the process's host name,
pid and start time (in clock ticks since boot, from /proc: a pid reused by a later process has another
start time). A later run removes what belongs to owners on this host that are no longer alive; what a
live run owns, or a run on another host, is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path

OWNER_LABEL = "org.buildctl.owner"
_OWNER = re.compile(r"^(?P<host>[a-z0-9-]{1,40})\.(?P<pid>[0-9]{1,10})\.(?P<start>[0-9]{1,20})\Z")


def _host() -> str:
    name = re.sub(r"[^a-z0-9-]", "-", socket.gethostname().lower())[:40].strip("-")
    return name or "host"


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (field 22 of /proc/PID/stat), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after its closing one
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@cache
def owner() -> str:
    """This process's owner token (a valid Docker tag component and label value)."""
    pid = os.getpid()
    return f"{_host()}.{pid}.{_start_time(pid) or 0}"


@dataclass(frozen=True, kw_only=True)
class Owner:
    host: str
    pid: int
    start: int

    @staticmethod
    def parse(token: str) -> Owner | None:
        m = _OWNER.match(token)
        if m is None:
            return None
        return Owner(host=m["host"], pid=int(m["pid"]), start=int(m["start"]))

    def dead(self) -> bool:
        """True only for an owner on this host whose process is gone (a pid reused by another process counts
        as gone); False for a live one, and for any owner on another host (its liveness is unknown here)."""
        if self.host != _host():
            return False
        if self.pid == os.getpid():
            return f"{self.host}.{self.pid}.{self.start}" != owner()
        started = _start_time(self.pid)
        return started is None or (self.start != 0 and started != self.start)


def dead_owner(token: str) -> bool:
    o = Owner.parse(token)
    return o is not None and o.dead()


def scratch(root: Path) -> Path:
    """This run's temporary folder under ``root`` (``<cache>/tmp/run-<owner>``), created on first use."""
    path = root / f"run-{owner()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def dead_scratch(root: Path) -> list[Path]:
    """The temporary folders ``run-<owner>`` under ``root`` whose owner is dead (what ``sweep_scratch`` removes)."""
    if not root.is_dir():
        return []
    return [p for p in sorted(root.iterdir()) if p.is_dir() and not p.is_symlink() and p.name.startswith("run-")
            and dead_owner(p.name[4:])]


def journal_name(address: str) -> str:
    """The file in a run's scratch folder where classic builds on the engine at ``address`` list their step images."""
    return "classic-images." + re.sub(r"[^A-Za-z0-9_.-]", "_", address)[:100]


def sweep_scratch(root: Path, *, nested: bool = False) -> list[Path]:
    """Remove the temporary folders of dead runs under ``root``: ``run-<owner>`` (or, with ``nested``, the
    ``run-<owner>-<random>`` folders one level down, as ``wheels/<component>/`` holds them while a wheel is
    moved into place); return what was removed."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    candidates = [p for d in sorted(root.iterdir()) if d.is_dir() and not d.is_symlink()
                  for p in sorted(d.iterdir())] if nested else sorted(root.iterdir())
    for p in candidates:
        if not (p.is_dir() and not p.is_symlink() and p.name.startswith("run-")):
            continue
        token = p.name[4:].rsplit("-", 1)[0] if nested else p.name[4:]
        if dead_owner(token):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed
