"""`buildctl nightly STACK...`: re-lock, build, smoke, push with immutable tags, then move `nightly`.

For every stack and variant, in order, each stage only when the one before it succeeded:

1. lock    resolve every pin again; what moved since the lock on disk is reported, and the lock is
           rewritten only when something did (never partially);
2. build   build what is missing (the smoke gate runs inside: the entrypoint is baked only past it);
3. push    every node by content tag, the final image by ``<stack>-<variant>-<lock hash>`` and
           ``<variant>-nightly-YYYYMMDD`` (and ``nightly-YYYYMMDD`` for the default variant), all confirmed
           by digest;
4. promote move ``nightly`` (``<variant>-nightly``) only past the gate and with the smoke evidence of the
           image's digest in the registry (services/evidence.py), within a size budget that fails;
           the report gives, per layer, the bytes added or rewritten against the last ``nightly``.

One stack's failure never stops the others. The run writes one JSON and one Markdown report
(``<cache>/reports/nightly/<started>.{json,md}`` plus ``latest.*``) that say what was built, what was
reused, what changed since the previous nightly and what failed, so that a person reads one page.

``run`` takes the stages behind a protocol (``NightlySteps``); ``RealSteps`` are buildctl's own: the locker,
``build.build_target`` and ``ship.publish``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl import untrusted
from buildctl.builder.state import BuildReport
from buildctl.config import Config
from buildctl.errors import BuildctlError, DiskFull, disk_full
from buildctl.graph import routing
from buildctl.graph.graph import Graph
from buildctl.lock import lockfile
from buildctl.manifest import pins
from buildctl.safepath import write_atomic
from buildctl.services import build, bump, lintargs, lock, lockarchive, ship, target, wiring
from buildctl.ui import UI

Stage = Literal["bump", "lock", "build", "push", "promote"]
Status = Literal["ok", "failed", "skipped"]
STAGES: tuple[Stage, ...] = ("lock", "build", "push", "promote")
SCHEMA = 1
_DATED = re.compile(r"(^|-)nightly-[0-9]{8}\Z")  # nightly-YYYYMMDD, <variant>-nightly-YYYYMMDD: the day's latest image


# ------------------------------------------------------------------------------------------ values


@dataclass(frozen=True, kw_only=True)
class LockStep:
    lock_hash: str
    drift: tuple[str, ...]  # one line per pin that moved since the lock on disk (empty: current)
    written: bool  # the lock file was (re)written


@dataclass(frozen=True, kw_only=True)
class BuildStep:
    final_image: str
    node_keys: Mapping[str, str]
    built: tuple[str, ...]
    reused: tuple[str, ...]  # present locally or pulled from the registry
    smoke: str  # passed | skipped | not-run
    builders: str = ""  # where its nodes went: the builders of its platform (routing.Route.label)
    platform: str = ""
    # per compile this night: "<component>: 412 of 430 compiled objects from the cache"
    compile_cache: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PushStep:
    pushed: Mapping[str, str]  # ref -> confirmed digest
    promoted: tuple[str, ...]
    not_promoted: tuple[str, ...]  # "ref: reason"
    failed: tuple[str, ...]  # "ref: error"
    checks: tuple[Mapping[str, Any], ...] = ()  # what promotion read: evidence, size against the last promoted


@dataclass(frozen=True, kw_only=True)
class StageResult:
    stage: Stage
    status: Status
    summary: str
    seconds: float = 0.0
    fix: str = ""


@dataclass(frozen=True, kw_only=True)
class VariantRun:
    stack: str
    variant: str
    stages: tuple[StageResult, ...] = ()
    lock: LockStep | None = None
    build: BuildStep | None = None
    push: PushStep | None = None
    since_previous: tuple[str, ...] = ()  # what changed since the previous nightly of this variant

    @property
    def ok(self) -> bool:
        return all(s.status != "failed" for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack, "variant": self.variant, "ok": self.ok,
            "stages": [{"stage": s.stage, "status": s.status, "summary": s.summary, "seconds": round(s.seconds, 1),
                        "fix": s.fix} for s in self.stages],
            "lock": None if self.lock is None else {"hash": self.lock.lock_hash, "drift": list(self.lock.drift),
                                                    "written": self.lock.written},
            "build": None if self.build is None else {
                "final_image": self.build.final_image, "node_keys": dict(self.build.node_keys),
                "built": list(self.build.built), "reused": list(self.build.reused), "smoke": self.build.smoke,
                "platform": self.build.platform, "builders": self.build.builders,
                "compile_cache": list(self.build.compile_cache)},
            "push": None if self.push is None else {
                "pushed": dict(self.push.pushed), "promoted": list(self.push.promoted),
                "not_promoted": list(self.push.not_promoted), "failed": list(self.push.failed),
                "checks": [dict(c) for c in self.push.checks]},
            "since_previous": list(self.since_previous),
        }


@dataclass(frozen=True, kw_only=True)
class NightlyReport:
    started: str
    finished: str = ""
    runs: tuple[VariantRun, ...] = ()
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "started": self.started, "finished": self.finished, "ok": self.ok,
                "runs": [r.to_json() for r in self.runs]}


# ------------------------------------------------------------------------------------------ seams


class NightlySteps(Protocol):
    """What a nightly does to one variant; the real one drives lock/pipeline/push, tests pass data."""

    def lock(self, stack: str, variant: str) -> LockStep: ...

    def build(self, stack: str, variant: str) -> BuildStep: ...

    def push(self, stack: str, variant: str, *, tags: Sequence[str], moving: Sequence[str]) -> PushStep: ...


@dataclass(frozen=True, kw_only=True)
class BumpStep:
    """A gated bump of a stack before its nightly (`nightly --bump STACK`): bump.bump's outcome."""

    ok: bool
    summary: str
    fix: str = ""


