"""attention: the image's NVTE_*_ATTN variables agree with the entrypoint's --attention-backend.

Megatron-LM sets NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN from --attention-backend
(local 0/0/0, flash 1/0/0, fused 0/1/0, unfused 0/0/1, auto 1/1/1) and asserts that a value already
in the environment is the same text (megatron/core/transformer/module.py, _set_attention_backend):
a disagreement kills every rank at start-up. Build tier: that agreement, and flash_attn installed when
the entrypoint passes --use-flash-attn. GPU tier: which of flash / fused / unfused TE's backend
selection allows for a small configuration, which it selects, and a forward+backward through it, with
the variables set as Megatron would set them.
"""

from __future__ import annotations

from typing import Any

from smoke.checks import Context, import_failure, no_gpu
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


def build(ctx: Context, sec: Section) -> CheckResult:
    backend, source = _backend(sec)
    wanted = megatron_env(backend)
    image = {v: ctx.env.get(v) for v in VARS}
    problems = [f"{v}={image[v]} in the image, but {source} makes Megatron require it unset or {wanted[v]}"
                for v in VARS if image[v] is not None and image[v] != wanted[v]]
    details: dict[str, Any] = {"backend": backend, "source": source, "image_env": image, "megatron_sets": wanted}
    if sec.bool("use_flash_attn"):
        res = ctx.probe("locate", {"names": ["flash_attn"]}, stub=False)
        where = res.data.get("modules", {}).get("flash_attn") if res.ok else None
        details["flash_attn"] = where
        if where is None:
            problems.append("the entrypoint passes --use-flash-attn but flash_attn is not installed")
    if problems:
        return failed(NAME, "; ".join(problems) + " (Megatron asserts this at start-up)", **details)
    summary = f"image env agrees with {source} (Megatron sets " + " ".join(f"{k}={v}" for k, v in wanted.items()) + ")"
    if sec.bool("use_flash_attn"):
        summary += "; flash_attn is installed for --use-flash-attn"
    return passed(NAME, summary, **details)


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
