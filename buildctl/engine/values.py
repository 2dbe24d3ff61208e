"""What the engine package hands out: frozen values (Mount, RunResult, ImageInfo, TransferProgress), image-ref
helpers, and the labels and tag names it puts on what it makes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Labels on every container run() creates, so that a leftover one (a killed test run) can be found:
# the engine's name, and the owner (host, pid, start time) of the process that made it.
RUN_LABEL = "org.buildctl.run"
# Local-only tags of node images between their build and their content tag (never pushed):
# ``buildctl-part/<owner>:<node>``.
PART_REPOSITORY = "buildctl-part"


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A host path bind-mounted into a container run()."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True, kw_only=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One line of `docker history`, newest first as the engine reports it."""

    created: int
    created_by: str
    size: int
    comment: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    platform: str
    created: str
    layers: tuple[str, ...]  # diff IDs, base first
    history: tuple[HistoryEntry, ...] = field(default=())
    workdir: str = ""
    user: str = ""
    # The storage driver's own view: its name and, for overlay2, each layer's diff folder on the engine's
    # host, top layer first (UpperDir, then LowerDir's entries); () when the driver is another or says nothing.
    storage_driver: str = ""
    layer_dirs: tuple[str, ...] = ()


# the status of the progress event that says a whole push or pull is tried again (transfer.py, retrying.py):
# push.py counts these as attempts, apart from the engine's own layer retries ("Retrying in N seconds")
ATTEMPT_AGAIN = "Retrying the whole transfer"


@dataclass(frozen=True, kw_only=True)
class TransferProgress:
    """One progress event of a push or pull (a layer's status, or an overall message)."""

    status: str
    layer: str = ""
    current: int | None = None
    total: int | None = None

    def __str__(self) -> str:
        text = f"{self.layer}: {self.status}" if self.layer else self.status
        if self.current is not None and self.total:
            text += f" {self.current}/{self.total}"
        return text


def parse_repository_tag(ref: str) -> tuple[str, str | None]:
    """docker-py's rule (docker.utils.parse_repository_tag), here so that splitting a ref loads no docker-py:
    ``repo@digest``, else ``repo:tag`` where the part after the last ':' has no '/', else (ref, None)."""
    repo, at, digest = ref.rpartition("@")
    if at:
        return repo, digest
    repo, colon, tag = ref.rpartition(":")
    if colon and "/" not in tag:
        return repo, tag
    return ref, None


def split_ref(ref: str) -> tuple[str, str]:
    """``host:port/repo:tag`` -> (``host:port/repo``, ``tag``); a digest ref keeps its digest as the tag."""
    repo, tag = parse_repository_tag(ref)
    return repo, tag or "latest"


def registry_host(ref: str) -> str:
    from docker.auth import resolve_repository_name

    repo, _ = parse_repository_tag(ref)
    host, _name = resolve_repository_name(repo)
    return str(host)
