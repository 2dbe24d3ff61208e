"""The smoke suite's reports from the H200 run of issue 17 (tests/data/gpu/h200-hopper/): Transformer Engine
and DeepEP compiled on the device by buildctl's rendered compile scripts from buildctl's prepared trees,
Megatron-LM placed as assemble places it, the suite run at both tiers with the expectation buildctl wrote
for the locked hopper variant. These tests read what came back; the smoke table of docs/guides/gpu-tier.md is made
from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "gpu" / "h200-hopper"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def checks(tier: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in load(f"report-{tier}.json")["checks"]}


HOST = load("host-facts.json")
TE_TREE = HOST["components"]["transformer-engine"]["tree"]
DEEPEP = HOST["components"]["deepep-hybridep"]["tree"]
MEGATRON = HOST["components"]["megatron-lm"]["tree"]


def test_the_run_used_the_locked_expectation_of_the_hopper_variant() -> None:
    exp = load("expect.json")
    assert (exp["stack"], exp["variant"]) == ("deepseek-v3-gb200", "hopper")
    shas = {c["name"]: c.get("sha") for c in exp["checks"]["versions"]["components"]}
    assert shas == {"transformer-engine": TE_TREE, "deepep-hybridep": DEEPEP, "megatron-lm": MEGATRON}
    for tier in ("gpu", "build"):
        r = load(f"report-{tier}.json")
        assert r["tier"] == tier and not r["error"]
        assert [c["name"] for c in r["checks"]] == [n for n in (
            "versions", "cudnn", "protected", "imports", "mxfp8", "fp8", "attention", "hybridep", "arch",
            "megatron-args", "requirements") if n in exp["required"] or n in exp["checks"]]


def test_versions_match_the_prepared_commits() -> None:
    gpu, build = checks("gpu")["versions"], checks("build")["versions"]
    rows = {r["component"]: r for r in gpu["details"]["runtime"]}
    assert rows["transformer-engine"]["seen_sha"] == TE_TREE[:7]
    assert rows["transformer-engine"]["seen_base"] == "2.9.0"
    assert rows["deepep-hybridep"]["seen_sha"] == DEEPEP[:7]
    assert rows["deepep-hybridep"]["module_version"] is None  # deep_ep has no __version__: metadata answers
    tree = {r["component"]: r for r in build["details"]["components"]}["megatron-lm"]
    assert tree["seen_sha"] == MEGATRON and tree["read_from"] == "/opt/megatron-lm/.git/HEAD"
    assert gpu["status"] == "pass", gpu["summary"]


def test_arch_sees_sm90_sass_in_both_compiled_wheels() -> None:
    arch = checks("build")["arch"]
    assert arch["status"] == "pass", arch["summary"]
    names = {Path(f["file"]).name.split(".")[0] for f in arch["details"]["files"]}
    assert {"hybrid_ep_cpp", "deep_ep_cpp"} <= names
    assert any(n.startswith("libtransformer_engine") for n in names)
    assert all("sm_90" in f["sass"] for f in arch["details"]["files"])


def test_mxfp8_is_unsupported_on_hopper_with_tes_reason() -> None:
    m = checks("gpu")["mxfp8"]
    assert m["status"] == "unsupported"
    assert m["details"]["support"]["reason"] == "Device compute capability 10.0 or higher required for MXFP8 execution."


def test_cudnn_fails_on_the_machines_wheel() -> None:
    c = checks("gpu")["cudnn"]
    assert c["status"] == "fail"
    assert "9.19.0" in c["summary"] and "9.14.0.64" in c["summary"]


def test_hybridep_passes_as_far_as_one_gpu_allows() -> None:
    h = checks("gpu")["hybridep"]
    assert h["status"] == "pass", h["summary"]
    assert h["details"]["roundtrip"]["status"] == "skipped"
    assert "1 GPU (NVIDIA H200): HybridEPBuffer needs a process group of at least 2 ranks" in h["summary"]


def test_megatron_args_parse_and_validate_with_the_pinned_megatron() -> None:
    for tier in ("gpu", "build"):
        m = checks(tier)["megatron-args"]
        assert m["status"] == "pass", m["summary"]
        rows = m["details"]["validate"]
        assert [r["profile"] for r in rows] == ["base"] and all(r["ok"] for r in rows)
        assert rows[0]["world_size"] == 256 and rows[0]["stage"] == "config"  # TransformerConfig built too
        assert rows[0]["derived"]["data_parallel_size"] == 32  # 256 ranks / (TP1 x PP8)
    assert checks("gpu")["megatron-args"]["details"]["validate"][0]["answered"] == []  # the real device answered
    assert checks("build")["megatron-args"]["details"]["validate"][0].get("answered_from", "").startswith("gpu_archs 9.0")


def test_the_gpu_tier_page_smoke_table_is_made_from_these_reports() -> None:
    mod = load_script("h200_table", DATA / "table.py")
    assert mod.table(DATA) in (ROOT / "docs" / "guides" / "gpu-tier.md").read_text()


def test_fp8_passes_for_the_hopper_launchs_tensorwise_recipe() -> None:
    gpu, build = checks("gpu")["fp8"], checks("build")["fp8"]
    assert load("expect.json")["checks"]["fp8"]["recipe"] == "tensorwise"
    assert build["status"] == "pass", build["summary"]  # the recipe class imports
    assert gpu["status"] == "pass", gpu["summary"]  # TE says it runs here, and a te.Linear step ran under it
    support, run = gpu["details"]["support"], gpu["details"]["run"]
    assert support["class"] == "transformer_engine.common.recipe.Float8CurrentScaling" and support["supported"]
    assert run["ok"] and run["finite"] and run["gradients"]
    assert support["families"]["mxfp8"]["supported"] is False  # what the launch used before the recipes fix


def test_attention_passes_on_the_gpu_and_fails_the_build_tier_on_flash_attn() -> None:
    assert checks("gpu")["attention"]["status"] == "pass"
    assert checks("build")["attention"]["summary"].startswith("the entrypoint passes --use-flash-attn")
