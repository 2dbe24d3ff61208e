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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl.errors import BuildctlError, EngineError, UnreachableError
from buildctl.graph.graph import Graph, Node, image_ref
from buildctl.graph.records import NodeRecord
from buildctl.graph.routing import Route, for_nodes, refusal
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
    builder: str = ""  # where it goes (routing.for_nodes): the builders of the variant's platform, "-", "refused: ..."
    # a wheel node whose current key was compiled here: (hits, misses) of its compiler cache, from its record
    compile_cache: tuple[int, int] | None = None

    @property
    def present(self) -> bool:
        return self.state in ("local", "registry")

    def why_line(self) -> str:
        """What this node's row says in `buildctl plan`: one line, whatever the stack's size (the action's reason,
        the first difference and how many more, how many pins its key waits for and from which nodes); the full
        lists are ``why_text``, ``why``, ``unlocked`` and ``waits_for`` (`plan --why`, `plan --json`)."""
        parts = [self.because] if self.action not in ("build", "unknown") and self.because else []
        if self.why:
            parts.append(self.why[0] + (f" (+{len(self.why) - 1} more)" if len(self.why) > 1 else ""))
        elif self.note:
            parts.append(self.note)
        pins = _pins_line(self.node.unlocked, self.waits_for) if self.provisional else ""
        if pins:
            parts.append(pins)
        return "; ".join(parts)

    def why_text(self) -> str:
        """Everything behind ``why_line``, in one text: every difference, every unlocked pin (`plan --why`)."""
        detail = "; ".join(self.why) if self.why else self.note
        if self.node.unlocked:
            detail = (detail + "; " if detail else "") + "unlocked: " + ", ".join(self.node.unlocked)
        elif self.provisional:
            detail = (detail + "; " if detail else "") + "own inputs locked"
        if self.provisional and self.waits_for:
            detail += "; waits for " + ", ".join(self.waits_for)
        if self.action not in ("build", "unknown") and self.because:
            detail = self.because + ("; " + detail if detail else "")
        return detail


def _pins_line(own: tuple[str, ...], above: tuple[str, ...]) -> str:
    """``12 pins not locked (3 own; 9 in base, cudnn): run buildctl lock`` (``above``: "node: input" of ancestors)."""
    total = len(own) + len(above)
    if not total:
        return ""
    nodes = list(dict.fromkeys(a.split(": ", 1)[0] for a in above))
    named = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    where = ([f"{len(own)} own"] if own else []) + ([f"{len(above)} in {named}"] if above else [])
    return f"{total} pin{'s' if total > 1 else ''} not locked ({'; '.join(where)}): run buildctl lock"


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
                f"configure a native {self.variant_platform} builder ([builders] \"{self.variant_platform}\" = "
                f"[...], or --builder / --engine), or, for nodes without a compile, register {arch} emulation on the "
                f"engine host (Debian: apt-get install qemu-user-static binfmt-support; check "
                f"/proc/sys/fs/binfmt_misc/qemu-{qemu}) and pass --emulate")


@dataclass(frozen=True, kw_only=True)
class Plan:
    graph: Graph
    nodes: tuple[NodePlan, ...]
    registry: str | None
    arch: ArchCheck | None
    notes: tuple[str, ...] = ()
    route: Route | None = None  # the builders of the variant's platform (routing.route); None: not routed
    refused: tuple[str, str] | None = None  # (what, fix): nodes to build that no builder of the route may build

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
                "note": p.note, "action": p.action, "because": p.because, "summary": p.why_line(), "publish": p.publish,
                "remote": p.remote, "builder": p.builder or None,
                "compile_cache": None if p.compile_cache is None else {
                    "hits": p.compile_cache[0], "misses": p.compile_cache[1]},
            } for p in self.nodes],
            "route": None if self.route is None else {
                "platform": self.route.platform, "emulated": self.route.emulated, "missing": self.route.missing,
                "builders": [{"endpoint": b.endpoint, "answered": b.answered, "emulated": b.emulated}
                             for b in self.route.builders]},
            "refused": None if self.refused is None else {"what": self.refused[0], "fix": self.refused[1]},
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
    route: Route | None = None,
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
    marked remote, and nothing is pulled.
    ``route``: the builders of the variant's platform (routing.route): each node is named its builder, and the nodes
    to build that none of them may build are the plan's ``refused`` (the build stops on it before anything starts);
    it replaces the arch check's note."""
    arch, engine_note = _arch_check(graph, engine, emulation=emulation, strict=strict)
    where = _Presence(graph=graph, refs=refs, engine=engine, strict=strict, engine_note=engine_note)
    decisions = _Decisions(graph=graph, where=where, registry=registry, trusted=trusted, wheels=wheels, load=load)
    decisions.walk()
    plans = [_node_plan(graph, n, where, decisions, records.get(n.name), trusted=trusted, full=full)
             for n in graph.nodes]
    return _with_notes(graph, plans, registry=registry, arch=arch, notes=where.notes, missing=missing, route=route)


