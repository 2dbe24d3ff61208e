"""`buildctl nightly STACK...`: parse, run buildctl.services.nightly with its real steps, print the report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import safepath
from buildctl.errors import UsageError
from buildctl.services import nightly, wiring

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "nightly", help="re-lock, build, smoke, push with immutable tags, then move `nightly`",
        description="For each stack (every variant, or --variant): refresh the lock, build what is missing "
                    "(the smoke gate runs before the entrypoint), push every node and the final image under "
                    "immutable tags (<stack>-<variant>-<lock hash>, <variant>-nightly-YYYYMMDD, nightly-YYYYMMDD "
                    "for the default variant), and move `nightly` only with smoke evidence in the registry for the "
                    "image's digest (build tier; GPU tier unless the manifest waives it) and within a size budget "
                    "that fails (manifest `budget`). Writes a JSON and a Markdown report (with the bytes each layer "
                    "adds or rewrites against the last `nightly`) under <cache>/reports/nightly/. Exits non-zero "
                    "when any stage failed.")
    p.add_argument("stacks", nargs="*", metavar="STACK", help="stacks (default: the configured default stack)")
    p.add_argument("--variant", help="only this variant (default: every variant of each stack)")
    p.add_argument("--registry", help="registry to push to (default: config `registry`, then the manifest's)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once (default 2)")
    p.add_argument("--no-push", action="store_true", help="lock and build only")
    p.add_argument("--emulate", action="store_true",
                   help="a variant with no builder of its platform builds its nodes without compiles under QEMU on a "
                        "builder whose host emulates it (as `build --emulate`); without it, such a variant's build fails")
    p.add_argument("--bump", action="append", default=[], metavar="STACK",
                   help="first bump this stack's branch components (as `buildctl bump STACK --no-push`: written only "
                        "past a green build); a red bump fails the stack's nightly and moves no tag (repeatable)")
    p.add_argument("--report-dir", type=Path, help="where the reports go (default: <cache>/reports/nightly)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the Markdown page")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    wiring.check_registry_arg(args.registry)
    stacks = args.stacks or [ctx.config.default_stack]
    todo = nightly.targets(ctx.pins_dir, stacks, args.variant)
    report_dir = args.report_dir or ctx.config.cache.reports / "nightly"
    safepath.usable_folder(report_dir, "--report-dir" if args.report_dir else "the nightly reports' folder")  # not after the night
    routes, backend = nightly.routed(ctx.config, ctx.pins_dir, todo, emulate=args.emulate)
    steps = nightly.RealSteps(project=ctx.project, config=ctx.config, ui=ctx.ui, registry=args.registry, jobs=args.jobs,
                              routes=routes, backend=backend)

    def said(run: nightly.VariantRun) -> None:
        state = "ok" if run.ok else "FAILED at " + next(s.stage for s in run.stages if s.status == "failed")
        ctx.ui.info(f"nightly {run.stack}/{run.variant}: {state}")

    unknown = sorted(set(args.bump) - {stack for stack, _v, _d in todo})
    if unknown:
        raise UsageError(f"--bump {unknown[0]}: the nightly does not run that stack", fix="name it as a STACK too")
    try:
        report, path = nightly.run(steps, todo, report_dir=report_dir, push=not args.no_push, on_result=said,
                                   bumper=steps, bump_stacks=args.bump)
    except nightly.ReportUnwritten as exc:
        # the disk is full where the report goes: the page is printed here, and stderr says it is nowhere else
        show(ctx, exc.report, as_json=args.json)
        raise
    show(ctx, report, as_json=args.json)
    ctx.ui.info(f"report: {path} and {path.with_suffix('.md')}")
    return 0 if report.ok else 1


def show(ctx: Context, report: nightly.NightlyReport, *, as_json: bool) -> None:
    if as_json:
        ctx.ui.json(report.to_json())
    else:
        ctx.ui.print(nightly.render_markdown(report).rstrip("\n"))
