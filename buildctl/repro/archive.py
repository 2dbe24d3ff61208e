"""Reading `docker save` archives: layer contents as streamed, hashed entries, merged trees, image configs, and the packages a tree holds."""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal

EntryKind = Literal["file", "dir", "symlink", "hardlink", "whiteout", "opaque", "other"]


# ------------------------------------------------------------------------------------ layer contents


@dataclass(frozen=True, kw_only=True)
class Member:
    """One member of a zip archive (a wheel), as far as its meaning goes."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One path as a node's own layers leave it."""

    path: str  # relative, no leading "./" or "/"
    kind: EntryKind
    mode: int = 0
    uid: int = 0
    gid: int = 0
    size: int = 0
    sha256: str = ""  # files only
    link: str = ""  # symlink target, or the path a hard link points at
    mtime: int = 0
    xattrs: Mapping[str, str] = field(default_factory=dict)
    members: tuple[Member, ...] | None = None  # a wheel's contents (zip dates ignored)

    def meaning(self) -> tuple[object, ...]:
        """Everything but the mtime (and zip-internal dates)."""
        content = tuple((m.name, m.size, m.sha256) for m in self.members) if self.members is not None else self.sha256
        return (self.kind, self.mode, self.uid, self.gid, self.size, content, self.link,
                tuple(sorted(self.xattrs.items())))

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "mode": f"{self.mode:04o}", "owner": f"{self.uid}:{self.gid}",
                               "mtime": self.mtime}
        if self.kind == "file":
            out.update(size=self.size, sha256=self.sha256)
        if self.link:
            out["link"] = self.link
        return out


@dataclass(frozen=True, kw_only=True)
class Tree:
    """The merged view of a node's own layers: path -> entry, plus the small files the package views read."""

    entries: Mapping[str, Entry]
    texts: Mapping[str, bytes]  # dpkg status, dist-info METADATA (also of wheels: "<wheel path>!<member>")
    headers: tuple[tuple[str, str], ...]  # (layer, fingerprint of headers + order): tells ARCHIVE apart


_KEEP_TEXT = (re.compile(r"(^|/)var/lib/dpkg/status\Z"), re.compile(r"\.dist-info/METADATA\Z"))
_MAX_TEXT = 16 << 20


def _keep_text(path: str) -> bool:
    return any(p.search(path) for p in _KEEP_TEXT)


def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _wheel_members(data: IO[bytes]) -> tuple[tuple[Member, ...], dict[str, bytes]]:
    """The members of a wheel (sorted by name) and its METADATA texts."""
    members: list[Member] = []
    texts: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(data) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                h = hashlib.sha256()
                with zf.open(info) as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                members.append(Member(name=info.filename, size=info.file_size, sha256=h.hexdigest()))
                if info.filename.endswith(".dist-info/METADATA") and info.file_size < _MAX_TEXT:
                    texts[info.filename] = zf.read(info)
    except zipfile.BadZipFile:
        return (), {}
    return tuple(sorted(members, key=lambda m: m.name)), texts


