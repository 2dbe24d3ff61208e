"""Building a target: the one sequence behind `buildctl build`, nightly, repro and the bench.

Check the lock (saying first what cannot be reached when there is none), turn the target into the
build's input (inputs.BuildInput: no manifest, no lock file past here), then run the pipeline, which
executes the plan (``plan_for``: the same decision `buildctl plan` prints) made once it holds the
stack's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.builder.inputs import BuildInput
from buildctl.config import Config
from buildctl.errors import BuildctlError, LockError, UnreachableError, UsageError
from buildctl.graph import plan as planmod
from buildctl.graph.plan import EngineState
from buildctl.graph.records import RecordStore, WheelFolder, state_root
from buildctl.graph.routing import Route
from buildctl.lock import lockfile
from buildctl.lock.lockfile import VariantLock
from buildctl.manifest.model import Manifest, ReproLevel
from buildctl.services import wiring
from buildctl.services.target import Target

if TYPE_CHECKING:  # the build's modules are imported where a build runs: `buildctl plan` needs none of them
    from buildctl.builder import pipeline
    from buildctl.engine.engine import Engine
    from buildctl.sources.sources import Sources


def plan_for(target: Target, engine: EngineState | None, config: Config, *, full: bool = True, strict: bool = False,
             emulation: bool | None = None, load: bool = True, route: Route | None = None) -> planmod.Plan:
    """The plan of ``target`` against this engine, its registry, the records and the wheel cache under the cache root.
    `buildctl plan` asks for every node (``full``); a build asks only what its actions need and stops on an
    engine or registry that does not answer (``strict``): the actions are the same."""
    store = RecordStore(state_root(config.cache))
    return planmod.make(target.graph, refs=target.refs, engine=engine, records=store.load_all(target.graph), registry=target.registry,
                        emulation=emulation, missing=target.vlock.missing if target.vlock else None,
                        trusted=lambda n: store.has(target.graph.stack, target.graph.variant, n.name, n.key),
                        wheels=WheelFolder(config.cache.wheels), full=full, strict=strict, load=load, route=route)


@dataclass(frozen=True)
class LockedSources:
    """inputs.SourceTrees over the target's manifest and lock: each component prepared at its lock."""

    manifest: Manifest
    vlock: VariantLock
    sources: Sources

    def tree(self, component: str) -> str:
        return self.vlock.components[component].tree

    def export(self, component: str) -> Path:
        prepared = self.sources.prepare_component(self.manifest.component(component), self.vlock.components[component])
        return self.sources.exported(prepared)


def build_input(target: Target, sources: Sources) -> BuildInput:
    """What the pipeline is given: the graph and names, plus the few manifest and lock values the host fetches with."""
    from buildctl.repro.levels import level_for

    assert target.vlock is not None, "require_lock first"
    levels = target.manifest.repro.levels
    return BuildInput(
        graph=target.graph, refs=target.refs, registry=target.registry, base_ref=target.base_ref, templates=target.templates,
        python=target.variant.python, image_python=target.manifest.smoke.python, base_image=target.variant.image,
        base_digest=target.vlock.base.digest if target.vlock.base else "",
        bit_level=frozenset(n.kind for n in target.graph.nodes if level_for(n.kind, levels) is ReproLevel.BIT),
        sources=LockedSources(target.manifest, target.vlock, sources))


def require_lock(target: Target, engine: Engine, sources: Sources) -> None:
    """A full lock that covers the manifest; without one, say first what cannot be reached."""
    lockfile.refuse_partial(target.lock, target.graph.variant, action="build", lock_file=str(lockfile.lock_path(target.manifest_path)))
    g = target.graph
    unlocked = [(n.name, u) for n in g.nodes for u in n.unlocked]
    if not unlocked:
        return
    if target.vlock is None:
        report_unreachable(target, engine, sources)
        raise LockError(
            f"{g.stack} has no lock for variant {g.variant}: nothing to build from",
            why="builds use exact versions, digests and SHAs only",
            fix=f"run `buildctl lock {g.stack} --variant {g.variant}` (or `make lock`) first")
    listed = "; ".join(f"{n}: {u}" for n, u in unlocked[:6]) + (" ..." if len(unlocked) > 6 else "")
    raise LockError(f"the lock of {g.stack} does not cover the manifest any more ({listed})",
                    why="the manifest changed since it was locked",
                    fix=f"re-lock: `buildctl lock {g.stack} --variant {g.variant}`")


