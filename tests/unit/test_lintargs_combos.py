"""lint-args' table of flags validate_args / TransformerConfig refuse together or without another (combos.py).

One case per rule: arguments that the upstream assertion refuses (the rule must fire, citing its line at
effebd81) and, where one is near, the fixed arguments it accepts (the rule must not fire). Every rule of
the table has its case (test_every_rule_has_a_case).
"""

from __future__ import annotations

import pytest

from buildctl.megatron import combos
from tests.unit.test_lintargs_rules import manifest, run

A, T = "megatron/training/arguments.py", "megatron/core/transformer/transformer_config.py"
M = "megatron/core/model_parallel_config.py"
MOE = "- --num-experts: 8\n- --disable-bias-linear\n"
FSDP2 = "- --use-torch-fsdp2\n- --no-gradient-accumulation-fusion\n- --untie-embeddings-and-output-weights\n"
OPG = "- --use-distributed-optimizer\n- --overlap-grad-reduce\n- --overlap-param-gather\n"
GRAPH = "- --cuda-graph-impl: transformer_engine\n"
SEL = "- --recompute-granularity: selective\n"
UNEVEN = "- --num-layers: 10\n- --pipeline-model-parallel-size: 4\n"
VPP = "- --pipeline-model-parallel-size: 4\n- --num-layers: 8\n- --num-layers-per-virtual-pipeline-stage: 1\n"

