"""What the H200 runs of the one-GPU proxy trainings gave (tests/data/gpu/h200-train/, 2026-12-02).

Each training ran as the smoke suite's `train` check (GPU tier) with the launch script buildctl renders,
TE and DeepEP 1.2.1+3f601f7 compiled on the device by buildctl's rendered scripts. These tests read what
came back and hold the findings the manifests and lint-args now carry: BERT trained (attempt 2, TE
2.9.0+bd2094f); the DSv3 proxy as it then stood stopped at its first step, for reasons each now answered by
a rule or a pin; with both (TE 2.9.0+cf4707d, compiled again), it trained 30 steps (attempt 3).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from buildctl.graph.entrypoint import variant_entrypoint
from buildctl.manifest import pins
from buildctl.manifest.profiles import effective_args
from buildctl.megatron.lintargs import lint
from smoke import trainlog
from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "gpu" / "h200-train"


def train_check(attempt: str, profile: str) -> dict[str, Any]:
    report = json.loads((DATA / attempt / f"smoke-{profile}.json").read_text())
    assert report["tier"] == "gpu" and report["driver"]["gpu"]["name"] == "NVIDIA H200"
    (check,) = report["checks"]
    assert check["name"] == "train" and check["required"]
    return dict(check)


def test_bert_proxy_trained_30_steps_with_a_falling_loss() -> None:
    c = train_check("attempt2", "bert-proxy-1gpu")
    d = c["details"]
    assert c["status"] == "pass"
    assert d["steps"] == d["train_iters"] == 30 and d["exit_code"] == 0 and d["nan_iterations"] == 0
    assert d["loss_key"] == "lm loss" and d["last_mean"] < d["first_mean"] - 1.5  # 7.86 -> 5.97
    # one step (4) skipped on an fp16 overflow: Megatron logs no loss for it and counts it
    assert [s["iteration"] for s in d["loss"] if "lm loss" not in s] == [4] and d["skipped_iterations"] == 1
    assert 100 < d["step_ms"]["median"] < 1000 and 4000 < d["memory_mb"]["max allocated"] < 8000
    # the report is what the check's own reader makes of the log that came back
    log = trainlog.parse((DATA / "attempt2" / "train-bert-proxy-1gpu.log").read_text(errors="replace"))
    again = trainlog.judge(log, min_steps=20)
    assert again.ok and again.details["loss"] == d["loss"]


def _report_module() -> ModuleType:
    return load_script("h200_train_report", DATA / "report.py")


def test_report_py_reads_the_log_as_the_check_does(capsys: Any) -> None:
    rc = _report_module().main([str(DATA / "attempt2" / "train-bert-proxy-1gpu.log"), "--profile", "bert-proxy-1gpu"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"] and out["summary"].startswith("30 steps, lm loss 7.855 -> 5.969")


def test_attempt1_stopped_on_what_apex_would_have_given() -> None:
    """Both proxies stopped before step 1: the device has no APEX (NGC images do). The proxies now say
    --no-gradient-accumulation-fusion (both) and --no-persist-layer-norm (BERT), each with that reason."""
    dsv3 = (DATA / "attempt1" / "train-dsv3-proxy-1gpu.log").read_text(errors="replace")
    bert = (DATA / "attempt1" / "train-bert-proxy-1gpu.log").read_text(errors="replace")
    assert "fused_weight_gradient_mlp_cuda module is not found" in dsv3
    assert "persist_layer_norm not supported by torch LayerNorm" in bert
    for stack, profile, flags in (("deepseek-v3-gb200", "dsv3-proxy-1gpu", {"--no-gradient-accumulation-fusion"}),
                                  ("megatron-bert", "bert-proxy-1gpu",
                                   {"--no-gradient-accumulation-fusion", "--no-persist-layer-norm"})):
        p = pins.load(ROOT / "pins" / f"{stack}.yaml").entrypoint.profiles[profile]  # type: ignore[union-attr]
        assert flags <= set(p.reasons) and all("APEX" in p.reasons[f] for f in flags)


def test_attempt2_dsv3_findings_are_now_a_lint_rule_and_a_te_pin() -> None:
    # as declared then: CUDA graphs with moe_preprocess + alltoall + router padding stop the first step
    c = train_check("attempt2", "dsv3-proxy-1gpu")
    assert c["status"] == "fail" and "before any step was logged" in c["summary"]
    log = (DATA / "attempt2" / "train-dsv3-proxy-1gpu.log").read_text(errors="replace")
    assert "AssertionError: cuda_sync_point must be after cuda_dtoh_point." in log
    # the same launch with --cuda-graph-impl none appended stopped in TE v2.9's triton permutation kernel
    retry = (DATA / "attempt2" / "train-dsv3-proxy-1gpu-retry.log").read_text(errors="replace")
    assert "Unsupported function referenced: <function get_int_dtype" in retry
    assert "transformer_engine/pytorch/triton/permutation.py" in retry
    m = pins.load(ROOT / "pins" / "deepseek-v3-gb200.yaml")
    hopper = next(v for v in m.variants if v.name == "hopper")
    e = variant_entrypoint(m, hopper)
    proxy = e.profiles["dsv3-proxy-1gpu"]
    # lint-args now refuses the scope the run had, and the proxy no longer has it
    as_run = [a for a in effective_args(e, proxy)]
    assert {a.flag: a.values for a in as_run}["--cuda-graph-scope"] == ("attn", "moe_router")
    assert not lint(m, hopper, None, "dsv3-proxy-1gpu").errors
    # TE #2286 (triton >= 3.5) is one of the component's changes now
    te = m.component("transformer-engine")
    assert "commit dd7ab715a55d" in [s.label() for s in te.steps]


def _args_as_printed(log: str) -> dict[str, str]:
    """Megatron's own dump of its parsed arguments ('  name ....... value') at the top of a training log."""
    out: dict[str, str] = {}
    for line in log.splitlines():
        name, dots, value = line.strip().partition(" ..")
        if dots and name.isidentifier():
            out[name] = value.lstrip(". ").strip()
    return out


