"""buildctl.sources (through Sources) against real git repositories made here in tmp folders (no network).

Every repository is written with a fixed identity and fixed dates, so the tests do not depend on the day.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from buildctl.errors import LockDrift, LockError, SourceError, UnreachableError
from buildctl.manifest.model import Component, Patch, PullRequest
from buildctl.sources.prepare import PatchFile, PrHead
from buildctl.sources.sources import Sources

T0 = 1700000000  # fixed commit dates: T0 + n minutes


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
               GIT_AUTHOR_NAME="Test Author", GIT_AUTHOR_EMAIL="author@test.invalid",
               GIT_COMMITTER_NAME="Test Committer", GIT_COMMITTER_EMAIL="committer@test.invalid")
    env.update(extra or {})
    return env


class Repo:
    """A small non-bare repository with helpers to commit files at fixed dates."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0
        path.mkdir(parents=True)
        self.git("init", "--quiet")
        self.git("symbolic-ref", "HEAD", "refs/heads/main")

    def git(self, *args: str, stdin: bytes | None = None) -> str:
        when = f"@{T0 + 60 * self.n} +0000"
        r = subprocess.run(["git", *args], cwd=self.path, input=stdin, capture_output=True, check=False,
                           env=_env({"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}))
        assert r.returncode == 0, f"git {args}: {r.stderr.decode()}"
        return r.stdout.decode().strip()

    def commit(self, files: Mapping[str, str | None], message: str) -> str:
        self.n += 1
        for name, text in files.items():
            f = self.path / name
            if text is not None:
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(text)
            self.git("add" if text is not None else "rm", "--quiet" if text is None else "--", name)
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def checkout(self, ref: str, *, new: str | None = None) -> None:
        self.git("checkout", "--quiet", *(["-b", new] if new else []), ref)

    def ref(self, name: str, sha: str) -> None:
        self.git("update-ref", name, sha)

    def gitlink(self, path: str, sha: str, url: str) -> None:
        """Add a submodule entry without cloning it (what `git submodule add` records)."""
        self.git("config", "-f", ".gitmodules", f"submodule.{path}.path", path)
        self.git("config", "-f", ".gitmodules", f"submodule.{path}.url", url)
        self.git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}")
        self.git("add", ".gitmodules")


def lines(n: int, changed: Mapping[int, str] | None = None) -> str:
    return "".join(f"{(changed or {}).get(i, f'line {i}')}\n" for i in range(1, n + 1))


@pytest.fixture
def upstream(tmp_path: Path) -> Repo:
    """main: c1 - c2 - c3; PR 5 branches from c2 with two commits touching other lines than c3."""
    r = Repo(tmp_path / "upstream")
    r.commit({"src/a.txt": lines(20), "README": "hello\n"}, "c1")
    c2 = r.commit({"src/b.txt": "b\n"}, "c2")
    r.commit({"src/a.txt": lines(20, {2: "main changed line 2"})}, "c3")
    r.checkout(c2, new="pr5")
    r.commit({"src/a.txt": lines(20, {15: "pr changed line 15"})}, "pr5: first")
    r.commit({"src/new.txt": "from the PR\n"}, "pr5: second")
    r.ref("refs/pull/5/head", r.git("rev-parse", "HEAD"))
    r.checkout("main")
    return r


def heads(r: Repo) -> tuple[str, str]:
    return r.git("rev-parse", "refs/heads/main"), r.git("rev-parse", "refs/pull/5/head")


# ------------------------------------------------------------------------------------- resolution


def test_short_sha_resolves_to_the_full_sha_and_checks_the_branch(tmp_path: Path, upstream: Repo) -> None:
    s = Sources(cache=tmp_path / "cache")
    c1 = upstream.git("rev-parse", "main~2")
    assert s.resolve_commit(str(upstream.path), c1[:7]) == c1
    assert s.resolve_commit(str(upstream.path), c1[:7], branch="main") == c1
    assert s.resolve_commit(str(upstream.path), c1) == c1


def test_relative_repo_path_is_taken_from_the_manifest_folder(tmp_path: Path, upstream: Repo) -> None:
    pins = tmp_path / "pins"
    pins.mkdir()
    s = Sources(cache=tmp_path / "cache", base_dir=pins)
    assert s.branch_head("../upstream", "main") == heads(upstream)[0]


def test_commit_not_on_the_named_branch_is_reported(tmp_path: Path, upstream: Repo) -> None:
    s = Sources(cache=tmp_path / "cache")
    pr = heads(upstream)[1]
    with pytest.raises(SourceError) as err:
        s.resolve_commit(str(upstream.path), pr[:8], branch="main")
    assert f"commit {pr} is not on branch main" in str(err.value)
    assert f"main is at {heads(upstream)[0]}" in str(err.value)
    with pytest.raises(SourceError, match=r"(?s)branch mian does not exist .* close: main"):
        s.resolve_commit(str(upstream.path), pr[:8], branch="mian")


def test_missing_commit_says_so(tmp_path: Path, upstream: Repo) -> None:
    s = Sources(cache=tmp_path / "cache")
    absent = "0000000" if not upstream.git("rev-parse", "--disambiguate=0000000") else "fffffff"
    with pytest.raises(SourceError, match=f"no commit {absent} in {upstream.path}"):
        s.resolve_commit(str(upstream.path), absent)
    with pytest.raises(SourceError, match=r"commit 0{40} \(as written in the manifest\) is not in"):
        s.resolve_commit(str(upstream.path), "0" * 40)


def _commit_object(tree: str, i: int) -> bytes:
    when = T0 + i
    return (f"tree {tree}\nauthor Test Author <author@test.invalid> {when} +0000\n"
            f"committer Test Committer <committer@test.invalid> {when} +0000\n\ncandidate {i}\n").encode()


def test_ambiguous_short_sha_lists_every_candidate_commit(tmp_path: Path, upstream: Repo) -> None:
    # Two commits whose SHAs share 7 hex digits: search commit texts (birthday bound, ~20k tries,
    # the same pair every run) and write only that pair.
    tree = upstream.git("hash-object", "-w", "-t", "tree", "--stdin", stdin=b"")
    seen: dict[str, int] = {}
    i = 0
    while True:
        body = _commit_object(tree, i)
        sha = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
        if sha[:7] in seen:
            pair = (seen[sha[:7]], i)
            break
        seen[sha[:7]] = i
        i += 1
    shas = []
    for n, idx in enumerate(pair):
        sha = upstream.git("hash-object", "-w", "-t", "commit", "--stdin", stdin=_commit_object(tree, idx))
        upstream.ref(f"refs/heads/candidate-{n}", sha)
        shas.append(sha)
    assert shas[0][:7] == shas[1][:7] and shas[0] != shas[1]

    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError) as err:
        s.resolve_commit(str(upstream.path), shas[0][:7])
    text = str(err.value)
    assert f"short SHA {shas[0][:7]} is ambiguous" in text and "2 commits start with it" in text
    for idx, sha in zip(pair, shas, strict=True):
        assert f"{sha}  " in text and f"candidate {idx}" in text  # SHA, date, subject
        when = datetime.fromtimestamp(T0 + idx, UTC).isoformat()
        assert f"{sha}  {when}  candidate {idx}" in text
    # the fix names, for each candidate, a prefix that resolves to it
    unique = text.split("write more digits in the manifest: ")[1].split(", ")
    assert sorted(s.resolve_commit(str(upstream.path), p) for p in unique) == sorted(shas)


def test_moving_branch_and_changed_pr_head_are_seen_by_a_new_resolution(tmp_path: Path, upstream: Repo) -> None:
    url = str(upstream.path)
    first = Sources(cache=tmp_path / "cache")
    main0, pr0 = heads(upstream)
    assert first.branch_head(url, "main") == main0
    assert first.pr_head(url, 5) == pr0

    main1 = upstream.commit({"README": "moved\n"}, "main moves")
    upstream.checkout("pr5")
    pr1 = upstream.commit({"src/new.txt": None}, "pr5: force-pushed")
    upstream.ref("refs/pull/5/head", pr1)
    upstream.checkout("main")

    # one Sources object is one consistent view (one `buildctl lock` run) ...
    assert first.branch_head(url, "main") == main0
    # ... a new one, on the same cache, sees the moves
    again = Sources(cache=tmp_path / "cache")
    assert again.branch_head(url, "main") == main1 != main0
    assert again.pr_head(url, 5) == pr1 != pr0


def test_missing_pr_is_a_clear_error(tmp_path: Path, upstream: Repo) -> None:
    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError) as err:
        s.pr_head(str(upstream.path), 99)
    assert f"PR #99 not found in {upstream.path}" in str(err.value)
    assert "refs/pull/99/head" in str(err.value) and "1 PR heads in all" in str(err.value)


