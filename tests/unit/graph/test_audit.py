"""The input audit: rendered text scans, manifest values that float, and our own renders being clean."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from buildctl.graph import render
from buildctl.lock.drift import Drift
from buildctl.lock.lockfile import LockedBase, LockedPip, VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import PipRequirement, ReproLevel
from buildctl.repro import audit
from buildctl.repro.audit import _Context

IMAGES = Path(__file__).resolve().parents[3] / "images"
T = render.load_templates(IMAGES)
DEMO = Path(__file__).resolve().parents[3] / "pins" / "demo.yaml"
CTX = _Context(where="Dockerfile of system", node="system", level=ReproLevel.BIT, locked_hashes=frozenset({"six"}))


def rules(text: str, *, dockerfile: bool = False) -> list[tuple[str, str]]:
    found = audit.scan_dockerfile(text, CTX) if dockerfile else audit.scan_shell(text, CTX)
    return [(f.rule, f.what) for f in found]


def test_urls_need_a_checksum() -> None:
    assert rules("curl -fsSL https://x.example/tool -o /usr/local/bin/tool; chmod +x /usr/local/bin/tool") == [
        ("url-without-checksum", "curl fetches https://x.example/tool and nothing checks its checksum")]
    [f] = audit.scan_shell("wget -O /opt/t.tgz http://x.example/t.tgz", CTX)
    assert f.paths == ("/opt/t.tgz",) and f.status == "floating" and f.node == "system"
    checked = ("curl -fsSL https://x.example/t.tgz -o /tmp/t.tgz && "
               "echo '" + "a" * 64 + "  /tmp/t.tgz' | sha256sum -c -")
    assert rules(checked) == []
    assert rules('curl -fsS "$BUILDCTL_WHEELHOUSE"x.whl http://127.0.0.1:8080/x.whl') == []  # loopback: our wheelhouse
    assert rules("FROM x\nADD https://x.example/t.tgz /opt/\nADD local.tgz /opt/\n", dockerfile=True) == [
        ("add-url", "ADD https://x.example/t.tgz: fetched by the engine at build time, unchecked")]


def test_pip_requirements() -> None:
    assert rules("pip install torch==2.6.0 einops 'numpy<2'") == [
        ("pip-unpinned", "pip installs einops without an exact version (pip install torch==2.6.0)"),
        ("pip-unpinned", "pip installs numpy<2 without an exact version (pip install torch==2.6.0)")]
    # requirements written to a file first, as buildctl renders them; six has hashes in the lock
    text = ("printf '%s\\n' 'six==1.16.0' 'tomli==2.0.1 --hash=sha256:" + "b" * 64 + "' 'floaty' > /tmp/r.txt; "
            "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-index --find-links \"$W\" -r /tmp/r.txt")
    found = audit.scan_shell(text, CTX)
    assert [(f.rule, f.packages) for f in found] == [("pip-without-hash", ("six",)), ("pip-unpinned", ("floaty",))]
    assert rules("cd /src && pip wheel --no-build-isolation --no-deps -w /out . && pip install -e /src/x") == []
    assert rules("pip install https://x.example/a-1.0-py3-none-any.whl") == [
        ("url-without-checksum", "pip installs https://x.example/a-1.0-py3-none-any.whl without a --hash (pip install "
                                 "https://x.example/a-1.0-py3-none-any.whl)")]
    assert rules("pip install a==1.0 --hash=sha256:" + "c" * 64) == []


def test_git_clone_of_a_branch() -> None:
    assert rules("git clone --depth 1 -b main https://git.example/x.git /opt/x") == [
        ("git-branch", "git clone of https://git.example/x.git at branch main, no commit SHA")]
    assert rules("git clone https://git.example/x.git") == [
        ("git-branch", "git clone of https://git.example/x.git at its default branch, no commit SHA")]
    assert rules("git clone https://git.example/x.git /opt/x && git -C /opt/x checkout " + "d" * 40) == []
    assert audit.scan_shell("git clone https://git.example/x.git /opt/x", CTX)[0].paths == ("/opt/x/*",)


def test_apt_versions() -> None:
    assert rules("apt-get update; apt-get install -y --no-install-recommends curl 'jq=1.6*' less=590-2") == [
        ("apt-unversioned", "apt-get install curl (no version) in a layer declared bit"),
        ("apt-unversioned", "apt-get install jq=1.6* (a version pattern) in a layer declared bit")]


def test_scripts_with_comments_and_continuations() -> None:
    script = "#!/bin/sh\n# curl https://not.a.fetch/\nset -eu\nexport X=1\npip install \\\n  einops\n"
    assert rules(script) == [("pip-unpinned", "pip installs einops without an exact version (pip install einops)")]


def test_our_own_renders_fetch_nothing_without_a_pin(gs: Any) -> None:
    """Every node of a locked graph, rendered: the Dockerfiles and compile scripts buildctl writes are clean."""
    m = gs.load()
    lock = gs.lock_for(m)
    g = gs.make(m, lock)
    refs = {n.name: f"r/{n.slug}:k" for n in g.nodes}
    found = audit.scan_graph(g, T, levels={"system": ReproLevel.BIT}, vlock=lock, refs=refs)
    assert found == []
    # unlocked, the same renders float: the audit says so, once per value (the manifest finding)
    unlocked = audit.audit(m, None, m.variant("gpu13"), gs.make(m, None), T, refs)
    assert all(f.status == "floating" for f in unlocked)
    whats = [f.what for f in unlocked]
    assert len(whats) == len(set(whats))
    assert any(w.startswith("pip einops") for w in whats)
    assert not any(w.startswith("pip installs einops") for w in whats)  # the rendered duplicate is dropped


def test_a_build_command_that_fetches_is_found(gs: Any) -> None:
    m = gs.load()
    c = m.components[0]
    m = replace(m, components=(replace(c, build=replace(c.build, command="pip install ninja && pip wheel -w /out .")),
                               *m.components[1:]))
    g = gs.make(m, gs.lock_for(m))
    found = audit.scan_graph(g, T, levels={}, vlock=gs.lock_for(m), refs={})
    assert [(f.rule, f.node, f.where) for f in found] == [
        ("pip-unpinned", f"wheel:{c.name}", f"compile script of wheel:{c.name}")]


def test_manifest_values_pinned_only_by_the_lock() -> None:
    m = pins.load(DEMO)
    v = m.default_variant
    m = replace(m, pip=replace(m.pip, requirements=(*m.pip.requirements,
                                                    PipRequirement(text="floaty", name="floaty", specifier=""))))
    floating = {f.what: f for f in audit.manifest_findings(m, None, v)}
    assert all(f.status == "floating" for f in floating.values())
    f = floating["pip floaty (not pinned to one version in the manifest)"]
    assert f.node == "python" and f.packages == ("floaty",) and f.level is ReproLevel.BIT
    assert "apt less (no version)" in floating and "apt jq=1.6*" in floating
    lock = VariantLock(base=LockedBase(ref=v.image, digest="sha256:" + "a" * 64, platform=v.platform),
                       apt={"jq": "1.6-2.1", "less": "590-2"},
                       pip=(LockedPip(name="floaty", version="1.0", hashes=("sha256:" + "f" * 64,)),))
    locked = {f.what: f.status for f in audit.manifest_findings(m, lock, v)}
    assert locked["pip floaty (not pinned to one version in the manifest); the lock pins floaty==1.0"] == "locked"
    assert locked["apt less (no version); the lock pins 590-2"] == "locked"
    assert locked["apt gcc (no version) (build requirement of fastmath)"] == "floating"  # the lock lacks build_apt
    assert not audit.inputs_level_met(audit.manifest_findings(m, lock, v))


def test_drift_and_floating_by_node(gs: Any) -> None:
    d = Drift(variant="gpu13", kind="pip", subject="floaty", old="1.0", new="1.1")
    [f] = audit.drift_findings([d])
    assert f.status == "locked" and f.what == "gpu13: pip floaty: 1.0 -> 1.1"
    m = gs.load()
    g = gs.make(m, gs.lock_for(m))
    hint = audit.AuditFinding(rule="manifest-pip", status="locked", where="m", what="pip x", node="python", packages=("x",))
    by = audit.floating_by_node([hint, f], g)
    assert set(by) == {"python", "assemble", "entrypoint"}  # the node and what builds on it
    assert by["assemble"][0].packages == ("x",)
