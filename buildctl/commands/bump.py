"""`buildctl bump STACK [COMPONENT...]`: parse, run buildctl.services.bump, print its report."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from buildctl.errors import UsageError
from buildctl.services import bump, wiring

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bump", help="move components that follow a branch to its head, only past a green build",
        description="For each COMPONENT (default: every component that names a branch) resolve its branch's head "
                    "through the configured git mirrors; build every variant from the manifest and lock with the "
                    "new commits, run the smoke gate, push (immutable tags, the lock beside the image), and only "
                    "then rewrite the commit: lines of pins/STACK.yaml (comments and layout kept) and the lock, "
                    "both or neither, and move `latest`. On any failure nothing is written and no tag moves; the "
                    "report names the failing check and each commit range old..new. The candidate lock is kept "
                    "in the lock archive (<cache>/reports/locks) either way.")
    p.add_argument("stack", metavar="STACK")
    p.add_argument("components", nargs="*", metavar="COMPONENT", help="components to bump (default: those with a branch)")
    p.add_argument("--registry", help="registry to push to (default: config `registry`, then the manifest's)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once (default 2)")
    p.add_argument("--no-push", action="store_true",
                   help="build and gate, then rewrite manifest and lock; push nothing and move no tag")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(func=handle_bump)


def handle_bump(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    wiring.check_registry_arg(args.registry)
    report = bump.bump(ctx.project, ctx.config, args.stack, args.components, registry=args.registry,
                       jobs=args.jobs, push=not args.no_push, terminal=ctx.ui)
    if args.json:
        ctx.ui.json(report.to_json())
    else:
        ctx.ui.print(report.summary())
        for m in report.moved:
            ctx.ui.print(f"  {m.component} ({m.branch}): {m.old}..{m.new}")
        if not report.ok:
            ctx.ui.print(f"  {report.failed_stage} failed: {report.error}")
            if report.fix:
                ctx.ui.print(f"  fix: {report.fix}")
        for ref in report.promoted:
            ctx.ui.print(f"  moved {ref}")
    return 0 if report.ok else report.exit_code or 1
