"""`buildctl bisect STACK --good REF --bad REF --check CHECK`: parse, run buildctl.services.bisect, print."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.errors import UsageError
from buildctl.services import bisect

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser(
        "bisect", help="find the pin change (and the commit) between two locks that makes a smoke check fail",
        description="REF is a lock file (file:PATH, or a path ending in .json), a lock hash from the archive "
                    "(lock:HEX, or 12 to 64 hex digits) or an image (image:REF, or a reference; its "
                    "io.buildctl.lock-hash label is looked up in the archive, then beside the image in its "
                    "registry). The pin changes between the good and the bad lock are applied in a fixed order "
                    "(base, components, downloads, apt, build apt, pip, build pip; each by name) and bisected; "
                    "when the first bad one is a git component whose base commit moved, its first-parent "
                    "history between the two commits is bisected to the first bad commit. Each step builds "
                    "only what the cache does not hold and runs the build-host smoke tier; CHECK decides. "
                    "Writes nothing to pins/.")
    b.add_argument("stack", metavar="STACK")
    b.add_argument("--good", required=True, metavar="REF", help="a lock (file, hash or image) where CHECK passes")
    b.add_argument("--bad", required=True, metavar="REF", help="a lock (file, hash or image) where CHECK fails")
    b.add_argument("--check", required=True, metavar="CHECK", help="a smoke check of the stack's suite (e.g. imports)")
    b.add_argument("--variant", help="variant to build (default: the one the hash or image names, else the first)")
    b.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once (default 2)")
    b.add_argument("--json", action="store_true", help="machine-readable report")
    b.set_defaults(func=handle_bisect)


def handle_bisect(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    report = bisect.bisect(ctx.project, ctx.config, args.stack, good=args.good, bad=args.bad, check=args.check,
                           variant=args.variant, jobs=args.jobs, terminal=ctx.ui, cwd=Path.cwd())
    if args.json:
        ctx.ui.json(report.to_json())
    else:
        for line in report.lines():
            ctx.ui.print(line)
    return 0
