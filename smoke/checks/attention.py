"""attention: the image's NVTE_*_ATTN variables agree with the entrypoint's --attention-backend.

Megatron-LM sets NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN from --attention-backend
(local 0/0/0, flash 1/0/0, fused 0/1/0, unfused 0/0/1, auto 1/1/1) and asserts that a value already
in the environment is the same text (megatron/core/transformer/module.py, _set_attention_backend):
a disagreement kills every rank at start-up.

Build tier: that agreement; and, when the entrypoint passes --use-flash-attn, flash_attn installed
where Megatron needs it. Only Megatron's legacy models read --use-flash-attn (effebd81:
megatron/legacy/model/transformer.py raises ImportError 'FlashAttention is not installed' when
building the model; nothing under megatron/core reads it), so without flash_attn the check asks the
pinned Megatron's parser (the ``megatron_args`` probe, with the args / argv0 / module of the
expectation's megatron-args section) which models the launch builds: Megatron-Core ones
(use_legacy_models false at effebd81, where they are the default; use_mcore_models true in older
Megatron-LM, where legacy was the default) need no flash_attn and pass; legacy ones fail; when it
cannot be told (no megatron-args section, the import or the parse fails, neither dest in the
namespace) the check fails as for legacy models and says why it could not tell.

GPU tier: which of flash / fused / unfused TE's backend selection allows for a small configuration,
which it selects, and a forward+backward through it, with the variables set as Megatron would set them.
"""
from __future__ import annotations

from typing import Any

from smoke.checks import Context, import_failure, megatron_args, no_gpu
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed, skipped

NAME = "attention"
VARS = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
MEGATRON_ENV: dict[str, tuple[int, int, int]] = {
    "local": (0, 0, 0),
    "flash": (1, 0, 0),
    "fused": (0, 1, 0),
    "unfused": (0, 0, 1),
    "auto": (1, 1, 1),
}
DEFAULT_BACKEND = "auto"  # Megatron's default when --attention-backend is not given


def _backend(sec: Section) -> tuple[str, str]:
    backend = sec.str_opt("backend") or DEFAULT_BACKEND
    if backend not in MEGATRON_ENV:
        raise SectionError(f"checks.attention.backend: {backend!r} is not one of {', '.join(MEGATRON_ENV)}")
    source = sec.str_opt("source") or (f"--attention-backend {backend}" if sec.str_opt("backend")
                                       else "Megatron's default (no --attention-backend)")
    return backend, source


def megatron_env(backend: str) -> dict[str, str]:
    return {v: str(x) for v, x in zip(VARS, MEGATRON_ENV[backend], strict=True)}


LEGACY_READER = "megatron/legacy/model/transformer.py"
LEGACY_RAISES = (f"Megatron's legacy transformer ({LEGACY_READER}) raises ImportError "
                 "'FlashAttention is not installed' at model build")


def _models(ctx: Context) -> tuple[bool | None, str, dict[str, Any]]:
    """Whether the launch builds Megatron's legacy models (None: cannot tell), what decided it or why it
    cannot be told, and the megatron_args probe's answer for the report."""
    data = ctx.expect.section("megatron-args")
    if data is None:
        return None, "the expectation has no megatron-args section to parse the launch with", {}
    try:
        args, argv0, module = megatron_args.launch(Section("megatron-args", data))
    except SectionError as exc:
        return None, f"the megatron-args section is unusable: {exc}", {}
    res = ctx.probe("megatron_args", {"args": list(args), "argv0": argv0, "module": module})
    answer: dict[str, Any] = {"argv0": argv0, "module": module, "arguments": len(args), "answer": res.data,
                              "probe": res.to_json()}
    if not res.ok:
        if res.data.get("argparse_error"):
            why = f"Megatron's parser rejects the baked arguments: {res.data['argparse_error']}"
        else:
            text = res.error_text() or "no answer"
            why = (f"importing {module} ({res.data.get('stage', 'probe')}) failed"
                   + (" (needs a device)" if res.needs_device() else "") + f": {text}")
        return None, why, answer
    legacy = res.data.get("legacy_models")
    dest = res.data.get("legacy_models_from")
    if not isinstance(legacy, bool):
        return None, (f"{res.data.get('parser', module)}'s namespace has neither use_legacy_models nor "
                      "use_mcore_models"), answer
    return legacy, f"decided by {dest}", answer


