"""lint-args' rules for what Megatron-LM's validate_args / config classes and the variant's hardware refuse.

Each rule names the upstream assertion it stands for. The Megatron-like tree these tests write (a MIMIC
of Megatron-LM's layout, not its code) holds those assertions' messages at lines of its own and its own
accepted-value lists, so that reading them from "the pinned source" is seen to happen; without a tree,
the written citation (Megatron-LM effebd81 file:line) is reported.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.errors import ManifestErrors
from buildctl.graph import entrypoint
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.megatron import lintargs
from buildctl.megatron.lintargs import LintReport, lint

PROJECT = Path(__file__).resolve().parents[2]


def manifest(args: str, *, gpus: int = 8, variant: str = "", env: str = "", launcher: str = "",
             profiles: str = "") -> Manifest:
    text = textwrap.dedent("""\
        stack: t
        base: {alias: demo-base}
        variants:
          v:
            image: "127.0.0.1:5000/demo:1"
            platform: linux/amd64
            cuda: "13"
        """) + textwrap.indent(textwrap.dedent(variant), "    ") + (f"env: {env}\n" if env else "") + textwrap.dedent(
        """\
        entrypoint:
          workdir: /opt/megatron-lm
          command: [python, pretrain_gpt.py]
          gpus: GPUS
        """).replace("GPUS", str(gpus)) + (f"  launcher: {launcher}\n" if launcher else "") + "  args:\n" + \
        textwrap.indent(textwrap.dedent(args), "    ")
    if profiles:
        text += "  profiles:\n" + textwrap.indent(textwrap.dedent(profiles), "    ")
    return pins.load_text(text, "pins/t.yaml", base_dir=Path("/nonexistent"))


GRAPHS = "- --cuda-graph-impl: transformer_engine\n- --cuda-graph-scope: [attn, moe_router, moe_preprocess]\n"


def errors(report: LintReport, check: str | None = None) -> list[lintargs.LintFinding]:
    return [f for f in report.errors if check is None or f.check == check]


def run(m: Manifest, root: Path | None = None, profile: str | None = None) -> LintReport:
    return lint(m, m.default_variant, root, profile)


# ---------------------------------------------------------------- the cases (seed manifests before)


def test_bert_340m_as_shipped_24_layers_over_pp16_on_8_ranks() -> None:
    """examples/bert at effebd81: TP 8 x PP 16 on `torchrun --nproc_per_node 8 --nnodes 1`."""
    m = manifest("""\
        - --num-layers: 24
        - --hidden-size: 1024
        - --num-attention-heads: 16
        - --tensor-model-parallel-size: 8
        - --pipeline-model-parallel-size: 16
        """)
    r = run(m)
    by = {f.check: f for f in r.errors}
    assert set(by) == {"parallel-sizes", "layers-pp"}
    assert "24 layers do not divide by PP 16" in by["layers-pp"].message
    assert by["layers-pp"].source == "Megatron-LM effebd81 megatron/training/arguments.py:626"
    assert by["parallel-sizes"].source == "Megatron-LM effebd81 megatron/training/arguments.py:401"
    assert by["layers-pp"].at.line == 17 and by["layers-pp"].at.file == "pins/t.yaml"


def test_bert_20b_profile_starts_the_ranks_its_gpus_and_nodes_say() -> None:
    """examples/bert's 20B config needs 16 GPUs and its script starts 8: profiles decide the launcher, and
    a launcher.args that would start another number of ranks is refused where the manifest is loaded."""
    profile = ("bert-20b: {gpus: 16, nodes: 2, args: [--tensor-model-parallel-size: 4, "
               "--pipeline-model-parallel-size: 4]}\n")
    ok = manifest("- --num-layers: 48\n", launcher="{kind: torchrun}", profiles=profile)
    assert not errors(run(ok, profile="bert-20b"))
    words = entrypoint.launcher_words(ok, ok.default_variant, "bert-20b")
    assert words[:5] == ("torchrun", "--nproc_per_node", "8", "--nnodes", "2")
    with pytest.raises(ManifestErrors) as info:
        manifest("- --num-layers: 48\n", launcher="{kind: torchrun, args: [--nproc_per_node, '8']}", profiles=profile)
    assert "--nproc_per_node comes from the profile" in str(info.value.errors[0])


def test_cuda_graph_scope_with_a_misspelt_module() -> None:
    m = manifest("""\
        - --cuda-graph-impl: transformer_engine
        - --cuda-graph-scope: [attn, moe_routr, moe_preprocess]
        """)
    (f,) = errors(run(m), "list-values")
    assert f.value == "moe_routr" and f.suggestion == "did you mean 'moe_router'?"
    assert f.source == "Megatron-LM effebd81 megatron/core/transformer/transformer_config.py:1592"
    assert "written in buildctl" in f.message  # no tree: the written list


HOPPER_GB200_LAUNCH = """\
    - --num-layers: 8
    - --expert-model-parallel-size: 32
    - --num-experts: 256
    - --moe-token-dispatcher-type: flex
    - --moe-flex-dispatcher-backend: hybridep
    - --moe-router-dtype: fp32
    - --fp8-format: e4m3
    - --fp8-recipe: mxfp8
    """


def test_hopper_with_the_gb200_launch_mxfp8_and_a_domain_of_72() -> None:
    m = manifest(HOPPER_GB200_LAUNCH, gpus=256, env="{NVLINK_DOMAIN_SIZE: '72'}",
                 variant='gpu_archs: ["9.0"]\nnvlink_domain: 8\n')
    r = run(m)
    fp8 = errors(r, "fp8-hardware")
    assert len(fp8) == 1 and "Device compute capability 10.0 or higher required for MXFP8 execution." in fp8[0].message
    assert fp8[0].source == "TransformerEngine v2.9 (70f53666) + d2945c6 transformer_engine/pytorch/quantization.py:67"
    (dom,) = errors(r, "hybridep-domain")
    assert "NVLINK_DOMAIN_SIZE=72, but NVLink joins 8 GPUs" in dom.message
    # A domain of 8 with EP 32: the dispatch group spans 4 domains -> HybridEP's multinode path, refused.
    m8 = manifest(HOPPER_GB200_LAUNCH.replace("mxfp8", "tensorwise"), gpus=256, env="{NVLINK_DOMAIN_SIZE: '8'}",
                  variant='gpu_archs: ["9.0"]\nnvlink_domain: 8\n')
    (multi,) = errors(run(m8))
    assert multi.check == "hybridep-domain" and "ETP 1 x EP 32 = 32 spans more than one NVLink domain" in multi.message
    assert multi.source == "DeepEP 3f601f7 setup.py:21"


def test_gb200_launch_on_nvl72_passes_the_hardware_rules() -> None:
    m = manifest(HOPPER_GB200_LAUNCH, gpus=256, env="{NVLINK_DOMAIN_SIZE: '72'}",
                 variant='gpu_archs: ["10.0"]\nnvlink_domain: 72\n')
    assert not errors(run(m))


@pytest.mark.parametrize(("recipe", "arch", "cuda", "bad"), [
    ("delayed", "9.0", "13", False), ("tensorwise", "9.0", "13", False), ("blockwise", "9.0", "13", False),
    ("blockwise", "8.0", "13", True), ("mxfp8", "9.0", "13", True), ("mxfp8", "10.0", "13", False),
    ("mxfp8", "12.0", "13", True), ("delayed", "8.0", "13", True),
])
def test_fp8_recipe_against_compute_capability(recipe: str, arch: str, cuda: str, bad: bool) -> None:
    m = manifest(f"- --fp8-format: e4m3\n- --fp8-recipe: {recipe}\n", variant=f'gpu_archs: ["{arch}"]\n')
    assert bool(errors(run(m), "fp8-hardware")) is bad


def test_fp8_recipe_without_fp8_format_is_a_warning_not_a_hardware_error() -> None:
    m = manifest("- --fp8-recipe: mxfp8\n", variant='gpu_archs: ["9.0"]\n')
    r = run(m)
    assert not r.errors
    assert [w.check for w in r.warnings] == ["fp8-hardware"]


# ------------------------------------------------------------------------------- validate_args rules


@pytest.mark.parametrize(("args", "check", "ok"), [
    # layers over PP, with the embedding / loss counted as layers
    ("- --num-layers: 23\n- --pipeline-model-parallel-size: 4\n", "layers-pp", False),
    ("- --num-layers: 23\n- --pipeline-model-parallel-size: 4\n- --account-for-embedding-in-pipeline-split\n",
     "layers-pp", True),
    ("- --num-layers: 22\n- --pipeline-model-parallel-size: 4\n- --account-for-embedding-in-pipeline-split\n"
     "- --account-for-loss-in-pipeline-split\n", "layers-pp", True),
    ("- --num-layers: 23\n- --pipeline-model-parallel-size: 4\n- --decoder-first-pipeline-num-layers: 5\n",
     "layers-pp", True),
    # virtual pipeline stages
    ("- --num-layers: 24\n- --pipeline-model-parallel-size: 4\n- --num-layers-per-virtual-pipeline-stage: 4\n",
     "vpp", False),  # 6 layers per stage do not divide by 4
    ("- --num-layers: 24\n- --pipeline-model-parallel-size: 4\n- --num-layers-per-virtual-pipeline-stage: 3\n",
     "vpp", True),
    ("- --num-layers: 4\n- --pipeline-model-parallel-layout: 'Et|t|t|tL'\n", "vpp", False),  # VPP 4 on PP 1
    ("- --num-layers: 24\n- --pipeline-model-parallel-size: 2\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --no-overlap-p2p-communication\n", "vpp", False),  # needs PP > 2 without p2p overlap
    # attention sizes
    ("- --num-attention-heads: 16\n- --hidden-size: 1000\n", "attention-sizes", False),
    ("- --num-attention-heads: 16\n- --hidden-size: 1000\n- --kv-channels: 64\n", "attention-sizes", True),
    ("- --tensor-model-parallel-size: 4\n- --num-attention-heads: 16\n- --group-query-attention\n"
     "- --num-query-groups: 2\n", "attention-sizes", False),
    ("- --tensor-model-parallel-size: 2\n- --num-attention-heads: 16\n- --group-query-attention\n"
     "- --num-query-groups: 2\n", "attention-sizes", True),
    ("- --context-parallel-size: 2\n- --seq-length: 4098\n", "attention-sizes", False),
    ("- --seq-length: 4096\n- --max-position-embeddings: 2048\n", "attention-sizes", False),
    # sequence parallel
    ("- --tp-comm-overlap\n", "sequence-parallel", False),
    ("- --tensor-model-parallel-size: 2\n- --sequence-parallel\n- --tp-comm-overlap\n", "sequence-parallel", True),
    # recompute
    ("- --distribute-saved-activations\n", "recompute", False),
    ("- --recompute-granularity: selective\n- --recompute-method: uniform\n", "recompute", False),
    ("- --tensor-model-parallel-size: 2\n- --distribute-saved-activations\n- --recompute-granularity: full\n"
     "- --recompute-num-layers: 1\n"
     "- --recompute-method: uniform\n", "recompute", True),
    # experts
    ("- --expert-model-parallel-size: 8\n", "experts", False),
    ("- --expert-model-parallel-size: 8\n- --num-experts: 64\n- --fp16\n", "experts", False),
    ("- --expert-model-parallel-size: 8\n- --num-experts: 64\n- --bf16\n", "experts", True),
    # learning rate, list values, grouped gemm
    ("- --lr: '1e-4'\n- --min-lr: '1e-3'\n", "learning-rate", False),
    ("- --recompute-granularity: selective\n- --recompute-modules: [core_attn, mlpp]\n", "list-values", False),
    ("- --recompute-granularity: selective\n- --recompute-modules: [core_attn, moe_act]\n", "list-values", False),
    ("- --recompute-granularity: selective\n- --recompute-modules: [core_attn, moe_act]\n- --moe-grouped-gemm\n"
     "- --bf16\n", "list-values", True),
    ("- --cuda-graph-impl: local\n- --cuda-graph-scope: [attn]\n", "list-values", False),
    ("- --cuda-graph-impl: transformer_engine\n- --cuda-graph-scope: [moe, moe_router]\n", "list-values", False),
    ("- --moe-grouped-gemm\n", "grouped-gemm", False),
    ("- --moe-grouped-gemm\n- --bf16\n", "grouped-gemm", True),
    # moe_preprocess graphs with the alltoall dispatcher sync too late for padding or dropping (H200 run,
    # 2026-12-02: the first step stopped at token_dispatcher.py:595-598; TransformerConfig had let it through)
    (GRAPHS + "- --moe-token-dispatcher-type: alltoall\n- --moe-router-padding-for-quantization\n", "list-values", False),
    (GRAPHS + "- --moe-token-dispatcher-type: alltoall\n- --moe-router-padding-for-fp8\n", "list-values", False),
    (GRAPHS + "- --moe-token-dispatcher-type: alltoall\n- --moe-expert-capacity-factor: '1.0'\n", "list-values", False),
    (GRAPHS + "- --moe-token-dispatcher-type: alltoall\n", "list-values", True),
    (GRAPHS + "- --moe-token-dispatcher-type: flex\n- --moe-router-padding-for-quantization\n", "list-values", True),
    (GRAPHS.replace(", moe_preprocess", "") + "- --moe-token-dispatcher-type: alltoall\n"
     "- --moe-router-padding-for-quantization\n", "list-values", True),
])
def test_validate_args_rules(args: str, check: str, ok: bool) -> None:
    r = run(manifest(args))
    found = errors(r, check)
    assert (not found) is ok, [str(f) for f in r.findings]
    for f in found:
        assert f.source.startswith("Megatron-LM effebd81 megatron/"), f.source


def test_sequence_parallel_with_tp1_is_a_warning_as_megatron_turns_it_off() -> None:
    r = run(manifest("- --sequence-parallel\n"))
    assert not r.errors
    (w,) = [w for w in r.warnings if w.check == "sequence-parallel"]
    assert w.source == "Megatron-LM effebd81 megatron/training/arguments.py:951"


def test_tensor_parallel_before_blackwell_needs_max_connections_1() -> None:
    args = "- --tensor-model-parallel-size: 2\n"
    hopper = 'gpu_archs: ["9.0"]\n'
    (f,) = errors(run(manifest(args, variant=hopper)), "max-connections")
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in f.message and "unset" in f.message
    assert not errors(run(manifest(args, variant=hopper, env="{CUDA_DEVICE_MAX_CONNECTIONS: '1'}")))
    assert not errors(run(manifest(args, variant='gpu_archs: ["10.0"]\n')))


# ------------------------------------------------------------------- reading the pinned source

ARGUMENTS = """\
    import argparse

    def parse_args():
        parser = argparse.ArgumentParser(allow_abbrev=False)
        parser.add_argument('--num-layers', type=int)
        parser.add_argument('--pipeline-model-parallel-size', type=int, default=1)
        parser.add_argument('--cuda-graph-impl', default='none')
        parser.add_argument('--cuda-graph-scope', nargs='+', default=[])
        return parser.parse_args()

    def validate_args(args, defaults={}):
        # moved down by a few lines in this tree
        pass
        if args.num_layers % args.pipeline_model_parallel_size:
            raise AssertionError('Number of layers should be divisible by the pipeline-model-parallel size')
