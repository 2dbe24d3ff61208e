"""Locking a stack: read the lock on disk, resolve the manifest's floating pins, write the lock once (or check it).

Used by `buildctl lock` (which prints what this returns) and by the nightly's lock step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from buildctl.config import Config
from buildctl.lock import lockfile
from buildctl.lock.drift import Drift, diff_variant
from buildctl.lock.lock import LockOutcome, check, lock_stack
from buildctl.lock.lockfile import Lock
from buildctl.lock.resolvers import Resolvers
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest


def existing(path: Path, stack: str, *, for_check: bool) -> Lock | None:
    """The lock beside manifest ``path`` of ``stack``. --check reports a lock edited by hand as such
    (LockHandEdited); re-locking reads it, says so, and replaces it. Another stack's lock is refused."""
    return lockfile.read_beside(path, stack, allow_hand_edit=not for_check)


def check_stack(path: Path, manifest: Manifest, variants: Sequence[str], resolvers: Resolvers, config: Config,
                old: Lock | None, *, shown_manifest: str) -> list[Drift]:
    """What drifted between the lock and the pins resolved now (empty: current); writes nothing."""
    return check(manifest, shown_manifest, pins.manifest_sha256(path), variants, resolvers, config, old)


def lock_and_write(path: Path, manifest: Manifest, variants: Sequence[str], resolvers: Resolvers, config: Config,
                   old: Lock | None, *, partial: bool = False, only: Sequence[str] | None = None) -> LockOutcome:
    """Resolve ``variants`` (the others' entries kept) and write the lock, once, atomically."""
    outcome = lock_stack(manifest, pins.manifest_sha256(path), variants, resolvers, config, old, partial=partial,
                         only=only)
    lockfile.write(lockfile.lock_path(path), outcome.lock)
    return outcome


@dataclass(frozen=True, kw_only=True)
class Relocked:
    lock_hash: str
    drift: tuple[str, ...]  # what moved since the lock on disk, for people
    written: bool  # the lock file changed


def relock_variant(path: Path, variant: str, resolvers: Resolvers, config: Config) -> Relocked:
    """The nightly's lock step: resolve one variant once; what moved is the difference to the lock on disk (lock
    --check would resolve twice); the lock is rewritten only when something did."""
    manifest = pins.load(path)
    lock_file = lockfile.lock_path(path)
    old = lockfile.read_beside(path, manifest.stack, allow_hand_edit=True)
    sha = pins.manifest_sha256(path)
    outcome = lock_stack(manifest, sha, [variant], resolvers, config, old)
    new = outcome.lock.variants[variant]
    before = old.variants.get(variant) if old is not None else None
    drift = [] if before is None else diff_variant(variant, before, new)
    lines = tuple(d.message() for d in drift)
    if before is None:
        lines = ("no lock before: locked now",)
    elif old is not None and old.manifest_sha256 != sha:
        lines = (f"{path.name} edited since it was locked", *lines)
    if old is not None and old.hand_edited:
        lines = (f"{lock_file.name} was edited by hand ({'; '.join(old.hand_edited)}): re-locked", *lines)
    written = old is None or outcome.lock.to_json() != old.to_json()
    if written:
        lockfile.write(lock_file, outcome.lock)
    return Relocked(lock_hash=new.digest(), drift=lines, written=written)
