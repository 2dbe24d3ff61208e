"""hybridep: what Megatron's hybridep dispatcher needs from the image at run time.

- ``from deep_ep import HybridEPBuffer`` (DeepEP's main branch has no HybridEPBuffer; the hybrid-ep
  branch's deep_ep exports it and needs both compiled extensions, hybrid_ep_cpp linking libcuda);
- Megatron's ``megatron.core.transformer.moe.fused_a2a`` seeing HAVE_HYBRIDEP (it swallows the
  ImportError and only fails when the flex dispatcher is built, deep into a job);
- CUDA_HOME set and ``$CUDA_HOME/bin/nvcc`` present: HybridEP JIT-compiles kernels at run time;
- its JIT cache folder (``<deep_ep>/build/jit`` by default) writable by the user the suite runs as,
  which is the image's runtime user (the runner does not override it).
HybridEPBuffer itself needs a process group of two ranks or more, so no buffer is built here.
"""

from __future__ import annotations

import os
from typing import Any

from smoke.checks import Context, gpu_tier_repeats
from smoke.expect import Section
from smoke.report import CheckResult, failed, passed, skipped

NAME = "hybridep"


def _writable(folder: str) -> tuple[bool, str]:
    """Whether the current user can write ``folder`` (a real path), or create it under its nearest existing parent."""
    path = folder
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    ok = os.access(path, os.W_OK | os.X_OK)
    how = "exists" if path == folder else f"does not exist yet; its parent {path} would hold it"
    return ok, f"{folder} {how}; {'writable' if ok else 'NOT writable'} by uid {os.geteuid()}"


def _static(ctx: Context, sec: Section, deep_ep_dir: str | None) -> tuple[list[str], dict[str, Any]]:
    problems: list[str] = []
    details: dict[str, Any] = {}
    cuda_home = ctx.env.get("CUDA_HOME")
    details["CUDA_HOME"] = cuda_home
    if not cuda_home:
        problems.append("CUDA_HOME is not set (HybridEP compiles kernels with $CUDA_HOME/bin/nvcc at run time)")
    else:
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        present = os.path.isfile(ctx.path(nvcc)) and os.access(ctx.path(nvcc), os.X_OK)
        details["nvcc"] = {"path": nvcc, "present": present}
        if not present:
            problems.append(f"{nvcc} is missing or not executable (HybridEP JIT-compiles with it)")
    # jit_dir from expect.json is a path in the image (under ctx.root); deep_ep's folder was found by a probe
    named = sec.str_opt("jit_dir")
    jit = ctx.path(named) if named else (os.path.join(deep_ep_dir, "build", "jit") if deep_ep_dir else None)
    if jit is None:
        problems.append("deep_ep is not installed, so there is no JIT cache folder to check")
    else:
        ok, how = _writable(jit)
        details["jit_dir"] = {"path": jit, "writable": ok, "how": how, "uid": os.geteuid()}
        if not ok:
            problems.append(f"HybridEP's JIT cache folder {how}")
    return problems, details


def _run(ctx: Context, sec: Section) -> CheckResult:
    want_megatron = sec.bool("megatron", True)
    located = ctx.probe("locate", {"names": ["deep_ep"]}, stub=False)
    where = located.data.get("modules", {}).get("deep_ep") if located.ok else None
    deep_ep_dir = where["path"] if where and where.get("kind") == "package" else None
    problems, details = _static(ctx, sec, deep_ep_dir)
    res = ctx.probe("hybridep", {"megatron": want_megatron})
    buf = res.data.get("hybridep_buffer") or {"ok": False, "error": res.error}
    details.update(deep_ep_file=res.data.get("deep_ep_file"), deep_ep_version=res.data.get("deep_ep_version"),
                   probe=res.to_json(), driver=ctx.driver.to_json())
    deferred: list[str] = []
    parts = [("from deep_ep import HybridEPBuffer", buf)]
    if want_megatron:
        parts.append(("megatron.core.transformer.moe.fused_a2a HAVE_HYBRIDEP",
                      res.data.get("megatron") or {"ok": False, "error": res.error}))
    for what, part in parts:
        details[what] = part
        if part.get("ok"):
            continue
        err = part.get("error") or {}
        if ctx.tier == "build" and err.get("needs_device") and not ctx.driver.device:
            deferred.append(f"{what}: {err.get('text')}")
        elif err:
            problems.append(f"{what}: {err.get('text')}")
        else:
            problems.append(f"{what}: HAVE_HYBRIDEP is {part.get('HAVE_HYBRIDEP')!r} (fused_a2a could not import HybridEPBuffer)")
    if problems:
        return failed(NAME, "; ".join(problems), **details)
    if deferred:
        return skipped(NAME, "needs a GPU device or a real CUDA driver, so it belongs to the GPU tier: "
                       + "; ".join(deferred) + " (nvcc and the JIT folder are fine)", deferred="gpu", **details)
    return passed(NAME, "HybridEPBuffer imports" + (", Megatron sees HAVE_HYBRIDEP" if want_megatron else "")
                  + f", nvcc at {details.get('nvcc', {}).get('path')}, JIT folder writable", **details)


build = _run
gpu = gpu_tier_repeats(NAME, _run)