# --------------------------------------------------------------------------------------- prepare


def test_pr_cherry_picked_gives_the_same_tree_in_two_caches(tmp_path: Path, upstream: Repo) -> None:
    url = str(upstream.path)
    main, pr = heads(upstream)
    a = Sources(cache=tmp_path / "cache-a").prepare(url, main, prs=[PrHead(number=5, head=pr)])
    # A second machine: another cache, a user git config that would change commits if it leaked in,
    # and identity variables in the environment.
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = Someone Else\n\temail = else@example.invalid\n[commit]\n\tgpgSign = true\n"
                   "[merge]\n\trenames = false\n[core]\n\tautocrlf = true\n")
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("GIT_CONFIG_GLOBAL", str(cfg))
        mp.setenv("GIT_COMMITTER_NAME", "leaked")
        mp.setenv("GIT_COMMITTER_DATE", "@1 +0100")
        mp.setenv("TZ", "Asia/Tokyo")
        b = Sources(cache=tmp_path / "cache-b").prepare(url, main, prs=[PrHead(number=5, head=pr)])
    finally:
        mp.undo()
    assert a.tree == b.tree and a.tree != main
    assert not a.reused and not b.reused
    again = Sources(cache=tmp_path / "cache-a").prepare(url, main, prs=[PrHead(number=5, head=pr)])
    assert again.reused and again.tree == a.tree

    mirror = Sources(cache=tmp_path / "cache-a").mirror_path(url)
    log = subprocess.run(["git", "--git-dir", str(mirror), "log", "--format=%an|%cn <%ce>|%ct|%s", f"{main}..{a.tree}"],
                         capture_output=True, text=True, check=True, env=_env()).stdout.splitlines()
    base_time = str(T0 + 60 * 3)  # c3's committer date
    assert log == [f"Test Author|buildctl <buildctl@localhost>|{base_time}|pr5: second",
                   f"Test Author|buildctl <buildctl@localhost>|{base_time}|pr5: first"]
    # both main's and the PR's changes are in the tree
    out = tmp_path / "out"
    Sources(cache=tmp_path / "cache-a").export(a, out)
    text = (out / "src" / "a.txt").read_text()
    assert "main changed line 2" in text and "pr changed line 15" in text
    assert (out / "src" / "new.txt").read_text() == "from the PR\n"


