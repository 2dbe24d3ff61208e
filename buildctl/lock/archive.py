"""The lock archive: every lock a nightly or a bump built from, kept by its hash, and what names one (REF).

An image's ``io.buildctl.lock-hash`` label is its variant lock's digest (``VariantLock.digest()``); the lock
file holding that variant is kept as ``<cache>/reports/locks/<stack>/<hash>.lock.json`` (the file's text as
buildctl writes it, integrity hash included), once per variant, and pushed to the registry beside the image
as an OCI artifact (``ARTIFACT_TYPE``; services/lockarchive.py). So a label leads back to the full lock.

A REF (`buildctl bisect --good/--bad`) is untrusted text: ``parse_ref`` accepts a lock file (``file:PATH``
or an existing ``*.json`` path), a lock hash from the archive (``lock:HEX`` or 12 to 64 lower-case hex
digits), or an image reference (``image:REF`` or anything that parses as one). Nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from buildctl import syntax
from buildctl.errors import LockError, UsageError
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock
from buildctl.safepath import write_atomic

ARTIFACT_TYPE = "application/vnd.buildctl.lock.v1+json"
HASH = re.compile(r"[0-9a-f]{12,64}")
FULL_HASH = re.compile(r"[0-9a-f]{64}")
STACK = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
MAX_REF = 512

RefKind = Literal["file", "hash", "image"]


@dataclass(frozen=True, kw_only=True)
class Ref:
    kind: RefKind
    value: str

    def __str__(self) -> str:
        """The REF as it is written (parse_ref reads it back as this Ref: a hash is ``lock:HEX``)."""
        return f"{'lock' if self.kind == 'hash' else self.kind}:{self.value}"


def parse_ref(text: str, *, cwd: Path) -> Ref:
    """What ``text`` names. Raises UsageError for anything that is none of a lock file, a hash or an image."""
    if not text or len(text) > MAX_REF:
        raise UsageError(f"a REF must be 1 to {MAX_REF} characters, got {len(text)}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise UsageError(f"the REF {text!r} holds a control character")
    if text.startswith("-"):
        raise UsageError(f"the REF {text!r} starts with '-'", fix="write ./FILE for a lock file")
    kind, sep, rest = text.partition(":")
    if sep and kind in ("file", "lock", "image"):
        if kind == "file":
            return Ref(kind="file", value=rest)
        if kind == "lock":
            if not HASH.fullmatch(rest):
                raise UsageError(f"lock:{rest[:80]} is not a lock hash (12 to 64 lower-case hex digits)")
            return Ref(kind="hash", value=rest)
        return Ref(kind="image", value=_image(rest))
    if HASH.fullmatch(text):
        return Ref(kind="hash", value=text)
    if text.endswith(".json") or (cwd / text).is_file():
        return Ref(kind="file", value=text)
    return Ref(kind="image", value=_image(text))


def _image(text: str) -> str:
    """``text`` when it is an image reference by Docker's grammar (host[:port]/path[:tag][@sha256:...])."""
    if not syntax.IMAGE_RE.fullmatch(text):
        raise UsageError(f"{text[:120]!r} is neither a lock file, a lock hash nor an image reference",
                         fix="give a lock file (file:PATH), a hash (lock:HEX) or an image (image:REF)")
    return text


@dataclass(frozen=True, kw_only=True)
class Archived:
    stack: str
    variant: str
    lock_hash: str
    path: Path


class LockArchive:
    """``<root>/<stack>/<hash>.lock.json``: one file per variant lock, written once, atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, stack: str) -> Path:
        if not STACK.fullmatch(stack):
            raise UsageError(f"{stack!r} is not a stack name")
        return self.root / stack

    def save(self, lock: Lock) -> list[Archived]:
        """Keep ``lock`` under the hash of each of its variants (a file already there is left as it is)."""
        text = lockfile.to_text(lock)
        out = []
        for name, v in sorted(lock.variants.items()):
            if v.missing:
                continue  # a partial lock builds nothing
            digest = v.digest()
            path = self._dir(lock.stack) / f"{digest}.lock.json"
            if not path.is_file():
                write_atomic(path, text)
            out.append(Archived(stack=lock.stack, variant=name, lock_hash=digest, path=path))
        return out

    def find(self, stack: str, prefix: str) -> tuple[Lock, str, str] | None:
        """(lock, variant, full hash) of the archived lock whose variant hash starts with ``prefix``; None when none
        does. Raises UsageError when the prefix names more than one."""
        if not HASH.fullmatch(prefix):
            raise UsageError(f"{prefix[:80]!r} is not a lock hash (12 to 64 lower-case hex digits)")
        folder = self._dir(stack)
        hits = sorted(p for p in folder.glob(f"{prefix}*.lock.json")) if folder.is_dir() else []
        if len(hits) > 1:
            raise UsageError(f"the lock hash {prefix} is ambiguous in {folder}: "
                             + ", ".join(p.name.removesuffix(".lock.json")[:16] for p in hits[:5]),
                             fix="give more digits")
        if not hits:
            return None
        digest = hits[0].name.removesuffix(".lock.json")
        lock = lockfile.read(hits[0])
        assert lock is not None
        return lock, variant_with(lock, digest, str(hits[0])), digest


def variant_with(lock: Lock, digest: str, source: str) -> str:
    """The variant of ``lock`` whose hash is ``digest``; LockError when none is."""
    for name, v in sorted(lock.variants.items()):
        if not v.missing and v.digest() == digest:
            return name
    raise LockError(f"{source}: no variant of this lock has the hash {digest[:16]}",
                    why="the file does not hold the lock it is filed under", fix="remove it from the archive")


def from_text(text: bytes | str, source: str) -> Lock:
    """A lock given as text (a file, an artifact's payload): checked as any lock file is, hand edits refused."""
    data = lockfile.parse(text, source)
    from buildctl.lock import lockcheck

    edited = lockcheck.edited_entries(data)
    if edited:
        raise LockError(f"{source}: the lock was edited after buildctl wrote it ({'; '.join(edited[:4])})",
                        why="its content does not match its integrity hash")
    return Lock.from_json(data, source)
