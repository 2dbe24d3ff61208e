"""The build graph: nodes, their own inputs, and content keys (pure).

From a manifest, its variant lock (or none yet) and a variant, ``build`` derives the nodes:

    chain:      base -> [cudnn] -> system -> python -> assemble -> [smoke gate] -> entrypoint
    off chain:  compile-env:<c>  (base, or cudnn when the component's build needs cuDNN,
                                  + the component's own apt and pip build requirements)
                wheel:<c>        (the compile itself, in a container of compile-env:<c>)

cuDNN sits directly on the base, below system, and not after it: that way the compile-env of a
component that needs cuDNN (Transformer Engine) builds FROM the very cuDNN node the chain uses, and
still depends on nothing in system or python. Pinning cuDNN changes rarely; apt and pip lists change
often, so the stable layer also goes lower in the chain.

A node's key is sha256 of the canonical JSON of (kind, parent keys, its own inputs, the digest of the
template that renders it). Only its own inputs: a compile node never sees system or python inputs, so
adding a runtime apt or pip package recompiles nothing; one component's source or build environment
never reaches another component's nodes. Job counts and download URLs are not inputs (the first does
not change the result; the second is checked by the sha256, which is).

Without a lock, the inputs the lock would pin (base digest, apt patterns, pip hashes, source tree SHAs,
computed checksums) are taken from the manifest as written and listed in ``Node.unlocked``; such keys,
and the keys of every node below them, will change once the stack is locked.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from buildctl.graph.keys import key_inputs, node_key
from buildctl.graph.launch_script import EntrypointFragment
from buildctl.graph.specs import (
    AptPin,
    AptSource,
    AssembleNodeSpec,
    BaseNodeSpec,
    CompileEnvNodeSpec,
    CudnnNodeSpec,
    EntrypointNodeSpec,
    FileSpec,
    NodeKind,
    NodeSpec,
    PipPin,
    PythonNodeSpec,
    SourceSpec,
    SystemNodeSpec,
    TreeInstall,
    WheelInstall,
    WheelNodeSpec,
)
from buildctl.labels import COMPONENT_LABEL, KEY_LABEL, LOCK_LABEL, NODE_LABEL, STACK_LABEL, VARIANT_LABEL
from buildctl.lock.lockfile import LockedComponent, LockedPick, LockedPip, LockedPr, VariantLock
from buildctl.manifest.model import (
    AptPackage,
    AptRepo,
    Component,
    Download,
    InstallKind,
    Manifest,
    PipRequirement,
    Platform,
    Variant,
)
from buildctl.manifest.requirements import download_wheel, runtime_requirements

# ------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str  # unique in the graph: "system", "compile-env:te", "wheel:te"
    kind: NodeKind
    parents: tuple[str, ...]  # the first is the image this node builds FROM (none for base)
    spec: NodeSpec
    template: str  # digest of the fragment(s) that render it
    unlocked: tuple[str, ...]  # own inputs the lock has not pinned yet
    key: str
    component: str | None = None

    @property
    def inputs(self) -> dict[str, Any]:
        out = key_inputs(self.spec)
        assert isinstance(out, dict)
        return out

    @property
    def slug(self) -> str:
        """The node's name as an image repository path component."""
        return self.name.replace(":", "-")


