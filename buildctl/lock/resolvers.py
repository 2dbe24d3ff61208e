"""What locking resolves through: the Resolver protocols (registry, git, fetcher, package index, in-base probe), their data, and the Resolvers bundle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from buildctl.lock.lockfile import (
    DraggedCommit,
    LockedChange,
    LockedPr,
    PrMode,
)

# ------------------------------------------------------------------------------------------ seams


class Registry(Protocol):
    """The registry API (Engine.registry_digest): None when the tag does not exist."""

    def registry_digest(self, ref: str) -> str | None: ...


class GitResolver(Protocol):
    """Git questions the lock asks (sources.py answers them, honouring git mirrors)."""

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        """Full SHA of a 7..40 digit prefix (ambiguous: SourceError listing the candidates); with
        ``branch``, the commit must be on it."""
        ...

    def branch_head(self, repo: str, branch: str) -> str: ...

    def pr_head(self, repo: str, number: int) -> str: ...

    def pr_change(self, repo: str, base: str, number: int, head: str, *, target: str = "main",
                  mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
        """The PR's own commits (and, mode merge, what the merge drags in besides)."""
        ...

    def apply(self, repo: str, commit: str, changes: Sequence[LockedChange], patch_paths: Mapping[str, Path]
              ) -> Applied:
        """Apply the changes in order: the resulting commit, empty picks, gitlinks of the result."""
        ...


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What applying a component's changes gave."""

    tree: str
    empty: tuple[str, ...] = ()  # upstream commits whose pick changed nothing
    gitlinks: Mapping[str, str] = field(default_factory=dict)  # submodule path -> SHA in `tree`


class Fetcher(Protocol):
    """Plain downloads on the host, with the user's CA bundle and a bounded timeout."""

    def sha256(self, url: str) -> str: ...

    def content(self, url: str) -> bytes: ...


class PackageIndex(Protocol):
    """sha256 of every file of ``name==version`` that pip may install where ``tags`` are supported."""

    def file_hashes(self, name: str, version: str, tags: Sequence[str]) -> tuple[str, ...]: ...


@dataclass(frozen=True, kw_only=True)
class ProbeRequest:
    """What to ask pip and apt inside the base image."""

    pip: tuple[str, ...] = ()  # runtime requirement lines, resolved after the removals
    build_pip: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # component -> lines
    apt: tuple[str, ...] = ()  # every apt package name to look up (runtime, cuDNN, build)
    apt_sources: Mapping[str, str] = field(default_factory=dict)  # repo name -> sources.list line
    files: Mapping[str, bytes] = field(default_factory=dict)  # keyrings, at their destination
    apt_debs: tuple[str, ...] = ()  # keyring packages to dpkg -i before apt-get update
    remove_pip: tuple[str, ...] = ()
    remove_paths: tuple[str, ...] = ()
    unset_constraint: bool = False

    @property
    def needed(self) -> bool:
        return bool(self.pip or self.build_pip or self.apt)


@dataclass(frozen=True, kw_only=True)
class PipInstall:
    """One distribution pip would install (from its --report)."""

    name: str
    version: str
    url: str = ""
    sha256: str | None = None
    requested: bool = False


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    python: str = ""  # x.y.z of the base's python3
    tags: tuple[str, ...] = ()  # wheel tags the base's pip supports, most preferred first
    installed: Mapping[str, str] = field(default_factory=dict)  # canonical name -> version, as shipped
    installed_after_remove: Mapping[str, str] = field(default_factory=dict)
    pip: tuple[PipInstall, ...] = ()
    build_pip: Mapping[str, tuple[PipInstall, ...]] = field(default_factory=dict)
    apt: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # package -> versions offered


class InBase(Protocol):
    """Runs pip and apt questions inside the base image ``image`` (pulled when needed)."""

    def probe(self, *, image: str, platform: str, request: ProbeRequest) -> ProbeResult: ...


@dataclass(frozen=True, kw_only=True)
class Resolvers:
    registry: Registry
    git: GitResolver
    in_base: InBase
    index: PackageIndex
    fetch: Fetcher