def _arch_check(graph: Graph, engine: EngineState | None, *, emulation: bool | None,
                strict: bool) -> tuple[ArchCheck | None, str]:
    """The variant's platform against the engine's, and why the engine cannot be asked ("" when it can): its
    platform is the first thing the plan asks it, so an engine that does not answer here is not asked again."""
    if engine is None:
        return None, "no engine to ask"
    try:
        return ArchCheck(variant_platform=graph.platform, engine_platform=engine.platform(), emulation=emulation), ""
    except EngineError as exc:
        if strict:
            raise
        return None, f"engine not reachable: {exc.what}"


def _is_trusted(node: Node, trusted: Callable[[Node], bool] | None) -> bool:
    """A local tag of ``node`` may be used: the base always, any node when nothing says otherwise, else its record."""
    return node.kind == "base" or trusted is None or trusted(node)


@dataclass(kw_only=True)
class _Presence:
    """What is present where: each node's image asked of the engine and of the registry at most once, when a step
    first needs it (so ``buildctl build`` asks only what its actions need). Not frozen: it keeps the answers, and
    once the engine or a registry host fails to answer it is not asked again; the notes say what could not be asked
    (in the order it happened), and ``strict`` raises instead."""

    graph: Graph
    refs: Mapping[str, str]
    engine: EngineState | None
    strict: bool
    engine_note: str  # why the engine cannot be asked ("" while it can)
    notes: list[str] = field(default_factory=list)
    local_of: dict[str, bool | None] = field(default_factory=dict)
    registry_of: dict[str, bool | None] = field(default_factory=dict)
    reg_note: dict[str, str] = field(default_factory=dict)  # node -> why the registry could not say
    unreachable: dict[str, str] = field(default_factory=dict)  # registry host -> why it could not be asked

    def __post_init__(self) -> None:
        if self.engine_note:
            self.notes.append(f"{self.engine_note}: node states are unknown")

    def is_local(self, name: str) -> bool | None:
        """The image is tagged in the engine (None: the engine could not be asked)."""
        if name not in self.local_of:
            if self.engine is None or self.engine_note:
                self.local_of[name] = None
            else:
                try:
                    self.local_of[name] = self.engine.image_exists(self.refs[name])
                except EngineError as exc:
                    if self.strict:
                        raise
                    self.engine_note = f"engine not reachable: {exc.what}"
                    self.notes.append(f"{self.engine_note}: node states are unknown")
                    self.local_of[name] = None
        return self.local_of[name]

    def asks_registry(self, name: str) -> bool:
        """Node images live in the registry only when there is one; the base always comes from one."""
        return self.graph.node(name).kind == "base" or _registry_of(self.refs[name]) is not None

    def in_registry(self, name: str) -> bool | None:
        """The registry has the image (False also when there is no registry; None: it could not be asked)."""
        if name in self.registry_of:
            return self.registry_of[name]
        ref = self.refs[name]
        host = _registry_of(ref) or "docker.io"
        found: bool | None
        if not self.asks_registry(name):
            found = False
        elif self.engine is None or self.engine_note:
            found, self.reg_note[name] = None, self.engine_note
        elif host in self.unreachable:
            found, self.reg_note[name] = None, self.unreachable[host]
        else:
            try:
                found = self.engine.registry_digest(ref) is not None
            except UnreachableError as exc:
                if self.strict:
                    raise
                self.unreachable[host] = f"registry {host} not reachable"
                self.notes.append(f"{exc.what}: the state of its images is unknown"
                                  + (f" ({exc.fix})" if exc.fix else ""))
                found, self.reg_note[name] = None, self.unreachable[host]
            except BuildctlError as exc:
                if self.strict:
                    raise
                found, self.reg_note[name] = None, exc.what
        self.registry_of[name] = found
        return found