class Bumper(Protocol):
    def bump(self, stack: str) -> BumpStep: ...


def immutable_tags(stack: str, variant: str, lock_hash: str, day: str, *, default_variant: bool) -> tuple[str, ...]:
    tags = [f"{stack}-{variant}-{lock_hash[:16]}", f"{variant}-nightly-{day}"]
    if default_variant:
        tags.append(f"nightly-{day}")
    return tuple(tags)


def since_previous(previous: Mapping[str, Any] | None, run: VariantRun) -> tuple[str, ...]:
    """What differs from the previous nightly's run of the same stack and variant (pure)."""
    if previous is None:
        return ("no previous nightly of this variant",)
    out: list[str] = []
    old_lock = (previous.get("lock") or {}).get("hash")
    if run.lock is not None and old_lock and old_lock != run.lock.lock_hash:
        out.append(f"lock {old_lock[:16]} -> {run.lock.lock_hash[:16]}")
    old_keys: Mapping[str, str] = (previous.get("build") or {}).get("node_keys") or {}
    if run.build is not None:
        for node, key in sorted(run.build.node_keys.items()):
            before = old_keys.get(node)
            if before is None:
                out.append(f"node {node}: new")
            elif before != key:
                out.append(f"node {node}: key {before[:12]} -> {key[:12]}")
        for node in sorted(set(old_keys) - set(run.build.node_keys)):
            out.append(f"node {node}: gone")
    if not out and run.build is not None:
        out.append("nothing: every node key is the same as last night")
    return tuple(out)


def _stage(stage: Stage, started: float, summary: str, status: Status = "ok", fix: str = "") -> StageResult:
    return StageResult(stage=stage, status=status, summary=summary, seconds=time.monotonic() - started, fix=fix)