def test_concurrent_prepares_share_one_cache(tmp_path: Path, upstream: Repo) -> None:
    # parallel builds (--jobs) prepare from one cache: the mirror's lock serialises fetches and writes
    url = str(upstream.path)
    main, pr = heads(upstream)
    results: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(Sources(cache=tmp_path / "cache").prepare(url, main, prs=[PrHead(number=5, head=pr)]).tree)
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 4 and len(set(results)) == 1


def test_pr_that_does_not_apply_names_the_pr_and_files_and_leaves_nothing(tmp_path: Path, upstream: Repo) -> None:
    url = str(upstream.path)
    main, pr = heads(upstream)
    upstream.checkout(upstream.git("rev-parse", "main~1"), new="pr8")
    upstream.commit({"src/a.txt": lines(20, {2: "pr 8 changed line 2 differently"}), "src/ok.txt": "x\n"}, "pr8")
    upstream.ref("refs/pull/8/head", upstream.git("rev-parse", "HEAD"))
    pr8 = upstream.git("rev-parse", "HEAD")
    upstream.checkout("main")

    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError) as err:
        s.prepare(url, main, prs=[PrHead(number=5, head=pr), PrHead(number=8, head=pr8)])
    text = str(err.value)
    assert f"PR #8 does not apply to {main[:12]}" in text
    assert f'its commit {pr8[:12]} "pr8" collides with' in text
    assert "in: src/a.txt" in text and "src/ok.txt" not in text
    assert "drop" not in text
    mirror = s.mirror_path(url)
    prepared = subprocess.run(["git", "--git-dir", str(mirror), "for-each-ref", "refs/buildctl/prepared"],
                              capture_output=True, text=True, check=True, env=_env()).stdout
    assert prepared == ""
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []
    # PR 5 alone still applies from the same cache
    assert s.prepare(url, main, prs=[PrHead(number=5, head=pr)]).tree != main