def read_layer(fileobj: IO[bytes], *, layer: str = "") -> tuple[list[Entry], dict[str, bytes], str]:
    """Entries of one layer tar, in archive order, the kept texts, and a fingerprint of its headers.

    The fingerprint covers what a diff ID sees besides contents and mtimes (entry order, pax atime/ctime,
    user/group names), so that two layers with equal entries can still be told apart and explained.
    """
    entries: list[Entry] = []
    texts: dict[str, bytes] = {}
    fp = hashlib.sha256()
    with tarfile.open(fileobj=fileobj, mode="r|") as tf:
        for m in tf:
            path = _norm(m.name)
            if not path:
                continue  # the layer's root entry ("./")
            pax = {k: v for k, v in m.pax_headers.items()}
            xattrs = {k: v for k, v in pax.items() if k.startswith("SCHILY.xattr.")}
            fp.update(json.dumps([path, m.uname, m.gname, pax.get("atime", ""), pax.get("ctime", "")]).encode())
            base = posixpath.basename(path)
            folder = posixpath.dirname(path)
            common: dict[str, Any] = {"mode": m.mode, "uid": m.uid, "gid": m.gid, "mtime": int(m.mtime),
                                      "xattrs": xattrs}
            if base == ".wh..wh..opq":
                entries.append(Entry(path=folder, kind="opaque", **common))
                continue
            if base.startswith(".wh."):
                entries.append(Entry(path=posixpath.join(folder, base[4:]), kind="whiteout", **common))
                continue
            if m.isreg():
                f = tf.extractfile(m)
                assert f is not None
                h = hashlib.sha256()
                keep = _keep_text(path) and m.size < _MAX_TEXT
                wheel = path.endswith(".whl")
                buf = io.BytesIO() if (keep or wheel) else None
                for chunk in iter(partial(f.read, 1 << 20), b""):
                    h.update(chunk)
                    if buf is not None:
                        buf.write(chunk)
                members = None
                if buf is not None and keep:
                    texts[path] = buf.getvalue()
                if buf is not None and wheel:
                    buf.seek(0)
                    found, inner = _wheel_members(buf)
                    members = found or None
                    texts.update({f"{path}!{k}": v for k, v in inner.items()})
                entries.append(Entry(path=path, kind="file", size=m.size, sha256=h.hexdigest(), members=members,
                                     **common))
            elif m.isdir():
                entries.append(Entry(path=path, kind="dir", **common))
            elif m.issym():
                entries.append(Entry(path=path, kind="symlink", link=m.linkname, **common))
            elif m.islnk():
                entries.append(Entry(path=path, kind="hardlink", link=_norm(m.linkname), **common))
            else:
                entries.append(Entry(path=path, kind="other", link=f"{m.type!r} {m.devmajor}:{m.devminor}",
                                     **common))
    return entries, texts, fp.hexdigest()


def merge(layers: Iterable[tuple[str, list[Entry], dict[str, bytes], str]]) -> Tree:
    """Apply a node's own layers in order: later entries win, whiteouts remove what earlier own layers
    added (and stay, as what this node removes from its parent)."""
    entries: dict[str, Entry] = {}
    texts: dict[str, bytes] = {}
    headers: list[tuple[str, str]] = []
    for name, layer, layer_texts, fingerprint in layers:
        headers.append((name, fingerprint))
        for e in layer:
            if e.kind in ("whiteout", "opaque"):
                prefix = e.path + "/"
                for p in [p for p in entries if p.startswith(prefix) or (e.kind == "whiteout" and p == e.path)]:
                    del entries[p]
                    texts.pop(p, None)
                if e.kind == "opaque":
                    entries[e.path + "/.wh..wh..opq"] = e
                    continue
            entries[e.path] = e
        texts.update(layer_texts)
    return Tree(entries=entries, texts=texts, headers=tuple(headers))


# ----------------------------------------------------------------------------------- image archives


@dataclass(frozen=True, kw_only=True)
class ImageConfig:
    """What an image's config says about the image (times and build ids are not here)."""

    env: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    workdir: str = ""
    user: str = ""
    exposed_ports: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    shell: tuple[str, ...] | None = None
    stop_signal: str = ""

    @staticmethod
    def from_json(config: Mapping[str, Any]) -> ImageConfig:
        c = config.get("config") or config.get("Config") or {}

        def seq(value: Any) -> tuple[str, ...] | None:
            return None if value is None else tuple(str(x) for x in value)

        return ImageConfig(
            env=tuple(str(x) for x in c.get("Env") or ()),
            labels={str(k): str(v) for k, v in (c.get("Labels") or {}).items()},
            entrypoint=seq(c.get("Entrypoint")),
            cmd=seq(c.get("Cmd")),
            workdir=str(c.get("WorkingDir") or ""),
            user=str(c.get("User") or ""),
            exposed_ports=tuple(sorted(c.get("ExposedPorts") or ())),
            volumes=tuple(sorted(c.get("Volumes") or ())),
            shell=seq(c.get("Shell")),
            stop_signal=str(c.get("StopSignal") or ""),
        )

    def fields(self) -> dict[str, Any]:
        return {
            "env": list(self.env), "entrypoint": list(self.entrypoint) if self.entrypoint is not None else None,
            "cmd": list(self.cmd) if self.cmd is not None else None, "workdir": self.workdir, "user": self.user,
            "exposed_ports": list(self.exposed_ports), "volumes": list(self.volumes),
            "shell": list(self.shell) if self.shell is not None else None, "stop_signal": self.stop_signal,
        }