def run_variant(steps: NightlySteps, stack: str, variant: str, *, day: str, default_variant: bool, push: bool,
                previous: Mapping[str, Any] | None, bumped: BumpStep | None = None) -> VariantRun:
    """The four stages for one variant; the first failure ends it and the rest are reported skipped. A red
    bump of the stack (``bumped``) is a failure before them: nothing is built or moved that day."""
    r = VariantRun(stack=stack, variant=variant)
    stages: list[StageResult] = []
    if bumped is not None:
        stages.append(StageResult(stage="bump", status="ok" if bumped.ok else "failed", summary=bumped.summary,
                                  fix=bumped.fix))
        if not bumped.ok:
            stages += [StageResult(stage=s, status="skipped", summary="bump failed") for s in STAGES]
            return replace(r, stages=tuple(stages), since_previous=since_previous(previous, r))

    def fail(stage: Stage, started: float, exc: BuildctlError | OSError) -> VariantRun:
        if isinstance(exc, OSError):  # a full disk that no write path named: the stage fails, the report says so
            exc = _disk_full(exc)  # (any other OSError goes on)
        why = f" ({exc.why})" if exc.why else ""
        stages.append(_stage(stage, started, f"{exc.what}{why}", "failed", exc.fix))
        for later in STAGES[STAGES.index(stage) + 1:]:
            stages.append(StageResult(stage=later, status="skipped", summary=f"{stage} failed"))
        return replace(r, stages=tuple(stages), since_previous=since_previous(previous, r))

    t0 = time.monotonic()
    try:
        lock = steps.lock(stack, variant)
    except (BuildctlError, OSError) as exc:
        return fail("lock", t0, exc)
    r = replace(r, lock=lock)
    stages.append(_stage("lock", t0, ("re-locked: " + "; ".join(lock.drift)) if lock.drift else "lock is current"))

    t0 = time.monotonic()
    try:
        build = steps.build(stack, variant)
    except (BuildctlError, OSError) as exc:
        return fail("build", t0, exc)
    r = replace(r, build=build)
    stages.append(_stage("build", t0, f"built {len(build.built)}, reused {len(build.reused)}; smoke {build.smoke}"))

    if not push:
        stages += [StageResult(stage="push", status="skipped", summary="--no-push"),
                   StageResult(stage="promote", status="skipped", summary="--no-push")]
        return replace(r, stages=tuple(stages), since_previous=since_previous(previous, r))

    t0 = time.monotonic()
    moving = ("nightly",) if build.smoke == "passed" else ()
    try:
        pushed = steps.push(stack, variant, tags=immutable_tags(stack, variant, lock.lock_hash, day,
                                                                default_variant=default_variant), moving=moving)
    except (BuildctlError, OSError) as exc:
        return fail("push", t0, exc)
    r = replace(r, push=pushed)
    if pushed.failed:
        stages.append(_stage("push", t0, "; ".join(pushed.failed), "failed"))
        stages.append(StageResult(stage="promote", status="skipped", summary="push failed"))
    else:
        stages.append(_stage("push", t0, f"{len(pushed.pushed)} ref(s) confirmed by digest"))
        if not moving:
            stages.append(StageResult(stage="promote", status="failed" if build.smoke == "failed" else "skipped",
                                      summary=f"nightly not moved: smoke {build.smoke}"))
        elif pushed.not_promoted:
            # exactly what moved and what did not (a registry that died between two moving tags)
            moved = f"moved {', '.join(pushed.promoted)}; " if pushed.promoted else ""
            stages.append(StageResult(stage="promote", status="failed",
                                      summary=moved + "not moved: " + "; ".join(pushed.not_promoted)))
        else:
            stages.append(StageResult(stage="promote", status="ok",
                                      summary="moved " + ", ".join(pushed.promoted)))
    return replace(r, stages=tuple(stages), since_previous=since_previous(previous, r))


def compile_cache_lines(graph: Graph, report: BuildReport) -> tuple[str, ...]:
    """"fastmath: 12 of 14 compiled objects from the cache", per compile of this build that used the cache."""
    out = []
    for n in report.nodes:
        if n.cache_hits is not None and n.cache_misses is not None:
            component = graph.node(n.name).component or n.name
            out.append(f"{component}: {n.cache_hits} of {n.cache_hits + n.cache_misses} compiled objects from the cache")
    return tuple(out)


def _disk_full(exc: OSError) -> BuildctlError:
    """The DiskFull a stage's OSError is, naming the file where the system said it; any other OSError goes on."""
    full = disk_full(exc.filename or "a file (the system did not say which)", exc)
    if full is None:
        raise exc
    return full


class ReportUnwritten(DiskFull):
    """The night ran, but its report could not be written (the disk is full there): ``report`` holds it."""

    def __init__(self, full: DiskFull, report: NightlyReport) -> None:
        super().__init__(f"the nightly report could not be written: {full.what}", why=full.why, fix=full.fix)
        self.report = report


REPORT_MAX = 16 << 20  # a night's JSON report is a few KB a variant; an earlier one past this is not read