def test_patches_are_checked_applied_and_deterministic(tmp_path: Path, upstream: Repo) -> None:
    url = str(upstream.path)
    main, _ = heads(upstream)
    patch = tmp_path / "patches" / "readme.patch"
    patch.parent.mkdir()
    patch.write_text("--- a/README\n+++ b/README\n@@ -1 +1 @@\n-hello\n+hello, patched\n")
    good = hashlib.sha256(patch.read_bytes()).hexdigest()

    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError) as err:
        s.prepare(url, main, patches=[PatchFile(name="patches/readme.patch", path=patch, sha256="1" * 64)])
    assert "patch patches/readme.patch does not match its sha256" in str(err.value)
    assert not s.mirror_path(url).exists()  # checked before anything was fetched

    pf = PatchFile(name="patches/readme.patch", path=patch, sha256=good)
    a = s.prepare(url, main, patches=[pf])
    b = Sources(cache=tmp_path / "cache-2").prepare(url, main, patches=[pf])
    assert a.tree == b.tree != main
    out = s.export(a, tmp_path / "out")
    assert (out / "README").read_text() == "hello, patched\n"

    bad = tmp_path / "patches" / "stale.patch"
    bad.write_text("--- a/README\n+++ b/README\n@@ -1 +1 @@\n-goodbye\n+hello again\n")
    with pytest.raises(SourceError) as err:
        s.prepare(url, main, patches=[pf, PatchFile(name="patches/stale.patch", path=bad,
                                                    sha256=hashlib.sha256(bad.read_bytes()).hexdigest())])
    assert f"patch patches/stale.patch does not apply to {main[:12]}" in str(err.value)
    assert "in: README" in str(err.value)


def test_locked_objects_survive_a_force_push(tmp_path: Path, upstream: Repo) -> None:
    url = str(upstream.path)
    main, pr = heads(upstream)
    s = Sources(cache=tmp_path / "cache")
    assert s.pr_head(url, 5) == pr  # the lock records it
    upstream.ref("refs/pull/5/head", main)  # force-pushed upstream; the old head is unreachable there
    upstream.git("branch", "-D", "pr5")
    later = Sources(cache=tmp_path / "cache")
    assert later.pr_head(url, 5) == main  # the mirror follows (pruned) ...
    assert later.prepare(url, main, prs=[PrHead(number=5, head=pr)]).tree != main  # ... and still has the old head


# ------------------------------------------------------------------------------- submodules, export


@pytest.fixture
def with_submodules(tmp_path: Path) -> tuple[Repo, Repo, Repo]:
    """super (vendor/lib -> lib, relative URL) ; lib (inner -> https://github.invalid/inner.git)."""
    inner = Repo(tmp_path / "repos" / "inner")
    inner.commit({"inner.h": "#define INNER 1\n"}, "inner")
    lib = Repo(tmp_path / "repos" / "lib")
    lib.commit({"lib.c": "int lib;\n", "tool.sh": "#!/bin/sh\necho tool\n"}, "lib")
    (lib.path / "tool.sh").chmod(0o755)
    lib.git("add", "tool.sh")
    lib.gitlink("inner", inner.git("rev-parse", "HEAD"), "https://github.invalid/inner")
    lib.commit({}, "lib: inner as a submodule")
    sup = Repo(tmp_path / "repos" / "super")
    os.symlink("README", sup.path / "LINK")
    sup.git("add", "LINK")
    sup.commit({"README": "super\n"}, "super")
    sup.gitlink("vendor/lib", lib.git("rev-parse", "HEAD"), "../lib")
    sup.commit({}, "super: lib as a submodule")
    return sup, lib, inner


