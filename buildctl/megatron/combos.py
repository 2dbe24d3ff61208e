"""What validate_args and TransformerConfig refuse about flags given together (or missing together), as a
table of rules: each names the flag it reports, the upstream assertion (``rules.Cite``, file:line at
effebd81), when it fires (a predicate over the launch's arguments, its environment and its GPUs) and
the fix. Pure: asserts._Consistency.combinations runs them; the predicates read the launch through
consistency._Checks.

A rule here must fire only where the pinned Megatron-LM refuses at start: scripts/megatron-validate.py
holds the table against the real validate_args over the mutation set (tests/data/megatron-mutations.yaml).
The checks that cannot be decided from the launch alone are listed in docs/reference/lint-args.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from buildctl.megatron.consistency import _Checks as C
from buildctl.megatron.consistency import moe_layer_pattern
from buildctl.megatron.rules import ARGS, MPCONF, TCONF, Cite


@dataclass(frozen=True, kw_only=True)
class Combo:
    flag: str  # the flag the finding names (its location is the one reported)
    cite: Cite
    when: Callable[[C], bool]
    message: str
    fix: str
    check: str = "combination"


# ----------------------------------------------------------------------------- reading the launch


def given(checks: C, *options: str) -> bool:
    """Any of ``options`` is on the command line (a store_false flag counts as given)."""
    return any(checks.last(o) is not None for o in options)


def on(checks: C, option: str) -> bool:
    """A store_true flag is on (a --no-... flag of that kind is read as given: without the source's table the
    lint cannot tell it from a store_false one)."""
    return given(checks, option) if option.startswith("--no-") else checks.flag_on(option)


def text(checks: C, option: str, default: str | None = None) -> str | None:
    v = checks.value(option)
    return default if v is None else v


def values(checks: C, option: str) -> tuple[str, ...]:
    u = checks.last(option)
    return u.values if u is not None else ()


def num(checks: C, option: str, default: float) -> float:
    v = checks.value(option)
    if v is None:
        return default
    try:
        return float(v)
    except ValueError:
        return default  # the type check reports it


def size(checks: C, option: str) -> int:
    return checks.integer(option, 1) or 1


def ckpt_format(checks: C) -> str:
    return text(checks, "--ckpt-format", "torch_dist") or "torch_dist"


def dist_ckpt(checks: C) -> bool:
    """update_use_dist_ckpt (arguments.py): every format but torch is a distributed checkpoint."""
    return ckpt_format(checks) != "torch"


def dist_opt(checks: C) -> bool:
    return on(checks, "--use-distributed-optimizer")


def fsdp2(checks: C) -> bool:
    return on(checks, "--use-torch-fsdp2")


def mfsdp(checks: C) -> bool:
    return on(checks, "--use-megatron-fsdp")


def legacy(checks: C) -> bool:
    return on(checks, "--use-legacy-models")


def fp8(checks: C) -> bool:
    return checks.value("--fp8-format") is not None


def fp4(checks: C) -> bool:
    return checks.value("--fp4-format") is not None


def fp16(checks: C) -> bool:
    return on(checks, "--fp16")


def bf16(checks: C) -> bool:
    return on(checks, "--bf16")


def graph_impl(checks: C) -> str:
    impl = text(checks, "--cuda-graph-impl", "none") or "none"
    if on(checks, "--enable-cuda-graph"):
        return "local"
    if on(checks, "--external-cuda-graph"):
        return "transformer_engine"
    return impl


def granularity(checks: C) -> str | None:
    g = text(checks, "--recompute-granularity")
    return "selective" if on(checks, "--recompute-activations") else g


def position_type(checks: C) -> str:
    return "rope" if on(checks, "--use-rotary-position-embeddings") else (
        text(checks, "--position-embedding-type", "learned_absolute") or "learned_absolute")


def train_iters(checks: C) -> bool:
    return bool(num(checks, "--train-iters", 0))


def train_samples(checks: C) -> bool:
    return bool(num(checks, "--train-samples", 0))


def experts(checks: C) -> int:
    return int(num(checks, "--num-experts", 0))


def tp(checks: C) -> int:
    return size(checks, "--tensor-model-parallel-size")


def pp(checks: C) -> int:
    return size(checks, "--pipeline-model-parallel-size")


def ep(checks: C) -> int:
    return size(checks, "--expert-model-parallel-size")


def sequence_parallel(checks: C) -> bool:
    """validate_args turns sequence parallelism off at TP 1 (arguments.py:951)."""
    return on(checks, "--sequence-parallel") and tp(checks) > 1


def dispatcher(checks: C) -> str:
    return text(checks, "--moe-token-dispatcher-type", "allgather") or "allgather"


def nan_check(checks: C) -> bool:
    """check_for_nan_in_loss_and_grad after validate_args: on unless turned off, or fp16 with dynamic loss scaling."""
    return not given(checks, "--no-check-for-nan-in-loss-and-grad") and not (fp16(checks) and not num(checks, "--loss-scale", 0))


def vpp(checks: C) -> bool:
    return checks.virtual_stages() is not None


def uneven(checks: C) -> tuple[int | None, int | None, int, int] | None:
    """An uneven first/last stage without a layout: (first, last, middle layers, middle stages), or None."""
    if given(checks, "--pipeline-model-parallel-layout"):
        return None
    first = checks.integer("--decoder-first-pipeline-num-layers", None) if given(
        checks, "--decoder-first-pipeline-num-layers") else None
    last = checks.integer("--decoder-last-pipeline-num-layers", None) if given(
        checks, "--decoder-last-pipeline-num-layers") else None
    layers = checks.integer("--num-layers", None)
    if (first is None and last is None) or layers is None:
        return None
    middle = layers - (first or 0) - (last or 0)
    stages = pp(checks) - (first is not None) - (last is not None)
    return first, last, middle, stages


def vpp_size(checks: C) -> int | None:
    return checks.virtual_stages()


def selective_modules(checks: C) -> tuple[str, ...]:
    """--recompute-modules as TransformerConfig sees them under selective recompute (default core_attn)."""
    if granularity(checks) != "selective":
        return ()
    return values(checks, "--recompute-modules") if given(checks, "--recompute-modules") else ("core_attn",)


def _uneven_bad(checks: C, which: str) -> bool:
    u = uneven(checks)
    if u is None:
        return False
    first, last, middle, stages = u
    v = vpp_size(checks)
    n = first if which == "first" else last
    if which in ("first", "last"):
        return n is not None and n <= 0
    if which in ("first-vpp", "last-vpp"):
        n = first if which == "first-vpp" else last
        return n is not None and n > 0 and v is not None and n % v != 0
    if which == "middle":
        return stages > 0 and middle % stages != 0
    return stages > 0 and middle % stages == 0 and v is not None and (middle // stages) % v != 0


def _split_vpp_bad(checks: C, per_rank: bool) -> bool:
    """--account-for-embedding/loss-in-pipeline-split with virtual stages (no layout, no uneven stage)."""
    if uneven(checks) is not None or given(checks, "--pipeline-model-parallel-layout"):
        return False
    if not (on(checks, "--account-for-embedding-in-pipeline-split") or on(checks, "--account-for-loss-in-pipeline-split")):
        return False
    v, layers = vpp_size(checks), checks.split_layers()
    if v is None or layers is None:
        return False
    if not per_rank:
        return layers % pp(checks) != 0
    return layers % pp(checks) == 0 and (layers // pp(checks)) % v != 0


def rl_steps(checks: C) -> int | None:
    """Training iterations per inference iteration of --perform-rl-step (arguments.py:421-431), when the
    global batch divides the samples generated per inference iteration."""
    gbs = checks.integer("--global-batch-size", None)
    samples = rl_samples(checks)
    if not gbs or gbs <= 0 or samples % gbs:
        return None
    return samples // gbs


def rl_samples(checks: C) -> int:
    return (int(num(checks, "--grpo-prompts-per-step", 32)) * int(num(checks, "--grpo-group-size", 2))
            * int(num(checks, "--grpo-iterations", 2)))


def graph_scope(checks: C) -> tuple[str, ...]:
    return values(checks, "--cuda-graph-scope") if graph_impl(checks) != "none" else ()


def graph_recompute(checks: C) -> tuple[str, ...] | None:
    """The recomputed modules TransformerConfig holds against per-layer CUDA graph scopes (transformer_config.py
    1632-1668), or None where it does not (no graphs, no selective recompute, a full-iteration graph)."""
    scope = graph_scope(checks)
    if graph_impl(checks) == "none" or granularity(checks) != "selective" or not scope or list(scope) == ["full_iteration"]:
        return None
    return selective_modules(checks)


def all_moe_layers(checks: C) -> bool:
    """Every layer is an MoE layer (--moe-layer-freq 1, the default, or a pattern without 0)."""
    text_ = checks.value("--moe-layer-freq")
    if text_ is None:
        return True
    try:
        pattern = moe_layer_pattern(text_)
    except ValueError:
        return False
    return pattern == 1 if isinstance(pattern, int) else 0 not in pattern


def bf16_layers_bad(checks: C, option: str) -> bool:
    if not (fp8(checks) and on(checks, "--first-last-layers-bf16")):
        return False
    layers = checks.integer("--num-layers", None)
    n = checks.integer(option, 1)
    return layers is not None and n is not None and not 0 <= n <= layers // pp(checks)


def gdn(checks: C) -> bool:
    return text(checks, "--linear-attention-type") == "gated_delta_net"


def mla(checks: C) -> bool:
    return on(checks, "--multi-latent-attention")


def rope_fusion(checks: C) -> bool:
    return not given(checks, "--no-rope-fusion")


def no_rope_bad(checks: C) -> bool:
    """--no-rope-freq N must divide the layers; a list must have one entry per layer (transformer_config.py 1802-1814)."""
    freq, layers = checks.value("--no-rope-freq"), checks.integer("--num-layers", None)
    if freq is None or layers is None:
        return False
    try:
        pattern = moe_layer_pattern(freq)
    except ValueError:
        return False
    if isinstance(pattern, int):
        return pattern > 0 and layers % pattern != 0
    return len(pattern) != layers


def activation(checks: C) -> str:
    """The activation core_transformer_config_from_args picks (arguments.py:1298-1311; TransformerConfig's default gelu)."""
    if on(checks, "--squared-relu"):
        return "squared_relu"
    if on(checks, "--quick-geglu"):
        return "quick_gelu"
    return "silu" if on(checks, "--swiglu") else "gelu"


def bias_act_fusion(checks: C) -> bool:
    """bias_activation_fusion: the SwiGLU or GeLU fusion flag, the latter off without biases (arguments.py:1000)."""
    if on(checks, "--swiglu"):
        return not given(checks, "--no-bias-swiglu-fusion")
    return not given(checks, "--no-bias-gelu-fusion") and not given(checks, "--disable-bias-linear")


_DETERMINISTIC_NCCL = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")


def _cite(line: int, fragment: str, file: str = ARGS) -> Cite:
    return Cite(file=file, line=line, text=fragment)


def _r(flag: str, line: int, fragment: str, when: Callable[[C], bool], message: str, fix: str, *,
       file: str = ARGS, check: str = "combination") -> Combo:
    return Combo(flag=flag, cite=_cite(line, fragment, file), when=when, message=message, fix=fix, check=check)


# ------------------------------------------------------------------------------ validate_args

VALIDATE_ARGS: tuple[Combo, ...] = (
    _r("--squared-relu", 1306, "assert not args.swiglu", lambda c: on(c, "--squared-relu") and on(c, "--swiglu"),
       "--squared-relu with --swiglu (core_transformer_config_from_args)", "keep one activation"),
    _r("--quick-geglu", 1309, "assert not args.swiglu", lambda c: on(c, "--quick-geglu") and on(c, "--swiglu"),
       "--quick-geglu with --swiglu (core_transformer_config_from_args)", "keep one activation"),
    _r("--rope-type", 1325, "Common attention only support rope_type=",
       lambda c: given(c, "--rope-type") and text(c, "--rope-type") != "rope" and not mla(c),
       "--rope-type yarn without --multi-latent-attention (core_transformer_config_from_args)",
       "use rope, or multi-latent attention"),
    _r("--use-legacy-models", 394, "legacy model format only supports the 'torch' checkpoint format.",
       lambda c: legacy(c) and ckpt_format(c) != "torch",
       "--use-legacy-models with a --ckpt-format other than torch (the default is torch_dist)",
       "add '- --ckpt-format: torch', or drop --use-legacy-models"),
    _r("--attention-backend", 405, "--attention-backend local is only supported with --spec local",
       lambda c: text(c, "--attention-backend") == "local" and values(c, "--spec")[:1] != ("local",),
       "--attention-backend local needs --spec local", "add '- --spec: local', or choose another backend"),
    _r("--hierarchical-context-parallel-sizes", 460,
       "assert args.context_parallel_size == prod(args.hierarchical_context_parallel_sizes)",
       lambda c: bool(values(c, "--hierarchical-context-parallel-sizes")) and all(
           v.isdigit() for v in values(c, "--hierarchical-context-parallel-sizes")) and _prod(
           values(c, "--hierarchical-context-parallel-sizes")) != size(c, "--context-parallel-size"),
       "the product of --hierarchical-context-parallel-sizes is not --context-parallel-size",
       "give sizes whose product is the CP size"),
    _r("--cp-comm-type", 463, "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm",
       lambda c: "a2a+p2p" in values(c, "--cp-comm-type") and not given(c, "--hierarchical-context-parallel-sizes"),
       "--cp-comm-type a2a+p2p without --hierarchical-context-parallel-sizes",
       "add --hierarchical-context-parallel-sizes"),
    _r("--rl-offload-kv-cache-during-training", 416,
       "Cannot use both remove-kv-cache-during-training and offload-kv-cache-during-training",
       lambda c: on(c, "--perform-rl-step") and c.flag_on("--rl-remove-kv-cache-during-training")
       and c.flag_on("--rl-offload-kv-cache-during-training"),
       "--rl-remove-kv-cache-during-training and --rl-offload-kv-cache-during-training together", "keep one",
       check="rl"),
    _r("--rl-partial-rollouts", 419, "Cannot use both partial-rollouts and remove-kv-cache-during-training",
       lambda c: on(c, "--perform-rl-step") and c.flag_on("--rl-partial-rollouts")
       and c.flag_on("--rl-remove-kv-cache-during-training"),
       "--rl-partial-rollouts with --rl-remove-kv-cache-during-training", "keep one", check="rl"),
    _r("--global-batch-size", 428, "grpo_group_size * grpo_prompts_per_step * grpo_iterations should be divisible",
       lambda c: on(c, "--perform-rl-step") and (c.integer("--global-batch-size", 0) or 0) > 0
       and rl_samples(c) % (c.integer("--global-batch-size", 1) or 1) != 0,
       "the samples generated per GRPO step (prompts x group size x iterations) do not divide by the global batch",
       "choose a global batch that divides them", check="rl"),
    _r("--exit-interval", 436, "exit_interval should be divisible by number of global batches per inference",
       lambda c: on(c, "--perform-rl-step") and given(c, "--exit-interval") and (rl_steps(c) or 0) > 0
       and num(c, "--exit-interval", 0) % (rl_steps(c) or 1) != 0,
       "--exit-interval does not divide by the training steps per GRPO inference step", "choose a multiple",
       check="rl"),
    _r("--save-interval", 439, "save_interval should be divisible by number of global batches per inference",
       lambda c: on(c, "--perform-rl-step") and given(c, "--save-interval", "--persistent-save-interval")
       and (rl_steps(c) or 0) > 0
       and num(c, "--save-interval", num(c, "--persistent-save-interval", 0)) % (rl_steps(c) or 1) != 0,
       "--save-interval does not divide by the training steps per GRPO inference step", "choose a multiple",
       check="rl"),
    _r("--rl-sequence-packing-bin-size", 442, "rl_sequence_packing_bin_size should be larger than or equal to",
       lambda c: on(c, "--perform-rl-step") and on(c, "--rl-use-sequence-packing")
       and num(c, "--seq-length", 0) > num(c, "--rl-sequence-packing-bin-size", 8192),
       "--seq-length larger than --rl-sequence-packing-bin-size", "raise the bin size", check="rl"),
    _r("--batch-size", 469, "'--batch-size argument is no longer '", lambda c: given(c, "--batch-size"),
       "--batch-size is no longer valid", "use --micro-batch-size", check="removed-flag"),
    _r("--warmup", 472, "'--warmup argument is no longer valid, use '", lambda c: given(c, "--warmup"),
       "--warmup is no longer valid", "use --lr-warmup-fraction (or --lr-warmup-iters)", check="removed-flag"),
    _r("--model-parallel-size", 475, "'--model-parallel-size is no '", lambda c: given(c, "--model-parallel-size"),
       "--model-parallel-size is no longer valid", "use --tensor-model-parallel-size", check="removed-flag"),
    _r("--checkpoint-activations", 481, "'--checkpoint-activations is no longer valid",
       lambda c: on(c, "--checkpoint-activations"),
       "--checkpoint-activations is no longer valid: validate_args prints so and exits",
       "use --recompute-activations, or --recompute-granularity and --recompute-method", check="removed-flag"),
    _r("--cuda-graph-impl", 493, "Do not use --enable-cuda-graph or --external-cuda-graph with --cuda-graph-impl.",
       lambda c: (on(c, "--enable-cuda-graph") or on(c, "--external-cuda-graph"))
       and (text(c, "--cuda-graph-impl", "none") or "none") != "none",
       "--enable-cuda-graph / --external-cuda-graph together with --cuda-graph-impl",
       "keep --cuda-graph-impl and drop the deprecated flag"),
    _r("--external-cuda-graph", 496, "--enable-cuda-graph and --external-cuda-graph cannot be enabled at the same time.",
       lambda c: on(c, "--enable-cuda-graph") and on(c, "--external-cuda-graph"),
       "--enable-cuda-graph and --external-cuda-graph together", "use --cuda-graph-impl alone"),
    _r("--data-args-path", 536, "assert (args.data_path is None) or (args.data_args_path is None)",
       lambda c: given(c, "--data-path") and given(c, "--data-args-path"),
       "--data-path and --data-args-path together", "keep one of them"),
    _r("--per-split-data-args-path", 543, "assert any(elt is not None",
       lambda c: given(c, "--per-split-data-args-path") and given(
           c, "--train-data-path", "--valid-data-path", "--test-data-path"),
       "--per-split-data-args-path with --train/valid/test-data-path", "keep one way of naming the splits"),
    _r("--micro-batch-size", 549, "assert args.micro_batch_size > 0",
       lambda c: given(c, "--micro-batch-size") and num(c, "--micro-batch-size", 1) <= 0,
       "--micro-batch-size must be positive", "give a micro batch of 1 or more"),
    _r("--global-batch-size", 555, "assert args.global_batch_size > 0",
       lambda c: given(c, "--global-batch-size") and num(c, "--global-batch-size", 1) <= 0,
       "--global-batch-size must be positive", "give a positive global batch"),
    _r("--overlap-param-gather", 652, "assert args.use_distributed_optimizer or args.use_megatron_fsdp",
       lambda c: on(c, "--overlap-param-gather") and not (dist_opt(c) or mfsdp(c)),
       "--overlap-param-gather without the distributed optimizer (or Megatron FSDP)",
       "add --use-distributed-optimizer, or drop --overlap-param-gather"),
    _r("--overlap-param-gather", 655, "Must use --overlap-param-gather with --overlap-grad-reduce",
       lambda c: on(c, "--overlap-param-gather") and not on(c, "--overlap-grad-reduce"),
       "--overlap-param-gather without --overlap-grad-reduce", "add --overlap-grad-reduce"),
    _r("--overlap-param-gather", 657, "--overlap-param-gather only supported with MCore models",
       lambda c: on(c, "--overlap-param-gather") and legacy(c),
       "--overlap-param-gather with --use-legacy-models", "drop one of them"),
    _r("--use-torch-fsdp2", 663, "--use-torch-fsdp2 is not supported with pipeline parallelism",
       lambda c: fsdp2(c) and pp(c) != 1, "--use-torch-fsdp2 with PP > 1", "use PP 1, or drop FSDP2"),
    _r("--use-torch-fsdp2", 665, "--use-torch-fsdp2 is not supported with expert parallelism",
       lambda c: fsdp2(c) and ep(c) != 1, "--use-torch-fsdp2 with EP > 1", "use EP 1, or drop FSDP2"),
    _r("--use-torch-fsdp2", 667, "--use-torch-fsdp2 is not supported with MCore's distributed optimizer",
       lambda c: fsdp2(c) and dist_opt(c), "--use-torch-fsdp2 with --use-distributed-optimizer", "keep one of them"),
    _r("--use-torch-fsdp2", 669, "--use-torch-fsdp2 is not supported with gradient accumulation fusion",
       lambda c: fsdp2(c) and not given(c, "--no-gradient-accumulation-fusion"),
       "--use-torch-fsdp2 with gradient accumulation fusion (on unless --no-gradient-accumulation-fusion)",
       "add --no-gradient-accumulation-fusion"),
    _r("--use-torch-fsdp2", 671, "--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp",
       lambda c: fsdp2(c) and ckpt_format(c) not in ("torch_dist", "torch_dcp"),
       "--use-torch-fsdp2 with a --ckpt-format other than torch_dist or torch_dcp", "use torch_dist or torch_dcp"),
    _r("--use-torch-fsdp2", 673, "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights",
       lambda c: fsdp2(c) and not on(c, "--untie-embeddings-and-output-weights"),
       "--use-torch-fsdp2 without --untie-embeddings-and-output-weights", "add --untie-embeddings-and-output-weights"),
    _r("--use-torch-fsdp2", 675, "--use-torch-fsdp2 not supported with fp16 yet",
       lambda c: fsdp2(c) and fp16(c), "--use-torch-fsdp2 with --fp16", "train in bf16"),
    _r("--use-torch-fsdp2", 677, "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one",
       lambda c: fsdp2(c) and c.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
       "--use-torch-fsdp2 in an image whose environment sets CUDA_DEVICE_MAX_CONNECTIONS=1",
       "drop CUDA_DEVICE_MAX_CONNECTIONS from the variant's env, or drop FSDP2"),
    _r("--overlap-param-gather-with-optimizer-step", 691,
       "--overlap-param-gather-with-optimizer-step only supported with distributed optimizer",
       lambda c: on(c, "--overlap-param-gather-with-optimizer-step") and not dist_opt(c),
       "--overlap-param-gather-with-optimizer-step without --use-distributed-optimizer",
       "add --use-distributed-optimizer"),
    _r("--overlap-param-gather-with-optimizer-step", 693,
       "Must use --overlap-param-gather-with-optimizer-step with --overlap-param-gather",
       lambda c: on(c, "--overlap-param-gather-with-optimizer-step") and not on(c, "--overlap-param-gather"),
       "--overlap-param-gather-with-optimizer-step without --overlap-param-gather", "add --overlap-param-gather"),
    _r("--overlap-param-gather-with-optimizer-step", 695,
       "--overlap-param-gather-with-optimizer-step only supported with interleaved pipeline parallelism",
       lambda c: on(c, "--overlap-param-gather-with-optimizer-step") and not vpp(c),
       "--overlap-param-gather-with-optimizer-step without virtual pipeline stages",
       "use the interleaved schedule (virtual stages), or drop it"),
    _r("--overlap-param-gather-with-optimizer-step", 697,
       "--overlap-param-gather-with-optimizer-step not supported with distributed checkpointing yet",
       lambda c: on(c, "--overlap-param-gather-with-optimizer-step") and dist_ckpt(c),
       "--overlap-param-gather-with-optimizer-step with a distributed checkpoint format (the default torch_dist)",
       "add '- --ckpt-format: torch', or drop it"),
    _r("--fp8-param-gather", 711, "--fp8-param-gather only supported with distributed optimizer, torch fsdp2",
       lambda c: on(c, "--fp8-param-gather") and not (dist_opt(c) or fsdp2(c) or mfsdp(c)),
       "--fp8-param-gather without the distributed optimizer (or FSDP)", "add --use-distributed-optimizer"),
    _r("--fp4-format", 715, "--fp4-format and --fp8-format cannot be used simultaneously.",
       lambda c: fp4(c) and fp8(c), "--fp4-format and --fp8-format together", "choose one"),
    _r("--fp4-param-gather", 719, "--fp4-param-gather must be used together with --fp4-format.",
       lambda c: on(c, "--fp4-param-gather") and not fp4(c), "--fp4-param-gather without --fp4-format",
       "add --fp4-format, or drop --fp4-param-gather"),
    _r("--check-weight-hash-across-dp-replicas-interval", 739,
       "check_weight_hash_across_dp_replicas_interval is not supported with optim_grads_params",
       lambda c: mfsdp(c) and text(c, "--data-parallel-sharding-strategy") == "optim_grads_params"
       and given(c, "--check-weight-hash-across-dp-replicas-interval"),
       "Megatron FSDP optim_grads_params with --check-weight-hash-across-dp-replicas-interval", "drop the check"),
    _r("--use-megatron-fsdp", 742, "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one",
       lambda c: mfsdp(c) and c.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
       "--use-megatron-fsdp in an image whose environment sets CUDA_DEVICE_MAX_CONNECTIONS=1",
       "drop CUDA_DEVICE_MAX_CONNECTIONS from the variant's env, or drop Megatron FSDP"),
    _r("--use-megatron-fsdp", 745, "Megatron FSDP only supports fsdp_dtensor checkpoint format",
       lambda c: mfsdp(c) and ckpt_format(c) != "fsdp_dtensor",
       "--use-megatron-fsdp without '--ckpt-format fsdp_dtensor'", "add '- --ckpt-format: fsdp_dtensor'"),
    _r("--bf16", 750, "assert not args.bf16", lambda c: fp16(c) and bf16(c),
       "--fp16 and --bf16 together", "keep one of --fp16 and --bf16", check="precision"),
    _r("--main-grads-dtype", 766, "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set",
       lambda c: bf16(c) and not fp16(c) and on(c, "--accumulate-allreduce-grads-in-fp32")
       and text(c, "--main-grads-dtype", "fp32") != "fp32",
       "--accumulate-allreduce-grads-in-fp32 with --main-grads-dtype other than fp32", "use fp32 main grads"),
    _r("--cuda-graph-scope", 778, "--no-check-for-nan-in-loss-and-grad should be set with full_iteration CUDA graph",
       lambda c: graph_impl(c) == "local" and "full_iteration" in values(c, "--cuda-graph-scope")
       and not on(c, "--inference-dynamic-batching") and nan_check(c),
       "a full_iteration local CUDA graph with the NaN check on", "add --no-check-for-nan-in-loss-and-grad"),
    _r("--inference-dynamic-batching", 781, "fp8 is not supported with inference dynamic batching and full_iteration",
       lambda c: graph_impl(c) == "local" and "full_iteration" in values(c, "--cuda-graph-scope")
       and on(c, "--inference-dynamic-batching") and fp8(c),
       "FP8 with inference dynamic batching and a full_iteration local CUDA graph", "drop FP8 or the graph"),
    _r("--num-dataset-builder-threads", 791, "assert args.num_dataset_builder_threads > 0",
       lambda c: num(c, "--num-dataset-builder-threads", 1) <= 0, "--num-dataset-builder-threads must be positive",
       "give 1 or more"),
    _r("--train-samples", 811, "assert args.train_samples is None",
       lambda c: train_iters(c) and given(c, "--train-samples"),
       "--train-iters and --train-samples together", "keep one way of counting: iterations or samples",
       check="schedule"),
    _r("--lr-decay-samples", 814, "'expected iteration-based learning rate decay'",
       lambda c: train_iters(c) and given(c, "--lr-decay-samples"),
       "--lr-decay-samples with --train-iters", "use --lr-decay-iters", check="schedule"),
    _r("--lr-warmup-samples", 816, "'expected iteration-based learning rate warmup'",
       lambda c: train_iters(c) and num(c, "--lr-warmup-samples", 0) != 0,
       "--lr-warmup-samples with --train-iters", "use --lr-warmup-iters (or --lr-warmup-fraction)", check="schedule"),
    _r("--rampup-batch-size", 818, "'expected no batch-size rampup for iteration-based training'",
       lambda c: train_iters(c) and given(c, "--rampup-batch-size"),
       "--rampup-batch-size with --train-iters", "count in samples (--train-samples) to ramp up", check="schedule"),
    _r("--lr-warmup-iters", 821, "'can only specify one of lr-warmup-fraction and lr-warmup-iters'",
       lambda c: train_iters(c) and given(c, "--lr-warmup-fraction") and num(c, "--lr-warmup-iters", 0) != 0,
       "--lr-warmup-fraction and --lr-warmup-iters together", "keep one", check="schedule"),
    _r("--train-iters", 828, "'expected sample-based training'",
       lambda c: train_samples(c) and not train_iters(c) and given(c, "--train-iters"),
       "--train-iters with --train-samples", "keep one way of counting", check="schedule"),
    _r("--lr-decay-iters", 830, "'expected sample-based learning rate decay'",
       lambda c: train_samples(c) and given(c, "--lr-decay-iters"),
       "--lr-decay-iters with --train-samples", "use --lr-decay-samples", check="schedule"),
    _r("--lr-warmup-iters", 832, "'expected sample-based learnig rate warmup'",
       lambda c: train_samples(c) and num(c, "--lr-warmup-iters", 0) != 0,
       "--lr-warmup-iters with --train-samples", "use --lr-warmup-samples (or --lr-warmup-fraction)",
       check="schedule"),
    _r("--lr-warmup-samples", 836, "'and lr-warmup-samples'",
       lambda c: train_samples(c) and given(c, "--lr-warmup-fraction") and num(c, "--lr-warmup-samples", 0) != 0,
       "--lr-warmup-fraction and --lr-warmup-samples together", "keep one", check="schedule"),
    _r("--encoder-num-layers", 840, "'cannot have both num-layers and encoder-num-layers specified'",
       lambda c: given(c, "--num-layers") and given(c, "--encoder-num-layers"),
       "--num-layers and --encoder-num-layers together", "keep one"),
    _r("--encoder-seq-length", 875, "assert args.encoder_seq_length is None",
       lambda c: given(c, "--seq-length") and given(c, "--encoder-seq-length"),
       "--seq-length and --encoder-seq-length together", "keep --seq-length"),
    _r("--decoder-seq-length", 886, "assert args.max_position_embeddings >= args.decoder_seq_length",
       lambda c: given(c, "--decoder-seq-length", "--max-position-embeddings")
       and num(c, "--decoder-seq-length", 0) > num(c, "--max-position-embeddings", float("inf")),
       "--decoder-seq-length above --max-position-embeddings", "raise --max-position-embeddings"),
    _r("--save-interval", 890, "assert args.save_interval is not None",
       lambda c: given(c, "--save") and not given(c, "--save-interval", "--persistent-save-interval"),
       "--save without --save-interval", "add --save-interval"),
    _r("--save-interval", 891, "assert args.save_interval > 0",
       lambda c: given(c, "--save") and given(c, "--save-interval", "--persistent-save-interval")
       and num(c, "--save-interval", num(c, "--persistent-save-interval", 1)) <= 0,
       "--save-interval must be positive", "give a positive interval"),
    _r("--save-retain-interval", 894, "assert args.save_retain_interval % args.save_interval == 0",
       lambda c: given(c, "--save") and given(c, "--save-retain-interval") and _bad_retain(c),
       "--save-retain-interval must be a positive multiple of --save-interval", "give a multiple of the interval"),
    _r("--fp16-lm-cross-entropy", 897, "lm cross entropy in fp16 only support in fp16 mode.",
       lambda c: on(c, "--fp16-lm-cross-entropy") and not fp16(c), "--fp16-lm-cross-entropy without --fp16",
       "drop it, or train in fp16", check="precision"),
    _r("--fp32-residual-connection", 900, "'residual connection in fp32 only supported when using fp16 or bf16.'",
       lambda c: on(c, "--fp32-residual-connection") and not (fp16(c) or bf16(c)),
       "--fp32-residual-connection without --fp16 or --bf16", "add --bf16 (or --fp16)", check="precision"),
    _r("--start-weight-decay", 908, "assert args.start_weight_decay is None",
       lambda c: text(c, "--weight-decay-incr-style", "constant") == "constant"
       and given(c, "--start-weight-decay", "--end-weight-decay"),
       "--start/--end-weight-decay with the constant --weight-decay-incr-style",
       "use --weight-decay, or a linear/cosine --weight-decay-incr-style"),
    _r("--weight-decay-incr-style", 913, "assert args.start_weight_decay is not None",
       lambda c: text(c, "--weight-decay-incr-style", "constant") != "constant"
       and not (given(c, "--start-weight-decay") and given(c, "--end-weight-decay")),
       "a linear/cosine --weight-decay-incr-style without both --start-weight-decay and --end-weight-decay",
       "add both"),
    _r("--decoupled-lr", 1023, "'--decoupled-lr and --decoupled-min-lr is not supported in legacy models.'",
       lambda c: legacy(c) and given(c, "--decoupled-lr", "--decoupled-min-lr"),
       "--decoupled-lr / --decoupled-min-lr with --use-legacy-models", "drop one of them"),
    _r("--rotary-interleaved", 1029, "--rotary-interleaved is not supported in legacy models.",
       lambda c: legacy(c) and on(c, "--rotary-interleaved"), "--rotary-interleaved with --use-legacy-models",
       "drop one of them"),
    _r("--no-position-embedding", 1036, "--no-position-embedding is deprecated, use --position-embedding-type",
       lambda c: given(c, "--no-position-embedding") and position_type(c) != "rope",
       "--no-position-embedding without rope position embeddings", "use '--position-embedding-type: none'"),
    _r("--position-embedding-type", 1042, "Local transformer implementation currently does not support attention bias",
       lambda c: position_type(c) == "relative" and text(c, "--transformer-impl") == "local",
       "relative position embeddings with --transformer-impl local", "use transformer_engine"),
    _r("--position-embedding-type", 1047, "--mrope-section should be set when using --position-embedding-type mrope.",
       lambda c: position_type(c) == "mrope" and not given(c, "--mrope-section"), "mrope without --mrope-section",
       "add --mrope-section"),
    _r("--spec", 1053, "Model Spec must be None when using MoEs",
       lambda c: experts(c) > 0 and given(c, "--spec"), "--spec with --num-experts", "drop --spec"),
    _r("--context-parallel-size", 1060, "Context parallelism is not supported in legacy models.",
       lambda c: size(c, "--context-parallel-size") > 1 and legacy(c), "CP > 1 with --use-legacy-models",
       "drop one of them"),
    _r("--ckpt-format", 1082, "--ckpt-format torch_dcp is only tested with FSDP.",
       lambda c: ckpt_format(c) == "torch_dcp" and not fsdp2(c), "--ckpt-format torch_dcp without --use-torch-fsdp2",
       "use torch_dist"),
    _r("--ckpt-format", 1084, "--ckpt-format torch_dcp is not tested with megatron tensor parallelism.",
       lambda c: ckpt_format(c) == "torch_dcp" and tp(c) > 1, "--ckpt-format torch_dcp with TP > 1", "use torch_dist"),
    _r("--ckpt-format", 1086, "--ckpt-format torch_dcp is not tested with megatron pipeline parallelism.",
       lambda c: ckpt_format(c) == "torch_dcp" and pp(c) > 1, "--ckpt-format torch_dcp with PP > 1", "use torch_dist"),
    _r("--ckpt-format", 1090, "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP.",
       lambda c: ckpt_format(c) == "fsdp_dtensor" and not mfsdp(c),
       "--ckpt-format fsdp_dtensor without --use-megatron-fsdp", "use torch_dist"),
    _r("--mock-data", 1093, "assert args.mock_data +",
       lambda c: on(c, "--mock-data") + bool(values(c, "--data-path")) + given(
           c, "--train-data-path", "--valid-data-path", "--test-data-path") > 1,
       "more than one data source (--mock-data, --data-path, --train/valid/test-data-path)",
       "keep one data source (a profile that adds --mock-data drops --data-path)", check="data"),
    _r("--use-flash-attn", 1100, "Flash attention can not be used in deterministic mode.",
       lambda c: on(c, "--deterministic-mode") and on(c, "--use-flash-attn"),
       "--use-flash-attn with --deterministic-mode", "drop --use-flash-attn"),
    _r("--cross-entropy-loss-fusion", 1101, "Cross Entropy Fusion is currently not deterministic.",
       lambda c: on(c, "--deterministic-mode") and on(c, "--cross-entropy-loss-fusion"),
       "--cross-entropy-loss-fusion with --deterministic-mode", "drop --cross-entropy-loss-fusion"),
    _r("--deterministic-mode", 1105, "NCCL_ALGO must be one of",
       lambda c: on(c, "--deterministic-mode") and c.env.get("NCCL_ALGO") not in _DETERMINISTIC_NCCL,
       "--deterministic-mode without NCCL_ALGO (Tree, Ring, CollnetDirect, CollnetChain or ^NVLS) in the image's "
       "environment", "set NCCL_ALGO in the variant's env"),
    _r("--disable-gloo-process-groups", 1126, "assert args.use_dist_ckpt",
       lambda c: given(c, "--disable-gloo-process-groups") and dist_opt(c) and not dist_ckpt(c),
       "--disable-gloo-process-groups with the distributed optimizer and --ckpt-format torch",
       "use a distributed checkpoint format"),
    _r("--distrib-optim-fully-reshardable-mem-efficient", 1130,
       "'--distrib-optim-fully-reshardable-mem-efficient requires -enable-gloo-process-groups'",
       lambda c: given(c, "--disable-gloo-process-groups") and dist_opt(c) and on(
           c, "--dist-ckpt-optim-fully-reshardable") and on(c, "--distrib-optim-fully-reshardable-mem-efficient"),
       "--distrib-optim-fully-reshardable-mem-efficient with --disable-gloo-process-groups", "drop one of them"),
    _r("--load-main-params-from-ckpt", 1154, "--load-main-params-from-ckpt must be used with --no-load-optim.",
       lambda c: on(c, "--load-main-params-from-ckpt") and not given(c, "--no-load-optim"),
       "--load-main-params-from-ckpt without --no-load-optim", "add --no-load-optim"),
    _r("--inference-batch-times-seqlen-threshold", 1159,
       "--inference-batch-times-seqlen-threshold requires setting --pipeline-model-parallel-size > 1.",
       lambda c: num(c, "--inference-batch-times-seqlen-threshold", -1) > -1 and pp(c) <= 1,
       "--inference-batch-times-seqlen-threshold with PP 1", "drop it, or use PP > 1"),
    _r("--inference-batch-times-seqlen-threshold", 1162,
       "Pipeline-parallel microbatched inference is incompatible with CUDA graphs",
       lambda c: num(c, "--inference-batch-times-seqlen-threshold", -1) > -1 and graph_impl(c) != "none",
       "--inference-batch-times-seqlen-threshold with CUDA graphs", "drop one of them"),
    _r("--inference-dynamic-batching-block-size", 1166, "block size should be a multiple of 256",
       lambda c: on(c, "--inference-dynamic-batching")
       and num(c, "--inference-dynamic-batching-block-size", 256) % 256 != 0,
       "--inference-dynamic-batching-block-size is not a multiple of 256", "give a multiple of 256"),
    _r("--moe-use-upcycling", 1171, "When using upcycling, the --save option must be specified.",
       lambda c: on(c, "--moe-use-upcycling") and not given(c, "--save"), "--moe-use-upcycling without --save",
       "add --save"),
    _r("--optimizer", 1181, "Muon optimizer does not support distributed optimizer for now.",
       lambda c: "muon" in (text(c, "--optimizer") or "") and dist_opt(c),
       "the Muon optimizer with --use-distributed-optimizer", "drop --use-distributed-optimizer, or use adam"),
    _r("--optimizer", 1182, "Muon optimizer does not support Torch-FSDP2 for now.",
       lambda c: "muon" in (text(c, "--optimizer") or "") and fsdp2(c), "the Muon optimizer with FSDP2", "use adam"),
    _r("--optimizer", 1183, "Muon optimizer does not support Megatron-FSDP for now.",
       lambda c: "muon" in (text(c, "--optimizer") or "") and mfsdp(c), "the Muon optimizer with Megatron FSDP",
       "use adam"),
    _r("--optimizer", 1184, "Muon optimizer only supports torch checkpoint format for now.",
       lambda c: "muon" in (text(c, "--optimizer") or "") and ckpt_format(c) != "torch",
       "the Muon optimizer with a --ckpt-format other than torch (the default is torch_dist)",
       "add '- --ckpt-format: torch'"),
    _r("--optimizer-cpu-offload", 1189, "The optimizer cpu offload must be used in conjunction with",
       lambda c: on(c, "--optimizer-cpu-offload") and not on(c, "--use-precision-aware-optimizer"),
       "--optimizer-cpu-offload without --use-precision-aware-optimizer", "add --use-precision-aware-optimizer"),
    _r("--optimizer-cpu-offload", 1192, "assert not args.fp8_param_gather or args.fp8_recipe == \"delayed\"",
       lambda c: on(c, "--optimizer-cpu-offload") and on(c, "--fp8-param-gather")
       and text(c, "--fp8-recipe", "delayed") != "delayed",
       "--optimizer-cpu-offload with --fp8-param-gather and an --fp8-recipe other than delayed",
       "use --fp8-recipe delayed, or drop --fp8-param-gather or the offload"),
    _r("--non-persistent-ckpt-type", 1198, "Tried to use local checkpointing without specifying --local-ckpt-dir!",
       lambda c: text(c, "--non-persistent-ckpt-type") == "local" and not given(c, "--non-persistent-local-ckpt-dir"),
       "--non-persistent-ckpt-type local without --non-persistent-local-ckpt-dir",
       "add --non-persistent-local-ckpt-dir"),
    _r("--replication", 1200, "--replication requires the value of --replication-jump!",
       lambda c: on(c, "--replication") and not given(c, "--replication-jump"), "--replication without --replication-jump",
       "add --replication-jump"),
    _r("--replication", 1201, "--replication requires args.non_persistent_ckpt_type == 'local'",
       lambda c: on(c, "--replication") and text(c, "--non-persistent-ckpt-type") != "local",
       "--replication without --non-persistent-ckpt-type local", "add '--non-persistent-ckpt-type: local'"),
    _r("--delay-wgrad-compute", 1208, "Delaying wgrad compute is only supported with transformer_engine implementation",
       lambda c: on(c, "--delay-wgrad-compute") and text(c, "--transformer-impl") == "local",
       "--delay-wgrad-compute with --transformer-impl local", "use transformer_engine"),
    _r("--fine-grained-activation-offloading", 1221,
       "Fine-grained activation offloading is only supported with transformer_engine implementation",
       lambda c: on(c, "--fine-grained-activation-offloading") and text(c, "--transformer-impl") == "local",
       "--fine-grained-activation-offloading with --transformer-impl local", "use transformer_engine"),
    _r("--mtp-num-layers", 1224, "The legacy Megatron models does not support Multi-Token Prediction (MTP).",
       lambda c: bool(num(c, "--mtp-num-layers", 0)) and legacy(c), "--mtp-num-layers with --use-legacy-models",
       "drop one of them"),
    _r("--mtp-num-layers", 1226, "Multi-Token Prediction (MTP) is not supported with",
       lambda c: bool(num(c, "--mtp-num-layers", 0)) and position_type(c) not in ("rope", "none"),
       "--mtp-num-layers with position embeddings other than rope or none", "use rope"),
    _r("--cuda-graph-impl", 1239, "Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access when using",
       lambda c: graph_impl(c) != "none" and "expandable_segments:True" in c.env.get("PYTORCH_CUDA_ALLOC_CONF", "")
       and c.env.get("NCCL_GRAPH_REGISTER", "") != "0",
       "CUDA graphs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the image's environment and "
       "NCCL_GRAPH_REGISTER not 0", "set NCCL_GRAPH_REGISTER: \"0\" in env"),
    _r("--recompute-granularity", 1244, "recompute_granularity must not be full when CUDA Graphs are enabled.",
       lambda c: graph_impl(c) != "none" and granularity(c) == "full", "full recompute with CUDA graphs",
       "use selective recompute, or no CUDA graphs"),
)


# ------------------------------------------------------------------- TransformerConfig.__post_init__

TRANSFORMER_CONFIG: tuple[Combo, ...] = (
    _r("--first-last-layers-bf16", 884, "Delayed scaling does not support first / last layer in BF16.",
       lambda c: fp8(c) and on(c, "--first-last-layers-bf16") and text(c, "--fp8-recipe", "delayed") == "delayed",
       "--first-last-layers-bf16 with the delayed FP8 recipe", "use another --fp8-recipe", file=TCONF),
    _r("--linear-attention-type", 841, "linear_attention_freq must be set for linear attention.",
       lambda c: gdn(c) and not given(c, "--linear-attention-freq"),
       "gated delta net linear attention without --linear-attention-freq", "add --linear-attention-freq",
       file=TCONF),
    _r("--linear-num-value-heads", 860, "assert self.linear_num_value_heads % self.linear_num_key_heads == 0",
       lambda c: gdn(c) and int(num(c, "--linear-num-key-heads", 16)) > 0
       and int(num(c, "--linear-num-value-heads", 32)) % int(num(c, "--linear-num-key-heads", 16)) != 0,
       "--linear-num-value-heads is not a multiple of --linear-num-key-heads", "choose value heads = k x key heads",
       file=TCONF),
    _r("--linear-num-key-heads", 867, "self.linear_num_key_heads % self.tensor_model_parallel_size == 0",
       lambda c: gdn(c) and int(num(c, "--linear-num-key-heads", 16)) % tp(c) != 0,
       "--linear-num-key-heads is not divisible by TP", "choose key heads that divide by TP", file=TCONF),
    _r("--linear-num-value-heads", 870, "self.linear_num_value_heads % self.tensor_model_parallel_size == 0",
       lambda c: gdn(c) and int(num(c, "--linear-num-value-heads", 32)) % tp(c) != 0,
       "--linear-num-value-heads is not divisible by TP", "choose value heads that divide by TP", file=TCONF),
    _r("--context-parallel-size", 874, "assert self.context_parallel_size == 1, (",
       lambda c: gdn(c) and size(c, "--context-parallel-size") != 1,
       "gated delta net linear attention with CP > 1", "use CP 1", file=TCONF),
    _r("--linear-attention-type", 879, "raise NotImplementedError(\"Mamba is not supported yet.\")",
       lambda c: text(c, "--linear-attention-type") == "mamba", "--linear-attention-type mamba is not implemented",
       "use gated_delta_net", file=TCONF),
    _r("--num-layers-at-start-in-bf16", 898, "f\"num_layers_at_start_in_bf16 ({self.num_layers_at_start_in_bf16}) must be \"",
       lambda c: bf16_layers_bad(c, "--num-layers-at-start-in-bf16"),
       "--num-layers-at-start-in-bf16 outside 0 .. the layers per pipeline stage", "give a count within a stage",
       file=TCONF),
    _r("--num-layers-at-end-in-bf16", 907, "f\"num_layers_at_end_in_bf16 ({self.num_layers_at_end_in_bf16}) must be \"",
       lambda c: bf16_layers_bad(c, "--num-layers-at-end-in-bf16"),
       "--num-layers-at-end-in-bf16 outside 0 .. the layers per pipeline stage", "give a count within a stage",
       file=TCONF),
    _r("--fp8-param-gather", 913, "fp8_param must be used together with fp8 mode.",
       lambda c: on(c, "--fp8-param-gather") and not fp8(c), "--fp8-param-gather without --fp8-format",
       "add --fp8-format, or drop --fp8-param-gather", file=TCONF),
    _r("--moe-ffn-hidden-size", 938, "moe_ffn_hidden_size must be None when num_experts is not set.",
       lambda c: experts(c) <= 0 and given(c, "--moe-ffn-hidden-size"), "--moe-ffn-hidden-size without --num-experts",
       "drop it, or add --num-experts", file=TCONF),
    _r("--moe-enable-deepep", 942, "DeepEP backend is only supported with flex token dispatcher.",
       lambda c: on(c, "--moe-enable-deepep") and dispatcher(c) != "flex",
       "--moe-enable-deepep without --moe-token-dispatcher-type flex", "use the flex dispatcher", file=TCONF),
    _r("--moe-pad-expert-input-to-capacity", 953, "Flex token dispatcher with deepep backend does not support",
       lambda c: dispatcher(c) == "flex" and on(c, "--moe-pad-expert-input-to-capacity") and (
           on(c, "--moe-enable-deepep") or text(c, "--moe-flex-dispatcher-backend", "deepep") == "deepep"),
       "--moe-pad-expert-input-to-capacity with the flex dispatcher's deepep backend", "drop the padding",
       file=TCONF),
    _r("--moe-shared-expert-intermediate-size", 960, "f\"moe_shared_expert_intermediate_size must be \"",
       lambda c: given(c, "--moe-shared-expert-intermediate-size") and num(c, "--moe-shared-expert-intermediate-size", 1) <= 0,
       "--moe-shared-expert-intermediate-size must be positive", "give the shared experts' total FFN size",
       file=TCONF, check="moe"),
    _r("--moe-shared-expert-overlap", 968, "moe_shared_expert_overlap only works with alltoall token dispatcher.",
       lambda c: (num(c, "--moe-shared-expert-intermediate-size", 0) > 0) and on(c, "--moe-shared-expert-overlap")
       and dispatcher(c) != "alltoall",
       "--moe-shared-expert-overlap without the alltoall dispatcher", "use alltoall, or drop the overlap",
       file=TCONF),
    _r("--moe-aux-loss-coeff", 975, "moe_aux_loss_coeff must be a list of the same length as",
       lambda c: len(values(c, "--moe-router-load-balancing-type")) > 1
       and len(values(c, "--moe-aux-loss-coeff")) != len(values(c, "--moe-router-load-balancing-type")),
       "--moe-aux-loss-coeff does not give one coefficient per --moe-router-load-balancing-type",
       "give as many coefficients as load-balancing types", file=TCONF, check="moe"),
    _r("--moe-expert-capacity-factor", 1001, "moe_expert_capacity_factor only works with aux_loss",
       lambda c: num(c, "--moe-expert-capacity-factor", -1) >= 0 and bool(values(c, "--moe-router-load-balancing-type"))
       and any(v not in ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
               for v in values(c, "--moe-router-load-balancing-type")),
       "--moe-expert-capacity-factor with sinkhorn load balancing", "use aux_loss (or seq/global), or no capacity",
       file=TCONF),
    _r("--moe-pad-expert-input-to-capacity", 1008, "moe_expert_capacity_factor must be set to use",
       lambda c: on(c, "--moe-pad-expert-input-to-capacity") and num(c, "--moe-expert-capacity-factor", -1) < 0,
       "--moe-pad-expert-input-to-capacity without --moe-expert-capacity-factor", "add a capacity factor",
       file=TCONF),
    _r("--recompute-method", 1043, "recompute_method must be \"block\" or \"uniform\"",
       lambda c: granularity(c) == "full" and not given(c, "--recompute-method"),
       "--recompute-granularity full without --recompute-method", "add '- --recompute-method: uniform' (or block)",
       file=TCONF, check="recompute"),
    _r("--recompute-num-layers", 1049, "recompute_num_layers must be between",
       lambda c: granularity(c) == "full" and not given(c, "--recompute-num-layers"),
       "--recompute-granularity full without --recompute-num-layers", "add --recompute-num-layers",
       file=TCONF, check="recompute"),
    _r("--recompute-num-layers", 1058, "recompute_num_layers must be None.",
       lambda c: granularity(c) == "selective" and given(c, "--recompute-num-layers"),
       "--recompute-num-layers with selective recompute", "drop --recompute-num-layers", file=TCONF,
       check="recompute"),
    _r("--distribute-saved-activations", 1064, "false when sequence parallel is enabled",
       lambda c: granularity(c) is not None and on(c, "--distribute-saved-activations") and sequence_parallel(c),
       "--distribute-saved-activations with sequence parallelism", "drop one of them", file=TCONF,
       check="recompute"),
    _r("--recompute-modules", 1094, "mla_up_proj in recompute_modules is only supported with",
       lambda c: "mla_up_proj" in selective_modules(c) and not on(c, "--multi-latent-attention"),
       "mla_up_proj recompute without --multi-latent-attention", "drop mla_up_proj", file=TCONF, check="recompute"),
    _r("--recompute-modules", 1112, "shared_experts recompute cannot work with --moe-shared-expert-overlap.",
       lambda c: "shared_experts" in selective_modules(c) and given(c, "--moe-shared-expert-intermediate-size")
       and on(c, "--moe-shared-expert-overlap"),
       "shared_experts recompute with --moe-shared-expert-overlap", "drop one of them", file=TCONF,
       check="recompute"),
    _r("--recompute-modules", 1119, "Delayed scaling does not support moe_act and layernorm recompute",
       lambda c: fp8(c) and text(c, "--fp8-recipe", "delayed") == "delayed"
       and bool({"moe_act", "layernorm"} & set(selective_modules(c))),
       "moe_act / layernorm recompute under the delayed FP8 recipe", "use another recipe, or drop those modules",
       file=TCONF, check="recompute"),
    _r("--moe-layer-recompute", 1136, "Do not set --moe-layer-recompute with full recompute granularity.",
       lambda c: on(c, "--moe-layer-recompute") and granularity(c) == "full",
       "--moe-layer-recompute with full recompute", "use selective recompute with the moe module", file=TCONF,
       check="recompute"),
    _r("--offload-modules", 1146, "assert self.offload_modules is not None and len(self.offload_modules) > 0",
       lambda c: on(c, "--fine-grained-activation-offloading") and not values(c, "--offload-modules"),
       "--fine-grained-activation-offloading without --offload-modules", "name the modules to offload",
       file=TCONF),
    _r("--offload-modules", 1158, "f'Invalid choices for offload_modules: {invalid_modules}. '",
       lambda c: on(c, "--fine-grained-activation-offloading") and bool(set(values(c, "--offload-modules")) - {
           "core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear"}),
       "--offload-modules names a module Megatron does not offload (core_attn, attn_proj, expert_fc1, moe_act, "
       "attn_norm, mlp_norm, qkv_linear)", "use those names", file=TCONF),
    _r("--offload-modules", 1163, "attn_proj cannot be set to offload_modules alone without core_attn",
       lambda c: on(c, "--fine-grained-activation-offloading") and "attn_proj" in values(c, "--offload-modules")
       and "core_attn" not in values(c, "--offload-modules"),
       "attn_proj offloaded without core_attn", "add core_attn to --offload-modules", file=TCONF),
    _r("--decoder-first-pipeline-num-layers", 1175, "num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline",
       lambda c: given(c, "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers") and (
           on(c, "--account-for-embedding-in-pipeline-split") or on(c, "--account-for-loss-in-pipeline-split")),
       "an uneven first/last stage with --account-for-embedding/loss-in-pipeline-split", "keep one way of evening",
       file=TCONF, check="pipeline"),
    _r("--pipeline-model-parallel-layout", 1192, "pipeline_model_parallel_layout cannot be set",
       lambda c: given(c, "--pipeline-model-parallel-layout") and (
           given(c, "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")
           or on(c, "--account-for-embedding-in-pipeline-split") or on(c, "--account-for-loss-in-pipeline-split")),
       "--pipeline-model-parallel-layout with an uneven stage or the split options", "let the layout say it all",
       file=TCONF, check="pipeline"),
    _r("--decoder-first-pipeline-num-layers", 1243, "num_layers_in_first_pipeline_stage must be larger than 0",
       lambda c: _uneven_bad(c, "first"), "--decoder-first-pipeline-num-layers must be positive", "give 1 or more",
       file=TCONF, check="pipeline"),
    _r("--decoder-first-pipeline-num-layers", 1252, "f\"number of layers at first stage: \"",
       lambda c: _uneven_bad(c, "first-vpp"),
       "--decoder-first-pipeline-num-layers does not divide by the virtual stages per rank",
       "give a multiple of the virtual stages", file=TCONF, check="pipeline"),
    _r("--decoder-last-pipeline-num-layers", 1262, "num_layers_in_last_pipeline_stage must be larger than 0",
       lambda c: _uneven_bad(c, "last"), "--decoder-last-pipeline-num-layers must be positive", "give 1 or more",
       file=TCONF, check="pipeline"),
    _r("--decoder-last-pipeline-num-layers", 1271, "f\"number of layers at last stage: \"",
       lambda c: _uneven_bad(c, "last-vpp"),
       "--decoder-last-pipeline-num-layers does not divide by the virtual stages per rank",
       "give a multiple of the virtual stages", file=TCONF, check="pipeline"),
    _r("--num-layers", 1283, "f\"number of layers at middle stage: {num_layers} must be divisible by\"",
       lambda c: _uneven_bad(c, "middle"),
       "the layers left for the middle stages (--num-layers less the first/last stage's) do not divide by the "
       "middle stages", "choose first/last stage layers that leave a multiple of the middle stages", file=TCONF,
       check="pipeline"),
    _r("--num-layers", 1297, "f\"number of layers on each middle pipeline rank:\"",
       lambda c: _uneven_bad(c, "middle-vpp"),
       "the layers of each middle stage do not divide by the virtual stages per rank",
       "choose sizes whose middle stages hold a multiple of the virtual stages", file=TCONF, check="pipeline"),
    _r("--num-layers", 1329, "f\"num_layers: {num_layers} after enable\"",
       lambda c: _split_vpp_bad(c, per_rank=False),
       "with the embedding/loss split options and virtual stages, the layers do not divide by PP",
       "choose a PP that divides the counted layers", file=TCONF, check="pipeline"),
    _r("--num-layers", 1342, "f\"number of layers on each pipeline rank: {num_layers_per_pipeline_rank}\"",
       lambda c: _split_vpp_bad(c, per_rank=True),
       "with the embedding/loss split options, the layers per pipeline rank do not divide by the virtual stages",
       "choose sizes that divide", file=TCONF, check="pipeline"),
    _r("--squared-relu", 1355, "When bias_activation_fusion is True, activation function should be either",
       lambda c: bias_act_fusion(c) and activation(c) not in ("gelu", "silu", "quick_gelu"),
       "--squared-relu with the bias-activation fusion on (it fuses only GeLU, SwiGLU and quick-GeGLU)",
       "add --no-bias-gelu-fusion (or --disable-bias-linear)", file=TCONF),
    _r("--glu-linear-offset", 1374, "When bias_activation_fusion is True and glu_linear_offset is non-zero",
       lambda c: bias_act_fusion(c) and num(c, "--glu-linear-offset", 0.0) != 0.0 and activation(c) != "quick_gelu",
       "--glu-linear-offset without --quick-geglu (bias-activation fusion on)", "drop the offset, or use quick-GeGLU",
       file=TCONF),
    _r("--use-te-activation-func", 1380, "bias_activation_fusion and use_te_activation_func cannot be both true.",
       lambda c: bias_act_fusion(c) and on(c, "--use-te-activation-func"),
       "--use-te-activation-func with the bias-activation fusion on",
       "add --no-bias-gelu-fusion / --no-bias-swiglu-fusion, or drop --use-te-activation-func", file=TCONF),
    _r("--use-te-activation-func", 1388, "TransformerEngine only support gelu, geglu, silu, swiglu, relu, reglu.",
       lambda c: on(c, "--use-te-activation-func") and activation(c) not in ("gelu", "silu"),
       "--use-te-activation-func with squared ReLU or quick-GeGLU", "drop --use-te-activation-func", file=TCONF),
    _r("--rotary-interleaved", 1426, "rotary_interleaved does not work with multi_latent_attention.",
       lambda c: on(c, "--rotary-interleaved") and on(c, "--multi-latent-attention"),
       "--rotary-interleaved with --multi-latent-attention", "drop --rotary-interleaved", file=TCONF),
    _r("--expert-tensor-parallel-size", 1458, "Bias in Moe is only supported when ETP==1",
       lambda c: experts(c) > 0 and not given(c, "--disable-bias-linear")
       and (c.integer("--expert-tensor-parallel-size", tp(c)) or tp(c)) != 1,
       "MoE with biases in the linear layers (no --disable-bias-linear) and expert TP > 1",
       "add --disable-bias-linear, or use --expert-tensor-parallel-size 1", file=TCONF, check="moe"),
    _r("--moe-router-enable-expert-bias", 1462, "Expert bias for aux-loss-free routing only supports sigmoid",
       lambda c: on(c, "--moe-router-enable-expert-bias") and text(c, "--moe-router-score-function", "softmax") != "sigmoid",
       "--moe-router-enable-expert-bias without --moe-router-score-function sigmoid", "use the sigmoid score function",
       file=TCONF, check="moe"),
    _r("--moe-router-padding-for-quantization", 1491, "fp8/fp4 must be specified when moe_router_padding_for_quantization",
       lambda c: (on(c, "--moe-router-padding-for-quantization") or on(c, "--moe-router-padding-for-fp8"))
       and not (fp8(c) or fp4(c)),
       "router padding for quantization without --fp8-format or --fp4-format", "drop the padding, or train in FP8",
       file=TCONF, check="moe"),
    _r("--moe-token-dispatcher-type", 1496, "allgather and alltoall_seq dispatcher does not support",
       lambda c: (on(c, "--moe-router-padding-for-quantization") or on(c, "--moe-router-padding-for-fp8"))
       and dispatcher(c) == "allgather",
       "router padding for quantization with the allgather dispatcher (the default)", "use alltoall or flex",
       file=TCONF, check="moe"),
    _r("--moe-router-topk", 1508, "Please use --moe-router-pre-softmax when topk is 1.",
       lambda c: num(c, "--moe-router-topk", 2) == 1
       and text(c, "--moe-router-score-function", "softmax") == "softmax" and not on(c, "--moe-router-pre-softmax")
       and values(c, "--moe-router-load-balancing-type") != ("sinkhorn",),
       "--moe-router-topk 1 with softmax scores and no --moe-router-pre-softmax", "add --moe-router-pre-softmax",
       file=TCONF, check="moe"),
    _r("--moe-router-num-groups", 1518, "When using group limited routing, moe_router_num_groups must be specified.",
       lambda c: bool(num(c, "--moe-router-group-topk", 0)) and not num(c, "--moe-router-num-groups", 0),
       "--moe-router-group-topk without --moe-router-num-groups", "add --moe-router-num-groups", file=TCONF,
       check="moe"),
    _r("--moe-router-num-groups", 1521, "assert self.num_moe_experts % self.moe_router_num_groups == 0",
       lambda c: bool(num(c, "--moe-router-group-topk", 0)) and experts(c) > 0
       and int(num(c, "--moe-router-num-groups", 0)) > 0 and experts(c) % int(num(c, "--moe-router-num-groups", 1)) != 0,
       "--num-experts is not divisible by --moe-router-num-groups", "choose a group count that divides the experts",
       file=TCONF, check="moe"),
    _r("--moe-router-group-topk", 1525, "assert self.moe_router_group_topk <= self.moe_router_num_groups",
       lambda c: bool(num(c, "--moe-router-group-topk", 0)) and num(c, "--moe-router-num-groups", 0) > 0
       and num(c, "--moe-router-group-topk", 0) > num(c, "--moe-router-num-groups", 0),
       "--moe-router-group-topk is larger than --moe-router-num-groups", "choose group top-k <= groups",
       file=TCONF, check="moe"),
    _r("--cuda-graph-scope", 1602, "moe_preprocess cuda graph is only supported with moe_router cuda graph.",
       lambda c: graph_impl(c) == "transformer_engine" and "moe_preprocess" in graph_scope(c)
       and "moe_router" not in graph_scope(c),
       "moe_preprocess in --cuda-graph-scope without moe_router", "add moe_router", file=TCONF, check="cuda-graph"),
    _r("--cuda-graph-scope", 1607, "moe cuda graph is only supported for MoE.",
       lambda c: graph_impl(c) == "transformer_engine" and experts(c) <= 1
       and bool({"moe", "moe_router"} & set(graph_scope(c))),
       "moe / moe_router in --cuda-graph-scope without experts", "drop them from the scope", file=TCONF,
       check="cuda-graph"),
    _r("--cuda-graph-scope", 1613, "'mlp cuda graph is only supported for dense layers, '",
       lambda c: graph_impl(c) == "transformer_engine" and experts(c) > 1 and "mlp" in graph_scope(c)
       and all_moe_layers(c),
       "mlp in --cuda-graph-scope while every layer is an MoE layer", "drop mlp, or give dense layers in "
       "--moe-layer-freq", file=TCONF, check="cuda-graph"),
    _r("--cuda-graph-scope", 1622, "moe cuda graph is only supported with drop-padding MoE.",
       lambda c: graph_impl(c) == "transformer_engine" and experts(c) > 1 and "moe" in graph_scope(c)
       and not (num(c, "--moe-expert-capacity-factor", -1) >= 0 and on(c, "--moe-pad-expert-input-to-capacity")),
       "moe in --cuda-graph-scope without a capacity factor and --moe-pad-expert-input-to-capacity",
       "use moe_router, or drop-and-pad the experts' input", file=TCONF, check="cuda-graph"),
    _r("--recompute-granularity", 1635, "Full-layer CUDA graphs not supported with activation recomputation.",
       lambda c: graph_impl(c) != "none" and granularity(c) is not None and (
           granularity(c) != "selective" or not values(c, "--cuda-graph-scope")),
       "activation recompute with full-layer CUDA graphs (no --cuda-graph-scope)",
       "give a --cuda-graph-scope, or drop the recompute", file=TCONF, check="cuda-graph"),
    _r("--recompute-modules", 1645, "f'attn cuda graph is not supported with {module} recompute.'",
       lambda c: "attn" in graph_scope(c) and bool({"core_attn", "mla_up_proj"} & set(graph_recompute(c) or ())),
       "an attn CUDA graph with core_attn / mla_up_proj recompute (core_attn is the default module)",
       "give --recompute-modules without them", file=TCONF, check="cuda-graph"),
    _r("--recompute-modules", 1648, "f'mlp cuda graph is not supported with mlp recompute.'",
       lambda c: "mlp" in graph_scope(c) and "mlp" in (graph_recompute(c) or ()),
       "an mlp CUDA graph with mlp recompute", "drop one of them", file=TCONF, check="cuda-graph"),
    _r("--recompute-modules", 1653, "f'moe cuda graph is not supported with {module} recompute.'",
       lambda c: "moe" in graph_scope(c) and bool({"moe_act", "moe", "shared_experts"} & set(graph_recompute(c) or ())),
       "a moe CUDA graph with moe_act / moe / shared_experts recompute", "drop one of them", file=TCONF,
       check="cuda-graph"),
    _r("--recompute-modules", 1659, "f'moe_router cuda graph is not supported with {module} '",
       lambda c: "moe_router" in graph_scope(c) and bool({"moe", "shared_experts"} & set(graph_recompute(c) or ())),
       "a moe_router CUDA graph with moe / shared_experts recompute", "drop one of them", file=TCONF,
       check="cuda-graph"),
    _r("--recompute-modules", 1672, "'cuda graph is not supported with layernorm recompute.'",
       lambda c: "layernorm" in (graph_recompute(c) or ()) and "attn" in graph_scope(c) and "mlp" in graph_scope(c)
       and bool({"moe", "moe_router"} & set(graph_scope(c))),
       "layernorm recompute with attn, mlp and moe CUDA graphs", "drop layernorm recompute", file=TCONF,
       check="cuda-graph"),
    _r("--overlap-moe-expert-parallel-comm", 1721, "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and pp(c) > 1 and not vpp(c),
       "--overlap-moe-expert-parallel-comm with PP > 1 and no virtual pipeline stages", "use virtual stages",
       file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1727, "overlap_moe_expert_parallel_comm is only supported with expert model",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and ep(c) <= 1,
       "--overlap-moe-expert-parallel-comm with EP 1", "use EP > 1, or drop the overlap", file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1731, "overlap_moe_expert_parallel_comm is supported with alltoall/flex",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and dispatcher(c) not in ("alltoall", "flex"),
       "--overlap-moe-expert-parallel-comm with the allgather dispatcher", "use alltoall or flex", file=TCONF,
       check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1735, "disable full recomputation when enabling",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and granularity(c) == "full",
       "--overlap-moe-expert-parallel-comm with full recompute", "use selective recompute", file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1738, "disable recomputation method when enabling",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and given(c, "--recompute-method"),
       "--overlap-moe-expert-parallel-comm with --recompute-method", "drop the method", file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1741, "recompute_num_layers must be None when enabling",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and given(c, "--recompute-num-layers"),
       "--overlap-moe-expert-parallel-comm with --recompute-num-layers", "drop it", file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1746, "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and not (bf16(c) or fp16(c)),
       "--overlap-moe-expert-parallel-comm without --bf16 or --fp16", "add --bf16", file=TCONF, check="moe"),
    _r("--overlap-moe-expert-parallel-comm", 1750, "disable moe_shared_expert_overlap when enabling",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and on(c, "--moe-shared-expert-overlap"),
       "--overlap-moe-expert-parallel-comm with --moe-shared-expert-overlap", "drop one of them", file=TCONF,
       check="moe"),
    _r("--mtp-num-layers", 1753, "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm.",
       lambda c: on(c, "--overlap-moe-expert-parallel-comm") and num(c, "--mtp-num-layers", 1) not in (0, 1),
       "--overlap-moe-expert-parallel-comm with more than one MTP layer", "use --mtp-num-layers 1", file=TCONF,
       check="moe"),
    _r("--delay-wgrad-compute", 1759, "overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad",
       lambda c: on(c, "--delay-wgrad-compute") and not on(c, "--overlap-moe-expert-parallel-comm"),
       "--delay-wgrad-compute without --overlap-moe-expert-parallel-comm", "add the overlap, or drop it",
       file=TCONF, check="moe"),
    _r("--cp-comm-type", 1767, "f\"Length of cp_comm_type ({len(self.cp_comm_type)}) should equal to \"",
       lambda c: size(c, "--context-parallel-size") > 1 and len(values(c, "--cp-comm-type")) > 1
       and c.integer("--num-layers", None) is not None
       and len(values(c, "--cp-comm-type")) != c.integer("--num-layers", None),
       "--cp-comm-type gives neither one type nor one per layer", "give one type, or one per layer", file=TCONF),
    _r("--flash-decode", 1800, "flash_decode cannot be used with no_rope.",
       lambda c: given(c, "--no-rope-freq") and on(c, "--flash-decode"), "--flash-decode with --no-rope-freq",
       "drop one of them", file=TCONF),
    _r("--no-rope-freq", 1803, "f\"no_rope_freq={self.no_rope_freq} should be \"",
       lambda c: no_rope_bad(c), "--no-rope-freq does not fit --num-layers (N must divide them; a list needs one "
       "entry per layer)", "give a divisor of the layers, or one entry per layer", file=TCONF),
    _r("--rope-type", 1881, "apply_rope_fusion for MLA only works with YARN RoPE.",
       lambda c: mla(c) and rope_fusion(c) and text(c, "--rope-type", "yarn") != "yarn",
       "--multi-latent-attention with --rope-type rope and RoPE fusion on", "add --no-rope-fusion, or use yarn",
       file=TCONF),
    _r("--attention-output-gate", 1884, "Output gate is not supported for MLA yet.",
       lambda c: mla(c) and on(c, "--attention-output-gate"), "--attention-output-gate with --multi-latent-attention",
       "drop the output gate", file=TCONF),
    _r("--cache-mla-latents", 1889, "Rope Fusion is not compatible with caching latents",
       lambda c: mla(c) and on(c, "--cache-mla-latents") and rope_fusion(c),
       "--cache-mla-latents with RoPE fusion on", "add --no-rope-fusion", file=TCONF),
)

# ----------------------------------------------------------------- ModelParallelConfig.__post_init__

MODEL_PARALLEL_CONFIG: tuple[Combo, ...] = (
    _r("--defer-embedding-wgrad-compute", 379, "Cannot defer embedding wgrad compute when pipeline model parallel is not",
       lambda c: on(c, "--defer-embedding-wgrad-compute") and pp(c) == 1,
       "--defer-embedding-wgrad-compute with PP 1", "drop it, or use PP > 1", file=MPCONF),
    _r("--defer-embedding-wgrad-compute", 384, "Cannot defer embedding wgrad compute when gradient accumulation fusion",
       lambda c: on(c, "--defer-embedding-wgrad-compute") and given(c, "--no-gradient-accumulation-fusion"),
       "--defer-embedding-wgrad-compute with --no-gradient-accumulation-fusion", "drop one of them", file=MPCONF),
    _r("--wgrad-deferral-limit", 389, "Wgrad deferral limit should be greater than or equal to 0 when it is enabled!",
       lambda c: on(c, "--defer-embedding-wgrad-compute") and num(c, "--wgrad-deferral-limit", 0) < 0,
       "a negative --wgrad-deferral-limit", "give 0 or more", file=MPCONF),
    _r("--overlap-p2p-communication-warmup-flush", 405,
       "Pipeline parallel communication overlapping in warmup and flush is only",
       lambda c: on(c, "--overlap-p2p-communication-warmup-flush") and (
           given(c, "--no-overlap-p2p-communication") or not vpp(c)),
       "--overlap-p2p-communication-warmup-flush without p2p overlap (it is on only with virtual stages)",
       "use virtual stages and keep p2p overlap, or drop it", file=MPCONF),
)

ALL: tuple[Combo, ...] = VALIDATE_ARGS + TRANSFORMER_CONFIG + MODEL_PARALLEL_CONFIG


def _prod(values: tuple[str, ...]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _bad_retain(checks: C) -> bool:
    interval = num(checks, "--save-interval", num(checks, "--persistent-save-interval", 0))
    retain = num(checks, "--save-retain-interval", 0)
    return retain <= 0 or (interval > 0 and retain % interval != 0)