@dataclass(frozen=True, kw_only=True)
class Graph:
    stack: str
    variant: str
    platform: Platform
    lock_digest: str | None  # None: no lock for this variant
    nodes: tuple[Node, ...]  # topological order
    gate: str | None  # the node the smoke gate guards (the entrypoint), None when there is none
    warnings: tuple[str, ...] = ()

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def children(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.parents]

    def dependants(self, name: str) -> set[str]:
        """Every node that has ``name`` among its ancestors."""
        out: set[str] = set()
        for n in self.nodes:  # topological: parents come first
            if name in n.parents or out.intersection(n.parents):
                out.add(n.name)
        return out

    def ancestors(self, name: str) -> set[str]:
        out: set[str] = set()
        todo = list(self.node(name).parents)
        while todo:
            p = todo.pop()
            if p not in out:
                out.add(p)
                todo.extend(self.node(p).parents)
        return out

    def waits_for(self, name: str) -> tuple[str, ...]:
        """The unlocked inputs of this node's ancestors, as "node: input", in graph order: what its key
        still waits for even when its own inputs are locked."""
        up = self.ancestors(name)
        return tuple(f"{n.name}: {u}" for n in self.nodes if n.name in up for u in n.unlocked)

    def provisional(self, name: str) -> bool:
        """True when this key will change once locked (own or an ancestor's inputs are unlocked)."""
        return any(self.node(n).unlocked for n in (name, *self.ancestors(name)))

    @property
    def final(self) -> Node:
        """The last node of the chain: the image a user runs."""
        return self.node("entrypoint") if self.gate else self.node("assemble")


@dataclass(frozen=True, kw_only=True)
class Extras:
    """Inputs made by other modules from the same manifest and lock (passed in: graph stays pure)."""

    entrypoint: EntrypointFragment | None = None  # launch_script.render_entrypoint_fragment(manifest, variant)
    # labels assemble records in the image: the smoke expectations (smoke_expect.expect_for) and interpreter
    assemble_labels: Mapping[str, str] = field(default_factory=dict)
    skip_smoke: bool = False


def image_ref(registry: str | None, repository: str, node: str, key: str) -> str:
    """The one place registry names are derived: ``<registry>/<repository>/<node>:<key>``.

    Any builder sharing the registry finds a node another built by computing the same name.
    Without a registry the name is local to one engine.
    """
    path = f"{repository.strip('/')}/{node.replace(':', '-')}"
    return f"{registry}/{path}:{key}" if registry else f"{path}:{key}"


def default_repository(manifest: Manifest) -> str:
    return manifest.push.repository if manifest.push else f"buildctl/{manifest.stack}"


# ------------------------------------------------------------------------------ resolving inputs


def _apt_pin(pkg: AptPackage, locked: Mapping[str, str]) -> tuple[AptPin, str | None]:
    version = locked.get(pkg.name)
    if version is not None and (version == pkg.version if pkg.exact else fnmatch.fnmatchcase(version, pkg.version)):
        return AptPin(name=pkg.name, version=version), None
    if pkg.exact:
        return AptPin(name=pkg.name, version=pkg.version), None
    return AptPin(name=pkg.name, version=pkg.version), f"apt {pkg.name}={pkg.version}"


def _satisfies(version: str, specifier: str) -> bool:
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def _download_pin(download: Download, platform: str, variant_lock: VariantLock | None) -> tuple[PipPin, str | None]:
    w = download_wheel(download, platform)
    assert w is not None and download.for_platform(platform) is not None
    name, version, filename, url = w
    u = download.for_platform(platform)
    assert u is not None
    sha = u.sha256 if u.sha256 != "compute" else None
    ld = variant_lock.downloads.get(download.name) if variant_lock else None
    if sha is None and ld is not None and ld.url == url:
        sha = ld.sha256
    pin = PipPin(name=name, version=version, hashes=(f"sha256:{sha}",) if sha else (), download=download.name,
                 filename=filename, url=url)
    return pin, None if sha else f"download {download.name} sha256"


