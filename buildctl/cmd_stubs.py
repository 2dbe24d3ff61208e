"""Commands whose feature is not built yet: they exist so that --help is complete, and say so."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from buildctl.errors import NotBuiltYet

if TYPE_CHECKING:
    from buildctl.cli import Context

# command -> (help, issue that builds it)
PENDING: dict[str, tuple[str, str]] = {
    "verify": ("check a base image against its contract", "issue 5"),
    "push": ("push a stack's images and confirm their digests", "issue 5"),
    "nightly": ("re-lock, build, smoke and push", "issue 5"),
    "bom": ("bill of materials of an image", "issue 5"),
    "diff": ("what changed between two images", "issue 5"),
}


def _pending(args: argparse.Namespace, ctx: Context) -> int:
    _help, issue = PENDING[args.command]
    raise NotBuiltYet(f"`buildctl {args.command}` is not built yet", why=f"it is tracked in {issue}")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, (help_text, _issue) in PENDING.items():
        p = sub.add_parser(name, help=f"{help_text} (not built yet)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_pending)
