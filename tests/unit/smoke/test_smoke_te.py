"""mxfp8 and attention checks against MIMIC Transformer Engine and torch trees written into tmp folders.

The mimics (smoke_mimic.py) reproduce TE's old (<= 2.8: fp8.check_mxfp8_support, fp8_autocast) and
new (>= 2.9: is_mxfp8_available, quantization.check_mxfp8_support, autocast) layouts and the
compute-capability rule UPSTREAM.md records, so every API branch of the probes runs here; the real
TE ran on the H200 (tests/data/gpu/).
"""

from __future__ import annotations

import pytest
import smoke_mimic as mimic
from smoke_harness import Suite

HOPPER_REASON = "Device compute capability 10.0 or higher required for MXFP8 execution."


@pytest.mark.parametrize("layout", ["old", "new"])
def test_mxfp8_recipe_importable_on_build_host(suite: Suite, layout: str) -> None:
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout=layout, version="2.10.0.dev0+d2945c6")
    r = suite.check("mxfp8", {})
    assert r.status == "pass", r.summary
    assert r.summary == "transformer_engine.common.recipe.MXFP8BlockScaling imports (TE 2.10.0.dev0+d2945c6)"


def test_mxfp8_recipe_missing(suite: Suite) -> None:
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="old", version="2.0.0", recipe=False)
    r = suite.check("mxfp8", {})
    assert r.status == "fail"
    assert r.summary == ("from transformer_engine.common.recipe import MXFP8BlockScaling failed: AttributeError: "
                         "module 'transformer_engine.common.recipe' has no attribute 'MXFP8BlockScaling'")


@pytest.mark.parametrize(("layout", "api"), [
    ("new", "transformer_engine.pytorch.is_mxfp8_available(return_reason=True)"),
    ("old", "transformer_engine.pytorch.fp8.check_mxfp8_support()"),
])
def test_mxfp8_on_hopper_is_unsupported_with_tes_reason(suite: Suite, layout: str, api: str) -> None:
    mimic.torch(suite.site, capability=(9, 0))
    mimic.transformer_engine(suite.site, layout=layout, version="2.10.0")
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.status == "unsupported"
    assert r.summary == f"MXFP8 is not supported on NVIDIA H200 (compute capability 9.0): {HOPPER_REASON}"
    assert r.details["support"]["api"] == api
    assert r.satisfied  # unsupported hardware is an explained outcome, not a failure


def test_mxfp8_middle_api_quantization_module(suite: Suite) -> None:
    """A TE with quantization.check_mxfp8_support but no is_mxfp8_available answers through the former."""
    mimic.torch(suite.site, capability=(9, 0))
    mimic.transformer_engine(suite.site, layout="new", version="2.9.0")
    init = suite.site / "transformer_engine/pytorch/__init__.py"
    init.write_text(init.read_text().replace("def is_mxfp8_available", "def _not_exported"))
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.details["support"]["api"] == "transformer_engine.pytorch.quantization.check_mxfp8_support()"
    assert r.details["support"]["tried_before"] == ["transformer_engine.pytorch.is_mxfp8_available: absent"]


@pytest.mark.parametrize(("layout", "autocast"), [
    ("new", "transformer_engine.pytorch.autocast(recipe=MXFP8BlockScaling())"),
    ("old", "transformer_engine.pytorch.fp8_autocast(fp8_recipe=MXFP8BlockScaling())"),
])
def test_mxfp8_on_blackwell_runs_linear_under_the_versions_autocast(suite: Suite, layout: str, autocast: str) -> None:
    mimic.torch(suite.site, capability=(10, 0), name="NVIDIA GB200")
    mimic.transformer_engine(suite.site, layout=layout, version="2.10.0")
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.summary == f"MXFP8 te.Linear forward+backward ran on NVIDIA GB200 (compute capability 10.0) under {autocast}"
    assert r.details["run"]["gradients"] is True