def _usable(run: object) -> bool:
    """A saved run whose fields ``since_previous`` reads have their types: a report edited or cut otherwise is
    passed over, as one that is not JSON is."""
    if not isinstance(run, dict) or not run.get("build"):
        return False
    build, lock = run["build"], run.get("lock")
    keys = build.get("node_keys") if isinstance(build, dict) else None
    return (isinstance(run.get("stack"), str) and isinstance(run.get("variant"), str) and isinstance(build, dict)
            and (keys is None or (isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values())))
            and (lock is None or (isinstance(lock, dict) and isinstance(lock.get("hash"), str | None))))


def previous_runs(report_dir: Path) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The newest earlier nightly result of each (stack, variant), from the saved reports (read through the
    bounded reader: the folder may be any --report-dir, and a file there anything: a FIFO is passed over unopened)."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for path in sorted(report_dir.glob("2*.json")):
        try:
            data = untrusted.loads(untrusted.read_regular(path, REPORT_MAX))
        except (OSError, ValueError):  # not a regular file, not readable, too large or deep, not UTF-8, not JSON
            continue
        runs = data.get("runs") if isinstance(data, dict) else None
        for run in runs if isinstance(runs, list) else ():
            if _usable(run):
                found[(run["stack"], run["variant"])] = run
    return found


def run(steps: NightlySteps, targets: Sequence[tuple[str, str, bool]], *, report_dir: Path, push: bool = True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_result: Callable[[VariantRun], None] = lambda _r: None, bumper: Bumper | None = None,
        bump_stacks: Sequence[str] = ()) -> tuple[NightlyReport, Path]:
    """Run every (stack, variant, is_default_variant); write the JSON + Markdown reports; return both.
    ``bump_stacks``: stacks whose branch components ``bumper`` bumps (gated) once, before their first variant."""
    start = clock()
    # the pid too: two nightlies started in the same second write a report each (latest.* is replaced
    # atomically by whichever finishes last)
    stamp = f"{start.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"
    previous = previous_runs(report_dir)
    report = NightlyReport(started=start.isoformat(timespec="seconds"))
    results: list[VariantRun] = []
    bumps: dict[str, BumpStep] = {}
    for stack, variant, default in targets:
        if bumper is not None and stack in bump_stacks and stack not in bumps:
            try:
                bumps[stack] = bumper.bump(stack)
            except BuildctlError as exc:
                bumps[stack] = BumpStep(ok=False, summary=f"{exc.what}{f' ({exc.why})' if exc.why else ''}",
                                        fix=exc.fix)
        result = run_variant(steps, stack, variant, day=start.strftime("%Y%m%d"), default_variant=default,
                             push=push, previous=previous.get((stack, variant)), bumped=bumps.get(stack))
        results.append(result)
        on_result(result)
    report = replace(report, runs=tuple(results), finished=clock().isoformat(timespec="seconds"))
    text = json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    markdown = render_markdown(report)
    path = _unique(report_dir, stamp)
    try:
        try:
            report_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _disk_full(exc) from exc
        write_atomic(path, text)
        write_atomic(path.with_suffix(".md"), markdown)
        write_atomic(report_dir / "latest.json", text)
        write_atomic(report_dir / "latest.md", markdown)
    except DiskFull as full:
        # the dated files go together or not at all; latest.* keep the previous night's whole
        if not (report_dir / "latest.json").is_file() or (report_dir / "latest.json").read_text() != text:
            for p in (path, path.with_suffix(".md")):
                p.unlink(missing_ok=True)
        raise ReportUnwritten(full, report) from full
    return report, path


def _unique(report_dir: Path, stamp: str) -> Path:
    """``<stamp>.json`` (stamp: time and pid), or ``<stamp>-2.json``... when a run of this process has it."""
    path = report_dir / f"{stamp}.json"
    n = 1
    while path.exists() or path.with_suffix(".md").exists():
        n += 1
        path = report_dir / f"{stamp}-{n}.json"
    return path


# ------------------------------------------------------------------------------------------ the page


