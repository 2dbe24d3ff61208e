"""What Megatron-LM, Transformer Engine and DeepEP reject after parsing, as data (pure; source read as text).

lintargs's consistency rules each name the upstream assertion they stand for: a ``Cite`` holds the file
and line at the commit the rule was written from, and a piece of the assertion's message. Where the
pinned Megatron-LM tree is at hand, ``where`` finds that message in it and reports the line read from
the pinned source; otherwise (or where the message moved away) it reports the written citation and says
so. Lists of accepted values (``--cuda-graph-scope``, ``--recompute-modules``) are read from the pinned
tree's own literals where it has them (``accepted_values``), with the written list as the fallback.

Facts about Transformer Engine and DeepEP (which recipe needs which compute capability, HybridEP's
NVLink domain) are written here with their upstream file and line: buildctl does not scan those trees.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The commits the written citations come from.
MEGATRON_AT = "effebd81"
TE_AT = "v2.9 (70f53666) + d2945c6"
DEEPEP_AT = "3f601f7"


@dataclass(frozen=True, kw_only=True)
class Cite:
    """An upstream assertion: ``file`` and ``line`` at ``at``, and a fragment of its message or code."""

    file: str
    line: int
    text: str
    at: str = MEGATRON_AT
    project: str = "Megatron-LM"


ARGS = "megatron/training/arguments.py"
TCONF = "megatron/core/transformer/transformer_config.py"
MPCONF = "megatron/core/model_parallel_config.py"

# Megatron-LM @ effebd81 (validate_args and the config classes' __post_init__).
WORLD_DIVISIBLE = Cite(file=ARGS, line=401, text="is not divisible by total_model_size")
LAYERS_PP = Cite(file=ARGS, line=626, text="Number of layers should be divisible by the pipeline-model-parallel size")
LAYERS_PP_VPP = Cite(file=ARGS, line=599, text="number of layers of the model must be divisible pipeline model parallel size")
LAYERS_PER_VSTAGE = Cite(file=ARGS, line=603,
                         text="number of layers per pipeline stage must be divisible number of layers per virtual")
VPP_NEEDS_PP = Cite(file=ARGS, line=631, text="When interleaved schedule is used, pipeline-model-parallel size")
VPP_NEEDS_PP3 = Cite(file=ARGS, line=636, text="pipeline-model-parallel size should be greater than 2")
VPP_UNEVEN = Cite(file=ARGS, line=586, text="please use --num-virtual-stages-per-pipeline-rank")
ONE_VPP_SOURCE = Cite(file=ARGS, line=563, text="No more than one of the following arguments can be set")
LAYOUT_STAGES = Cite(file=ARGS, line=576, text="The length of pipeline_model_parallel_layout must be divisible")
HIDDEN_HEADS = Cite(file=ARGS, line=866, text="assert args.hidden_size % args.num_attention_heads == 0")
SEQ_CP = Cite(file=ARGS, line=871, text="seq-length should be a multiple of 2 * context-parallel-size")
MAX_POS = Cite(file=ARGS, line=883, text="must be greater than ")
MIN_LR = Cite(file=ARGS, line=888, text="assert args.min_lr <= args.lr")
GROUPED_GEMM_BF16 = Cite(file=ARGS, line=903, text="Currently GroupedGEMM for MoE only supports bf16 dtype.")
GROUPED_GEMM_CC = Cite(file=ARGS, line=905, text="Unsupported compute capability for GroupedGEMM kernels.")
DISTRIBUTE_TP = Cite(file=ARGS, line=926, text="can distribute ")
DISTRIBUTE_FULL = Cite(file=ARGS, line=930, text="distributed recompute activations is only")
DISTRIBUTE_METHOD = Cite(file=ARGS, line=933, text="for distributed recompute activations to work you")
SELECTIVE_METHOD = Cite(file=ARGS, line=942, text="recompute method is not yet supported for")
SP_DISABLED = Cite(file=ARGS, line=951, text="Disabling sequence parallelism because tensor model parallelism is disabled")
TP_COMM_OVERLAP_SP = Cite(file=ARGS, line=957, text="Tensor parallel communication/GEMM overlap can happen only when")
MAX_CONNECTIONS = Cite(file=ARGS, line=986,
                       text="Using tensor model parallelism or context parallelism require setting the environment")
EP_NEEDS_EXPERTS = Cite(file=ARGS, line=1064, text="num_experts must be non None to use expert model parallelism")
EP_EXPERTS = Cite(file=ARGS, line=1066, text="Number of experts should be a multiple of expert model parallel_size.")
EP_FP16 = Cite(file=ARGS, line=1068, text="Expert parallelism is not supported with fp16 training.")
HEADS_TP = Cite(file=TCONF, line=829, text="num_query_groups ({self.num_query_groups}) must be a multiple of")
SP_NEEDS_TP = Cite(file=MPCONF, line=363, text="Cannot use sequence parallelism without tensor parallelism")
RECOMPUTE_MODULES = Cite(file=TCONF, line=1083, text="Invalid choices for recompute_modules")
MOE_ACT_GROUPED = Cite(file=TCONF, line=1089, text="moe_act in recompute_modules is only supported with moe_grouped_gemm.")
GRAPH_SCOPE = Cite(file=TCONF, line=1592, text="--cuda-graph-scope should be attn, mlp, moe")
GRAPH_SCOPE_LOCAL = Cite(file=TCONF, line=1573, text="For local cuda graph implementation, the only valid value")
GRAPH_SCOPE_MOE = Cite(file=TCONF, line=1598, text="cuda_graph_scope must not contain both moe and moe_router.")
# The alltoall dispatcher with a moe_preprocess CUDA graph copies its counts to the host before the EP all-to-all
# (token_dispatcher.py:446-452), but router padding or token dropping needs them before permutation 1
# (525-529): the first forward step stops at this assert. TransformerConfig's own check of the same case
# (transformer_config.py:1622-1630) reads only the old alias moe_router_padding_for_fp8, so
# --moe-router-padding-for-quantization passes validation and fails in training (seen on the H200, 2026-12-02).
TD = "megatron/core/transformer/moe/token_dispatcher.py"
GRAPH_PREPROCESS_SYNC = Cite(file=TD, line=598, text="cuda_sync_point must be after cuda_dtoh_point.")

# Transformer Engine @ v2.9 + d2945c6: transformer_engine/pytorch/quantization.py (the same lines at both).
TE_Q = "transformer_engine/pytorch/quantization.py"
TE_FP8 = Cite(file=TE_Q, line=52, text="Device compute capability 8.9 or higher required for FP8 execution.",
              at=TE_AT, project="TransformerEngine")
TE_MXFP8 = Cite(file=TE_Q, line=67, text="Device compute capability 10.0 or higher required for MXFP8 execution.",
                at=TE_AT, project="TransformerEngine")
TE_MXFP8_12 = Cite(file=TE_Q, line=64, text="MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet.",
                   at=TE_AT, project="TransformerEngine")
TE_NVFP4 = Cite(file=TE_Q, line=76, text="Device compute capability 10.0 or higher required for NVFP4 execution.",
                at=TE_AT, project="TransformerEngine")
TE_BLOCK = Cite(file=TE_Q, line=85, text="FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9.",
                at=TE_AT, project="TransformerEngine")

# DeepEP hybrid-ep @ 3f601f7.
HYBRIDEP_DOMAIN = Cite(file="deep_ep/hybrid_ep_buffer.py", line=64,
                       text="num_of_ranks_per_node = min(nvlink_domain_size // rank_stride, self.group_size)",
                       at=DEEPEP_AT, project="DeepEP")
HYBRIDEP_MULTINODE = Cite(file="setup.py", line=21, text="Multinode is not supported yet", at=DEEPEP_AT,
                          project="DeepEP")

# Written fallbacks of the accepted-value lists (Megatron-LM @ effebd81).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")  # transformer_config.py:1584-1591 (assert scope in [...])
RECOMPUTE_MODULE_NAMES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                          "shared_experts")  # transformer_config.py:1072-1080 (allowed_modules)


@dataclass(frozen=True, kw_only=True)
class Where:
    """Where an assertion is: ``text`` for a report, ``read`` True when found in the tree at hand."""

    text: str
    read: bool


def where(cite: Cite, root: Path | None) -> Where:
    """The assertion's location: read from the pinned tree when it is at hand (Megatron-LM only)."""
    written = f"{cite.project} {cite.at} {cite.file}:{cite.line}"
    if root is None or cite.project != "Megatron-LM":
        return Where(text=written, read=False)
    line = _find(root / cite.file, cite.text, near=cite.line)
    if line is None:
        return Where(text=f"{written} (not found in the pinned tree {root}: written in buildctl)", read=False)
    return Where(text=f"{cite.file}:{line} (read from the pinned source)", read=True)