def _pip_pins(reqs: Iterable[PipRequirement], locked: tuple[LockedPip, ...] | None, *,
              downloads: Iterable[PipPin] = ()) -> tuple[tuple[PipPin, ...], list[str]]:
    """The pip set to install: every locked pin (dependencies included), plus what the lock lacks.

    ``downloads``: wheels the manifest downloads (install: pip); each replaces the lock's pin of its name
    (the lock resolved it from the same URL), so that the host serves the downloaded file.
    """
    pins: dict[str, PipPin] = {}
    unlocked: list[str] = []
    by_name = {p.name: p for p in locked or ()}
    for p in locked or ():
        pins[p.name] = PipPin(name=p.name, version=p.version, hashes=tuple(sorted(p.hashes)), in_base=p.in_base,
                              sdist=p.sdist)
    for d in downloads:
        pins[d.name] = d
    for r in reqs:
        lp = by_name.get(r.name)
        if lp is not None and _satisfies(lp.version, r.specifier):
            continue
        # not locked, or the lock no longer satisfies the manifest (edited since locking)
        if r.exact:
            pins[r.name] = PipPin(name=r.name, version=r.specifier[2:])
            unlocked.append(f"pip {r.name}{r.specifier} (hashes)")
        else:
            pins[r.name] = PipPin(name=r.name, version=None, spec=r.specifier)
            unlocked.append(f"pip {r.text}")
    return tuple(pins[n] for n in sorted(pins)), unlocked


def _file(download: Download, platform: str, variant_lock: VariantLock | None) -> tuple[FileSpec | None, str | None]:
    u = download.for_platform(platform)
    if u is None:
        return None, None
    mode = download.mode if download.mode.startswith("0") else "0" + download.mode
    if u.sha256 != "compute":
        return FileSpec(name=download.name, dest=download.dest, mode=mode, sha256=u.sha256, url=u.url), None
    ld = variant_lock.downloads.get(download.name) if variant_lock else None
    if ld is not None and ld.url == u.url:
        return FileSpec(name=download.name, dest=download.dest, mode=mode, sha256=ld.sha256, url=u.url), None
    return FileSpec(name=download.name, dest=download.dest, mode=mode, sha256=None, url=u.url), f"download {download.name} sha256"


def _source(component: Component, locked: LockedComponent | None) -> tuple[SourceSpec, str | None]:
    if locked is not None and locked.tree and _lock_matches(component, locked):
        return SourceSpec(tree=locked.tree), None
    if len(component.commit) == 40 and not component.steps:
        return SourceSpec(tree=component.commit), None  # nothing to apply: the tree is the commit itself
    prs = tuple(f"{pr.number}@{pr.head}" if pr.head else str(pr.number) for pr in component.prs)
    patches = tuple(f"{p.file}@{p.sha256}" for p in component.patches)
    what = f"source {component.name} (commit {component.commit}"
    what += f" + {', '.join(ch.label() for ch in component.steps)})" if component.steps else ")"
    return SourceSpec(tree=None, repo=component.repo, commit=component.commit, prs=prs, patches=patches), what


def _lock_matches(component: Component, locked: LockedComponent) -> bool:
    """Whether a locked component still describes what the manifest asks for."""
    if not locked.commit.startswith(component.commit) or locked.repo != component.repo:
        return False
    if len(locked.changes) != len(component.steps):
        return False
    for mc, ch in zip(component.steps, locked.changes, strict=True):
        if isinstance(ch, LockedPick):
            if mc.commit != ch.sha:
                return False
        elif isinstance(ch, LockedPr):
            if mc.pr != ch.number or mc.apply != ch.mode or mc.target != ch.target or (
                    mc.head and not ch.head.startswith(mc.head)):
                return False
        elif (mc.patch, mc.sha256) != (ch.file, ch.sha256):
            return False
    return True


def _sources(repos: Iterable[AptRepo], platform: str) -> tuple[AptSource, ...]:
    out = []
    for r in repos:
        line = r.lines.get(platform) or r.lines.get("any")
        if line:
            out.append(AptSource(name=r.name, line=line, keyring=r.keyring))
    return tuple(sorted(out, key=lambda s: s.name))


def _keyrings(sources: Iterable[AptSource], files: Mapping[str, FileSpec]) -> tuple[FileSpec, ...]:
    return tuple(sorted((files[s.keyring] for s in sources if s.keyring and s.keyring in files),
                        key=lambda f: f.name))


# ------------------------------------------------------------------------------------------ build


