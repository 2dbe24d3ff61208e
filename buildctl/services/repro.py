"""`buildctl repro`: build a stack's variant twice with nothing shared, then compare node by node.

The two builds share only verified inputs: the base image (by digest), git sources (checked out at their
locked tree SHA) and downloads (checked against their sha256). Everything that could carry one build's
output into the other is separate:

- no engine step cache (every step of both builds runs afresh: ``nocache``);
- a cache root of its own per build (``<cache>/repro/<stack>/<variant>/<run>/a|b``): compiled wheels,
  build records, logs;
- the compiler cache: build a compiles cold (an empty local folder of its own) and build b compiles warm, from
  the folder a filled (``--cold-compiles``: b cold too, with one of its own), so that a wheel compiled from
  cache hits is compared with the cold compile it must equal; never the configured server (it would make both
  warm from other builds);
- a tag namespace of its own per build (``buildctl-repro/<run>-a/...``), local to the engine (no registry:
  the second build must not pull what the first pushed).

``--relock`` resolves the manifest afresh before each build (into memory: pins/STACK.lock.json is left as it
is), so that what floats in the manifest floats between the builds, as it would between two nightly runs.

Then, per node (repro.compare_node): the diff IDs of its own layers, and where they differ, the `docker save`
archives of both images, explained. The images and caches of both builds are removed at the end unless
``keep``; the report is written under ``<cache>/reports/repro/``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from buildctl.builder import pipeline
from buildctl.config import CacheLayout, CompileCache, Config
from buildctl.errors import BuildctlError, LockError
from buildctl.graph import plan
from buildctl.graph.graph import Graph
from buildctl.lock.drift import diff_variant
from buildctl.lock.lock import check, lock_stack
from buildctl.lock.lockfile import Lock
from buildctl.lock.resolvers import Resolvers
from buildctl.manifest import pins
from buildctl.manifest.model import ReproLevel
from buildctl.repro import audit, repro
from buildctl.repro import levels as levels_of
from buildctl.repro.archive import ImageConfig, SavedImages
from buildctl.safepath import write_atomic
from buildctl.services import build, target

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine
    from buildctl.engine.values import ImageInfo

SIDES = ("a", "b")


class ReproProgress(Protocol):
    """What the runner says while it works; ``build`` gives the node progress of one of the two builds."""

    def step(self, text: str) -> None: ...

    def build(self, side: str, nodes: Sequence[str]) -> AbstractContextManager[pipeline.BuildProgress]: ...


@dataclass(frozen=True, kw_only=True)
class ReproOptions:
    mode: Literal["lock", "relock"] = "lock"
    jobs: int = 2
    keep: bool = False  # keep both builds' images, caches and archives (to look at them)
    lock_check: bool = True  # run `buildctl lock --check` as part of the audit (reaches registries, indexes)
    cold_compiles: bool = False  # build b compiles with a compiler cache of its own too (default: with a's, warm)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    report: repro.ReproReport
    report_file: Path
    run_dir: Path
    refs: dict[str, dict[str, str]]  # side -> node -> image reference (removed unless keep)


BUILDKIT_MTIMES = ("built with the buildkit backend: the engine's BuildKit (Docker 20.10's) gives the folders a COPY "
                   "writes into, where the parent has them, the time of the build, and a RUN below such a folder "
                   "copies it up with that time; the files are the same, so nodes declared bit reach semantic "
                   "(docs/concepts/reproducibility.md; the classic backend reaches bit)")


def run_id() -> str:
    """Time and a random suffix, all lower case: it is part of image names."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def side_config(config: Config, root: Path, *, compile_folder: Path | None = None) -> Config:
    """The configuration of one build: its own cache root, sharing only hash-verified inputs, no registry; its
    compiler cache the local folder ``compile_folder`` (None: its own, empty), never a server, or off as
    configured."""
    root.mkdir(parents=True, exist_ok=True)
    for shared in ("sources", "downloads"):
        src = getattr(config.cache, shared)
        Path(src).mkdir(parents=True, exist_ok=True)
        link = root / shared
        if not link.exists():
            link.symlink_to(src, target_is_directory=True)
    compile_cache = CompileCache(off=True) if config.compile_cache.off else CompileCache(folder=compile_folder)
    return dataclasses.replace(config, cache=CacheLayout(root=root), registry=None, compile_cache=compile_cache)


def compiles_line(config: Config, options: ReproOptions, report_b: pipeline.BuildReport) -> str:
    """How the two builds compiled, in one line: what the report's ``compiles`` says."""
    if config.compile_cache.off:
        return "both builds compiled without a compiler cache (compile_cache is off)"
    counts = "; ".join(f"{n.name}: {n.cache_hits} of {n.cache_hits + n.cache_misses} objects from the cache"
                       for n in report_b.nodes if n.cache_hits is not None and n.cache_misses is not None)
    if options.cold_compiles:
        return "both builds compiled cold, each with an empty compiler cache of its own" + (
            f" (b: {counts})" if counts else "")
    return ("build a compiled cold (an empty compiler cache), build b warm from the cache a filled: a wheel compiled "
            "from cache hits is compared with the cold compile" + (f" (b: {counts})" if counts else ""))


