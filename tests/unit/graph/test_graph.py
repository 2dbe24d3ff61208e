"""The build graph: which nodes exist, what each depends on, and that keys move only with own inputs."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from buildctl.graph import graph, specs
from buildctl.graph.graph import Extras, Graph
from buildctl.graph.keys import node_key
from buildctl.lock.lockfile import LockedPip, VariantLock
from buildctl.manifest.model import AptPackage, Manifest, PipRequirement, PullRequest
from tests.helpers import lchanges


def keys(g: Graph) -> dict[str, str]:
    return {n.name: n.key for n in g.nodes}


def changed(a: Graph, b: Graph) -> set[str]:
    ka, kb = keys(a), keys(b)
    assert ka.keys() == kb.keys()
    return {n for n in ka if ka[n] != kb[n]}


def with_component(m: Manifest, name: str, **changes: Any) -> Manifest:
    return replace(m, components=tuple(replace(c, **changes) if c.name == name else c for c in m.components))


def with_locked_component(lock: VariantLock, name: str, **changes: Any) -> VariantLock:
    comps = dict(lock.components)
    comps[name] = replace(comps[name], **changes)
    return replace(lock, components=comps)


ALL = {"base", "cudnn", "system", "python", "compile-env:engine", "wheel:engine", "compile-env:kernels",
       "wheel:kernels", "assemble", "entrypoint"}
CHAIN_BELOW_SYSTEM = {"system", "python", "assemble", "entrypoint"}


# ------------------------------------------------------------------------------------ shape


def test_nodes_and_parents(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    assert g.names() == ["base", "cudnn", "system", "python", "compile-env:engine", "wheel:engine",
                         "compile-env:kernels", "wheel:kernels", "assemble", "entrypoint"]
    parents = {n.name: n.parents for n in g.nodes}
    assert parents == {
        "base": (), "cudnn": ("base",), "system": ("cudnn",), "python": ("system",),
        "compile-env:engine": ("cudnn",),  # needs_cudnn: FROM the chain's own cuDNN node
        "wheel:engine": ("compile-env:engine",),
        "compile-env:kernels": ("base",),
        "wheel:kernels": ("compile-env:kernels",),
        "assemble": ("python", "wheel:engine", "wheel:kernels"),
        "entrypoint": ("assemble",),
    }
    assert g.gate == "entrypoint" and g.final.name == "entrypoint"
    # compile nodes see neither system nor python
    for name in ("compile-env:engine", "wheel:engine", "compile-env:kernels", "wheel:kernels"):
        assert not g.ancestors(name) & {"system", "python"}
    assert g.dependants("wheel:kernels") == {"assemble", "entrypoint"}
    assert g.dependants("cudnn") == {"system", "python", "compile-env:engine", "wheel:engine", "assemble",
                                     "entrypoint"}


def test_no_cudnn_no_entrypoint(gs: Any) -> None:
    m = replace(gs.load(), cudnn=None, entrypoint=None)
    g = gs.make(m, gs.lock_for(m))
    assert "cudnn" not in g.names() and "entrypoint" not in g.names()
    assert g.node("system").parents == ("base",)
    assert g.node("compile-env:engine").parents == ("base",)  # needs cuDNN, variant pins none: the base's
    assert any("needs cuDNN" in w for w in g.warnings)
    assert g.gate is None and g.final.name == "assemble"


def test_variant_cudnn_and_platform_inputs(gs: Any) -> None:
    m = gs.load()
    g12 = gs.make(m, gs.lock_for(m, "gpu12"), "gpu12")
    cud = g12.node("cudnn").spec
    assert isinstance(cud, specs.CudnnNodeSpec)
    assert (cud.package, cud.apt_version) == ("libcudnn9-cuda-12", "9.14.0.64-1")
    assert cud.source and cud.source.line.endswith("x86_64 /")
    system = g12.node("system").spec
    assert isinstance(system, specs.SystemNodeSpec)
    # the cuda repo and its keyring are set up once, by the cudnn node
    assert [s.name for s in system.sources] == []
    assert [f.name for f in system.files] == ["yq"]
    assert system.files[0].sha256 == "3" * 64  # computed by the lock for amd64
    assert [f.name for f in cud.files] == ["cuda-keyring"]
    wheel = g12.node("wheel:kernels").spec
    assert isinstance(wheel, specs.WheelNodeSpec)
    assert wheel.env == {"ARCH_LIST": "9.0"}  # the variant's override


def test_inputs_content(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    assert g.node("system").inputs == {
        "files": {"yq": {"dest": "/usr/bin/yq", "mode": "0755", "sha256": "2" * 64}},
        "sources": [],
        "apt": {"curl": {"version": "8.5.0-2"}, "gdb": {"version": "13.1-3"}, "tmux": {"version": "3.4-1"}},
        "remove_pip": ["old-core"], "remove_paths": ["/opt/old-tree"], "cleanup": ["/root/.cache", "/tmp/*"],
        "python": "python3", "recommends": False,
    }
    py = g.node("python").inputs
    assert py["constraint"] == "unset"
    assert sorted(py["pins"]) == ["black", "click", "einops", "setuptools"]  # dependencies from the lock too
    assert py["pins"]["setuptools"]["in_base"] is True
    assert g.node("wheel:engine").inputs["source"]["tree"] == "e" * 40
    assert g.node("wheel:engine").inputs["env"] == {"ENGINE_ARCHS": "100", "ENGINE_FRAMEWORK": "pytorch"}
    assert "memory_per_job_gib" not in g.node("wheel:engine").inputs
    labels = g.node("assemble").inputs["labels"]
    assert labels["io.buildctl.component.trainer"] == "effebd81f410bc6566fffee6c320b6f8f762e06d"


# ------------------------------------------------------------------------------ stability


def test_keys_are_stable_and_well_formed(gs: Any) -> None:
    m = gs.load()
    a, b = gs.make(m, gs.lock_for(m)), gs.make(gs.load(), gs.lock_for(gs.load()))
    assert keys(a) == keys(b)
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys(a).values())
    assert len(set(keys(a).values())) == len(a.nodes)


def test_key_is_a_function_of_kind_parents_inputs_template(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    n = g.node("python")
    assert n.key == node_key("python", [g.node("system").key], n.inputs, "t-python")


def test_order_in_the_manifest_does_not_matter(gs: Any) -> None:
    m = gs.load()
    reordered = replace(m, apt=replace(m.apt, packages=tuple(reversed(m.apt.packages))),
                        pip=replace(m.pip, requirements=tuple(reversed(m.pip.requirements))),
                        env=dict(reversed(list(m.env.items()))))
    assert not changed(gs.make(m, gs.lock_for(m)), gs.make(reordered, gs.lock_for(m)))


def test_resolved_at_and_job_sizing_are_not_inputs(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    other = replace(lk, resolved_at="2030-01-01T00:00:00Z")
    m2 = with_component(m, "engine", build=replace(m.component("engine").build, memory_per_job_gib=32.0))
    assert not changed(gs.make(m, lk), gs.make(m2, other))


def test_download_url_is_not_an_input_but_its_checksum_is(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    yq = next(d for d in m.downloads if d.name == "yq")
    moved = replace(yq, urls={**yq.urls, "linux/arm64": replace(yq.urls["linux/arm64"], url="https://mirror/yq")})
    m2 = replace(m, downloads=tuple(moved if d.name == "yq" else d for d in m.downloads))
    assert not changed(gs.make(m, lk), gs.make(m2, lk))
    resummed = replace(yq, urls={**yq.urls, "linux/arm64": replace(yq.urls["linux/arm64"], sha256="9" * 64)})
    m3 = replace(m, downloads=tuple(resummed if d.name == "yq" else d for d in m.downloads))
    assert changed(gs.make(m, lk), gs.make(m3, lk)) == CHAIN_BELOW_SYSTEM


def test_template_change_reaches_only_that_kind_and_below(gs: Any) -> None:
    m = gs.load()
    a = gs.make(m, gs.lock_for(m))
    b = graph.build(m, gs.lock_for(m), m.variant("gpu13"), templates={**gs.TEMPLATES, "wheel": "t-wheel-2"},
                    extras=Extras(entrypoint=gs.ENTRY))
    assert changed(a, b) == {"wheel:engine", "wheel:kernels", "assemble", "entrypoint"}


# -------------------------------------------------------------------------- independence


def test_source_tree_commit_rebuilds_no_compile(gs: Any) -> None:
    """Changing the source-tree component's commit (Megatron's role) never rebuilds the compiled ones."""
    m = gs.load()
    lk = gs.lock_for(m)
    new = "1234567" + "0" * 33
    m2 = with_component(m, "trainer", commit=new)
    lk2 = with_locked_component(lk, "trainer", commit=new, tree=new)
    assert changed(gs.make(m, lk), gs.make(m2, lk2)) == {"assemble", "entrypoint"}


def test_pr_list_of_one_component_rebuilds_only_its_wheel(gs: Any) -> None:
    """Changing the PRs of the engine (TE's role) never rebuilds the kernels (DeepEP's role)."""
    m = gs.load()
    lk = gs.lock_for(m)
    m2 = with_component(m, "engine", prs=(PullRequest(number=2146),))
    lk2 = with_locked_component(lk, "engine", changes=lchanges(prs={"2146": "abf4722" + "0" * 33}), tree="f" * 40)
    assert changed(gs.make(m, lk), gs.make(m2, lk2)) == {"wheel:engine", "assemble", "entrypoint"}
    # without a lock the PR list itself is the input: same independence
    assert changed(gs.make(m, None), gs.make(m2, None)) == {"wheel:engine", "assemble", "entrypoint"}


def test_runtime_apt_package_recompiles_nothing(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    m2 = replace(m, apt=replace(m.apt, packages=(*m.apt.packages, AptPackage(name="zsh", version="5.9-6"))))
    assert changed(gs.make(m, lk), gs.make(m2, lk)) == CHAIN_BELOW_SYSTEM


def test_runtime_pip_package_recompiles_nothing(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    extra = PipRequirement(text="isort==5.13.2", name="isort", specifier="==5.13.2")
    m2 = replace(m, pip=replace(m.pip, requirements=(*m.pip.requirements, extra)))
    lk2 = replace(lk, pip=(*lk.pip, LockedPip(name="isort", version="5.13.2", hashes=("sha256:" + "f" * 64,))))
    assert changed(gs.make(m, lk), gs.make(m2, lk2)) == {"python", "assemble", "entrypoint"}


def test_runtime_env_and_pip_policy_recompile_nothing(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    m2 = replace(m, env={**m.env, "NCCL_DEBUG": "VERSION"})
    assert changed(gs.make(m, lk), gs.make(m2, lk)) == {"assemble", "entrypoint"}
    m3 = replace(m, protect=replace(m.protect, packages=("torch",)))
    assert changed(gs.make(m, lk), gs.make(m3, lk)) == {"python", "assemble", "entrypoint"}


def test_build_requirements_of_one_component_stay_with_it(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    bumped = replace(lk, build_pip={"engine": (LockedPip(name="mathdx", version="25.1.2", hashes=("sha256:" + "7" * 64,)),)})
    eng = m.component("engine")
    m2 = with_component(m, "engine", build=replace(eng.build, requires=(
        PipRequirement(text="mathdx==25.1.2", name="mathdx", specifier="==25.1.2"),)))
    assert changed(gs.make(m, lk), gs.make(m2, bumped)) == {"compile-env:engine", "wheel:engine", "assemble", "entrypoint"}
    kb = m.component("kernels").build
    m3 = with_component(m, "kernels", build=replace(kb, apt=(*kb.apt, AptPackage(name="ccache", version="4.8-1"))))
    assert changed(gs.make(m, lk), gs.make(m3, lk)) == {"compile-env:kernels", "wheel:kernels", "assemble", "entrypoint"}


def test_build_env_and_command_stay_with_their_component(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    kb = m.component("kernels").build
    m2 = with_component(m, "kernels", build=replace(kb, env={"ARCH_LIST": "9.0"}))
    assert changed(gs.make(m, lk), gs.make(m2, lk)) == {"wheel:kernels", "assemble", "entrypoint"}
    over = replace(m, variants=tuple(replace(v, components={"engine": dataclasses.replace(
        next(iter(m.variant("gpu12").components.values())), env={"ENGINE_ARCHS": "90"})})
        if v.name == "gpu13" else v for v in m.variants))
    assert changed(gs.make(m, lk), gs.make(over, lk)) == {"wheel:engine", "assemble", "entrypoint"}


def test_cudnn_pin_reaches_the_compile_that_needs_it_only(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    assert m.cudnn is not None
    m2 = replace(m, cudnn=replace(m.cudnn, version="9.15.0.1"))
    lk2 = replace(lk, apt={**lk.apt, "libcudnn9-cuda-13": "9.15.0.1-1"})
    assert changed(gs.make(m, lk), gs.make(m2, lk2)) == ALL - {"base", "compile-env:kernels", "wheel:kernels"}


def test_base_digest_changes_everything(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    lk2 = replace(lk, base=replace(lk.base, digest="sha256:" + "9" * 64))
    assert changed(gs.make(m, lk), gs.make(m, lk2)) == ALL


def test_skip_smoke_is_a_different_entrypoint_only(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    assert changed(gs.make(m, lk), gs.make(m, lk, skip_smoke=True)) == {"entrypoint"}
    assert gs.make(m, lk, skip_smoke=True).node("entrypoint").inputs["smoke"] == "skipped"


def test_smoke_expectations_are_recorded_by_assemble(gs: Any) -> None:
    m = gs.load()
    lk = gs.lock_for(m)
    a = gs.make(m, lk, assemble_labels={"io.buildctl.smoke.expect": '{"checks":["versions"]}'})
    b = gs.make(m, lk, assemble_labels={"io.buildctl.smoke.expect": '{"checks":["versions","imports"]}'})
    assert changed(a, b) == {"assemble", "entrypoint"}
    assert a.node("assemble").inputs["labels"]["io.buildctl.smoke.expect"] == '{"checks":["versions"]}'


# ------------------------------------------------------------------------------- unlocked


def test_without_a_lock_keys_exist_and_unlocked_inputs_are_named(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, None)
    assert g.lock_digest is None
    assert set(g.names()) == ALL
    unlocked = {n.name: n.unlocked for n in g.nodes if n.unlocked}
    assert unlocked == {
        "base": ("base registry.example/base/pytorch:25.09-py3 digest",),
        "cudnn": ("apt libcudnn9-cuda-13=9.14.0.64-*",),
        "system": ("apt gdb=*", "apt curl=*"),
        "python": ("pip black==24.4.2 (hashes)", "pip setuptools==69.5.1 (hashes)", "pip einops"),
        "compile-env:engine": ("pip mathdx==25.1.1 (hashes)",),
        "wheel:engine": ("source engine (commit d2945c6 + PR #2146, PR #2150)",),
        "compile-env:kernels": ("apt libibverbs-dev=*",),
        "wheel:kernels": ("source kernels (commit 3f601f7)",),
    }
    assert all(g.provisional(n) for n in ALL)  # everything sits on the unlocked base


def test_source_tree_without_lock_is_marked_on_assemble(gs: Any) -> None:
    m = gs.load()
    # a full SHA with nothing applied on top is its own tree: the same key before and after locking
    assert gs.make(m, None).node("assemble").unlocked == ()
    assert gs.make(m, None).node("assemble").inputs["trees"] == gs.make(m, gs.lock_for(m)).node("assemble").inputs["trees"]
    short = with_component(m, "trainer", commit="effebd8")
    g = gs.make(short, None)
    assert g.node("assemble").unlocked == ("source trainer (commit effebd8)",)
    assert g.node("entrypoint").unlocked == ()


def test_with_a_full_lock_nothing_is_unlocked(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    assert [n.name for n in g.nodes if n.unlocked] == []
    assert not any(g.provisional(n) for n in ALL)
    assert g.lock_digest == gs.lock_for(m).digest()


def test_a_stale_lock_entry_counts_as_unlocked(gs: Any) -> None:
    """The manifest was edited after locking: the lock's old value must not be used."""
    m = gs.load()
    lk = gs.lock_for(m)
    m2 = replace(m, pip=replace(m.pip, requirements=tuple(
        PipRequirement(text="black==24.8.0", name="black", specifier="==24.8.0") if r.name == "black" else r
        for r in m.pip.requirements)))
    g = gs.make(m2, lk)
    assert g.node("python").unlocked == ("pip black==24.8.0 (hashes)",)
    assert g.node("python").inputs["pins"]["black"] == {"version": "24.8.0", "spec": "", "hashes": [],
                                                        "in_base": False, "sdist": False, "download": "",
                                                        "filename": ""}
    m3 = with_component(m, "engine", prs=(PullRequest(number=2146),))
    assert gs.make(m3, lk).node("wheel:engine").unlocked == ("source engine (commit d2945c6 + PR #2146)",)
    m4 = replace(m, variants=tuple(replace(v, image=v.image + "-new") if v.name == "gpu13" else v
                                   for v in m.variants))
    assert gs.make(m4, lk).node("base").unlocked  # the lock's digest is for the old reference


