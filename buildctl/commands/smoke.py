"""`buildctl smoke IMAGE [--gpus] [--stack S --variant V] [--json] [--junit F]`."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import imageref, syntax
from buildctl.builder import smoke as smoke_mod
from buildctl.errors import UsageError, disk_full
from buildctl.graph import smoke_expect
from buildctl.lock import lockfile
from buildctl.manifest import pins

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "smoke", help="run the smoke suite in an image (build-host tier; --gpus: the GPU tier)",
        description="Copy smoke/ into a container of IMAGE and run it with the image's own Python. The "
                    "expectations come from the image's io.buildctl.smoke.expect label, or from --stack/--variant. "
                    "The report is saved under the cache's reports/smoke/STACK/VARIANT/. Exit status 10 when a "
                    "required check fails.")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--gpus", action="store_true", help="pass the host's GPUs through and run the GPU tier")
    p.add_argument("--stack", help="compute the expectations from this stack's manifest and lock")
    p.add_argument("--variant", help="variant of --stack (default: its first)")
    p.add_argument("--profile", help="entrypoint profile whose arguments megatron-args parses")
    p.add_argument("--python", help="interpreter in the image (default: the image's label, else the manifest's)")
    p.add_argument("--timeout", type=float, help="seconds before the suite is stopped (default: smoke.timeout_s)")
    p.add_argument("--json", action="store_true", help="the suite's JSON report on stdout")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML to FILE")
    p.set_defaults(func=run)


def _expectation(args: argparse.Namespace, ctx: Context) -> smoke_expect.Expectation | None:
    if args.stack is None:
        if args.variant or args.profile:
            raise UsageError("--variant and --profile need --stack", fix="buildctl smoke IMAGE --stack STACK --variant V")
        return None
    path = pins.find(ctx.pins_dir, args.stack)
    manifest = pins.load(path)
    variant = pins.select_variant(manifest, args.variant)
    lock = lockfile.read_beside(path, manifest.stack)
    vlock = lock.variants.get(variant.name) if lock else None
    if vlock is None:
        ctx.ui.warn(f"{args.stack}/{variant.name} is not locked: versions are checked against the manifest only")
    return smoke_expect.expect_for(manifest, vlock, variant, profile=args.profile)


TIMEOUT_MAX = 86_400.0  # seconds, as smoke.timeout_s may say in a manifest (manifest/fields.py)


def _check_options(args: argparse.Namespace) -> None:
    """--timeout, --python and --junit, before a container is started (a timeout of 0, -1 or nan would reach the
    engine's wait, a --junit folder the copy after the run)."""
    if args.timeout is not None:
        problem = syntax.finite(args.timeout, low=0.0, high=TIMEOUT_MAX)
        if problem:
            raise UsageError(f"--timeout {problem}", fix="give the seconds the suite may run, e.g. --timeout 900")
    if args.python is not None:  # the program the container runs, checked before anything else is asked
        smoke_mod.checked_python(args.python)
    if args.junit is not None and args.junit.is_dir():
        raise UsageError(f"--junit {args.junit} is a folder", fix="give the file to write the JUnit XML to")


def run(args: argparse.Namespace, ctx: Context) -> int:
    from buildctl.engine.engine import (
        Engine,  # only here: the rest of buildctl.builder.smoke takes any SmokeEngine
    )

    _check_options(args)
    imageref.checked(args.image, local_id=True)  # before an engine is asked
    expect = _expectation(args, ctx)
    engine = Engine()
    try:
        known = expect if expect is not None else smoke_mod.expectation_of(engine, args.image)
        report_dir = ctx.config.cache.reports / "smoke" / (known.stack or "unknown") / (known.variant or "unknown")
        ctx.ui.info(f"smoke {'GPU' if args.gpus else 'build-host'} tier in {args.image} ...")
        report = smoke_mod.run_smoke(engine, args.image, known, gpus=args.gpus, timeout=args.timeout,
                                     report_dir=report_dir, python=args.python)
    finally:
        engine.close()
    if args.junit and report.junit_path:
        try:
            args.junit.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(report.junit_path, args.junit)
        except OSError as exc:
            full = disk_full(args.junit, exc)
            if full is not None:
                raise full from exc
            raise UsageError(f"--junit {args.junit}: cannot write it: {exc.strerror or exc}",
                             why=f"the report is saved as {report.junit_path}", fix="give a file that can be written") from None
    if args.json:
        ctx.ui.json({**report.raw, "image": report.image, "image_id": report.image_id,
                     "report_path": str(report.report_path)})
    else:
        ctx.ui.table(f"smoke {report.tier} tier: {report.image} ({report.stack}/{report.variant})",
                     ["check", "required", "status", "summary"],
                     [[c.name, "yes" if c.required else "no",
                       c.status + (f" ({c.deferred} tier)" if c.deferred else ""), c.summary] for c in report.checks])
        ctx.ui.print(report.summary())
        ctx.ui.info(f"report: {report.report_path}")
    smoke_mod.gate(report)
    return 0
