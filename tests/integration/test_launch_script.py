"""The rendered launch scripts, run by bash: syntax, the exact argv they hand the launcher, and the
number of ranks they start.

Fake `bindpcie`, `python` and `torchrun` on PATH write the argv they were started with as JSON, so the
test compares what the script really executes with the manifest's argument list, word for word. A fake
`srun` starts its command once per task with Slurm's task variables, as a host's srun with one container
per task does, and each rank's fake `bindpcie` records RANK / WORLD_SIZE / LOCAL_RANK.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from buildctl.graph.entrypoint import launch_argv
from buildctl.graph.launch_script import render_launch_script
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest

PROJECT = Path(__file__).resolve().parents[2]
BASH = "/bin/bash"

FAKE = """#!{python}
import json, os, sys
with open(os.environ["ARGV_OUT"], "w") as f:
    json.dump({{"argv0": os.path.basename(sys.argv[0]), "args": sys.argv[1:], "cwd": os.getcwd()}}, f)
"""


def load(stack: str) -> Manifest:
    return pins.load(PROJECT / "pins" / f"{stack}.yaml")


def in_workdir(m: Manifest, workdir: Path) -> Manifest:
    """The manifest with its entrypoint's workdir moved to a folder that exists here."""
    assert m.entrypoint is not None
    return dataclasses.replace(m, entrypoint=dataclasses.replace(m.entrypoint, workdir=str(workdir)))


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bindpcie", "python", "torchrun"):
        path = bin_dir / name
        path.write_text(FAKE.format(python=sys.executable))
        path.chmod(0o755)
    return bin_dir


def run_script(script: str, tmp_path: Path, fakes: Path, *args: str,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "buildctl-launch"
    path.write_text(script)
    path.chmod(0o755)
    full_env = {"PATH": f"{fakes}:{os.environ['PATH']}", "HOME": str(tmp_path),
                "ARGV_OUT": str(tmp_path / "argv.json"), **(env or {})}
    return subprocess.run([str(path), *args], env=full_env, capture_output=True, text=True, timeout=60)


CASES = [("deepseek-v3-gb200", variant, None) for variant in ("cuda13", "cuda12", "hopper")] + [
    ("megatron-bert", "ngc2401", profile) for profile in ("bert-340m-8gpu", "bert-340m", "bert-4b", "bert-20b")
] + [("demo", "default", None), ("verl-vllm", "ngc2408", None)]


@pytest.mark.parametrize(("stack", "variant", "profile"), CASES)
def test_rendered_scripts_pass_bash_n(stack: str, variant: str, profile: str | None, tmp_path: Path) -> None:
    m = load(stack)
    if m.entrypoint is None:
        return
    path = tmp_path / "launch.sh"
    path.write_text(render_launch_script(m, m.variant(variant), profile))
    done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_the_guides_unquoted_moe_layer_freq_is_a_syntax_error(tmp_path: Path) -> None:
    # Why quoting matters: the guide's line, as written, does not even parse.
    path = tmp_path / "guide.sh"
    path.write_text("python pretrain_gpt.py --moe-layer-freq ([0]*3+[1]*58) --num-layers 61\n")
    done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "syntax error" in done.stderr


FAKE_SRUN = """#!{python}
import os, subprocess, sys
argv = sys.argv[1:]
nodes = int(argv[argv.index("--nodes") + 1]); per_node = int(argv[argv.index("--ntasks-per-node") + 1])
command = argv[argv.index("--ntasks-per-node") + 2:]
procs = []
for task in range(nodes * per_node):
    env = dict(os.environ, SLURM_PROCID=str(task), SLURM_NTASKS=str(nodes * per_node), SLURM_NNODES=str(nodes),
               SLURM_NODEID=str(task // per_node), SLURM_LOCALID=str(task % per_node))
    procs.append(subprocess.Popen(command, env=env))
    if len(procs) >= 32:
        procs.pop(0).wait()
sys.exit(max(p.wait() for p in procs))
"""

# One line per rank; rank 0 also writes its argv as the other fakes do.
FAKE_RANK = """#!/bin/sh
printf '%s %s %s\\n' "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" >> "$RANKS_OUT"
[ "$RANK" != 0 ] || exec python-argv bindpcie "$@"
"""


@pytest.mark.parametrize(("variant", "nodes", "per_node"), [("cuda13", 64, 4), ("hopper", 32, 8)])
def test_deepseek_srun_starts_every_rank_with_the_manifest_arguments(variant: str, nodes: int, per_node: int,
                                                                    tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    v = m.variant(variant)
    script = render_launch_script(m, v)
    (fakes / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    (fakes / "srun").chmod(0o755)
    (fakes / "python-argv").write_text(FAKE.format(python=sys.executable).replace(
        "os.path.basename(sys.argv[0])", "sys.argv[1]").replace("sys.argv[1:]", "sys.argv[2:]"))
    (fakes / "python-argv").chmod(0o755)
    (fakes / "bindpcie").write_text(FAKE_RANK)
    ranks = tmp_path / "ranks.txt"
    helped = run_script(script, tmp_path, fakes, "--help")
    srun = f"srun --nodes {nodes} --ntasks-per-node {per_node} [...] buildctl-launch"
    assert helped.returncode == 0 and f"    {srun}\n" in helped.stdout, helped.stdout
    path = tmp_path / "buildctl-launch"
    # the host's srun, as --help says; each task runs the script
    done = subprocess.run([str(fakes / "srun"), *srun.replace(" [...]", "").split()[1:-1], str(path)],
                          env={"PATH": f"{fakes}:{os.environ['PATH']}", "HOME": str(tmp_path), "MASTER_ADDR": "node0",
                               "ARGV_OUT": str(tmp_path / "argv.json"), "RANKS_OUT": str(ranks)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen_ranks = sorted(tuple(map(int, line.split())) for line in ranks.read_text().splitlines())
    assert seen_ranks == [(r, 256, r % per_node) for r in range(256)]
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert seen["argv0"] == "bindpcie" and seen["cwd"] == str(tmp_path)
    assert seen["args"] == launch_argv(m, variant=v)[1:]
    assert seen["args"][:2] == ["python", "pretrain_gpt.py"]
    assert len([w for w in seen["args"] if w.startswith("--")]) == (128 if variant == "cuda13" else 127)
    i = seen["args"].index("--moe-layer-freq")
    assert seen["args"][i + 1] == "([0]*3+[1]*58)"
    i = seen["args"].index("--pipeline-model-parallel-layout")
    assert seen["args"][i + 1] == "Et|(tt|)*30L"


def test_deepseek_manifest_arguments_word_for_word(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    assert m.entrypoint is not None
    script = render_launch_script(m, m.default_variant)
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "256", "SLURM_LOCALID": "3", "MASTER_ADDR": "node0"}
    done = run_script(script, tmp_path, fakes, env=slurm)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "argv.json").read_text())
    # the manifest's arguments word for word, site paths at their defaults
    defaults = {name: p.default for name, p in m.entrypoint.paths.items()}
    expected = ["python", "pretrain_gpt.py"]
    for a in m.entrypoint.args:
        expected.extend(re.sub(r"\$\{(\w+)\}", lambda ref: defaults[ref.group(1)], w) for w in a.argv())
    assert seen["args"] == expected
    assert len([w for w in seen["args"] if w.startswith("--")]) == 128


@pytest.mark.parametrize(("env", "message"), [
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "128", "MASTER_ADDR": "n0"},
     "needs 256 ranks (srun --nodes 64 --ntasks-per-node 4); this Slurm step has 128"),
    ({}, "is one rank of 256: start it with srun --nodes 64 --ntasks-per-node 4"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "256"}, "set MASTER_ADDR"),
])
def test_deepseek_refuses_a_step_of_another_size(env: dict[str, str], message: str, tmp_path: Path,
                                                 fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    done = run_script(render_launch_script(m, m.default_variant), tmp_path, fakes, env=env)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "argv.json").exists()


