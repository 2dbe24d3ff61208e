"""The plan: node states from a fake engine, and why a node must be built."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from buildctl.errors import EngineError, UnreachableError
from buildctl.graph import plan
from buildctl.graph.graph import Graph
from buildctl.graph.records import NodeRecord, RecordStore
from buildctl.manifest.model import AptPackage

REG = "registry.example:5000"
REPO = "training/graphstack"


@dataclass
class FakeEngine:
    local: set[str] = field(default_factory=set)
    remote: dict[str, str] = field(default_factory=dict)
    arch: str = "linux/arm64"
    unreachable: set[str] = field(default_factory=set)
    down: bool = False
    asked: list[str] = field(default_factory=list)

    def image_exists(self, ref: str) -> bool:
        if self.down:
            raise EngineError("no Docker engine answers at unix:///x")
        return ref in self.local

    def registry_digest(self, ref: str) -> str | None:
        self.asked.append(ref)
        host = ref.split("/")[0]
        if host in self.unreachable:
            raise UnreachableError(f"registry {host} cannot be reached (looking up {ref})", fix="set registry_mirrors")
        return self.remote.get(ref)

    def platform(self) -> str:
        if self.down:
            raise EngineError("no Docker engine answers at unix:///x")
        return self.arch


def refs(g: Graph) -> dict[str, str]:
    return plan.refs_for(g, registry=REG, repository=REPO, base_ref="registry.example/base/pytorch@sha256:" + "a" * 64)


def make(g: Graph, engine: FakeEngine | None, records: dict[str, NodeRecord] | None = None,
         emulation: bool | None = None) -> plan.Plan:
    return plan.make(g, refs=refs(g), engine=engine, records=records or {}, registry=REG, emulation=emulation)


def test_refs(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    r = refs(g)
    assert r["base"].startswith("registry.example/base/pytorch@")
    assert r["wheel:engine"] == f"{REG}/{REPO}/wheel-engine:{g.node('wheel:engine').key}"


def test_states(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    r = refs(g)
    eng = FakeEngine(local={r["base"], r["cudnn"], r["system"]}, remote={r["python"]: "sha256:1"})
    p = make(g, eng)
    states = {n.node.name: n.state for n in p.nodes}
    assert states["base"] == "local" and states["system"] == "local"
    assert states["python"] == "registry"
    assert states["assemble"] == "missing" and states["wheel:engine"] == "missing"
    assert p.to_build == ["compile-env:engine", "wheel:engine", "compile-env:kernels", "wheel:kernels", "assemble",
                          "entrypoint"]
    assert p.node("assemble").why == ("no earlier build of this node is recorded here",)
    assert eng.asked.count(r["system"]) == 0  # present locally: the registry is not asked
    assert p.arch is not None and p.arch.native


def test_why_names_the_changed_inputs(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    old = gs.make(m, lk)
    records = {n.name: NodeRecord.of(old, n) for n in old.nodes if n.kind != "base"}
    m2 = replace(m, apt=replace(m.apt, packages=(*m.apt.packages, AptPackage(name="zsh", version="5.9-6"))))
    lk2 = replace(lk, apt={**lk.apt, "gdb": "13.1-4"})
    new = gs.make(m2, lk2)
    r = refs(new)
    eng = FakeEngine(local={r[n] for n in ("base", "cudnn", "compile-env:engine", "wheel:engine",
                                             "compile-env:kernels", "wheel:kernels")})
    p = make(new, eng, records)
    assert p.to_build == ["system", "python", "assemble", "entrypoint"]
    assert p.node("system").why == ("apt.gdb.version: 13.1-3 -> 13.1-4", "apt.zsh.version: added (5.9-6)")
    sys_old, sys_new = old.node("system").key, new.node("system").key
    assert p.node("python").why == (f"parent system changed ({sys_old[:12]} -> {sys_new[:12]})",)
    assert p.node("assemble").why == (f"parent python changed ({old.node('python').key[:12]} -> "
                                      f"{new.node('python').key[:12]})",)


def test_why_for_a_removed_image_and_a_template(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    rec = NodeRecord.of(g, g.node("python"))
    assert plan.reasons(g, g.node("python"), rec) == (
        "built before with this key, but the image is in neither the engine nor the registry",)
    rec2 = replace(rec, key="0" * 64, template="t-old")
    assert plan.reasons(g, g.node("python"), rec2) == (
        "the python template changed (images/ fragments or buildctl/graph/render.py)",)


def test_diff_inputs_shortens_scripts() -> None:
    out = plan.diff_inputs({"script": "a\nb\n", "x": {"y": 1}}, {"script": "a\nc\n", "x": {}})
    assert out[0].startswith("script: <2 lines, sha256 ") and " -> <2 lines, sha256 " in out[0]
    assert out[1:] == ["x: added ({})", "x.y: removed (was 1)"]


def test_unreachable_registry_is_asked_once_and_reported(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, None)
    eng = FakeEngine(unreachable={"registry.example", REG})
    p = make(g, eng)
    assert {n.state for n in p.nodes} == {"unknown"}
    assert len(eng.asked) == 2  # once per registry host: the base's and the nodes'
    assert any("registry.example cannot be reached" in n and "registry_mirrors" in n for n in p.notes)
    assert p.node("system").note == f"registry {REG} not reachable"


def test_engine_down(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    p = make(g, FakeEngine(down=True))
    assert {n.state for n in p.nodes} == {"unknown"}
    assert p.arch is None
    assert any("engine not reachable" in n for n in p.notes)
    assert {n.state for n in make(g, None).nodes} == {"unknown"}


def test_arch_check(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))  # gpu13 is linux/arm64
    p = make(g, FakeEngine(arch="linux/amd64"), emulation=False)
    assert p.arch is not None and not p.arch.native
    msg = p.arch.message()
    assert "linux/arm64" in msg and "linux/amd64" in msg
    assert "no qemu-aarch64 handler is registered with binfmt_misc" in msg and "qemu-user-static" in msg
    assert msg in p.notes
    j = p.to_json()["arch"]
    assert j["native"] is False and j["emulation"] is False
    assert "registered with binfmt_misc on this host: builds run emulated" in plan.ArchCheck(
        variant_platform="linux/arm64", engine_platform="linux/amd64", emulation=True).message()


def test_without_lock_the_plan_says_keys_will_change(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, None)
    p = make(g, FakeEngine())
    j = p.to_json()
    assert j["locked"] is False and j["lock_hash"] is None
    assert all(n["provisional"] for n in j["nodes"])
    assert any("no lock for variant gpu13" in n and "will change once locked" in n for n in j["notes"])
    assert j["nodes"][0]["unlocked"] == ["base registry.example/base/pytorch:25.09-py3 digest"]
    assert [n["name"] for n in j["nodes"]] == g.names()
    assert all(len(n["key"]) == 64 for n in j["nodes"])


def test_records_round_trip(gs: Any, tmp_path: Path) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    store = RecordStore(tmp_path)
    rec = NodeRecord.of(g, g.node("wheel:engine"), built_at="2025-01-01T00:00:00Z", engine="default")
    store.save(g.stack, g.variant, rec)
    assert store.path(g.stack, g.variant, "wheel:engine") == tmp_path / "graphstack" / "gpu13" / "wheel-engine.json"
    assert store.load(g.stack, g.variant, "wheel:engine") == rec
    assert store.load_all(g) == {"wheel:engine": rec}
    store.path(g.stack, g.variant, "python").write_text("{not json")
    assert store.load(g.stack, g.variant, "python") is None


def test_the_why_line_is_one_line_whatever_the_stack(gs: Any) -> None:
    """Without a lock every node waits for every pin above it; its row says how many and where, in one line,
    and the full lists stay in why_text (`plan --why`) and the JSON."""
    m = gs.load()
    g = gs.make(m, None)
    p = make(g, FakeEngine())
    lines = {n.node.name: n.why_line() for n in p.nodes}
    assert lines["base"] == ("not in the engine: pulled; the base image is neither in the engine nor in its registry; "
                             "1 pin not locked (1 own): run buildctl lock")
    assert lines["cudnn"] == ("no earlier build of this node is recorded here; 2 pins not locked (1 own; 1 in base): "
                              "run buildctl lock")
    python = p.node("python")
    assert len(python.node.unlocked) > 1 and len(python.waits_for) > 1
    nodes = list(dict.fromkeys(w.split(": ", 1)[0] for w in python.waits_for))
    assert lines["python"] == (f"no earlier build of this node is recorded here; "
                               f"{len(python.node.unlocked) + len(python.waits_for)} pins not locked "
                               f"({len(python.node.unlocked)} own; {len(python.waits_for)} in {', '.join(nodes)}): "
                               "run buildctl lock")
    final = p.node("entrypoint")
    assert lines["entrypoint"].endswith(f"{len(final.waits_for)} pins not locked ({len(final.waits_for)} in base, "
                                        "cudnn, system, ...): run buildctl lock")
    assert all("\n" not in line and len(line) < 160 for line in lines.values())
    assert python.why_text().startswith("no earlier build of this node is recorded here; unlocked: ")
    assert all(w in python.why_text() for w in python.waits_for)
    j = {n["name"]: n for n in p.to_json()["nodes"]}
    assert j["python"]["summary"] == lines["python"] and j["python"]["waits_for"] == list(python.waits_for)


def test_the_why_line_counts_the_differences_behind_the_first(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    old = gs.make(m, lk)
    records = {n.name: NodeRecord.of(old, n) for n in old.nodes if n.kind != "base"}
    m2 = replace(m, apt=replace(m.apt, packages=(*m.apt.packages, AptPackage(name="zsh", version="5.9-6"))))
    new = gs.make(m2, replace(lk, apt={**lk.apt, "gdb": "13.1-4"}))
    r = refs(new)
    p = make(new, FakeEngine(local={r["base"], r["cudnn"]}), records)
    assert p.node("system").why_line() == "apt.gdb.version: 13.1-3 -> 13.1-4 (+1 more)"
    assert p.node("cudnn").why_line() == "in the engine; the registry lacks it: pushed"
    assert p.node("system").why_text() == "apt.gdb.version: 13.1-3 -> 13.1-4; apt.zsh.version: added (5.9-6)"
