"""megatron-args: the baked launch arguments parse with the pinned Megatron-LM's own parser.

``megatron.training.arguments.parse_args`` (no validation: that needs a process group) with
sys.argv set to the entrypoint's script and arguments, site paths already expanded to their
defaults. argparse reports a wrong flag by printing "prog: error: ..." and exiting; that line is
the result. Megatron imports torch and TE on the way: an import that needs a device is deferred to
the GPU tier, where it runs again with the real driver.
"""

from __future__ import annotations

from smoke.checks import Context, gpu_tier_repeats, import_failure
from smoke.expect import Section
from smoke.report import CheckResult, failed, passed

NAME = "megatron-args"


def _run(ctx: Context, sec: Section) -> CheckResult:
    args = sec.strs("args")
    argv0 = sec.str_opt("argv0") or "pretrain_gpt.py"
    module = sec.str_opt("module") or "megatron.training.arguments"
    res = ctx.probe("megatron_args", {"args": list(args), "argv0": argv0, "module": module})
    details = {"argv0": argv0, "arguments": len(args), "module": module, "probe": res.to_json()}
    if res.ok:
        return passed(NAME, f"{len(args)} baked argument(s) parse with {res.data['parser']}",
                      namespace_size=res.data.get("namespace_size"),
                      attention_backend=res.data.get("attention_backend"), **details)
    if res.data.get("argparse_error"):
        return failed(NAME, f"Megatron's parser rejects the baked arguments: {res.data['argparse_error']}",
                      stderr=res.data.get("stderr", []), **details)
    return import_failure(NAME, ctx, f"importing {module} ({res.data.get('stage', '')})", res, **details)


build = _run
gpu = gpu_tier_repeats(NAME, _run)