def _find(path: Path, text: str, near: int = 0) -> int | None:
    """The line holding ``text``; where several do (an assertion repeated), the one nearest ``near``."""
    hits = [i for i, ln in enumerate(_lines(path), 1) if text in ln]
    return min(hits, key=lambda i: (abs(i - near), i)) if hits else None


@lru_cache(maxsize=32)
def _lines(path: Path) -> tuple[str, ...]:
    try:
        return tuple(path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return ()


@dataclass(frozen=True, kw_only=True)
class Accepted:
    values: tuple[str, ...]
    source: str  # where they were read, or the written citation


def accepted_values(root: Path | None, what: str) -> Accepted:
    """The names Megatron accepts for ``cuda_graph_scope`` or ``recompute_modules``.

    Read from the pinned transformer_config.py where it has the literal (``assert scope in [...]`` in the
    loop over ``self.cuda_graph_scope``; ``allowed_modules = {...}``), else the written list.
    """
    fallback = CUDA_GRAPH_SCOPES if what == "cuda_graph_scope" else RECOMPUTE_MODULE_NAMES
    cite = GRAPH_SCOPE if what == "cuda_graph_scope" else RECOMPUTE_MODULES
    written = Accepted(values=fallback, source=f"{cite.project} {cite.at} {cite.file}:{cite.line} (written in buildctl)")
    if root is None:
        return written
    found = _literal(root / TCONF, what)
    if found is None:
        return Accepted(values=fallback, source=f"{written.source}; not found in {root / TCONF}")
    values, line = found
    return Accepted(values=values, source=f"{TCONF}:{line} (read from the pinned source)")


def _literal(path: Path, what: str) -> tuple[tuple[str, ...], int] | None:
    text = "\n".join(_lines(path))
    if not text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None

    def strings(node: ast.expr) -> tuple[str, ...] | None:
        if isinstance(node, ast.List | ast.Set | ast.Tuple) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            return tuple(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
        return None

    # recompute_modules: the ``allowed_modules`` literal nearest before the assertion's message (the file
    # has another ``allowed_modules`` for activation offloading).
    limit = _find(path, RECOMPUTE_MODULES.text) or 0
    best: tuple[tuple[str, ...], int] | None = None
    for node in ast.walk(tree):
        if (what == "recompute_modules" and isinstance(node, ast.Assign) and node.lineno < limit
                and any(isinstance(t, ast.Name) and t.id == "allowed_modules" for t in node.targets)):
            got = strings(node.value)
            if got and (best is None or node.lineno > best[1]):
                best = got, node.lineno
        if what == "cuda_graph_scope" and isinstance(node, ast.For):
            it = node.iter
            if isinstance(it, ast.Attribute) and it.attr == "cuda_graph_scope":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.In):
                        got = strings(sub.comparators[0])
                        if got:
                            return got, sub.lineno
    return best
