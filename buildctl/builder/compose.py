"""Images composed on this host without a builder: a node whose Dockerfile only copies a folder onto its parent
and sets metadata (the entrypoint: COPY, WORKDIR, ENTRYPOINT, CMD, LABEL; a compiled wheel's one-file image:
FROM scratch, COPY, LABEL) becomes one layer written here plus its parent's config with the node's changes,
loaded by a thin `docker load` (normalise.thin_archive: the parent's layers are named, not sent).

Why: the classic builder commits a container for every instruction, metadata included (about 0.09 s each on the
2-core machines here, 0.4 s for the entrypoint), and the entrypoint is the last step of every rebuild, after
the compile and the assemble. Composed, it is one write of a small tar and one load (about 0.08 s).

What the image gets is what the builder's COPY gives (docs/guides/fleet.md, "Build backends"): one layer with every
entry of the copied tree, folders included, each with the mode and mtime of the context (EPOCH) and owner 0:0;
WORKDIR's folder made when the parent lacks it (mode 0755, EPOCH, where the builder would give it the time of
the build); the config's WorkingDir, Entrypoint, Cmd and Labels set as those instructions set them. The layer
is written in a fixed order with fixed fields, so two composes of one node give one diff ID.

It composes only where it can see what the parent holds, and says None otherwise, so that the builder builds
the node as before: an engine on this host (a unix socket) with the overlay2 driver, a process that may read
its folders (root: overlay2's whiteouts and opaque folders), the parent's config file in the engine's image
store hashing to the parent's id, and no path of the copy (or of WORKDIR) that the parent has as something
else than what the copy puts there (a symlink, a file where the copy has a folder, or the reverse).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from buildctl import quoting
from buildctl.builder import normalise

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine
    from buildctl.engine.values import ImageInfo

Kind = Literal["dir", "file", "link", "other"]
SCRATCH_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the builder's, FROM scratch


class CannotTell(Exception):
    """What the parent holds at a path cannot be read here: the builder builds the node instead."""


@dataclass(frozen=True, kw_only=True)
class Changes:
    """The metadata instructions of a composed node, as the builder would apply them."""

    labels: Mapping[str, str]
    workdir: str | None = None
    entrypoint: Sequence[str] | None = None
    cmd: Sequence[str] | None = None


def write_layer(root: Path, dest: Path, *, extra_dirs: Sequence[str] = (), epoch: int) -> str:
    """The layer of ``COPY <root>/ /`` as one tar at ``dest``: every entry under ``root`` (folders too), sorted,
    owner 0:0, the mode and mtime each has here; ``extra_dirs`` (relative, not under ``root``) as folders 0755
    with ``epoch``. Returns its diff ID. Anything but folders, regular files and symlinks raises CannotTell."""
    entries: list[tuple[str, Path | None]] = [(d, None) for d in extra_dirs]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in (*dirnames, *filenames):
            p = Path(dirpath) / name
            entries.append((p.relative_to(root).as_posix(), p))
    entries.sort(key=lambda e: e[0])
    digest = hashlib.sha256()
    with dest.open("wb") as raw:
        out = _DigestingFile(raw, digest)
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
            for rel, path in entries:
                info = tarfile.TarInfo(rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if path is None:
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
                    tf.addfile(info)
                    continue
                st = os.lstat(path)
                info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tf.addfile(info)
                elif stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tf.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    info.size = st.st_size
                    with path.open("rb") as f:
                        tf.addfile(info, f)
                else:
                    raise CannotTell(f"{rel}: neither a folder, a file nor a symlink")
    return "sha256:" + digest.hexdigest()


class _DigestingFile:
    def __init__(self, raw: Any, digest: Any) -> None:
        self.raw, self.digest = raw, digest

    def write(self, chunk: bytes) -> int:
        self.digest.update(chunk)
        return int(self.raw.write(chunk))

    def tell(self) -> int:
        return int(self.raw.tell())


def _opaque(path: str) -> bool:
    opaque = normalise.is_opaque(path)
    if opaque is None:
        raise CannotTell(f"{path}: cannot read its overlay opaque mark")
    return opaque


def _kind(stat_result: os.stat_result) -> Kind:
    if stat.S_ISDIR(stat_result.st_mode):
        return "dir"
    if stat.S_ISLNK(stat_result.st_mode):
        return "link"
    return "file" if stat.S_ISREG(stat_result.st_mode) else "other"


def lookup(layer_dirs: Sequence[str], rel: str) -> Kind | None:
    """What the image whose overlay2 diff folders are ``layer_dirs`` (top first) holds at ``rel``: None when
    nothing (never there, or deleted by a whiteout above it, or hidden by an opaque folder above it)."""
    parts = [p for p in rel.split("/") if p]
    for top in layer_dirs:
        cur, hidden_below = top, False
        for i, part in enumerate(parts):
            cur = os.path.join(cur, part)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                break
            except OSError as exc:
                raise CannotTell(f"{cur}: {exc.strerror}") from None
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                return None  # a whiteout: deleted here
            if i == len(parts) - 1:
                return _kind(st)
            if not stat.S_ISDIR(st.st_mode):
                return "other"  # a symlink or file where the path goes on: the builder would resolve it
            hidden_below = hidden_below or _opaque(cur)
        if hidden_below:
            return None
    return None


def parent_config(info: ImageInfo) -> dict[str, Any]:
    """The parent's own config, read from the engine's image store (overlay2 layout) and checked against its id."""
    if info.storage_driver != "overlay2" or len(info.layer_dirs) != len(info.layers) or not info.layer_dirs:
        raise CannotTell("the parent's layers are not overlay2 folders here")
    diff = Path(info.layer_dirs[0])
    if diff.name != "diff" or diff.parent.parent.name != "overlay2":
        raise CannotTell(f"{diff}: not an overlay2 layer folder")
    algo, _, hexid = info.id.partition(":")
    if algo != "sha256" or len(hexid) != 64:
        raise CannotTell(f"{info.id}: not a sha256 image id")
    path = diff.parent.parent.parent / "image" / "overlay2" / "imagedb" / "content" / "sha256" / hexid
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CannotTell(f"{path}: {exc.strerror}") from None
    if hashlib.sha256(data).hexdigest() != hexid:
        raise CannotTell(f"{path} does not hash to the image id")
    config = json.loads(data)
    if not isinstance(config, dict) or list(config.get("rootfs", {}).get("diff_ids", [])) != list(info.layers):
        raise CannotTell(f"{path}: its layers are not the image's")
    return config


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_config(parent: Mapping[str, Any] | None, *, platform: str, parent_id: str, diff_id: str,
               changes: Changes, created: str) -> dict[str, Any]:
    """The composed image's config: the parent's (or FROM scratch's) with the layer and the changes applied as
    the builder applies them (a history line per instruction, the metadata ones marked empty)."""
    if parent is None:
        os_, _, rest = platform.partition("/")
        arch, _, variant = rest.partition("/")
        base: dict[str, Any] = {"architecture": arch, "os": os_, "config": {"Env": [SCRATCH_PATH]},
                                "rootfs": {"type": "layers", "diff_ids": []}, "history": []}
        if variant:
            base["variant"] = variant
    else:
        base = json.loads(json.dumps(parent))
    for key in ("container", "container_config", "docker_version"):
        base.pop(key, None)
    c = dict(base.get("config") or {})
    history = list(base.get("history") or [])
    history.append({"created": created, "created_by": "COPY rootfs/ / # composed by buildctl"})
    if changes.workdir is not None:
        c["WorkingDir"] = changes.workdir
        history.append({"created": created, "created_by": f"WORKDIR {changes.workdir}", "empty_layer": True})
    if changes.entrypoint is not None:
        c["Entrypoint"] = list(changes.entrypoint)
        c["Cmd"] = None  # ENTRYPOINT drops the parent's CMD, as in a Dockerfile
        history.append({"created": created, "created_by": "ENTRYPOINT " + json.dumps(list(changes.entrypoint)),
                        "empty_layer": True})
    if changes.cmd is not None:
        c["Cmd"] = list(changes.cmd)
        history.append({"created": created, "created_by": "CMD " + json.dumps(list(changes.cmd)),
                        "empty_layer": True})
    if changes.labels:
        c["Labels"] = {**(c.get("Labels") or {}), **changes.labels}
        history.append({"created": created, "created_by": "LABEL (buildctl's labels)", "empty_layer": True})
    if parent is not None:
        c["Image"] = parent_id
    base["config"] = c
    base["history"] = history
    base["created"] = created
    base["rootfs"] = {"type": "layers", "diff_ids": [*base.get("rootfs", {}).get("diff_ids", []), diff_id]}
    return base


def _missing_dirs(layer_dirs: Sequence[str], root: Path, workdir: str | None) -> list[str]:
    """WORKDIR's folders that neither the parent nor the copy has (the builder makes them)."""
    if not workdir:
        return []
    parts = [p for p in workdir.split("/") if p]
    out: list[str] = []
    for i in range(1, len(parts) + 1):
        rel = "/".join(parts[:i])
        p = root / rel
        if p.is_symlink() or p.exists():
            if p.is_symlink() or not p.is_dir():
                raise CannotTell(f"WORKDIR /{rel}: the copy has it as something else than a folder")
            continue
        kind = lookup(layer_dirs, rel)
        if kind is None:
            out.append(rel)
        elif kind != "dir":
            raise CannotTell(f"WORKDIR /{rel}: the parent has it as a {kind}")
    return out


def _check_copy(layer_dirs: Sequence[str], root: Path) -> None:
    """Every path of the copy lands where the parent has nothing, or the same kind (a folder on a folder, a file
    on a file): a symlink or a kind change below the copy is the builder's to resolve."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            kind = lookup(layer_dirs, rel)
            mine = _kind(os.lstat(p))
            if kind is not None and (kind != mine or kind == "link"):
                raise CannotTell(f"/{rel}: the parent has a {kind} where the copy puts a {mine}")


def plain(dockerfile: str, changes: Changes, *, scratch: bool) -> bool:
    """Whether the rendered Dockerfile is exactly what ``changes`` compose: FROM, ``COPY rootfs/ /`` and the
    metadata instructions of ``changes`` with their values (the LABEL line the pipeline appends is ``changes``'
    labels). A template edited to do anything else is built by the builder."""
    lines = [ln.strip() for ln in dockerfile.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    want = ["COPY rootfs/ /"]
    if changes.workdir is not None:
        want.append(f"WORKDIR {quoting.dockerfile_word(changes.workdir)}")
    if changes.entrypoint is not None:
        want.append("ENTRYPOINT " + json.dumps(list(changes.entrypoint)))
    if changes.cmd is not None:
        want.append("CMD " + json.dumps(list(changes.cmd)))
    if not lines or not lines[0].startswith("FROM ") or (lines[0] == "FROM scratch") != scratch:
        return False
    return lines[1:] == want


def compose(engine: Engine, *, parent_ref: str | None, platform: str, root: Path, changes: Changes, tag: str,
            scratch: Path, epoch: int) -> str | None:
    """Compose ``COPY root/ /`` plus ``changes`` onto ``parent_ref`` (None: FROM scratch, for ``platform``) and load
    it as ``tag``; returns the image id, or None (with nothing loaded) where it cannot tell what the builder
    would give (the module's text): the caller then builds the node with the builder."""
    if not engine.address.startswith("unix://") or os.geteuid() != 0:  # an engine of this host, read as root
        return None
    if changes.workdir is not None and not changes.workdir.startswith("/"):
        return None  # relative to the parent's WORKDIR: the builder's to resolve
    try:
        parent: dict[str, Any] | None = None
        layer_dirs: tuple[str, ...] = ()
        below: tuple[str, ...] = ()  # the parent's diff IDs
        parent_id = ""
        if parent_ref is not None:
            info = engine.inspect_image(parent_ref)
            parent, layer_dirs, below, parent_id = parent_config(info), info.layer_dirs, info.layers, info.id
            _check_copy(layer_dirs, root)
        extra = _missing_dirs(layer_dirs, root, changes.workdir)
        with tempfile.TemporaryDirectory(prefix="compose-", dir=scratch) as tmp:
            layer = Path(tmp) / "layer.tar"
            diff_id = write_layer(root, layer, extra_dirs=extra, epoch=epoch)
            config = new_config(parent, platform=platform, parent_id=parent_id, diff_id=diff_id, changes=changes,
                                created=_now())
            thin = Path(tmp) / "thin.tar"
            normalise.thin_archive(thin, config=config, tag=tag,
                                   parent_layers=[f"parent-{i}/layer.tar" for i in range(len(below))],
                                   own=[(diff_id, layer)])
            engine.load(thin)
    except CannotTell:
        return None
    return engine.image_id(tag)
