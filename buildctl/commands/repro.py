"""`buildctl repro STACK [--variant V] [--json] [--audit-only] [--relock] [--keep]`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from buildctl.builder import pipeline
from buildctl.config import BACKENDS
from buildctl.errors import ReproFailed, UsageError
from buildctl.repro import audit
from buildctl.repro import repro as comparison
from buildctl.services import repro, target, wiring
from buildctl.ui import UI, NodeProgress

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "repro", help="build a stack twice with nothing shared and compare (bit / semantic / inputs level)",
        description="Audit the stack's inputs (buildctl lock --check, and every rendered Dockerfile and build script "
                    "for anything fetched without a pin), then build it twice from its lock with nothing shared (no "
                    "engine step cache, a cache root with its own wheels per build, a tag namespace per build) but "
                    "the compiler cache: the first build compiles with an empty one, the second from the one the "
                    "first filled (--cold-compiles: an empty one too). Then compare every node: bit-identical (same "
                    "layer diff IDs), semantically identical "
                    "(the same files, packages and config; only mtimes or build metadata differ), or different, with "
                    "the files, packages and config that differ and the cause where it can be named. Exits non-zero "
                    "when a node differs beyond the level the manifest declares for it (repro.levels).")
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--variant", help="variant (default: the stack's first)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("--audit-only", action="store_true",
                   help="only the input audit: no builds (exits non-zero when an input floats without a pin)")
    p.add_argument("--relock", action="store_true",
                   help="lock the manifest afresh before each build (pins/STACK.lock.json is not changed): shows what "
                        "floats in the manifest itself, as between two nightly re-locks")
    p.add_argument("--no-lock-check", action="store_true",
                   help="skip `buildctl lock --check` in the audit (it reaches registries, git remotes and indexes)")
    p.add_argument("--keep", action="store_true", help="keep both builds' images, caches and saved archives")
    p.add_argument("--cold-compiles", action="store_true",
                   help="the second build compiles with an empty compiler cache of its own too (default: it compiles "
                        "warm, from the cache the first build filled, so that compiles from cache hits are compared "
                        "with cold ones)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once in each build (default 2)")
    p.add_argument("--engine", metavar="URL", help="Docker engine (default: DOCKER_HOST or the local socket)")
    p.add_argument("--backend", choices=BACKENDS,
                   help="how both builds build: classic or buildkit (default: config `backend`, else classic)")
    p.set_defaults(func=handle)


class CliProgress:
    def __init__(self, terminal: UI) -> None:
        self.ui = terminal

    def step(self, text: str) -> None:
        self.ui.info(text)

    def build(self, side: str, nodes: Sequence[str]) -> AbstractContextManager[pipeline.BuildProgress]:
        return NodeProgress(self.ui, nodes)


def _audit_lines(findings: Sequence[dict[str, Any]]) -> list[str]:
    """The audit in words (findings as AuditFinding.to_json() gives them, which is also how reports keep them)."""
    floating = [f for f in findings if f["status"] == "floating"]
    locked = [f for f in findings if f["status"] == "locked"]
    lines = []
    if floating:
        lines.append(f"inputs: NOT every input is pinned ({len(floating)} floating):")
        lines += [f"  - {f['what']} [{f['node'] or 'stack'}] ({f['where']})" + (f"\n      fix: {f['fix']}" if f["fix"]
                                                                              else "") for f in floating]
    else:
        lines.append("inputs: every input is pinned by the lock (digests, full SHAs, exact versions with hashes), "
                     "and nothing is fetched at build time without a pin")
    if locked:
        lines.append(f"  {len(locked)} value(s) float in the manifest and are pinned by the lock (a re-lock may "
                     "change them; `buildctl repro --relock` shows what that changes):")
        lines += [f"  - {f['what']}" for f in locked]
    return lines


def handle(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.audit_only and (args.relock or args.keep or args.cold_compiles):
        raise UsageError("--audit-only builds nothing: --relock, --keep and --cold-compiles do not apply")
    if args.audit_only:
        return _audit_only(args, ctx)
    engine = wiring.engine(ctx.config, args.engine, backend=args.backend)
    try:
        outcome = repro.run(
            project=ctx.project, config=ctx.config, stack=args.stack, variant=args.variant, engine=engine,
            progress=CliProgress(ctx.ui), resolvers=wiring.resolvers,
            options=repro.ReproOptions(mode="relock" if args.relock else "lock", jobs=args.jobs, keep=args.keep,
                                       lock_check=not args.no_lock_check, cold_compiles=args.cold_compiles))
    finally:
        engine.close()
    report = outcome.report
    if args.json:
        data: dict[str, Any] = report.to_json()
        data["report_file"] = str(outcome.report_file)
        ctx.ui.json(data)
    else:
        _print(ctx.ui, report, outcome)
    _raise_failures(report)
    return 0


def _print(terminal: UI, report: comparison.ReproReport, outcome: repro.Outcome) -> None:
    mode = "its lock" if report.mode == "lock" else "the manifest, locked afresh for each build"
    terminal.table(f"{report.stack}/{report.variant}: two builds from {mode}, nothing shared, backend {report.backend}",
                   ("node", "declared", "result", "cause / what differs"),
                   [(n.node, n.level.value if n.level else "-", n.verdict.value + ("" if n.meets_level else "  (FAILS)"),
                     ", ".join(c.value for c in n.causes) if n.verdict is comparison.Verdict.DIFFERENT
                     else "; ".join(n.metadata_summary()) if n.verdict is comparison.Verdict.SEMANTIC else "")
                    for n in report.nodes])
    details = [line for n in report.nodes if n.verdict is not comparison.Verdict.BIT
               for line in comparison.render_text(comparison.ReproReport(stack=report.stack, variant=report.variant,
                                                                         mode=report.mode, nodes=(n,)))]
    for line in details:
        terminal.print(line)
    for line in _audit_lines(report.audit):
        terminal.print(line)
    if report.compiles:
        terminal.print(f"compiles: {report.compiles}")
    for note in report.notes:
        terminal.print(f"note: {note}")
    terminal.print(f"report: {outcome.report_file}")
    if outcome.refs and outcome.run_dir.exists():
        terminal.print(f"kept: images {', '.join(sorted(outcome.refs['a'].values())[:1])} ... and {outcome.run_dir}")


def _raise_failures(report: comparison.ReproReport) -> None:
    failed = report.failures
    if not failed:
        return
    raise ReproFailed(
        f"{len(failed)} node(s) of {report.stack}/{report.variant} differ beyond their declared level: "
        + ", ".join(f"{n.node} ({n.verdict.value}, declared {n.level.value if n.level else '-'})" for n in failed),
        why="; ".join(f"{n.node}: " + ", ".join(c.value for c in n.causes) for n in failed),
        fix="see the differences above (--json lists every path); pin what floats, or lower repro.levels in the "
            "manifest to what the node can reach")


def _audit_only(args: argparse.Namespace, ctx: Context) -> int:
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, local_only=True, skip_smoke=True)
    drift: list[object] = []
    notes: list[str] = []
    if not args.no_lock_check:
        if t.lock is None:
            notes.append(f"no lock to check: run `buildctl lock {t.graph.stack}`")
        else:
            ctx.ui.info("checking the lock (buildctl lock --check)")
            drift, why = repro.lock_check(t, wiring.resolvers(ctx.config), ctx.config)
            if why:
                notes.append(why)
    findings = repro.audit_target(t, drift=drift)
    if args.json:
        ctx.ui.json({"stack": t.graph.stack, "variant": t.graph.variant, "inputs_pinned": audit.inputs_level_met(findings),
                     "findings": [f.to_json() for f in findings], "notes": notes})
    else:
        for line in _audit_lines([f.to_json() for f in findings]):
            ctx.ui.print(line)
        for note in notes:
            ctx.ui.print(f"note: {note}")
    if not audit.inputs_level_met(findings):
        floating = [f for f in findings if f.status == "floating"]
        raise ReproFailed(
            f"{t.graph.stack}/{t.graph.variant} does not reach the inputs level: {len(floating)} input(s) float",
            why="; ".join(f.what for f in floating[:5]) + (" ..." if len(floating) > 5 else ""),
            fix="pin them (the fix line of each finding says how), then run the audit again")
    return 0
