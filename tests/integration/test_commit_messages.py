"""Commit messages follow the rule (scripts/commitmsg.py): every commit since the base in this checkout, and
the commit-msg hook refuses a message that breaks it in a real `git commit`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "commitmsg.py"
ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@t"}


def test_every_commit_since_the_base_follows_the_rule() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no history to check")
    done = subprocess.run([sys.executable, str(CHECK), "--range"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **ENV})


def test_the_hook_refuses_a_long_subject_and_takes_a_good_message(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    hooks = repo / ".githooks"
    shutil.copytree(ROOT / ".githooks", hooks)
    (repo / "scripts").mkdir()
    shutil.copy(CHECK, repo / "scripts" / "commitmsg.py")
    git(repo, "config", "core.hooksPath", ".githooks")  # what `make install` sets
    git(repo, "add", ".")
    bad = tmp_path / "bad.txt"
    bad.write_text("area: " + "a subject that says everything at once, " * 3 + "\n\nbody\n")
    refused = git(repo, "commit", "-q", "-F", str(bad))
    assert refused.returncode != 0 and "the subject is 125 characters; at most 72" in refused.stderr
    good = tmp_path / "good.txt"
    good.write_text("hooks: the rule in one place\n\nWhy, in a body wrapped at 72 characters.\n")
    taken = git(repo, "commit", "-q", "-F", str(good))
    assert taken.returncode == 0, taken.stderr
    assert git(repo, "log", "-1", "--format=%s").stdout == "hooks: the rule in one place\n"
