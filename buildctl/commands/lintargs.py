"""`buildctl lint-args STACK`: check the entrypoint's arguments against the pinned Megatron-LM source."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.errors import ArgsLintFailed, UsageError
from buildctl.manifest import pins
from buildctl.megatron import lintargs as linter
from buildctl.services import lintargs

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "lint-args",
        help="check the entrypoint's arguments against the pinned Megatron-LM",
        description="Check every launch argument of a stack against the flags its pinned Megatron-LM source "
                    "declares (read statically, nothing is imported), plus parallel sizes, pipeline layout and "
                    "other consistency checks. Exits non-zero on errors.",
    )
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--variant", help="variant (default: the stack's first)")
    p.add_argument("--profile", help="entrypoint profile (default: the entrypoint's default_profile)")
    p.add_argument("--megatron-src", type=Path, metavar="DIR",
                   help="a Megatron-LM tree to check against (default: the prepared source of the stack's "
                        "entrypoint.megatron component)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context, locate: linter.MegatronSourceLocator | None = None) -> int:
    path = pins.find(ctx.pins_dir, args.stack)
    manifest = pins.load(path)
    variant = pins.select_variant(manifest, args.variant)
    if manifest.entrypoint is None:
        raise UsageError(f"stack {manifest.stack} has no entrypoint, so there are no arguments to check")
    if args.megatron_src is not None:
        if not args.megatron_src.is_dir():
            raise UsageError(f"--megatron-src {args.megatron_src} is not a folder",
                             fix="give the root of a Megatron-LM checkout (the folder holding megatron/)")
        locate = linter.given_source(args.megatron_src)
    report = linter.lint_for_plan(manifest, variant, locate or lintargs.prepared_source(ctx.config, path), args.profile)

    ui = ctx.ui
    if args.json:
        ui.json(report.to_json())
    else:
        ui.print(report.summary())
        for f in report.findings:
            ui.print(str(f))
        if report.derived:
            ui.print("derived: " + ", ".join(f"{k} {v}" for k, v in report.derived.items()))
        for note in report.notes:
            ui.info(f"note: {note}")
    report.raise_for_errors(detail=args.json)
    if not report.ran:
        # Asked for explicitly, a lint that could not read the flags is a failure, not a pass.
        raise ArgsLintFailed(f"the flags of {manifest.stack} were not checked against Megatron-LM",
                             why=report.reason, fix="pass --megatron-src DIR (a Megatron-LM checkout)")
    return 0