def render_markdown(report: NightlyReport) -> str:
    ok = sum(1 for r in report.runs if r.ok)
    lines = [f"# Nightly {report.started[:10]}: {'all green' if report.ok else f'{len(report.runs) - ok} failed'}",
             "", f"Started {report.started}, finished {report.finished}.", "",
             "| stack | variant | lock | build | push | promote |", "|---|---|---|---|---|---|"]
    marks = {"ok": "ok", "failed": "**FAILED**", "skipped": "skipped"}
    for r in report.runs:
        cells = {s.stage: marks[s.status] for s in r.stages}
        lines.append(f"| {r.stack} | {r.variant} | " + " | ".join(cells.get(s, "-") for s in STAGES) + " |")
    for r in report.runs:
        lines += ["", f"## {r.stack} / {r.variant}" + ("" if r.ok else " (failed)"), ""]
        failed = [s for s in r.stages if s.status == "failed"]
        for s in failed:
            lines.append(f"- **{s.stage} failed**: {s.summary}" + (f" - fix: {s.fix}" if s.fix else ""))
        if r.lock is not None:
            lines.append(f"- lock `{r.lock.lock_hash[:16]}`: " + ("current" if not r.lock.drift else
                                                                   "moved: " + "; ".join(r.lock.drift)))
        if r.build is not None:
            b = r.build
            lines.append(f"- built: {', '.join(b.built) or 'nothing'}; reused: {', '.join(b.reused) or 'nothing'}")
            lines.append(f"- smoke: {b.smoke}; image `{b.final_image}`")
            if b.builders:
                lines.append(f"- {b.platform} nodes on: {b.builders}")
            lines += [f"- compiler cache: {c}" for c in b.compile_cache]
        if r.push is not None:
            for ref, digest in sorted(r.push.pushed.items()):
                lines.append(f"- pushed `{ref}` @ `{digest}`")
            for ref in r.push.promoted:
                lines.append(f"- moved `{ref}`")
            for why in r.push.not_promoted:
                lines.append(f"- not promoted: {why}")
            lines += _check_lines(r.push.checks)
        lines.append("- since the previous nightly: " + "; ".join(r.since_previous or ("-",)))
    return "\n".join(lines) + "\n"


