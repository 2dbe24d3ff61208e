"""`buildctl pins check`, `buildctl pins show` and `buildctl pins schema`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl import untrusted
from buildctl.errors import LockError, ManifestError, ManifestErrors
from buildctl.lock import lockcheck, lockfile
from buildctl.manifest import pins, schema
from buildctl.manifest.model import Change, Download, Manifest, Variant

if TYPE_CHECKING:
    from buildctl.commands.context import Context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pins", help="validate and show pin manifests")
    psub = p.add_subparsers(dest="pins_command", metavar="SUBCOMMAND")
    psub.required = True
    c = psub.add_parser("check", help="validate every manifest under pins/")
    c.add_argument("stacks", nargs="*", metavar="STACK", help="only these stacks")
    c.add_argument("--json", action="store_true", help="machine-readable result")
    c.set_defaults(func=check)
    s = psub.add_parser("show", help="what goes into each image of a stack")
    s.add_argument("stack", metavar="STACK")
    s.add_argument("--variant", help="variant (default: the stack's first)")
    s.add_argument("--json", action="store_true", help="machine-readable result")
    s.set_defaults(func=show)
    r = psub.add_parser("schema", help="every key a manifest may hold: its type, default and meaning")
    r.add_argument("--json", action="store_true", help="machine-readable result")
    r.set_defaults(func=show_schema)


def show_schema(args: argparse.Namespace, ctx: Context) -> int:
    """The manifest reference from the model's field docs (docs/reference/manifest/ is made from the same)."""
    if args.json:
        ctx.ui.json({"fields": [{"key": d.path, "type": d.kind, "default": d.default or None, "doc": d.doc}
                                for d in schema.fields()]})
    else:
        ctx.ui.print(schema.text().rstrip("\n"))
    return 0


def _error_json(error: ManifestError) -> dict[str, Any]:
    loc = error.location
    return {"file": loc.file, "line": loc.line, "column": loc.column, "key": loc.key,
            "message": error.detail, "fix": error.fix}


def check(args: argparse.Namespace, ctx: Context) -> int:
    known = pins.stacks(ctx.pins_dir)
    selected = [pins.find(ctx.pins_dir, s) for s in args.stacks] if args.stacks else list(known.values())
    results: dict[str, Any] = {}
    failed = 0
    for path in selected:
        try:
            m = pins.load(path)
            results[path.stem] = {"ok": True, "file": str(path), "variants": [v.name for v in m.variants]}
            if not args.json:
                ctx.ui.print(f"ok    {path.stem:<22} {len(m.variants)} variant(s): {', '.join(v.name for v in m.variants)}")
        except ManifestErrors as exc:
            failed += 1
            results[path.stem] = {"ok": False, "file": str(path), "errors": [_error_json(e) for e in exc.errors]}
            if not args.json:
                ctx.ui.print(f"FAIL  {path.stem}")
                ctx.ui.error(str(exc))
    if args.json:
        ctx.ui.json({"ok": failed == 0, "stacks": results})
    elif not selected:
        ctx.ui.warn(f"no manifests under {ctx.pins_dir}")
    return 0 if failed == 0 else ManifestErrors.exit_code


def _lock_for(path: Path) -> tuple[dict[str, Any] | None, lockfile.LockHandEdited | None]:
    """(the lock's data, None), or (None, the refusal) for a lock edited by hand: plan, build and lock refuse
    such a lock by its integrity hash, so `pins show` does not show its values as locked either."""
    lock_path = path.with_name(path.stem + ".lock.json")
    if not lock_path.is_file():
        return None, None
    try:
        data = lockfile.parse(untrusted.read_capped(lock_path, lockfile.MAX_BYTES), str(lock_path))
    except OSError as exc:
        raise LockError(f"{lock_path}: cannot read the lock: {exc.strerror or exc}") from None
    except untrusted.Malformed as exc:
        raise LockError(f"{lock_path}: {exc}: not a lock file") from None
    edited = lockcheck.edited_entries(data)
    if edited:
        return None, lockfile.LockHandEdited(lock_path, edited)
    return data, None


