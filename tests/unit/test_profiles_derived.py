"""Launch profiles that derive from another (``extends``, ``drop``, ``reasons``) and the train check's spec.

A proxy profile states how it departs from the run it stands for: every option it sets or drops has a
reason, and the loader refuses a change without one, a reason for nothing, a parent that does not exist,
and a cycle, each naming file, line and key. The seed stacks' one-GPU proxies are checked as declared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl.errors import ManifestErrors
from buildctl.graph import smoke_expect
from buildctl.graph.entrypoint import launches, variant_entrypoint
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.manifest.profiles import effective_args

PROJECT = Path(__file__).resolve().parents[2]

BASE = """\
stack: t
base: {alias: demo-base}
variants:
  v: {image: "127.0.0.1:5000/demo/base:1", platform: linux/amd64, cuda: "13"}
entrypoint:
  workdir: /opt/t
  command: [python, train.py]
  launcher: {kind: torchrun}
  megatron: m
  gpus: 64
  args:
    - --num-layers: 61
    - --hidden-size: 7168
    - --data-path: /data/x
    - --lr: "3e-4"
  profiles:
    full-8: {gpus: 8, args: [--lr: "1e-4"]}
    proxy:
      extends: full-8
      gpus: 1
      drop: [--data-path]
      args: [--num-layers: 4, --mock-data]
      reasons:
        --num-layers: fits one GPU
        --mock-data: no dataset on a smoke host
        --data-path: replaced by --mock-data
    proxy-of-proxy:
      extends: proxy
      gpus: 1
      args: [--hidden-size: 512]
      reasons: {--hidden-size: smaller still}
components:
  m: {repo: "https://github.com/NVIDIA/Megatron-LM.git", commit: 0123456789abcdef0123456789abcdef01234567,
      install: {kind: source-tree, path: /opt/t}}
smoke:
  required: [train]
  train: {profile: proxy}
