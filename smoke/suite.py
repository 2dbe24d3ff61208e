"""What a report says about the suite that made it and the machine it ran on (standard library only).

- ``suite_hash``: sha256 over the suite's own Python files (``smoke/**/*.py``, sorted by their path
  relative to the suite's folder; each entry ``<path> NUL <length> NUL <bytes>``). It is what
  buildctl.builder.smoke.suite_hash computes over the files it copies into a container, so that evidence
  names the suite that made it and a report made by another suite is told apart.
- ``driver_version``: the NVIDIA kernel driver's version from ``/proc/driver/nvidia/version`` (present on
  a GPU host and in a container run with ``--gpus``), the GPU tier's record of the driver.
"""

from __future__ import annotations

import hashlib
import os
import re

_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+){1,3})\b")
DRIVER_FILE = "/proc/driver/nvidia/version"


def suite_entries(root: str) -> list[tuple[str, bytes]]:
    """(path relative to ``root``, content) of every ``*.py`` under ``root``, sorted, without __pycache__."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    out.append((os.path.relpath(path, root).replace(os.sep, "/"), f.read()))
    return sorted(out)


def hash_entries(entries: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for rel, data in sorted(entries):
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return "sha256:" + h.hexdigest()


def suite_hash(root: str | None = None) -> str:
    """The hash of the suite in ``root`` (default: this package's folder)."""
    return hash_entries(suite_entries(root or os.path.dirname(os.path.abspath(__file__))))


def driver_version(text: str | None = None, path: str = DRIVER_FILE) -> str:
    """The NVIDIA driver version (``580.159.04``), or "" when there is no NVIDIA driver here."""
    if text is None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(4096)
        except OSError:
            return ""
    m = _DRIVER.search(text)
    return m.group(1) if m else ""