def test_submodules_are_resolved_recursively_through_mirrors_and_exported(
        tmp_path: Path, with_submodules: tuple[Repo, Repo, Repo]) -> None:
    sup, lib, inner = with_submodules
    s = Sources(cache=tmp_path / "cache",
                mirrors={"https://github.invalid/": f"file://{tmp_path / 'repos'}/"})
    head = s.branch_head(str(sup.path), "main")
    assert s.submodules(str(sup.path), head) == {
        "vendor/lib": lib.git("rev-parse", "HEAD"),
        "vendor/lib/inner": inner.git("rev-parse", "HEAD"),
    }
    prepared = s.prepare(str(sup.path), head)
    assert prepared.tree == head and [m.path for m in prepared.submodules] == ["vendor/lib", "vendor/lib/inner"]
    out = s.export(prepared, tmp_path / "export")
    assert (out / "README").read_text() == "super\n"
    assert os.readlink(out / "LINK") == "README"
    assert (out / "vendor" / "lib" / "lib.c").read_text() == "int lib;\n"
    assert os.access(out / "vendor" / "lib" / "tool.sh", os.X_OK)
    assert not os.access(out / "vendor" / "lib" / "lib.c", os.X_OK)
    assert (out / "vendor" / "lib" / "inner" / "inner.h").read_text() == "#define INNER 1\n"
    # every file, link and folder carries the base commit's date
    mtimes = {os.lstat(os.path.join(d, n)).st_mtime for d, ds, fs in os.walk(out) for n in (*ds, *fs)}
    assert mtimes == {float(prepared.epoch)} and os.stat(out).st_mtime == prepared.epoch
    # no history goes along, but `git rev-parse --short HEAD` works at every level (TE's version suffix)
    assert sorted(p.name for p in (out / ".git").iterdir()) == [
        "HEAD", "buildctl-source.json", "config", "objects", "refs"]

    def short(d: Path) -> str:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=d, capture_output=True, text=True,
                              check=True, env=_env()).stdout.strip()
    assert short(out / "vendor") == prepared.short == head[:7]
    assert short(out / "vendor" / "lib") == lib.git("rev-parse", "HEAD")[:7]
    # cached export: written once per tree
    cached = s.exported(prepared)
    assert s.exported(prepared) == cached and (cached / "vendor" / "lib" / "inner" / "inner.h").is_file()


def test_submodule_with_unmapped_unreachable_url_fails_fast(
        tmp_path: Path, with_submodules: tuple[Repo, Repo, Repo]) -> None:
    sup, _, _ = with_submodules
    s = Sources(cache=tmp_path / "cache", network_timeout=5)
    head = s.branch_head(str(sup.path), "main")
    with pytest.raises(UnreachableError) as err:
        s.submodules(str(sup.path), head)
    assert "https://github.invalid/inner" in str(err.value)
    assert "git_mirrors" in str(err.value)


# ------------------------------------------------------------------------------ mirrors, unreachable


def test_git_mirrors_map_a_manifest_url_to_a_local_repository(tmp_path: Path, upstream: Repo) -> None:
    manifest_url = "https://github.invalid/x.git"
    (tmp_path / "mirror-root").mkdir()
    os.symlink(upstream.path, tmp_path / "mirror-root" / "x.git")
    s = Sources(cache=tmp_path / "cache", mirrors={"https://github.invalid/": f"file://{tmp_path / 'mirror-root'}/"})
    main, pr = heads(upstream)
    assert s.branch_head(manifest_url, "main") == main
    assert s.pr_head(manifest_url, 5) == pr
    assert s.effective_url(manifest_url) == f"file://{tmp_path / 'mirror-root'}/x.git"
    # the mirror in the cache is named after the URL as written, whatever it maps to
    assert s.mirror_path(manifest_url).name.startswith("x-")
    with pytest.raises(SourceError, match=r"PR #6 not found in https://github.invalid/x.git \(mapped to file://"):
        s.pr_head(manifest_url, 6)


