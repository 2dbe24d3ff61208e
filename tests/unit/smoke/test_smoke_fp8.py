"""fp8 check: the launch's FP8 recipe (from the baked --fp8-format / --fp8-recipe), against MIMIC TE trees.

The TE trees are mimics of its layouts (smoke_mimic.py) with TE's support rules as they read at
d2945c6 (transformer_engine/pytorch/quantization.py): FP8 from compute capability 9.0 (8.9 with
conditions), FP8 block scaling from 9.0 with CUDA >= 12.9, MXFP8 from 10.0. The real TE ran on the
H200 (tests/data/gpu/).
"""

from __future__ import annotations

import pytest

from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite

MXFP8_REASON = "Device compute capability 10.0 or higher required for MXFP8 execution."
SOURCE = "the deepseek-v3-gb200 hopper launch"


def te(suite: Suite, layout: str = "new", capability: tuple[int, int] = (9, 0), **kw: object) -> None:
    mimic.torch(suite.site, capability=capability)
    mimic.transformer_engine(suite.site, layout=layout, version="2.9.0+abc1234", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("recipe", "cls"), [("delayed", "DelayedScaling"), ("tensorwise", "Float8CurrentScaling"),
                                             ("blockwise", "Float8BlockScaling"), ("mxfp8", "MXFP8BlockScaling")])
def test_build_tier_imports_the_recipe_class_megatron_builds(suite: Suite, recipe: str, cls: str) -> None:
    te(suite)
    r = suite.check("fp8", {"format": "e4m3", "recipe": recipe, "source": SOURCE})
    assert r.status == "pass", r.summary
    assert r.summary == (f"{SOURCE} uses --fp8-recipe {recipe} --fp8-format e4m3: "
                         f"transformer_engine.common.recipe.{cls} imports (TE 2.9.0+abc1234)")


def test_build_tier_recipe_class_missing_fails(suite: Suite) -> None:
    te(suite, recipe=False)
    r = suite.check("fp8", {"format": "e4m3", "recipe": "mxfp8"})
    assert r.status == "fail"
    assert r.summary.startswith("from transformer_engine.common.recipe import MXFP8BlockScaling (--fp8-recipe mxfp8) "
                                "failed: AttributeError")


def test_launch_without_fp8_passes_saying_so(suite: Suite) -> None:
    r = suite.check("fp8", {"recipe": "delayed", "source": SOURCE}, tier="gpu", device=True)
    assert r.status == "pass"
    assert r.summary == f"{SOURCE} trains without FP8 (no --fp8-format): nothing to check"


@pytest.mark.parametrize(("section", "message"), [
    ({"format": "e5m2"}, "checks.fp8.format: expected one of e4m3, hybrid (Megatron's --fp8-format), got 'e5m2'"),
    ({"format": "e4m3", "recipe": "nvfp4"},
     "checks.fp8.recipe: expected one of delayed, tensorwise, blockwise, mxfp8 (Megatron's --fp8-recipe), got 'nvfp4'"),
])
def test_bad_section_fails_naming_the_key(suite: Suite, section: dict[str, str], message: str) -> None:
    r = suite.check("fp8", section)
    assert r.status == "fail"
    assert r.summary == f"expect.json is wrong for this check: {message}"


@pytest.mark.parametrize(("layout", "recipe", "api"), [
    ("new", "blockwise", "transformer_engine.pytorch.is_fp8_block_scaling_available(return_reason=True)"),
    ("new", "tensorwise", "transformer_engine.pytorch.is_fp8_available(return_reason=True)"),
    ("old", "delayed", "transformer_engine.pytorch.fp8.check_fp8_support()"),
])
def test_gpu_tier_asks_te_and_runs_linear_under_the_recipe(suite: Suite, layout: str, recipe: str, api: str) -> None:
    te(suite, layout=layout)
    r = suite.check("fp8", {"format": "hybrid", "recipe": recipe, "archs": ["9.0"], "source": SOURCE},
                    tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert f": {api} is True on NVIDIA H200 (compute capability 9.0)" in r.summary
    assert "(fp8_format=Format.HYBRID))" in r.details["run"]["autocast"]
    fam = r.details["support"]["families"]
    if layout == "new":  # every family's answer is reported beside the one the launch needs
        assert fam["fp8"]["supported"] is True and fam["fp8_block_scaling"]["supported"] is True
        assert fam["mxfp8"] == {"api": "transformer_engine.pytorch.is_mxfp8_available(return_reason=True)",
                                "supported": False, "reason": MXFP8_REASON}


def test_mxfp8_launch_on_hopper_is_unsupported_when_the_variant_targets_blackwell(suite: Suite) -> None:
    te(suite)
    r = suite.check("fp8", {"format": "e4m3", "recipe": "mxfp8", "archs": ["10.0"], "source": "the gb200 launch"},
                    tier="gpu", device=True)
    assert r.status == "unsupported"
    assert r.summary == ("the gb200 launch uses --fp8-recipe mxfp8 (MXFP8BlockScaling), which TE says does not run on "
                         f"NVIDIA H200 (compute capability 9.0); the variant targets 10.0: {MXFP8_REASON}")


def test_mxfp8_launch_on_the_hopper_it_targets_fails(suite: Suite) -> None:
    te(suite)
    r = suite.check("fp8", {"format": "e4m3", "recipe": "mxfp8", "archs": ["9.0"], "source": SOURCE},
                    tier="gpu", device=True)
    assert r.status == "fail"
    assert r.summary == (f"{SOURCE} uses --fp8-recipe mxfp8 (MXFP8BlockScaling), which TE says does not run on "
                         f"NVIDIA H200 (compute capability 9.0), a GPU this variant targets: {MXFP8_REASON}")


def test_mxfp8_launch_on_blackwell_runs(suite: Suite) -> None:
    te(suite, capability=(10, 0))
    r = suite.check("fp8", {"format": "e4m3", "recipe": "mxfp8", "archs": ["10.0"]}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.details["run"]["autocast"] == \
        "transformer_engine.pytorch.autocast(recipe=MXFP8BlockScaling(fp8_format=Format.E4M3))"


def test_linear_with_non_finite_output_fails(suite: Suite) -> None:
    te(suite, linear_nan=True)
    r = suite.check("fp8", {"format": "e4m3", "recipe": "blockwise", "archs": ["9.0"]}, tier="gpu", device=True)
    assert r.status == "fail"
    assert "but te.Linear under it failed at" in r.summary and "non-finite output or missing gradients" in r.summary
