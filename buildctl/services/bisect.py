"""`buildctl bisect`: the pin change, and inside a git component the commit, that makes a smoke check fail.

1. The good and the bad lock, from their REFs (lockarchive.resolve: a file, an archived hash, an image).
2. Each endpoint judged: the good one must pass CHECK, the bad one fail it (a bisection from wrong ends
   would name a wrong culprit).
3. The pin changes between them (lock/pinsteps.py, a fixed order) bisected over their prefixes: the state
   after the first k changes, built and judged, until the first bad change is found.
4. When that change is a git component whose base commit moved (its changes on top the same), the
   first-parent history between the two commits is bisected the same way, each candidate re-resolved as
   `buildctl lock` resolves a component (its PRs and patches applied on the candidate).

A judgement builds the state through build.build_target: the plan builds only what the cache (engine,
registry, wheel cache) does not hold, so a state seen before costs one smoke run. The smoke gate runs the
build-host tier and stops the build there (a bisection needs no entrypoint); the verdict is taken from
the gate's report (or, where everything was there already and no gate ran, from a smoke run of the assembled
image, the one the gate runs on). Nothing under pins/ is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildctl.builder import smoke
from buildctl.builder.smoke import SmokeEngine
from buildctl.config import Config
from buildctl.errors import SmokeFailed, SourceError, UsageError
from buildctl.lock import archive
from buildctl.lock.lockfile import Lock, LockedComponent, VariantLock
from buildctl.lock.pinsteps import Bisection, PinChange, apply, pin_changes
from buildctl.lock.resolve import resolve_component
from buildctl.manifest import pins
from buildctl.manifest.model import SMOKE_CHECKS, Manifest
from buildctl.services import build, lockarchive, target, wiring
from buildctl.sources.prepare import locked_signature
from buildctl.ui import UI, NodeProgress


@dataclass(frozen=True, kw_only=True)
class Step:
    what: str  # the state judged, for people
    bad: bool
    status: str  # CHECK's status in the report
    built: tuple[str, ...]  # nodes this judgement built

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "bad": self.bad, "status": self.status, "built": list(self.built)}


@dataclass(frozen=True, kw_only=True)
class BisectReport:
    stack: str
    variant: str
    check: str
    good: str
    bad: str
    changes: tuple[PinChange, ...] = ()
    culprit: PinChange | None = None
    commit: str = ""  # the first bad commit inside the culprit component ("" when not a commit range)
    subject: str = ""
    commits: int = 0  # candidates in the component's range
    steps: tuple[Step, ...] = ()
    notes: tuple[str, ...] = ()

    def builds_of(self, node: str) -> int:
        return sum(1 for s in self.steps if node in s.built)

    def lines(self) -> list[str]:
        out = [f"bisect {self.stack}/{self.variant} on {self.check}: good {self.good}, bad {self.bad}",
               f"{len(self.changes)} pin change(s), applied in this order:"]
        out += [f"  {i + 1}. {c.label()}" for i, c in enumerate(self.changes)]
        out += [f"  step: {s.what}: {self.check} {s.status} -> {'bad' if s.bad else 'good'}"
                + (f" (built {', '.join(s.built)})" if s.built else " (built nothing)") for s in self.steps]
        if self.culprit is not None:
            out.append(f"first bad change: {self.culprit.label()}")
        if self.commit:
            out.append(f"first bad commit of {self.culprit.name if self.culprit else ''}: {self.commit} {self.subject} "
                       f"(of {self.commits} first-parent commit(s))")
        out += [f"note: {n}" for n in self.notes]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "variant": self.variant, "check": self.check, "good": self.good, "bad": self.bad,
                "changes": [c.to_json() for c in self.changes],
                "culprit": self.culprit.to_json() if self.culprit else None,
                "commit": self.commit or None, "subject": self.subject, "commits": self.commits,
                "steps": [s.to_json() for s in self.steps], "notes": list(self.notes)}


class ProbeGate:
    """The build-host smoke tier as the gate, keeping CHECK's status; the build stops there (no entrypoint)."""

    def __init__(self, check: str, report_dir: Path) -> None:
        self.check = check
        self.report_dir = report_dir
        self.status: str | None = None

    def judge(self, report: smoke.SmokeReport) -> str:
        found = next((c for c in report.checks if c.name == self.check), None)
        if found is None:
            raise UsageError(f"the smoke report of {report.image} has no check {self.check!r}",
                             fix="name a check the stack's suite runs: " + ", ".join(c.name for c in report.checks))
        self.status = found.status
        return found.status

    def __call__(self, engine: SmokeEngine, image: str, *, log_file: Path) -> str:
        report = smoke.run_smoke(engine, image, None, report_dir=self.report_dir)
        status = self.judge(report)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(f"{self.check}: {status}\n{report.summary()}\n")
        # the verdict is in: stop before the entrypoint either way (a bisection needs no final image)
        raise SmokeFailed(f"bisect: {self.check} {status} on {image}; stopping before the entrypoint",
                          why=report.summary())