def audit_target(target: target.Target, *, drift: Sequence[object] = ()) -> list[audit.AuditFinding]:
    return audit.audit(target.manifest, target.vlock, target.variant, target.graph, target.templates, target.refs, drift)


def lock_check(target: target.Target, resolvers: Resolvers, config: Config) -> tuple[list[object], str]:
    """`buildctl lock --check` for the variant: (drift, "" ) or ([], why it could not be checked)."""
    try:
        drift = check(target.manifest, target.manifest_path.name, pins.manifest_sha256(target.manifest_path), [target.variant.name],
                      resolvers, config, target.lock)
    except BuildctlError as exc:
        return [], f"the lock could not be checked: {exc.what}" + (f" ({exc.why})" if exc.why else "")
    return list(drift), ""


def relock(target: target.Target, resolvers: Resolvers, config: Config) -> Lock:
    outcome = lock_stack(target.manifest, pins.manifest_sha256(target.manifest_path), [target.variant.name], resolvers, config,
                         None)
    return outcome.lock


def _image_config(info: ImageInfo) -> ImageConfig:
    return ImageConfig(env=tuple(f"{k}={v}" for k, v in info.env.items()), labels=dict(info.labels),
                             entrypoint=info.entrypoint, cmd=info.cmd, workdir=info.workdir, user=info.user)