@dataclass(kw_only=True)
class _Decisions:
    """Each node's action and why, walking back from the final image: a node present (or pulled) stops the walk,
    only the parents of a node to build are looked at. Not frozen: the walk fills ``actions`` (and what is
    published, kept in the wheel cache, left remote) as it goes, asking ``where`` only what it needs."""

    graph: Graph
    where: _Presence
    registry: str | None
    trusted: Callable[[Node], bool] | None
    wheels: WheelCache | None
    load: bool
    actions: dict[str, tuple[Action, str]] = field(default_factory=dict)
    publish: set[str] = field(default_factory=set)
    kept: dict[str, Path] = field(default_factory=dict)
    remote: set[str] = field(default_factory=set)

    def walk(self) -> None:
        """The actions of the final image and, through the nodes to build, of their ancestors; then of the nodes
        the walk did not reach whose need is unknown."""
        self._visit(self.graph.final.name)
        self._unknown_needs()

    def action(self, name: str) -> tuple[Action, str]:
        """The action and its reason (a node the walk did not reach is skipped)."""
        return self.actions.get(name, ("skip", "not needed: a later node is present"))

    def _visit(self, name: str) -> None:
        """Decide ``name`` once; a node to build needs its parents, so they are decided next (depth first)."""
        if name in self.actions:
            return
        n = self.graph.node(name)
        self.actions[name] = self._decide(n)
        if self.actions[name][0] == "build":
            for p in n.parents:
                self._visit(p)

    def _decide(self, node: Node) -> tuple[Action, str]:
        """One node's action: have it, pull it, build it, or unknown; the first that holds, in this order."""
        name = node.name
        local = self.where.is_local(name)
        if node.kind == "base":
            return (("have", "in the engine") if local else ("pull", "not in the engine: pulled")
                    if local is False else ("unknown", "the engine could not be asked"))
        if node.kind == "wheel" and self.wheels is not None:
            found = self.wheels.find(node)
            if found is not None:
                self.kept[name] = found
                return ("have", f"the wheel is in the wheel cache ({found.name})" + self._publish_check(name))
        if local is None:
            return ("unknown", "the engine could not be asked")
        usable = local and _is_trusted(node, self.trusted)
        if usable and node.kind != "wheel":
            return ("have", "in the engine" + self._publish_check(name))
        if not usable and not self.load and name == self.graph.final.name and self.where.in_registry(name):
            self.remote.add(name)
            return ("have", "in the registry: left there (--no-load)")
        if usable or self.where.in_registry(name):
            where = "in the engine" if usable else "in the registry"
            return ("pull", f"{where}: the wheel is taken out of its image" if node.kind == "wheel"
                    else f"{where}: pulled")
        if self.where.registry_of.get(name, False) is None:
            return ("unknown", "the registry could not be asked")
        return ("build", "in neither the engine nor the registry: built")

    def _publish_check(self, name: str) -> str:
        """A node present here is published when the registry lacks it: the words the reason ends with."""
        if self.registry is None or not self.where.asks_registry(name):
            return ""
        there = self.where.in_registry(name)
        if there is False:
            self.publish.add(name)
            return "; the registry lacks it: pushed"
        return "" if there else "; whether the registry has it is unknown: not pushed"

    def _unknown_needs(self) -> None:
        """A node the walk did not reach is skipped when the later nodes that stopped it are present; when one of
        them is unknown, so is whether this one is needed (children first: graph.nodes has parents before
        children). The rest is skipped (``action``'s default)."""
        for n in reversed(self.graph.nodes):
            if n.name not in self.actions and any(self.actions.get(c.name, ("skip", ""))[0] == "unknown"
                                                  for c in self.graph.children(n.name)):
                self.actions[n.name] = ("unknown",
                                        "needed only if a later node is missing, and whether it is could not be asked")


def _node_plan(graph: Graph, node: Node, where: _Presence, decisions: _Decisions, record: NodeRecord | None, *,
               trusted: Callable[[Node], bool] | None, full: bool) -> NodePlan:
    """One node's row: where it is, why (for one to build), and what the walk decided for it."""
    state, note, untrusted = _state(node, where, trusted=trusted, full=full)
    action, because = decisions.action(node.name)
    return NodePlan(node=node, ref=where.refs[node.name], state=state, provisional=graph.provisional(node.name),
                    why=_why(graph, node, record, state=state, untrusted=untrusted), note=note,
                    waits_for=graph.waits_for(node.name), action=action, because=because,
                    publish=node.name in decisions.publish, untrusted=untrusted, wheel=decisions.kept.get(node.name),
                    remote=node.name in decisions.remote, compile_cache=_compile_counts(node, record))