def _manifest_for(manifest: Manifest, variant_lock: VariantLock) -> Manifest:
    """The manifest with each component's commit as ``variant_lock`` locks it (the graph takes a lock only where the
    manifest asks for what it pins)."""
    comps = tuple(dataclasses.replace(c, commit=variant_lock.components[c.name].commit) if c.name in variant_lock.components else c
                  for c in manifest.components)
    return dataclasses.replace(manifest, components=comps)


@dataclass
class Judge:
    project: Path
    config: Config
    manifest: Manifest
    stack: str
    variant: str
    check: str
    jobs: int
    ui: UI
    sha: str
    steps: list[Step] = field(default_factory=list)

    def __call__(self, variant_lock: VariantLock, what: str) -> bool:
        """Build ``variant_lock`` (what the cache lacks) and say whether CHECK fails on it."""
        lock = Lock(stack=self.stack, manifest_sha256=self.sha, variants={self.variant: variant_lock})
        t = target.load(self.project, self.config, self.stack, self.variant, lock_override=lock,
                        manifest_override=(_manifest_for(self.manifest, variant_lock), self.sha))
        probe = ProbeGate(self.check, self.config.cache.reports / "smoke" / self.stack / self.variant)
        self.ui.info(f"bisect: judging {what}")
        with wiring.registry_credentials(t.registry, os.environ):
            engine = wiring.engine(self.config)
            try:
                from buildctl.builder import pipeline

                with NodeProgress(self.ui, t.graph.names()) as shown:
                    progress = Counting(shown)
                    try:
                        build.build_target(t, engines=[engine], config=self.config, progress=progress,
                                           project=self.project, options=pipeline.BuildOptions(jobs=self.jobs),
                                           smoke_gate=probe)
                    except SmokeFailed:
                        if probe.status is None:
                            raise
                    else:
                        if probe.status is None:  # every node was there already: smoke the assembled image
                            assembled = t.refs["assemble"]
                            if not engine.image_exists(assembled):
                                engine.pull(assembled)
                            probe.judge(smoke.run_smoke(engine, assembled, None, report_dir=probe.report_dir))
            finally:
                engine.close()
        assert probe.status is not None
        bad = probe.status == "fail"
        self.steps.append(Step(what=what, bad=bad, status=probe.status, built=tuple(progress.built)))
        return bad


class Counting:
    """A build's progress passed on, keeping the nodes that were built (a build stopped at the gate returns no
    report)."""

    def __init__(self, inner: NodeProgress) -> None:
        self.inner = inner
        self.built: list[str] = []

    def node(self, name: str, state: str, detail: str = "") -> None:
        if state == "built" and name not in self.built:
            self.built.append(name)
        self.inner.node(name, state, detail)

    def log(self, name: str, line: str) -> None:
        self.inner.log(name, line)


def _component_at(manifest: Manifest, name: str, commit: str, base_dir: Path, config: Config,
                  like: LockedComponent) -> LockedComponent:
    """Component ``name`` locked at ``commit`` (its changes applied there), checked to carry ``like``'s changes."""
    c = dataclasses.replace(manifest.component(name), commit=commit)
    got = resolve_component(c, wiring.sources(config, base_dir=base_dir), base_dir)
    if [locked_signature(x) for x in got.changes] != [locked_signature(x) for x in like.changes]:
        raise SourceError(f"component {name} at {commit[:12]} does not resolve to the changes the bad lock has",
                          why="the manifest's PRs or patches of the component differ from the locks'",
                          fix="bisect with the manifest the locks were made from")
    return got


