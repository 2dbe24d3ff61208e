"""`buildctl lock STACK [--variant V | --all] [--check] [--json]`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl import lockfile, pins
from buildctl.config import Config
from buildctl.errors import LockDrift
from buildctl.lock import LockOutcome, Resolvers, check, lock_stack, render_drift
from buildctl.lockfile import VariantLock
from buildctl.model import Manifest
from buildctl.ui import UI

if TYPE_CHECKING:
    from buildctl.cli import Context
    from buildctl.sources import Sources


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
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=handle)


def real_resolvers(config: Config) -> Resolvers:
    """The resolvers that reach the engine, git remotes and package indexes."""
    from buildctl.engine import Engine
    from buildctl.inbase import EngineInBase
    from buildctl.index import DEFAULT_INDEX, HttpFetcher, SimpleIndex
    from buildctl.sources import Sources

    engine = Engine(network_timeout=config.network_timeout)
    fetcher = HttpFetcher(ca_bundle=config.ca_bundle, timeout=config.network_timeout)
    index = SimpleIndex([config.pip_index_url or DEFAULT_INDEX, *config.pip_extra_index_urls], fetcher)
    return Resolvers(registry=engine, git=SourcesGit(Sources.from_config(config)), in_base=EngineInBase(engine, config),
                     index=index, fetch=fetcher)


class SourcesGit:
    """lock.GitResolver over sources.Sources (one Sources per run: one consistent view of each remote)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        return self.sources.resolve_commit(repo, commit, branch=branch)

    def branch_head(self, repo: str, branch: str) -> str:
        return self.sources.branch_head(repo, branch)

    def pr_head(self, repo: str, number: int) -> str:
        return self.sources.pr_head(repo, number)

    def submodules(self, repo: str, commit: str) -> Mapping[str, str]:
        return self.sources.submodules(repo, commit)

    def tree(self, repo: str, commit: str, prs: Sequence[tuple[int, str]],
             patches: Sequence[tuple[str, Path, str]]) -> str:
        from buildctl.sources import PatchFile, PrHead

        prepared = self.sources.prepare(repo, commit, prs=[PrHead(number=n, head=h) for n, h in prs],
                                        patches=[PatchFile(name=n, path=p, sha256=s) for n, p, s in patches],
                                        submodules=False)
        return prepared.tree


def handle(args: argparse.Namespace, ctx: Context) -> int:
    path = pins.find(ctx.pins_dir, args.stack)
    m = pins.load(path)
    names = [v.name for v in m.variants] if args.all else [pins.select_variant(m, args.variant).name]
    return run(path=path, manifest=m, variants=names, do_check=args.check, as_json=args.json,
               resolvers=real_resolvers(ctx.config), config=ctx.config, ui=ctx.ui, project=ctx.project)


def _show(path: Path, project: Path) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def run(*, path: Path, manifest: Manifest, variants: Sequence[str], do_check: bool, as_json: bool,
        resolvers: Resolvers, config: Config, ui: UI, project: Path) -> int:
    """Lock (or check) ``variants`` of the stack whose manifest is ``path``."""
    lock_file = lockfile.lock_path(path)
    shown = _show(lock_file, project)
    existing = lockfile.read(lock_file)
    sha = pins.manifest_sha256(path)
    if do_check:
        ui.info(f"checking {shown} for {manifest.stack}: {', '.join(variants)}")
        drift = check(manifest, _show(path, project), sha, variants, resolvers, config, existing)
        if as_json:
            ui.json({"ok": not drift, "lock_file": shown, "variants": list(variants),
                     "drift": [d.to_json() for d in drift]})
        if drift:
            raise LockDrift(render_drift(shown, drift),
                            fix="review the changes, then accept them with `buildctl lock "
                                f"{manifest.stack} {'--all' if len(variants) > 1 else '--variant ' + variants[0]}`")
        if not as_json:
            ui.print(f"{shown} is current for {manifest.stack}: {', '.join(variants)}")
        return 0
    ui.info(f"locking {manifest.stack}: {', '.join(variants)}")
    outcome = lock_stack(manifest, sha, variants, resolvers, config, existing)
    lockfile.write(lock_file, outcome.lock)
    _report(outcome, shown, as_json, ui)
    return 0


def summary(name: str, v: VariantLock) -> list[list[str]]:
    """Rows of what a variant's lock pins (pure, for the table)."""
    rows = [["base", f"{v.base.ref}\n{v.base.digest}"]]
    for c in v.components.values():
        extra = "".join(f"\n  PR #{n} {h}" for n, h in c.prs.items())
        extra += "".join(f"\n  patch {f} {h[:12]}" for f, h in c.patches.items())
        extra += "".join(f"\n  submodule {p} {s}" for p, s in c.submodules.items())
        if c.tree != c.commit:
            extra += f"\n  tree {c.tree}"
        rows.append([f"git {c.name}", c.commit + extra])
    if v.pip:
        in_base = [p for p in v.pip if p.in_base]
        rows.append(["pip", ", ".join(f"{p.name}=={p.version}" + (" (in base)" if p.in_base else "")
                                      for p in v.pip) + f"\n{len(v.pip) - len(in_base)} to install, "
                                                        f"{len(in_base)} in base"])
    for comp, pips in v.build_pip.items():
        rows.append([f"build pip {comp}", ", ".join(f"{p.name}=={p.version}" for p in pips)])
    if v.apt:
        rows.append(["apt", ", ".join(f"{n}={ver}" for n, ver in v.apt.items())])
    for comp, pkgs in v.build_apt.items():
        rows.append([f"build apt {comp}", ", ".join(f"{n}={ver}" for n, ver in pkgs.items())])
    for d in v.downloads.values():
        rows.append([f"download {d.name}", f"{d.sha256}" + (" (computed)" if d.computed else "")])
    return rows


def _report(outcome: LockOutcome, shown: str, as_json: bool, ui: UI) -> None:
    if as_json:
        out: dict[str, Any] = {"lock_file": shown, "manifest_sha256": outcome.lock.manifest_sha256,
                               "variants": {n: v.to_json() for n, v in outcome.resolved.items()},
                               "unchanged": list(outcome.unchanged), "stale": list(outcome.stale),
                               "dropped": list(outcome.dropped)}
        ui.json(out)
    else:
        for name, v in outcome.resolved.items():
            state = "unchanged" if name in outcome.unchanged else "locked"
            ui.table(f"{outcome.lock.stack}/{name}: {state}", ["pin", "locked value"], summary(name, v))
        ui.print(f"wrote {shown}")
    for name in outcome.dropped:
        ui.warn(f"variant {name} is no longer in the manifest: removed from {shown}")
    if outcome.stale:
        ui.warn(f"{', '.join(outcome.stale)} in {shown} were locked from an earlier version of the manifest; "
                f"`buildctl lock {outcome.lock.stack} --all` re-locks them")
