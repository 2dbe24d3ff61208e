"""requirements: our layers broke no distribution's requirements (build tier).

The image's own ``python -m pip check`` is compared with the same run on the base, which buildctl's
first layer recorded in the image before changing anything (``baseline``, a file). A problem is a pair
(distribution, requirement it names): one the base already had is NGC's (reported, not failed); one
the base did not have is ours, and fails the check, whatever versions the lines mention.
"""

from __future__ import annotations

import re
from typing import Any

from smoke.checks import Context, canon
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed

NAME = "requirements"
# pip's two kinds of line (pip/_internal/commands/check.py):
#   "{name} {version} requires {req}, which is not installed."
#   "{name} {version} has requirement {req}, but you have {dep} {version}."
_MISSING = re.compile(r"^(\S+) (\S+) requires ([A-Za-z0-9][A-Za-z0-9._-]*)[^,]*, which is not installed\.?$")
_CONFLICT = re.compile(r"^(\S+) (\S+) has requirement ([A-Za-z0-9][A-Za-z0-9._-]*)(.*?), but you have (\S+) (\S+)\.?$")


def problems(text: str) -> dict[tuple[str, str], str]:
    """(distribution, required name) -> pip's line, for every broken requirement pip check reported."""
    out: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        line = line.strip()
        m = _MISSING.match(line) or _CONFLICT.match(line)
        if m:
            out[(canon(m.group(1)), canon(m.group(3)))] = line
    return out


def _unparsed(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("No broken requirements")
            and not (_MISSING.match(ln.strip()) or _CONFLICT.match(ln.strip()))]


def build(ctx: Context, sec: Section) -> CheckResult:
    baseline_file = sec.str_opt("baseline")
    if not baseline_file:
        raise SectionError("checks.requirements.baseline: the file holding the base's `pip check` output")
    res = ctx.probe("pip_check", {"baseline": ctx.path(baseline_file)}, stub=False)
    if not res.ok:
        return failed(NAME, f"pip check could not run: {res.error_text()}")
    output = str(res.data.get("output", ""))
    base_text = res.data.get("baseline")
    if base_text is None:
        return failed(NAME, f"the base's pip check record {baseline_file} is not in the image",
                      fix="the image was not built by this buildctl's system node, which records it first")
    odd = _unparsed(output)
    if res.data.get("returncode") not in (0, 1) or odd:
        return failed(NAME, "pip check failed or said something this check cannot read: " + "; ".join(odd[:5]),
                      output=output[-4000:])
    now, base = problems(output), problems(str(base_text))
    ours = {k: v for k, v in now.items() if k not in base}
    inherited = {k: v for k, v in now.items() if k in base}
    details: dict[str, Any] = {"broken_by_our_layers": sorted(ours.values()), "inherited_from_base": sorted(inherited.values()),
                               "fixed": sorted(v for k, v in base.items() if k not in now), "baseline": baseline_file}
    if ours:
        return failed(NAME, f"{len(ours)} requirement(s) broken by the stack's layers: " + "; ".join(sorted(ours.values())),
                      fix="lock the missing requirement with the rest of pip (pip.requirements, or the component's "
                          "install.requires), or declare it install.provided when the base provides it", **details)
    summary = "no requirement broken by the stack's layers"
    if inherited:
        summary += f" ({len(inherited)} inherited from the base, as the base ships them)"
    return passed(NAME, summary, **details)
