"""hybridep: what Megatron's hybridep dispatcher needs from the image at run time.

- ``from deep_ep import HybridEPBuffer`` (DeepEP's main branch has no HybridEPBuffer; the hybrid-ep
  branch's deep_ep exports it and needs both compiled extensions, hybrid_ep_cpp linking libcuda);
- Megatron's ``megatron.core.transformer.moe.fused_a2a`` seeing HAVE_HYBRIDEP (it swallows the
  ImportError and only fails when the flex dispatcher is built, deep into a job);
- CUDA_HOME set and ``$CUDA_HOME/bin/nvcc`` present: HybridEP JIT-compiles kernels at run time;
- its JIT cache folder (``<deep_ep>/build/jit`` by default) writable by the user the suite runs as,
  which is the image's runtime user (the runner does not override it).
HybridEPBuffer itself needs a process group of two ranks or more, so the build tier builds no buffer.
On the GPU tier with two GPUs or more, the suite starts two ranks of its own (one process per GPU,
NCCL over localhost, NVLink multicast off: prober.probe_ranks), builds HybridEPBuffer as Megatron's
flex dispatcher does, with the launch's hidden size, top-k and experts per rank (``roundtrip``,
from the baked arguments) scaled down to two ranks (``scaled``), runs one dispatch and one combine
on random tokens and checks combine(dispatch(x)) == x as Megatron's own test of the path does,
reporting the JIT compile time and where the kernels went. With one GPU that part is skipped,
saying why, and the rest decides.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from smoke.checks import Context, gpu_tier_repeats
from smoke.expect import Section, SectionError
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


ROUNDTRIP_RANKS = 2
# Limits of the scaled-down round trip: enough tokens for every expert to receive some, small enough
# to JIT-compile and run in seconds on one GPU each.
MAX_TOKENS = 1024
MAX_HIDDEN = 8192
MAX_EXPERTS_PER_RANK = 8
DEFAULT_ROUNDTRIP_TIMEOUT_S = 600.0


def _int(roundtrip: Mapping[str, Any], key: str) -> int:
    v = roundtrip.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise SectionError(f"checks.hybridep.roundtrip.{key}: expected a positive integer, got {v!r}")
    return v


def scaled(roundtrip: Mapping[str, Any], ranks: int = ROUNDTRIP_RANKS) -> dict[str, Any]:
    """The launch's MoE shape scaled down to ``ranks`` ranks of one GPU each.

    experts per rank = num_experts / expert_model_parallel_size (at most 8), as many experts in all as
    ``ranks`` such ranks hold, top-k kept (at most that many experts), hidden size kept (at most 8192),
    tokens per rank = seq_length * micro_batch_size (at most 1024), SMs as --moe-hybridep-num-sms.
    """
    hidden = _int(roundtrip, "hidden_size")
    experts, ep = _int(roundtrip, "num_experts"), _int(roundtrip, "expert_model_parallel_size")
    topk = _int(roundtrip, "moe_router_topk")
    if experts % ep:
        raise SectionError(f"checks.hybridep.roundtrip: num_experts {experts} is not a multiple of "
                           f"expert_model_parallel_size {ep}")
    per_rank = min(experts // ep, MAX_EXPERTS_PER_RANK)
    tokens = _int(roundtrip, "seq_length") * _int(roundtrip, "micro_batch_size")
    return {"hidden_size": min(hidden, MAX_HIDDEN), "experts_per_rank": per_rank,
            "topk": min(topk, per_rank * ranks), "tokens": min(tokens, MAX_TOKENS),
            "num_sms": _int(roundtrip, "moe_hybridep_num_sms")}


def _roundtrip(ctx: Context, sec: Section) -> tuple[str, dict[str, Any]]:
    """('pass' | 'fail' | 'skipped', details) of the 2-rank round trip."""
    data = sec.data.get("roundtrip")
    if data is None:
        return "skipped", {"why": "expect.json gives no roundtrip shape (the launch's MoE arguments)"}
    if not isinstance(data, dict):
        raise SectionError(f"checks.hybridep.roundtrip: expected an object, got {data!r}")
    timeout = data.get("timeout_s", DEFAULT_ROUNDTRIP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
        raise SectionError(f"checks.hybridep.roundtrip.timeout_s: expected seconds above 0, at most 86400, got {timeout!r}")
    shape = scaled(data)
    gpus = int((ctx.gpu.info.get("count") if ctx.gpu else 0) or 0)
    if gpus < ROUNDTRIP_RANKS:
        name = ctx.gpu.info.get("name", "GPU") if ctx.gpu else "GPU"
        return "skipped", {"why": f"{gpus} GPU ({name}): HybridEPBuffer needs a process group of at least "
                                  f"{ROUNDTRIP_RANKS} ranks, one GPU each, so the dispatch/combine round trip "
                                  "needs a machine with 2 GPUs or more", "scaled": shape}
    results = ctx.prober.probe_ranks("hybridep_roundtrip", {**shape, "timeout_s": float(timeout)},
                                     ranks=ROUNDTRIP_RANKS, timeout=float(timeout))
    ranks = [{**r.data, "probe": r.to_json()} for r in results]
    details: dict[str, Any] = {"scaled": shape, "launch": dict(data), "ranks": ranks}
    problems = []
    for i, r in enumerate(results):
        if not r.ok:
            check = r.data.get("check") or {}
            if check and not check.get("ok"):
                problems.append(f"rank {i}: combine(dispatch(x)) differs from x (max |diff| "
                                f"{check.get('max_abs_diff')}): {' '.join(check.get('message') or [])}")
            else:
                problems.append(f"rank {i} at {r.data.get('stage', '?')}: {r.error_text() or 'no answer'}")
    if problems:
        details["problems"] = problems
        return "fail", details
    first = results[0].data
    details["jit_s"] = max(float(r.data.get("timing", {}).get("jit_s", 0.0)) for r in results)
    details["jit_dir"] = first.get("jit", {}).get("dir")
    details["max_abs_diff"] = max(float(r.data["check"]["max_abs_diff"]) for r in results)
    return "pass", details


def _gpu(ctx: Context, sec: Section) -> CheckResult:
    base = _run(ctx, sec)
    status, rt = _roundtrip(ctx, sec)
    details = {**base.details, "roundtrip": {"status": status, **rt}}
    if status == "fail":
        why = "; ".join(rt["problems"])
        summary = f"2-rank dispatch/combine failed: {why}"
        if base.status == "fail":
            summary = f"{base.summary}; {summary}"
        return failed(NAME, summary, **details)
    if base.status != "pass":
        return CheckResult(name=NAME, status=base.status, summary=base.summary, details=details,
                           deferred=base.deferred)
    if status == "skipped":
        return passed(NAME, f"{base.summary}; the 2-rank dispatch/combine round trip did not run: {rt['why']}",
                      **details)
    s = rt["scaled"]
    return passed(NAME, f"{base.summary}; 2 ranks: HybridEPBuffer(hidden {s['hidden_size']}, {s['experts_per_rank']} "
                  f"experts per rank, top-{s['topk']}, {s['tokens']} tokens per rank), combine(dispatch(x)) == x "
                  f"within bf16 tolerance (max |diff| {rt['max_abs_diff']:.3g}); JIT compile {rt['jit_s']:.1f} s, "
                  f"kernels in {rt['jit_dir']}", **details)


build = _run
gpu = gpu_tier_repeats(NAME, _gpu)