def bisect(project: Path, config: Config, stack: str, *, good: str, bad: str, check: str, variant: str | None,
           jobs: int, terminal: UI, cwd: Path) -> BisectReport:
    if check not in SMOKE_CHECKS:
        raise UsageError(f"{check!r} is not a smoke check", fix="one of: " + ", ".join(SMOKE_CHECKS))
    path = pins.find(project / "pins", stack)
    manifest = pins.load(path)
    gref, bref = archive.parse_ref(good, cwd=cwd), archive.parse_ref(bad, cwd=cwd)
    wanted = pins.select_variant(manifest, variant).name
    g = lockarchive.resolve(config, manifest.stack, wanted, gref, cwd=cwd)
    b = lockarchive.resolve(config, manifest.stack, wanted, bref, cwd=cwd)
    if g.lock.stack != manifest.stack or b.lock.stack != manifest.stack:
        raise UsageError(f"the locks are of {g.lock.stack} and {b.lock.stack}, not {manifest.stack}")
    if g.variant != b.variant and variant is None:
        raise UsageError(f"the good lock is of variant {g.variant}, the bad one of {b.variant}",
                         fix="pass --variant V and give lock files")
    name = variant or g.variant
    gv, bv = g.lock.variants[name], b.lock.variants[name]
    changes = pin_changes(gv, bv)
    report = BisectReport(stack=manifest.stack, variant=name, check=check, good=f"{gref} ({g.lock_hash[:16]})",
                          bad=f"{bref} ({b.lock_hash[:16]})", changes=tuple(changes))
    if not changes:
        raise UsageError(f"the good and the bad lock pin the same (hash {g.lock_hash[:16]}): nothing to bisect")
    judge = Judge(project=project, config=config, manifest=manifest, stack=manifest.stack, variant=name, check=check,
                  jobs=jobs, ui=terminal, sha=g.lock.manifest_sha256)
    if judge(gv, "the good lock"):
        raise UsageError(f"{check} fails with the good lock already ({g.lock_hash[:16]})", fix="give an older good lock")
    if not judge(bv, "the bad lock"):
        raise UsageError(f"{check} passes with the bad lock ({b.lock_hash[:16]}): nothing to find",
                         fix="check the REFs (and that the failure is this check's)")
    index = _bisect(len(changes), lambda k: judge(apply(gv, bv, changes[:k + 1]), f"changes 1..{k + 1}"))
    culprit = changes[index]
    report = dataclasses.replace(report, culprit=culprit)
    before = apply(gv, bv, changes[:index])
    a, z = gv.components.get(culprit.name), bv.components.get(culprit.name)
    if culprit.section != "component" or a is None or z is None or a.commit == z.commit:
        return dataclasses.replace(report, steps=tuple(judge.steps))
    if [locked_signature(x) for x in a.changes] != [locked_signature(x) for x in z.changes]:
        return dataclasses.replace(report, steps=tuple(judge.steps), notes=(
            f"{culprit.name}: its changes on top differ between the locks too; its commits are not bisected",))
    history = wiring.sources(config, base_dir=path.parent).first_parent(manifest.component(culprit.name).repo,
                                                                         a.commit, z.commit)

    def at(index: int) -> bool:
        lc = _component_at(manifest, culprit.name, history[index].sha, path.parent, config, z)
        v = dataclasses.replace(before, components={**before.components, culprit.name: lc})
        return judge(v, f"{culprit.name} at {history[index].sha[:12]} ({index + 1} of {len(history)})")

    first = _bisect(len(history), at)
    return dataclasses.replace(report, commit=history[first].sha, subject=history[first].subject,
                               commits=len(history), steps=tuple(judge.steps))


def _bisect(count: int, is_bad: Callable[[int], bool]) -> int:
    """The first bad of ``count`` candidates (the state before the first good, the last bad: both judged already)."""
    search = Bisection(count)
    while (k := search.next()) is not None:
        search.record(k, is_bad(k))
    return search.culprit