def test_partial_lock_marks_only_what_is_missing(gs: Any) -> None:
    m = gs.load()
    lk = replace(gs.lock_for(m), build_apt={})
    g = gs.make(m, lk)
    assert [(n.name, n.unlocked) for n in g.nodes if n.unlocked] == [
        ("compile-env:kernels", ("apt libibverbs-dev=*",))]
    assert g.provisional("wheel:kernels") and g.provisional("entrypoint")
    assert not g.provisional("wheel:engine")


# ---------------------------------------------------------------------------------- names


def test_image_ref(gs: Any) -> None:
    assert graph.image_ref("127.0.0.1:5000", "buildctl/demo", "wheel:ext", "ab" * 32) == (
        "127.0.0.1:5000/buildctl/demo/wheel-ext:" + "ab" * 32)
    assert graph.image_ref(None, "buildctl/demo", "system", "k") == "buildctl/demo/system:k"


def test_base_ref_uses_the_locked_digest(gs: Any) -> None:
    m = gs.load()
    spec = gs.make(m, gs.lock_for(m)).node("base").spec
    assert isinstance(spec, specs.BaseNodeSpec)
    assert spec.ref == "registry.example/base/pytorch:25.09-py3@sha256:" + "a" * 64
    pinned = replace(m, variants=(replace(m.variants[0], image="r.example/b@sha256:" + "c" * 64), *m.variants[1:]))
    g = gs.make(pinned, None)
    assert not g.node("base").unlocked


