"""`buildctl lock STACK [--variant V | --all] [--check] [--json]`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl.config import Config
from buildctl.errors import BuildctlError, LockDrift, UsageError
from buildctl.lock import lockfile
from buildctl.lock.drift import render_drift
from buildctl.lock.lock import GROUPS, LockOutcome
from buildctl.lock.lockfile import LockedPick, LockedPr, VariantLock
from buildctl.lock.resolvers import Resolvers
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.services import lock, wiring
from buildctl.ui import UI

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lock", help="resolve floating pins into pins/STACK.lock.json (--check: report drift)",
                       description="Pin every floating value of a stack (base tag -> digest, short SHA / branch / "
                                   "PR -> full SHA, pip and apt versions resolved inside the base, computed "
                                   "checksums) and write pins/STACK.lock.json once, atomically. Other variants' "
                                   "entries are kept.")
    p.add_argument("stack", metavar="STACK")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--variant", help="variant to lock (default: the stack's first)")
    which.add_argument("--all", action="store_true", help="every variant of the stack")
    p.add_argument("--check", action="store_true",
                   help="re-resolve and exit non-zero if anything drifted from the lock; writes nothing")
    p.add_argument("--partial", action="store_true",
                   help="lock every section that can be reached and record the others (and why) as missing; "
                        "plan uses a partial lock, build/push/nightly refuse it")
    p.add_argument("--only", metavar="GROUPS", type=_groups,
                   help=f"with --partial: resolve only these comma-separated groups ({', '.join(GROUPS)}); "
                        "the others are recorded as not asked")
    p.add_argument("--json", action="store_true", help="machine-readable result (also on failure)")
    p.set_defaults(func=handle)


def _groups(text: str) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(g.strip() for g in text.split(",") if g.strip()))
    bad = [g for g in out if g not in GROUPS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown group {bad[0] if bad else text!r} (known: {', '.join(GROUPS)})")
    return out


def handle(args: argparse.Namespace, ctx: Context) -> int:
    path = pins.find(ctx.pins_dir, args.stack)
    m = pins.load(path)
    names = [v.name for v in m.variants] if args.all else [pins.select_variant(m, args.variant).name]
    if args.only and not args.partial:
        raise UsageError("--only needs --partial (the sections it leaves out are recorded as missing)")
    if args.check and args.partial:
        raise UsageError("--check compares a full resolution with the lock; drop --partial")
    return run(path=path, manifest=m, variants=names, do_check=args.check, as_json=args.json,
               resolvers=wiring.resolvers(ctx.config), config=ctx.config, terminal=ctx.ui, project=ctx.project,
               partial=args.partial, only=args.only)


def _show(path: Path, project: Path) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def run(*, path: Path, manifest: Manifest, variants: Sequence[str], do_check: bool, as_json: bool,
        resolvers: Resolvers, config: Config, terminal: UI, project: Path, partial: bool = False,
        only: Sequence[str] | None = None) -> int:
    """Lock (or check) ``variants`` of the stack whose manifest is ``path``. With ``as_json`` a failure
    prints its JSON too ({"ok": false, "error": {...}}) before it propagates (and sets the exit code)."""
    try:
        return _run(path=path, manifest=manifest, variants=variants, do_check=do_check, as_json=as_json,
                    resolvers=resolvers, config=config, terminal=terminal, project=project, partial=partial, only=only)
    except BuildctlError as exc:
        if as_json and not isinstance(exc, LockDrift):  # drift printed its own JSON already
            terminal.json({"ok": False, "stack": manifest.stack, "variants": list(variants), "check": do_check,
                           "lock_file": _show(lockfile.lock_path(path), project),
                           "error": {"type": type(exc).__name__, "exit_code": exc.exit_code, "what": exc.what,
                                     "why": exc.why, "fix": exc.fix}})
        raise


def _run(*, path: Path, manifest: Manifest, variants: Sequence[str], do_check: bool, as_json: bool,
         resolvers: Resolvers, config: Config, terminal: UI, project: Path, partial: bool,
         only: Sequence[str] | None) -> int:
    shown = _show(lockfile.lock_path(path), project)
    existing = lock.existing(path, manifest.stack, for_check=do_check)
    if existing is not None and existing.hand_edited:
        terminal.info(f"{shown} was edited by hand since buildctl wrote it ({'; '.join(existing.hand_edited)}); "
                      "re-locking replaces the edits")
    if do_check:
        terminal.info(f"checking {shown} for {manifest.stack}: {', '.join(variants)}")
        drift = lock.check_stack(path, manifest, variants, resolvers, config, existing,
                                 shown_manifest=_show(path, project))
        if as_json:
            terminal.json({"ok": not drift, "lock_file": shown, "variants": list(variants),
                           "drift": [d.to_json() for d in drift]})
        if drift:
            raise LockDrift(render_drift(shown, drift),
                            fix="review the changes, then accept them with `buildctl lock "
                                f"{manifest.stack} {'--all' if len(variants) > 1 else '--variant ' + variants[0]}`")
        if not as_json:
            terminal.print(f"{shown} is current for {manifest.stack}: {', '.join(variants)}")
        return 0
    terminal.info(f"locking {manifest.stack}: {', '.join(variants)}")
    outcome = lock.lock_and_write(path, manifest, variants, resolvers, config, existing, partial=partial, only=only)
    _report(outcome, shown, as_json, terminal)
    return 0


def change_lines(locked_pr: LockedPr) -> str:
    """How a PR was applied, for people."""
    if locked_pr.mode == "merge":
        text = f"PR #{locked_pr.number} {locked_pr.head} merged (apply: merge; its own commits: {len(locked_pr.commits)})"
    else:
        text = f"PR #{locked_pr.number} {locked_pr.head}: {len(locked_pr.commits)} own commit(s) picked"
        if locked_pr.skipped_merges:
            text += f", {len(locked_pr.skipped_merges)} merge(s) of {locked_pr.target} skipped"
    if locked_pr.merged_upstream is not None:
        text += (f"; merged upstream by {locked_pr.merged_upstream.commit[:12]}" if locked_pr.merged_upstream.how == "merge"
                 else "; in the target already (fast-forward/rebase)")
    if locked_pr.empty:
        text += f"; {len(locked_pr.empty)} pick(s) changed nothing"
    return text + "".join(f"\n    {sha}" for sha in locked_pr.commits)


def summary(name: str, variant_lock: VariantLock) -> list[list[str]]:
    """Rows of what a variant's lock pins (pure, for the table)."""
    rows = [["base", f"{variant_lock.base.ref}\n{variant_lock.base.digest}" if variant_lock.base else "(not locked)"]]
    for c in variant_lock.components.values():
        extra = ""
        for ch in c.changes:
            if isinstance(ch, LockedPr):
                extra += "\n  " + change_lines(ch)
            elif isinstance(ch, LockedPick):
                extra += f"\n  cherry-pick {ch.sha}"
            else:
                extra += f"\n  patch {ch.file} {ch.sha256[:12]}"
        for dc in c.dragged:
            extra += f"\n  dragged in by {dc.by}: {dc.sha[:12]} {dc.subject}"
        extra += "".join(f"\n  submodule {p} {s}" for p, s in c.submodules.items())
        if c.tree != c.commit:
            extra += f"\n  tree {c.tree}"
        rows.append([f"git {c.name}", c.commit + extra])
    for section, why in variant_lock.missing.items():
        rows.append([f"missing {section}", why])
    if variant_lock.pip:
        in_base = [p for p in variant_lock.pip if p.in_base]
        rows.append(["pip", ", ".join(f"{p.name}=={p.version}" + (" (in base)" if p.in_base else "")
                                      for p in variant_lock.pip) + f"\n{len(variant_lock.pip) - len(in_base)} to install, "
                                                        f"{len(in_base)} in base"])
    for comp, pips in variant_lock.build_pip.items():
        rows.append([f"build pip {comp}", ", ".join(f"{p.name}=={p.version}" for p in pips)])
    if variant_lock.apt:
        rows.append(["apt", ", ".join(f"{n}={ver}" for n, ver in variant_lock.apt.items())])
    for comp, pkgs in variant_lock.build_apt.items():
        rows.append([f"build apt {comp}", ", ".join(f"{n}={ver}" for n, ver in pkgs.items())])
    for d in variant_lock.downloads.values():
        rows.append([f"download {d.name}", f"{d.sha256}" + (" (computed)" if d.computed else "")])
    return rows


