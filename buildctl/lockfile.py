"""The lock file (pins/<stack>.lock.json): data model, canonical JSON, atomic write.

Format (schema 1), keys sorted, two-space indent, one trailing newline:

    {"schema": 1, "stack": "demo", "manifest_sha256": "<sha256 of the manifest file>",
     "variants": {"<name>": {"base": {...}, "apt": {...}, "downloads": {...}, "pip": [...],
                             "build_pip": {...}, "components": {...}, "resolved_at": "..."}}}

``resolved_at`` and each component's ``branch_head`` are informational and excluded from
``VariantLock.digest()``, the value that node keys and image tags use, so that re-locking with nothing
changed (or with only a branch head moved) keeps every key.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildctl.errors import LockError

SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class LockedBase:
    ref: str  # as written in the manifest, e.g. nvcr.io/nvidia/pytorch:25.09-py3
    digest: str  # manifest digest from the registry, sha256:...
    platform: str


@dataclass(frozen=True, kw_only=True)
class LockedPip:
    name: str  # canonical name
    version: str  # exact version
    hashes: tuple[str, ...] = ()  # "sha256:<hex>" of the files pip may install for this platform
    in_base: bool = False  # already satisfied by the base image (nothing installed)


@dataclass(frozen=True, kw_only=True)
class LockedDownload:
    name: str
    url: str
    sha256: str
    computed: bool = False  # true when the lock computed it (manifest said sha256: compute)


@dataclass(frozen=True, kw_only=True)
class LockedComponent:
    name: str
    repo: str
    commit: str  # full 40-hex SHA of the manifest's commit
    prs: Mapping[str, str] = field(default_factory=dict)  # PR number (as text) -> head SHA
    patches: Mapping[str, str] = field(default_factory=dict)  # patch file -> sha256
    submodules: Mapping[str, str] = field(default_factory=dict)  # path -> SHA at `commit`
    tree: str = ""  # SHA of the commit made by applying prs and patches (== commit when none)
    # Head of the manifest's `branch` when locked: only what `lock --check` compares to say that the
    # branch moved. Not an input of any build (the commit is), so VariantLock.digest() leaves it out.
    branch_head: str = ""


@dataclass(frozen=True, kw_only=True)
class VariantLock:
    base: LockedBase
    apt: Mapping[str, str] = field(default_factory=dict)  # package -> exact version (runtime + cudnn)
    build_apt: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # component -> package -> version
    downloads: Mapping[str, LockedDownload] = field(default_factory=dict)
    pip: tuple[LockedPip, ...] = ()
    build_pip: Mapping[str, tuple[LockedPip, ...]] = field(default_factory=dict)  # component -> pins
    components: Mapping[str, LockedComponent] = field(default_factory=dict)
    resolved_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "base": {"ref": self.base.ref, "digest": self.base.digest, "platform": self.base.platform},
            "apt": dict(sorted(self.apt.items())),
            "build_apt": {c: dict(sorted(p.items())) for c, p in sorted(self.build_apt.items())},
            "downloads": {n: {"url": d.url, "sha256": d.sha256, "computed": d.computed}
                          for n, d in sorted(self.downloads.items())},
            "pip": [_pip_json(p) for p in self.pip],
            "build_pip": {c: [_pip_json(p) for p in ps] for c, ps in sorted(self.build_pip.items())},
            "components": {n: {"repo": c.repo, "commit": c.commit, "prs": dict(c.prs),
                               "patches": dict(c.patches), "submodules": dict(c.submodules), "tree": c.tree,
                               "branch_head": c.branch_head}
                           for n, c in sorted(self.components.items())},
            "resolved_at": self.resolved_at,
        }

    def digest(self) -> str:
        """Hash of what was resolved (not when): the 'lock hash' in tags and labels."""
        data = self.to_json()
        data.pop("resolved_at")
        for c in data["components"].values():
            c.pop("branch_head")
        return hashlib.sha256(canonical(data).encode()).hexdigest()

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> VariantLock:
        b = data["base"]
        return VariantLock(
            base=LockedBase(ref=b["ref"], digest=b["digest"], platform=b["platform"]),
            apt=dict(data.get("apt", {})),
            build_apt={c: dict(p) for c, p in data.get("build_apt", {}).items()},
            downloads={n: LockedDownload(name=n, url=d["url"], sha256=d["sha256"], computed=d.get("computed", False))
                       for n, d in data.get("downloads", {}).items()},
            pip=tuple(_pip_from(p) for p in data.get("pip", [])),
            build_pip={c: tuple(_pip_from(p) for p in ps) for c, ps in data.get("build_pip", {}).items()},
            components={n: LockedComponent(name=n, repo=c["repo"], commit=c["commit"], prs=dict(c.get("prs", {})),
                                           patches=dict(c.get("patches", {})),
                                           submodules=dict(c.get("submodules", {})), tree=c.get("tree", ""),
                                           branch_head=c.get("branch_head", ""))
                        for n, c in data.get("components", {}).items()},
            resolved_at=data.get("resolved_at", ""),
        )


def _pip_json(p: LockedPip) -> dict[str, Any]:
    return {"name": p.name, "version": p.version, "hashes": list(p.hashes), "in_base": p.in_base}


def _pip_from(d: Mapping[str, Any]) -> LockedPip:
    return LockedPip(name=d["name"], version=d["version"], hashes=tuple(d.get("hashes", ())),
                     in_base=d.get("in_base", False))


@dataclass(frozen=True, kw_only=True)
class Lock:
    stack: str
    manifest_sha256: str
    variants: Mapping[str, VariantLock]
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "stack": self.stack, "manifest_sha256": self.manifest_sha256,
                "variants": {n: v.to_json() for n, v in sorted(self.variants.items())}}

    @staticmethod
    def from_json(data: Mapping[str, Any], source: str = "<lock>") -> Lock:
        try:
            if data.get("schema") != SCHEMA:
                raise LockError(f"{source}: lock schema {data.get('schema')!r} is not supported",
                                fix=f"re-create it with `buildctl lock {data.get('stack', 'STACK')}`")
            return Lock(stack=data["stack"], manifest_sha256=data["manifest_sha256"],
                        variants={n: VariantLock.from_json(v) for n, v in data["variants"].items()})
        except (KeyError, TypeError, AttributeError) as exc:
            raise LockError(f"{source}: malformed lock file (missing or wrong {exc})",
                            fix="re-create it with `buildctl lock STACK`") from exc


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def lock_path(manifest_path: Path) -> Path:
    return manifest_path.with_name(manifest_path.name.removesuffix(".yaml") + ".lock.json")


def read(path: Path) -> Lock | None:
    """The lock at ``path``, or None when there is none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return Lock.from_json(json.loads(text), str(path))
    except json.JSONDecodeError as exc:
        raise LockError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}",
                        fix="restore it from git, or re-create it with `buildctl lock STACK`") from exc


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(path: Path, lock: Lock) -> None:
    write_atomic(path, json.dumps(lock.to_json(), indent=2, sort_keys=True) + "\n")
