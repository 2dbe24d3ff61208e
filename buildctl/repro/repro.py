"""Comparing two builds of one node, from their `docker save` archives (pure: files in, values out).

Three answers per node, strongest first:

- **bit-identical**: the node's own layers have the same diff IDs (sha256 of the uncompressed layer tar)
  and its image config says the same thing (build times and ids aside);
- **semantically identical**: the layers differ, but only in what carries no meaning: mtimes (and tar
  headers: atime/ctime, entry order), and build metadata left behind (compiled .pyc, apt/pip caches,
  logs, ldconfig's aux-cache); files, modes, owners, links, packages and config agree;
- **different**: anything else, with the files added/removed/changed (sizes, sha256), the packages
  (dpkg status, Python dist-info METADATA) and the config fields that differ, and the cause where it can be
  named: timestamps, build metadata, a floating input (a package version or a floating fetch's file differs),
  a non-deterministic compile (a shared object / wheel differs with identical inputs), different inputs.

A node's *own* layers are the ones after its parent's (its image = parent layers + own layers). Whiteouts
(``.wh.<name>``, ``.wh..wh..opq``) are part of what a node does and are compared like files.

Nothing here talks to the engine: the caller hands in the archives (``SavedImages``, read by archive.py)
and the diff IDs that belong to the node. Layers are read as streams (a 20 GB NGC base is never held in memory); file
contents are hashed on the way, and only what the package and wheel views need is kept.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, assert_never

from buildctl.labels import CREATED_LABEL, LOCK_LABEL
from buildctl.manifest.model import ReproLevel
from buildctl.repro.archive import Entry, ImageConfig, SavedImages, Tree, packages

REPORT_SCHEMA = 1


class Verdict(StrEnum):
    BIT = "bit-identical"
    SEMANTIC = "semantically identical"
    DIFFERENT = "different"


class Cause(StrEnum):
    TIMESTAMPS = "timestamps"  # same content, other mtimes
    ARCHIVE = "archive headers"  # same entries and mtimes; the tar differs (entry order, atime/ctime)
    BUILD_METADATA = "build metadata"  # pyc, caches, logs left behind
    FLOATING_INPUT = "floating input"  # a package version differs, or a file a floating fetch produced
    NONDETERMINISTIC_COMPILE = "non-deterministic compile"  # a .so / wheel differs with identical inputs
    INPUTS = "different inputs"  # the node's key differs: its inputs were not the same in both builds
    UPSTREAM = "a node it builds on differs"  # e.g. assemble installing a wheel that differs
    CONFIG = "image config"  # env, labels, entrypoint, ... differ
    UNKNOWN = "unexplained content"


# What a cause means for the verdict: these leave a node semantically identical.
METADATA_CAUSES = frozenset({Cause.TIMESTAMPS, Cause.ARCHIVE, Cause.BUILD_METADATA})

# Paths (relative, no leading slash) whose content is a by-product of building, not part of what the image
# is: fnmatch patterns where * crosses folders.
BUILD_METADATA_PATTERNS: tuple[str, ...] = (
    "*.pyc", "*.pyo", "*/__pycache__", "*/__pycache__/*", "__pycache__",
    "var/cache/apt/*", "var/lib/apt/lists/*", "var/log/*",
    "var/cache/ldconfig/aux-cache", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
    "root/.cache/*", "root/.cache", "tmp/*", "var/tmp/*",
    "*.dist-info/INSTALLER", "*.dist-info/direct_url.json",
)

# Compiler output: a difference in one of these with identical inputs is a non-deterministic compile.
COMPILED_PATTERNS: tuple[str, ...] = ("*.so", "*.so.*", "*.o", "*.a", "*.whl", "*.cubin", "*.fatbin")

# Config fields that differ between any two builds (times, the build container, parent ids).
IGNORED_CONFIG = ("created", "container", "container_config", "hostname", "image", "parent", "docker_version",
                  "history")
# Labels that say when an image was built and from which lock, not what it is (with --relock the two builds
# come from two locks: the nodes that the difference reaches differ in content, and say so).
METADATA_LABELS = (CREATED_LABEL, LOCK_LABEL)


def is_build_metadata(path: str) -> bool:
    p = path.strip("/")
    return any(fnmatch.fnmatchcase(p, pat) for pat in BUILD_METADATA_PATTERNS)


def is_compiled(path: str) -> bool:
    name = posixpath.basename(path)
    return any(fnmatch.fnmatchcase(name, pat) for pat in COMPILED_PATTERNS)


# ---------------------------------------------------------------------------------------- comparing


ChangeKind = Literal["added", "removed", "changed", "mtime"]


@dataclass(frozen=True, kw_only=True)
class FileChange:
    path: str
    change: ChangeKind
    a: Entry | None
    b: Entry | None
    what: tuple[str, ...] = ()  # changed: which aspects (content, mode, owner, link, kind, xattrs)
    metadata: bool = False  # the path is build metadata (pyc, caches, logs)
    members: tuple[tuple[str, str], ...] = ()  # a wheel: (member, added|removed|changed)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": "/" + self.path, "change": self.change}
        if self.a is not None:
            out["a"] = self.a.state()
        if self.b is not None:
            out["b"] = self.b.state()
        if self.what:
            out["what"] = list(self.what)
        if self.metadata:
            out["metadata"] = True
        if self.members:
            out["members"] = [{"name": n, "change": c} for n, c in self.members]
        return out

    def line(self) -> str:
        p = "/" + self.path
        if self.change == "added":
            assert self.b is not None
            return f"+ {p}" + (f" ({self.b.size} B, sha256 {self.b.sha256[:12]})" if self.b.kind == "file" else
                               f" ({self.b.kind})")
        if self.change == "removed":
            assert self.a is not None
            return f"- {p}" + (f" ({self.a.size} B, sha256 {self.a.sha256[:12]})" if self.a.kind == "file" else
                               f" ({self.a.kind})")
        if self.change == "mtime":
            assert self.a is not None and self.b is not None
            return f"~ {p} mtime {self.a.mtime} -> {self.b.mtime}"
        assert self.a is not None and self.b is not None
        detail = []
        if "content" in self.what and self.a.kind == "file":
            detail.append(f"{self.a.size} B {self.a.sha256[:12]} -> {self.b.size} B {self.b.sha256[:12]}")
        detail += [w for w in self.what if w != "content"]
        if self.members:
            detail.append("members: " + ", ".join(f"{c} {n}" for n, c in self.members[:6])
                          + (" ..." if len(self.members) > 6 else ""))
        return f"* {p} " + "; ".join(detail)


@dataclass(frozen=True, kw_only=True)
class PackageChange:
    manager: Literal["deb", "python", "wheel"]
    name: str
    a: str | None
    b: str | None

    def line(self) -> str:
        return f"{self.manager} {self.name}: {self.a or '(none)'} -> {self.b or '(none)'}"


@dataclass(frozen=True, kw_only=True)
class ConfigChange:
    field: str  # "env", "labels.<name>", "entrypoint", ...
    a: Any
    b: Any
    metadata: bool = False

    def line(self) -> str:
        return f"{self.field}: {json.dumps(self.a)} -> {json.dumps(self.b)}"


def _member_changes(entry_a: Entry, entry_b: Entry) -> tuple[tuple[str, str], ...]:
    if entry_a.members is None or entry_b.members is None:
        return ()
    ma = {m.name: m for m in entry_a.members}
    mb = {m.name: m for m in entry_b.members}
    out = [(n, "removed") for n in sorted(set(ma) - set(mb))] + [(n, "added") for n in sorted(set(mb) - set(ma))]
    out += [(n, "changed") for n in sorted(set(ma) & set(mb)) if (ma[n].size, ma[n].sha256) != (mb[n].size, mb[n].sha256)]
    return tuple(sorted(out))


def diff_trees(tree_a: Tree, tree_b: Tree) -> list[FileChange]:
    out: list[FileChange] = []
    for path in sorted(set(tree_a.entries) | set(tree_b.entries)):
        ea, eb = tree_a.entries.get(path), tree_b.entries.get(path)
        meta = is_build_metadata(path)
        if ea is None:
            out.append(FileChange(path=path, change="added", a=None, b=eb, metadata=meta))
        elif eb is None:
            out.append(FileChange(path=path, change="removed", a=ea, b=None, metadata=meta))
        elif ea.meaning() != eb.meaning():
            what = []
            if ea.kind != eb.kind:
                what.append("kind")
            if (ea.size, ea.sha256, ea.members) != (eb.size, eb.sha256, eb.members):
                what.append("content")
            if ea.mode != eb.mode:
                what.append("mode")
            if (ea.uid, ea.gid) != (eb.uid, eb.gid):
                what.append("owner")
            if ea.link != eb.link:
                what.append("link")
            if ea.xattrs != eb.xattrs:
                what.append("xattrs")
            out.append(FileChange(path=path, change="changed", a=ea, b=eb, what=tuple(what), metadata=meta,
                                  members=_member_changes(ea, eb)))
        elif ea.mtime != eb.mtime or ea.sha256 != eb.sha256:
            # equal meaning: the mtime, or only a wheel's zip dates
            out.append(FileChange(path=path, change="mtime", a=ea, b=eb, metadata=meta))
    return out


def diff_packages(tree_a: Tree, tree_b: Tree) -> list[PackageChange]:
    pa, pb = packages(tree_a), packages(tree_b)
    out: list[PackageChange] = []
    managers: tuple[Literal["deb", "python", "wheel"], ...] = ("deb", "python", "wheel")
    for manager in managers:
        xa, xb = pa[manager], pb[manager]
        for name in sorted(set(xa) | set(xb)):
            if xa.get(name) != xb.get(name):
                out.append(PackageChange(manager=manager, name=name, a=xa.get(name), b=xb.get(name)))
    return out


def diff_config(config_a: ImageConfig, config_b: ImageConfig) -> list[ConfigChange]:
    out: list[ConfigChange] = []
    fa, fb = config_a.fields(), config_b.fields()
    for k in fa:
        if fa[k] != fb[k]:
            out.append(ConfigChange(field=k, a=fa[k], b=fb[k]))
    for k in sorted(set(config_a.labels) | set(config_b.labels)):
        if config_a.labels.get(k) != config_b.labels.get(k):
            out.append(ConfigChange(field=f"labels.{k}", a=config_a.labels.get(k), b=config_b.labels.get(k),
                                    metadata=k in METADATA_LABELS))
    return out


# --------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, kw_only=True)
class Side:
    """One build's view of a node: its own layers' diff IDs, its key, its config, and where its layers are."""

    ref: str
    key: str
    diff_ids: tuple[str, ...]
    config: ImageConfig
    archive: SavedImages | None = None  # needed only when the diff IDs differ


@dataclass(frozen=True, kw_only=True)
class Floating:
    """A floating input the audit found for a node: by package name, or by the paths its fetch writes."""

    what: str  # "pip tomli (unpinned in the manifest)"
    packages: tuple[str, ...] = ()  # canonical names
    paths: tuple[str, ...] = ()  # fnmatch patterns of absolute paths it produces


@dataclass(frozen=True, kw_only=True)
class LayerPair:
    a: str
    b: str

    @property
    def same(self) -> bool:
        return self.a == self.b


@dataclass(frozen=True, kw_only=True)
class NodeReport:
    node: str
    kind: str
    level: ReproLevel | None  # what the manifest declares for it
    verdict: Verdict
    causes: tuple[Cause, ...]
    layers: tuple[LayerPair, ...]
    files: tuple[FileChange, ...] = ()
    packages: tuple[PackageChange, ...] = ()
    config: tuple[ConfigChange, ...] = ()
    notes: tuple[str, ...] = ()
    refs: tuple[str, str] = ("", "")
    keys: tuple[str, str] = ("", "")

    @property
    def meets_level(self) -> bool:
        level = self.level
        if level is None or level is ReproLevel.INPUTS:
            return True
        if level is ReproLevel.BIT:
            return self.verdict is Verdict.BIT
        if level is ReproLevel.SEMANTIC:
            return self.verdict is not Verdict.DIFFERENT
        assert_never(level)

    def metadata_summary(self) -> list[str]:
        """What differs, in words, when it is only metadata."""
        out: list[str] = []
        mtimes = [f for f in self.files if f.change == "mtime"]
        meta = [f for f in self.files if f.change != "mtime" and f.metadata]
        if mtimes:
            out.append(f"mtimes of {len(mtimes)} path(s), e.g. /{mtimes[0].path}")
        if meta:
            out.append(f"build metadata: {len(meta)} path(s), e.g. " + ", ".join("/" + f.path for f in meta[:3]))
        if Cause.ARCHIVE in self.causes:
            out.append("tar headers (entry order, atime/ctime)")
        out += [f"config {c.field} (build metadata)" for c in self.config if c.metadata]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "kind": self.kind, "level": self.level.value if self.level else None,
            "verdict": self.verdict.value, "meets_level": self.meets_level,
            "causes": [c.value for c in self.causes],
            "layers": [{"a": p.a, "b": p.b, "same": p.same} for p in self.layers],
            "files": [f.to_json() for f in self.files if f.change != "mtime"],
            "mtime_only": len([f for f in self.files if f.change == "mtime"]),
            "packages": [{"manager": p.manager, "name": p.name, "a": p.a, "b": p.b} for p in self.packages],
            "config": [{"field": c.field, "a": c.a, "b": c.b, "metadata": c.metadata} for c in self.config],
            "metadata_only": self.metadata_summary() if self.verdict is Verdict.SEMANTIC else [],
            "notes": list(self.notes), "refs": list(self.refs), "keys": list(self.keys),
        }


def _matches_floating(path: str, floating: Sequence[Floating]) -> Floating | None:
    p = "/" + path
    for f in floating:
        if any(fnmatch.fnmatchcase(p, pat) for pat in f.paths):
            return f
    return None


def compare_node(*, node: str, kind: str, level: ReproLevel | None, side_a: Side, side_b: Side,
                 floating: Sequence[Floating] = (), upstream: Sequence[str] = ()) -> NodeReport:
    """The verdict on one node from its two builds (see the module docstring).

    ``upstream``: the nodes it builds on (its graph parents) that were not bit-identical themselves.
    """
    layers = tuple(LayerPair(a=x, b=y) for x, y in zip(side_a.diff_ids, side_b.diff_ids, strict=False))
    layers += tuple(LayerPair(a=x, b="") for x in side_a.diff_ids[len(side_b.diff_ids):])
    layers += tuple(LayerPair(a="", b=y) for y in side_b.diff_ids[len(side_a.diff_ids):])
    config = tuple(diff_config(side_a.config, side_b.config))
    common: dict[str, Any] = {"node": node, "kind": kind, "level": level, "layers": layers, "config": config,
                              "refs": (side_a.ref, side_b.ref), "keys": (side_a.key, side_b.key)}
    config_causes = (Cause.CONFIG,) if any(not c.metadata for c in config) else ()
    inputs = (Cause.INPUTS,) if side_a.key != side_b.key else ()
    if side_a.diff_ids == side_b.diff_ids:
        verdict = Verdict.DIFFERENT if config_causes else Verdict.BIT
        return NodeReport(verdict=verdict, causes=inputs + config_causes, **common)
    if side_a.archive is None or side_b.archive is None:
        raise ValueError(f"node {node}: the layers differ and no archive was given to explain why")
    ta, tb = side_a.archive.tree(side_a.diff_ids), side_b.archive.tree(side_b.diff_ids)
    files = diff_trees(ta, tb)
    pkgs = diff_packages(ta, tb)
    causes: list[Cause] = list(inputs)
    notes: list[str] = []
    real = [f for f in files if f.change != "mtime" and not f.metadata]
    if any(f.change == "mtime" for f in files):
        causes.append(Cause.TIMESTAMPS)
    if any(f.change != "mtime" and f.metadata for f in files):
        causes.append(Cause.BUILD_METADATA)
    if not files:
        causes.append(Cause.ARCHIVE)
        notes.append("the layers hold the same entries with the same mtimes; their tars differ in "
                     + ("headers (atime/ctime, owner names) or entry order" if ta.headers != tb.headers
                        else "layout"))
    floating_named: list[str] = []
    package_names = {p.name for p in pkgs}
    for f in floating:
        if package_names & set(f.packages):
            floating_named.append(f.what)
    for fc in real:
        hit = _matches_floating(fc.path, floating)
        if hit is not None and hit.what not in floating_named:
            floating_named.append(hit.what)
    if pkgs or floating_named:
        causes.append(Cause.FLOATING_INPUT)
        notes += [f"floating input: {w}" for w in floating_named]
    compiled = [f for f in real if f.change == "changed" and "content" in f.what
                and (is_compiled(f.path) or any(is_compiled(m) for m, _ in f.members))]
    if compiled and not inputs and not pkgs:
        causes.append(Cause.NONDETERMINISTIC_COMPILE)
        notes.append("compiler output differs with identical inputs: " + ", ".join("/" + f.path for f in compiled[:4]))
    explained = {Cause.FLOATING_INPUT, Cause.NONDETERMINISTIC_COMPILE, Cause.INPUTS}
    if real and not explained.intersection(causes):
        if upstream:
            causes.append(Cause.UPSTREAM)
            notes.append("builds on " + ", ".join(upstream) + ", which differ(s) between the builds")
        else:
            causes.append(Cause.UNKNOWN)
    causes += config_causes
    verdict = Verdict.DIFFERENT if real or pkgs or config_causes else Verdict.SEMANTIC
    return NodeReport(verdict=verdict, causes=tuple(dict.fromkeys(causes)), files=tuple(files), packages=tuple(pkgs),
                      notes=tuple(notes), **common)


# -------------------------------------------------------------------------------------------- report


@dataclass(frozen=True, kw_only=True)
class ReproReport:
    stack: str
    variant: str
    mode: Literal["lock", "relock"]
    nodes: tuple[NodeReport, ...]
    audit: tuple[dict[str, Any], ...] = ()  # the input audit's findings (audit.AuditFinding.to_json())
    notes: tuple[str, ...] = ()
    backend: str = "classic"  # how both builds built their images (classic or buildkit)
    compiles: str = ""  # how the two builds compiled: build b warm from a's compiler cache, or both cold

    @property
    def failures(self) -> list[NodeReport]:
        return [n for n in self.nodes if not n.meets_level]

    def to_json(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "stack": self.stack, "variant": self.variant, "mode": self.mode,
                "ok": not self.failures, "nodes": [n.to_json() for n in self.nodes], "audit": list(self.audit),
                "notes": list(self.notes), "backend": self.backend, "compiles": self.compiles}


def render_text(report: ReproReport, *, limit: int = 12) -> list[str]:
    """Plain lines for the terminal: one block per node that is not bit-identical."""
    lines: list[str] = []
    for n in report.nodes:
        declared = f" (declared {n.level.value})" if n.level else ""
        mark = "" if n.meets_level else "  <- below its declared level"
        lines.append(f"{n.node}: {n.verdict.value}{declared}{mark}")
        if n.verdict is Verdict.SEMANTIC:
            lines += [f"    differs only in {m}" for m in n.metadata_summary()]
        if n.verdict is Verdict.DIFFERENT:
            lines.append("    cause: " + ", ".join(c.value for c in n.causes))
            lines += [f"    {note}" for note in n.notes]
            lines += [f"    {p.line()}" for p in n.packages[:limit]]
            shown = [f for f in n.files if f.change != "mtime" and not f.metadata]
            lines += [f"    {f.line()}" for f in shown[:limit]]
            if len(shown) > limit:
                lines.append(f"    ... and {len(shown) - limit} more path(s) (--json lists them all)")
            lines += [f"    {c.line()}" for c in n.config if not c.metadata]
    return lines


def own_layers(image: Sequence[str], parent: Sequence[str]) -> tuple[str, ...]:
    """The diff IDs a node adds to its parent's (its image's layers after the parent's)."""
    if tuple(image[: len(parent)]) != tuple(parent):
        raise ValueError("the image does not start with its parent's layers")
    return tuple(image[len(parent):])


def find(nodes: Iterable[NodeReport], name: str) -> NodeReport:
    for n in nodes:
        if n.node == name:
            return n
    raise KeyError(name)

