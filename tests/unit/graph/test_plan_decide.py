"""The plan as the build's only decider: the action table per node, and `buildctl plan` agreeing with `build`.

``buildctl plan`` asks about every node and reports what it cannot ask (``full``, not ``strict``); a build
asks only what its actions need and stops on an engine that does not answer. Both come out of the one
walk in plan.make, and the build executes the plan's actions (pipeline.executed): these tests hold them
together with a fake engine and a fake wheel cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from buildctl.builder import pipeline
from buildctl.errors import BuildFailed, UnreachableError
from buildctl.graph import plan
from buildctl.graph.graph import Graph, Node
from buildctl.graph.records import WheelFolder

REG = "registry.example:5000"
REPO = "training/graphstack"


@dataclass
class FakeEngine:
    local: set[str] = field(default_factory=set)
    remote: set[str] = field(default_factory=set)
    unreachable: bool = False
    asked_local: list[str] = field(default_factory=list)
    asked_registry: list[str] = field(default_factory=list)

    def image_exists(self, ref: str) -> bool:
        self.asked_local.append(ref)
        return ref in self.local

    def registry_digest(self, ref: str) -> str | None:
        self.asked_registry.append(ref)
        if self.unreachable and ref.startswith(REG):
            raise UnreachableError(f"registry {REG} cannot be reached (looking up {ref})")
        return "sha256:" + "1" * 64 if ref in self.remote else None

    def platform(self) -> str:
        return "linux/arm64"


@dataclass
class FakeWheels:
    kept: dict[str, Path] = field(default_factory=dict)  # node name -> wheel file

    def find(self, node: Node) -> Path | None:
        return self.kept.get(node.name)


def refs(g: Graph, registry: str | None = REG) -> dict[str, str]:
    return plan.refs_for(g, registry=registry, repository=REPO, base_ref="registry.example/base/pytorch@sha256:" + "a" * 64)


def decide(g: Graph, eng: FakeEngine, *, wheels: FakeWheels | None = None, untrusted: frozenset[str] = frozenset(),
           registry: str | None = REG, full: bool = True, strict: bool = False, load: bool = True) -> plan.Plan:
    return plan.make(g, refs=refs(g, registry), engine=eng, records={}, registry=registry, wheels=wheels,
                     trusted=lambda n: n.name not in untrusted, full=full, strict=strict, load=load)


def both(g: Graph, make_engine: Any, **kw: Any) -> tuple[plan.Plan, plan.Plan]:
    """What `buildctl plan` prints and what `buildctl build` executes, each against a fresh engine."""
    return decide(g, make_engine(), **kw), decide(g, make_engine(), full=False, strict=True, **kw)


def graph(gs: Any) -> Graph:
    m = gs.load()
    g: Graph = gs.make(m, gs.lock_for(m))
    return g


def everything_but(g: Graph, *names: str, registry: bool = True) -> FakeEngine:
    r = refs(g)
    present = {r[n.name] for n in g.nodes if n.name not in names}
    return FakeEngine(local=set(present), remote=set(present) if registry else set())


# -- issue 21: "a wheel is cached and its wheel image is gone: plan and build agree"


def test_a_cached_wheel_whose_image_is_gone_plan_and_build_agree(gs: Any, tmp_path: Path) -> None:
    g = graph(gs)
    wheel = tmp_path / "engine_core-1.0-cp312-linux_aarch64.whl"
    wheel.write_bytes(b"PK")
    wheels = FakeWheels({"wheel:engine": wheel})
    # the runtime changed (assemble and the entrypoint are to build); the engine's wheel image is gone
    # everywhere, its wheel is in the wheel cache
    shown, executed = both(g, lambda: everything_but(g, "wheel:engine", "assemble", "entrypoint"), wheels=wheels)
    assert shown.actions == executed.actions
    assert shown.to_build == executed.to_build == ["assemble", "entrypoint"]  # the wheel is not compiled again
    assert shown.node("wheel:engine").action == "have" and shown.node("wheel:engine").wheel == wheel
    assert shown.node("wheel:engine").state == "missing"  # where the image is, as before: nowhere
    assert shown.to_publish == executed.to_publish == ["wheel:engine"]  # its one-file image is made and pushed
    actions, publish = pipeline.executed(executed)
    # the kernels wheel is not in the cache: it comes out of its (present) image; no compile either way
    assert actions == {"wheel:engine": "have", "wheel:kernels": "pull", "python": "have", "assemble": "build",
                       "entrypoint": "build"}
    assert publish == {"wheel:engine"}
    assert "compile" not in shown.node("wheel:engine").because


def test_a_cached_wheel_with_nothing_to_build_is_not_asked_about(gs: Any, tmp_path: Path) -> None:
    g = graph(gs)
    wheels = FakeWheels({"wheel:engine": tmp_path / "w.whl"})
    shown, executed = both(g, lambda: everything_but(g, "wheel:engine"), wheels=wheels)
    assert shown.to_build == executed.to_build == []
    assert shown.actions == executed.actions
    assert shown.node("wheel:engine").action == "skip" and shown.node("entrypoint").action == "have"
    eng = everything_but(g, "wheel:engine")
    decide(g, eng, wheels=wheels, full=False, strict=True)
    assert eng.asked_local == [refs(g)["entrypoint"]]  # a run with nothing to do asks about one image


# -- the decision table


def test_local_trusted_is_have_local_untrusted_is_pulled_or_built(gs: Any) -> None:
    g = graph(gs)
    r = refs(g)
    eng = lambda: everything_but(g, "entrypoint")  # noqa: E731
    shown, executed = both(g, eng, untrusted=frozenset({"assemble"}))
    assert shown.actions == executed.actions
    assert shown.node("assemble").action == "pull" and shown.node("assemble").untrusted  # the registry has it
    assert "no record says" in shown.node("assemble").why[0]
    assert shown.node("python").action == "skip"
    # untrusted and not in the registry: built again, and what it needs is looked at
    e = everything_but(g, "entrypoint")
    e.remote.discard(r["assemble"])
    p = decide(g, e, untrusted=frozenset({"assemble"}))
    assert p.node("assemble").action == "build" and p.node("assemble").state == "missing"
    assert p.node("python").action == "have" and p.node("wheel:engine").action == "pull"  # no wheel cache given


def test_registry_only_is_pulled_and_present_but_unpublished_is_pushed(gs: Any) -> None:
    g = graph(gs)
    r = refs(g)

    def eng() -> FakeEngine:
        e = everything_but(g, "assemble", "entrypoint")
        e.remote.add(r["assemble"])
        e.remote.discard(r["python"])  # built here while the registry was down
        return e

    shown, executed = both(g, eng)
    assert shown.actions == executed.actions
    assert shown.node("entrypoint").action == "build" and shown.node("assemble").action == "pull"
    assert shown.node("python").action == "skip"  # assemble is pulled: python is not needed
    e = everything_but(g, "assemble", "entrypoint")
    e.remote.discard(r["python"])
    p = decide(g, e)
    assert p.node("python").action == "have" and p.node("python").publish and p.to_publish == ["python"]
    assert "the registry lacks it: pushed" in p.node("python").because


def test_without_a_registry_nothing_is_published_or_pulled(gs: Any) -> None:
    g = graph(gs)
    r = refs(g, None)
    local = {r[n.name] for n in g.nodes if n.name not in ("assemble", "entrypoint")}
    p = plan.make(g, refs=r, engine=FakeEngine(local=local), records={}, registry=None, full=False, strict=True)
    assert p.to_build == ["assemble", "entrypoint"] and p.to_publish == []
    assert {p.node(n).action for n in ("python", "wheel:engine", "wheel:kernels")} == {"have", "pull"}


def test_the_base_is_had_or_pulled(gs: Any) -> None:
    g = graph(gs)
    r = refs(g)
    e = FakeEngine(local=set(), remote={r["base"]})
    shown, executed = both(g, lambda: FakeEngine(local=set(), remote={r["base"]}))
    assert shown.actions == executed.actions
    assert shown.node("base").action == "pull" and shown.node("base").state == "registry"
    assert executed.node("base").state == "unknown"  # the build does not ask the registry about the base
    assert set(shown.to_build) == {n.name for n in g.nodes if n.kind != "base"}
    e = FakeEngine(local={r["base"]})
    assert decide(g, e).node("base").action == "have"


def test_wheel_cache_on_disk(gs: Any, tmp_path: Path) -> None:
    g = graph(gs)
    node = g.node("wheel:engine")
    folder = WheelFolder(tmp_path)
    assert folder.find(node) is None
    kept = tmp_path / "engine" / node.key
    kept.mkdir(parents=True)
    (kept / "a.whl").write_bytes(b"PK")
    assert folder.find(node) == kept / "a.whl"
    (kept / "b.whl").write_bytes(b"PK")
    assert folder.find(node) is None  # not one wheel: not trusted
    assert folder.find(g.node("python")) is None


def test_a_registry_that_does_not_answer(gs: Any) -> None:
    g = graph(gs)
    eng = lambda: FakeEngine(local={refs(g)["base"]}, unreachable=True)  # noqa: E731
    shown = decide(g, eng())
    assert shown.node("entrypoint").action == "unknown" and shown.to_build == []
    # what comes before an unknown node is not "skipped: a later node is present": whether it is needed is unknown
    assert {p.node.name: p.action for p in shown.nodes if p.node.name != "base"} == {
        p.node.name: "unknown" for p in shown.nodes if p.node.name != "base"}
    assert "could not be asked" in shown.node("python").because
    with pytest.raises(BuildFailed, match="cannot decide what to do with entrypoint"):
        pipeline.executed(shown)
    with pytest.raises(UnreachableError):  # the build stops with the registry's own error
        decide(g, eng(), full=False, strict=True)


# -- issue 23: a builder's run (--no-load) leaves the final image in the registry


def test_no_load_leaves_a_final_image_in_the_registry_and_asks_nothing_more(gs: Any) -> None:
    g = graph(gs)
    r = refs(g)
    everywhere = {r[n.name] for n in g.nodes}
    fresh = lambda: FakeEngine(local=set(), remote=set(everywhere))  # noqa: E731  a second builder: empty engine
    shown, executed = both(g, fresh, load=False)
    assert shown.actions == executed.actions
    final = executed.node("entrypoint")
    assert final.action == "have" and final.remote and "left there (--no-load)" in final.because
    assert executed.to_build == [] and executed.to_publish == []
    actions, publish = pipeline.executed(executed)
    assert actions == {"entrypoint": "have"} and not publish  # nothing pulled, nothing pushed
    eng = fresh()
    decide(g, eng, full=False, strict=True, load=False)
    assert eng.asked_registry == [r["entrypoint"]]  # one question, for the final image
    # the default (load) pulls it into the engine, as before
    assert decide(g, fresh(), full=False, strict=True).node("entrypoint").action == "pull"
    # a node to build is built as before: --no-load changes only what happens to a final image already there
    stale = FakeEngine(local=set(), remote=everywhere - {r["entrypoint"], r["assemble"]})
    p = decide(g, stale, full=False, strict=True, load=False)
    assert p.to_build == ["assemble", "entrypoint"] and not any(n.remote for n in p.nodes)
    assert p.to_json()["nodes"][-1]["remote"] is False
