"""Gated bumps: move components that follow a ``branch`` to its head, but only past a green build.

`buildctl bump STACK [COMPONENT...]` (and the nightly, for the stacks it is asked to bump):

1. the heads of the components' branches, resolved through the configured git mirrors as `buildctl lock`
   resolves them; components whose head is the locked commit are left alone (nothing moved: done);
2. the candidate: the manifest's text with each moved ``commit:`` value replaced in place (manifest/edit.py:
   comments and layout kept, the diff is the changed lines), and the lock with those components re-resolved
   at the new commits (every other pin exactly as locked). Neither is written yet; the candidate lock is
   archived by its hash (lockarchive.keep);
3. every variant built from the candidate (build.build_target, the smoke gate included);
4. pushed (``push``): nodes and the final image under immutable tags, the lock beside it as an artifact;
5. only then the manifest and the lock written, both or neither (safepath.write_atomic_both);
6. with ``push``, the moving tag (``latest``) moved (ship.publish with promote).

Any failure before 5 changes nothing on disk and moves no tag; the report names the failing stage and
check and each component's commit range (old..new).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl.builder import smoke
from buildctl.builder.smoke import SmokeEngine
from buildctl.config import Config
from buildctl.errors import BuildctlError, LockError, PushError, SmokeFailed, UsageError
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock
from buildctl.lock.resolve import resolve_component
from buildctl.manifest import edit, pins
from buildctl.manifest.model import Component, Manifest
from buildctl.safepath import write_atomic, write_atomic_both
from buildctl.services import build, lockarchive, ship, target, wiring
from buildctl.ui import UI, NodeProgress

if TYPE_CHECKING:
    from buildctl.sources.sources import Sources

MOVING = ("latest",)


@dataclass(frozen=True, kw_only=True)
class Moved:
    component: str
    branch: str
    old: str
    new: str

    @property
    def range(self) -> str:
        return f"{self.old[:12]}..{self.new[:12]}"

    def to_json(self) -> dict[str, str]:
        return {"component": self.component, "branch": self.branch, "old": self.old, "new": self.new,
                "range": f"{self.old}..{self.new}"}


@dataclass(frozen=True, kw_only=True)
class BumpReport:
    stack: str
    moved: tuple[Moved, ...] = ()
    ok: bool = True
    written: bool = False  # the manifest and the lock were rewritten
    failed_stage: str = ""  # resolve | build | smoke | push | write | promote
    failed_variant: str = ""
    failed_checks: tuple[str, ...] = ()
    error: str = ""
    fix: str = ""
    exit_code: int = 0
    lock_hashes: dict[str, str] = field(default_factory=dict)  # variant -> hash of the candidate lock
    built: dict[str, list[str]] = field(default_factory=dict)  # variant -> nodes built
    pushed: dict[str, str] = field(default_factory=dict)  # ref -> digest
    promoted: tuple[str, ...] = ()
    archived: tuple[str, ...] = ()  # where the candidate lock was kept (cache files, registry artifacts)
    changed_lines: tuple[int, ...] = ()  # lines of the manifest the bump rewrote

    def summary(self) -> str:
        ranges = ", ".join(f"{m.component} {m.range}" for m in self.moved)
        if not self.moved and self.ok:
            return f"{self.stack}: nothing to bump (every branch head is the locked commit)"
        if self.ok:
            return f"{self.stack}: bumped {ranges}" + (f"; moved {', '.join(self.promoted)}" if self.promoted else "")
        checks = f" (check {', '.join(self.failed_checks)})" if self.failed_checks else ""
        where = f" of {self.failed_variant}" if self.failed_variant else ""
        return (f"{self.stack}: bump refused, {self.failed_stage}{where} failed{checks} for {ranges}: "
                f"nothing was changed")

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "ok": self.ok, "written": self.written, "moved": [m.to_json() for m in self.moved],
                "failed": None if self.ok else {"stage": self.failed_stage, "variant": self.failed_variant,
                                                "checks": list(self.failed_checks), "error": self.error,
                                                "fix": self.fix, "exit_code": self.exit_code},
                "lock_hashes": dict(self.lock_hashes), "built": dict(self.built), "pushed": dict(self.pushed),
                "promoted": list(self.promoted), "archived": list(self.archived),
                "changed_lines": list(self.changed_lines), "summary": self.summary()}


class RecordingGate:
    """The build-host smoke gate (smoke.BuildGate's sequence) that keeps the report, so that a failure names
    its checks."""

    def __init__(self, report_dir: Path) -> None:
        self.report_dir = report_dir
        self.report: smoke.SmokeReport | None = None

    def __call__(self, engine: SmokeEngine, image: str, *, log_file: Path) -> str:
        report = smoke.run_smoke(engine, image, None, report_dir=self.report_dir)
        self.report = report
        lines = [report.summary(), *(f"  {c.name:14} {c.status:11} {c.summary}" for c in report.checks)]
        write_atomic(log_file, "\n".join(lines) + "\n")
        smoke.gate(report)
        return report.summary()

    @property
    def failed(self) -> tuple[str, ...]:
        if self.report is None:
            return ()
        return tuple(c.name for c in self.report.failed) or (("suite",) if self.report.error else ())


def choose(manifest: Manifest, names: Sequence[str]) -> list[Component]:
    """The components to bump: those named (each must name a ``branch``), or every one that names one."""
    if not names:
        found = [c for c in manifest.components if c.branch]
        if not found:
            raise UsageError(f"no component of {manifest.stack} names a branch: nothing can be bumped",
                             fix="add branch: NAME to a component that follows a branch")
        return found
    out = []
    for name in dict.fromkeys(names):
        try:
            c = manifest.component(name)
        except KeyError:
            known = ", ".join(c.name for c in manifest.components)
            raise UsageError(f"{manifest.stack} has no component {name!r} (components: {known})") from None
        if not c.branch:
            raise UsageError(f"component {name} names no branch: there is no head to bump it to",
                             fix=f"add branch: NAME to components.{name} in the manifest, or edit its commit")
        out.append(c)
    return out


@dataclass(frozen=True, kw_only=True)
class Candidate:
    text: str
    manifest: Manifest
    sha256: str
    lock: Lock
    changed_lines: tuple[int, ...]


def candidate(path: Path, text: str, old: Lock, moved: Sequence[Moved], sources: Sources) -> Candidate:
    """The manifest text with the moved commits, and the lock with those components re-resolved (git only)."""
    new_text = edit.apply(text, [edit.Edit(path=("components", m.component, "commit"), value=m.new) for m in moved],
                          str(path))
    manifest = pins.load_text(new_text, str(path), path.parent)
    locked = {m.component: resolve_component(manifest.component(m.component), sources, path.parent) for m in moved}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    variants = {n: dataclasses.replace(v, components={**v.components, **locked}, resolved_at=now)
                for n, v in old.variants.items()}
    sha = pins.text_sha256(new_text)
    lock = dataclasses.replace(old, manifest_sha256=sha, variants=variants, hand_edited=())
    return Candidate(text=new_text, manifest=manifest, sha256=sha, lock=lock,
                     changed_lines=tuple(edit.changed_lines(text, new_text)))


def _current(path: Path, text: str, stack: str) -> Lock:
    old = lockfile.read_beside(path, stack)
    if old is None:
        raise LockError(f"{stack} has no lock: a bump starts from one", fix=f"run `buildctl lock {stack} --all` first")
    if old.manifest_sha256 != pins.text_sha256(text):
        raise LockError(f"the lock of {stack} is older than its manifest: a bump starts from a current lock",
                        fix=f"run `buildctl lock {stack} --all` (and review what it moves) first")
    for name in old.variants:
        lockfile.refuse_partial(old, name, action="bump", lock_file=str(lockfile.lock_path(path)))
    return old


def heads(manifest: Manifest, old: Lock, chosen: Sequence[Component], sources: Sources) -> list[Moved]:
    """The branch head of each chosen component, against the commit the lock has (those that moved)."""
    out = []
    if not old.variants:  # (a lock of no variant ended here in StopIteration)
        raise LockError(f"the lock of {manifest.stack} locks no variant: a bump starts from a lock of every variant",
                        fix=f"run `buildctl lock {manifest.stack} --all` first")
    first = old.variants[manifest.default_variant.name] if manifest.default_variant.name in old.variants else \
        next(iter(old.variants.values()))
    for c in chosen:
        assert c.branch
        head = sources.branch_head(c.repo, c.branch)
        locked = first.components.get(c.name)
        if locked is None:
            raise LockError(f"component {c.name} is not in the lock", fix=f"run `buildctl lock {manifest.stack} --all`")
        if head != locked.commit:
            out.append(Moved(component=c.name, branch=c.branch, old=locked.commit, new=head))
    return out


def bump(project: Path, config: Config, stack: str, names: Sequence[str], *, registry: str | None, jobs: int,
         push: bool, terminal: UI) -> BumpReport:
    """The gated bump of ``names`` (default: every component with a branch) of ``stack``; see the module doc."""
    path = pins.find(project / "pins", stack)
    try:
        text = pins.read_text_exact(path)  # CRLF kept: the hash is lock's (of the bytes), the edit keeps the ends
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: cannot read the manifest: {exc}") from None
    manifest = pins.load_text(text, str(path), path.parent)
    old = _current(path, text, manifest.stack)
    sources = wiring.sources(config, base_dir=path.parent)  # one view of each repository for the whole bump
    moved = heads(manifest, old, choose(manifest, names), sources)
    report = BumpReport(stack=manifest.stack, moved=tuple(moved))
    if not moved:
        return report
    try:
        cand = candidate(path, text, old, moved, sources)
    except BuildctlError as exc:
        return _failed(report, "resolve", "", exc, ())
    kept = lockarchive.keep(config, cand.lock)
    report = dataclasses.replace(report, lock_hashes={a.variant: a.lock_hash for a in kept},
                                 archived=tuple(str(a.path) for a in kept), changed_lines=cand.changed_lines)
    targets: list[target.Target] = []
    for v in manifest.variants:
        t = target.load(project, config, manifest.stack, v.name, registry=registry, lock_override=cand.lock,
                        manifest_override=(cand.manifest, cand.sha256))
        gate = RecordingGate(config.cache.reports / "smoke" / manifest.stack / v.name)
        terminal.info(f"bump {manifest.stack}/{v.name}: building {', '.join(m.component + ' ' + m.range for m in moved)}")
        try:
            built = _build(t, config, project, jobs, terminal, gate)
        except BuildctlError as exc:
            stage = "smoke" if isinstance(exc, SmokeFailed) else "build"
            return _failed(report, stage, v.name, exc, gate.failed)
        report = dataclasses.replace(report, built={**report.built, v.name: built})
        targets.append(t)
    if push:
        try:
            report = _push(project, config, cand, targets, report, registry, terminal, moving=())
        except BuildctlError as exc:
            return _failed(report, "push", "", exc, ())
    try:
        write_atomic_both((lockfile.lock_path(path), lockfile.to_text(cand.lock)), (path, cand.text))
    except OSError as exc:
        return _failed(report, "write", "", PushError(f"cannot write {path} and its lock: {exc}"), ())
    report = dataclasses.replace(report, written=True)
    if push:
        try:
            report = _push(project, config, cand, targets, report, registry, terminal, moving=MOVING)
        except BuildctlError as exc:
            return _failed(report, "promote", "", exc, ())
    return report


def _build(target: target.Target, config: Config, project: Path, jobs: int, terminal: UI, gate: RecordingGate) -> list[str]:
    from buildctl.builder import pipeline

    with wiring.registry_credentials(target.registry, os.environ):
        engine = wiring.engine(config)
        try:
            options = pipeline.BuildOptions(jobs=jobs, emulation=wiring.emulation_registered(engine.address,
                                                                                             target.variant.platform))
            with NodeProgress(terminal, target.graph.names()) as progress:
                done = build.build_target(target, engines=[engine], config=config, progress=progress, project=project,
                                          options=options, smoke_gate=gate)
        finally:
            engine.close()
    return list(done.built)


def _push(project: Path, config: Config, cand: Candidate, targets: Sequence[target.Target], report: BumpReport,
          registry: str | None, terminal: UI, *, moving: Sequence[str]) -> BumpReport:
    """Push every variant (immutable tags; with ``moving``, move them too); the lock beside each final image."""
    pushed = dict(report.pushed)
    promoted = list(report.promoted)
    archived = list(report.archived)
    for t in targets:
        lock_hash = cand.lock.variants[t.variant.name].digest()
        _t, done = ship.publish(project, config, t, registry_arg=registry, say=terminal.info, warn=terminal.warn,
                                moving=moving, promote=bool(moving),
                                extra_tags=(f"{cand.lock.stack}-{t.variant.name}-{lock_hash[:16]}",),
                                attest_kinds=() if moving else ("lock",))
        if not done.ok:
            raise PushError("; ".join(f"{f.target}: {f.error}" for f in done.failed) or "the push was not completed")
        if moving and done.not_promoted:
            raise PushError("; ".join(f"{p.target}: {p.reason}" for p in done.not_promoted))
        pushed.update({p.target: p.digest for p in done.pushed})
        promoted += [p.target for p in done.promoted]
        archived += [f"{a.repository}@{a.artifact}" for a in done.attached if a.kind == "lock"]
    return dataclasses.replace(report, pushed=pushed, promoted=tuple(promoted), archived=tuple(archived))


def _failed(report: BumpReport, stage: str, variant: str, exc: BuildctlError, checks: Sequence[str]) -> BumpReport:
    return dataclasses.replace(report, ok=False, failed_stage=stage, failed_variant=variant,
                               failed_checks=tuple(checks), error=exc.what + (f" ({exc.why})" if exc.why else ""),
                               fix=exc.fix, exit_code=exc.exit_code)
