"""A stack's variant made ready to plan or build: manifest, lock, graph, names.

The one place that gathers what ``graph.build`` is given: the manifest and its lock, the template
digests from images/, the entrypoint fragment (entrypoint.py) and the smoke expectations, plus the
names that nodes get in the engine and the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from buildctl.config import Config
from buildctl.errors import UsageError
from buildctl.graph import graph, render, smoke_expect, specs
from buildctl.graph.entrypoint import select_profile, variant_entrypoint
from buildctl.graph.graph import Graph
from buildctl.graph.launch_script import render_entrypoint_fragment
from buildctl.graph.plan import mirror_ref, refs_for
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock, VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest, Variant


@dataclass(frozen=True, kw_only=True)
class Target:
    manifest: Manifest
    manifest_path: Path
    lock: Lock | None
    vlock: VariantLock | None
    lock_stale: bool  # the manifest changed since it was locked
    variant: Variant
    graph: Graph
    templates: render.Templates
    registry: str | None  # where node images are shared; None: this engine only
    repository: str
    base_ref: str  # what to pull the base by (registry mirrors applied, digest once locked)
    refs: dict[str, str]
    profile: str | None  # the launch script's default profile (None: the manifest's default_profile)


__all__ = ["Target", "load", "mirror_ref"]


def load(project: Path, config: Config, stack: str, variant: str | None, *, registry: str | None = None,
         local_only: bool = False, skip_smoke: bool = False, lock_override: Lock | None = None,
         profile: str | None = None, manifest_override: tuple[Manifest, str] | None = None) -> Target:
    """``lock_override``: build from this lock instead of pins/STACK.lock.json (`buildctl repro --relock`);
    ``profile``: the default profile baked into the launch script (`buildctl build --profile`);
    ``manifest_override``: (manifest, sha256 of its text) instead of the file's (`buildctl bump`'s candidate,
    loaded from the edited text with the file's name and folder)."""
    path = pins.find(project / "pins", stack)
    manifest = manifest_override[0] if manifest_override else pins.load(path)
    v = pins.select_variant(manifest, variant)
    lock = lock_override or lockfile.read_beside(path, manifest.stack)
    vlock = lock.variants.get(v.name) if lock else None
    sha = manifest_override[1] if manifest_override else pins.manifest_sha256(path)
    stale = lock is not None and lock.manifest_sha256 != sha
    templates = render.load_templates(project / "images")
    if profile is not None:
        if manifest.entrypoint is None:
            raise UsageError(f"--profile {profile}: stack {manifest.stack} has no entrypoint")
        select_profile(variant_entrypoint(manifest, v), profile)  # an unknown name is a usage error here
    expect = smoke_expect.expect_for(manifest, vlock, v, profile=profile)
    extras = graph.Extras(
        entrypoint=render_entrypoint_fragment(manifest, v, profile) if manifest.entrypoint else None,
        assemble_labels={smoke_expect.EXPECT_LABEL: expect.label_value(), smoke_expect.PYTHON_LABEL: manifest.smoke.python},
        skip_smoke=skip_smoke,
    )
    g = graph.build(manifest, vlock, v, templates=templates.digests(), extras=extras)
    reg = None if local_only else (registry or config.registry or (manifest.push.registry if manifest.push else None))
    repository = graph.default_repository(manifest)
    base_spec = g.node("base").spec
    assert isinstance(base_spec, specs.BaseNodeSpec)
    base_ref = mirror_ref(base_spec.ref, dict(config.registry_mirrors))
    return Target(manifest=manifest, manifest_path=path, lock=lock, vlock=vlock, lock_stale=stale, variant=v,
                  graph=g, templates=templates, registry=reg, repository=repository, base_ref=base_ref,
                  refs=refs_for(g, registry=reg, repository=repository, base_ref=base_ref), profile=profile)
