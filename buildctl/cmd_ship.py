"""`buildctl verify`, `buildctl push`, `buildctl bom` and `buildctl diff`: thin handlers over
verify.py, push.py and bom.py (which hold the logic and are tested on their own)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from buildctl import bom, lockfile, pins, verify
from buildctl.errors import ManifestErrors, VerifyFailed
from buildctl.model import Manifest

if TYPE_CHECKING:
    from buildctl.cli import Context
    from buildctl.engine import Engine


def _engine(ctx: Context) -> Engine:
    from buildctl.engine import Engine  # docker-py is loaded only by commands that need an engine

    return Engine(network_timeout=ctx.config.network_timeout)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    v = sub.add_parser("verify", help="check a base image against its lock and the contract its manifest states")
    v.add_argument("base", metavar="BASE", help="base alias from a manifest (base.alias), e.g. nvcr-base")
    v.add_argument("--stack", help="stack whose base to check (default: the configured default stack, "
                                    "else the one stack with this alias)")
    v.add_argument("--variant", help="variant (default: the stack's first)")
    v.add_argument("--json", action="store_true", help="machine-readable result")
    v.set_defaults(func=cmd_verify)

    b = sub.add_parser("bom", help="bill of materials of an image: Python and Debian packages, component SHAs, base")
    b.add_argument("image", metavar="IMAGE", help="local image (tag or id), or a registry reference to pull")
    b.add_argument("--json", action="store_true", help="machine-readable result")
    b.set_defaults(func=cmd_bom)

    d = sub.add_parser("diff", help="what changed between two images, mapped back to manifest entries")
    d.add_argument("a", metavar="IMAGE_A")
    d.add_argument("b", metavar="IMAGE_B")
    d.add_argument("--stack", help="manifest to map changes to (default: the stack label of IMAGE_B, then IMAGE_A)")
    d.add_argument("--json", action="store_true", help="machine-readable result")
    d.set_defaults(func=cmd_diff)


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    path, manifest = verify.find_base(ctx.pins_dir, args.base, args.stack, ctx.config.default_stack)
    variant = pins.select_variant(manifest, args.variant)
    lock = lockfile.read(lockfile.lock_path(path))
    vlock = lock.variants.get(variant.name) if lock is not None else None
    ctx.ui.info(f"verifying {args.base}: {manifest.stack}/{variant.name} {variant.image}")
    result = verify.verify(
        alias=args.base, stack=manifest.stack, variant=variant, contract=manifest.contract_for(variant),
        lock=vlock, engine=_engine(ctx), mirrors=ctx.config.registry_mirrors,
        store=verify.RecordStore(ctx.config.cache.reports),
    )
    if args.json:
        ctx.ui.json(result.to_json())
    else:
        ctx.ui.print(verify.render(result).rstrip("\n"))
    if not result.ok:
        failed = result.failures
        raise VerifyFailed(
            f"base {args.base} ({manifest.stack}/{variant.name}) does not meet its lock and contract",
            why="; ".join(f"{c.name}: expected {c.expected}, got {c.actual}" + (f" ({c.note})" if c.note else "")
                          for c in failed),
            fix="if the change is intended, re-lock (`buildctl lock STACK`) and update the manifest's contract; "
                "otherwise pin the base by digest",
        )
    return 0


def cmd_bom(args: argparse.Namespace, ctx: Context) -> int:
    result = bom.collect(_engine(ctx), args.image)
    if args.json:
        ctx.ui.json(result.to_json())
    else:
        ctx.ui.print(bom.render_bom(result).rstrip("\n"))
    return 0


def _manifest_for(ctx: Context, stacks: list[str | None]) -> Manifest | None:
    """The first of ``stacks`` that has a readable manifest here (changes are then mapped onto it)."""
    known = pins.stacks(ctx.pins_dir)
    for name in stacks:
        if name and name in known:
            try:
                return pins.load(known[name])
            except ManifestErrors:
                ctx.ui.warn(f"pins/{name}.yaml does not load; changes are not mapped to manifest entries")
                return None
    return None


def cmd_diff(args: argparse.Namespace, ctx: Context) -> int:
    engine = _engine(ctx)
    a, b = bom.collect(engine, args.a), bom.collect(engine, args.b)
    if args.stack:
        manifest: Manifest | None = pins.load(pins.find(ctx.pins_dir, args.stack))
    else:
        manifest = _manifest_for(ctx, [b.stack, a.stack])
    result = bom.diff(a, b, manifest, ctx.project)
    if args.json:
        ctx.ui.json(result.to_json())
    else:
        ctx.ui.print(bom.render_diff(result).rstrip("\n"))
    return 0