def test_attempt3_dsv3_proxy_trained_with_both_fixes() -> None:
    """Lease 3: TE compiled again from tree cf4707d7 (v2.9 + d2945c6 + #2146/#2150 + #2286), the proxy with
    the moe_preprocess scope gone: 30 steps of MLA + MoE under FP8 tensorwise with TE CUDA graphs."""
    c = train_check("attempt3", "dsv3-proxy-1gpu")
    d = c["details"]
    assert c["status"] == "pass" and "30 steps, lm loss 8.290 -> 0.292" in c["summary"]
    assert d["steps"] == d["train_iters"] == 30 and d["exit_code"] == 0
    assert d["nan_iterations"] == 0 and d["skipped_iterations"] == 0
    losses = [s["lm loss"] for s in d["loss"]]
    assert len(losses) == 30 and losses[0] > 9 and losses[-1] < 0.5  # mock data: memorised
    assert 300 < d["step_ms"]["median"] < 1000 and 2000 < d["memory_mb"]["max allocated"] < 6000
    log = (DATA / "attempt3" / "train-dsv3-proxy-1gpu.log").read_text(errors="replace")
    again = trainlog.judge(trainlog.parse(log), min_steps=20)
    assert again.ok and again.details["loss"] == d["loss"]
    # what Megatron itself says it ran: the hopper launch's features at one GPU's sizes
    a = _args_as_printed(log)
    assert (a["fp8"], a["fp8_recipe"], a["multi_latent_attention"]) == ("e4m3", "tensorwise", "True")
    assert (a["q_lora_rank"], a["kv_lora_rank"], a["num_experts"]) == ("512", "512", "16")
    assert (a["moe_grouped_gemm"], a["moe_token_dispatcher_type"]) == ("True", "alltoall")
    assert (a["cuda_graph_impl"], a["cuda_graph_scope"]) == ("transformer_engine", "['attn', 'moe_router']")
    assert (a["expert_model_parallel_size"], a["num_layers"], a["hidden_size"]) == ("1", "4", "1024")
    assert "cuda_sync_point must be after" not in log and "Unsupported function referenced" not in log
    facts = json.loads((DATA / "attempt3" / "facts.json").read_text())
    assert facts["wheel.transformer-engine"] == "transformer_engine-2.9.0+cf4707d-cp312-cp312-linux_x86_64.whl"
    assert facts["wheel.deepep-hybridep"].startswith("deep_ep-1.2.1+3f601f7-")
    assert facts["bindpcie"].startswith("real") and facts["rc.dsv3-proxy-1gpu"] == "0"
    compile_log = (DATA / "attempt3" / "compile.log").read_text(errors="replace")
    assert "transformer_engine-2.9.0+cf4707d" in compile_log


def test_attempt3_bert_proxy_trained_again_beside_it() -> None:
    c = train_check("attempt3", "bert-proxy-1gpu")
    d = c["details"]
    assert c["status"] == "pass" and d["steps"] == 30 and d["nan_iterations"] == 0
    assert d["last_mean"] < d["first_mean"] - 1.5
    log = trainlog.parse((DATA / "attempt3" / "train-bert-proxy-1gpu.log").read_text(errors="replace"))
    assert trainlog.judge(log, min_steps=20).details["loss"] == d["loss"]


def test_attempt3_reports_json_agrees_with_the_smoke_reports() -> None:
    """report.py's reading of the same logs (done on the device, beside the check) gives the same losses."""
    reports = json.loads((DATA / "attempt3" / "reports.json").read_text())
    for profile in ("dsv3-proxy-1gpu", "bert-proxy-1gpu"):
        assert reports[profile]["loss"] == train_check("attempt3", profile)["details"]["loss"]
