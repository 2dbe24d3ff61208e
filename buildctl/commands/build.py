"""`buildctl plan STACK` and `buildctl build STACK`.

The services are imported in the handlers, not here: a no-op build (services.noop) needs none of them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import safepath
from buildctl.config import BACKENDS
from buildctl.errors import UsageError
from buildctl.services import noop

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", metavar="STACK")
    parser.add_argument("--variant", help="variant (default: the stack's first)")
    parser.add_argument("--registry", help="registry that shares node images (default: config `registry`, then the "
                                      "manifest's push.registry)")
    parser.add_argument("--local", action="store_true", help="use no registry: nodes live in the engine only")
    parser.add_argument("--profile", metavar="P",
                        help="the launch script's default profile, used when BUILDCTL_PROFILE is unset at run time "
                        "(default: the entrypoint's default_profile; every profile is in the script)")


def _backend(parser: argparse.ArgumentParser, *, several: bool) -> None:
    parser.add_argument("--backend", choices=BACKENDS,
                        help="how node images are built: classic (the engine's classic builder, through docker-py) or "
                        "buildkit (the engine's own BuildKit, through a docker CLI). Default: config `backend`, "
                        "else buildkit when builders are named, else classic")
    parser.add_argument("--builder", action="append", default=[], metavar="ENDPOINT",
                        help=("BuildKit builder to build on: local, unix:///PATH, tcp://HOST:PORT or ssh://[USER@]HOST"
                              "[:PORT] (repeat to spread one build over several; they share nodes and compiles "
                              "through the registry). Implies --backend buildkit. Default: config `builders`")
                        if several else "BuildKit builder to ask (the first a build would use); implies --backend buildkit")


def _emulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--emulate", action="store_true",
                        help="with no builder of the variant's platform, build its nodes under QEMU on a builder whose host "
                        "emulates it (binfmt_misc); compiles (wheel:*) are refused all the same: under QEMU they take "
                        "many times longer. Default: such a variant's nodes to build are refused")


def _no_load(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-load", action="store_true",
                        help="a builder's run: when the registry already has the final image, leave it there instead of "
                        "pulling it into this engine (nothing is pulled that no build needs; the run names the "
                        "registry's ref). Needs a registry")


def _check_no_load(args: argparse.Namespace, registry: str | None) -> None:
    if args.no_load and registry is None:
        raise UsageError("--no-load leaves the final image in the registry, and this run has none",
                         fix="pass --registry HOST:PORT (or set `registry`), or drop --no-load")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="show the build graph, node keys and what is stale (and why)",
                       description="Every node of a stack's variant with its content key, where its image is "
                                   "(local engine, registry, missing), the builder it goes to (a builder of the "
                                   "variant's platform, asked its platform) and, for a missing node, what changed "
                                   "since it was last built, in one line (--why: in full). Works without a lock "
                                   "(keys marked provisional).")
    _common(p)
    p.add_argument("--engine", help="Docker engine to ask (default: DOCKER_HOST or the local socket)")
    _backend(p, several=False)
    _emulate(p)
    p.add_argument("--json", action="store_true", help="machine-readable result (every node's full why, unlocked pins "
                                                          "and what its key waits for)")
    p.add_argument("--why", action="store_true",
                   help="the table's why column in full: every difference and every pin not locked (default: one "
                        "line per node)")
    _no_load(p)
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
    _backend(b, several=True)
    _emulate(b)
    b.add_argument("--skip-smoke", action="store_true",
                   help="build the entrypoint without the smoke gate (the image is labelled smoke=skipped)")
    b.add_argument("--dry-run", action="store_true",
                   help="prepare the locked sources (changes applied), then write what each node is built from "
                        "for review (Dockerfile, compile script, every text file of its context, e.g. the launch "
                        "script, under NODE.context/); build nothing")
    b.add_argument("--out", type=Path, help="with --dry-run only: folder to write into (default: under the cache)")
    _no_load(b)
    b.set_defaults(func=handle_build)


def handle_plan(args: argparse.Namespace, ctx: Context) -> int:
    from buildctl.services import build, lintargs, target, wiring

    wiring.check_registry_arg(args.registry)
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry, local_only=args.local,
                    profile=args.profile)
    chosen = wiring.choose_builders(ctx.config, backend=args.backend, engines=[args.engine] if args.engine else [],
                                    builders=args.builder)
    _check_no_load(args, t.registry)
    routed = wiring.route(ctx.config, chosen, t.variant.platform, emulate=args.emulate)
    try:
        engine = routed.engines[0]
        p = build.plan_for(t, engine, ctx.config, load=not args.no_load,
                           emulation=wiring.emulation_registered(engine.address, t.variant.platform),
                           route=routed.route)
    finally:
        routed.close()
    notes = list(p.notes)
    lint = lintargs.lint_entrypoint(ctx.config, t, ctx.ui.warn)
    if lint is not None and not lint.ran and t.manifest.entrypoint and t.manifest.entrypoint.megatron:
        notes.append(f"lint-args: the flags were not checked against Megatron-LM: {lint.reason}")
    if t.lock_stale:
        notes.insert(0, f"{t.manifest_path.name} changed since it was locked: entries the lock no longer "
                        "matches count as unlocked")
    if args.json:
        data = p.to_json()
        data["backend"] = chosen.backend
        data["builders"] = [e or "local" for e in chosen.endpoints]  # every builder named; `route`: this variant's
        data["notes"] = notes
        data["lint_args"] = None if lint is None else lint.to_json()
        ctx.ui.json(data)
        if lint is not None:
            lint.raise_for_errors()
        return 0
    g = t.graph
    title = (f"{g.stack} / {g.variant} ({g.platform}), "
             + (f"lock {g.lock_digest[:12]}" if g.lock_digest else "not locked") + f", backend {chosen.backend}")
    rows = []
    for n in p.nodes:
        key = n.node.key[:12] + ("*" if n.provisional else "")
        action = n.action + (" + push" if n.publish else "")
        rows.append((n.node.name, key, n.state, action, n.builder, n.why_text() if args.why else n.why_line()))
    ctx.ui.table(title, ("node", "key", "state", "action", "builder", "why"), rows)
    if any(n.provisional for n in p.nodes):
        ctx.ui.print("* provisional key: it will change once the stack is locked")
    for w in g.warnings:
        ctx.ui.warn(w)
    for note in notes:
        ctx.ui.print(f"note: {note}")
    ctx.ui.print(f"build: {chosen.describe()}")
    if lint is not None:
        lint.raise_for_errors()
    return 0


def handle_build(args: argparse.Namespace, ctx: Context) -> int:
    from buildctl.ui import NodeProgress

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.out is not None and not args.dry_run:  # a build writes no folder: --out alone was silently ignored
        raise UsageError("--out goes with --dry-run", why="a build without --dry-run writes nothing into a folder",
                         fix=f"add --dry-run to write what each node is built from into {args.out}, or leave --out out")
    started = time.monotonic()
    req = noop.request(ctx.project, vars(args), engine=args.engine[0] if args.engine else None, env=os.environ)
    done = None if args.dry_run or len(args.engine) > 1 or len(args.builder) > 1 else noop.cached(req, ctx.config,
                                                                                              os.environ)
    if done is not None:  # nothing changed: the final image is there, as the plan would find it
        for warning in done.warnings:
            ctx.ui.warn(warning)
        with NodeProgress(ctx.ui, done.names) as progress:
            for name in done.names:
                if name == done.final:
                    progress.node(name, "cached")
                else:
                    progress.node(name, "skipped", "not needed: a later node is present")
        ctx.ui.line(f"{done.stack}/{done.variant}: {done.ref}")
        ctx.ui.line(f"  built 0 node(s), smoke {done.smoke}, {time.monotonic() - started:.1f}s")
        return 0
    from buildctl.builder import pipeline
    from buildctl.services import build, lintargs, target, wiring

    wiring.check_registry_arg(args.registry)  # (a no-op run above found it in a request that built: checked then)
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry, local_only=args.local,
                    skip_smoke=args.skip_smoke, profile=args.profile)
    chosen = wiring.choose_builders(ctx.config, backend=args.backend, engines=args.engine, builders=args.builder)
    _check_no_load(args, t.registry)
    if args.dry_run:
        out = args.out or ctx.config.cache.root / "dry-run" / t.graph.stack / t.graph.variant
        safepath.usable_folder(out, "--out" if args.out else "the dry run's folder")  # before sources are prepared
        for line in build.prepare_sources(t, wiring.sources(ctx.config, base_dir=t.manifest_path.parent)):
            ctx.ui.print(line)
        # the plan first (what `build` would do, as `buildctl plan` says), then what each node is built from
        routed = wiring.route(ctx.config, chosen, t.variant.platform, emulate=args.emulate)
        try:
            p = build.plan_for(t, routed.engines[0], ctx.config, load=not args.no_load, route=routed.route)
        finally:
            routed.close()
        for n in p.nodes:
            ctx.ui.print(f"plan {n.node.name}: {n.action}" + (" + push" if n.publish else "")
                         + (f" ({n.because})" if n.because else "") + (f" on {n.builder}" if n.builder != "-" else ""))
        written = pipeline.dry_run(t, out)
        plan_file = out / "plan.json"
        plan_file.write_text(json.dumps(p.to_json(), indent=2, sort_keys=True) + "\n")
        written.append(plan_file)
        ctx.ui.print(f"build: {chosen.describe()}")
        ctx.ui.print(f"rendered {sum(1 for w in written if w.suffix == '.Dockerfile')} Dockerfile(s) of "
                     f"{t.graph.stack}/{t.graph.variant} into {out}")
        for w in written:
            ctx.ui.print(f"  {w}")
        return 0
    warned: list[str] = []

    def warn(text: str) -> None:
        warned.append(text)
        ctx.ui.warn(text)

    lintargs.lint_before_build(ctx.config, t, warn)
    # the engines' clients are made inside: they pull and push nodes with BUILDCTL_REGISTRY_AUTH, as `push` does
    with wiring.registry_credentials(t.registry, os.environ):
        routed = wiring.route(ctx.config, chosen, t.variant.platform, emulate=args.emulate)
        engines = list(routed.engines)
        options = pipeline.BuildOptions(jobs=args.jobs, skip_smoke=args.skip_smoke, load=not args.no_load,
                                        emulation=wiring.emulation_registered(engines[0].address, t.variant.platform),
                                        emulated=routed.emulated)
        try:
            with NodeProgress(ctx.ui, t.graph.names()) as progress:
                report = build.build_target(t, engines=engines, config=ctx.config, progress=progress,
                                            project=ctx.project, options=options,
                                            smoke_gate=wiring.smoke_gate(ctx.config, t.graph.stack, t.graph.variant,
                                                                         t.registry), route=routed.route)
        finally:
            routed.close()
    if len(engines) == 1:
        noop.remember(req, ctx.config, t, report, engine=engines[0].address, warnings=warned)
    built = report.built
    ctx.ui.line(f"{t.graph.stack}/{t.graph.variant}: {report.final}")
    # the backend where it built something (a no-op's line is the memo's, services/noop.py, which builds nothing)
    ctx.ui.line(f"  built {len(built)} node(s)" + (f" ({', '.join(built)}) with the {report.backend} backend on "
                                                   f"{routed.route.label()}" if built else "")
                + f", smoke {report.smoke}, {time.monotonic() - started:.1f}s")
    return 0
