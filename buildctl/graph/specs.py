"""Node specs: what each kind of graph node takes as input (frozen dataclasses), and the node kinds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from buildctl.manifest.model import (
    PipConstraintPolicy,
)

NodeKind = Literal["base", "cudnn", "system", "python", "assemble", "entrypoint", "compile-env", "wheel"]
NODE_KINDS: tuple[NodeKind, ...] = (
    "base", "cudnn", "system", "python", "assemble", "entrypoint", "compile-env", "wheel",
)
BUILT_KINDS: tuple[NodeKind, ...] = tuple(k for k in NODE_KINDS if k != "base")


def _nokey() -> Any:
    """Metadata for a field that renders or fetches but is not part of the key."""
    return {"key": False}


# ------------------------------------------------------------------------------------ node specs


@dataclass(frozen=True, kw_only=True)
class FileSpec:
    """A file buildctl fetches on the host, verifies, and COPYs into the image."""

    name: str
    dest: str
    mode: str
    sha256: str | None  # None until locked when the manifest says `compute`
    url: str = field(default="", metadata=_nokey())  # the checksum identifies the content


@dataclass(frozen=True, kw_only=True)
class AptSource:
    name: str
    line: str  # the sources.list line for the variant's platform
    keyring: str | None = None  # name of the FileSpec that provides the key


@dataclass(frozen=True, kw_only=True)
class AptPin:
    name: str
    version: str  # exact once locked; the manifest's pattern before


@dataclass(frozen=True, kw_only=True)
class PipPin:
    name: str
    version: str | None  # exact; None when unlocked and not exact in the manifest
    spec: str = ""  # the manifest's specifier when not locked
    hashes: tuple[str, ...] = ()
    in_base: bool = False  # the base already satisfies it: nothing to install
    sdist: bool = False  # hashes are a source distribution's: the host builds the wheel (in the base)
    download: str = ""  # the manifest download (install: pip) whose file this is, not the index's
    filename: str = ""  # with download: the wheel's file name in the wheelhouse
    url: str = field(default="", metadata=_nokey())  # with download: where the host fetches it (sha256 is the content)


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """A git component's source. Locked: the tree commit made by applying PRs and patches."""

    tree: str | None  # full SHA of the prepared commit (the lock's `tree`)
    repo: str = ""
    commit: str = ""
    prs: tuple[str, ...] = ()  # "2146" or "2146@<head>", in the order they are applied
    patches: tuple[str, ...] = ()  # "<file>@<sha256>", in order


@dataclass(frozen=True, kw_only=True)
class BaseNodeSpec:
    image: str = field(metadata=_nokey())  # the manifest's reference (mirrors rewrite it; the digest is the content)
    digest: str | None
    platform: str

    @property
    def ref(self) -> str:
        """What FROM and pull use: ``image@digest`` once locked."""
        if self.digest and "@" not in self.image:
            return f"{self.image}@{self.digest}"
        return self.image


@dataclass(frozen=True, kw_only=True)
class CudnnNodeSpec:
    package: str
    version: str  # cuDNN's own version (9.14.0.64)
    apt_version: str
    source: AptSource | None
    files: tuple[FileSpec, ...]  # the source's keyring
    cleanup: tuple[str, ...]
    recommends: bool = False  # apt installs recommended packages too (apt.recommends)


@dataclass(frozen=True, kw_only=True)
class SystemNodeSpec:
    files: tuple[FileSpec, ...]
    sources: tuple[AptSource, ...]
    apt: tuple[AptPin, ...]
    remove_pip: tuple[str, ...]
    remove_paths: tuple[str, ...]
    cleanup: tuple[str, ...]
    python: str
    recommends: bool = False


@dataclass(frozen=True, kw_only=True)
class PythonNodeSpec:
    python: str
    constraint: PipConstraintPolicy
    pins: tuple[PipPin, ...]
    protect: tuple[str, ...]
    replace: tuple[str, ...]
    cleanup: tuple[str, ...]

    @property
    def to_install(self) -> tuple[PipPin, ...]:
        return tuple(p for p in self.pins if not p.in_base)


@dataclass(frozen=True, kw_only=True)
class CompileEnvNodeSpec:
    component: str
    files: tuple[FileSpec, ...]  # keyrings of the apt sources below
    sources: tuple[AptSource, ...]
    apt: tuple[AptPin, ...]
    python: str
    constraint: PipConstraintPolicy
    pins: tuple[PipPin, ...]
    cleanup: tuple[str, ...]

    @property
    def to_install(self) -> tuple[PipPin, ...]:
        return tuple(p for p in self.pins if not p.in_base)


@dataclass(frozen=True, kw_only=True)
class WheelNodeSpec:
    component: str
    source: SourceSpec
    env: Mapping[str, str]
    command: str
    parallel_env: str | None
    memory_per_job_gib: float = field(metadata=_nokey())  # sizes the job count, which is not an input
    compile_cache: bool = field(default=True, metadata=_nokey())  # the cache never changes what is built


@dataclass(frozen=True, kw_only=True)
class WheelInstall:
    component: str
    dist: str | None


@dataclass(frozen=True, kw_only=True)
class TreeInstall:
    component: str
    path: str
    source: SourceSpec


@dataclass(frozen=True, kw_only=True)
class AssembleNodeSpec:
    python: str
    constraint: PipConstraintPolicy
    wheels: tuple[WheelInstall, ...]
    trees: tuple[TreeInstall, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]  # component SHAs and smoke expectations, recorded in the image
    cleanup: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class EntrypointNodeSpec:
    workdir: str
    script: str  # the launch script's text
    script_path: str
    script_mode: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    labels: Mapping[str, str]
    smoke: Literal["gate", "skipped"]  # an image built past a skipped gate is a different image


NodeSpec: TypeAlias = (
    BaseNodeSpec | CudnnNodeSpec | SystemNodeSpec | PythonNodeSpec | CompileEnvNodeSpec
    | WheelNodeSpec | AssembleNodeSpec | EntrypointNodeSpec
)
