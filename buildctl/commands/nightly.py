"""`buildctl nightly STACK...`: the real lock / build / push steps behind buildctl.services.nightly."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.errors import UsageError
from buildctl.lock import lock, lockfile
from buildctl.manifest import pins
from buildctl.services import building, lintargs, nightly, publishing, target, wiring

if TYPE_CHECKING:
    from buildctl.cli import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "nightly", help="re-lock, build, smoke, push with immutable tags, then move `nightly`",
        description="For each stack (every variant, or --variant): refresh the lock, build what is missing "
                    "(the smoke gate runs before the entrypoint), push every node and the final image under "
                    "immutable tags (<stack>-<variant>-<lock hash>, <variant>-nightly-YYYYMMDD, nightly-YYYYMMDD "
                    "for the default variant), and move `nightly` only when the smoke suite passed. Writes a JSON "
                    "and a Markdown report under <cache>/reports/nightly/. Exits non-zero when any stage failed.")
    p.add_argument("stacks", nargs="*", metavar="STACK", help="stacks (default: the configured default stack)")
    p.add_argument("--variant", help="only this variant (default: every variant of each stack)")
    p.add_argument("--registry", help="registry to push to (default: config `registry`, then the manifest's)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once (default 2)")
    p.add_argument("--no-push", action="store_true", help="lock and build only")
    p.add_argument("--report-dir", type=Path, help="where the reports go (default: <cache>/reports/nightly)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the Markdown page")
    p.set_defaults(func=handle)


@dataclass
class RealSteps:
    """The stages through buildctl's own modules: lock.py, pipeline.py, the push publisher."""

    ctx: Context
    registry: str | None
    jobs: int

    def lock(self, stack: str, variant: str) -> nightly.LockStep:
        path = pins.find(self.ctx.pins_dir, stack)
        manifest = pins.load(path)
        lock_file = lockfile.lock_path(path)
        existing = lockfile.read(lock_file, allow_hand_edit=True)
        sha = pins.manifest_sha256(path)
        # Resolve once; what moved is the difference to the lock on disk (lock --check would resolve twice).
        outcome = lock.lock_stack(manifest, sha, [variant], wiring.resolvers(self.ctx.config), self.ctx.config,
                                  existing)
        new = outcome.lock.variants[variant]
        old = existing.variants.get(variant) if existing is not None else None
        drift = [] if old is None else lock.diff_variant(variant, old, new)
        lines = tuple(d.message() for d in drift)
        if old is None:
            lines = ("no lock before: locked now",)
        elif existing is not None and existing.manifest_sha256 != sha:
            lines = (f"{path.name} edited since it was locked", *lines)
        if existing is not None and existing.hand_edited:
            lines = (f"{lock_file.name} was edited by hand ({'; '.join(existing.hand_edited)}): re-locked", *lines)
        written = existing is None or outcome.lock.to_json() != existing.to_json()
        if written:
            lockfile.write(lock_file, outcome.lock)
        return nightly.LockStep(lock_hash=new.digest(), drift=lines, written=written)

    def build(self, stack: str, variant: str) -> nightly.BuildStep:
        from buildctl.build import pipeline
        from buildctl.ui import NodeProgress

        config = self.ctx.config
        t = target.load(self.ctx.project, config, stack, variant, registry=self.registry)
        lintargs.lint_before_build(config, t, self.ctx.ui.warn)
        with wiring.registry_credentials(t.registry, os.environ):  # as `buildctl build` and `push` do
            engine = wiring.engine(config)
            try:
                options = pipeline.Options(jobs=self.jobs, emulation=wiring.emulation_registered(
                    engine.address, t.variant.platform))
                with NodeProgress(self.ctx.ui, t.graph.names()) as progress:
                    report = building.build_target(t, engines=[engine], config=config, progress=progress,
                                                   project=self.ctx.project, options=options,
                                                   smoke_gate=wiring.smoke_gate(config, stack, t.graph.variant))
            finally:
                engine.close()
        return nightly.BuildStep(
            final_image=report.final, node_keys={n.name: n.key for n in t.graph.nodes if n.kind != "base"},
            built=tuple(report.built), reused=tuple(n.name for n in report.nodes if n.outcome != "built"),
            smoke=report.smoke)

    def push(self, stack: str, variant: str, *, tags: Sequence[str], moving: Sequence[str]) -> nightly.PushStep:
        t = target.load(self.ctx.project, self.ctx.config, stack, variant, registry=self.registry)
        _t, report = publishing.publish(self.ctx.project, self.ctx.config, t, registry_arg=self.registry,
                                        say=self.ctx.ui.info, warn=self.ctx.ui.warn, moving=moving, promote=bool(moving),
                             extra_tags=tags)
        return nightly.PushStep(
            pushed={p.target: p.digest for p in report.pushed},
            promoted=tuple(p.target for p in report.promoted),
            not_promoted=tuple(f"{p.target}: {p.reason}" for p in report.not_promoted),
            failed=tuple(f"{f.target}: {f.error}" for f in report.failed))


def targets(ctx: Context, stacks: Sequence[str], variant: str | None) -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    for stack in stacks:
        m = pins.load(pins.find(ctx.pins_dir, stack))
        chosen = [pins.select_variant(m, variant)] if variant else list(m.variants)
        out += [(m.stack, v.name, v.name == m.default_variant.name) for v in chosen]
    return out


def handle(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    stacks = args.stacks or [ctx.config.default_stack]
    todo = targets(ctx, stacks, args.variant)
    report_dir = args.report_dir or ctx.config.cache.reports / "nightly"
    steps = RealSteps(ctx=ctx, registry=args.registry, jobs=args.jobs)

    def said(r: nightly.VariantRun) -> None:
        state = "ok" if r.ok else "FAILED at " + next(s.stage for s in r.stages if s.status == "failed")
        ctx.ui.info(f"nightly {r.stack}/{r.variant}: {state}")

    report, path = nightly.run(steps, todo, report_dir=report_dir, push=not args.no_push, on_result=said)
    if args.json:
        ctx.ui.json(report.to_json())
    else:
        ctx.ui.print(nightly.render_markdown(report).rstrip("\n"))
    ctx.ui.info(f"report: {path} and {path.with_suffix('.md')}")
    return 0 if report.ok else 1