"""

CONFIG = """\
    class TransformerConfig:
        def __post_init__(self):
            for scope in self.cuda_graph_scope:
                assert scope in [
                    'attn',
                    'full_layer',
                ], (
                    "--cuda-graph-scope should be attn, mlp, moe, moe_router, moe_preprocess, "
                    f"or mamba, got {self.cuda_graph_scope}."
                )
"""


@pytest.fixture
def megatron(tmp_path: Path) -> Path:
    root = tmp_path / "megatron-lm"
    for rel, text in {"megatron/training/arguments.py": ARGUMENTS,
                      "megatron/core/transformer/transformer_config.py": CONFIG}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_locations_and_accepted_names_are_read_from_the_pinned_source(megatron: Path) -> None:
    m = manifest("""\
        - --num-layers: 23
        - --pipeline-model-parallel-size: 4
        - --cuda-graph-impl: transformer_engine
        - --cuda-graph-scope: [full_layer, mlp]
        """)
    r = run(m, megatron)
    assert not [f for f in r.findings if f.check == "unknown-flag"]
    layers = errors(r, "layers-pp")[0]
    assert layers.source == "megatron/training/arguments.py:15 (read from the pinned source)"
    (scope,) = errors(r, "list-values")
    assert scope.value == "mlp"  # this tree accepts full_layer and not mlp: its list, not the written one
    assert "megatron/core/transformer/transformer_config.py:4 (read from the pinned source)" in scope.message


def test_json_lists_rule_flag_value_source_and_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "pins").mkdir()
    text = (PROJECT / "pins" / "megatron-bert.yaml").read_text()
    (tmp_path / "pins" / "megatron-bert.yaml").write_text(text)
    rc = cli.main(["--project", str(tmp_path), "lint-args", "megatron-bert", "--profile", "bert-340m", "--json"])
    assert rc == 13
    out = json.loads(capsys.readouterr().out)
    f = next(x for x in out["findings"] if x["rule"] == "layers-pp")
    assert f["flag"] == "--pipeline-model-parallel-size" and f["value"] == "16"
    assert f["source"].endswith("megatron/training/arguments.py:626") and f["fix"].startswith("choose PP among")
    assert f["file"].endswith("megatron-bert.yaml") and f["line"]


# ------------------------------------------------------------------------------------ seed stacks


@pytest.mark.parametrize("stack", ["deepseek-v3-gb200", "megatron-bert", "verl-vllm"])
def test_seed_stacks_have_no_errors_but_the_upstream_defect(stack: str) -> None:
    m = pins.load(PROJECT / "pins" / f"{stack}.yaml")
    assert m.entrypoint is not None
    for v in m.variants:
        for name, launch in entrypoint.launches(m, v).items():
            r = lint(m, v, None, name)
            if launch.defect:
                assert r.errors, f"{stack}/{v.name}/{name} is kept as an upstream defect and must show it"
            else:
                assert not r.errors, f"{stack}/{v.name}/{name}: {[str(e) for e in r.errors]}"


@pytest.mark.parametrize("value", ["0", "-8", "2000000"])
def test_nvlink_domain_is_a_positive_bounded_count_naming_the_key(value: str) -> None:
    with pytest.raises(ManifestErrors) as info:
        manifest("- --num-layers: 8\n", variant=f"nvlink_domain: {value}\n")
    (err,) = info.value.errors
    assert str(err).startswith("pins/t.yaml:8:20: variants.v.nvlink_domain: must be more than 0"), str(err)
