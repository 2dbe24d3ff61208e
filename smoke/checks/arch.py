"""arch: compiled extensions carry machine code (SASS) for the variant's GPU architectures.

DeepEP's hybrid_ep_cpp defaults TORCH_CUDA_ARCH_LIST to 10.0 when it is unset, so an H100/H200 image
built without setting it gets a Blackwell-only extension that fails at its first kernel launch. This
lists the cubins (``cuobjdump --list-elf``) and PTX (``--list-ptx``) of every shared object of the
named modules, found on sys.path without importing them, and of the named distributions together
with the distributions they are split into (PyPI's TE: transformer_engine_cu13 holds the core
library, transformer_engine_torch the extension; see smoke.probes.probe_dist_files). PTX for an older architecture can be
JIT-compiled at load time, which is reported but not counted as coverage. Build tier only; skipped,
saying why, when the image has no cuobjdump.
"""

from __future__ import annotations

import os
import re
from typing import Any

from smoke.checks import Context
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed, skipped

NAME = "arch"
_ARCH_RE = re.compile(r"^(\d+)\.(\d+)([a-z]?)$")
_SM_RE = re.compile(r"\bsm_(\d+)([a-z]?)\b")
NO_DEVICE_CODE = "does not contain device code"


def sm_number(arch: str) -> int:
    """'9.0' -> 90, '10.0' -> 100, '12.0a' -> 120; also accepts 'sm_90' and '90'."""
    a = arch.strip().lower().removeprefix("sm_")
    m = _ARCH_RE.match(a)
    if m:
        return int(m.group(1)) * 10 + int(m.group(2))
    digits = re.match(r"^(\d+)[a-z]?$", a)
    if digits:
        return int(digits.group(1))
    raise SectionError(f"checks.arch.archs: cannot read GPU architecture {arch!r} (write it as '9.0' or '10.0')")


def listed(text: str) -> list[str]:
    return sorted({f"sm_{m.group(1)}{m.group(2)}" for m in _SM_RE.finditer(text)})


def shared_objects(path: str, kind: str) -> list[str]:
    """The shared objects of a located module (real paths, as the locate probe found them)."""
    if kind != "package":
        return [path]
    out: list[str] = []
    for d, _dirs, files in os.walk(path):
        out.extend(os.path.join(d, f) for f in files if f.endswith(".so") or ".so." in f)
    return sorted(out)


def _sources(ctx: Context, modules: tuple[str, ...], dists: tuple[str, ...]) -> tuple[dict[str, list[str]], list[str]]:
    """label -> shared objects to read, and problems (a module or distribution that is not installed)."""
    out: dict[str, list[str]] = {}
    problems: list[str] = []
    if modules:
        located = ctx.probe("locate", {"names": list(modules)}, stub=False)
        if not located.ok:
            return out, [f"cannot locate {', '.join(modules)}: {located.error_text()}"]
        for module in modules:
            where = located.data["modules"].get(module)
            if where is None:
                problems.append(f"{module} is not installed")
            else:
                out[f"{module} ({where['path']})"] = shared_objects(where["path"], where["kind"])
    if dists:
        res = ctx.probe("dist_files", {"names": list(dists)}, stub=False)
        if not res.ok:
            return out, [*problems, f"cannot list the files of {', '.join(dists)}: {res.error_text()}"]
        for dist in dists:
            info = res.data["dists"].get(dist)
            if info is None:
                problems.append(f"distribution {dist} is not installed")
                continue
            parts = info.get("parts") or []
            with_parts = (" with " + ", ".join(f"{p['dist']} {p['version']}" for p in parts)) if parts else ""
            out[f"distribution {dist} {info['version']}{with_parts}"] = list(info["files"])
    return out, problems


def build(ctx: Context, sec: Section) -> CheckResult:
    archs = sec.strs("archs")
    modules = sec.strs("modules")
    dists = sec.strs("dists")
    if not archs or not (modules or dists):
        raise SectionError("checks.arch: 'archs' (the variant's GPU archs) and 'dists' or 'modules' "
                           "(what holds the compiled code) are required")
    wanted = {a: sm_number(a) for a in archs}
    names = ", ".join((*dists, *modules))
    extra = [d for d in (os.path.join(ctx.env.get("CUDA_HOME", ""), "bin") if ctx.env.get("CUDA_HOME") else "",
                         "/usr/local/cuda/bin") if d]
    tool = sec.str_opt("cuobjdump") or ctx.tools.which("cuobjdump", extra)
    if tool is None:
        return skipped(NAME, "the image has no cuobjdump (looked in $CUDA_HOME/bin, /usr/local/cuda/bin and PATH), "
                       f"so the arch coverage of {names} cannot be read",
                       fix="keep cuda-cuobjdump in the image, or drop 'arch' from smoke.required")
    sources, problems = _sources(ctx, modules, dists)
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    for label, files in sources.items():
        files_with_code = 0
        for so in files:
            elf = ctx.tools.run([tool, "--list-elf", so], timeout=300)
            ptx = ctx.tools.run([tool, "--list-ptx", so], timeout=300)
            text = elf.stdout + elf.stderr
            if NO_DEVICE_CODE in text or (elf.exit_code == 0 and not listed(elf.stdout) and not listed(ptx.stdout)):
                continue
            if elf.exit_code != 0:
                problems.append(f"cuobjdump failed on {so}: {text.strip().splitlines()[-1] if text.strip() else elf.exit_code}")
                continue
            files_with_code += 1
            sass, ptxs = listed(elf.stdout), listed(ptx.stdout)
            have = {int(re.sub(r"\D", "", s)) for s in sass}
            have_ptx = {int(re.sub(r"\D", "", s)) for s in ptxs}
            missing = [a for a, n in wanted.items() if n not in have]
            rows.append({"of": label, "file": so, "sass": sass, "ptx": ptxs, "missing": missing})
            for a in missing:
                jit = [p for p in have_ptx if p <= wanted[a]]
                if jit:
                    notes.append(f"{so}: no sm_{wanted[a]} SASS, only PTX sm_{max(jit)} (JIT-compiled at load)")
                problems.append(f"{so} has no code for {a} (sm_{wanted[a]}); it has {', '.join(sass) or 'no SASS'}")
        if files_with_code == 0:
            problems.append(f"{label} has no shared object with GPU code")
    details: dict[str, Any] = {"archs": list(archs), "cuobjdump": tool, "files": rows, "notes": notes}
    if problems:
        return failed(NAME, "; ".join(problems), **details)
    return passed(NAME, f"{len(rows)} shared object(s) of {names} carry SASS for "
                  + ", ".join(f"sm_{n}" for n in wanted.values()), **details)