def describe(manifest: Manifest, variant: Variant, lock: dict[str, Any] | None,
             manifest_sha256: str | None = None) -> dict[str, Any]:
    """Everything that goes into the image of one variant, lock values where there are any."""
    locked = (lock or {}).get("variants", {}).get(variant.name, {})
    cudnn = manifest.cudnn_for(variant)
    comps = []
    for c in manifest.components:
        lc = locked.get("components", {}).get(c.name, {})
        locked_changes: list[dict[str, Any]] = list(lc.get("changes", []))
        locked_prs = {x["number"]: x for x in locked_changes if x.get("kind") == "pr"}
        comps.append({
            "name": c.name,
            "repo": c.repo,
            "commit": lc.get("base", c.commit),
            "commit_locked": "base" in lc,
            "branch": c.branch,
            "prs": [{"number": pr.number,
                     "head": locked_prs.get(pr.number, {}).get("head", pr.head)} for pr in c.prs],
            "changes": [_change(ch, locked_changes) for ch in c.steps],
            "dragged": lc.get("dragged", []),
            "patches": [p.file for p in c.patches],
            "tree": lc.get("tree"),
            "branch_head": lc.get("branch_head") or None,
            "submodules": lc.get("submodules", {}),
            "patch_sha256": {x["file"]: x["sha256"] for x in locked_changes if x.get("kind") == "patch"},
            "build_pip_locked": locked.get("build_pip", {}).get(c.name, []),
            "build_apt_locked": locked.get("build_apt", {}).get(c.name, {}),
            "install": c.install.kind.value + (f" at {c.install.path}" if c.install.path else ""),
            "build_env": manifest.component_env(c, variant),
            "build_requires": [r.text for r in c.build.requires],
        })
    lpip = {p["name"]: p for p in locked.get("pip", [])}
    lapt = locked.get("apt", {})
    ldl = locked.get("downloads", {})
    return {
        "stack": manifest.stack,
        "variant": variant.name,
        "description": variant.description or manifest.description,
        "base": {"alias": manifest.base.alias, "image": variant.image, "digest": locked.get("base", {}).get("digest"),
                 "platform": variant.platform, "cuda": variant.cuda, "gpu_archs": list(variant.gpu_archs), "python": variant.python},
        "locked": lock is not None and bool(locked),
        "missing": dict(locked.get("missing", {})),
        "lock": None if not locked else {
            "resolved_at": locked.get("resolved_at", ""),
            "manifest_sha256": (lock or {}).get("manifest_sha256"),
            "matches_manifest": None if manifest_sha256 is None
            else (lock or {}).get("manifest_sha256") == manifest_sha256},
        "cudnn": None if cudnn is None else {"package": cudnn.package, "version": cudnn.version,
                                             "apt_version": lapt.get(cudnn.package, cudnn.apt_version or None)},
        "apt": [{"name": p.name, "version": lapt.get(p.name, p.version)} for p in manifest.apt.packages],
        "downloads": [_download(d, variant.platform, ldl.get(d.name, {})) for d in manifest.downloads],
        "pip": {"constraint": manifest.pip.constraint.value,
                "requirements": [{"requirement": r.text,
                                  "locked": lpip.get(r.name, {}).get("version")} for r in manifest.pip.requirements],
                # every pinned distribution (dependencies included), as the lock recorded it
                "locked": [{"name": p["name"], "version": p["version"], "in_base": p.get("in_base", False),
                            "hashes": len(p.get("hashes", []))} for p in locked.get("pip", [])]},
        "remove": {"pip": list(manifest.remove.pip), "paths": list(manifest.remove.paths)},
        "protect": {"packages": list(manifest.protect.packages), "replace": list(manifest.protect.replace)},
        "components": comps,
        "env": manifest.env_for(variant),
        "entrypoint": None if manifest.entrypoint is None else _entrypoint_info(manifest, variant),
        "smoke": {"required": list(manifest.smoke.required), "gpu_tier": manifest.smoke.gpu_tier.value},
    }


