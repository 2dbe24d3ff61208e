"""versions: installed distributions and component builds against the lock.

Build tier: package metadata only (importlib.metadata in a probe: nothing is imported, so no CUDA
library is loaded). A wheel component's version carries its git SHA as the local label
(TE: ``2.10.0.dev0+d2945c6``; DeepEP: ``1.2.1+3f601f7``); a release wheel from PyPI has none.
A source-tree component (Megatron-LM) records its commit in a file the assemble layer writes
(``<path>/.buildctl-commit``), or, failing that, in the tree's own ``.git``.
GPU tier: components that name an import ``module`` are imported and their ``__version__`` compared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from smoke.checks import (
    Context,
    base_version_equal,
    canon,
    import_failure,
    no_gpu,
    sha_matches,
    sha_of_local,
    split_version,
)
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed, skipped

NAME = "versions"
COMMIT_RECORD = ".buildctl-commit"


def installed(ctx: Context) -> tuple[dict[str, list[dict[str, Any]]], CheckResult | None]:
    """canonical name -> installed copies (first on sys.path first), or a failed result."""
    res = ctx.probe("distributions", stub=False)
    if not res.ok:
        return {}, failed(NAME, f"cannot list installed distributions: {res.error_text()}", probe=res.to_json())
    out: dict[str, list[dict[str, Any]]] = {}
    for d in res.data["distributions"]:
        out.setdefault(canon(d["name"]), []).append(d)
    return out, None


def _need(entry: Mapping[str, Any], key: str, where: str) -> str:
    v = entry.get(key)
    if not isinstance(v, str) or not v:
        raise SectionError(f"checks.versions.{where}: '{key}' must be a non-empty string, got {v!r}")
    return v


def check_wheel(entry: Mapping[str, Any], dists: dict[str, list[dict[str, Any]]], where: str) -> dict[str, Any]:
    name = _need(entry, "name", where)
    dist = _need(entry, "dist", where)
    copies = dists.get(canon(dist))
    row: dict[str, Any] = {"component": name, "dist": dist, "expected_version": entry.get("version"),
                           "expected_sha": entry.get("sha")}
    if not copies:
        row.update(ok=False, problem=f"distribution {dist!r} is not installed")
        return row
    seen = copies[0]["version"]
    base, local = split_version(seen)
    sha = sha_of_local(local)
    row.update(seen_version=seen, seen_base=base, seen_sha=sha, path=copies[0].get("path"))
    if len(copies) > 1:
        row["also_installed"] = [c["version"] + " at " + str(c.get("path")) for c in copies[1:]]
    problems = []
    want_version = entry.get("version")
    if want_version and not base_version_equal(str(want_version), base):
        problems.append(f"base version {base}, expected {want_version}")
    want_sha = entry.get("sha")
    if want_sha:
        if sha is None:
            problems.append(f"version {seen} carries no +<git sha> (a release build?), expected a build of "
                            f"{str(want_sha)[:12]}")
        elif not sha_matches(sha, str(want_sha)):
            problems.append(f"built from {sha}, expected {str(want_sha)[:12]}")
    row["ok"] = not problems
    if problems:
        row["problem"] = "; ".join(problems)
    return row


def read_commit(ctx: Context, path: str, record: str) -> tuple[str | None, str]:
    """(commit, where it was read) for a source tree: the record file, else .git's HEAD."""
    rec = ctx.path(os.path.join(path, record))
    if os.path.isfile(rec):
        with open(rec, encoding="utf-8") as f:
            words = f.read().split()
        return (words[0] if words else None), os.path.join(path, record)
    head = ctx.path(os.path.join(path, ".git", "HEAD"))
    if os.path.isfile(head):
        with open(head, encoding="utf-8") as f:
            text = f.read().strip()
        if not text.startswith("ref:"):
            return text, os.path.join(path, ".git", "HEAD")
        ref = text.split(None, 1)[1]
        ref_file = ctx.path(os.path.join(path, ".git", ref))
        if os.path.isfile(ref_file):
            with open(ref_file, encoding="utf-8") as f:
                return f.read().strip(), os.path.join(path, ".git", ref)
        packed = ctx.path(os.path.join(path, ".git", "packed-refs"))
        if os.path.isfile(packed):
            with open(packed, encoding="utf-8") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0], os.path.join(path, ".git", "packed-refs")
    return None, f"neither {os.path.join(path, record)} nor {os.path.join(path, '.git', 'HEAD')}"


