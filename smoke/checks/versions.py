"""versions: installed distributions and component builds against the lock.

Build tier: package metadata only (importlib.metadata in a probe: nothing is imported, so no CUDA
library is loaded). A wheel component's version carries its git SHA as the local label
(TE: ``2.10.0.dev0+d2945c6``; DeepEP: ``1.2.1+3f601f7``); a release wheel from PyPI has none.
A source-tree component (Megatron-LM) records its commit in a file the assemble layer writes
(``<path>/.buildctl-commit``), or, failing that, in the tree's own ``.git``.
GPU tier: components that name an import ``module`` are imported with the real driver, and the
version of the distribution that installed them (its metadata, not ``__version__``: DeepEP has none)
is compared as on the build tier. Every component gets its row, whatever happened to the others.

An expectation made before locking may not know a component's commit (a tree with PRs merged gets
its commit only when prepared): such an entry says ``"unlocked": "<why>"``, and the check then does
not pass (skipped, not deferred) unless something else fails, saying which components are unlocked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from smoke.checks import (
    Context,
    base_version_equal,
    canon,
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


def compare_version(seen: str, entry: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What a component's installed version says against the entry's ``version`` and ``sha``."""
    base, local = split_version(seen)
    sha = sha_of_local(local)
    facts: dict[str, Any] = {"seen_version": seen, "seen_base": base, "seen_sha": sha}
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
    return facts, problems


def _unlocked(entry: Mapping[str, Any], where: str) -> str | None:
    why = entry.get("unlocked")
    if why is None or why is False:
        return None
    if not isinstance(why, str) or not why:
        raise SectionError(f"checks.versions.{where}: 'unlocked' must be a non-empty string saying why, got {why!r}")
    return why


def _finish_row(row: dict[str, Any], problems: list[str], unlocked: str | None) -> dict[str, Any]:
    row["ok"] = not problems and unlocked is None
    if problems:
        row["problem"] = "; ".join(problems)
    if unlocked is not None:
        row["unlocked"] = unlocked
    return row


def check_wheel(entry: Mapping[str, Any], dists: dict[str, list[dict[str, Any]]], where: str) -> dict[str, Any]:
    name = _need(entry, "name", where)
    dist = _need(entry, "dist", where)
    unlocked = _unlocked(entry, where)
    copies = dists.get(canon(dist))
    row: dict[str, Any] = {"component": name, "dist": dist, "expected_version": entry.get("version"),
                           "expected_sha": entry.get("sha")}
    if not copies:
        return _finish_row(row, [f"distribution {dist!r} is not installed"], unlocked)
    seen = copies[0]["version"]
    facts, problems = compare_version(seen, entry)
    row.update(facts, path=copies[0].get("path"))
    if len(copies) > 1:
        row["also_installed"] = [c["version"] + " at " + str(c.get("path")) for c in copies[1:]]
    return _finish_row(row, problems, unlocked)


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
    want = entry.get("sha")  # absent before locking when PRs change the tree: then 'unlocked' says so
    unlocked = _unlocked(entry, where)
    record = str(entry.get("record") or COMMIT_RECORD)
    row: dict[str, Any] = {"component": name, "path": path, "expected_sha": want}
    if not os.path.isdir(ctx.path(path)):
        return _finish_row(row, [f"{path} does not exist in the image"], unlocked)
    seen, source = read_commit(ctx, path, record)
    row.update(seen_sha=seen, read_from=source)
    problems: list[str] = []
    if seen is None:
        problems.append(f"no commit recorded for {name}: {source}")
    elif want is None and unlocked is None:
        # an entry with neither a commit nor a reason is not an expectation buildctl writes
        unlocked = "the expectation names no commit for it"
    elif want is not None and not sha_matches(seen, str(want)):
        problems.append(f"{name} at {path} is {seen[:12]}, expected {str(want)[:12]}")
    return _finish_row(row, problems, unlocked)


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
    details = {"distributions": dist_rows, "components": comp_rows}
    return outcome([*dist_rows, *comp_rows], details,
                   f"{len(dist_rows)} distribution(s) and {len(comp_rows)} component(s) as locked")


def outcome(rows: list[dict[str, Any]], details: dict[str, Any], ok_summary: str) -> CheckResult:
    """fail when a row has a problem; else skipped (not a pass) when a row is unlocked; else pass."""
    problems = [r["problem"] for r in rows if r.get("problem")]
    unlocked = [r for r in rows if r.get("unlocked")]
    also = ("; not checked, unlocked: " + "; ".join(f"{r['component']}: {r['unlocked']}" for r in unlocked)) if unlocked else ""
    if problems:
        return failed(NAME, "; ".join(problems) + also, **details)
    if unlocked:
        return skipped(NAME, "the expectation is unlocked, so what was built cannot be checked against a commit: "
                       + "; ".join(f"{r['component']}: {r['unlocked']}" for r in unlocked)
                       + " (run `buildctl lock`, then rebuild or smoke with the locked expectation)", **details)
    return passed(NAME, ok_summary, **details)


def gpu(ctx: Context, sec: Section) -> CheckResult:
    comps = [c for c in sec.objects("components") if c.get("module")]
    if not comps:
        return skipped(NAME, "no component names an import module: nothing for the GPU tier", deferred="build")
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    rows = [runtime_row(ctx, c, f"components[{i}]") for i, c in enumerate(comps)]
    return outcome(rows, {"runtime": rows},
                   ", ".join(f"{r['module']} imports, {r['dist']} {r.get('seen_version')}" for r in rows)
                   + " as locked (distribution metadata)")


def runtime_row(ctx: Context, c: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One component at the GPU tier: its module imports, and its distribution's version is the locked one."""
    name = _need(c, "name", where)
    module = _need(c, "module", where)
    unlocked = _unlocked(c, where)
    res = ctx.probe("module_dist", {"module": module, "dist": c.get("dist")})
    data = res.data
    row: dict[str, Any] = {"component": name, "module": module, "dist": data.get("dist") or c.get("dist"),
                           "expected_version": c.get("version"), "expected_sha": c.get("sha"),
                           "provided_by": data.get("provided_by"), "file": data.get("file"),
                           "module_version": data.get("module_version")}
    if "file_in_dist" in data:
        row["file_in_dist"] = data["file_in_dist"]
    problems: list[str] = []
    if not res.ok:
        text = res.error_text() or "the probe gave no answer"
        row.update(error=res.error, probe=res.to_json())
        problems.append(f"import {module} failed: {text}")
    seen = data.get("dist_version")
    if seen is None:
        problems.append(f"no installed distribution {row['dist']!r} provides {module}" if row["dist"]
                        else f"no installed distribution provides {module}")
    else:
        facts, more = compare_version(str(seen), c)
        row.update(facts)
        problems.extend(f"{row['dist']} {m}" for m in more)
    if data.get("file_in_dist") is False:
        problems.append(f"{module} was imported from {data.get('file')}, which distribution {row['dist']} "
                        "did not install (another copy shadows it)")
    return _finish_row(row, problems, unlocked)