def _change(change: Change, locked: list[dict[str, Any]]) -> dict[str, Any]:
    """One manifest change with what the lock recorded for it (the exact commits of a PR)."""
    if change.commit is not None:
        return {"kind": "commit", "sha": change.commit}
    if change.patch is not None:
        return {"kind": "patch", "file": change.patch, "sha256": change.sha256}
    lk = next((x for x in locked if x.get("kind") == "pr" and x.get("number") == change.pr), None)
    out: dict[str, Any] = {"kind": "pr", "number": change.pr, "head": (lk or {}).get("head", change.head),
                           "apply": change.apply, "target": change.target, "locked": lk is not None}
    if lk is not None:
        out.update(commits=lk.get("commits", []), skipped_merges=lk.get("skipped_merges", []),
                   empty=lk.get("empty", []), merged_upstream=lk.get("merged_upstream"))
    return out


def _change_text(change: dict[str, Any]) -> str:
    if change["kind"] == "commit":
        return f"cherry-pick {change['sha']}"
    if change["kind"] == "patch":
        return f"patch {change['file']}"
    text = f"PR #{change['number']} {change['head'] or '(head resolved by lock)'}"
    if change["apply"] == "merge":
        text += " (apply: merge)"
    if change.get("locked"):
        text += (f"\n  {len(change['commits'])} own commit(s)" + (" merged" if change["apply"] == "merge" else " picked")
                 + (f", {len(change['skipped_merges'])} merge(s) of {change['target']} skipped" if change["skipped_merges"] else ""))
        mu = change.get("merged_upstream")
        if mu:
            text += f"\n  merged upstream ({mu['how']}{' ' + mu['commit'][:12] if mu.get('commit') else ''})"
        if change["empty"]:
            text += f"\n  {len(change['empty'])} pick(s) changed nothing (already in the base)"
    return text


def _entrypoint_info(manifest: Manifest, variant: Variant) -> dict[str, Any]:
    from buildctl.graph.entrypoint import default_launch, launches

    assert manifest.entrypoint is not None
    choices = launches(manifest, variant)
    return {"launcher": manifest.entrypoint.launcher.kind, "command": list(manifest.entrypoint.command),
            "args": len(choices[default_launch(manifest, variant)].args), "profiles": list(manifest.entrypoint.profiles),
            "default_profile": default_launch(manifest, variant),
            "launches": {name: {"gpus": c.gpus, "nodes": c.nodes, "upstream_defect": c.defect or None}
                         for name, c in choices.items()}}


def _download(download: Download, platform: str, locked: dict[str, Any]) -> dict[str, Any]:
    u = download.for_platform(platform)
    return {"name": download.name, "dest": download.dest, "install": download.install,
            "url": locked.get("url") or (u.url if u else None),
            "sha256": locked.get("sha256") or (u.sha256 if u else None)}


