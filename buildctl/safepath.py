"""Writes that stay inside their folder, and writes that readers see whole (``write_atomic``).

A manifest names paths inside images (``downloads.*.dest``, ``install.path``); buildctl writes them into
a build context on the host, as root. The syntax rules refuse ``..`` at load time; ``inside`` checks every
such write again where it happens, after symlinks: a source tree copied into the context may hold a
symlink, and a later file whose path runs through it would otherwise land wherever the link points.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from buildctl import runs
from buildctl.errors import BuildctlError, UsageError, disk_full


class UnsafePath(BuildctlError):
    """A write would land outside the folder it belongs to."""

    exit_code = 3


def inside(root: Path, rel: str) -> Path:
    """``root / rel``, with its parent folders created, refusing a path that leaves ``root``.

    Refused: an absolute ``rel``, a ``..`` part, NUL or a line break, a parent folder that resolves outside
    ``root`` (through a symlink), and a target that is itself a symlink.
    """
    if "\x00" in rel or "\n" in rel or "\r" in rel:
        raise UnsafePath(f"refusing to write {rel!r}: it holds a NUL or a line break")
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts:
        raise UnsafePath(f"refusing to write {rel!r} under {root}: the path leaves the folder",
                         why="paths in a build context are relative and never hold '..'")
    target = root / rel
    base = os.path.realpath(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    parent = os.path.realpath(target.parent)
    if parent != base and not parent.startswith(base + os.sep):
        raise UnsafePath(f"refusing to write {rel!r} under {root}: a folder on the way resolves to {parent}",
                         why="a symlink in the context points outside it")
    if target.is_symlink():
        raise UnsafePath(f"refusing to write {rel!r} under {root}: it is a symlink ({os.readlink(target)})",
                         why="writing through it would change the file it points to")
    return target


def _umask() -> int:
    try:  # Linux 4.7+: read without changing it (os.umask sets it, for a moment, for every thread)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _mode_for(path: Path) -> int:
    """The mode a plain write would leave: the file's own when it exists, else 0666 less the umask (0644
    usually). mkstemp makes 0600: a lock renamed into place from it was unreadable to a CI user or a viewer."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


# A temporary file beside its target while it is written: ``.<name>.<owner>.<random>.tmp`` (runs.owner: host, pid
# and start time), so that a later run tells a dead writer's leftover (SIGKILL between the write and the rename)
# from a live one's and sweeps it (``sweep_temps``).
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<owner>[a-z0-9-]{1,40}\.[0-9]{1,10}\.[0-9]{1,20})\.[A-Za-z0-9_]{1,16}\.tmp\Z")
_OLD_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp\Z")  # before owners were in the name: swept after a day
_OLD_AGE = 86400.0


def _stage(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=f".{path.name}.{runs.owner()}.", suffix=".tmp", dir=path.parent)


def _write_fd(descriptor: int, text: str, path: Path) -> None:
    """``text`` as UTF-8 with its line ends as they are, the file given the mode a plain write of ``path`` would
    leave (``_mode_for``)."""
    with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as f:
        os.fchmod(f.fileno(), _mode_for(path))
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def folder_problem(path: Path) -> str | None:
    """Why ``path`` can be neither a folder nor a place where one can be made (a missing path whose nearest existing
    parent is a folder), or None; nothing is made. The reason reads after "it": "is not a folder", "is below X,
    which is not a folder", or "cannot be searched (...)" where a parent may not be searched by this user."""
    place = path
    try:
        while not place.exists() and not place.is_symlink() and place.parent != place:
            place = place.parent
        usable = place.is_dir()
    except OSError as exc:  # EACCES on a parent: Path.exists raises it
        return f"cannot be searched ({exc.strerror or exc})"
    if not usable:
        return "is not a folder" if place == path else f"is below {place}, which is not a folder"
    return None


def usable_folder(path: Path, named_by: str) -> Path:
    """``path`` checked, before any work is done there, for being a folder or a place where one can be made
    (``folder_problem``); nothing is made, so a run that stops early leaves nothing behind. Otherwise a UsageError
    naming ``named_by`` (the option that gave it)."""
    what = folder_problem(path)
    if what:
        raise UsageError(f"{named_by} {path}: cannot use it as a folder: it {what}",
                         fix=f"give {named_by} a folder, or a path where one can be made")
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a part. A full disk is a
    DiskFull naming ``path`` (the old file, if any, is left as it was; the temporary file is removed)."""
    tmp = ""
    try:
        fd, tmp = _stage(path)
        _write_fd(fd, text, path)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        full = disk_full(path, exc) if isinstance(exc, OSError) else None
        if full is not None:
            raise full from exc
        raise


def write_atomic_both(first: tuple[Path, str], second: tuple[Path, str]) -> None:
    """Write two files so that readers see both new or both old (manifest and lock: `buildctl bump`).

    Both are written and synced beside their targets first; then ``first`` is renamed into place, then
    ``second``. Should the second rename fail (or a signal arrive between), ``first`` gets its old text back
    (or is removed when it did not exist), so nothing is left with one file new and the other old."""
    staged: list[str] = []
    current = first[0]
    try:
        for path, text in (first, second):
            current = path
            fd, tmp = _stage(path)
            staged.append(tmp)
            _write_fd(fd, text, path)
        path1, path2 = first[0], second[0]
        old1 = path1.read_bytes().decode("utf-8") if path1.exists() else None
        current = path1
        os.replace(staged[0], path1)
        current = path2
        try:
            os.replace(staged[1], path2)
        except BaseException:
            if old1 is None:
                path1.unlink(missing_ok=True)
            else:
                write_atomic(path1, old1)
            raise
    except OSError as exc:
        full = disk_full(current, exc)
        if full is not None:
            raise full from exc
        raise
    finally:
        for tmp in staged:
            Path(tmp).unlink(missing_ok=True)


def sweep_temps(folder: Path, *, recursive: bool = False) -> list[Path]:
    """Remove the temporary files that writers which died left in ``folder`` (and below, with ``recursive``):
    those of a dead owner on this host (runs.Owner.dead), and unowned ones (older names) after a day. A live
    writer's, or one on another host, is never touched. Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(folder.rglob(".*.tmp") if recursive else folder.glob(".*.tmp"))
    except OSError:
        return removed
    now = time.time()
    for p in sorted(candidates):
        try:
            if p.is_symlink() or not p.is_file():
                continue
            m = _TEMP.match(p.name)
            if m is not None:
                stale = runs.dead_owner(m["owner"])
            else:
                stale = bool(_OLD_TEMP.match(p.name)) and now - p.stat().st_mtime > _OLD_AGE
            if stale:
                p.unlink()
                removed.append(p)
        except OSError:
            continue
    return removed
