"""`buildctl lock` / `lock --check` with real git repositories made by the test (a moving branch, a
changed PR head, a submodule, a patch, an ambiguous short SHA). The base image lookup is data here
(no engine in this tier); the engine tests cover the registry."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console

from buildctl.commands import lock as cmd_lock
from buildctl.config import CacheLayout, Config
from buildctl.errors import LockDrift, SourceError, UnreachableError
from buildctl.lock.resolvers import ProbeRequest, ProbeResult, Resolvers
from buildctl.manifest import pins
from buildctl.sources.sources import Sources
from buildctl.ui import UI

DIGEST = "sha256:" + "a" * 64
ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
       "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.invalid",
       "GIT_AUTHOR_DATE": "1700000000 +0000", "GIT_COMMITTER_DATE": "1700000000 +0000"}


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    r = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=ENV, input=stdin,
                       capture_output=True, check=True)
    return r.stdout.decode().strip()


def commit(repo: Path, path: str, text: str, message: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Upstream:
    """A repository that looks like a GitHub project: main, a PR published as refs/pull/1/head."""

    path: Path
    main: str
    pr_head: str
    sub_head: str


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    sub_head = commit(sub, "lib.txt", "library\n", "library")
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    commit(up, "tool.py", "print('v1')\n", "first")
    git(up, "checkout", "-q", "-b", "pr1")
    pr_head = commit(up, "feature.py", "FEATURE = 1\n", "PR 1: a feature")
    git(up, "checkout", "-q", "main")
    git(up, "submodule", "add", "-q", str(sub), "third_party/sub")
    git(up, "commit", "-q", "-m", "add submodule")
    main = commit(up, "tool.py", "print('v2')\n", "second")
    git(up, "update-ref", "refs/pull/1/head", pr_head)
    return Upstream(path=up, main=main, pr_head=pr_head, sub_head=sub_head)


PATCH = """\
--- a/tool.py
+++ b/tool.py
@@ -1 +1 @@
-print('v2')
+print('v2, patched')
"""


def project(tmp_path: Path, upstream: Path, commit_text: str, *, extra: str = "") -> Path:
    pins_dir = tmp_path / "project" / "pins"
    pins_dir.mkdir(parents=True, exist_ok=True)
    (pins_dir / "fix.patch").write_text(PATCH)
    sha = hashlib.sha256(PATCH.encode()).hexdigest()
    path = pins_dir / "demo.yaml"
    path.write_text(f"""\
schema: 1
stack: demo
base: {{alias: demo-base}}
variants:
  default: {{image: "registry.test/demo/base:1", platform: linux/amd64, cuda: "13", python: "3.11"}}