def _parent_layers(engine: Engine, graph: Graph, refs: dict[str, str], name: str,
                   cache: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    node = graph.node(name)
    if node.kind == "wheel":
        return ()  # FROM scratch: the compile ran in compile-env, but the image holds the wheel alone
    parent = node.parents[0]
    if parent not in cache:
        cache[parent] = engine.inspect_image(refs[parent]).layers
    return cache[parent]


def compare(engine: Engine, graphs: dict[str, Graph], refs: dict[str, dict[str, str]], *,
            levels: dict[str, ReproLevel],
            floating: dict[str, list[repro.Floating]], saves: Path) -> list[repro.NodeReport]:
    """Each built node of build a against the same node of build b."""
    ga, gb = graphs["a"], graphs["b"]
    reports: list[repro.NodeReport] = []
    parents: dict[str, dict[str, tuple[str, ...]]] = {s: {} for s in SIDES}
    verdicts: dict[str, repro.Verdict] = {}
    for node in ga.nodes:
        if node.kind == "base" or node.name not in gb.names():
            continue
        sides: dict[str, repro.Side] = {}
        infos = {s: engine.inspect_image(refs[s][node.name]) for s in SIDES}
        own = {s: repro.own_layers(infos[s].layers, _parent_layers(engine, graphs[s], refs[s], node.name, parents[s]))
               for s in SIDES}
        for s in SIDES:
            archive = None
            if own["a"] != own["b"]:
                tar = saves / f"{s}-{node.slug}.tar"
                engine.save(refs[s][node.name], tar)
                archive = SavedImages(tar)
            config = archive.image().config if archive is not None else _image_config(infos[s])
            sides[s] = repro.Side(ref=refs[s][node.name], key=graphs[s].node(node.name).key, diff_ids=own[s],
                                  config=config, archive=archive)
        level = levels_of.level_for(node.kind, levels)
        upstream = [p for p in node.parents if p in verdicts and verdicts[p] is not repro.Verdict.BIT]
        report = repro.compare_node(node=node.name, kind=node.kind, level=level, side_a=sides["a"], side_b=sides["b"],
                                    floating=floating.get(node.name, ()), upstream=upstream)
        verdicts[node.name] = report.verdict
        reports.append(report)
    return reports


def write_report(report: repro.ReproReport, folder: Path, name: str) -> Path:
    """The report as canonical JSON, written whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / name
    write_atomic(dest, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")  # whole, 0644 as a plain write
    return dest


def _remove(engine: Engine, refs: dict[str, dict[str, str]], run_dir: Path) -> list[str]:
    """Remove both builds' images (children first) and caches; what could not be removed."""
    errors = []
    for side in SIDES:
        for ref in reversed(list(refs.get(side, {}).values())):
            try:
                if engine.image_exists(ref):
                    engine.remove_image(ref)
            except BuildctlError as exc:
                errors.append(f"{ref}: {exc.why or exc.what}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return errors


@contextmanager
def _cleanup(engine: Engine, refs: dict[str, dict[str, str]], run_dir: Path, keep: bool) -> Iterator[None]:
    try:
        yield
    except BaseException:
        if not keep:
            _remove(engine, refs, run_dir)  # what failed matters more than what is left behind
        raise
    if not keep:
        errors = _remove(engine, refs, run_dir)
        if errors:
            raise BuildctlError("the images of the repro builds could not all be removed",
                                why="; ".join(errors[:4]), fix="remove them with `docker rmi`")


def run(*, project: Path, config: Config, stack: str, variant: str | None, engine: Engine, progress: ReproProgress,
        resolvers: Callable[[Config], Resolvers], options: ReproOptions = ReproOptions(),
        between: Callable[[], None] | None = None) -> Outcome:
    """Build twice, compare, report (the report says whether every node met its declared level).

    ``resolvers`` makes the resolvers of `buildctl lock` (for --check, and for --relock a fresh set per
    build, so that nothing resolved for the first build is remembered for the second). ``between`` runs
    after the first build and before the second.
    """
    from buildctl.sources.sources import Sources

    t0 = target.load(project, config, stack, variant, local_only=True, skip_smoke=True)
    if options.mode == "lock" and t0.vlock is None:
        raise LockError(f"{t0.graph.stack} has no lock for variant {t0.graph.variant}: nothing to build twice from",
                        fix=f"run `buildctl lock {t0.graph.stack} --variant {t0.graph.variant}`, or pass --relock to "
                            "lock afresh for each build")
    notes: list[str] = []
    drift: list[object] = []
    if options.mode == "lock" and options.lock_check:
        progress.step("checking the lock (buildctl lock --check)")
        drift, why = lock_check(t0, resolvers(config), config)
        if why:
            notes.append(why)
    findings = audit_target(t0, drift=drift)
    rid = run_id()
    run_dir = config.cache.root / "repro" / t0.graph.stack / t0.graph.variant / rid
    refs: dict[str, dict[str, str]] = {}
    graphs: dict[str, Graph] = {}
    locks: dict[str, Lock | None] = {}
    bases: dict[str, str] = {}
    built: dict[str, pipeline.BuildReport] = {}
    with _cleanup(engine, refs, run_dir, options.keep):
        for side in SIDES:
            warm = side == "b" and not options.cold_compiles
            cfg = side_config(config, run_dir / side, compile_folder=(run_dir / "a" / "ccache") if warm else None)
            override = None
            if options.mode == "relock":
                progress.step(f"build {side}: locking {t0.graph.stack} afresh")
                override = relock(t0, resolvers(cfg), cfg)
            t = target.load(project, cfg, stack, variant, local_only=True, skip_smoke=True, lock_override=override)
            locks[side] = t.lock
            repository = f"buildctl-repro/{rid}-{side}/{t.graph.stack}"
            t = dataclasses.replace(t, repository=repository,
                                    refs=plan.refs_for(t.graph, registry=None, repository=repository,
                                                       base_ref=t.base_ref))
            graphs[side] = t.graph
            refs[side] = {n.name: t.refs[n.name] for n in t.graph.nodes if n.kind != "base"}
            bases[side] = t.refs["base"]
            progress.step(f"build {side} of 2: every node afresh (no step cache, cache root {cfg.cache.root})")
            with progress.build(side, t.graph.names()) as node_progress:
                built[side] = build.build_target(t, engines=[engine], config=cfg,
                                      sources=Sources.from_config(cfg, base_dir=t.manifest_path.parent),
                                      progress=node_progress, project=project,
                                      options=pipeline.BuildOptions(jobs=options.jobs, skip_smoke=True, nocache=True))
            if side == "a" and between is not None:
                between()
        if options.mode == "relock":
            la, lb = locks["a"], locks["b"]
            va = la.variants.get(t0.variant.name) if la else None
            vb = lb.variants.get(t0.variant.name) if lb else None
            if va is not None and vb is not None:
                lock_drift = diff_variant(t0.variant.name, va, vb)
                notes += [f"the two locks differ: {d.message()}" for d in lock_drift]
                findings += audit.drift_findings(lock_drift)
        progress.step("comparing the two builds node by node")
        saves = run_dir / "saves"
        saves.mkdir(parents=True, exist_ok=True)
        floating = audit.floating_by_node(findings, graphs["a"])
        nodes = compare(engine, graphs, {s: {**refs[s], "base": bases[s]} for s in SIDES},
                        levels=dict(t0.manifest.repro.levels), floating=floating, saves=saves)
        if engine.backend == "buildkit" and any(
                n.level is ReproLevel.BIT and n.verdict is repro.Verdict.SEMANTIC for n in nodes):
            notes.append(BUILDKIT_MTIMES)
        report = repro.ReproReport(stack=t0.graph.stack, variant=t0.graph.variant, mode=options.mode, nodes=tuple(nodes),
                                   audit=tuple(f.to_json() for f in findings), notes=tuple(notes), backend=engine.backend,
                                   compiles=compiles_line(config, options, built["b"]))
        report_file = write_report(report, config.cache.reports / "repro",
                                   f"{t0.graph.stack}-{t0.graph.variant}-{rid}.json")
    return Outcome(report=report, report_file=report_file, run_dir=run_dir, refs=refs)

