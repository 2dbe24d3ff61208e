"""mxfp8: the MXFP8 recipe is there, and where the GPU supports it, a te.Linear runs under it.

Build tier: ``transformer_engine.common.recipe.MXFP8BlockScaling`` imports (driver stub as for imports).
GPU tier: support asked through whichever API the installed TE has (see smoke.probes.MXFP8_APIS); on a
GPU without MXFP8 (Hopper: compute capability 9.0) the result is ``unsupported`` with TE's own reason,
which is the right answer there, not a failure. Where supported, a tiny te.Linear forward and backward
under that TE version's autocast with the MXFP8BlockScaling recipe.
"""

from __future__ import annotations

from smoke.checks import Context, import_failure, no_gpu
from smoke.expect import Section
from smoke.report import CheckResult, failed, passed, unsupported

NAME = "mxfp8"
RECIPE_MODULE = "transformer_engine.common.recipe"
RECIPE = "MXFP8BlockScaling"


def build(ctx: Context, sec: Section) -> CheckResult:
    res = ctx.probe("import", {"module": RECIPE_MODULE, "attr": RECIPE})
    if not res.ok:
        return import_failure(NAME, ctx, f"from {RECIPE_MODULE} import {RECIPE}", res, driver=ctx.driver.to_json())
    te_version = res.data.get("package_version")
    return passed(NAME, f"{RECIPE_MODULE}.{RECIPE} imports (TE {te_version or '?'})",
                  file=res.data.get("file"), te_version=te_version, probe=res.to_json(),
                  driver=ctx.driver.to_json())


def gpu(ctx: Context, sec: Section) -> CheckResult:
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    res = ctx.probe("mxfp8_support")
    if not res.ok:
        return import_failure(NAME, ctx, "asking Transformer Engine for MXFP8 support", res,
                              tried=res.data.get("tried", []))
    gpu_info = res.data.get("gpu", {})
    where = f"{gpu_info.get('name', 'GPU')} (compute capability {gpu_info.get('capability', '?')})"
    support = {"api": res.data["api"], "supported": res.data["supported"], "reason": res.data["reason"],
               "tried_before": res.data.get("tried", []), "gpu": gpu_info}
    if not res.data["supported"]:
        return unsupported(NAME, f"MXFP8 is not supported on {where}: {res.data['reason']}", support=support)
    run = ctx.probe("mxfp8_linear", {"in": 128, "out": 128, "tokens": 32})
    if not run.ok:
        err = run.error_text() or ("non-finite output or missing gradients" if run.data.get("autocast") else "no answer")
        return failed(NAME, f"MXFP8 is supported on {where} but te.Linear under it failed at "
                      f"{run.data.get('stage', '?')}: {err}", support=support, run=run.data, probe=run.to_json())
    return passed(NAME, f"MXFP8 te.Linear forward+backward ran on {where} under {run.data['autocast']}",
                  support=support, run=run.data)

