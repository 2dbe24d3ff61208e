"""cudnn: the installed cuDNN against the pin (9.14 for the DeepSeek-V3 stack).

Build tier: read without loading anything: the apt package's version from dpkg's status file, the
cudnn_version.h header, a pip nvidia-cudnn-* wheel. NGC's CUDNN_VERSION variable describes the base
image (before our layers), so it is shown but never trusted.
GPU tier: the cuDNN that torch loaded (torch.backends.cudnn.version()) and the one TE reports
(transformer_engine.pytorch.utils.get_cudnn_version()).
"""

from __future__ import annotations

import os
import re
from typing import Any

from smoke.checks import Context, dotted_prefix, import_failure, no_gpu
from smoke.checks.versions import installed
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed

NAME = "cudnn"
DPKG_STATUS = "/var/lib/dpkg/status"
HEADER_DIRS = ("/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu",
               "/usr/local/cuda/include")
HEADER_NAMES = ("cudnn_version.h", "cudnn_version_v9.h", "cudnn_version_v8.h")
_DEFINE_RE = re.compile(r"^#define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)", re.M)


def dpkg_packages(ctx: Context) -> dict[str, str]:
    """Installed apt packages whose name starts with libcudnn -> version."""
    path = ctx.path(DPKG_STATUS)
    if not os.path.isfile(path):
        return {}
    out: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for stanza in f.read().split("\n\n"):
            fields = dict(
                (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in stanza.splitlines() if ":" in ln and not ln.startswith(" "))
            )
            name = fields.get("Package", "")
            if name.startswith("libcudnn") and "installed" in fields.get("Status", "").split():
                out[name] = fields.get("Version", "")
    return out


def headers(ctx: Context) -> list[dict[str, str]]:
    dirs = list(HEADER_DIRS)
    cuda_home = ctx.env.get("CUDA_HOME")
    if cuda_home:
        dirs.append(os.path.join(cuda_home, "include"))
    found = []
    for d in dict.fromkeys(dirs):
        for n in HEADER_NAMES:
            p = ctx.path(os.path.join(d, n))
            if os.path.isfile(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    parts = dict(_DEFINE_RE.findall(f.read()))
                if {"MAJOR", "MINOR", "PATCHLEVEL"} <= parts.keys():
                    found.append({"path": os.path.join(d, n),
                                  "version": f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCHLEVEL']}"})
    return found


def build(ctx: Context, sec: Section) -> CheckResult:
    pin = sec.str_opt("version")
    if not pin:
        raise SectionError("checks.cudnn.version: the pinned cuDNN version is required (e.g. '9.14.0.64')")
    package = sec.str_opt("package")
    apt_version = sec.str_opt("apt_version")
    apt = dpkg_packages(ctx)
    hdrs = headers(ctx)
    dists, err = installed(ctx)
    wheels = [{"name": c["name"], "version": c["version"]} for n, cs in dists.items()
              if n.startswith("nvidia-cudnn") for c in cs[:1]]
    seen: dict[str, Any] = {"apt": apt, "headers": hdrs, "wheels": wheels,
                            "env_CUDNN_VERSION (base image)": ctx.env.get("CUDNN_VERSION")}
    if err:
        seen["wheels_error"] = err.summary
    details: dict[str, Any] = {"expected": {"version": pin, "package": package, "apt_version": apt_version},
                               "seen": seen}
    if package:
        have = apt.get(package)
        if have is None:
            others = ", ".join(f"{k} {v}" for k, v in apt.items()) or "none"
            return failed(NAME, f"apt package {package} is not installed (libcudnn packages installed: {others})",
                          **details)
        upstream = have.split(":")[-1].split("-")[0]
        if apt_version and have != apt_version:
            return failed(NAME, f"{package} is {have}, expected apt version {apt_version}", **details)
        if not dotted_prefix(pin, upstream):
            return failed(NAME, f"{package} {have} is cuDNN {upstream}, expected {pin}", **details)
        chosen = f"{package} {have}"
    else:
        candidates = [(h["version"], h["path"]) for h in hdrs] + [(w["version"], w["name"]) for w in wheels]
        if not candidates:
            return failed(NAME, "no cuDNN found: no libcudnn apt package, no cudnn_version.h, no nvidia-cudnn wheel",
                          **details)
        version, where = candidates[0]
        if not dotted_prefix(pin, version) and not dotted_prefix(version, pin):
            return failed(NAME, f"cuDNN {version} ({where}), expected {pin}", **details)
        chosen = f"{version} ({where})"
    stray = [f"{h['path']} {h['version']}" for h in hdrs
             if not (dotted_prefix(pin, h["version"]) or dotted_prefix(h["version"], pin))]
    stray += [f"{w['name']} {w['version']}" for w in wheels if not dotted_prefix(pin, w["version"])]
    if stray:
        details["note"] = ("other cuDNN copies are installed; which one torch loads is what the GPU tier shows: "
                           + ", ".join(stray))
    return passed(NAME, f"cuDNN {chosen} matches the pin {pin}", **details)


def gpu(ctx: Context, sec: Section) -> CheckResult:
    pin = sec.str_opt("version")
    if not pin:
        raise SectionError("checks.cudnn.version: the pinned cuDNN version is required (e.g. '9.14.0.64')")
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    want_te = sec.bool("te", True)
    res = ctx.probe("runtime", {"te": want_te})
    if not res.ok:
        return import_failure(NAME, ctx, "asking torch and Transformer Engine for their cuDNN", res)
    # The runtime reports major.minor.patch: compare that much of the pin.
    want = ".".join(pin.split(".")[:3])
    seen = {"torch": res.data.get("torch_cudnn"), "transformer_engine": res.data.get("te_cudnn")}
    details = {"expected": pin, "seen": seen, "torch": res.data.get("torch"), "te_version": res.data.get("te_version")}
    bad = [f"{who} loaded cuDNN {v}" for who, v in seen.items() if v is not None and not dotted_prefix(want, v)]
    if seen["torch"] is None:
        bad.append("torch reports no cuDNN")
    if bad:
        return failed(NAME, "; ".join(bad) + f", expected {pin}", **details)
    return passed(NAME, "cuDNN " + ", ".join(f"{v} ({k})" for k, v in seen.items() if v) + f" matches the pin {pin}",
                  **details)