def test_entrypoint_requires_a_script(gs: Any) -> None:
    m = gs.load()
    with pytest.raises(ValueError, match="launch script"):
        graph.build(m, None, m.variant("gpu13"), templates=gs.TEMPLATES)


def test_shared_labels(gs: Any) -> None:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    labels = graph.shared_labels(g, g.node("system"))
    assert labels["io.buildctl.node"] == "system"
    assert labels["io.buildctl.key"] == g.node("system").key
    assert labels["io.buildctl.lock-hash"] == gs.lock_for(m).digest()
    assert labels["io.buildctl.component.engine"] == "e" * 40


def test_a_partial_lock_locks_sources_and_compile_keys_name_what_they_wait_for(gs: Any) -> None:
    """`lock --partial` where the registry is unreachable: git locked, base digest and apt not."""
    from buildctl.graph import plan as planmod

    m = gs.load()
    full = gs.lock_for(m)
    lk = replace(full, base=None, apt={}, build_apt={}, pip=(), build_pip={},
                 missing={"base": "registry unreachable", "apt": "needs the base", "pip": "needs the base"})
    g = gs.make(m, lk)
    wheel = g.node("wheel:engine")
    assert wheel.unlocked == ()  # its own input, the source tree, is locked
    assert g.provisional("wheel:engine")
    waits = g.waits_for("wheel:engine")
    assert "base: base registry.example/base/pytorch:25.09-py3 digest" in waits
    assert "cudnn: apt libcudnn9-cuda-13=9.14.0.64-*" in waits
    p = planmod.make(g, refs={n.name: n.name for n in g.nodes}, engine=None, records={}, registry=None,
                     missing=lk.missing)
    node = next(n for n in p.to_json()["nodes"] if n["name"] == "wheel:engine")
    assert node["own_inputs_locked"] is True and node["provisional"] is True
    assert "cudnn: apt libcudnn9-cuda-13=9.14.0.64-*" in node["waits_for"]
    assert any("is partial (not locked: apt, base, pip)" in n for n in p.notes)