components:
  tool:
    repo: ../../upstream
    commit: "{commit_text}"
    branch: main
    prs: [1]
    patches:
      - {{file: fix.patch, sha256: {sha}}}
{extra}""")
    return path


@dataclass
class Registry:
    digests: dict[str, str] = field(default_factory=lambda: {"registry.test/demo/base:1": DIGEST})

    def registry_digest(self, ref: str) -> str | None:
        return self.digests.get(ref)


class NoBase:
    def probe(self, *, image: str, platform: str, request: ProbeRequest) -> ProbeResult:
        raise AssertionError("nothing in these manifests needs the base")


class NoIndex:
    def file_hashes(self, name: str, version: str, tags: object) -> tuple[str, ...]:
        raise AssertionError("no pip here")


class NoFetch:
    def sha256(self, url: str) -> str:
        raise AssertionError("no downloads here")

    def content(self, url: str) -> bytes:
        raise AssertionError("no downloads here")


def run(path: Path, cache: Path, *, check: bool = False) -> tuple[int, str]:
    config = Config(path=None, cache=CacheLayout(root=cache), network_timeout=10)
    # A new Sources per run, as the command makes one: each run sees the remote as it is now.
    r = Resolvers(registry=Registry(), git=Sources.from_config(config), in_base=NoBase(),
                  index=NoIndex(), fetch=NoFetch())
    out = io.StringIO()
    ui = UI(out=Console(file=out, width=300), err=Console(file=io.StringIO(), width=300))
    rc = cmd_lock.run(path=path, manifest=pins.load(path), variants=["default"], do_check=check, as_json=False,
                      resolvers=r, config=config, terminal=ui, project=path.parent.parent)
    return rc, out.getvalue()


def test_lock_resolves_git_pins_and_check_reports_moving_branch_and_pr(tmp_path: Path, upstream: Upstream) -> None:
    path = project(tmp_path, upstream.path, upstream.main[:8])
    cache = tmp_path / "cache"
    assert run(path, cache)[0] == 0
    lock_file = path.with_name("demo.lock.json")
    data = json.loads(lock_file.read_text())
    tool = data["variants"]["default"]["components"]["tool"]
    assert tool["base"] == upstream.main
    assert tool["branch_head"] == upstream.main
    pr = tool["changes"][0]
    assert (pr["kind"], pr["number"], pr["head"], pr["mode"]) == ("pr", 1, upstream.pr_head, "own-commits")
    assert pr["commits"][-1] == upstream.pr_head and pr["skipped_merges"] == [] and pr["empty"] == []
    assert tool["changes"][1] == {"kind": "patch", "file": "fix.patch",
                                  "sha256": hashlib.sha256(PATCH.encode()).hexdigest()}
    assert tool["submodules"] == {"third_party/sub": upstream.sub_head}
    assert len(tool["tree"]) == 40 and tool["tree"] not in (upstream.main, upstream.pr_head)
    assert data["manifest_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()

    assert run(path, cache, check=True) == (0, "pins/demo.lock.json is current for demo: default\n")

    # Upstream moves on: a new commit on main, a new push to the PR.
    new_main = commit(upstream.path, "README", "more\n", "third")
    git(upstream.path, "checkout", "-q", "pr1")
    new_pr = commit(upstream.path, "feature.py", "FEATURE = 2\n", "PR 1: review fixes")
    git(upstream.path, "checkout", "-q", "main")
    git(upstream.path, "update-ref", "refs/pull/1/head", new_pr)

    before = lock_file.read_bytes()
    with pytest.raises(LockDrift) as exc:
        run(path, cache, check=True)
    assert str(exc.value).splitlines()[:3] == [
        "pins/demo.lock.json is out of date (2 difference(s)):",
        f"  - default: component tool: branch moved: {upstream.main} -> {new_main}",
        f"  - default: component tool: PR #1 head changed: {upstream.pr_head} -> {new_pr}",
    ]
    assert lock_file.read_bytes() == before  # --check writes nothing

    # Accepting the change: the commit stays pinned, PR head and tree follow.
    assert run(path, cache)[0] == 0
    tool2 = json.loads(lock_file.read_text())["variants"]["default"]["components"]["tool"]
    assert (tool2["base"], tool2["branch_head"], tool2["changes"][0]["head"]) == (upstream.main, new_main, new_pr)
    assert tool2["changes"][0]["commits"][-1] == new_pr
    assert tool2["tree"] != tool["tree"]
    assert run(path, cache, check=True)[0] == 0


def test_manifest_edit_is_reported_by_check(tmp_path: Path, upstream: Upstream) -> None:
    path = project(tmp_path, upstream.path, upstream.main[:8])
    cache = tmp_path / "cache"
    run(path, cache)
    old = hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(path.read_text().replace(f'commit: "{upstream.main[:8]}"', f'commit: "{upstream.main}"'))
    new = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(LockDrift) as exc:
        run(path, cache, check=True)
    assert str(exc.value).splitlines()[:2] == [
        "pins/demo.lock.json is out of date (1 difference(s)):",
        f"  - the manifest pins/demo.yaml was edited since locking (sha256 {old[:12]} -> {new[:12]})",
    ]


def colliding_commits(repo: Path, parent: str) -> tuple[str, str, str]:
    """Write two commits whose SHAs share their first 7 hex digits; return (prefix, sha1, sha2).

    Found by hashing candidate commit objects in Python (a birthday search over 28 bits, about 20 000
    candidates; deterministic for a given parent), then written with `git hash-object`.
    """
    tree = git(repo, "rev-parse", f"{parent}^{{tree}}")
    seen: dict[str, bytes] = {}
    for i in range(2_000_000):
        body = (f"tree {tree}\nparent {parent}\nauthor Test <test@example.invalid> 1700000000 +0000\n"
                f"committer Test <test@example.invalid> 1700000000 +0000\n\ncandidate {i}\n").encode()
        sha = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
        other = seen.setdefault(sha[:7], body)
        if other is not body:
            a = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", stdin=other)
            b = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", stdin=body)
            assert a[:7] == b[:7] == sha[:7] and a != b
            return sha[:7], a, b
    raise AssertionError("no collision found")


def test_ambiguous_short_sha_lists_candidates_and_writes_nothing(tmp_path: Path, upstream: Upstream) -> None:
    prefix, a, b = colliding_commits(upstream.path, upstream.main)
    git(upstream.path, "update-ref", "refs/heads/one", a)
    git(upstream.path, "update-ref", "refs/heads/two", b)
    path = project(tmp_path, upstream.path, upstream.main)
    assert run(path, tmp_path / "cache")[0] == 0
    lock_file = path.with_name("demo.lock.json")
    before = lock_file.read_bytes()
    path.write_text(path.read_text().replace(upstream.main, prefix).replace("    branch: main\n", ""))
    with pytest.raises(SourceError) as exc:
        run(path, tmp_path / "cache")
    text = str(exc.value)
    assert "component tool (" in text and f"short SHA {prefix} is ambiguous" in text
    assert a in text and b in text
    assert lock_file.read_bytes() == before


def test_unreachable_remote_fails_fast_and_writes_nothing(tmp_path: Path, upstream: Upstream) -> None:
    path = project(tmp_path, upstream.path, upstream.main)
    path.write_text(path.read_text().replace("../../upstream", "https://github.com/NVIDIA/TransformerEngine.git")
                    .replace("    patches:\n", "    patches: []\n    unused:\n").split("    unused:\n")[0])
    with pytest.raises(UnreachableError) as exc:
        run(path, tmp_path / "cache")
    assert "github.com" in str(exc.value)
    assert not path.with_name("demo.lock.json").exists()