"""


def load(text: str = BASE) -> Manifest:
    return pins.load_text(text, "pins/t.yaml", base_dir=Path("/nonexistent"))


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestErrors) as info:
        load(text)
    return [str(e) for e in info.value.errors]


def words(m: Manifest, profile: str) -> list[str]:
    e = variant_entrypoint(m, m.default_variant)
    return [w for a in effective_args(e, e.profiles[profile]) for w in a.argv()]


def test_a_profile_derives_from_another_profile_and_its_changes_are_laid_over_in_place() -> None:
    m = load()
    assert words(m, "full-8") == ["--num-layers", "61", "--hidden-size", "7168", "--data-path", "/data/x",
                                  "--lr", "1e-4"]
    # from full-8: --lr 1e-4 kept, --data-path dropped, --num-layers replaced where it stood, --mock-data added
    assert words(m, "proxy") == ["--num-layers", "4", "--hidden-size", "7168", "--lr", "1e-4", "--mock-data"]
    assert words(m, "proxy-of-proxy") == ["--num-layers", "4", "--hidden-size", "512", "--lr", "1e-4", "--mock-data"]
    got = launches(m, m.default_variant)
    assert (got["proxy"].gpus, got["proxy"].nodes) == (1, 1)


def test_extends_base_starts_from_the_entrypoint() -> None:
    m = load(BASE.replace("extends: full-8", "extends: base"))
    assert words(m, "proxy") == ["--num-layers", "4", "--hidden-size", "7168", "--lr", "3e-4", "--mock-data"]


@pytest.mark.parametrize(("edit", "message", "line"), [
    (("        --num-layers: fits one GPU\n", ""),
     "entrypoint.profiles.proxy.reasons: profile proxy derives from full-8 and changes "
     "--num-layers without a reason", 24),
    (("--mock-data: no dataset on a smoke host\n", "--mock-data: no dataset\n        --lr: not changed\n"),
     "profile proxy: reasons: --lr is neither set nor dropped by this profile", 24),
    (("extends: full-8", "extends: full-16"), "profile proxy: extends 'full-16', which is not a profile", 19),
    (("    full-8: {gpus: 8, args: [--lr: \"1e-4\"]}", "    full-8: {gpus: 8, extends: proxy-of-proxy, args: [--lr: \"1e-4\"],\n"
      "             reasons: {--lr: lower}}"), "extends forms a cycle (full-8 -> proxy-of-proxy -> proxy -> full-8)", 17),
    (("drop: [--data-path]", "drop: [--data-pth]"),
     "profile proxy: drop: --data-pth is not in the arguments it starts from", 21),
    (("drop: [--data-path]", "drop: [\"--data-path; rm -rf /\"]"), "entrypoint.profiles.proxy.drop[0]", 21),
    (("--num-layers: fits one GPU", "\"--num-layers\\n--evil\": fits"), "entrypoint.profiles.proxy.reasons", 24),
    (("train: {profile: proxy}", "train: {profile: prxy}"),
     "smoke.train.profile 'prxy' is not a profile of the entrypoint", 37),
    (("  train: {profile: proxy}\n", ""), "smoke.required lists 'train' but smoke.train names no profile", 36),
    (("train: {profile: proxy}", "train: {profile: proxy, timeout_s: -5}"), "smoke.train.timeout_s", 37),
])
def test_bad_derivations_name_file_line_and_key(edit: tuple[str, str], message: str, line: int) -> None:
    assert edit[0] in BASE
    errors = errors_of(BASE.replace(*edit))
    assert any(message in e and f"pins/t.yaml:{line}:" in e for e in errors), errors


def test_the_expectation_names_the_profile_the_script_and_the_launcher() -> None:
    m = load()
    exp = smoke_expect.expect_for(m, None, m.default_variant)
    assert exp.checks["train"] == {"profile": "proxy", "script": "/usr/local/bin/buildctl-launch",
                                   "launcher": "torchrun", "gpus": 1, "min_steps": 20, "timeout_s": 900}
    assert "train" in exp.required


def test_the_dsv3_proxy_keeps_the_hopper_launchs_features_on_one_gpu() -> None:
    m = pins.load(PROJECT / "pins" / "deepseek-v3-gb200.yaml")
    hopper = next(v for v in m.variants if v.name == "hopper")
    e = variant_entrypoint(m, hopper)
    p = e.profiles["dsv3-proxy-1gpu"]
    assert p.extends == "base" and p.gpus == 1
    # every change has its reason (the loader enforces it; this pins what the manifest says)
    assert set(p.reasons) == {*p.drop, *(a.flag for a in p.args)}
    args = {a.flag: a.values for a in effective_args(e, p)}
    full = {a.flag: a.values for a in e.args}
    # the variant's recipe and the model family's features are kept
    for flag in ("--fp8-recipe", "--fp8-format", "--fp8-param-gather", "--multi-latent-attention", "--moe-grouped-gemm",
                 "--moe-router-enable-expert-bias", "--moe-router-group-topk", "--moe-router-num-groups",
                 "--moe-router-topk", "--cuda-graph-impl", "--recompute-modules",
                 "--use-precision-aware-optimizer", "--kv-lora-rank", "--qk-head-dim", "--v-head-dim", "--bf16"):
        assert args[flag] == full[flag], flag
    assert args["--fp8-recipe"] == ("tensorwise",)
    # moe_preprocess leaves the graphs: with alltoall and router padding it stops the first step (H200 run)
    assert args["--cuda-graph-scope"] == ("attn", "moe_router") and full["--cuda-graph-scope"][-1] == "moe_preprocess"
    assert args["--expert-model-parallel-size"] == ("1",) and args["--pipeline-model-parallel-size"] == ("1",)
    assert args["--moe-token-dispatcher-type"] == ("alltoall",) and "--moe-flex-dispatcher-backend" not in args
    # 16 experts in 8 groups, top 4 groups, top 8: the routing's shape still holds
    assert int(args["--num-experts"][0]) % int(args["--moe-router-num-groups"][0]) == 0
    assert int(args["--num-experts"][0]) // int(args["--moe-router-num-groups"][0]) * int(
        args["--moe-router-group-topk"][0]) >= int(args["--moe-router-topk"][0])
    steps = int(args["--train-samples"][0]) // int(args["--global-batch-size"][0])
    assert steps >= m.smoke.train.min_steps if m.smoke.train else False
    assert "--mock-data" in args and "--data-path" not in args and "--save" not in args


def test_the_bert_proxy_is_the_default_profile_on_one_gpu() -> None:
    m = pins.load(PROJECT / "pins" / "megatron-bert.yaml")
    e = variant_entrypoint(m, m.default_variant)
    p = e.profiles["bert-proxy-1gpu"]
    assert p.extends == "bert-340m-8gpu" and p.gpus == 1
    got = {a.flag: a.values for a in effective_args(e, p)}
    parent = {a.flag: a.values for a in effective_args(e, e.profiles["bert-340m-8gpu"])}
    changed = {f for f in set(got) | set(parent) if got.get(f) != parent.get(f)}
    assert changed == {"--global-batch-size", "--train-iters", "--lr-decay-iters", "--log-interval", "--save",
                       "--legacy-tokenizer", "--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
                       "--initial-loss-scale"}
    assert set(p.reasons) == changed
    assert int(got["--train-iters"][0]) >= 20 and got["--micro-batch-size"] == got["--global-batch-size"]
