"""Every failure buildctl reports, with its exit code.

Library code raises these; only ``cli.main`` turns them into a message and an exit status.
Each error says what failed, why, and what to do next.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Location:
    """Where in an input file a problem sits (1-based line and column)."""

    file: str
    line: int = 0
    column: int = 0
    key: str = ""  # dotted key path, e.g. "components[0].commit"

    def __str__(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        if self.key:
            where += f": {self.key}"
        return where


class BuildctlError(Exception):
    """Base of every error buildctl reports to a user."""

    exit_code = 1

    def __init__(self, what: str, *, why: str = "", fix: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.why = why
        self.fix = fix

    def __str__(self) -> str:
        lines = [self.what]
        if self.why:
            lines.append(f"  why: {self.why}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class UsageError(BuildctlError):
    """The command line itself is wrong (unknown stack, variant, option)."""

    exit_code = 2


class ManifestError(BuildctlError):
    """A pin manifest (or the project configuration) is invalid."""

    exit_code = 3

    def __init__(self, location: Location, what: str, *, why: str = "", fix: str = "") -> None:
        super().__init__(f"{location}: {what}", why=why, fix=fix)
        self.location = location
        self.detail = what


class ManifestErrors(BuildctlError):
    """Several manifest problems found in one pass; reported together."""

    exit_code = 3

    def __init__(self, errors: list[ManifestError]) -> None:
        self.errors = list(errors)
        super().__init__(
            f"{len(self.errors)} problem(s) in pin manifests",
            fix="correct the entries named above and run `buildctl pins check` again",
        )

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class LockError(BuildctlError):
    """A lock file cannot be produced, read or trusted."""

    exit_code = 4


class LockDrift(LockError):
    """`buildctl lock --check` found the lock out of date."""

    exit_code = 5


class UnreachableError(BuildctlError):
    """A registry, git remote or package index could not be reached in time."""

    exit_code = 6


class SourceError(BuildctlError):
    """A git source could not be fetched, or a PR / patch does not apply."""

    exit_code = 7


class EngineError(BuildctlError):
    """The Docker engine refused or failed an operation."""

    exit_code = 8


class BuildFailed(BuildctlError):
    """A node's build step failed."""

    exit_code = 9


class SmokeFailed(BuildctlError):
    """Required smoke checks failed; nothing after the gate was built."""

    exit_code = 10


class PushError(BuildctlError):
    """A push did not complete or could not be confirmed by digest."""

    exit_code = 11


class VerifyFailed(BuildctlError):
    """A base image does not meet the contract its manifest states."""

    exit_code = 12


class ArgsLintFailed(BuildctlError):
    """The entrypoint's arguments do not fit the pinned Megatron-LM."""

    exit_code = 13


class ReproFailed(BuildctlError):
    """A node declared reproducible differs between two clean builds."""

    exit_code = 14


class Cancelled(BuildctlError):
    """Work stopped because the run is being interrupted (raised in worker threads, never reported alone)."""

    exit_code = 130


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. ``cli.main`` installs handlers that raise it in the main thread; the build
    stops its work, removes what it started and re-raises it with ``done`` saying what it removed.
    The exit status is 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int, name: str, done: str = "") -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name
        self.done = done

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class DiskFull(BuildctlError):
    """A write failed for want of space (ENOSPC, EDQUOT): names the file it could not write."""

    exit_code = 16


def disk_full(path: object, exc: OSError) -> DiskFull | None:
    """The DiskFull for ``exc`` when it is a full disk or quota (None otherwise), naming ``path``."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    said = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
    return DiskFull(f"cannot write {path}: {said}", why=str(exc), fix=f"free space on the filesystem that holds {path} (`df -h`), then run again: "
                                      "nothing half-written is kept")


class PushStalled(PushError):
    """A push whose bytes stopped moving, after the engine layer's own attempts (not retried again)."""


class PullStalled(UnreachableError):
    """A pull whose bytes stopped moving, after the engine layer's own attempts (not retried again)."""