def check_tree(ctx: Context, entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    name = _need(entry, "name", where)
    path = _need(entry, "path", where)
    want = _need(entry, "sha", where)
    record = str(entry.get("record") or COMMIT_RECORD)
    row: dict[str, Any] = {"component": name, "path": path, "expected_sha": want}
    if not os.path.isdir(ctx.path(path)):
        row.update(ok=False, problem=f"{path} does not exist in the image")
        return row
    seen, source = read_commit(ctx, path, record)
    row.update(seen_sha=seen, read_from=source)
    if seen is None:
        row.update(ok=False, problem=f"no commit recorded for {name}: {source}")
    elif not sha_matches(seen, want):
        row.update(ok=False, problem=f"{name} at {path} is {seen[:12]}, expected {want[:12]}")
    else:
        row["ok"] = True
    return row


def build(ctx: Context, sec: Section) -> CheckResult:
    dist_rows: list[dict[str, Any]] = []
    comp_rows: list[dict[str, Any]] = []
    entries = sec.objects("distributions")
    components = sec.objects("components")
    if not entries and not components:
        return failed(NAME, "expect.json lists no distributions or components for the versions check",
                      fix="the expectation generator should list the lock's pip pins and components")
    dists, err = installed(ctx)
    if err:
        return err
    for i, e in enumerate(entries):
        name = _need(e, "name", f"distributions[{i}]")
        want = _need(e, "version", f"distributions[{i}]")
        copies = dists.get(canon(name))
        if not copies:
            dist_rows.append({"name": name, "expected": want, "ok": False, "problem": f"{name} is not installed"})
            continue
        seen = copies[0]["version"]
        ok = base_version_equal(want, seen)
        row = {"name": name, "expected": want, "seen": seen, "ok": ok}
        if not ok:
            row["problem"] = f"{name} {seen} installed, expected {want}"
        dist_rows.append(row)
    for i, c in enumerate(components):
        where = f"components[{i}]"
        if c.get("dist"):
            comp_rows.append(check_wheel(c, dists, where))
        elif c.get("path"):
            comp_rows.append(check_tree(ctx, c, where))
        else:
            raise SectionError(f"checks.versions.{where}: a component needs 'dist' (a wheel) or 'path' (a source tree)")
    problems = [r["problem"] for r in (*dist_rows, *comp_rows) if not r["ok"]]
    details = {"distributions": dist_rows, "components": comp_rows}
    if problems:
        return failed(NAME, "; ".join(problems), **details)
    return passed(NAME, f"{len(dist_rows)} distribution(s) and {len(comp_rows)} component(s) as locked", **details)


def gpu(ctx: Context, sec: Section) -> CheckResult:
    comps = [c for c in sec.objects("components") if c.get("module")]
    if not comps:
        return skipped(NAME, "no component names an import module: nothing for the GPU tier", deferred="build")
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    rows = []
    for c in comps:
        module = str(c["module"])
        res = ctx.probe("import", {"module": module})
        if not res.ok:
            return import_failure(NAME, ctx, f"import {module}", res)
        seen = res.data.get("version")
        row: dict[str, Any] = {"component": c.get("name"), "module": module, "runtime_version": seen, "ok": True}
        if seen is None:
            row.update(ok=False, problem=f"{module} has no __version__")
        else:
            base, local = split_version(seen)
            sha = sha_of_local(local)
            if c.get("version") and not base_version_equal(str(c["version"]), base):
                row.update(ok=False, problem=f"{module}.__version__ is {seen}, expected base {c['version']}")
            elif c.get("sha") and (sha is None or not sha_matches(sha, str(c["sha"]))):
                row.update(ok=False, problem=f"{module}.__version__ is {seen}, expected a build of {str(c['sha'])[:12]}")
        rows.append(row)
    problems = [r["problem"] for r in rows if not r["ok"]]
    if problems:
        return failed(NAME, "; ".join(problems), runtime=rows)
    return passed(NAME, ", ".join(f"{r['module']} {r['runtime_version']}" for r in rows) + " as imported", runtime=rows)
