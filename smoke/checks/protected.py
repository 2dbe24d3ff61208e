"""protected: base-image packages the stack's policy protects (torch, triton, nvidia-*) are unchanged.

The base's versions come from the expectation (``base``: what buildctl read from the base image),
or else from the base's own pip constraint file (NGC writes one: /etc/pip/constraint.txt, named by
PIP_CONSTRAINT), which pins exactly what the base shipped. Build tier only.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any

from smoke.checks import Context, base_version_equal, canon
from smoke.checks.versions import installed
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed, skipped

NAME = "protected"
_PIN_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;#]+)")


def read_constraints(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _PIN_RE.match(line)
            if m:
                out[canon(m.group(1))] = m.group(2)
    return out


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    # canon() leaves '*' and '?' alone, so 'NVIDIA_*' and 'nvidia-*' are one pattern
    return any(fnmatch.fnmatchcase(name, canon(p)) for p in patterns)


def build(ctx: Context, sec: Section) -> CheckResult:
    patterns = sec.strs("patterns")
    if not patterns:
        raise SectionError("checks.protected.patterns: list the protected packages (fnmatch patterns such as 'nvidia-*')")
    replace = {canon(r) for r in sec.strs("replace")}
    base_map = sec.mapping("base")
    source: str
    if base_map is not None:
        base = {canon(k): v for k, v in base_map.items()}
        source = "expect.json (read from the base image)"
    else:
        cfile = sec.str_opt("constraint_file") or ctx.env.get("PIP_CONSTRAINT") or ""
        if not cfile or not os.path.isfile(ctx.path(cfile)):
            return failed(NAME, "no record of the base image's versions: expect.json has no 'base' and the image has "
                          f"no pip constraint file ({cfile or 'PIP_CONSTRAINT unset'})",
                          fix="record the base's package versions in the expectation (buildctl does so from the base image)")
        base = read_constraints(ctx.path(cfile))
        source = f"the base's constraint file {cfile}"
    dists, err = installed(ctx)
    if err:
        return err
    now = {n: cs[0]["version"] for n, cs in dists.items()}
    protected = sorted(n for n in base if _matches(n, patterns))
    changed, removed, replaced, same = [], [], [], []
    for n in protected:
        was, cur = base[n], now.get(n)
        if cur is not None and base_version_equal(was, cur):
            same.append(n)
        elif n in replace:
            replaced.append({"name": n, "base": was, "now": cur or "(removed)"})
        elif cur is None:
            removed.append({"name": n, "base": was})
        else:
            changed.append({"name": n, "base": was, "now": cur})
    added = sorted(n for n in now if _matches(n, patterns) and n not in base)
    details: dict[str, Any] = {"patterns": list(patterns), "base_from": source, "unchanged": same,
                               "changed": changed, "removed": removed, "replaced_on_purpose": replaced,
                               "added": [{"name": n, "now": now[n]} for n in added]}
    if not protected:
        return skipped(NAME, f"no package of the base matches {', '.join(patterns)} ({source})", **details)
    if changed or removed:
        what = [f"{c['name']} {c['base']} -> {c['now']}" for c in changed] + [f"{r['name']} {r['base']} removed" for r in removed]
        return failed(NAME, "protected base packages changed: " + "; ".join(what),
                      fix="find the layer that replaced them (a pip requirement pulling a new version), or list them "
                          "under protect.replace if the stack replaces them on purpose", **details)
    summary = f"{len(same)} protected package(s) unchanged from the base"
    if replaced:
        summary += "; replaced on purpose: " + ", ".join(f"{r['name']} {r['base']} -> {r['now']}" for r in replaced)
    return passed(NAME, summary, **details)
