"""Whiteouts with a fixed time: the `docker save` -> rewrite -> `docker load` route (docs/reference/engine-facts.md,
"Determinism").

A RUN that deletes a file of a lower layer (``remove.paths``, a pip uninstall or upgrade of a base package, a
keyring .deb removed after ``dpkg -i``, ``cleanup`` of a path the parent has) leaves a whiteout in its layer,
and the engine gives the whiteout the time of the build. Nothing inside the RUN can touch it (it is not in the
container's view), so two builds of such a node never have the same diff ID. For a node declared bit-level,
the pipeline therefore rewrites its own layers after the build: every whiteout (``.wh.<name>``,
``.wh..wh..opq``) gets the mtime EPOCH and pax atime/ctime are dropped; entry order is kept (sorting would
break hard links). The rewritten layers go back with `docker load` of a *thin* archive: the parent's layers
are named in its manifest but not included, because the engine skips layers it already has (by chain ID)
without opening their files, so a 20 GB base is never written twice.

``normalise_layer`` and ``thin_archive`` are pure (files in, files out); ``settle_whiteouts`` drives the engine.

The save costs a write of the whole image (1.6 s for the demo's 190 MB here; minutes for a 20 GB one), yet
most RUNs delete nothing below them. So first, where the engine is on this host (a unix socket) with the
overlay2 driver, the node's own layers are read where the driver keeps them (``GraphDriver`` UpperDir and
LowerDir): overlay2 stores a whiteout as a character device 0:0 and an opaque folder as the xattr
``trusted.overlay.opaque=y`` (``user.overlay.opaque`` in userxattr mode). None there: nothing to settle, no
save. Anything it cannot read or tell (another driver, a folder it may not read, an xattr it cannot ask)
falls back to the save, as does a process that is not root (trusted.* xattrs are hidden from it).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import posixpath
import stat
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine

_DROPPED_PAX = ("atime", "ctime")


class _HashingStream(io.RawIOBase):
    """A write-only file that hashes what goes through it on its way to ``out``."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, chunk: Any) -> int:
        data = bytes(chunk)
        self.sha.update(data)
        self.out.write(data)
        return len(data)


def _is_whiteout(name: str) -> bool:
    return posixpath.basename(name.rstrip("/")).startswith(".wh.")


def needs_settling(src: IO[bytes], *, epoch: int) -> bool:
    """Whether a layer holds a whiteout whose mtime is not ``epoch`` (or pax atime/ctime on one)."""
    with tarfile.open(fileobj=src, mode="r|") as tf:
        for m in tf:
            if _is_whiteout(m.name) and (int(m.mtime) != epoch or any(k in m.pax_headers for k in _DROPPED_PAX)):
                return True
    return False


def normalise_layer(src: IO[bytes], dst: IO[bytes], *, epoch: int) -> str:
    """Copy a layer tar with every whiteout's mtime set to ``epoch`` and pax atime/ctime dropped, entries in
    the same order; return the diff ID of what was written."""
    out = _HashingStream(dst)
    with tarfile.open(fileobj=src, mode="r|") as tin, \
            tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tout:
        for m in tin:
            m.pax_headers = {k: v for k, v in m.pax_headers.items() if k not in _DROPPED_PAX}
            if _is_whiteout(m.name):
                m.mtime = epoch
            if m.isreg():
                tout.addfile(m, tin.extractfile(m))
            else:
                tout.addfile(m)
    return "sha256:" + out.sha.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Saved:
    """What `docker save` wrote for one image."""

    config: dict[str, Any]
    layers: tuple[str, ...]  # archive member of each layer tar, base first
    diff_ids: tuple[str, ...]


def read_saved(tar: tarfile.TarFile) -> Saved:
    manifest = json.loads(_member(tar, "manifest.json"))
    if len(manifest) != 1:
        raise ValueError(f"expected one image in the archive, found {len(manifest)}")
    config = json.loads(_member(tar, manifest[0]["Config"]))
    diff_ids = tuple(str(d) for d in config["rootfs"]["diff_ids"])
    layers = tuple(str(x) for x in manifest[0]["Layers"])
    if len(diff_ids) != len(layers):
        raise ValueError("the archive's manifest and config disagree on the number of layers")
    return Saved(config=config, layers=layers, diff_ids=diff_ids)


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise KeyError(name)
    return f.read()