def _check_lines(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The promotion check's evidence and sizes, per layer (services/evidence.PromotionCheck.to_json)."""
    lines = []
    for c in checks:
        used = (c.get("evidence") or {}).get("used") or []
        lines.append("- evidence: " + ("; ".join(f"{u['tier']} tier `{u['artifact']}`" for u in used) or "none")
                     + "".join(f"; {n}" for n in (c.get("evidence") or {}).get("notes") or []))
        s = c.get("sizes")
        if s:
            mark = "**OVER BUDGET**: " if s["over"] else ""
            lines.append(f"- size: {mark}{s['summary']}" + (" (reported only)" if s["over"] and not s["fail"] else ""))
            lines += [f"  - layer {x['index']}: {x['status']}, {x['size']} bytes `{x['diff_id'][:19]}`"
                      for x in s["layers"] if x["status"] in ("added", "rewritten")]
    return lines


# ----------------------------------------------------------------------------- the real steps


def routes(pins_dir: Path, todo: Sequence[tuple[str, str, bool]], fleet: routing.Fleet,
           probe: routing.BuilderProbe) -> dict[tuple[str, str], routing.Route | BuildctlError]:
    """Each variant's builders, by its platform (routing.route), before anything is built: every builder asked
    once for the whole night. A variant that cannot be routed (a builder that answers another platform than the
    configuration says) keeps its error, which fails its build stage alone."""
    out: dict[tuple[str, str], routing.Route | BuildctlError] = {}
    for stack, variant, _default in todo:
        platform = pins.select_variant(pins.load(pins.find(pins_dir, stack)), variant).platform
        try:
            out[(stack, variant)] = routing.route(platform, fleet, probe)
        except BuildctlError as exc:
            out[(stack, variant)] = exc
    return out


def routed(config: Config, pins_dir: Path, todo: Sequence[tuple[str, str, bool]], *,
           emulate: bool = False) -> tuple[dict[tuple[str, str], routing.Route | BuildctlError], str]:
    """(RealSteps' ``routes``, ``backend``) over the configured builders (each engine asked its platform)."""
    chosen = wiring.choose_builders(config)
    probe = wiring.EngineProbe(config, chosen.backend)
    try:
        return routes(pins_dir, todo, wiring.fleet(chosen, emulate=emulate), probe), chosen.backend
    finally:
        probe.close()


@dataclass
class RealSteps:
    """The stages through buildctl's own services: lock.relock_variant, build.build_target, ship.publish. Each
    variant builds on the builders of its platform (``routes``; a variant not routed: the default engine)."""

    project: Path
    config: Config
    ui: UI
    registry: str | None
    jobs: int
    routes: Mapping[tuple[str, str], routing.Route | BuildctlError] | None = None
    backend: str | None = None  # the builders' backend (wiring.Builders.backend); None: the configuration's

    def bump(self, stack: str) -> BumpStep:
        done = bump.bump(self.project, self.config, stack, (), registry=self.registry, jobs=self.jobs, push=False,
                         terminal=self.ui)
        return BumpStep(ok=done.ok, summary=done.summary(), fix=done.fix)

    def lock(self, stack: str, variant: str) -> LockStep:
        path = pins.find(self.project / "pins", stack)
        done = lock.relock_variant(path, variant, wiring.resolvers(self.config), self.config)
        current = lockfile.read(lockfile.lock_path(path))
        if current is not None:
            lockarchive.keep(self.config, current)  # the lock this night builds from, filed by its hash
        return LockStep(lock_hash=done.lock_hash, drift=done.drift, written=done.written)

    def build(self, stack: str, variant: str) -> BuildStep:
        from buildctl.builder import pipeline
        from buildctl.ui import NodeProgress

        config = self.config
        t = target.load(self.project, config, stack, variant, registry=self.registry)
        lintargs.lint_before_build(config, t, self.ui.warn)
        route = (self.routes or {}).get((stack, variant))
        if isinstance(route, BuildctlError):
            raise route
        with wiring.registry_credentials(t.registry, os.environ):  # as `buildctl build` and `push` do
            routed = (wiring.engines_for(config, self.backend or config.backend or "classic", route) if route
                      else wiring.route(config, wiring.choose_builders(config), t.variant.platform))
            try:
                options = pipeline.BuildOptions(jobs=self.jobs, emulated=routed.emulated, emulation=wiring.emulation_registered(
                    routed.engines[0].address, t.variant.platform))
                with NodeProgress(self.ui, t.graph.names()) as progress:
                    report = build.build_target(t, engines=list(routed.engines), config=config, progress=progress,
                                                project=self.project, options=options,
                                                smoke_gate=wiring.smoke_gate(config, stack, t.graph.variant,
                                                                             t.registry), route=routed.route)
            finally:
                routed.close()
        return BuildStep(
            final_image=report.final, node_keys={n.name: n.key for n in t.graph.nodes if n.kind != "base"},
            built=tuple(report.built), reused=tuple(n.name for n in report.nodes if n.outcome != "built"),
            smoke=report.smoke, platform=t.variant.platform, builders=routed.route.label(),
            compile_cache=compile_cache_lines(t.graph, report))

    def push(self, stack: str, variant: str, *, tags: Sequence[str], moving: Sequence[str]) -> PushStep:
        t = target.load(self.project, self.config, stack, variant, registry=self.registry)
        _t, report = ship.publish(self.project, self.config, t, registry_arg=self.registry,
                                  say=self.ui.info, warn=self.ui.warn, moving=moving, promote=bool(moving),
                                  extra_tags=[x for x in tags if not _DATED.search(x)],
                                  dated_tags=[x for x in tags if _DATED.search(x)],
                                  attest_kinds=("lock",))  # the lock beside the image, before tags move
        return PushStep(
            pushed={p.target: p.digest for p in report.pushed},
            promoted=tuple(p.target for p in report.promoted),
            not_promoted=tuple(f"{p.target}: {p.reason}" for p in report.not_promoted),
            # a moving tag that failed is in not_promoted (the promote stage), the rest fail the push stage
            failed=tuple(f"{f.target}: {f.error}" for f in report.failed if f.node != "promote"),
            checks=report.checks)


def targets(pins_dir: Path, stacks: Sequence[str], variant: str | None) -> list[tuple[str, str, bool]]:
    """(stack, variant, is the default variant) for each variant to run (``variant``: only that one)."""
    out: list[tuple[str, str, bool]] = []
    for stack in stacks:
        m = pins.load(pins.find(pins_dir, stack))
        chosen = [pins.select_variant(m, variant)] if variant else list(m.variants)
        out += [(m.stack, v.name, v.name == m.default_variant.name) for v in chosen]
    return out