def _state(node: Node, where: _Presence, *, trusted: Callable[[Node], bool] | None,
           full: bool) -> tuple[NodeState, str, bool]:
    """(state, note, untrusted): where the node is, why that is unknown, and whether its local tag lacks the record
    of a completed build (then it counts as not local). Without ``full`` only what the walk asked is known."""
    asked = full or node.name in where.local_of
    local = where.is_local(node.name) if asked else None
    state: NodeState = "unknown"
    note = "" if asked else "not asked: a later node is present"
    untrusted = bool(local) and not _is_trusted(node, trusted)
    if local is None:
        note = note or where.engine_note
    elif local and not untrusted:
        state = "local"
    elif where.asks_registry(node.name) and (full or node.name in where.registry_of):
        there = where.in_registry(node.name)
        state = "unknown" if there is None else "registry" if there else "missing"
        note = where.reg_note.get(node.name, "")
    elif where.asks_registry(node.name):
        note = "not asked: the build does not need it"
    else:
        state = "missing"
    return state, note, untrusted


def _why(graph: Graph, node: Node, record: NodeRecord | None, *, state: NodeState,
         untrusted: bool) -> tuple[str, ...]:
    """Why a node is not present: an untrusted tag, or what changed since the recorded build of its previous key."""
    if untrusted:
        return ("tagged in the engine, but no record says a build of this key completed (an interrupted run, or "
                "an older buildctl that tagged before normalising): not trusted, it will be built again",)
    if state == "missing":
        return (reasons(graph, node, record) if node.kind != "base"
                else ("the base image is neither in the engine nor in its registry",))
    return ()


def _with_notes(graph: Graph, plans: list[NodePlan], *, registry: str | None, arch: ArchCheck | None,
                notes: list[str], missing: Mapping[str, str] | None, route: Route | None) -> Plan:
    """The plan with what it says besides the nodes: what could not be asked, the lock, and either the arch check
    (no route) or the route's builders (``_routed``)."""
    notes = [*notes, *_lock_notes(graph, missing, provisional=any(p.provisional for p in plans))]
    if route is None:
        if arch is not None and not arch.native:
            notes.append(arch.message())
        return Plan(graph=graph, nodes=tuple(plans), registry=registry, arch=arch, notes=tuple(notes))
    return _routed(Plan(graph=graph, nodes=tuple(plans), registry=registry, arch=arch, notes=tuple(notes)), route)


def _lock_notes(graph: Graph, missing: Mapping[str, str] | None, *, provisional: bool) -> list[str]:
    """What the plan says about the lock: none, partial, or not covering the manifest (keys will change)."""
    if graph.lock_digest is None:
        return [f"{graph.stack} has no lock for variant {graph.variant}: keys marked provisional will change once "
                f"locked (`buildctl lock {graph.stack} --variant {graph.variant}`)"]
    if missing:
        return [f"the lock of {graph.stack}/{graph.variant} is partial (not locked: {', '.join(sorted(missing))}): "
                "keys marked provisional will change once it is locked in full; build, push and nightly refuse it "
                "until then"]
    if provisional:
        return ["the lock does not cover every input (the manifest changed since locking): keys marked provisional "
                f"will change once re-locked (`buildctl lock {graph.stack}`)"]
    return []


def _routed(plan: Plan, route: Route) -> Plan:
    """The plan with each node's builder, what cannot be built on the route's builders, and the route's notes."""
    names = for_nodes(route, [(n.node.name, n.node.kind, n.action) for n in plan.nodes])
    refused = refusal(route, [(n.node.name, n.node.kind) for n in plan.nodes if n.action == "build"])
    notes = [*plan.notes, *route.notes]
    if route.emulated:
        notes.append(f"--emulate: {plan.graph.platform} nodes run under QEMU on {route.label()} ({route.missing}); "
                     "compiles are refused")
    if refused is not None:
        notes.append(f"refused: {refused[0]} ({refused[1]})")
    return replace(plan, nodes=tuple(replace(n, builder=names[n.node.name]) for n in plan.nodes), route=route,
                   refused=refused, notes=tuple(notes))


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


def _short(value: Any) -> str:
    if isinstance(value, str) and "\n" in value:
        return f"<{value.count(chr(10))} lines, sha256 {hashlib.sha256(value.encode()).hexdigest()[:12]}>"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