def test_bert_launch_uses_torchrun_and_site_paths_from_the_environment(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    site = {"DATA_PATH": "/site data/bert_text_sentence", "VOCAB_FILE": "/site/vocab's.txt",
            "BUILDCTL_PROFILE": "bert-4b"}
    done = run_script(script, tmp_path, fakes, "--train-iters", "10", env=site)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert seen["argv0"] == "torchrun"
    expected = launch_argv(m, env=site)
    assert expected[0] == "torchrun" and expected == launch_argv(m, "bert-4b", env=site)
    assert seen["args"] == [*expected[1:], "--train-iters", "10"]
    assert seen["args"][:10] == ["--nproc_per_node", "8", "--nnodes", "1", "--node_rank", "0",
                                 "--master_addr", "localhost", "--master_port", "6000"]
    assert seen["args"][10] == "pretrain_bert.py"
    assert seen["args"][seen["args"].index("--num-layers") + 1] == "48"
    assert "/site data/bert_text_sentence" in seen["args"] and "/site/vocab's.txt" in seen["args"]


def ranks(argv: list[str]) -> int:
    """What torchrun starts: --nproc_per_node x --nnodes, a later option winning as in its argparse."""
    def last(option: str) -> int:
        return int([argv[i + 1] for i, w in enumerate(argv) if w == option][-1])
    return last("--nproc_per_node") * last("--nnodes")


@pytest.mark.parametrize(("profile", "gpus", "nodes"), [
    ("bert-340m-8gpu", 8, 1), ("bert-4b", 8, 1), ("bert-20b", 16, 2), ("base", 8, 1), (None, 8, 1)])
def test_bert_starts_the_ranks_its_profile_needs(profile: str | None, gpus: int, nodes: int, tmp_path: Path,
                                                 fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    env = {"BUILDCTL_PROFILE": profile} if profile else {}
    for rank in range(nodes):
        if nodes > 1:
            env.update(NODE_RANK=str(rank), MASTER_ADDR="node0")
        done = run_script(script, tmp_path, fakes, env=env)
        assert done.returncode == 0, done.stderr
        argv = json.loads((tmp_path / "argv.json").read_text())["args"]
        assert ranks(argv) * nodes == gpus * nodes and ranks(argv) == gpus
        assert argv[argv.index("--nnodes") + 1] == str(nodes)
        assert argv[argv.index("--node_rank") + 1] == str(rank)
        tp = int(argv[argv.index("--tensor-model-parallel-size") + 1])
        pp = int(argv[argv.index("--pipeline-model-parallel-size") + 1])
        assert gpus % (tp * pp) == 0  # the arguments fit the ranks


def test_bert_20b_on_two_nodes_needs_node_rank_and_master(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    done = run_script(render_launch_script(m, m.default_variant, "bert-20b"), tmp_path, fakes)
    assert done.returncode == 2 and "runs on 2 nodes" in done.stderr and "NODE_RANK" in done.stderr
    assert not (tmp_path / "argv.json").exists()


def test_bert_as_shipped_is_refused_as_the_upstream_defect(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    done = run_script(script, tmp_path, fakes, env={"BUILDCTL_PROFILE": "bert-340m"})
    assert done.returncode == 2 and "profile bert-340m cannot run" in done.stderr, done.stderr
    assert not (tmp_path / "argv.json").exists()
    helped = run_script(script, tmp_path, fakes, "--help")
    assert "  bert-340m: 8 GPUs on 1 node(s) [upstream defect: does not run]" in helped.stdout
    unknown = run_script(script, tmp_path, fakes, env={"BUILDCTL_PROFILE": "bert-340"})
    assert unknown.returncode == 2 and "unknown profile BUILDCTL_PROFILE=bert-340" in unknown.stderr


def test_users_override_torchrun_options(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    env = {"BUILDCTL_LAUNCHER_ARGS": "--nproc_per_node 4 --rdzv_backend c10d", "MASTER_PORT": "7000"}
    done = run_script(script, tmp_path, fakes, env=env)
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())["args"]
    assert argv[:14] == ["--nproc_per_node", "8", "--nnodes", "1", "--node_rank", "0", "--master_addr",
                         "localhost", "--master_port", "7000", "--nproc_per_node", "4", "--rdzv_backend", "c10d"]
    assert ranks(argv) == 4 and argv == launch_argv(m, env=env)[1:]
    helped = run_script(script, tmp_path, fakes, "--help", env=env)
    assert "BUILDCTL_LAUNCHER_ARGS=--nproc_per_node 4 --rdzv_backend c10d\n" in helped.stdout


def test_print_command_prints_what_it_would_run_without_running(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    done = run_script(script, tmp_path, fakes, "--print-command", "--lr", "1e-5", "--note", "two words")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "argv.json").exists()
    assert done.stdout == shlex.join([*launch_argv(m), "--lr", "1e-5", "--note", "two words"]) + "\n"
    assert shlex.split(done.stdout) == [*launch_argv(m), "--lr", "1e-5", "--note", "two words"]


def test_help_lists_profiles_site_paths_runtime_env_and_the_command(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    script = render_launch_script(m, m.variant("hopper"))
    done = run_script(script, tmp_path, fakes, "--help", env={"DATA_PATH": "/mnt/ds", "NCCL_DEBUG": "WARN"})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "argv.json").exists()
    out = done.stdout
    assert out.startswith("buildctl-launch: deepseek-v3-gb200 / hopper / profile base (256 GPUs on 32 node(s))\n")
    assert "profiles (set BUILDCTL_PROFILE; default base):\n" in out
    assert "  DATA_PATH=/mnt/ds\n" in out and "  CHECKPOINT_PATH=/checkpoints/deepseek-v3\n" in out
    assert "  NCCL_DEBUG=WARN\n" in out and "  NVLINK_DOMAIN_SIZE=(unset)\n" in out
    command = out.split("\ncommand:\n", 1)[1]
    hopper = m.variant("hopper")
    assert shlex.split(command) == launch_argv(m, env={"DATA_PATH": "/mnt/ds"}, variant=hopper)
    assert "--fp8-recipe tensorwise" in command and "--expert-model-parallel-size 8 " in command
    assert "reuse-grad-buf" not in command


def test_bert_help_names_the_profile_variable_and_default(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant, "bert-4b")  # `buildctl build --profile bert-4b`
    out = run_script(script, tmp_path, fakes, "--help").stdout
    assert out.startswith("buildctl-launch: megatron-bert / ngc2401 / profile bert-4b (8 GPUs on 1 node(s))\n")
    assert "profiles (set BUILDCTL_PROFILE; default bert-4b):\n" in out
    assert "  bert-20b: 16 GPUs on 2 node(s) - " in out
    other = run_script(script, tmp_path, fakes, "--help", env={"BUILDCTL_PROFILE": "bert-20b"}).stdout
    assert "torchrun --nproc_per_node 8 --nnodes 2 " in other