def report_unreachable(target: Target, engine: Engine, sources: Sources) -> None:
    """Without a lock nothing can be built; if the base or git hosts cannot be reached, say that first."""
    problems: list[UnreachableError] = []
    try:
        if not engine.image_exists(target.base_ref):
            engine.registry_digest(target.base_ref)
    except UnreachableError as exc:
        problems.append(exc)
    seen: set[str] = set()
    for c in target.manifest.components:
        url = sources.url(c.repo)
        host = url.split("://", 1)[-1].split("/", 1)[0]
        if host in seen:
            continue
        seen.add(host)
        try:
            sources.resolve_commit(c.repo, c.commit, branch=c.branch)
        except UnreachableError as exc:
            problems.append(exc)
        except BuildctlError:
            pass  # reachable; the lock will report what is wrong with it
    if not problems:
        return
    g = target.graph
    raise UnreachableError(
        f"cannot build {g.stack}/{g.variant} here: " + "; ".join(p.what for p in problems),
        why="\n".join(p.why for p in problems if p.why),
        fix="\n  ".join(p.fix for p in problems if p.fix)
            + f"\n  then `buildctl lock {g.stack} --variant {g.variant}` and build again")


def build_target(target: Target, *, engines: Sequence[Engine], config: Config, progress: pipeline.BuildProgress,
                 project: Path, sources: Sources | None = None, options: pipeline.BuildOptions | None = None,
                 smoke_gate: pipeline.SmokeGate | None = None, route: Route | None = None) -> pipeline.BuildReport:
    """Build the missing nodes of ``target`` as its plan says (sources default: from the configuration), on ``engines``:
    the builders of ``route`` (wiring.route) where it is given."""
    from buildctl.builder import pipeline

    if not engines:
        raise UsageError("no engine to build with")
    opts = options or pipeline.BuildOptions()
    src = sources or wiring.sources(config, base_dir=target.manifest_path.parent)
    require_lock(target, engines[0], src)
    e0 = engines[0]
    return pipeline.run(build_input(target, src),
                        decide=lambda: plan_for(target, e0, config, full=False, strict=True, emulation=opts.emulation,
                                                load=opts.load, route=route),
                        engines=engines, config=config, fetchers=wiring.HostFetchers(config), progress=progress,
                        project=project, options=opts,
                        smoke_gate=smoke_gate)


def prepare_sources(target: Target, sources: Sources) -> list[str]:
    """Prepare every git component at its lock, as a build would first (`build --dry-run` does this, so that
    a change that does not apply, or a mirror that lacks objects, shows before anything is built). Raises
    what preparing raises; returns one line per component."""
    lines: list[str] = []
    for c in target.manifest.components:
        locked = target.vlock.components.get(c.name) if target.vlock else None
        if locked is None:
            why = f"not locked{' (the lock is partial)' if target.vlock and target.vlock.missing else ''}"
            lines.append(f"source {c.name}: not prepared: {why}; `buildctl lock {target.manifest.stack}` first")
            continue
        prepared = sources.prepare_component(c, locked)
        what = ", ".join(ch.label() for ch in locked.changes) or "no changes"
        subs = f", {len(prepared.submodules)} submodule(s)" if prepared.submodules else ""
        lines.append(f"source {c.name}: prepared {prepared.tree} ({locked.commit[:12]} + {what}{subs})")
    return lines
