"""`buildctl evidence IMAGE` and `buildctl evidence attach IMAGE REPORT`: parse, call services/evidence.py, print."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import imageref
from buildctl.errors import UsageError
from buildctl.services import evidence

if TYPE_CHECKING:
    from buildctl.commands.context import Context

USAGE = "buildctl evidence [--json] IMAGE | buildctl evidence attach [--json] IMAGE REPORT"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "evidence", usage=USAGE,
        help="list the smoke evidence attached to an image in its registry; `attach` adds a GPU-tier report",
        description="Smoke evidence is an OCI 1.1 artifact whose subject is the image's manifest digest (listed "
                    "under the referrers tag sha256-<hex> where the registry has no referrers API). "
                    "`buildctl evidence IMAGE` lists what is attached: tier, verdict, the suite that made it, the "
                    "GPU and driver of a GPU-tier run. `buildctl evidence attach IMAGE REPORT` checks REPORT, the "
                    "JSON `python3 -m smoke --tier gpu --image-digest DIGEST` printed on a GPU host (a smoke "
                    "report of schema 1; its subject must be IMAGE's digest, its suite hash this buildctl's suite, "
                    "its stack and variant IMAGE's; a GPU-tier report must name the GPU model and driver), then "
                    "attaches it. Promotion (`push --promote`, `nightly`) reads this evidence, never a label. "
                    "IMAGE: HOST[:PORT]/REPOSITORY:TAG or HOST[:PORT]/REPOSITORY@sha256:<hex>.")
    p.add_argument("words", nargs="+", metavar="IMAGE | attach IMAGE REPORT",
                   help="an image to list, or `attach` followed by the image and the report file")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace, ctx: Context) -> int:
    words = list(args.words)
    if words[0] == "attach":
        if len(words) != 3:
            raise UsageError("`buildctl evidence attach` takes an image and a report file", fix=f"usage: {USAGE}")
        imageref.checked(words[1])
        image, e = evidence.attach_report(ctx.config, words[1], Path(words[2]))
        if args.json:
            ctx.ui.json({"image": image, **{k: v for k, v in e.to_json().items() if k != "report"},
                         "artifact": e.artifact})
        else:
            ctx.ui.print(f"attached {e.describe()}\n  to {image}")
        return 0
    if len(words) != 1:
        raise UsageError(f"`buildctl evidence` takes one image, got {len(words)} words", fix=f"usage: {USAGE}")
    listing = evidence.list_evidence(ctx.config, imageref.checked(words[0]))
    if args.json:
        ctx.ui.json(listing.to_json())
        return 0
    ctx.ui.print(f"{listing.image}: {len(listing.evidence)} smoke evidence artifact(s); this buildctl's suite "
                 f"{listing.suite_hash[:19]}")
    for e in listing.evidence:
        other = "" if e.suite_hash == listing.suite_hash else " (ANOTHER SUITE: promotion sets it aside)"
        ctx.ui.print(f"  {e.describe()}{other}" + (f"\n    tested {e.tested}" if e.tested else ""))
    for problem in listing.problems:
        ctx.ui.print(f"  not evidence: {problem}")
    return 0