# (file:line, arguments refused, arguments accepted or None, env of the image)
CASES: list[tuple[str, str, str | None, str]] = [
    (f"{A}:394", "- --use-legacy-models\n", "- --use-legacy-models\n- --ckpt-format: torch\n", ""),
    (f"{A}:405", "- --attention-backend: local\n", "- --attention-backend: local\n- --spec: local\n", ""),
    (f"{A}:460", "- --context-parallel-size: 4\n- --hierarchical-context-parallel-sizes: [2, 3]\n",
     "- --context-parallel-size: 4\n- --hierarchical-context-parallel-sizes: [2, 2]\n", ""),
    (f"{A}:463", "- --cp-comm-type: a2a+p2p\n", "- --cp-comm-type: a2a+p2p\n- --hierarchical-context-parallel-sizes: [1]\n",
     ""),
    (f"{A}:416", "- --perform-rl-step\n- --rl-remove-kv-cache-during-training\n- --rl-offload-kv-cache-during-training\n",
     "- --perform-rl-step\n- --rl-offload-kv-cache-during-training\n", ""),
    (f"{A}:419", "- --perform-rl-step\n- --rl-remove-kv-cache-during-training\n- --rl-partial-rollouts\n",
     "- --perform-rl-step\n- --rl-partial-rollouts\n", ""),
    (f"{A}:428", "- --perform-rl-step\n- --global-batch-size: 48\n", "- --perform-rl-step\n- --global-batch-size: 64\n", ""),
    (f"{A}:436", "- --perform-rl-step\n- --global-batch-size: 32\n- --exit-interval: 6\n",
     "- --perform-rl-step\n- --global-batch-size: 32\n- --exit-interval: 8\n", ""),
    (f"{A}:439", "- --perform-rl-step\n- --global-batch-size: 32\n- --save-interval: 6\n",
     "- --perform-rl-step\n- --global-batch-size: 32\n- --save-interval: 8\n", ""),
    (f"{A}:442", "- --perform-rl-step\n- --rl-use-sequence-packing\n- --seq-length: 16384\n",
     "- --perform-rl-step\n- --rl-use-sequence-packing\n- --seq-length: 8192\n", ""),
    (f"{A}:781", "- --cuda-graph-impl: local\n- --cuda-graph-scope: full_iteration\n- --inference-dynamic-batching\n"
     "- --fp8-format: e4m3\n",
     "- --cuda-graph-impl: local\n- --cuda-graph-scope: full_iteration\n- --inference-dynamic-batching\n", ""),
    (f"{A}:469", "- --batch-size: 4\n", "- --micro-batch-size: 4\n", ""),
    (f"{A}:472", "- --warmup: 10\n", None, ""),
    (f"{A}:475", "- --model-parallel-size: 2\n", None, ""),
    (f"{A}:481", "- --checkpoint-activations\n", "- --recompute-activations\n", ""),
    (f"{A}:493", "- --external-cuda-graph\n- --cuda-graph-impl: transformer_engine\n", "- --external-cuda-graph\n", ""),
    (f"{A}:496", "- --enable-cuda-graph\n- --external-cuda-graph\n", None, ""),
    (f"{A}:536", "- --data-path: /d\n- --data-args-path: /a\n", "- --data-args-path: /a\n", ""),
    (f"{A}:543", "- --per-split-data-args-path: /a\n- --train-data-path: /t\n", "- --per-split-data-args-path: /a\n", ""),
    (f"{A}:549", "- --micro-batch-size: 0\n", "- --micro-batch-size: 1\n", ""),
    (f"{A}:555", "- --global-batch-size: 0\n", None, ""),
    (f"{A}:652", "- --overlap-param-gather\n- --overlap-grad-reduce\n", OPG, ""),
    (f"{A}:655", "- --overlap-param-gather\n- --use-distributed-optimizer\n", OPG, ""),
    (f"{A}:657", OPG + "- --use-legacy-models\n", None, ""),
    (f"{A}:663", FSDP2 + "- --pipeline-model-parallel-size: 2\n", FSDP2, ""),
    (f"{A}:665", FSDP2 + "- --expert-model-parallel-size: 2\n", FSDP2, ""),
    (f"{A}:667", FSDP2 + "- --use-distributed-optimizer\n", FSDP2, ""),
    (f"{A}:669", "- --use-torch-fsdp2\n- --untie-embeddings-and-output-weights\n", FSDP2, ""),
    (f"{A}:671", FSDP2 + "- --ckpt-format: torch\n", FSDP2 + "- --ckpt-format: torch_dcp\n", ""),
    (f"{A}:673", "- --use-torch-fsdp2\n- --no-gradient-accumulation-fusion\n", FSDP2, ""),
    (f"{A}:675", FSDP2 + "- --fp16\n", FSDP2 + "- --bf16\n", ""),
    (f"{A}:677", FSDP2, None, "{CUDA_DEVICE_MAX_CONNECTIONS: '1'}"),
    (f"{A}:691", "- --overlap-param-gather-with-optimizer-step\n", None, ""),
    (f"{A}:693", "- --overlap-param-gather-with-optimizer-step\n- --use-distributed-optimizer\n", None, ""),
    (f"{A}:695", OPG + "- --overlap-param-gather-with-optimizer-step\n- --ckpt-format: torch\n",
     OPG + VPP + "- --overlap-param-gather-with-optimizer-step\n- --ckpt-format: torch\n", ""),
    (f"{A}:697", OPG + VPP + "- --overlap-param-gather-with-optimizer-step\n",
     OPG + VPP + "- --overlap-param-gather-with-optimizer-step\n- --ckpt-format: torch\n", ""),
    (f"{A}:711", "- --fp8-format: e4m3\n- --fp8-param-gather\n",
     "- --fp8-format: e4m3\n- --fp8-param-gather\n- --use-distributed-optimizer\n", ""),
    (f"{A}:715", "- --fp4-format: e2m1\n- --fp8-format: e4m3\n", "- --fp4-format: e2m1\n", ""),
    (f"{A}:719", "- --fp4-param-gather\n", "- --fp4-param-gather\n- --fp4-format: e2m1\n", ""),
    (f"{A}:739", "- --use-megatron-fsdp\n- --ckpt-format: fsdp_dtensor\n- --data-parallel-sharding-strategy: "
     "optim_grads_params\n- --check-weight-hash-across-dp-replicas-interval: 10\n",
     "- --use-megatron-fsdp\n- --ckpt-format: fsdp_dtensor\n- --data-parallel-sharding-strategy: optim_grads_params\n",
     ""),
    (f"{A}:742", "- --use-megatron-fsdp\n- --ckpt-format: fsdp_dtensor\n", None, "{CUDA_DEVICE_MAX_CONNECTIONS: '1'}"),
    (f"{A}:745", "- --use-megatron-fsdp\n", "- --use-megatron-fsdp\n- --ckpt-format: fsdp_dtensor\n", ""),
    (f"{A}:750", "- --fp16\n- --bf16\n", "- --bf16\n", ""),
    (f"{A}:766", "- --bf16\n- --accumulate-allreduce-grads-in-fp32\n- --main-grads-dtype: bf16\n",
     "- --bf16\n- --accumulate-allreduce-grads-in-fp32\n", ""),
    (f"{A}:778", "- --cuda-graph-impl: local\n- --cuda-graph-scope: full_iteration\n",
     "- --cuda-graph-impl: local\n- --cuda-graph-scope: full_iteration\n- --no-check-for-nan-in-loss-and-grad\n", ""),
    (f"{A}:791", "- --num-dataset-builder-threads: 0\n", "- --num-dataset-builder-threads: 2\n", ""),
    (f"{A}:811", "- --train-iters: 10\n- --train-samples: 100\n", "- --train-iters: 10\n", ""),
    (f"{A}:814", "- --train-iters: 10\n- --lr-decay-samples: 100\n", "- --train-iters: 10\n- --lr-decay-iters: 10\n", ""),
    (f"{A}:816", "- --train-iters: 10\n- --lr-warmup-samples: 100\n", "- --train-iters: 10\n- --lr-warmup-iters: 1\n",
     ""),
    (f"{A}:818", "- --train-iters: 10\n- --rampup-batch-size: [4, 4, 100]\n",
     "- --train-samples: 1000\n- --rampup-batch-size: [4, 4, 100]\n", ""),
    (f"{A}:821", "- --train-iters: 10\n- --lr-warmup-fraction: '.01'\n- --lr-warmup-iters: 1\n",
     "- --train-iters: 10\n- --lr-warmup-fraction: '.01'\n", ""),
    (f"{A}:828", "- --train-iters: 0\n- --train-samples: 100\n", "- --train-samples: 100\n", ""),
    (f"{A}:830", "- --train-samples: 100\n- --lr-decay-iters: 10\n", "- --train-samples: 100\n- --lr-decay-samples: 90\n",
     ""),
    (f"{A}:832", "- --train-samples: 100\n- --lr-warmup-iters: 1\n", "- --train-samples: 100\n- --lr-warmup-samples: 9\n",
     ""),
    (f"{A}:836", "- --train-samples: 100\n- --lr-warmup-fraction: '.01'\n- --lr-warmup-samples: 9\n",
     "- --train-samples: 100\n- --lr-warmup-fraction: '.01'\n", ""),
    (f"{A}:840", "- --num-layers: 2\n- --encoder-num-layers: 2\n", "- --num-layers: 2\n", ""),
    (f"{A}:875", "- --seq-length: 512\n- --encoder-seq-length: 512\n", "- --seq-length: 512\n", ""),
    (f"{A}:886", "- --max-position-embeddings: 512\n- --decoder-seq-length: 1024\n",
     "- --max-position-embeddings: 1024\n- --decoder-seq-length: 1024\n", ""),
    (f"{A}:890", "- --save: /c\n", "- --save: /c\n- --save-interval: 100\n", ""),
    (f"{A}:891", "- --save: /c\n- --save-interval: 0\n", "- --save: /c\n- --persistent-save-interval: 10\n", ""),
    (f"{A}:894", "- --save: /c\n- --save-interval: 100\n- --save-retain-interval: 150\n",
     "- --save: /c\n- --save-interval: 100\n- --save-retain-interval: 300\n", ""),
    (f"{A}:897", "- --bf16\n- --fp16-lm-cross-entropy\n", "- --fp16\n- --fp16-lm-cross-entropy\n", ""),
    (f"{A}:900", "- --fp32-residual-connection\n", "- --bf16\n- --fp32-residual-connection\n", ""),
    (f"{A}:908", "- --start-weight-decay: '0.01'\n",
     "- --weight-decay-incr-style: linear\n- --start-weight-decay: '0.01'\n- --end-weight-decay: '0.1'\n", ""),
    (f"{A}:913", "- --weight-decay-incr-style: linear\n- --start-weight-decay: '0.01'\n",
     "- --weight-decay-incr-style: linear\n- --start-weight-decay: '0.01'\n- --end-weight-decay: '0.1'\n", ""),
    (f"{A}:1023", "- --use-legacy-models\n- --ckpt-format: torch\n- --decoupled-lr: '1e-4'\n", "- --decoupled-lr: '1e-4'\n",
     ""),
    (f"{A}:1029", "- --use-legacy-models\n- --ckpt-format: torch\n- --rotary-interleaved\n", "- --rotary-interleaved\n", ""),
    (f"{A}:1036", "- --no-position-embedding\n",
     "- --no-position-embedding\n- --position-embedding-type: rope\n", ""),
    (f"{A}:1042", "- --position-embedding-type: relative\n- --transformer-impl: local\n",
     "- --position-embedding-type: relative\n", ""),
    (f"{A}:1047", "- --position-embedding-type: mrope\n", "- --position-embedding-type: mrope\n- --mrope-section: [16, 24, 24]\n",
     ""),
    (f"{A}:1053", MOE + "- --spec: local\n", MOE, ""),
    (f"{A}:1060", "- --use-legacy-models\n- --ckpt-format: torch\n- --context-parallel-size: 2\n", None, ""),
    (f"{A}:1082", "- --ckpt-format: torch_dcp\n", FSDP2 + "- --ckpt-format: torch_dcp\n", ""),
    (f"{A}:1084", FSDP2 + "- --ckpt-format: torch_dcp\n- --tensor-model-parallel-size: 2\n", None, ""),
    (f"{A}:1086", FSDP2 + "- --ckpt-format: torch_dcp\n- --pipeline-model-parallel-size: 2\n", None, ""),
    (f"{A}:1090", "- --ckpt-format: fsdp_dtensor\n", "- --ckpt-format: fsdp_dtensor\n- --use-megatron-fsdp\n", ""),
    (f"{A}:1093", "- --mock-data\n- --data-path: /d\n", "- --mock-data\n", ""),
    (f"{A}:1100", "- --deterministic-mode\n- --use-flash-attn\n", None, "{NCCL_ALGO: Ring}"),
    (f"{A}:1101", "- --deterministic-mode\n- --cross-entropy-loss-fusion\n", None, "{NCCL_ALGO: Ring}"),
    (f"{A}:1105", "- --deterministic-mode\n", None, "{NCCL_ALGO: NVLS}"),
    (f"{A}:1126", "- --disable-gloo-process-groups\n- --use-distributed-optimizer\n- --ckpt-format: torch\n",
     "- --disable-gloo-process-groups\n- --use-distributed-optimizer\n", ""),
    (f"{A}:1130", "- --disable-gloo-process-groups\n- --use-distributed-optimizer\n- --dist-ckpt-optim-fully-reshardable\n"
     "- --distrib-optim-fully-reshardable-mem-efficient\n",
     "- --use-distributed-optimizer\n- --dist-ckpt-optim-fully-reshardable\n"
     "- --distrib-optim-fully-reshardable-mem-efficient\n", ""),
    (f"{A}:1154", "- --load-main-params-from-ckpt\n", "- --load-main-params-from-ckpt\n- --no-load-optim\n", ""),
    (f"{A}:1159", "- --inference-batch-times-seqlen-threshold: 512\n",
     "- --inference-batch-times-seqlen-threshold: 512\n- --pipeline-model-parallel-size: 2\n", ""),
    (f"{A}:1162", "- --inference-batch-times-seqlen-threshold: 512\n- --pipeline-model-parallel-size: 2\n"
     "- --cuda-graph-impl: transformer_engine\n", None, ""),
    (f"{A}:1166", "- --inference-dynamic-batching\n- --inference-dynamic-batching-block-size: 100\n",
     "- --inference-dynamic-batching\n- --inference-dynamic-batching-block-size: 512\n", ""),
    (f"{A}:1171", "- --moe-use-upcycling\n", "- --moe-use-upcycling\n- --save: /c\n- --save-interval: 10\n", ""),
    (f"{A}:1181", "- --optimizer: muon\n- --use-distributed-optimizer\n- --ckpt-format: torch\n",
     "- --optimizer: muon\n- --ckpt-format: torch\n", ""),
    (f"{A}:1182", "- --optimizer: dist_muon\n- --use-torch-fsdp2\n", None, ""),
    (f"{A}:1183", "- --optimizer: muon\n- --use-megatron-fsdp\n", None, ""),
    (f"{A}:1184", "- --optimizer: muon\n", "- --optimizer: adam\n", ""),
    (f"{A}:1189", "- --optimizer-cpu-offload\n", "- --optimizer-cpu-offload\n- --use-precision-aware-optimizer\n", ""),
    (f"{A}:1192", "- --optimizer-cpu-offload\n- --use-precision-aware-optimizer\n- --fp8-param-gather\n"
     "- --fp8-recipe: mxfp8\n",
     "- --optimizer-cpu-offload\n- --use-precision-aware-optimizer\n- --fp8-param-gather\n- --fp8-recipe: delayed\n", ""),
    (f"{A}:1198", "- --non-persistent-ckpt-type: local\n",
     "- --non-persistent-ckpt-type: local\n- --non-persistent-local-ckpt-dir: /l\n", ""),
    (f"{A}:1200", "- --replication\n- --non-persistent-ckpt-type: local\n",
     "- --replication\n- --replication-jump: 8\n- --non-persistent-ckpt-type: local\n", ""),
    (f"{A}:1201", "- --replication\n- --replication-jump: 8\n", None, ""),
    (f"{A}:1208", "- --delay-wgrad-compute\n- --transformer-impl: local\n", None, ""),
    (f"{A}:1221", "- --fine-grained-activation-offloading\n- --transformer-impl: local\n",
     "- --fine-grained-activation-offloading\n", ""),
    (f"{A}:1224", "- --mtp-num-layers: 1\n- --use-legacy-models\n- --ckpt-format: torch\n- --position-embedding-type: rope\n",
     "- --mtp-num-layers: 1\n- --position-embedding-type: rope\n", ""),
    (f"{A}:1226", "- --mtp-num-layers: 1\n", "- --mtp-num-layers: 1\n- --position-embedding-type: none\n", ""),
    (f"{A}:1239", "- --cuda-graph-impl: transformer_engine\n", None,
     "{PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}"),
    (f"{A}:1244", "- --cuda-graph-impl: transformer_engine\n- --recompute-granularity: full\n",
     "- --cuda-graph-impl: transformer_engine\n- --recompute-granularity: selective\n", ""),
    (f"{A}:1306", "- --squared-relu\n- --swiglu\n", "- --squared-relu\n", ""),
    (f"{A}:1309", "- --quick-geglu\n- --swiglu\n", "- --quick-geglu\n", ""),
    (f"{A}:1325", "- --rope-type: yarn\n", "- --rope-type: yarn\n- --multi-latent-attention\n", ""),
    (f"{T}:841", "- --linear-attention-type: gated_delta_net\n",
     "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n", ""),
    (f"{T}:860", "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n- --linear-num-value-heads: 24\n",
     "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n- --linear-num-value-heads: 48\n", ""),
    (f"{T}:867", "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n"
     "- --tensor-model-parallel-size: 32\n- --linear-num-value-heads: 64\n",
     "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n- --tensor-model-parallel-size: 16\n",
     ""),
    (f"{T}:870", "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n"
     "- --tensor-model-parallel-size: 8\n- --linear-num-key-heads: 8\n- --linear-num-value-heads: 12\n", None, ""),
    (f"{T}:874", "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n- --context-parallel-size: 2\n",
     "- --linear-attention-type: gated_delta_net\n- --linear-attention-freq: 4\n", ""),
    (f"{T}:879", "- --linear-attention-type: mamba\n", None, ""),
    (f"{T}:1767", "- --context-parallel-size: 2\n- --num-layers: 4\n- --cp-comm-type: [p2p, a2a]\n",
     "- --context-parallel-size: 2\n- --num-layers: 4\n- --cp-comm-type: [p2p, a2a, p2p, a2a]\n", ""),
    (f"{T}:1800", "- --no-rope-freq: 4\n- --flash-decode\n- --num-layers: 8\n", "- --no-rope-freq: 4\n- --num-layers: 8\n", ""),
    (f"{T}:1803", "- --no-rope-freq: 3\n- --num-layers: 8\n", "- --no-rope-freq: '[0]*7+[1]'\n- --num-layers: 8\n", ""),
    (f"{T}:1881", "- --multi-latent-attention\n- --rope-type: rope\n",
     "- --multi-latent-attention\n- --rope-type: rope\n- --no-rope-fusion\n", ""),
    (f"{T}:1884", "- --multi-latent-attention\n- --attention-output-gate\n", "- --attention-output-gate\n", ""),
    (f"{T}:1889", "- --multi-latent-attention\n- --cache-mla-latents\n",
     "- --multi-latent-attention\n- --cache-mla-latents\n- --no-rope-fusion\n", ""),
    (f"{T}:884", "- --fp8-format: e4m3\n- --first-last-layers-bf16\n",
     "- --fp8-format: e4m3\n- --fp8-recipe: tensorwise\n- --first-last-layers-bf16\n", ""),
    (f"{T}:913", "- --fp8-param-gather\n- --use-distributed-optimizer\n",
     "- --fp8-param-gather\n- --use-distributed-optimizer\n- --fp8-format: e4m3\n", ""),
    (f"{T}:938", "- --moe-ffn-hidden-size: 512\n", MOE + "- --moe-ffn-hidden-size: 512\n", ""),
    (f"{T}:942", MOE + "- --moe-enable-deepep\n", MOE + "- --moe-enable-deepep\n- --moe-token-dispatcher-type: flex\n", ""),
    (f"{T}:953", MOE + "- --moe-token-dispatcher-type: flex\n- --moe-pad-expert-input-to-capacity\n"
     "- --moe-expert-capacity-factor: '1.0'\n",
     MOE + "- --moe-token-dispatcher-type: flex\n- --moe-flex-dispatcher-backend: hybridep\n"
     "- --moe-pad-expert-input-to-capacity\n- --moe-expert-capacity-factor: '1.0'\n", ""),
    (f"{T}:960", MOE + "- --moe-shared-expert-intermediate-size: 0\n", MOE + "- --moe-shared-expert-intermediate-size: 64\n",
     ""),
    (f"{T}:968", MOE + "- --moe-shared-expert-intermediate-size: 512\n- --moe-shared-expert-overlap\n",
     MOE + "- --moe-shared-expert-intermediate-size: 512\n- --moe-shared-expert-overlap\n"
     "- --moe-token-dispatcher-type: alltoall\n", ""),
    (f"{T}:1001", MOE + "- --moe-expert-capacity-factor: '1.0'\n- --moe-router-load-balancing-type: sinkhorn\n",
     MOE + "- --moe-expert-capacity-factor: '1.0'\n- --moe-router-load-balancing-type: aux_loss\n", ""),
    (f"{T}:1008", MOE + "- --moe-pad-expert-input-to-capacity\n",
     MOE + "- --moe-pad-expert-input-to-capacity\n- --moe-expert-capacity-factor: '1.0'\n", ""),
    (f"{T}:1043", "- --recompute-granularity: full\n- --recompute-num-layers: 1\n",
     "- --recompute-granularity: full\n- --recompute-num-layers: 1\n- --recompute-method: block\n", ""),
    (f"{T}:1049", "- --recompute-granularity: full\n- --recompute-method: block\n",
     "- --recompute-granularity: full\n- --recompute-num-layers: 1\n- --recompute-method: block\n", ""),
    (f"{T}:1058", "- --recompute-granularity: selective\n- --recompute-num-layers: 1\n",
     "- --recompute-granularity: selective\n", ""),
    (f"{T}:1064", "- --tensor-model-parallel-size: 2\n- --sequence-parallel\n- --distribute-saved-activations\n"
     "- --recompute-granularity: full\n- --recompute-method: uniform\n- --recompute-num-layers: 1\n",
     "- --tensor-model-parallel-size: 2\n- --distribute-saved-activations\n"
     "- --recompute-granularity: full\n- --recompute-method: uniform\n- --recompute-num-layers: 1\n", ""),
    (f"{T}:1094", SEL + "- --recompute-modules: [mla_up_proj]\n",
     SEL + "- --recompute-modules: [mla_up_proj]\n- --multi-latent-attention\n", ""),
    (f"{T}:1112", MOE + SEL + "- --recompute-modules: [shared_experts]\n- --moe-shared-expert-intermediate-size: 512\n"
     "- --moe-shared-expert-overlap\n- --moe-token-dispatcher-type: alltoall\n",
     MOE + SEL + "- --recompute-modules: [shared_experts]\n- --moe-shared-expert-intermediate-size: 512\n"
     "- --moe-token-dispatcher-type: alltoall\n", ""),
    (f"{T}:1119", SEL + "- --recompute-modules: [layernorm]\n- --fp8-format: e4m3\n",
     SEL + "- --recompute-modules: [layernorm]\n- --fp8-format: e4m3\n- --fp8-recipe: tensorwise\n", ""),
    (f"{T}:1136", "- --moe-layer-recompute\n- --recompute-granularity: full\n- --recompute-method: block\n"
     "- --recompute-num-layers: 1\n", "- --moe-layer-recompute\n", ""),
    (f"{T}:1146", "- --fine-grained-activation-offloading\n",
     "- --fine-grained-activation-offloading\n- --offload-modules: [core_attn]\n", ""),
    (f"{T}:1163", "- --fine-grained-activation-offloading\n- --offload-modules: [attn_proj]\n",
     "- --fine-grained-activation-offloading\n- --offload-modules: [core_attn, attn_proj]\n", ""),
    (f"{T}:1175", UNEVEN + "- --decoder-first-pipeline-num-layers: 1\n- --account-for-loss-in-pipeline-split\n",
     UNEVEN + "- --decoder-first-pipeline-num-layers: 1\n", ""),
    (f"{T}:1192", "- --pipeline-model-parallel-size: 2\n- --pipeline-model-parallel-layout: 'Et|tL'\n"
     "- --account-for-loss-in-pipeline-split\n",
     "- --pipeline-model-parallel-size: 2\n- --pipeline-model-parallel-layout: 'Et|tL'\n", ""),
    (f"{T}:1243", UNEVEN + "- --decoder-first-pipeline-num-layers: 0\n",
     UNEVEN + "- --decoder-first-pipeline-num-layers: 1\n", ""),
    (f"{T}:1252", "- --num-layers: 14\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --decoder-first-pipeline-num-layers: 3\n- --decoder-last-pipeline-num-layers: 3\n",
     "- --num-layers: 12\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --decoder-first-pipeline-num-layers: 2\n- --decoder-last-pipeline-num-layers: 2\n", ""),
    (f"{T}:1262", UNEVEN + "- --decoder-last-pipeline-num-layers: -1\n",
     UNEVEN + "- --decoder-last-pipeline-num-layers: 1\n", ""),
    (f"{T}:1271", "- --num-layers: 13\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --decoder-last-pipeline-num-layers: 1\n", None, ""),
    (f"{T}:1283", UNEVEN + "- --decoder-first-pipeline-num-layers: 2\n",
     UNEVEN + "- --decoder-first-pipeline-num-layers: 1\n", ""),
    (f"{T}:1297", "- --num-layers: 10\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --decoder-first-pipeline-num-layers: 2\n- --decoder-last-pipeline-num-layers: 2\n",
     "- --num-layers: 12\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --decoder-first-pipeline-num-layers: 2\n- --decoder-last-pipeline-num-layers: 2\n", ""),
    (f"{T}:1329", "- --num-layers: 8\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --account-for-loss-in-pipeline-split\n",
     "- --num-layers: 7\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --account-for-loss-in-pipeline-split\n", ""),
    (f"{T}:1342", "- --num-layers: 11\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --account-for-loss-in-pipeline-split\n",
     "- --num-layers: 15\n- --pipeline-model-parallel-size: 4\n- --num-virtual-stages-per-pipeline-rank: 2\n"
     "- --account-for-loss-in-pipeline-split\n", ""),
    (f"{M}:379", "- --defer-embedding-wgrad-compute\n",
     "- --defer-embedding-wgrad-compute\n- --pipeline-model-parallel-size: 2\n", ""),
    (f"{M}:384", "- --defer-embedding-wgrad-compute\n- --pipeline-model-parallel-size: 2\n"
     "- --no-gradient-accumulation-fusion\n", None, ""),
    (f"{M}:389", "- --defer-embedding-wgrad-compute\n- --pipeline-model-parallel-size: 2\n- --wgrad-deferral-limit: -1\n",
     "- --defer-embedding-wgrad-compute\n- --pipeline-model-parallel-size: 2\n- --wgrad-deferral-limit: 2\n", ""),
    (f"{M}:405", "- --overlap-p2p-communication-warmup-flush\n",
     "- --overlap-p2p-communication-warmup-flush\n" + VPP, ""),
    (f"{T}:1355", "- --squared-relu\n", "- --squared-relu\n- --no-bias-gelu-fusion\n", ""),
    (f"{T}:1374", "- --glu-linear-offset: '1.0'\n", "- --glu-linear-offset: '1.0'\n- --quick-geglu\n", ""),
    (f"{T}:1380", "- --use-te-activation-func\n", "- --use-te-activation-func\n- --no-bias-gelu-fusion\n", ""),
    (f"{T}:1388", "- --use-te-activation-func\n- --quick-geglu\n- --no-bias-gelu-fusion\n",
     "- --use-te-activation-func\n- --swiglu\n- --no-bias-swiglu-fusion\n", ""),
    (f"{T}:1426", "- --multi-latent-attention\n- --rotary-interleaved\n", "- --multi-latent-attention\n", ""),
    (f"{T}:1458", "- --num-experts: 8\n- --tensor-model-parallel-size: 2\n",
     "- --num-experts: 8\n- --tensor-model-parallel-size: 2\n- --expert-tensor-parallel-size: 1\n", ""),
    (f"{T}:1462", MOE + "- --moe-router-enable-expert-bias\n",
     MOE + "- --moe-router-enable-expert-bias\n- --moe-router-score-function: sigmoid\n", ""),
    (f"{T}:1491", MOE + "- --moe-router-padding-for-fp8\n- --moe-token-dispatcher-type: alltoall\n",
     MOE + "- --moe-router-padding-for-fp8\n- --moe-token-dispatcher-type: alltoall\n- --fp8-format: e4m3\n", ""),
    (f"{T}:1496", MOE + "- --moe-router-padding-for-quantization\n- --fp8-format: e4m3\n",
     MOE + "- --moe-router-padding-for-quantization\n- --fp8-format: e4m3\n- --moe-token-dispatcher-type: alltoall\n",
     ""),
    (f"{T}:1508", MOE + "- --moe-router-topk: 1\n", MOE + "- --moe-router-topk: 1\n- --moe-router-pre-softmax\n", ""),
    (f"{T}:1518", MOE + "- --moe-router-group-topk: 2\n", MOE + "- --moe-router-group-topk: 2\n- --moe-router-num-groups: 4\n",
     ""),
    (f"{T}:1521", MOE + "- --moe-router-group-topk: 2\n- --moe-router-num-groups: 3\n",
     MOE + "- --moe-router-group-topk: 2\n- --moe-router-num-groups: 4\n", ""),
    (f"{T}:1525", MOE + "- --moe-router-group-topk: 8\n- --moe-router-num-groups: 4\n",
     MOE + "- --moe-router-group-topk: 4\n- --moe-router-num-groups: 4\n", ""),
    (f"{T}:898", "- --fp8-format: e4m3\n- --fp8-recipe: tensorwise\n- --first-last-layers-bf16\n- --num-layers: 4\n"
     "- --pipeline-model-parallel-size: 2\n- --num-layers-at-start-in-bf16: 3\n",
     "- --fp8-format: e4m3\n- --fp8-recipe: tensorwise\n- --first-last-layers-bf16\n- --num-layers: 4\n"
     "- --pipeline-model-parallel-size: 2\n- --num-layers-at-start-in-bf16: 2\n", ""),
    (f"{T}:907", "- --fp8-format: e4m3\n- --fp8-recipe: tensorwise\n- --first-last-layers-bf16\n- --num-layers: 4\n"
     "- --num-layers-at-end-in-bf16: -1\n", None, ""),
    (f"{T}:975", MOE + "- --moe-router-load-balancing-type: [aux_loss, seq_aux_loss]\n- --moe-aux-loss-coeff: '1e-3'\n",
     MOE + "- --moe-router-load-balancing-type: [aux_loss, seq_aux_loss]\n- --moe-aux-loss-coeff: ['1e-3', '1e-4']\n",
     ""),
    (f"{T}:1158", "- --fine-grained-activation-offloading\n- --offload-modules: [core_attn, mlp]\n",
     "- --fine-grained-activation-offloading\n- --offload-modules: [core_attn, qkv_linear]\n", ""),
    (f"{T}:1602", MOE + GRAPH + "- --cuda-graph-scope: [attn, moe_preprocess]\n",
     MOE + GRAPH + "- --cuda-graph-scope: [attn, moe_router, moe_preprocess]\n", ""),
    (f"{T}:1607", GRAPH + "- --cuda-graph-scope: [attn, moe_router]\n", MOE + GRAPH + "- --cuda-graph-scope: [attn, moe_router]\n",
     ""),
    (f"{T}:1613", MOE + GRAPH + "- --cuda-graph-scope: [attn, mlp]\n",
     MOE + GRAPH + "- --cuda-graph-scope: [attn, mlp]\n- --moe-layer-freq: '([0]*1+[1]*3)'\n", ""),
    (f"{T}:1622", MOE + GRAPH + "- --cuda-graph-scope: [moe]\n",
     MOE + GRAPH + "- --cuda-graph-scope: [moe]\n- --moe-expert-capacity-factor: '1.0'\n"
     "- --moe-pad-expert-input-to-capacity\n", ""),
    (f"{T}:1635", GRAPH + SEL, GRAPH + SEL + "- --cuda-graph-scope: [mlp]\n", ""),
    (f"{T}:1645", GRAPH + SEL + "- --cuda-graph-scope: [attn]\n",
     GRAPH + SEL + "- --cuda-graph-scope: [attn]\n- --recompute-modules: [mlp]\n", ""),
    (f"{T}:1648", GRAPH + SEL + "- --cuda-graph-scope: [mlp]\n- --recompute-modules: [mlp]\n",
     GRAPH + SEL + "- --cuda-graph-scope: [mlp]\n- --recompute-modules: [core_attn]\n", ""),
    (f"{T}:1653", MOE + GRAPH + SEL + "- --cuda-graph-scope: [moe]\n- --recompute-modules: [moe]\n",
     MOE + GRAPH + SEL + "- --cuda-graph-scope: [moe]\n- --recompute-modules: [core_attn]\n", ""),
    (f"{T}:1659", MOE + GRAPH + SEL + "- --cuda-graph-scope: [moe_router]\n- --recompute-modules: [shared_experts]\n",
     MOE + GRAPH + SEL + "- --cuda-graph-scope: [moe_router]\n- --recompute-modules: [moe_act]\n", ""),
    (f"{T}:1672", MOE + GRAPH + SEL + "- --cuda-graph-scope: [attn, mlp, moe_router]\n- --recompute-modules: [layernorm]\n",
     MOE + GRAPH + SEL + "- --cuda-graph-scope: [attn, moe_router]\n- --recompute-modules: [layernorm]\n", ""),
    (f"{T}:1738", "- --overlap-moe-expert-parallel-comm\n- --recompute-method: uniform\n", None, ""),
    (f"{T}:1741", "- --overlap-moe-expert-parallel-comm\n- --recompute-num-layers: 1\n", None, ""),
    (f"{T}:1753", "- --overlap-moe-expert-parallel-comm\n- --mtp-num-layers: 2\n",
     "- --overlap-moe-expert-parallel-comm\n- --mtp-num-layers: 1\n", ""),
    (f"{T}:1721", "- --overlap-moe-expert-parallel-comm\n- --pipeline-model-parallel-size: 2\n", None, ""),
    (f"{T}:1727", "- --overlap-moe-expert-parallel-comm\n", None, ""),
    (f"{T}:1731", "- --overlap-moe-expert-parallel-comm\n- --expert-model-parallel-size: 2\n",
     MOE + "- --bf16\n- --overlap-moe-expert-parallel-comm\n- --expert-model-parallel-size: 2\n"
     "- --moe-token-dispatcher-type: alltoall\n", ""),
    (f"{T}:1735", "- --overlap-moe-expert-parallel-comm\n- --recompute-granularity: full\n", None, ""),
    (f"{T}:1746", "- --overlap-moe-expert-parallel-comm\n", None, ""),
    (f"{T}:1750", "- --overlap-moe-expert-parallel-comm\n- --moe-shared-expert-overlap\n", None, ""),
    (f"{T}:1759", "- --delay-wgrad-compute\n", None, ""),
]


