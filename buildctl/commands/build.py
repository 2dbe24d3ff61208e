"""`buildctl plan STACK` and `buildctl build STACK`."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.build import pipeline as pipeline_types
from buildctl.errors import UsageError
from buildctl.graph import plan as planmod
from buildctl.graph.records import RecordStore, state_root
from buildctl.lock import lockfile
from buildctl.megatron import argslint
from buildctl.registry import credentials
from buildctl.services import target

if TYPE_CHECKING:
    from buildctl.cli import Context
    from buildctl.engine.engine import Engine


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--variant", help="variant (default: the stack's first)")
    p.add_argument("--registry", help="registry that shares node images (default: config `registry`, then the "
                                      "manifest's push.registry)")
    p.add_argument("--local", action="store_true", help="use no registry: nodes live in the engine only")
    p.add_argument("--profile", metavar="P",
                   help="the launch script's default profile, used when BUILDCTL_PROFILE is unset at run time "
                        "(default: the entrypoint's default_profile; every profile is in the script)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="show the build graph, node keys and what is stale (and why)",
                       description="Every node of a stack's variant with its content key, where its image is "
                                   "(local engine, registry, missing) and, for a missing node, what changed since "
                                   "it was last built. Works without a lock (keys marked provisional).")
    _common(p)
    p.add_argument("--engine", help="Docker engine to ask (default: DOCKER_HOST or the local socket)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=handle_plan)

    b = sub.add_parser("build", help="build the missing nodes of a stack's variant, tagged by content key",
                       description="Prepare sources, downloads and pip wheels on the host, then build every missing "
                                   "node (independent ones in parallel), run the smoke gate on the assembled image and "
                                   "bake the entrypoint. Each node is tagged by its key only once it completed; "
                                   "running again resumes. Ctrl-C or SIGTERM stops it and removes what it started (exit 130 / "
                                   "143); one build per stack, variant and cache runs at a time (a second one "
                                   "waits). Needs the stack locked.")
    _common(b)
    b.add_argument("--jobs", type=int, default=2, metavar="N", help="nodes built at once (default 2)")
    b.add_argument("--engine", action="append", default=[], metavar="URL",
                   help="Docker engine (repeat to share one build over several; they exchange nodes through the "
                        "registry). Default: DOCKER_HOST or the local socket")
    b.add_argument("--skip-smoke", action="store_true",
                   help="build the entrypoint without the smoke gate (the image is labelled smoke=skipped)")
    b.add_argument("--dry-run", action="store_true",
                   help="prepare the locked sources (changes applied), then write what each node is built from "
                        "for review (Dockerfile, compile script, every text file of its context, e.g. the launch "
                        "script, under NODE.context/); build nothing")
    b.add_argument("--out", type=Path, help="--dry-run: folder to write into (default: under the cache)")
    b.set_defaults(func=handle_build)


def emulation_registered(engine_address: str, variant_platform: str) -> bool | None:
    """Whether this host's binfmt_misc has a qemu handler for the platform (None: the engine is remote)."""
    if not engine_address.startswith("unix://"):
        return None
    arch = variant_platform.split("/")[-1]
    qemu = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    return Path(f"/proc/sys/fs/binfmt_misc/qemu-{qemu}").exists()


def make_engine(ctx: Context, url: str | None, name: str = "default") -> Engine:
    from buildctl.engine.engine import Engine

    return Engine(url, name=name, network_timeout=ctx.config.network_timeout, stall_timeout=ctx.config.stall_timeout)


def handle_plan(args: argparse.Namespace, ctx: Context) -> int:
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry, local_only=args.local,
                    profile=args.profile)
    engine = make_engine(ctx, args.engine)
    try:
        store = RecordStore(state_root(ctx.config.cache))
        p = planmod.make(t.graph, refs=t.refs, engine=engine, records=store.load_all(t.graph),
                         registry=t.registry, emulation=emulation_registered(engine.address, t.variant.platform),
                         missing=t.vlock.missing if t.vlock else None,
                         trusted=lambda n: store.has(t.graph.stack, t.graph.variant, n.name, n.key))
    finally:
        engine.close()
    notes = list(p.notes)
    lint = lint_entrypoint(ctx, t)
    if lint is not None and not lint.ran and t.manifest.entrypoint and t.manifest.entrypoint.megatron:
        notes.append(f"lint-args: the flags were not checked against Megatron-LM: {lint.reason}")
    if t.lock_stale:
        notes.insert(0, f"{t.manifest_path.name} changed since it was locked: entries the lock no longer "
                        "matches count as unlocked")
    if args.json:
        data = p.to_json()
        data["notes"] = notes
        data["lint_args"] = None if lint is None else lint.to_json()
        ctx.ui.json(data)
        if lint is not None:
            lint.raise_for_errors()
        return 0
    g = t.graph
    title = (f"{g.stack} / {g.variant} ({g.platform}), "
             + (f"lock {g.lock_digest[:12]}" if g.lock_digest else "not locked"))
    rows = []
    for n in p.nodes:
        key = n.node.key[:12] + ("*" if n.provisional else "")
        detail = "; ".join(n.why) if n.why else n.note
        if n.node.unlocked:
            detail = (detail + "; " if detail else "") + "unlocked: " + ", ".join(n.node.unlocked)
        elif n.provisional:
            detail = (detail + "; " if detail else "") + "own inputs locked"
        if n.provisional and n.waits_for:
            detail += "; waits for " + ", ".join(n.waits_for)
        rows.append((n.node.name, key, n.state, detail))
    ctx.ui.table(title, ("node", "key", "state", "why"), rows)
    if any(n.provisional for n in p.nodes):
        ctx.ui.print("* provisional key: it will change once the stack is locked")
    for w in g.warnings:
        ctx.ui.warn(w)
    for note in notes:
        ctx.ui.print(f"note: {note}")
    if lint is not None:
        lint.raise_for_errors()
    return 0