def test_mxfp8_linear_with_non_finite_output_fails(suite: Suite) -> None:
    mimic.torch(suite.site, capability=(10, 0), name="NVIDIA GB200")
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0", linear_nan=True)
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.status == "fail"
    assert "non-finite output or missing gradients" in r.summary


def test_mxfp8_on_sm120_is_unsupported(suite: Suite) -> None:
    mimic.torch(suite.site, capability=(12, 0), name="RTX PRO 6000")
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0")
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.status == "unsupported"
    assert r.summary.endswith("MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet.")


def test_mxfp8_gpu_tier_without_gpu(suite: Suite) -> None:
    mimic.torch(suite.site, available=False)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0")
    r = suite.check("mxfp8", {}, tier="gpu", device=True)
    assert r.status == "skipped"
    assert r.deferred is None
    assert r.summary == "no GPU: torch.cuda.is_available() is False (torch 2.9.0+mimic, CUDA 13.0)"
    assert not r.satisfied


# ------------------------------------------------------------------------------------------ attention


def test_attention_env_agrees(suite: Suite) -> None:
    r = suite.check("attention", {"backend": "fused"}, env={"NVTE_FUSED_ATTN": "1"})
    assert r.status == "pass", r.summary
    assert r.summary == ("image env agrees with --attention-backend fused "
                         "(Megatron sets NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1 NVTE_UNFUSED_ATTN=0)")


def test_attention_env_disagrees_like_megatrons_assert(suite: Suite) -> None:
    r = suite.check("attention", {"backend": "fused"}, env={"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1"})
    assert r.status == "fail"
    assert r.summary == ("NVTE_FLASH_ATTN=1 in the image, but --attention-backend fused makes Megatron require it "
                         "unset or 0 (Megatron asserts this at start-up)")
    # no --attention-backend: Megatron's default auto wants 1/1/1, so a 0 anywhere fails
    r = suite.check("attention", {}, env={"NVTE_UNFUSED_ATTN": "0"})
    assert r.status == "fail"
    assert "Megatron's default (no --attention-backend) makes Megatron require it unset or 1" in r.summary


def test_attention_use_flash_attn_needs_flash_attn(suite: Suite) -> None:
    r = suite.check("attention", {"backend": "auto", "use_flash_attn": True})
    assert r.status == "fail"
    assert "the entrypoint passes --use-flash-attn but flash_attn is not installed" in r.summary
    mimic.write(suite.site, "flash_attn/__init__.py", "raise ImportError('never imported by the check')\n")
    assert suite.check("attention", {"backend": "auto", "use_flash_attn": True}).status == "pass"


def test_attention_gpu_tier_allowed_and_selected(suite: Suite) -> None:
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0")
    r = suite.check("attention", {"backend": "auto"}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.details["allowed"] == {"flash": False, "fused": True, "unfused": True}
    assert r.details["selected"] == "FusedAttention (sub-backend 1)"
    assert r.summary == ("TE allows flash=no, fused=yes, unfused=yes; selects FusedAttention (sub-backend 1) "
                         "with --attention-backend auto")
    assert any(line.startswith("Available backends = ") for line in r.details["te_log"])
    assert r.details["env"]["NVTE_DEBUG_LEVEL"] == "2"


def test_attention_gpu_tier_backend_not_allowed(suite: Suite) -> None:
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0", fused_ok=False)
    r = suite.check("attention", {"backend": "fused"}, tier="gpu", device=True)
    assert r.status == "fail"
    assert r.summary == ("--attention-backend fused: TE does not allow the fused backend for a small configuration "
                         "here (allowed: flash=no, fused=no, unfused=no)")
    auto = suite.check("attention", {"backend": "auto"}, tier="gpu", device=True)
    assert auto.status == "pass"
    assert auto.details["selected"] == "UnfusedDotProductAttention"


def test_attention_local_backend_has_no_gpu_part(suite: Suite) -> None:
    r = suite.check("attention", {"backend": "local"}, tier="gpu", device=True)
    assert (r.status, r.deferred) == ("skipped", "build")