@dataclass(frozen=True, kw_only=True)
class SavedImage:
    config: ImageConfig
    diff_ids: tuple[str, ...]
    layer_members: tuple[str, ...]  # archive member of each layer tar, in diff-id order
    tags: tuple[str, ...]


class SavedImages:
    """A `docker save` archive (one or more images): configs, diff IDs, and layer tars to stream."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.images: list[SavedImage] = []
        self._by_diff: dict[str, str] = {}
        with tarfile.open(path) as tf:
            manifest = json.loads(_read(tf, "manifest.json"))
            for item in manifest:
                config = json.loads(_read(tf, item["Config"]))
                diff_ids = tuple(str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or ())
                layers = tuple(str(x) for x in item.get("Layers") or ())
                if len(layers) != len(diff_ids):
                    raise ValueError(f"{path}: {item['Config']} lists {len(diff_ids)} diff IDs for {len(layers)} layers")
                self.images.append(SavedImage(config=ImageConfig.from_json(config), diff_ids=diff_ids,
                                              layer_members=layers, tags=tuple(item.get("RepoTags") or ())))
                self._by_diff.update(zip(diff_ids, layers, strict=True))

    def image(self, tag: str | None = None) -> SavedImage:
        if tag is None:
            if len(self.images) != 1:
                raise KeyError(f"{self.path} holds {len(self.images)} images: name one")
            return self.images[0]
        for img in self.images:
            if tag in img.tags:
                return img
        raise KeyError(f"{self.path} has no image tagged {tag}")

    @contextmanager
    def layer(self, diff_id: str) -> Iterator[IO[bytes]]:
        member = self._by_diff[diff_id]
        with tarfile.open(self.path) as tf:
            f = tf.extractfile(member)
            if f is None:
                raise KeyError(f"{self.path}: {member} is not a file")
            yield f

    def tree(self, diff_ids: Sequence[str]) -> Tree:
        layers = []
        for d in diff_ids:
            with self.layer(d) as f:
                entries, texts, fp = read_layer(f, layer=d)
            layers.append((d, entries, texts, fp))
        return merge(layers)


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise KeyError(name)
    return f.read()


# ------------------------------------------------------------------------------------------ packages


def dpkg_versions(status: bytes) -> dict[str, str]:
    """Installed packages (name[:arch] -> version) from a dpkg status file."""
    out: dict[str, str] = {}
    for para in status.decode("utf-8", "replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in para.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
        name, version = fields.get("Package"), fields.get("Version")
        if not name or not version or not fields.get("Status", "").endswith(" installed"):
            continue
        arch = fields.get("Architecture", "")
        out[f"{name}:{arch}" if arch and arch not in ("all",) and fields.get("Multi-Arch") == "same" else name] = version
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def metadata_version(text: bytes) -> tuple[str, str] | None:
    name = version = ""
    for line in text.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break  # headers end at the first blank line; the description follows
        k, _, v = line.partition(":")
        if k == "Name":
            name = v.strip()
        elif k == "Version":
            version = v.strip()
    return (_canonical(name), version) if name and version else None


def packages(tree: Tree) -> dict[str, dict[str, str]]:
    """{"deb": {name: version}, "python": {name: version}, "wheel": {name: version}} of what the node's
    layers hold: the dpkg status it wrote, dist-info it installed, wheels it contains."""
    deb: dict[str, str] = {}
    python: dict[str, str] = {}
    wheel: dict[str, str] = {}
    for path, text in sorted(tree.texts.items()):
        if path.endswith("var/lib/dpkg/status") and path in tree.entries:
            deb.update(dpkg_versions(text))
        elif "!" in path:
            nv = metadata_version(text)
            if nv and path.split("!", 1)[0] in tree.entries:
                wheel[nv[0]] = nv[1]
        elif path in tree.entries:
            nv = metadata_version(text)
            if nv:
                python[nv[0]] = nv[1]
    return {"deb": deb, "python": python, "wheel": wheel}
