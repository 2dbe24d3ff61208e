"""A repository location can never become a git option (issue 11, defect 1), with real git.

The defect: a component ``repo`` of ``"--upload-pack=touch PWNED;false:x ://"`` passed validation, was classed
scp-like and reached ``git ls-remote --refs <url>`` without ``--``; run from a checkout whose origin is a local
path, git read it as ``--upload-pack`` and ran the command. The test first shows the mechanism on this machine
(git itself, without ``--``, runs it), then that buildctl refuses the value at load and in sources.py, and that
every git command buildctl runs puts ``--`` before the repository location (a git on PATH that records its
arguments, then runs the real one), so that a value that slipped past both checks could still not be an option.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from buildctl.errors import ManifestErrors, SourceError
from buildctl.manifest import pins
from buildctl.manifest.model import Component, PullRequest
from buildctl.sources.sources import Sources

HOSTILE = "--upload-pack=touch PWNED;false:x ://"
GIT = shutil.which("git")
ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "@1700000000 +0000",
       "GIT_COMMITTER_DATE": "@1700000000 +0000"}


def git(cwd: Path, *args: str) -> str:
    r = subprocess.run([GIT or "git", *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, **ENV}, check=True)
    return r.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout whose origin is a local path, as the working directory (where CI runs buildctl)."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "f.txt").write_text("1\n")
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "one")
    git(upstream, "update-ref", "refs/pull/1/head", "HEAD")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(upstream), str(work))
    monkeypatch.chdir(work)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return work


def test_defect1_the_mechanism_is_real_here(checkout: Path) -> None:
    """Without "--" git reads the value as --upload-pack and runs it; with "--" it is a repository name."""
    subprocess.run([GIT or "git", "ls-remote", "--refs", HOSTILE], cwd=checkout, capture_output=True, timeout=60)
    assert (checkout / "PWNED").exists(), "git did not run the value: the defect cannot be shown here"
    (checkout / "PWNED").unlink()
    subprocess.run([GIT or "git", "ls-remote", "--refs", "--", HOSTILE], cwd=checkout, capture_output=True, timeout=60)
    assert not (checkout / "PWNED").exists()


def test_defect1_upload_pack_repo_is_refused_at_load_and_by_sources(checkout: Path, tmp_path: Path) -> None:
    text = f"""\
schema: 1
stack: t
base: {{alias: b}}
variants:
  v: {{image: "127.0.0.1:9/b:1", platform: linux/amd64, cuda: "13"}}
components:
  c:
    repo: "{HOSTILE}"
    commit: abcdef1
"""
    with pytest.raises(ManifestErrors) as info:
        pins.load_text(text, "pins/t.yaml")
    assert "pins/t.yaml:8:11: components.c.repo:" in str(info.value) and "must not start with '-'" in str(info.value)
    # a value that got past the loader (a model built in code) is refused before git runs
    s = Sources(cache=tmp_path / "cache", network_timeout=10)
    for call in (lambda: s.branch_head(HOSTILE, "main"), lambda: s.pr_head(HOSTILE, 1),
                 lambda: s.resolve_commit(HOSTILE, "abcdef1"),
                 lambda: s.lock_component(Component(name="c", repo=HOSTILE, commit="abcdef1"))):
        with pytest.raises(SourceError):
            call()
    assert not (checkout / "PWNED").exists()


def test_defect1_every_git_command_puts_double_dash_before_the_repository(checkout: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A git on PATH records each argv; a real lock and prepare of a component with a PR runs through it."""
    log = tmp_path / "argv.log"
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(f"#!{sys.executable}\nimport os, sys, json\n"
                    f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                    f"os.execv({GIT!r}, [{GIT!r}, *sys.argv[1:]])\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    upstream = tmp_path / "upstream"
    head = git(upstream, "rev-parse", "HEAD")
    (upstream / "f.txt").write_text("2\n")
    git(upstream, "commit", "-q", "-am", "two")
    pr = git(upstream, "rev-parse", "HEAD")
    git(upstream, "update-ref", "refs/pull/2/head", pr)
    git(upstream, "reset", "-q", "--hard", head)
    for repo in (f"file://{upstream}", "../upstream"):
        s = Sources(cache=tmp_path / f"cache-{len(repo)}", network_timeout=10, base_dir=checkout)
        c = Component(name="c", repo=repo, commit=head[:9], branch="main", prs=(PullRequest(number=2, head=pr),))
        locked = s.lock_component(c)
        s.prepare_component(c, locked)
    import json

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    urls = {f"file://{upstream}", str(upstream)}
    with_url = [a for a in calls if urls & set(a)]
    assert with_url, "no git command named the repository"
    for argv in with_url:
        first = min(argv.index(u) for u in urls & set(argv))
        assert "--" in argv[:first], f"git {' '.join(argv)}: the repository is not after '--'"
    assert not (checkout / "PWNED").exists()