def _report(outcome: LockOutcome, shown: str, as_json: bool, terminal: UI) -> None:
    if as_json:
        out: dict[str, Any] = {"ok": True, "lock_file": shown, "manifest_sha256": outcome.lock.manifest_sha256,
                               "partial": {n: dict(v.missing) for n, v in outcome.resolved.items() if v.missing},
                               "notes": list(outcome.notes),
                               "variants": {n: v.to_json() for n, v in outcome.resolved.items()},
                               "unchanged": list(outcome.unchanged), "stale": list(outcome.stale),
                               "dropped": list(outcome.dropped)}
        terminal.json(out)
    else:
        for name, v in outcome.resolved.items():
            state = "unchanged" if name in outcome.unchanged else "locked"
            terminal.table(f"{outcome.lock.stack}/{name}: {state}", ["pin", "locked value"], summary(name, v))
        terminal.print(f"wrote {shown}")
    for note in outcome.notes:
        terminal.warn(note)
    for name, v in outcome.resolved.items():
        if v.missing:
            terminal.warn(f"{outcome.lock.stack}/{name} is a partial lock: not locked: {', '.join(v.missing)} "
                          "(plan uses it; build, push and nightly refuse it)")
    for name in outcome.dropped:
        terminal.warn(f"variant {name} is no longer in the manifest: removed from {shown}")
    if outcome.stale:
        terminal.warn(f"{', '.join(outcome.stale)} in {shown} were locked from an earlier version of the manifest; "
                      f"`buildctl lock {outcome.lock.stack} --all` re-locks them")