def build(
    manifest: Manifest,
    lock: VariantLock | None,
    variant: Variant,
    *,
    templates: Mapping[str, str],
    extras: Extras | None = None,
) -> Graph:
    """Derive the nodes of ``variant``, in the order they stand on each other. ``templates``: node kind ->
    digest of its fragment(s)."""
    g = _Builder(manifest=manifest, lock=lock, variant=variant, templates=templates, extras=extras or Extras())
    g.base()
    g.downloads()
    g.cudnn()
    g.system()
    g.python()
    g.compiles()
    g.assemble()
    g.entrypoint()
    return Graph(stack=manifest.stack, variant=variant.name, platform=variant.platform,
                 lock_digest=lock.digest() if lock else None, nodes=tuple(g.nodes), gate=g.gate,
                 warnings=tuple(g.warnings))


@dataclass(kw_only=True)
class _Builder:
    """One variant's nodes as ``build`` derives them, step by step; each step adds its node(s) on those before."""

    manifest: Manifest
    lock: VariantLock | None
    variant: Variant
    templates: Mapping[str, str]
    extras: Extras
    nodes: list[Node] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # what the steps hand on: the downloads placed as files (and why each is not locked), the pip wheels among
    # them, the apt sources, the node the system stands on, cuDNN's source, the compiles' wheels, the source
    # trees, the components' commits, the final gate
    files: dict[str, FileSpec] = field(default_factory=dict)
    file_unlocked: dict[str, str] = field(default_factory=dict)
    wheel_downloads: list[tuple[PipPin, str | None]] = field(default_factory=list)
    all_sources: tuple[AptSource, ...] = ()
    below_system: str = "base"
    cudnn_source: AptSource | None = None
    wheels: list[WheelInstall] = field(default_factory=list)
    trees: list[TreeInstall] = field(default_factory=list)
    wheel_nodes: list[str] = field(default_factory=list)
    tree_unlocked: list[str] = field(default_factory=list)
    component_shas: dict[str, str] = field(default_factory=dict)
    gate: str | None = None

    @property
    def cleanup(self) -> tuple[str, ...]:
        return tuple(self.manifest.cleanup)

    @property
    def python_exe(self) -> str:
        return self.manifest.smoke.python

    def add(self, name: str, kind: NodeKind, parents: tuple[str, ...], spec: NodeSpec,
            unlocked: Iterable[str | None] = (), component: str | None = None) -> Node:
        by_name = {n.name: n for n in self.nodes}
        template = self.templates.get(kind, "")
        if kind != "base" and not template:
            raise ValueError(f"no template digest for node kind {kind!r}")
        key = node_key(kind, [by_name[p].key for p in parents], key_inputs(spec), template)
        node = Node(name=name, kind=kind, parents=parents, spec=spec, template=template,
                    unlocked=tuple(u for u in unlocked if u), key=key, component=component)
        self.nodes.append(node)
        return node

    def base(self) -> None:
        """The base image, by the digest the lock (or the manifest's own reference) gives."""
        image, lock = self.variant.image, self.lock
        digest = lock.base.digest if lock and lock.base and lock.base.ref == image else None
        if "@sha256:" in image:
            digest = image.split("@", 1)[1]
        self.add("base", "base", (), BaseNodeSpec(image=image, digest=digest, platform=self.variant.platform),
                 [None if digest else f"base {image} digest"])

    def downloads(self) -> None:
        """The manifest's downloads for this platform: pip wheels for the python node, files for the others;
        one with no URL for the platform is left out with a warning. The apt sources of the platform."""
        platform = self.variant.platform
        for d in self.manifest.downloads:
            if d.install == "pip":
                if d.for_platform(platform) is None:
                    self.warnings.append(f"download {d.name} has no URL for {platform}: not in this variant's images")
                else:
                    self.wheel_downloads.append(_download_pin(d, platform, self.lock))
                continue
            f, why = _file(d, platform, self.lock)
            if f is None:
                self.warnings.append(f"download {d.name} has no URL for {platform}: not in this variant's images")
                continue
            self.files[d.name] = f
            if why:
                self.file_unlocked[d.name] = why
        self.all_sources = _sources(self.manifest.apt.repos, platform)

    def cudnn(self) -> None:
        """cuDNN on the base, so that compiles needing it build FROM it without seeing system."""
        cudnn = self.manifest.cudnn_for(self.variant)
        if cudnn is None:
            return
        self.cudnn_source = next((s for s in self.all_sources if s.name == cudnn.repo), None)
        pattern = cudnn.apt_version or f"{cudnn.version}-*"
        pin, why = _apt_pin(AptPackage(name=cudnn.package, version=pattern), self.lock.apt if self.lock else {})
        keyring = _keyrings([self.cudnn_source] if self.cudnn_source else [], self.files)
        self.add("cudnn", "cudnn", ("base",), CudnnNodeSpec(
            package=cudnn.package, version=cudnn.version, apt_version=pin.version, source=self.cudnn_source,
            files=keyring, cleanup=self.cleanup, recommends=self.manifest.apt.recommends),
            [why, *(self.file_unlocked.get(f.name) for f in keyring)])
        self.below_system = "cudnn"

    def system(self) -> None:
        """apt sources and packages, downloads, removals (what cuDNN's node already set up is not repeated)."""
        m = self.manifest
        sys_sources = tuple(s for s in self.all_sources if s is not self.cudnn_source)
        placed = {s.keyring for s in ([self.cudnn_source] if self.cudnn_source else []) if s.keyring}
        sys_files = tuple(f for n, f in sorted(self.files.items()) if n not in placed)
        apt_pins = [_apt_pin(p, self.lock.apt if self.lock else {}) for p in m.apt.packages]
        self.add("system", "system", (self.below_system,), SystemNodeSpec(
            files=sys_files, sources=sys_sources, apt=tuple(sorted((p for p, _ in apt_pins), key=lambda p: p.name)),
            remove_pip=tuple(m.remove.pip), remove_paths=tuple(m.remove.paths), cleanup=self.cleanup,
            python=self.python_exe, recommends=m.apt.recommends),
            [*(w for _, w in apt_pins), *(self.file_unlocked.get(f.name) for f in sys_files)])

    def python(self) -> None:
        """The runtime pip pins (the pip wheels among the downloads included), protected packages kept."""
        m = self.manifest
        pins, pip_unlocked = _pip_pins(runtime_requirements(m), self.lock.pip if self.lock else None,
                                       downloads=[p for p, _ in self.wheel_downloads])
        pip_unlocked += [why for _, why in self.wheel_downloads if why]
        self.add("python", "python", ("system",), PythonNodeSpec(
            python=self.python_exe, constraint=m.pip.constraint, pins=pins, protect=tuple(m.protect.packages),
            replace=tuple(m.protect.replace), cleanup=self.cleanup), pip_unlocked)

    def compiles(self) -> None:
        """Each component: a source tree (installed by assemble), or a compile environment and its wheel, off
        the chain (on cuDNN where the component needs it and the variant pins one, else on the base)."""
        for c in self.manifest.components:
            lc = self.lock.components.get(c.name) if self.lock else None
            source, src_why = _source(c, lc)
            self.component_shas[c.name] = source.tree or c.commit
            if c.install.kind is InstallKind.SOURCE_TREE:
                assert c.install.path  # the loader requires it
                self.trees.append(TreeInstall(component=c.name, path=c.install.path, source=source))
                if src_why:
                    self.tree_unlocked.append(src_why)  # recorded on assemble, the node whose key the tree feeds
                continue
            self._compile(c, source, src_why)

    def _compile(self, component: Component, source: SourceSpec, src_why: str | None) -> None:
        m, lock = self.manifest, self.lock
        has_cudnn = self.below_system == "cudnn"
        parent = "cudnn" if component.build.needs_cudnn and has_cudnn else "base"
        if component.build.needs_cudnn and not has_cudnn:
            self.warnings.append(f"component {component.name} needs cuDNN, but variant {self.variant.name} pins none: "
                                 "its compile uses the base image's cuDNN")
        env_sources = (tuple(s for s in self.all_sources if s is not self.cudnn_source or parent != "cudnn")
                       if component.build.apt else ())
        env_files = _keyrings(env_sources, self.files)
        bapt = [_apt_pin(p, lock.build_apt.get(component.name, {}) if lock else {}) for p in component.build.apt]
        bpins, bpip_unlocked = _pip_pins(component.build.requires, lock.build_pip.get(component.name) if lock else None)
        env_name = f"compile-env:{component.name}"
        self.add(env_name, "compile-env", (parent,), CompileEnvNodeSpec(
            component=component.name, files=env_files, sources=env_sources,
            apt=tuple(sorted((p for p, _ in bapt), key=lambda p: p.name)), python=self.python_exe,
            constraint=m.pip.constraint, pins=bpins, cleanup=self.cleanup),
            [*(w for _, w in bapt), *bpip_unlocked, *(self.file_unlocked.get(f.name) for f in env_files)],
            component=component.name)
        self.add(f"wheel:{component.name}", "wheel", (env_name,), WheelNodeSpec(
            component=component.name, source=source, env=m.component_env(component, self.variant), command=component.build.command,
            parallel_env=component.build.parallel_env, memory_per_job_gib=component.build.memory_per_job_gib,
            compile_cache=component.build.compile_cache),
            [src_why], component=component.name)
        self.wheel_nodes.append(f"wheel:{component.name}")
        self.wheels.append(WheelInstall(component=component.name, dist=component.install.dist))

    def assemble(self) -> None:
        """Wheels, source trees, runtime environment, what the image says about itself."""
        m = self.manifest
        labels = {f"io.buildctl.component.{n}": sha for n, sha in sorted(self.component_shas.items())}
        labels.update(self.extras.assemble_labels)
        self.add("assemble", "assemble", ("python", *self.wheel_nodes), AssembleNodeSpec(
            python=self.python_exe, constraint=m.pip.constraint, wheels=tuple(self.wheels),
            trees=tuple(sorted(self.trees, key=lambda t: t.component)), env=m.env_for(self.variant), labels=labels,
            cleanup=self.cleanup), self.tree_unlocked)

    def entrypoint(self) -> None:
        """The launch script baked in, behind the smoke gate (where the manifest has an entrypoint)."""
        if self.manifest.entrypoint is None:
            return
        frag = self.extras.entrypoint
        if frag is None:
            raise ValueError("the manifest has an entrypoint but no launch script was rendered for it")
        self.add("entrypoint", "entrypoint", ("assemble",), EntrypointNodeSpec(
            workdir=frag.workdir, script=frag.script, script_path=frag.script_path,
            script_mode=f"0{frag.script_mode:o}", entrypoint=tuple(frag.entrypoint), cmd=tuple(frag.cmd),
            labels=dict(frag.labels),
            smoke="skipped" if self.extras.skip_smoke else "gate"))
        self.gate = "entrypoint"


def shared_labels(graph: Graph, node: Node) -> dict[str, str]:
    """The io.buildctl.* labels every node carries (the OCI ones need the engine: the pipeline adds them)."""
    labels = {
        STACK_LABEL: graph.stack,
        VARIANT_LABEL: graph.variant,
        LOCK_LABEL: graph.lock_digest or "unlocked",
        NODE_LABEL: node.name,
        KEY_LABEL: node.key,
    }
    assemble = graph.node("assemble").spec
    assert isinstance(assemble, AssembleNodeSpec)
    labels.update({k: v for k, v in assemble.labels.items() if k.startswith(COMPONENT_LABEL)})
    return labels