def lint_before_build(ctx: Context, t: target.Target) -> None:
    """Fetch and prepare the pinned Megatron-LM first (the build needs it anyway), so that the launch
    arguments are checked against it before any node is built; stop on errors."""
    from buildctl.sources.sources import Sources

    e = t.manifest.entrypoint
    if e is None:
        return
    if e.megatron and t.vlock is not None and e.megatron in t.vlock.components:
        sources = Sources.from_config(ctx.config, base_dir=t.manifest_path.parent)
        sources.prepare_component(t.manifest.component(e.megatron), t.vlock.components[e.megatron])
    report = lint_entrypoint(ctx, t)
    if report is not None:
        if not report.ran and e.megatron:
            ctx.ui.warn(f"lint-args: the flags were not checked against Megatron-LM: {report.reason}")
        report.raise_for_errors()


def lint_entrypoint(ctx: Context, t: target.Target) -> argslint.LintReport | None:
    """The launch arguments against the pinned Megatron-LM where its prepared source is at hand (the
    consistency checks run either way); plan and build stop on its errors, before anything is built."""
    from buildctl.commands.lint_args import prepared_source

    if t.manifest.entrypoint is None:
        return None
    report = argslint.lint_for_plan(t.manifest, t.variant, prepared_source(ctx.config, t.manifest_path), t.profile)
    for f in report.findings:
        if f.severity != "error":
            ctx.ui.warn(str(f))
    return report


def handle_build(args: argparse.Namespace, ctx: Context) -> int:
    from buildctl.build import pipeline
    from buildctl.sources.sources import Sources
    from buildctl.ui import NodeProgress

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry, local_only=args.local,
                    skip_smoke=args.skip_smoke, profile=args.profile)
    if args.dry_run:
        out = args.out or ctx.config.cache.root / "dry-run" / t.graph.stack / t.graph.variant
        for line in pipeline.prepare_sources(t, Sources.from_config(ctx.config, base_dir=t.manifest_path.parent)):
            ctx.ui.print(line)
        written = pipeline.dry_run(t, out)
        ctx.ui.print(f"rendered {sum(1 for w in written if w.suffix == '.Dockerfile')} Dockerfile(s) of "
                     f"{t.graph.stack}/{t.graph.variant} into {out}")
        for w in written:
            ctx.ui.print(f"  {w}")
        return 0
    lockfile.refuse_partial(t.lock, t.variant.name, action="build", lock_file=str(lockfile.lock_path(t.manifest_path)))
    lint_before_build(ctx, t)
    started = time.monotonic()
    # the engines' clients are made inside: they pull and push nodes with BUILDCTL_REGISTRY_AUTH, as `push` does
    with registry_credentials(t.registry, os.environ):
        engines = [make_engine(ctx, url, name=f"engine{i}" if len(args.engine) > 1 else "default")
                   for i, url in enumerate(args.engine or [None])]
        sources = Sources.from_config(ctx.config, base_dir=t.manifest_path.parent)
        options = pipeline.Options(jobs=args.jobs, skip_smoke=args.skip_smoke,
                                   emulation=emulation_registered(engines[0].address, t.variant.platform))
        try:
            with NodeProgress(ctx.ui, t.graph.names()) as progress:
                report = pipeline.run(t, engines=engines, config=ctx.config, sources=sources, progress=progress,
                                      project=ctx.project, options=options, smoke_gate=smoke_gate(ctx, t))
        finally:
            for e in engines:
                e.close()
    built = report.built
    ctx.ui.print(f"{t.graph.stack}/{t.graph.variant}: {report.final}")
    ctx.ui.print(f"  built {len(built)} node(s)" + (f" ({', '.join(built)})" if built else "")
                 + f", smoke {report.smoke}, {time.monotonic() - started:.1f}s")
    return 0


@contextlib.contextmanager
def registry_credentials(registry: str | None, env: Mapping[str, str]) -> Iterator[None]:
    """BUILDCTL_REGISTRY_AUTH for the registry a build shares its nodes through (credentials.docker_credentials),
    the same door `buildctl push` opens; nothing changes without a registry or without the variable."""
    if not registry:
        yield
        return
    with credentials.docker_credentials(env, registry):
        yield


def smoke_gate(ctx: Context, t: target.Target) -> pipeline_types.SmokeGate:
    """The build-host smoke tier (smoke.BuildGate) as the gate before the entrypoint; reports under the cache."""
    from buildctl.build.smoke import BuildGate

    return BuildGate(report_dir=ctx.config.cache.reports / "smoke" / t.graph.stack / t.graph.variant)
