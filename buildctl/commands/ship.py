"""`buildctl verify`, `buildctl push`, `buildctl bom`, `buildctl provenance` and `buildctl diff`: thin
handlers over verify.py, push.py, bom.py, sbom.py, provenance.py and attest.py (which hold the logic and
are tested on their own)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import imageref
from buildctl.errors import BuildctlError, ManifestErrors, PushError, SmokeFailed, UsageError, VerifyFailed
from buildctl.lock import lockfile
from buildctl.lock.lockfile import VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.registry import credentials
from buildctl.safepath import write_atomic
from buildctl.services import ship, target, wiring
from buildctl.ship import bom, provenance, push, verify

if TYPE_CHECKING:
    from buildctl.commands.context import Context
    from buildctl.engine.engine import Engine


@contextmanager
def _engine(ctx: Context) -> Iterator[Engine]:
    engine = wiring.engine(ctx.config)
    try:
        yield engine
    finally:
        engine.close()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    v = sub.add_parser("verify", help="check a base image against its lock and the contract its manifest states")
    v.add_argument("base", metavar="BASE", help="base alias from a manifest (base.alias), e.g. nvcr-base")
    v.add_argument("--stack", help="stack whose base to check (default: the configured default stack, "
                                    "else the one stack with this alias)")
    v.add_argument("--variant", help="variant (default: the stack's first)")
    v.add_argument("--json", action="store_true", help="machine-readable result")
    v.set_defaults(func=cmd_verify)

    b = sub.add_parser("bom", help="bill of materials of an image: Python and Debian packages, component SHAs, base",
                       description="The bill of materials of an image, read from the image (a throw-away container "
                                   "lists Python distributions and Debian packages) and its labels. Default: "
                                   "buildctl's own text (--json: its own schema). --format cyclonedx: CycloneDX 1.6 "
                                   "JSON (validated against the schema), with purls, the base image by digest and "
                                   "each git component with its commits (from the project's lock, when it is the one "
                                   "the image was built from).")
    b.add_argument("image", metavar="IMAGE", help="local image (tag or id), or a registry reference to pull")
    out = b.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable result (buildctl's own schema)")
    out.add_argument("--format", choices=("cyclonedx",), help="a standard format: cyclonedx (CycloneDX 1.6 JSON)")
    b.set_defaults(func=cmd_bom)

    pv = sub.add_parser("provenance", help="SLSA provenance of an image: an in-toto statement naming every locked input",
                        description="Print (or write) an in-toto Statement v1 with a SLSA Provenance v1 predicate for "
                                    "IMAGE: its subject is the image's registry manifest digest, its "
                                    "resolvedDependencies every input the lock pins (base digest, git commits, PR "
                                    "heads and prepared commits, patches, downloads, pip files, apt versions). The lock "
                                    "is the project's, checked against the image's lock-hash label. `buildctl push "
                                    "--attest provenance` attaches it beside the image in the registry.")
    pv.add_argument("image", metavar="IMAGE", help="a pushed image (tag, id or registry reference)")
    pv.add_argument("--out", type=Path, metavar="FILE", help="write the statement to FILE (atomically) instead of stdout")
    pv.set_defaults(func=cmd_provenance)

    d = sub.add_parser("diff", help="what changed between two images, mapped back to manifest entries")
    d.add_argument("a", metavar="IMAGE_A")
    d.add_argument("b", metavar="IMAGE_B")
    d.add_argument("--stack", help="manifest to map changes to (default: the stack label of IMAGE_B, then IMAGE_A)")
    d.add_argument("--json", action="store_true", help="machine-readable result")
    d.set_defaults(func=cmd_diff)

    p = sub.add_parser("push", help="push a stack's images by content tag, confirm each digest; --promote moves latest",
                       description="Push the built node images of a variant under their content tags and the final "
                                   "image under <registry>/<repository>:<variant>-<key>, reading every manifest back "
                                   "to confirm its digest. Credentials: docker's config (docker login), or "
                                   f"{credentials.AUTH_ENV}=USER:PASSWORD. What was confirmed is recorded under "
                                   "<cache>/reports/push/.")
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--variant", help="variant (default: the stack's first)")
    p.add_argument("--registry", help="registry to push to (default: config `registry`, then the manifest's push.registry)")
    p.add_argument("--promote", action="store_true",
                   help="then move `latest` to the final image, only with smoke evidence in the registry for its "
                        "digest: the build tier, and the GPU tier unless the manifest waives it (`buildctl evidence`); "
                        "a size budget that fails (manifest `budget`) holds it too")
    p.add_argument("--attest", action="append", choices=("provenance",), default=[], metavar="KIND",
                   help="attach evidence beside the final image, as an OCI 1.1 artifact whose subject is its manifest "
                        "digest (listed under the referrers tag sha256-<hex> where the registry has no referrers "
                        "API): provenance (the in-toto statement of `buildctl provenance`)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=cmd_push)


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    path, manifest = verify.find_base(ctx.pins_dir, args.base, args.stack, ctx.config.default_stack)
    variant = pins.select_variant(manifest, args.variant)
    lock = lockfile.read_beside(path, manifest.stack)
    vlock = lock.variants.get(variant.name) if lock is not None else None
    ctx.ui.info(f"verifying {args.base}: {manifest.stack}/{variant.name} {variant.image}")
    with _engine(ctx) as engine:
        result = verify.verify(
            alias=args.base, stack=manifest.stack, variant=variant, contract=manifest.contract_for(variant),
            lock=vlock, engine=engine, mirrors=ctx.config.registry_mirrors,
            store=verify.BaseRecords(ctx.config.cache.reports),
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
    imageref.checked(args.image, local_id=True)
    with _engine(ctx) as engine:
        result = bom.collect(engine, args.image)
    if args.format == "cyclonedx":
        from buildctl.ship import sbom  # its schema validator takes seconds to import: only when asked for

        try:
            vlock: VariantLock | None = provenance.lock_for_image(ctx.pins_dir, result.labels, args.image).vlock
        except BuildctlError as exc:
            vlock = None
            if result.components:
                ctx.ui.warn(f"components are listed by their prepared commit only: {exc.what}")
        ctx.ui.document(sbom.cyclonedx(result, vlock))
    elif args.json:
        ctx.ui.json(result.to_json())
    else:
        ctx.ui.print(bom.render_bom(result).rstrip("\n"))
    return 0


def cmd_provenance(args: argparse.Namespace, ctx: Context) -> int:
    imageref.checked(args.image, local_id=True)
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        # before the engine is asked: a folder here ended in IsADirectoryError once the statement was made
        raise UsageError(f"--out {args.out} " + ("is a folder" if args.out.is_dir() else "is in no folder that exists"),
                         fix="give the file to write the statement to, in a folder that exists")
    with _engine(ctx) as engine:
        stmt = provenance.for_image(engine, ctx.pins_dir, args.image, ctx.project)
    text = provenance.to_text(stmt)
    if args.out is not None:
        try:
            write_atomic(args.out, text)
        except OSError as exc:  # (a full disk is a DiskFull from write_atomic)
            raise UsageError(f"--out {args.out}: cannot write it: {exc.strerror or exc}") from None
        ctx.ui.info(f"wrote {args.out}: {len(stmt['predicate']['buildDefinition']['resolvedDependencies'])} "
                    f"resolved dependencies for {stmt['subject'][0]['name']}@sha256:{stmt['subject'][0]['digest']['sha256']}")
    else:
        ctx.ui.document(text)
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
    imageref.checked(args.a, "IMAGE_A", local_id=True)
    imageref.checked(args.b, "IMAGE_B", local_id=True)
    with _engine(ctx) as engine:
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


def cmd_push(args: argparse.Namespace, ctx: Context) -> int:
    wiring.check_registry_arg(args.registry)
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry)
    t, report = ship.publish(ctx.project, ctx.config, t, registry_arg=args.registry, say=ctx.ui.info,
                             warn=ctx.ui.warn, moving=("latest",) if args.promote else (),
                        promote=args.promote, attest_kinds=tuple(dict.fromkeys(args.attest)))
    if args.json:
        ctx.ui.json(report.to_json())
    else:
        ctx.ui.print(push.render(report).rstrip("\n"))
    if report.failed:
        first = report.failed[0]
        raise PushError(f"push of {t.manifest.stack}/{t.variant.name} to {report.registry} did not complete "
                        f"({len(report.pushed)} confirmed, {len(report.not_attempted)} not attempted)",
                        why=first.error, fix=f"{first.fix} (what was confirmed is recorded in "
                        f"{ctx.config.cache.reports / 'push'} and is not pushed again)")
    if report.not_promoted:
        raise SmokeFailed(f"{len(report.not_promoted)} moving tag(s) not moved: "
                          + ", ".join(p.target for p in report.not_promoted),
                          why="; ".join(sorted({p.reason for p in report.not_promoted})),
                          fix="the immutable tags are pushed and confirmed; attach the missing evidence (`buildctl "
                              "evidence attach IMAGE REPORT`), then promote again")
    return 0
