"""The rendered launch scripts, run by bash: syntax, and the exact argv they hand the launcher.

Fake `bindpcie`, `python` and `torchrun` on PATH write the argv they were started with as JSON, so the
test compares what the script really executes with the manifest's argument list, word for word.
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

from buildctl import pins
from buildctl.entrypoint import launch_argv, render_launch_script
from buildctl.model import Manifest

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
    ("megatron-bert", "ngc2401", profile) for profile in ("bert-340m", "bert-340m-128gpu", "bert-4b", "bert-20b")
]


@pytest.mark.parametrize(("stack", "variant", "profile"), CASES)
def test_rendered_scripts_pass_bash_n(stack: str, variant: str, profile: str | None, tmp_path: Path) -> None:
    m = load(stack)
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


def test_deepseek_launch_hands_bindpcie_exactly_the_manifest_arguments(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    assert m.entrypoint is not None
    script = render_launch_script(m, m.default_variant)
    done = run_script(script, tmp_path, fakes)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert seen["argv0"] == "bindpcie" and seen["cwd"] == str(tmp_path)
    # the manifest's arguments word for word, site paths at their defaults
    defaults = {name: p.default for name, p in m.entrypoint.paths.items()}
    expected = ["python", "pretrain_gpt.py"]
    for a in m.entrypoint.args:
        expected.extend(re.sub(r"\$\{(\w+)\}", lambda ref: defaults[ref.group(1)], w) for w in a.argv())
    assert seen["args"] == expected
    assert seen["args"] == launch_argv(m)[1:]
    assert len([w for w in seen["args"] if w.startswith("--")]) == 128
    i = seen["args"].index("--moe-layer-freq")
    assert seen["args"][i + 1] == "([0]*3+[1]*58)"
    i = seen["args"].index("--pipeline-model-parallel-layout")
    assert seen["args"][i + 1] == "Et|(tt|)*30L"


def test_bert_launch_uses_torchrun_and_site_paths_from_the_environment(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("megatron-bert"), tmp_path)
    script = render_launch_script(m, m.default_variant, "bert-4b")
    site = {"DATA_PATH": "/site data/bert_text_sentence", "VOCAB_FILE": "/site/vocab's.txt"}
    done = run_script(script, tmp_path, fakes, "--train-iters", "10", env=site)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert seen["argv0"] == "torchrun"
    expected = launch_argv(m, "bert-4b", env=site)
    assert expected[0] == "torchrun"
    assert seen["args"] == [*expected[1:], "--train-iters", "10"]
    assert seen["args"][:8] == ["--nproc_per_node", "8", "--nnodes", "1",
                                "--master_addr", "localhost", "--master_port", "6000"]
    assert seen["args"][8] == "pretrain_bert.py"
    assert "/site data/bert_text_sentence" in seen["args"] and "/site/vocab's.txt" in seen["args"]


def test_print_command_prints_what_it_would_run_without_running(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    done = run_script(script, tmp_path, fakes, "--print-command", "--lr", "1e-5", "--note", "two words")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "argv.json").exists()
    assert done.stdout == shlex.join([*launch_argv(m), "--lr", "1e-5", "--note", "two words"]) + "\n"
    assert shlex.split(done.stdout) == [*launch_argv(m), "--lr", "1e-5", "--note", "two words"]


def test_help_lists_site_paths_runtime_env_and_the_command(tmp_path: Path, fakes: Path) -> None:
    m = in_workdir(load("deepseek-v3-gb200"), tmp_path)
    script = render_launch_script(m, m.default_variant)
    done = run_script(script, tmp_path, fakes, "--help", env={"DATA_PATH": "/mnt/ds", "NCCL_DEBUG": "WARN"})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "argv.json").exists()
    out = done.stdout
    assert out.startswith("buildctl-launch: deepseek-v3-gb200 / cuda13 (256 GPUs)\n")
    assert "  DATA_PATH=/mnt/ds\n" in out and "  CHECKPOINT_PATH=/checkpoints/deepseek-v3\n" in out
    assert "  NCCL_DEBUG=WARN\n" in out and "  NVLINK_DOMAIN_SIZE=(unset)\n" in out
    command = out.split("\ncommand:\n", 1)[1]
    assert shlex.split(command) == launch_argv(m, env={"DATA_PATH": "/mnt/ds"})