def test_users_git_insteadof_is_honoured(tmp_path: Path, upstream: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "gitconfig"
    cfg.write_text(f'[url "{upstream.path}/"]\n\tinsteadOf = https://github.invalid/up/\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    s = Sources(cache=tmp_path / "cache")
    assert s.branch_head("https://github.invalid/up/", "main") == heads(upstream)[0]


def test_unreachable_host_fails_fast_naming_the_url_and_the_mirror_settings(tmp_path: Path) -> None:
    s = Sources(cache=tmp_path / "cache", network_timeout=5)
    with pytest.raises(UnreachableError) as err:
        s.branch_head("https://github.invalid/NVIDIA/TransformerEngine.git", "main")
    text = str(err.value)
    assert "cannot reach git remote https://github.invalid/NVIDIA/TransformerEngine.git" in text
    assert "Could not resolve host: github.invalid" in text
    assert '[git_mirrors] "https://github.invalid/"' in text and "insteadOf https://github.invalid/" in text


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never says anything."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_silent_git_daemon_is_cut_off_by_the_timeout(tmp_path: Path, silent_server: int) -> None:
    # git:// has no low-speed limit: only buildctl's own process timeout stops it
    s = Sources(cache=tmp_path / "cache", network_timeout=1)
    with pytest.raises(UnreachableError) as err:
        s.branch_head(f"git://127.0.0.1:{silent_server}/x.git", "main")
    assert f"git remote git://127.0.0.1:{silent_server}/x.git did not answer within 4s (ls-remote)" in str(err.value)


def test_silent_http_server_is_cut_off_by_the_low_speed_limit(tmp_path: Path, silent_server: int) -> None:
    s = Sources(cache=tmp_path / "cache", network_timeout=1)
    s_url = f"http://127.0.0.1:{silent_server}/x.git"
    with pytest.raises(UnreachableError) as err:
        s.branch_head(s_url, "main")
    assert f"cannot reach git remote {s_url}" in str(err.value) and "Operation too slow" in str(err.value)


# ------------------------------------------------------------------------ manifest components


def test_lock_component_then_prepare_component_agree(tmp_path: Path, upstream: Repo) -> None:
    main, pr = heads(upstream)
    pins = tmp_path / "pins"
    (pins / "patches").mkdir(parents=True)
    patch = pins / "patches" / "readme.patch"
    patch.write_text("--- a/README\n+++ b/README\n@@ -1 +1 @@\n-hello\n+hello, patched\n")
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    component = Component(name="up", repo="../upstream", commit=main[:9], branch="main",
                          prs=(PullRequest(number=5, head=pr[:10]),),
                          patches=(Patch(file="patches/readme.patch", sha256=digest),))
    s = Sources(cache=tmp_path / "cache", base_dir=pins)
    locked = s.lock_component(component)
    assert (locked.commit, dict(locked.prs), dict(locked.patches), dict(locked.submodules)) == (
        main, {"5": pr}, {"patches/readme.patch": digest}, {})
    assert locked.repo == "../upstream" and locked.tree not in ("", main)

    # build time, another cache: the same tree, checked against the lock
    other = Sources(cache=tmp_path / "cache-2", base_dir=pins)
    prepared = other.prepare_component(component, locked)
    assert prepared.tree == locked.tree
    out = other.export(prepared, tmp_path / "out")
    assert (out / "README").read_text() == "hello, patched\n"
    info = json.loads((out / ".git" / "buildctl-source.json").read_text())
    assert info["tree"] == locked.tree and info["prs"] == {"5": pr}

    with pytest.raises(SourceError, match=r"prepared tree .* differs from the lock's 0{40}"):
        other.prepare_component(component, replace(locked, tree="0" * 40))
    with pytest.raises(LockError, match=r"PR #6 is not in the lock"):
        other.prepare_component(replace(component, prs=(PullRequest(number=6),)), locked)

    # a reviewed head that is no longer the PR's head stops the lock
    upstream.checkout("pr5")
    moved = upstream.commit({"src/late.txt": "late\n"}, "pr5: pushed after review")
    upstream.ref("refs/pull/5/head", moved)
    with pytest.raises(LockDrift) as drift:
        Sources(cache=tmp_path / "cache", base_dir=pins).lock_component(component)
    assert "component up" in str(drift.value) and "PR #5 has moved" in str(drift.value) and moved in str(drift.value)
