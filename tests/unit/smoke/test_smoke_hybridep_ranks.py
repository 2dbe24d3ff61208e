"""hybridep's GPU tier: the 2-rank dispatch/combine round trip, with a FAKE launcher (the ranks' answers
are the test's) over MIMIC torch / DeepEP / Megatron trees. The rank probe itself needs two GPUs and
real HybridEP: it ran on the device machine (tests/data/gpu/); the launcher's processes are tested in
tests/integration/smoke."""

from __future__ import annotations

from typing import Any

import pytest

from smoke.checks.hybridep import scaled
from smoke.expect import SectionError
from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite
from tests.unit.smoke.test_smoke_imports import cuda_home

# the deepseek-v3-gb200 launch's MoE shape, as buildctl writes it (tests/unit/test_smoke_host.py)
LAUNCH = {"hidden_size": 7168, "num_experts": 256, "expert_model_parallel_size": 32, "moe_router_topk": 8,
          "moe_hybridep_num_sms": 32, "seq_length": 4096, "micro_batch_size": 1}
SCALED = {"hidden_size": 7168, "experts_per_rank": 8, "topk": 8, "tokens": 1024, "num_sms": 32}


def test_scaled_down_to_two_ranks() -> None:
    assert scaled(LAUNCH) == SCALED
    small = {**LAUNCH, "hidden_size": 1024, "num_experts": 16, "expert_model_parallel_size": 8, "seq_length": 128,
             "micro_batch_size": 2}
    assert scaled(small) == {"hidden_size": 1024, "experts_per_rank": 2, "topk": 4, "tokens": 256, "num_sms": 32}
    with pytest.raises(SectionError, match="num_experts 250 is not a multiple of expert_model_parallel_size 32"):
        scaled({**LAUNCH, "num_experts": 250})
    with pytest.raises(SectionError, match=r"roundtrip\.moe_router_topk: expected a positive integer, got '8'"):
        scaled({**LAUNCH, "moe_router_topk": "8"})


def rank_ok(rank: int, *, jit_s: float = 41.5, diff: float = 0.0) -> dict[str, Any]:
    return {"ok": True, "rank": rank, "world_size": 2, "config": {}, "timing": {"jit_s": jit_s},
            "jit": {"dir": "/usr/lib/python3/dist-packages/deep_ep/build/jit", "new_files": ["a.so"]},
            "check": {"ok": True, "max_abs_diff": diff}}


def hybrid_tree(suite: Suite, gpus: int) -> dict[str, str]:
    mimic.torch(suite.site, count=gpus)
    mimic.deep_ep(suite.site, hybrid=True)
    mimic.megatron(suite.site)
    return cuda_home(suite)


def test_one_gpu_skips_the_round_trip_saying_why(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=1)
    r = suite.check("hybridep", {"roundtrip": LAUNCH}, tier="gpu", device=True, env=env)
    assert r.status == "pass", r.summary
    assert r.summary.endswith("; the 2-rank dispatch/combine round trip did not run: 1 GPU (NVIDIA H200): "
                              "HybridEPBuffer needs a process group of at least 2 ranks, one GPU each, so the "
                              "dispatch/combine round trip needs a machine with 2 GPUs or more")
    assert r.details["roundtrip"]["status"] == "skipped"
    assert suite.rank_calls == []


def test_two_gpus_run_two_ranks_with_the_scaled_shape(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=2)
    suite.rank_answers = [rank_ok(0, jit_s=40.0, diff=0.0), rank_ok(1, jit_s=41.5, diff=0.0078125)]
    r = suite.check("hybridep", {"roundtrip": {**LAUNCH, "timeout_s": 300}}, tier="gpu", device=True, env=env)
    assert r.status == "pass", r.summary
    (call,) = suite.rank_calls
    assert (call["name"], call["ranks"], call["timeout"]) == ("hybridep_roundtrip", 2, 300.0)
    assert call["args"] == {**SCALED, "timeout_s": 300.0}
    assert r.summary.endswith("; 2 ranks: HybridEPBuffer(hidden 7168, 8 experts per rank, top-8, 1024 tokens per rank), "
                              "combine(dispatch(x)) == x within bf16 tolerance (max |diff| 0.00781); JIT compile "
                              "41.5 s, kernels in /usr/lib/python3/dist-packages/deep_ep/build/jit")
    assert [rk["rank"] for rk in r.details["roundtrip"]["ranks"]] == [0, 1]


def test_round_trip_that_does_not_return_x_fails(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=2)
    bad = {**rank_ok(1), "ok": False,
           "check": {"ok": False, "max_abs_diff": 3.5, "message": ["Tensor-likes are not close!"]}}
    suite.rank_answers = [rank_ok(0), bad]
    r = suite.check("hybridep", {"roundtrip": LAUNCH}, tier="gpu", device=True, env=env)
    assert r.status == "fail"
    assert r.summary.startswith("2-rank dispatch/combine failed: rank 1: combine(dispatch(x)) differs from x "
                                "(max |diff| 3.5): Tensor-likes are not close!")


def test_rank_that_dies_or_times_out_fails_naming_the_stage(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=4)
    err = {"type": "RuntimeError", "text": "RuntimeError: NCCL error: unhandled system error", "needs_device": False}
    timeout = {"type": "Timeout", "text": "Timeout: rank 1 of probe hybridep_roundtrip had not answered after 600 s"}
    suite.rank_answers = [{"ok": False, "rank": 0, "stage": "init_process_group(nccl)", "error": err},
                          {"ok": False, "error": timeout}]
    r = suite.check("hybridep", {"roundtrip": LAUNCH}, tier="gpu", device=True, env=env)
    assert r.status == "fail"
    assert r.summary == ("2-rank dispatch/combine failed: rank 0 at init_process_group(nccl): RuntimeError: NCCL "
                         "error: unhandled system error; rank 1 at ?: Timeout: rank 1 of probe hybridep_roundtrip "
                         "had not answered after 600 s")
    assert suite.rank_calls[0]["ranks"] == 2  # two ranks, however many GPUs the machine has


def test_bad_roundtrip_section_fails_naming_the_key(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=2)
    r = suite.check("hybridep", {"roundtrip": {**LAUNCH, "timeout_s": float("inf")}}, tier="gpu", device=True, env=env)
    assert r.status == "fail"
    assert r.summary == ("expect.json is wrong for this check: checks.hybridep.roundtrip.timeout_s: expected seconds "
                         "above 0, at most 86400, got inf")


def test_build_tier_never_starts_ranks(suite: Suite) -> None:
    env = hybrid_tree(suite, gpus=2)
    r = suite.check("hybridep", {"roundtrip": LAUNCH}, env=env)
    assert r.status == "pass", r.summary
    assert suite.rank_calls == [] and "roundtrip" not in r.details
