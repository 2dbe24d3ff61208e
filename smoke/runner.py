"""Run the checks of one tier and build the report."""

from __future__ import annotations

import os
import platform
import sys
import time
import traceback
from collections.abc import Mapping

from smoke.checks import (
    Check,
    Context,
    Gpu,
    arch,
    attention,
    cudnn,
    fp8,
    hybridep,
    imports,
    megatron_args,
    mxfp8,
    protected,
    requirements,
    train,
    versions,
)
from smoke.driver import Driver
from smoke.expect import Expect, Section, SectionError
from smoke.prober import Prober, Tools
from smoke.report import CheckResult, Report, Tier, failed, skipped
from smoke.suite import DRIVER_FILE, driver_version, suite_hash

CHECKS: dict[str, Check] = {
    "versions": Check(name="versions", build=versions.build, gpu=versions.gpu),
    "cudnn": Check(name="cudnn", build=cudnn.build, gpu=cudnn.gpu),
    "protected": Check(name="protected", build=protected.build, gpu=None),
    "imports": Check(name="imports", build=imports.build, gpu=imports.gpu),
    "mxfp8": Check(name="mxfp8", build=mxfp8.build, gpu=mxfp8.gpu),
    "fp8": Check(name="fp8", build=fp8.build, gpu=fp8.gpu),
    "attention": Check(name="attention", build=attention.build, gpu=attention.gpu),
    "hybridep": Check(name="hybridep", build=hybridep.build, gpu=hybridep.gpu),
    "arch": Check(name="arch", build=arch.build, gpu=None),
    "megatron-args": Check(name="megatron-args", build=megatron_args.build, gpu=megatron_args.gpu),
    "requirements": Check(name="requirements", build=requirements.build, gpu=None),
    "train": Check(name="train", build=None, gpu=train.gpu),
}


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def find_gpu(prober: Prober, driver: Driver) -> Gpu:
    """Whether this run can use a GPU: a device node, and torch seeing it."""
    if not driver.device:
        return Gpu(available=False, reason="no GPU device in this container (run with --gpus on a GPU host)")
    res = prober.probe("gpu", {}, stub=False)
    if not res.ok:
        return Gpu(available=False, reason=f"torch could not be asked: {res.error_text()}", info=res.data)
    if not res.data.get("available"):
        return Gpu(available=False, reason=f"torch.cuda.is_available() is False (torch {res.data.get('torch')}, "
                   f"CUDA {res.data.get('torch_cuda')})", info=res.data)
    return Gpu(available=True, info={k: v for k, v in res.data.items() if k != "ok"})


def run_check(check: Check, ctx: Context) -> CheckResult:
    name = check.name
    fn = check.build if ctx.tier == "build" else check.gpu
    if fn is None:
        other: Tier = "gpu" if ctx.tier == "build" else "build"
        return skipped(name, f"{name} has no {ctx.tier}-tier part: the {other} tier checks it", deferred=other)
    try:
        return fn(ctx, Section(name, ctx.expect.section(name)))
    except SectionError as exc:
        return failed(name, f"expect.json is wrong for this check: {exc}")
    except Exception as exc:  # a bug in a check must not hide the other checks' results
        return failed(name, f"the check itself failed: {type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc().splitlines()[-12:])


def run(expect: Expect, tier: Tier, *, prober: Prober, tools: Tools, driver: Driver,
        env: Mapping[str, str] | None = None, root: str = "/") -> Report:
    started, t0 = now_utc(), time.monotonic()
    gpu = find_gpu(prober, driver) if tier == "gpu" else None
    ctx = Context(expect=expect, tier=tier, prober=prober, tools=tools, driver=driver,
                  env=dict(os.environ if env is None else env), root=root, gpu=gpu)
    results = []
    for name in expect.selected:
        t = time.monotonic()
        r = run_check(CHECKS[name], ctx)
        results.append(CheckResult(name=r.name, status=r.status, summary=r.summary, details=r.details,
                                   deferred=r.deferred, required=name in expect.required,
                                   duration_s=time.monotonic() - t))
    drv = driver.to_json()
    if gpu is not None:
        drv["gpu"] = {"available": gpu.available, "reason": gpu.reason, **gpu.info}
        if gpu.available:
            drv["gpu"]["driver_version"] = driver_version(path=os.path.join(root, DRIVER_FILE.lstrip("/")))
    if expect.gpu_tier == "waived":
        drv["gpu_tier"] = f"waived by the stack: {expect.gpu_waiver}"
    return Report(tier=tier, stack=expect.stack, variant=expect.variant, checks=tuple(results),
                  python={"version": platform.python_version(), "executable": sys.executable},
                  driver=drv, started=started, duration_s=time.monotonic() - t0, suite_hash=suite_hash())