def build(ctx: Context, sec: Section) -> CheckResult:
    backend, source = _backend(sec)
    wanted = megatron_env(backend)
    image = {v: ctx.env.get(v) for v in VARS}
    env_problems = [f"{v}={image[v]} in the image, but {source} makes Megatron require it unset or {wanted[v]}"
                    for v in VARS if image[v] is not None and image[v] != wanted[v]]
    details: dict[str, Any] = {"backend": backend, "source": source, "image_env": image, "megatron_sets": wanted}
    problems = ["; ".join(env_problems) + " (Megatron asserts this at start-up)"] if env_problems else []
    flash_note = ""
    if sec.bool("use_flash_attn"):
        res = ctx.probe("locate", {"names": ["flash_attn"]}, stub=False)
        where = res.data.get("modules", {}).get("flash_attn") if res.ok else None
        details["flash_attn"] = where
        if where is not None:
            flash_note = "; flash_attn is installed for --use-flash-attn"
        else:
            legacy, why, answer = _models(ctx)
            details["legacy_models"] = legacy
            details["models"] = why
            details["megatron_args"] = answer
            missing = "the entrypoint passes --use-flash-attn but flash_attn is not installed"
            if legacy is False:
                flash_note = (f"; --use-flash-attn is read only by Megatron's legacy models ({LEGACY_READER}) "
                              f"and this launch builds Megatron-Core models ({why}), so flash_attn is not needed")
            elif legacy is True:
                problems.append(f"{missing}, and this launch builds Megatron's legacy models ({why}): "
                                f"{LEGACY_RAISES}")
            else:
                problems.append(f"{missing}; {LEGACY_RAISES}, and whether this launch builds legacy or "
                                f"Megatron-Core models could not be told: {why}")
    if problems:
        return failed(NAME, "; ".join(problems), **details)
    summary = f"image env agrees with {source} (Megatron sets " + " ".join(f"{k}={v}" for k, v in wanted.items()) + ")"
    return passed(NAME, summary + flash_note, **details)


def gpu(ctx: Context, sec: Section) -> CheckResult:
    backend, source = _backend(sec)
    if backend == "local":
        return skipped(NAME, f"{source}: Megatron's own attention, TE's backend selection is not used",
                       deferred="build")
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    env = {**megatron_env(backend), "NVTE_DEBUG": "1", "NVTE_DEBUG_LEVEL": "2"}
    res = ctx.probe("attention", {"heads": 16, "head_dim": 64, "seq": 128, "batch": 2}, env=env)
    details: dict[str, Any] = {"backend": backend, "source": source, "env": env,
                               "allowed": res.data.get("allowed"), "selected": res.data.get("selected"),
                               "forward_selected": res.data.get("forward_selected"),
                               "config": res.data.get("config"), "api": res.data.get("api"),
                               "te_log": res.data.get("log", [])[-40:]}
    if not res.ok and "allowed" not in res.data:
        return import_failure(NAME, ctx, "asking Transformer Engine for its attention backends", res, **details)
    allowed = res.data.get("allowed") or {}
    # The "Selected backend" log line when TE logged one, else what get_attention_backend returned.
    chosen = res.data.get("chosen") or []
    selected = res.data.get("forward_selected") or res.data.get("selected") or (chosen[0] if chosen else None)
    allowed_text = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in allowed.items())
    if backend != "auto" and not allowed.get(backend):
        return failed(NAME, f"{source}: TE does not allow the {backend} backend for a small configuration here "
                      f"(allowed: {allowed_text})", **details)
    if not res.ok:
        return failed(NAME, f"TE allowed {allowed_text} and selected {selected}, but "
                      f"{res.data.get('stage', 'the run')} failed: {res.error_text()}", error=res.error, **details)
    if not selected or selected == "NoBackend":
        return failed(NAME, f"TE selected no attention backend (allowed: {allowed_text})", **details)
    return passed(NAME, f"TE allows {allowed_text}; selects {selected} with {source}", **details)
