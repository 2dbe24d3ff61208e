"""The one decider of what a build does: per node an action and why (pure, given an EngineState and a WheelCache).

For every node: its content tag, where it is (the local engine, the registry, nowhere, or unknown
when the engine or registry could not be asked), its action (have, pull, build; skip when a later node
is present; unknown when the engine or registry could not say), whether a present node is published to
the registry that lacks it, and for a node that is missing the reason, found by diffing its current
inputs against the record of the build that produced its previous key (``records.NodeRecord``). The
actions are found walking back from the final image: only ancestors of a node to build are looked at.
``buildctl plan`` prints this; ``buildctl build`` executes it and decides nothing of its own. The arch
check says when the variant's platform is not the engine's and what the engine would need to build it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl.errors import BuildctlError, EngineError, UnreachableError
from buildctl.graph.graph import Graph, Node, image_ref
from buildctl.graph.records import NodeRecord
from buildctl.imageref import ImageRef

NodeState = Literal["local", "registry", "missing", "unknown"]
# have: present (a wheel: in the wheel cache); pull: from the registry (a wheel: out of its image); build;
# skip: not needed, a later node is present; unknown: the engine or registry could not be asked
Action = Literal["have", "pull", "build", "skip", "unknown"]


class EngineState(Protocol):
    """What the plan asks of an engine (buildctl.engine.engine.Engine has all three)."""

    def image_exists(self, ref: str) -> bool: ...

    def registry_digest(self, ref: str) -> str | None: ...  # raises UnreachableError

    def platform(self) -> str: ...


class WheelCache(Protocol):
    """Where compiled wheels are kept by key (records.WheelFolder: ``<cache>/wheels/<component>/<key>/``)."""

    def find(self, node: Node) -> Path | None: ...  # the one wheel kept for this wheel node's key, or None


@dataclass(frozen=True, kw_only=True)
class NodePlan:
    node: Node
    ref: str
    state: NodeState
    provisional: bool  # the key changes once the stack is locked
    waits_for: tuple[str, ...] = ()  # unlocked inputs of its ancestors ("node: input") that its key waits for
    why: tuple[str, ...] = ()  # for a node to build: what changed since its previous build
    note: str = ""  # why the state is unknown
    action: Action = "unknown"
    because: str = ""  # why this action, in one line
    publish: bool = False  # present here, but the registry lacks it: pushed by the build
    untrusted: bool = False  # tagged in the engine without the record of a completed build: its image is removed
    wheel: Path | None = None  # a wheel node: the wheel kept in the wheel cache for its key
    remote: bool = False  # the final image, in the registry and left there (``load=False``): nothing pulls it
    # a wheel node whose current key was compiled here: (hits, misses) of its compiler cache, from its record
    compile_cache: tuple[int, int] | None = None

    @property
    def present(self) -> bool:
        return self.state in ("local", "registry")


@dataclass(frozen=True, kw_only=True)
class ArchCheck:
    variant_platform: str
    engine_platform: str
    emulation: bool | None  # an emulator for the variant's arch is registered on the engine host (None: unknown)

    @property
    def native(self) -> bool:
        return self.variant_platform == self.engine_platform

    def message(self) -> str:
        if self.native:
            return f"engine platform {self.engine_platform} matches the variant"
        arch = self.variant_platform.split("/")[-1]
        qemu = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
        have = {True: f"qemu-{qemu} is registered with binfmt_misc on this host: builds run emulated (slowly: "
                      "compiles take many times longer)",
                False: f"no qemu-{qemu} handler is registered with binfmt_misc on this host",
                None: "whether the engine host can emulate it is unknown"}[self.emulation]
        return (f"the variant is {self.variant_platform}, the engine is {self.engine_platform}: {have}. To build it, "
                f"either register {arch} emulation on the engine host (Debian: apt-get install qemu-user-static "
                f"binfmt-support; check /proc/sys/fs/binfmt_misc/qemu-{qemu}), or pass --engine for a native "
                f"{self.variant_platform} engine")


@dataclass(frozen=True, kw_only=True)
class Plan:
    graph: Graph
    nodes: tuple[NodePlan, ...]
    registry: str | None
    arch: ArchCheck | None
    notes: tuple[str, ...] = ()

    def node(self, name: str) -> NodePlan:
        return next(p for p in self.nodes if p.node.name == name)

    @property
    def actions(self) -> dict[str, Action]:
        return {p.node.name: p.action for p in self.nodes}

    @property
    def to_build(self) -> list[str]:
        return [p.node.name for p in self.nodes if p.action == "build"]

    @property
    def to_publish(self) -> list[str]:
        return [p.node.name for p in self.nodes if p.publish]

    def to_json(self) -> dict[str, Any]:
        g = self.graph
        return {
            "stack": g.stack,
            "variant": g.variant,
            "platform": g.platform,
            "locked": g.lock_digest is not None,
            "lock_hash": g.lock_digest,
            "registry": self.registry,
            "arch": None if self.arch is None else {
                "variant": self.arch.variant_platform, "engine": self.arch.engine_platform,
                "native": self.arch.native, "emulation": self.arch.emulation,
                "message": self.arch.message()},
            "gate": g.gate,
            "nodes": [{
                "name": p.node.name, "kind": p.node.kind, "component": p.node.component,
                "parents": list(p.node.parents), "key": p.node.key, "ref": p.ref, "state": p.state,
                "provisional": p.provisional, "unlocked": list(p.node.unlocked),
                "own_inputs_locked": not p.node.unlocked, "waits_for": list(p.waits_for), "why": list(p.why),
                "note": p.note, "action": p.action, "because": p.because, "publish": p.publish,
                "remote": p.remote,
                "compile_cache": None if p.compile_cache is None else {
                    "hits": p.compile_cache[0], "misses": p.compile_cache[1]},
            } for p in self.nodes],
            "to_build": self.to_build,
            "to_publish": self.to_publish,
            "warnings": list(g.warnings),
            "notes": list(self.notes),
        }


def mirror_ref(ref: str, mirrors: dict[str, str] | None) -> str:
    """``ref`` with its registry host replaced by a configured mirror (``nvcr.io`` -> ``mirror:5000``)."""
    if not mirrors:
        return ref
    r = ImageRef.parse(ref)
    mirror = mirrors.get(r.host)
    if mirror is None:
        return ref
    out = r.name(mirror)
    if r.tag and not r.digest:
        out += f":{r.tag}"
    if r.digest:
        out += f"@{r.digest}"
    return out


def refs_for(graph: Graph, *, registry: str | None, repository: str, base_ref: str) -> dict[str, str]:
    """Node name -> image reference: the base as given (mirrors applied), every other node by content key."""
    return {n.name: base_ref if n.kind == "base" else image_ref(registry, repository, n.name, n.key)
            for n in graph.nodes}


def _registry_of(ref: str) -> str | None:
    """The registry host a reference names, or None for a name local to one engine."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def make(
    graph: Graph,
    *,
    refs: Mapping[str, str],
    engine: EngineState | None,
    records: Mapping[str, NodeRecord],
    registry: str | None,
    emulation: bool | None = None,
    missing: Mapping[str, str] | None = None,
    trusted: Callable[[Node], bool] | None = None,
    wheels: WheelCache | None = None,
    full: bool = True,
    strict: bool = False,
    load: bool = True,
) -> Plan:
    """``missing``: the sections a partial lock lacks (lockfile.VariantLock.missing). ``trusted`` says whether a
    local tag is backed by the record of a completed build (records.RecordStore.has); a local tag that is not
    is reported missing (or in the registry), with the reason: the build does not use it. ``wheels``: the wheel
    cache, where a wheel node's wheel may be kept although its image is gone.

    ``full``: ask about every node (``buildctl plan``); otherwise only about the nodes the actions need
    (``buildctl build``: a run with nothing to do asks about one image), the others' state is "unknown".
    ``strict``: an engine or registry that cannot be asked raises (a build cannot go on without knowing)
    instead of making the state unknown. Either way the actions come from the same walk, so the plan and
    the build agree.
    ``load``: the final image is wanted in this engine (the default). Without it (``--no-load``, a builder's run:
    the registry is where images go), a final image the registry has and the engine lacks is left there: "have",
    marked remote, and nothing is pulled."""
    notes: list[str] = []
    engine_note = "" if engine is not None else "no engine to ask"
    unreachable: dict[str, str] = {}  # registry host -> why it could not be asked
    arch: ArchCheck | None = None
    if engine is not None:
        try:
            arch = ArchCheck(variant_platform=graph.platform, engine_platform=engine.platform(), emulation=emulation)
        except EngineError as exc:
            if strict:
                raise
            engine_note = f"engine not reachable: {exc.what}"
    if engine_note:
        notes.append(f"{engine_note}: node states are unknown")

    local_of: dict[str, bool | None] = {}
    registry_of: dict[str, bool | None] = {}
    reg_note: dict[str, str] = {}

    def is_local(name: str) -> bool | None:
        """The image is tagged in the engine (None: the engine could not be asked)."""
        nonlocal engine_note
        if name not in local_of:
            if engine is None or engine_note:
                local_of[name] = None
            else:
                try:
                    local_of[name] = engine.image_exists(refs[name])
                except EngineError as exc:
                    if strict:
                        raise
                    engine_note = f"engine not reachable: {exc.what}"
                    notes.append(f"{engine_note}: node states are unknown")
                    local_of[name] = None
        return local_of[name]

    def asks_registry(name: str) -> bool:
        # node images live in the registry only when there is one; the base always comes from one
        return graph.node(name).kind == "base" or _registry_of(refs[name]) is not None

    def in_registry(name: str) -> bool | None:
        """The registry has the image (False also when there is no registry; None: it could not be asked)."""
        if name in registry_of:
            return registry_of[name]
        ref = refs[name]
        host = _registry_of(ref) or "docker.io"
        found: bool | None
        if not asks_registry(name):
            found = False
        elif engine is None or engine_note:
            found, reg_note[name] = None, engine_note
        elif host in unreachable:
            found, reg_note[name] = None, unreachable[host]
        else:
            try:
                found = engine.registry_digest(ref) is not None
            except UnreachableError as exc:
                if strict:
                    raise
                unreachable[host] = f"registry {host} not reachable"
                notes.append(f"{exc.what}: the state of its images is unknown" + (f" ({exc.fix})" if exc.fix else ""))
                found, reg_note[name] = None, unreachable[host]
            except BuildctlError as exc:
                if strict:
                    raise
                found, reg_note[name] = None, exc.what
        registry_of[name] = found
        return found

    def is_trusted(n: Node) -> bool:
        return n.kind == "base" or trusted is None or trusted(n)

    # -- the actions, walking back from the final image
    actions: dict[str, tuple[Action, str]] = {}
    publish: set[str] = set()
    kept: dict[str, Path] = {}
    remote: set[str] = set()

    def publish_check(name: str) -> str:
        if registry is None or not asks_registry(name):
            return ""
        there = in_registry(name)
        if there is False:
            publish.add(name)
            return "; the registry lacks it: pushed"
        return "" if there else "; whether the registry has it is unknown: not pushed"

    def visit(name: str) -> None:
        if name in actions:
            return
        n = graph.node(name)
        local = is_local(name)
        if n.kind == "base":
            actions[name] = (("have", "in the engine") if local else ("pull", "not in the engine: pulled")
                             if local is False else ("unknown", "the engine could not be asked"))
            return
        if n.kind == "wheel" and wheels is not None:
            found = wheels.find(n)
            if found is not None:
                kept[name] = found
                actions[name] = ("have", f"the wheel is in the wheel cache ({found.name})" + publish_check(name))
                return
        if local is None:
            actions[name] = ("unknown", "the engine could not be asked")
            return
        usable = local and is_trusted(n)
        if usable and n.kind != "wheel":
            actions[name] = ("have", "in the engine" + publish_check(name))
            return
        if not usable and not load and name == graph.final.name and in_registry(name):
            remote.add(name)
            actions[name] = ("have", "in the registry: left there (--no-load)")
            return
        if usable or in_registry(name):
            where = "in the engine" if usable else "in the registry"
            actions[name] = ("pull", f"{where}: the wheel is taken out of its image" if n.kind == "wheel"
                             else f"{where}: pulled")
            return
        if registry_of.get(name, False) is None:
            actions[name] = ("unknown", "the registry could not be asked")
            return
        actions[name] = ("build", "in neither the engine nor the registry: built")
        for p in n.parents:
            visit(p)

    visit(graph.final.name)
    # A node the walk did not reach is skipped when the later nodes that stopped it are present; when one of them
    # is unknown, so is whether this one is needed (children first: graph.nodes has parents before children).
    # (the rest is skipped: the default below)
    for n in reversed(graph.nodes):
        if n.name not in actions and any(actions.get(c.name, ("skip", ""))[0] == "unknown"
                                         for c in graph.children(n.name)):
            actions[n.name] = ("unknown", "needed only if a later node is missing, and whether it is could not be asked")

    plans = []
    for n in graph.nodes:
        ref = refs[n.name]
        asked = full or n.name in local_of
        local = is_local(n.name) if asked else None
        state: NodeState = "unknown"
        note = "" if asked else "not asked: a later node is present"
        why: tuple[str, ...] = ()
        untrusted = bool(local) and not is_trusted(n)
        if local is None:
            note = note or engine_note
        elif local and not untrusted:
            state = "local"
        elif asks_registry(n.name) and (full or n.name in registry_of):
            there = in_registry(n.name)
            state = "unknown" if there is None else "registry" if there else "missing"
            note = reg_note.get(n.name, "")
        elif asks_registry(n.name):
            note = "not asked: the build does not need it"
        else:
            state = "missing"
        if untrusted:
            why = ("tagged in the engine, but no record says a build of this key completed (an interrupted run, or "
                   "an older buildctl that tagged before normalising): not trusted, it will be built again",)
        elif state == "missing":
            why = (reasons(graph, n, records.get(n.name)) if n.kind != "base"
                   else ("the base image is neither in the engine nor in its registry",))
        action, because = actions.get(n.name, ("skip", "not needed: a later node is present"))
        plans.append(NodePlan(node=n, ref=ref, state=state, provisional=graph.provisional(n.name), why=why,
                              note=note, waits_for=graph.waits_for(n.name), action=action, because=because,
                              publish=n.name in publish, untrusted=untrusted, wheel=kept.get(n.name),
                              remote=n.name in remote, compile_cache=_compile_counts(n, records.get(n.name))))
    if graph.lock_digest is None:
        notes.append(f"{graph.stack} has no lock for variant {graph.variant}: keys marked provisional will change "
                     f"once locked (`buildctl lock {graph.stack} --variant {graph.variant}`)")
    elif missing:
        notes.append(f"the lock of {graph.stack}/{graph.variant} is partial (not locked: {', '.join(sorted(missing))}): "
                     "keys marked provisional will change once it is locked in full; build, push and nightly refuse "
                     "it until then")
    elif any(p.provisional for p in plans):
        notes.append("the lock does not cover every input (the manifest changed since locking): keys marked "
                     f"provisional will change once re-locked (`buildctl lock {graph.stack}`)")
    if arch is not None and not arch.native:
        notes.append(arch.message())
    return Plan(graph=graph, nodes=tuple(plans), registry=registry, arch=arch, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------- why


def _compile_counts(node: Node, record: NodeRecord | None) -> tuple[int, int] | None:
    """(hits, misses) of the compiler cache when this node's current key was compiled here (its record says)."""
    if record is None or record.key != node.key or record.cache_hits is None or record.cache_misses is None:
        return None
    return record.cache_hits, record.cache_misses


def reasons(graph: Graph, node: Node, record: NodeRecord | None) -> tuple[str, ...]:
    """What differs between ``node`` and the recorded build of its previous key."""
    if record is None:
        return ("no earlier build of this node is recorded here",)
    if record.key == node.key:
        return ("built before with this key, but the image is in neither the engine nor the registry",)
    out: list[str] = []
    for p in node.parents:
        was = record.parents.get(p)
        now = graph.node(p).key
        if was is None:
            out.append(f"new parent {p}")
        elif was != now:
            out.append(f"parent {p} changed ({was[:12]} -> {now[:12]})")
    out += [f"parent {p} removed" for p in record.parents if p not in node.parents]
    if record.template != node.template:
        out.append(f"the {node.kind} template changed (images/ fragments or buildctl/graph/render.py)")
    out += diff_inputs(record.inputs, node.inputs)
    return tuple(out) or ("the key changed with the same inputs: buildctl's keying changed",)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def diff_inputs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    a, b = flatten(old), flatten(new)
    out = []
    for path in sorted(set(a) | set(b)):
        if path not in a:
            out.append(f"{path}: added ({_short(b[path])})")
        elif path not in b:
            out.append(f"{path}: removed (was {_short(a[path])})")
        elif a[path] != b[path]:
            out.append(f"{path}: {_short(a[path])} -> {_short(b[path])}")
    return out


def _short(v: Any) -> str:
    if isinstance(v, str) and "\n" in v:
        return f"<{v.count(chr(10))} lines, sha256 {hashlib.sha256(v.encode()).hexdigest()[:12]}>"
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
