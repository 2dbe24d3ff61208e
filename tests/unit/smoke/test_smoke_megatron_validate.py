"""megatron-args' deep part: the image's Megatron validates the baked arguments per launch profile.

megatron and torch here are MIMICS written by these tests (not Megatron-LM, not PyTorch): their
validate_args asserts what Megatron-LM effebd81 asserts on these arguments (world size divisible by the
model size, layers divisible by PP) and asks torch.cuda for the device's compute capability, as effebd81
does under --moe-grouped-gemm; the TransformerConfig mimic refuses an unknown --cuda-graph-scope.
"""

from __future__ import annotations

from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite

VALIDATING = """\
import argparse
import os


def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    parser = argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)
    parser.add_argument('--num-layers', type=int)
    parser.add_argument('--tensor-model-parallel-size', type=int, default=1)
    parser.add_argument('--pipeline-model-parallel-size', type=int, default=1)
    parser.add_argument('--moe-grouped-gemm', action='store_true')
    parser.add_argument('--cuda-graph-scope', nargs='+', default=[])
    args = parser.parse_args()
    args.rank = int(os.getenv('RANK', '0'))
    args.world_size = int(os.getenv('WORLD_SIZE', '1'))
    return args


def validate_args(args, defaults={}):
    total = args.tensor_model_parallel_size * args.pipeline_model_parallel_size
    assert args.world_size % total == 0, f"world size ({args.world_size}) is not divisible by total_model_size ({total})"
    assert args.num_layers % args.pipeline_model_parallel_size == 0, \\
        'Number of layers should be divisible by the pipeline-model-parallel size'
    if args.moe_grouped_gemm:
        import torch
        dc = torch.cuda.get_device_capability()
        assert dc[0] >= 8, "Unsupported compute capability for GroupedGEMM kernels."
    args.data_parallel_size = args.world_size // total


def core_transformer_config_from_args(args, config_class=None):
    for scope in args.cuda_graph_scope:
        assert scope in ['attn', 'mlp', 'moe', 'moe_router'], f"--cuda-graph-scope should be attn, mlp, moe, got {scope}"
"""


def setup(suite: Suite) -> None:
    mimic.megatron(suite.site, flags=())
    mimic.write(suite.site, "megatron/training/arguments.py", VALIDATING)
    mimic.torch(suite.site, available=False)


def section(*profiles: dict[str, object], archs: tuple[str, ...] = ("9.0",)) -> dict[str, object]:
    return {"args": ["--num-layers", "24"], "argv0": "pretrain_bert.py", "profiles": list(profiles),
            "gpu_archs": list(archs)}


def prof(name: str, args: list[str], world: int, *, defect: str = "") -> dict[str, object]:
    return {"name": name, "args": ["--num-layers", "24", *args], "world_size": world, "gpus_per_node": min(world, 8),
            "upstream_defect": defect}


def test_every_profile_validates_with_its_world_size(suite: Suite) -> None:
    setup(suite)
    r = suite.check("megatron-args", section(
        prof("tp8", ["--tensor-model-parallel-size", "8"], 8),
        prof("tp4pp4", ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "4"], 16)))
    assert r.status == "pass", r.summary
    assert r.summary.endswith("validate_args passes for 2 of 2 profile(s)")
    rows = {row["profile"]: row for row in r.details["validate"]}
    assert rows["tp4pp4"]["derived"]["data_parallel_size"] == 1
    assert rows["tp8"]["world_size"] == 8


def test_a_profile_validate_args_refuses_fails_the_check_with_megatrons_message(suite: Suite) -> None:
    setup(suite)
    r = suite.check("megatron-args", section(
        prof("ok", [], 8), prof("pp16", ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16"], 8)))
    assert r.status == "fail"
    assert "validate_args refuses profile(s) pp16" in r.summary
    assert "world size (8) is not divisible by total_model_size (128)" in r.summary


def test_an_upstream_defect_profile_is_refused_as_expected(suite: Suite) -> None:
    setup(suite)
    r = suite.check("megatron-args", section(
        prof("bert-340m", ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16"], 8,
             defect="examples/bert needs 128 GPUs"), prof("bert-340m-8gpu", ["--tensor-model-parallel-size", "8"], 8)))
    assert r.status == "pass", r.summary
    assert "refused as expected (upstream defect): bert-340m" in r.summary
    row = next(x for x in r.details["validate"] if x["profile"] == "bert-340m")
    assert row["expected"] == "upstream defect: examples/bert needs 128 GPUs"
    assert "not divisible" in row["error"]


def test_build_tier_answers_device_queries_from_gpu_archs_and_says_so(suite: Suite) -> None:
    setup(suite)
    r = suite.check("megatron-args", section(prof("moe", ["--moe-grouped-gemm"], 8), archs=("7.0",)))
    assert r.status == "fail"
    assert "Unsupported compute capability for GroupedGEMM kernels." in r.summary
    row = r.details["validate"][0]
    assert row["answered"] == ["torch.cuda.get_device_capability() -> (7, 0)"]
    assert row["answered_from"] == "gpu_archs 7.0 (build tier: no GPU)"

    r = suite.check("megatron-args", section(prof("moe", ["--moe-grouped-gemm"], 8), archs=("9.0",)))
    assert r.status == "pass", r.summary
    assert r.details["validate"][0]["answered"] == ["torch.cuda.get_device_capability() -> (9, 0)"]


def test_the_transformer_config_megatron_builds_is_checked_too(suite: Suite) -> None:
    setup(suite)
    r = suite.check("megatron-args", section(prof("graphs", ["--cuda-graph-scope", "attn", "moe_routr"], 8)))
    assert r.status == "fail"
    assert "--cuda-graph-scope should be attn, mlp, moe, got moe_routr" in r.summary
    assert r.details["validate"][0]["stage"] == "config"


def test_probe_leaves_the_environment_as_it_was(suite: Suite) -> None:
    import os

    setup(suite)
    before = dict(os.environ)
    suite.check("megatron-args", section(prof("tp8", ["--tensor-model-parallel-size", "8"], 8)))
    assert dict(os.environ) == before
