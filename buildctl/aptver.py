"""Debian package versions: ordering (as dpkg orders them) and picking one for a manifest pattern.

Pure: the lock collects the versions a base image's apt sources offer (inside the image) and picks
here, so that the choice is tested without a container.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable

from buildctl.errors import LockError


def _order(c: str) -> int:
    # dpkg's order(): '~' sorts before everything, even the end of the string; letters before
    # other characters; digits (and the end) count as 0 inside the non-digit part.
    if c == "~":
        return -1
    if not c or c.isdigit():
        return 0
    if c.isascii() and c.isalpha():
        return ord(c)
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split(v: str) -> tuple[int, str, str]:
    epoch_text, sep, rest = v.partition(":")
    if sep and epoch_text.isdigit():
        epoch, v = int(epoch_text), rest
    else:
        epoch = 0
    upstream, sep, revision = v.rpartition("-")
    if not sep:
        upstream, revision = v, ""
    return epoch, upstream, revision


def compare(a: str, b: str) -> int:
    """<0, 0 or >0 as Debian version ``a`` sorts before, equal to or after ``b`` (dpkg --compare-versions)."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def highest(versions: Iterable[str]) -> str | None:
    ordered = sorted(set(versions), key=functools.cmp_to_key(compare))
    return ordered[-1] if ordered else None


def select(package: str, pattern: str, available: Iterable[str], *, where: str) -> str:
    """The exact version to lock for ``package`` given the manifest's ``pattern``.

    ``pattern`` is an exact version, ``*`` (any: the highest offered) or a glob such as ``1.6*``
    (the highest offered version that matches). ``where`` names the base image for messages.
    """
    offered = sorted(set(available), key=functools.cmp_to_key(compare), reverse=True)
    if not offered:
        raise LockError(
            f"apt package {package} is not offered by the apt sources of {where}",
            why="apt-cache madison lists no version of it (a typo, a virtual package, or a repository "
                "that is not configured)",
            fix="check the package name, or add its repository under apt.repos in the manifest",
        )
    if "*" not in pattern and "?" not in pattern:
        if pattern in offered:
            return pattern
        raise LockError(
            f"apt package {package}={pattern} is not offered by {where}",
            why=f"offered versions: {', '.join(offered[:8])}",
            fix=f"pin one of the offered versions, or a pattern such as {package}={pattern.split('-')[0]}*",
        )
    matching = [v for v in offered if fnmatch.fnmatchcase(v, pattern)]
    if not matching:
        raise LockError(
            f"no version of apt package {package} matches {pattern!r} in {where}",
            why=f"offered versions: {', '.join(offered[:8])}",
            fix="change the version pattern in the manifest to one of these",
        )
    return matching[0]
