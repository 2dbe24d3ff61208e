"""The one bounded reader for untrusted files and registry blobs, and typed access to what it parsed.

Reports, REF files, lock artifacts, registry manifests, config blobs and referrer indexes come from outside:
a 100,000-deep ``[[[[...`` under the size cap must not reach the parser's recursion (RecursionError), a
REF ``file:/dev/zero`` must not be read without bound, and a value that has the wrong JSON type (a config
blob that is a list, a ``subject`` that is a string, ``Labels`` a list) must be refused by name before use,
never end in an AttributeError.

- ``read_capped(path, limit)``: at most ``limit`` bytes (one more tells "too large"), whatever the file is;
- ``read_regular(path, limit)``: the same of a regular file only (manifests, locks), checked on what was opened;
- ``loads(data, max_depth=...)``: JSON bounded in nesting depth (checked before parsing), optionally strict
  (no NaN/Infinity, no duplicate keys);
- ``obj``/``array``/``text``/``str_map``: a value of the expected type, or ``Malformed`` naming where.

Every failure is a ``ValueError`` (``Malformed``, or json's JSONDecodeError with line and column) with a
message that names the place; callers wrap it in their own BuildctlError (exit code of their kind).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

MAX_DEPTH = 64  # an OCI manifest nests 4 levels, a smoke report 6, a lock 8: far past what any of them has
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class Malformed(ValueError):
    """Untrusted content that is not what it must be (too large, too deep, not JSON, a value of another type)."""


def read_capped(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path`` (a device, a pipe or a growing file included): Malformed past it.
    OSError passes through (the caller names the file)."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Malformed(f"larger than {limit} bytes")
    return data


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def regular_file(path: Path) -> None:
    """Malformed unless ``path`` (its symlinks followed) is a regular file, checked before anything opens it: a
    manifest or lock that is a FIFO would block forever on open, a socket or device is no file of ours.
    (``read_capped`` itself reads pipes on purpose, for ``bisect --good file:<(...)``.) OSError passes through."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise Malformed(f"not a regular file ({kind})")


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for reading when what was opened is a regular file (its symlinks followed), else Malformed.
    The open does not block (a FIFO would wait for a writer forever) and the check is made on the opened file, so
    nothing put at the path between a caller's own check and the open is read. OSError passes through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise Malformed("not a regular file (it was replaced while being opened)")
    return f


def read_regular(path: Path, limit: int) -> bytes:
    """``read_capped`` of ``path`` when it is a regular file (its symlinks followed), else Malformed naming what it
    is. The check holds for what is read: ``regular_file`` names a FIFO, socket or device by its path, then
    ``open_regular`` opens it without blocking and checks what it opened. OSError passes through."""
    regular_file(path)
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Malformed(f"larger than {limit} bytes")
    return data


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings not counted)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH, strict: bool = False) -> Any:
    """JSON ``data``, refused (Malformed) when not UTF-8, not JSON or nested deeper than ``max_depth``; with
    ``strict`` also NaN/Infinity and duplicate keys (extensions Python's json accepts)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise Malformed(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if depth(text) > max_depth:
        raise Malformed(f"nested more than {max_depth} levels deep")
    # json.JSONDecodeError (a ValueError: line and column for the caller's message) passes through
    if not strict:
        return json.loads(text)
    out = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    _finite(out)
    return out


def _no_constant(name: str) -> Any:
    raise Malformed(f"{name} is not JSON")


def _no_duplicates(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in items:
        if k in out:
            raise Malformed(f"duplicate key {k!r}")
        out[k] = v
    return out


def _finite(value: Any) -> None:
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            raise Malformed(f"{x} is not a finite number")
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


COUNT_MAX = (1 << 63) - 1  # a count past this is no compile's or build's (and no int64 JSON reader's integer)


def count(value: Any) -> int | None:
    """``value`` when it is a count: an integer (not a boolean) of 0 to COUNT_MAX; else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= COUNT_MAX else None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def obj(value: Any, where: str) -> dict[str, Any]:
    """``value`` when it is a JSON object, else Malformed (``where``: the key path, for the message)."""
    if not isinstance(value, dict):
        raise Malformed(f"{where}: expected an object, got {_kind(value)}")
    return value


def array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{where}: expected a list, got {_kind(value)}")
    return value


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{where}: expected a string, got {_kind(value)}")
    return value


def str_map(value: Any, where: str) -> dict[str, str]:
    """A JSON object of strings (image labels, annotations); null is an empty one."""
    if value is None:
        return {}
    d = obj(value, where)
    for k, x in d.items():
        text(x, f"{where}.{k}")
    return dict(d)
