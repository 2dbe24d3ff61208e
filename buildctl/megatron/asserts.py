"""The lint checks that stand for what Megatron's validate_args, Transformer Engine and DeepEP assert
(each cites its upstream line in rules.py)."""

from __future__ import annotations

import difflib

from buildctl.megatron import combos, rules
from buildctl.megatron.consistency import _Checks
from buildctl.megatron.report import LintFinding, _Use


class _Consistency(_Checks):
    """Every consistency check of one launch: those of _Checks and the upstream assertions here."""

    # Whether the launch is Megatron-LM's (the entrypoint names its component): combos.py's table is what
    # validate_args refuses, and another program's --save or --data-path means what that program says.
    megatron = True

    def run(self) -> list[LintFinding]:
        for check in (self.parallel_sizes, self.pipeline_layout, self.moe_layer_freq, self.hybridep,
                      self.mxfp8_param_gather, self.layers_per_stage, self.virtual_pipeline, self.attention_sizes,
                      self.sequence_parallel, self.recompute, self.experts, self.learning_rate, self.list_values,
                      self.fp8_hardware, self.grouped_gemm, self.hybridep_domain, self.max_connections,
                      self.combinations):
            check()
        return self.findings


    # -- what validate_args and the config classes assert (Megatron-LM; rules.py cites each)

    def combinations(self) -> None:
        """Flags validate_args or TransformerConfig refuse together, or without another (combos.py's table)."""
        if not self.megatron:
            return
        for r in combos.ALL:
            if r.when(self):
                self.add("error", r.check, r.flag, f"{r.message}: Megatron-LM refuses it ({r.cite.text!r})", r.fix,
                         self.at(r.flag), cite=r.cite)

    def layers_per_stage(self) -> None:
        """No layout, no virtual stages, no uneven first/last stage: the layers split evenly over PP."""
        if any(self.last(o) is not None for o in (
                "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
                "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
                "--decoder-last-pipeline-num-layers")):
            return
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        layers = self.split_layers()
        if layers is None or pp <= 1 or layers % pp == 0:
            return
        counted = "" if layers == self.integer("--num-layers", None) else " (embedding / loss counted as layers)"
        divisors = [d for d in range(1, layers + 1) if layers % d == 0 and d <= 64]
        self.add("error", "layers-pp", "--pipeline-model-parallel-size",
                 f"{layers} layers{counted} do not divide by PP {pp}: Megatron asserts 'Number of layers should be "
                 "divisible by the pipeline-model-parallel size'",
                 f"choose PP among {', '.join(map(str, divisors))}, or give a --pipeline-model-parallel-layout",
                 self.at("--pipeline-model-parallel-size", "--num-layers"), cite=rules.LAYERS_PP)

    def virtual_pipeline(self) -> None:
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        per_vstage = self.integer("--num-layers-per-virtual-pipeline-stage", None)
        if per_vstage is not None and self.last("--pipeline-model-parallel-layout") is None:
            flag = "--num-layers-per-virtual-pipeline-stage"
            if self.last("--num-virtual-stages-per-pipeline-rank") is None and (
                    self.last("--decoder-first-pipeline-num-layers") or self.last("--decoder-last-pipeline-num-layers")):
                self.add("error", "vpp", flag, "an uneven first/last stage with --num-layers-per-virtual-pipeline-stage",
                         "use --num-virtual-stages-per-pipeline-rank", self.at(flag), cite=rules.VPP_UNEVEN)
            layers = self.split_layers()
            if layers is not None and layers % pp:
                self.add("error", "vpp", flag, f"{layers} layers do not divide by PP {pp}",
                         "choose a PP that divides the layers", self.at(flag), cite=rules.LAYERS_PP_VPP)
            elif layers is not None and per_vstage and (layers // pp) % per_vstage:
                self.add("error", "vpp", flag,
                         f"{layers // pp} layers per pipeline stage do not divide by {per_vstage} per virtual stage",
                         "choose layers per virtual stage that divide the layers per stage", self.at(flag),
                         cite=rules.LAYERS_PER_VSTAGE)
        vpp = self.virtual_stages()
        if vpp is None:
            return
        overlap = self.last("--no-overlap-p2p-communication") is None  # store_false: present means off
        need = 2 if overlap else 3
        if pp < need:
            self.add("error", "vpp", "--pipeline-model-parallel-size",
                     f"{vpp} virtual stages per rank (the interleaved schedule) need PP > {need - 1}, PP is {pp}",
                     f"raise PP to {need} or more, or drop the virtual stages",
                     self.at("--pipeline-model-parallel-size", "--pipeline-model-parallel-layout"),
                     cite=rules.VPP_NEEDS_PP if overlap else rules.VPP_NEEDS_PP3)

    def attention_sizes(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        heads = self.integer("--num-attention-heads", None)
        hidden = self.integer("--hidden-size", None)
        if heads and hidden is not None and self.last("--kv-channels") is None and hidden % heads:
            self.add("error", "attention-sizes", "--hidden-size",
                     f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads} (and no --kv-channels)",
                     "give a hidden size that divides by the heads, or --kv-channels", self.at("--hidden-size"),
                     cite=rules.HIDDEN_HEADS)
        if self.flag_on("--group-query-attention"):
            groups = self.integer("--num-query-groups", 1)
            if groups is not None and groups % tp:
                self.add("error", "attention-sizes", "--num-query-groups",
                         f"--num-query-groups {groups} is not a multiple of TP {tp}",
                         "choose query groups that divide by TP", self.at("--num-query-groups",
                                                                          "--group-query-attention"),
                         cite=rules.HEADS_TP)
        cp = self.integer("--context-parallel-size", 1) or 1
        seq = self.integer("--seq-length", None)
        if seq is not None and cp > 1 and seq % (2 * cp):
            self.add("error", "attention-sizes", "--seq-length",
                     f"--seq-length {seq} is not a multiple of 2 x CP {cp}",
                     f"use a sequence length that divides by {2 * cp}", self.at("--seq-length"), cite=rules.SEQ_CP)
        maxpos = self.integer("--max-position-embeddings", None)
        if seq is not None and maxpos is not None and maxpos < seq:
            self.add("error", "attention-sizes", "--max-position-embeddings",
                     f"--max-position-embeddings {maxpos} is smaller than --seq-length {seq}",
                     f"give at least {seq}", self.at("--max-position-embeddings"), cite=rules.MAX_POS)

    def sequence_parallel(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        sp = self.flag_on("--sequence-parallel")
        if sp and tp == 1:
            self.add("warning", "sequence-parallel", "--sequence-parallel",
                     "TP is 1: Megatron turns sequence parallelism off ('Disabling sequence parallelism because "
                     "tensor model parallelism is disabled'); ModelParallelConfig would refuse it otherwise",
                     "drop --sequence-parallel, or use TP > 1", self.at("--sequence-parallel"), cite=rules.SP_DISABLED)
        if self.flag_on("--tp-comm-overlap") and not (sp and tp > 1):
            self.add("error", "sequence-parallel", "--tp-comm-overlap",
                     "--tp-comm-overlap needs sequence parallelism (--sequence-parallel with TP > 1)",
                     "add --sequence-parallel with TP > 1, or drop --tp-comm-overlap", self.at("--tp-comm-overlap"),
                     cite=rules.TP_COMM_OVERLAP_SP)

    def recompute(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        granularity = self.value("--recompute-granularity")
        method = self.value("--recompute-method")
        if self.flag_on("--distribute-saved-activations"):
            at = self.at("--distribute-saved-activations")
            if tp <= 1:
                self.add("error", "recompute", "--distribute-saved-activations", "needs TP > 1",
                         "drop it or raise TP", at, cite=rules.DISTRIBUTE_TP)
            if granularity != "full":
                self.add("error", "recompute", "--distribute-saved-activations",
                         "applies only to --recompute-granularity full", "add '- --recompute-granularity: full'", at,
                         cite=rules.DISTRIBUTE_FULL)
            if method is None:
                self.add("error", "recompute", "--distribute-saved-activations", "needs a --recompute-method",
                         "add '- --recompute-method: uniform' (or block)", at, cite=rules.DISTRIBUTE_METHOD)
        if granularity == "selective" and method is not None:
            self.add("error", "recompute", "--recompute-method",
                     "--recompute-method is not supported with --recompute-granularity selective",
                     "drop --recompute-method", self.at("--recompute-method"), cite=rules.SELECTIVE_METHOD)

    def experts(self) -> None:
        ep = self.integer("--expert-model-parallel-size", 1) or 1
        if ep <= 1:
            return
        at = self.at("--expert-model-parallel-size")
        if self.last("--num-experts") is None:
            self.add("error", "experts", "--expert-model-parallel-size", f"EP {ep} without --num-experts",
                     "add --num-experts", at, cite=rules.EP_NEEDS_EXPERTS)
        if self.flag_on("--fp16"):
            self.add("error", "experts", "--fp16", "expert parallelism is not supported with fp16 training",
                     "train in bf16", self.at("--fp16"), cite=rules.EP_FP16)

    def learning_rate(self) -> None:
        lr, min_lr = self.value("--lr"), self.value("--min-lr")
        try:
            bad = lr is not None and min_lr is not None and float(min_lr) > float(lr)
        except ValueError:
            return
        if bad:
            self.add("error", "learning-rate", "--min-lr", f"--min-lr {min_lr} is above --lr {lr}",
                     "give a --min-lr no larger than --lr", self.at("--min-lr"), cite=rules.MIN_LR)

    def list_values(self) -> None:
        """Values of list-valued flags against the names the pinned source accepts."""
        scope = self.last("--cuda-graph-scope")
        impl = self.value("--cuda-graph-impl") or "none"
        if scope is not None and scope.values and impl != "none":
            values = list(scope.values)
            if impl == "local":
                if values != ["full_iteration"]:
                    self.add("error", "list-values", "--cuda-graph-scope",
                             "with --cuda-graph-impl local the only valid scope is full_iteration",
                             "use --cuda-graph-impl transformer_engine for other scopes", scope.at,
                             cite=rules.GRAPH_SCOPE_LOCAL)
            else:
                accepted = rules.accepted_values(self.root, "cuda_graph_scope")
                self._names(scope, values, accepted, rules.GRAPH_SCOPE)
                if "moe" in values and "moe_router" in values:
                    self.add("error", "list-values", "--cuda-graph-scope", "moe and moe_router together",
                             "keep one of moe and moe_router", scope.at, cite=rules.GRAPH_SCOPE_MOE)
                self._preprocess_graph_sync(scope, values)
        modules = self.last("--recompute-modules")
        if modules is not None and modules.values and self.value("--recompute-granularity") == "selective":
            accepted = rules.accepted_values(self.root, "recompute_modules")
            self._names(modules, list(modules.values), accepted, rules.RECOMPUTE_MODULES)
            if "moe_act" in modules.values and not self.flag_on("--moe-grouped-gemm"):
                self.add("error", "list-values", "--recompute-modules", "moe_act needs --moe-grouped-gemm",
                         "add --moe-grouped-gemm or drop moe_act", modules.at, cite=rules.MOE_ACT_GROUPED)

    def _preprocess_graph_sync(self, scope: _Use, values: list[str]) -> None:
        """A moe_preprocess graph with the alltoall dispatcher syncs too late for padding or dropping."""
        if "moe_preprocess" not in values or self.value("--moe-token-dispatcher-type") != "alltoall":
            return
        needs_early = [f for f in ("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8")
                       if self.flag_on(f)]
        if self.value("--moe-expert-capacity-factor") is not None:
            needs_early.append("--moe-expert-capacity-factor")
        if needs_early:
            self.add("error", "list-values", "--cuda-graph-scope",
                     f"moe_preprocess with the alltoall dispatcher and {', '.join(needs_early)}: the dispatcher "
                     "copies its token counts to the host after the point where padding or dropping needs them, "
                     "and the first training step stops ('cuda_sync_point must be after cuda_dtoh_point'); "
                     "TransformerConfig does not catch it for --moe-router-padding-for-quantization",
                     "drop moe_preprocess from --cuda-graph-scope, or use another dispatcher (flex)", scope.at,
                     cite=rules.GRAPH_PREPROCESS_SYNC)

    def _names(self, use: _Use, values: list[str], accepted: rules.Accepted, cite: rules.Cite) -> None:
        for v in values:
            if "${" in v or v in accepted.values:
                continue
            close = difflib.get_close_matches(v, list(accepted.values), n=1, cutoff=0.5)
            self.add("error", "list-values", use.option,
                     f"{v!r} is not one of {', '.join(accepted.values)} (accepted names: {accepted.source})",
                     f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(accepted.values)}",
                     use.at, cite=cite, value=v)

    # -- what the variant's hardware refuses (Transformer Engine, DeepEP: facts cited in rules.py)

    def fp8_hardware(self) -> None:
        recipe_use = self.last("--fp8-recipe")
        fmt = self.value("--fp8-format")
        if fmt is None and recipe_use is not None and recipe_use.values and recipe_use.values[-1] != "delayed":
            self.add("warning", "fp8-hardware", "--fp8-recipe",
                     "FP8 is off without --fp8-format (Megatron's dest fp8): the recipe has no effect",
                     "add --fp8-format, or drop --fp8-recipe", recipe_use.at)
        archs = self.archs()
        if not archs:
            if fmt is not None or self.last("--fp4-format") is not None:
                self.notes.append("the variant declares no gpu_archs: FP8/FP4 recipes were not checked against "
                                  "the hardware")
            return
        shown = ", ".join(f"{a}.{b}" for a, b in archs)
        if fmt is not None:
            recipe = self.value("--fp8-recipe") or "delayed"
            at = recipe_use.at if recipe_use is not None else self.at("--fp8-format")
            for cc in archs:
                cite: rules.Cite | None = None
                if recipe in ("delayed", "tensorwise") and cc < (8, 9):
                    cite = rules.TE_FP8
                elif recipe == "mxfp8" and cc >= (12, 0):
                    cite = rules.TE_MXFP8_12
                elif recipe == "mxfp8" and cc < (10, 0):
                    cite = rules.TE_MXFP8
                elif recipe == "blockwise" and cc < (9, 0):
                    cite = rules.TE_BLOCK
                if cite is not None:
                    self.add("error", "fp8-hardware", "--fp8-recipe",
                             f"--fp8-recipe {recipe} on compute capability {cc[0]}.{cc[1]} (the variant's gpu_archs: "
                             f"{shown}): Transformer Engine refuses it: {cite.text!r}",
                             "on sm_90 use delayed or tensorwise (blockwise with CUDA >= 12.9); MXFP8 needs "
                             "sm_100", at, cite=cite, value=recipe)
                    break
            if recipe == "blockwise" and self.variant is not None and self.variant.cuda.split(".")[0] == "12":
                self.add("warning", "fp8-hardware", "--fp8-recipe",
                         f"blockwise scaling needs CUDA >= 12.9; the variant says CUDA {self.variant.cuda}",
                         "check the base's CUDA_VERSION", at, cite=rules.TE_BLOCK, value=recipe)
        fp4 = self.last("--fp4-format")
        if fp4 is not None and any(cc < (10, 0) for cc in archs):
            self.add("error", "fp8-hardware", "--fp4-format",
                     f"NVFP4 on compute capability {shown}: Transformer Engine needs 10.0 or higher",
                     "drop --fp4-format on this variant", fp4.at, cite=rules.TE_NVFP4)

    def grouped_gemm(self) -> None:
        if not self.flag_on("--moe-grouped-gemm"):
            return
        at = self.at("--moe-grouped-gemm")
        if not self.flag_on("--bf16"):
            self.add("error", "grouped-gemm", "--moe-grouped-gemm", "grouped GEMM for MoE needs --bf16",
                     "add --bf16", at, cite=rules.GROUPED_GEMM_BF16)
        old = [f"{a}.{b}" for a, b in self.archs() if a < 8]
        if old:
            self.add("error", "grouped-gemm", "--moe-grouped-gemm",
                     f"grouped GEMM needs compute capability 8.0 or higher; the variant has {', '.join(old)}",
                     "drop --moe-grouped-gemm on this variant", at, cite=rules.GROUPED_GEMM_CC)

    def max_connections(self) -> None:
        """TP or CP > 1 before Blackwell: validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment
        (unless FSDP or --overlap-moe-expert-parallel-comm, which only warn)."""
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        cp = self.integer("--context-parallel-size", 1) or 1
        if tp == 1 and cp == 1:
            return
        if any(self.flag_on(o) for o in ("--use-torch-fsdp2", "--use-megatron-fsdp",
                                         "--overlap-moe-expert-parallel-comm")):
            return
        old = [f"{a}.{b}" for a, b in self.archs() if a < 10]
        if not old or self.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            return
        have = self.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        self.add("error", "max-connections", "CUDA_DEVICE_MAX_CONNECTIONS",
                 f"TP {tp} x CP {cp} on compute capability {', '.join(old)} needs CUDA_DEVICE_MAX_CONNECTIONS=1 in "
                 f"the image's environment ({'it is unset' if have is None else f'it is {have!r}'})",
                 "add CUDA_DEVICE_MAX_CONNECTIONS: \"1\" to env", self.env_at, cite=rules.MAX_CONNECTIONS,
                 value=have or "")

    def hybridep_domain(self) -> None:
        """HybridEP's dispatch group within one NVLink domain, and that domain within the machine's NVLink."""
        if self.value("--moe-flex-dispatcher-backend") != "hybridep":
            return
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        ep = self.integer("--expert-model-parallel-size", 1) or 1
        etp = self.integer("--expert-tensor-parallel-size", tp) or tp
        group = ep * etp
        raw = self.env.get("NVLINK_DOMAIN_SIZE", "8")
        try:
            domain = int(raw)
        except ValueError:
            self.add("error", "hybridep-domain", "NVLINK_DOMAIN_SIZE", f"NVLINK_DOMAIN_SIZE={raw!r} is not an integer",
                     "give the GPUs of one NVLink domain", self.env_at, cite=rules.HYBRIDEP_DOMAIN, value=raw)
            return
        self.derived["hybridep_dispatch_group"] = group
        self.derived["nvlink_domain_size"] = domain
        said = "NVLINK_DOMAIN_SIZE" + (f"={raw}" if "NVLINK_DOMAIN_SIZE" in self.env else " unset (DeepEP's default 8)")
        if group > domain:
            self.add("error", "hybridep-domain", "--expert-model-parallel-size",
                     f"the expert-dispatch group ETP {etp} x EP {ep} = {group} spans more than one NVLink domain "
                     f"({said}): HybridEP then needs its multinode kernels, which DeepEP {rules.DEEPEP_AT} refuses to "
                     "build ('Multinode is not supported yet')",
                     f"choose ETP x EP <= {domain}, or a domain that holds the group",
                     self.at("--expert-model-parallel-size", "--moe-flex-dispatcher-backend"),
                     cite=rules.HYBRIDEP_MULTINODE, value=str(group))
        machine = self.variant.nvlink_domain if self.variant is not None else None
        if machine is None:
            self.notes.append("the variant declares no nvlink_domain: HybridEP's NVLINK_DOMAIN_SIZE was not "
                              "checked against the machine")
        elif domain > machine:
            self.add("error", "hybridep-domain", "NVLINK_DOMAIN_SIZE",
                     f"{said}, but NVLink joins {machine} GPUs on this variant's machine (nvlink_domain: {machine}): "
                     "HybridEP would treat GPUs without NVLink between them as one domain",
                     f"set NVLINK_DOMAIN_SIZE to {machine} or less for this variant", self.env_at,
                     cite=rules.HYBRIDEP_DOMAIN, value=raw)