def show(args: argparse.Namespace, ctx: Context) -> int:
    path = pins.find(ctx.pins_dir, args.stack)
    m = pins.load(path)
    v = pins.select_variant(m, args.variant)
    lock, refused = _lock_for(path)
    info = describe(m, v, lock, pins.manifest_sha256(path))
    info["lock_refused"] = None if refused is None else refused.what
    if args.json:
        ctx.ui.json(info)
        return 0
    ui = ctx.ui
    b = info["base"]
    ui.print(f"{m.stack} / {v.name}: {info['description']}")
    lk = info["lock"]
    if refused is not None:
        ui.print(f"lock: refused, as plan, build and lock refuse it: {refused.what} "
                 "(values as written in the manifest)")
    elif lk is None:
        ui.print("lock: not locked (values as written in the manifest)")
    else:
        state = "matches the manifest" if lk["matches_manifest"] else \
            f"the manifest changed since (`buildctl lock {m.stack} --check` says what drifted)"
        ui.print(f"lock: locked {lk['resolved_at'] or ''}; {state}")
    ui.table("base", ["alias", "image", "digest", "platform", "CUDA", "GPU archs", "python"],
             [[b["alias"], b["image"], b["digest"] or "-", b["platform"], b["cuda"],
               ",".join(b["gpu_archs"]), b["python"]]])
    rows = []
    for c in info["components"]:
        commit = c["commit"] + ("" if len(c["commit"]) == 40 else " (short)")
        if c["branch"]:
            commit += f"\non {c['branch']}" + (f" (head {c['branch_head']})" if c["branch_head"] else "")
        if c["tree"] and c["tree"] != c["commit"]:
            commit += f"\ntree {c['tree']}"
        commit += "".join(f"\nsubmodule {sp} {sha}" for sp, sha in sorted(c["submodules"].items()))
        rows.append([c["name"], commit,
                     "\n".join(_change_text(ch) for ch in c["changes"]) or "-",
                     c["install"], " ".join(f"{k}={val}" for k, val in sorted(c["build_env"].items())) or "-"])
    if rows:
        ui.table("git components", ["name", "base commit", "changes (in order)", "install", "build env"], rows)
    for c in info["components"]:
        for d in c["dragged"]:
            ui.print(f"{c['name']}: {d['by']} drags in {d['sha'][:12]} {d['subject']} (not the base's, not its own)")
    for section, why in sorted(info["missing"].items()):
        ui.warn(f"partial lock: {section} is not locked: {why}")
    build_rows = [[c["name"], ", ".join(f"{p['name']}=={p['version']}" for p in c["build_pip_locked"])
                   or ", ".join(c["build_requires"]) or "-",
                   ", ".join(f"{n}={ver}" for n, ver in sorted(c["build_apt_locked"].items())) or "-"]
                  for c in info["components"] if c["build_requires"] or c["build_apt_locked"]]
    if build_rows:
        ui.table("component build requirements", ["component", "pip", "apt"], build_rows)
    if info["cudnn"]:
        cd = info["cudnn"]
        ui.table("cuDNN", ["package", "version", "apt version"], [[cd["package"], cd["version"], cd["apt_version"] or "-"]])
    if info["apt"]:
        ui.table("apt", ["package", "version"], [[p["name"], p["version"]] for p in info["apt"]])
    if info["downloads"]:
        ui.table("downloads", ["name", "dest", "url", "sha256"],
                 [[d["name"], d["dest"], d["url"] or "(none for this platform)", d["sha256"]] for d in info["downloads"]])
    if info["pip"]["requirements"]:
        ui.table(f"pip (PIP_CONSTRAINT: {info['pip']['constraint']})", ["requirement", "locked"],
                 [[r["requirement"], r["locked"] or "-"] for r in info["pip"]["requirements"]])
    if info["pip"]["locked"]:
        ui.table("pip, as locked (dependencies included)", ["package", "version", "source"],
                 [[p["name"], p["version"], "already in the base" if p["in_base"] else f"{p['hashes']} file hash(es)"]
                  for p in info["pip"]["locked"]])
    if m.remove.pip or m.remove.paths or m.protect.packages:
        ui.table("base policy", ["removed pip", "removed paths", "protected", "replaced on purpose"],
                 [[", ".join(m.remove.pip) or "-", ", ".join(m.remove.paths) or "-",
                   ", ".join(m.protect.packages) or "-", ", ".join(m.protect.replace) or "-"]])
    if m.env:
        ui.table("runtime environment", ["name", "value"], sorted(m.env.items()))
    if info["entrypoint"]:
        e = info["entrypoint"]
        ui.print(f"entrypoint: {e['launcher']} {' '.join(e['command'])} with {e['args']} arguments; "
                 f"profiles: {', '.join(e['profiles']) or '-'}")
    ui.print(f"smoke: {', '.join(info['smoke']['required']) or '-'} (GPU tier {info['smoke']['gpu_tier']})")
    return 0
