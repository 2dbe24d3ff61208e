"""`buildctl plan STACK` and `buildctl build STACK`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import plan as planmod
from buildctl import target
from buildctl.records import RecordStore

if TYPE_CHECKING:
    from buildctl.cli import Context
    from buildctl.engine import Engine


def state_root(ctx: Context) -> Path:
    """Records of built nodes (see records.py): under the cache root, next to logs and wheels."""
    return ctx.config.cache.root / "state"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--variant", help="variant (default: the stack's first)")
    p.add_argument("--registry", help="registry that shares node images (default: config `registry`, then the "
                                      "manifest's push.registry)")
    p.add_argument("--local", action="store_true", help="use no registry: nodes live in the engine only")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="show the build graph, node keys and what is stale (and why)",
                       description="Every node of a stack's variant with its content key, where its image is "
                                   "(local engine, registry, missing) and, for a missing node, what changed since "
                                   "it was last built. Works without a lock (keys marked provisional).")
    _common(p)
    p.add_argument("--engine", help="Docker engine to ask (default: DOCKER_HOST or the local socket)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=handle_plan)


def emulation_registered(engine_address: str, variant_platform: str) -> bool | None:
    """Whether this host's binfmt_misc has a qemu handler for the platform (None: the engine is remote)."""
    if not engine_address.startswith("unix://"):
        return None
    arch = variant_platform.split("/")[-1]
    qemu = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    return Path(f"/proc/sys/fs/binfmt_misc/qemu-{qemu}").exists()


def make_engine(ctx: Context, url: str | None, name: str = "default") -> Engine:
    from buildctl.engine import Engine

    return Engine(url, name=name, network_timeout=ctx.config.network_timeout)


def handle_plan(args: argparse.Namespace, ctx: Context) -> int:
    t = target.load(ctx.project, ctx.config, args.stack, args.variant, registry=args.registry, local_only=args.local)
    engine = make_engine(ctx, args.engine)
    try:
        p = planmod.make(t.graph, refs=t.refs, engine=engine, records=RecordStore(state_root(ctx)).load_all(t.graph),
                         registry=t.registry, emulation=emulation_registered(engine.address, t.variant.platform))
    finally:
        engine.close()
    notes = list(p.notes)
    if t.lock_stale:
        notes.insert(0, f"{t.manifest_path.name} changed since it was locked: entries the lock no longer "
                        "matches count as unlocked")
    if args.json:
        data = p.to_json()
        data["notes"] = notes
        ctx.ui.json(data)
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
        rows.append((n.node.name, key, n.state, detail))
    ctx.ui.table(title, ("node", "key", "state", "why"), rows)
    if any(n.provisional for n in p.nodes):
        ctx.ui.print("* provisional key: it will change once the stack is locked")
    for w in g.warnings:
        ctx.ui.warn(w)
    for note in notes:
        ctx.ui.print(f"note: {note}")
    return 0
