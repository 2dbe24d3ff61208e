"""`buildctl plan` checks the launch arguments against the pinned Megatron-LM source before any build.

The "Megatron-LM" here is a tree this test writes into a git repository it creates: it mimics the
layout (megatron/training/arguments.py with add_argument calls), not Megatron's code. The lock is written
by hand with that repository's commit as the component's tree (no PRs), and the source is prepared the
way `buildctl build` prepares it before linting. No engine is needed: the plan reports node states as
unknown when no engine answers.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.lock import lockfile
from buildctl.lock.lockfile import LockedComponent
from buildctl.manifest import pins
from buildctl.sources.sources import Sources

ARGUMENTS = '''\
import argparse


def parse_args():
    parser = argparse.ArgumentParser(description="Megatron-like arguments", allow_abbrev=False)
    parser = _add_network_size_args(parser)
    return parser.parse_args()


def _add_network_size_args(parser):
    group = parser.add_argument_group(title="network size")
    group.add_argument("--num-layers", type=int, default=None, help="Number of transformer layers.")
    group.add_argument("--hidden-size", type=int, default=None)
    group.add_argument("--attention-backend", type=str, default="auto",
                       choices=["flash", "fused", "unfused", "local", "auto"])
    group.add_argument("--tensor-model-parallel-size", type=int, default=1)
    return parser
'''

MANIFEST = """\
schema: 1
stack: mlm
base: {{alias: test-base}}
variants:
  default: {{image: "127.0.0.1:9/none/base:1", platform: linux/amd64, cuda: "13"}}
components:
  megatron-lm:
    repo: file://{repo}
    commit: {commit}
    install: {{kind: source-tree, path: /opt/megatron-lm}}
entrypoint:
  workdir: /opt/megatron-lm
  command: [python, pretrain_gpt.py]
  megatron: megatron-lm
  gpus: 8
  args:
    - --num-layres: 4
    - --hidden-size: 256
    - --attention-backend: fast
"""


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_plan_fails_on_a_misspelt_flag_with_file_flag_and_suggestion(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "megatron-like"
    (repo / "megatron" / "training").mkdir(parents=True)
    (repo / "megatron" / "training" / "arguments.py").write_text(ARGUMENTS)
    (repo / "pretrain_gpt.py").write_text("# no extra args\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "megatron-like tree")
    commit = git(repo, "rev-parse", "HEAD")

    project = tmp_path / "project"
    (project / "pins").mkdir(parents=True)
    (project / "images").symlink_to(Path(__file__).resolve().parents[2] / "images")
    manifest_path = project / "pins" / "mlm.yaml"
    manifest_path.write_text(MANIFEST.format(repo=repo, commit=commit))
    lock = {"schema": 2, "stack": "mlm", "manifest_sha256": pins.manifest_sha256(manifest_path),
            "variants": {"default": {
                "base": {"ref": "127.0.0.1:9/none/base:1", "digest": "sha256:" + "0" * 64, "platform": "linux/amd64"},
                "components": {"megatron-lm": {"repo": f"file://{repo}", "base": commit, "tree": commit}}}}}
    lockfile.write_data(project / "pins" / "mlm.lock.json", lock)  # hashed like any lock buildctl writes
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")

    # before the source is fetched, the plan says the flags were not checked, and does not fail on that
    assert cli.main(["--project", str(project), "plan", "mlm"]) == 0
    assert "the flags were not checked against Megatron-LM" in capsys.readouterr().out

    # what `buildctl build` does first: fetch and prepare the pinned source on the host
    m = pins.load(manifest_path)
    sources = Sources.from_config(load_config(), base_dir=manifest_path.parent)
    sources.prepare_component(m.component("megatron-lm"),
                              LockedComponent(name="megatron-lm", repo=f"file://{repo}", commit=commit, tree=commit))

    code = cli.main(["--project", str(project), "plan", "mlm"])
    err = capsys.readouterr().err
    assert code == 13
    assert f"{manifest_path}:" in err
    assert "mlm.yaml:17:7: entrypoint.args[0]: error: --num-layres" in err
    assert "--num-layers" in err.split("--num-layres", 1)[1].split("\n  fix:", 1)[1].split("\n")[0]
    assert "--attention-backend" in err and "fast" in err
