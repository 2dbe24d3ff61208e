"""fp8: the FP8 recipe the launch uses is there, and on the GPU tier, TE can run it on this GPU.

The section comes from the baked Megatron arguments: ``format`` is ``--fp8-format`` (e4m3 or hybrid;
absent: the launch trains without FP8), ``recipe`` is ``--fp8-recipe`` (Megatron's default:
delayed). Megatron builds the TE recipe class from it (megatron/core/fp8_utils.py): delayed ->
DelayedScaling, tensorwise -> Float8CurrentScaling, blockwise -> Float8BlockScaling, mxfp8 ->
MXFP8BlockScaling.

Build tier: that class, and ``Format.<FORMAT>``, import from transformer_engine.common.recipe.
GPU tier: TE is asked whether the recipe runs on this GPU (is_fp8_available,
is_fp8_block_scaling_available or is_mxfp8_available with return_reason, or the check_*_support
functions of older TEs), and TE's answer for the other families is reported beside it. Where it
runs, a tiny te.Linear forward and backward under the recipe. Where it does not, the result is
``unsupported`` with TE's reason when this GPU is not one the variant targets (``archs``), and
``fail`` when it is: the launch would stop on its own hardware.
"""

from __future__ import annotations

from typing import Any

from smoke.checks import Context, import_failure, no_gpu
from smoke.expect import Section, SectionError
from smoke.probes import FP8_RECIPES
from smoke.report import CheckResult, failed, passed, unsupported

NAME = "fp8"
RECIPE_MODULE = "transformer_engine.common.recipe"
FORMATS = ("e4m3", "hybrid")


def _launch(sec: Section) -> tuple[str | None, str, str]:
    """(format or None, recipe, where it came from), validated."""
    fmt = sec.str_opt("format")
    recipe = sec.str_opt("recipe") or "delayed"
    if fmt is not None and fmt not in FORMATS:
        raise SectionError(f"checks.fp8.format: expected one of {', '.join(FORMATS)} (Megatron's --fp8-format), "
                           f"got {fmt!r}")
    if recipe not in FP8_RECIPES:
        raise SectionError(f"checks.fp8.recipe: expected one of {', '.join(FP8_RECIPES)} (Megatron's --fp8-recipe), "
                           f"got {recipe!r}")
    source = sec.str_opt("source") or "the launch"
    return fmt, recipe, source


def _no_fp8(source: str) -> CheckResult:
    return passed(NAME, f"{source} trains without FP8 (no --fp8-format): nothing to check", recipe=None)


def build(ctx: Context, sec: Section) -> CheckResult:
    fmt, recipe, source = _launch(sec)
    if fmt is None:
        return _no_fp8(source)
    cls = FP8_RECIPES[recipe][0]
    details: dict[str, Any] = {"recipe": recipe, "format": fmt, "class": f"{RECIPE_MODULE}.{cls}"}
    res = ctx.probe("import", {"module": RECIPE_MODULE, "attr": cls})
    if not res.ok:
        return import_failure(NAME, ctx, f"from {RECIPE_MODULE} import {cls} (--fp8-recipe {recipe})", res,
                              driver=ctx.driver.to_json(), **details)
    fmt_res = ctx.probe("import", {"module": RECIPE_MODULE, "attr": "Format"})
    if not fmt_res.ok:
        return import_failure(NAME, ctx, f"from {RECIPE_MODULE} import Format", fmt_res, **details)
    te_version = res.data.get("package_version")
    return passed(NAME, f"{source} uses --fp8-recipe {recipe} --fp8-format {fmt}: {RECIPE_MODULE}.{cls} imports "
                  f"(TE {te_version or '?'})", te_version=te_version, file=res.data.get("file"), **details)


def _capability_number(capability: str) -> int | None:
    major, _, minor = capability.partition(".")
    return int(major) * 10 + int(minor) if major.isdigit() and minor.isdigit() else None


def _targets(archs: tuple[str, ...], capability: str) -> bool | None:
    """Whether this GPU is one of the variant's archs ('9.0', '10.0'); None when the section names none."""
    if not archs:
        return None
    seen = _capability_number(capability)
    wanted = {_capability_number(a.lower().removeprefix("sm_").rstrip("a")) for a in archs}
    return seen in wanted


def gpu(ctx: Context, sec: Section) -> CheckResult:
    fmt, recipe, source = _launch(sec)
    if fmt is None:
        return _no_fp8(source)
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    cls = FP8_RECIPES[recipe][0]
    archs = sec.strs("archs")
    res = ctx.probe("fp8_support", {"recipe": recipe})
    if not res.ok:
        return import_failure(NAME, ctx, f"asking Transformer Engine whether {cls} runs here", res,
                              tried=res.data.get("tried", []))
    gpu_info = res.data.get("gpu", {})
    capability = str(gpu_info.get("capability", "?"))
    where = f"{gpu_info.get('name', 'GPU')} (compute capability {capability})"
    support = {"recipe": recipe, "format": fmt, "class": f"{RECIPE_MODULE}.{cls}", "api": res.data["api"],
               "supported": res.data["supported"], "reason": res.data["reason"],
               "tried_before": res.data.get("tried", []), "families": res.data.get("families", {}),
               "gpu": gpu_info, "archs": list(archs)}
    launch = f"{source} uses --fp8-recipe {recipe} ({cls})"
    if not res.data["supported"]:
        reason = res.data["reason"] or "TE gave no reason"
        if _targets(archs, capability):
            return failed(NAME, f"{launch}, which TE says does not run on {where}, a GPU this variant targets: {reason}",
                          support=support)
        targets = f"; the variant targets {', '.join(archs)}" if archs else ""
        return unsupported(NAME, f"{launch}, which TE says does not run on {where}{targets}: {reason}",
                           support=support)
    run = ctx.probe("mxfp8_linear", {"recipe": cls, "format": fmt, "in": 256, "out": 256, "tokens": 128})
    if not run.ok:
        err = run.error_text() or ("non-finite output or missing gradients" if run.data.get("autocast") else "no answer")
        return failed(NAME, f"{launch}; TE says it runs on {where}, but te.Linear under it failed at "
                      f"{run.data.get('stage', '?')}: {err}", support=support, run=run.data, probe=run.to_json())
    return passed(NAME, f"{launch}: {res.data['api']} is True on {where}, and te.Linear forward+backward ran under "
                  f"{run.data['autocast']}", support=support, run=run.data)