def _fired(args: str, env: str, cite: str) -> list[str]:
    r = run(manifest(args, env=env, gpus=64))
    return [str(f) for f in r.errors if f.source.endswith(cite)]


@pytest.mark.parametrize("cite, bad, good, env", CASES, ids=[c[0].rsplit("/", 1)[1] for c in CASES])
def test_rule(cite: str, bad: str, good: str | None, env: str) -> None:
    assert _fired(bad, env, cite), f"{cite} did not fire on {bad!r}"
    if good is not None:
        assert not _fired(good, env, cite), f"{cite} fired on the accepted {good!r}"


def test_every_rule_has_a_case() -> None:
    cases = {c[0] for c in CASES}
    missing = [f"{r.cite.file}:{r.cite.line}" for r in combos.ALL if f"{r.cite.file}:{r.cite.line}" not in cases]
    assert not missing


def test_a_finding_names_flag_line_and_fix() -> None:
    r = run(manifest("- --fp16\n- --bf16\n"))
    (f,) = [f for f in r.errors if f.source.endswith(f"{A}:750")]
    assert f.flag == "--bf16" and f.at.line == 14 and f.at.file == "pins/t.yaml"
    assert "--fp16 and --bf16 together" in f.message and "assert not args.bf16" in f.message
    assert f.suggestion == "keep one of --fp16 and --bf16"
    assert f.source == "Megatron-LM effebd81 megatron/training/arguments.py:750"



def test_another_programs_launch_is_not_held_to_megatrons_combinations() -> None:
    """The demo trainer's `--save` without `--save-interval` is its own business: combos.py's rules are what
    Megatron-LM's validate_args refuses, and apply only to a Megatron launch (a pretrain_*.py, an entrypoint
    naming the Megatron component, or a Megatron source read)."""
    from dataclasses import replace

    megatron = manifest("- --save: /checkpoints\n")
    assert megatron.entrypoint is not None
    assert any("--save-interval" in f.message for f in run(megatron).findings)
    other = replace(megatron, entrypoint=replace(megatron.entrypoint, command=("python3", "train.py")))
    assert not [f for f in run(other).findings if "--save-interval" in f.message]