def thin_archive(dest: Path, *, config: dict[str, Any], tag: str, parent_layers: Sequence[str],
                 own: Sequence[tuple[str, Path]]) -> None:
    """A `docker load` archive of an image whose parent layers the engine already has: they are named in the
    manifest (with their diff IDs in the config) but not included; ``own`` = (diff ID, layer tar) to include."""
    own_names = [f"own-{i}/layer.tar" for i in range(len(own))]
    config = {**config, "rootfs": {"type": "layers", "diff_ids": [*config["rootfs"]["diff_ids"][:len(parent_layers)],
                                                                  *(d for d, _ in own)]}}
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [*parent_layers, *own_names]}]
    with tarfile.open(dest, "w") as tf:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        add(config_name, config_bytes)
        for name, (_, path) in zip(own_names, own, strict=True):
            tf.add(str(path), arcname=name)
        add("manifest.json", json.dumps(manifest).encode())


_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


def is_opaque(path: str) -> bool | None:
    """Whether overlay2 marks the folder ``path`` opaque (it hides the layers below); None when the filesystem
    will not say (an xattr it cannot read, or trusted.* on one that does not support it)."""
    for key in _OPAQUE_XATTRS:
        try:
            if os.getxattr(path, key, follow_symlinks=False) == b"y":
                return True
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP) or (
                    exc.errno == errno.ENOTSUP and key.startswith("trusted.")):
                return None
    return False


def _dir_has_whiteout(root: str) -> bool | None:
    """Whether an overlay2 diff folder holds a whiteout or an opaque folder; None when it cannot tell."""
    unreadable: list[OSError] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable.append):
        for name in (dirpath, *(os.path.join(dirpath, d) for d in dirnames)):
            if name != root and os.path.islink(name):
                continue
            opaque = is_opaque(name)
            if opaque is None:
                return None  # a question the filesystem would not answer: cannot tell
            if opaque:
                return True
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                return None
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                return True
    return None if unreadable else False


def own_layers_have_whiteouts(layer_dirs: Sequence[str], layers: int, parent_layers: int) -> bool | None:
    """From overlay2's diff folders (top first, one per layer of ``layers``): whether the layers above the first
    ``parent_layers`` hold a whiteout; None when it cannot tell (folders missing, unreadable, not one per layer)."""
    own = layers - parent_layers
    if own < 0 or len(layer_dirs) != layers:
        return None
    found = False
    for d in layer_dirs[:own]:
        if not os.path.isdir(d):
            return None
        answer = _dir_has_whiteout(d)
        if answer is None:
            return None
        found = found or answer
    return found


def settle_whiteouts(engine: Engine, ref: str, *, parent_layers: int, scratch: Path, epoch: int) -> bool:
    """Rewrite the whiteouts of ``ref``'s own layers (those after the first ``parent_layers``) and load the
    result under the same tag; False when there was nothing to rewrite. The image as built is removed.
    Where overlay2's folders show no whiteout in those layers (see the module's text), nothing is saved."""
    if engine.address.startswith("unix://") and os.geteuid() == 0:  # trusted.* xattrs are hidden from others
        info = engine.inspect_image(ref)
        if info.storage_driver == "overlay2" and own_layers_have_whiteouts(
                info.layer_dirs, len(info.layers), parent_layers) is False:
            return False
    with tempfile.TemporaryDirectory(prefix="settle-", dir=scratch) as tmp:
        work = Path(tmp)
        saved_tar = work / "image.tar"
        engine.save(ref, saved_tar)
        with tarfile.open(saved_tar) as tar:
            saved = read_saved(tar)
            own_members = saved.layers[parent_layers:]
            todo = []
            for member in own_members:
                f = tar.extractfile(member)
                assert f is not None
                todo.append(needs_settling(f, epoch=epoch))
            if not any(todo):
                return False
            rewritten: list[tuple[str, Path]] = []
            for i, member in enumerate(own_members):
                f = tar.extractfile(member)
                assert f is not None
                out_path = work / f"own-{i}.tar"
                with out_path.open("wb") as out:
                    rewritten.append((normalise_layer(f, out, epoch=epoch), out_path))
        before = engine.image_id(ref)
        thin = work / "thin.tar"
        thin_archive(thin, config=saved.config, tag=ref, parent_layers=saved.layers[:parent_layers], own=rewritten)
        engine.load(thin)
        after = engine.image_id(ref)
        if before and after and before != after:
            # The tag moved to the loaded image: the one the build made has no name left, and nothing
            # builds on it yet (children are built after this returns).
            engine.remove_image(before)
    return True
