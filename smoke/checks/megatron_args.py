"""megatron-args: the baked launch arguments parse, and validate, with the pinned Megatron-LM's own code.

Two steps, both in the image's own Python:

1. ``megatron.training.arguments.parse_args`` with sys.argv set to the entrypoint's script and
   arguments (site paths already expanded to their defaults). argparse reports a wrong flag by printing
   "prog: error: ..." and exiting; that line is the result.
2. per launch profile (``profiles`` in expect.json: its arguments, world size and GPUs per node),
   ``validate_args`` and the TransformerConfig Megatron builds from the arguments, with the environment
   torchrun gives rank 0 of that world. What static rules (buildctl lint-args) miss shows up here,
   before the entrypoint is baked. On the build tier there is no GPU: the device queries validate_args
   makes are answered from the variant's ``gpu_archs`` and the report lists each answer; the GPU tier
   runs it with the real device. A profile marked as an upstream defect is expected to fail: its
   failure is reported, not counted.

Megatron imports torch and TE on the way: an import that needs a device is deferred to the GPU tier,
where it runs again with the real driver.
"""

from __future__ import annotations

from typing import Any

from smoke.checks import Context, gpu_tier_repeats, import_failure
from smoke.expect import Section
from smoke.report import CheckResult, failed, passed

NAME = "megatron-args"


def _capability(ctx: Context, archs: tuple[str, ...]) -> list[int] | None:
    """The compute capability to answer with on the build tier (None on the GPU tier: the device answers)."""
    if ctx.tier == "gpu" or not archs:
        return None
    major, _, minor = archs[0].partition(".")
    return [int(major), int(minor or "0")] if major.isdigit() and (minor or "0").isdigit() else None


def _validate(ctx: Context, sec: Section, argv0: str, module: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per profile; and the profiles (not upstream defects) that failed."""
    archs = sec.strs("gpu_archs")
    cap = _capability(ctx, archs)
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for prof in sec.objects("profiles"):
        name = str(prof.get("name", ""))
        defect = str(prof.get("upstream_defect") or "")
        res = ctx.probe("megatron_validate", {
            "args": [str(a) for a in prof.get("args", [])], "argv0": argv0, "module": module,
            "world_size": int(prof.get("world_size", 1)), "gpus_per_node": int(prof.get("gpus_per_node", 0) or 0),
            "answer_capability": cap})
        row: dict[str, Any] = {"profile": name, "world_size": prof.get("world_size"), "ok": res.ok,
                               "stage": res.data.get("stage"), "answered": res.data.get("answered", [])}
        if cap is not None:
            row["answered_from"] = f"gpu_archs {archs[0]} (build tier: no GPU)"
        if res.ok:
            row["derived"] = res.data.get("derived", {})
        else:
            err = res.data.get("error") or {}
            row["error"] = res.data.get("argparse_error") or err.get("text") or res.error or "failed"
            row["needs_device"] = bool(err.get("needs_device"))
            if defect:
                row["expected"] = f"upstream defect: {defect}"
            elif not (row["needs_device"] and ctx.tier == "build"):
                bad.append(name)
        rows.append(row)
    return rows, bad


def launch(sec: Section) -> tuple[tuple[str, ...], str, str]:
    """The section's baked arguments, script (argv0) and parser module, with their defaults."""
    return (sec.strs("args"), sec.str_opt("argv0") or "pretrain_gpt.py",
            sec.str_opt("module") or "megatron.training.arguments")


def _run(ctx: Context, sec: Section) -> CheckResult:
    args, argv0, module = launch(sec)
    res = ctx.probe("megatron_args", {"args": list(args), "argv0": argv0, "module": module})
    details = {"argv0": argv0, "arguments": len(args), "module": module, "probe": res.to_json()}
    if not res.ok:
        if res.data.get("argparse_error"):
            return failed(NAME, f"Megatron's parser rejects the baked arguments: {res.data['argparse_error']}",
                          stderr=res.data.get("stderr", []), **details)
        return import_failure(NAME, ctx, f"importing {module} ({res.data.get('stage', '')})", res, **details)
    rows, bad = _validate(ctx, sec, argv0, module)
    details["validate"] = rows
    parsed = f"{len(args)} baked argument(s) parse with {res.data['parser']}"
    if bad:
        first = next(r for r in rows if r["profile"] == bad[0])
        return failed(NAME, f"{parsed}, but Megatron's validate_args refuses profile(s) {', '.join(bad)}: "
                            f"{first.get('error')}", **details)
    checked = [r for r in rows if r["ok"]]
    summary = parsed
    if rows:
        summary += f"; validate_args passes for {len(checked)} of {len(rows)} profile(s)"
        deferred = [r["profile"] for r in rows if not r["ok"] and r.get("needs_device") and not r.get("expected")]
        if deferred:
            summary += f" ({', '.join(deferred)} need a device: GPU tier)"
        expected = [r["profile"] for r in rows if r.get("expected") and not r["ok"]]
        if expected:
            summary += f"; refused as expected (upstream defect): {', '.join(expected)}"
    return passed(NAME, summary, namespace_size=res.data.get("namespace_size"),
                  attention_backend=res.data.get("attention_backend"), **details)


build = _run
gpu = gpu_tier_repeats(NAME, _run)
