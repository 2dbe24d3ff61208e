"""Pure helpers of buildctl.sources (urls, gitrun, prepare, resolve): URL handling, parsing git output, keys, messages. No processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from buildctl.errors import ManifestErrors, SourceError
from buildctl.manifest import pins
from buildctl.sources import gitrun, missing, prepare, resolve, urls
from buildctl.sources.prepare import PatchFile, PickChange, PrChange, PreparedTree


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests must not start git (or anything): the helpers are pure."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unit test started a process: {args!r}")
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    monkeypatch.setattr(os, "system", refuse)


def test_parse_git_version() -> None:
    assert gitrun.parse_git_version("git version 2.39.5\n") == (2, 39)
    assert gitrun.parse_git_version("git version 2.45.1.windows.1") == (2, 45)
    assert gitrun.parse_git_version("git version 2.39.3 (Apple Git-146)") == (2, 39)
    assert gitrun.parse_git_version("git version 2.33.8") < gitrun.MIN_GIT <= gitrun.parse_git_version("2.34.0")
    with pytest.raises(SourceError, match="cannot read the git version"):
        gitrun.parse_git_version("hub version x")


def test_is_sha() -> None:
    assert urls.is_sha("d2945c6")
    assert urls.is_sha("d2945c6a571e3978677614d1fe08779966a5a4ef")
    assert not urls.is_sha("d2945c")  # 6 digits
    assert not urls.is_sha("D2945C6")  # upper case is not what the lock writes
    assert not urls.is_sha("d2945c6a571e3978677614d1fe08779966a5a4ef0")  # 41
    assert not urls.is_sha("d2945cg")
    assert not urls.is_sha("d2945c6a", min_len=40)


@pytest.mark.parametrize(("repo", "kind"), [
    ("https://github.com/NVIDIA/TransformerEngine.git", "url"),
    ("file:///srv/mirrors/te.git", "url"),
    ("ssh://git@github.com/NVIDIA/TransformerEngine.git", "url"),
    ("git@github.com:NVIDIA/TransformerEngine.git", "scp"),
    ("github.com:NVIDIA/TransformerEngine.git", "scp"),
    ("../demo/sources/fastmath.bundle", "path"),
    ("demo/sources/fastmath.bundle", "path"),
    ("/srv/mirrors/te.git", "path"),
    ("./odd:name", "path"),
    ("dir/odd:name", "path"),
])
def test_url_kind(repo: str, kind: str) -> None:
    assert urls.url_kind(repo) == kind


def test_normalize_repo_resolves_relative_paths_against_the_manifest_folder(tmp_path: Path) -> None:
    pins = tmp_path / "project" / "pins"
    assert urls.normalize_repo("../demo/sources/fastmath.bundle", pins) == str(
        tmp_path / "project" / "demo" / "sources" / "fastmath.bundle")
    assert urls.normalize_repo("/abs/repo.git", pins) == "/abs/repo.git"
    assert urls.normalize_repo("https://github.com/a/b.git", pins) == "https://github.com/a/b.git"
    assert urls.normalize_repo("git@github.com:a/b.git", None) == "git@github.com:a/b.git"
    with pytest.raises(SourceError, match="relative path"):
        urls.normalize_repo("../x.bundle", None)


def test_mirror_name_is_readable_and_keyed_by_the_exact_url() -> None:
    a = urls.mirror_name("https://github.com/NVIDIA/TransformerEngine.git")
    assert a.startswith("TransformerEngine-") and len(a) == len("TransformerEngine-") + 16
    assert a == urls.mirror_name("https://github.com/NVIDIA/TransformerEngine.git")
    assert a != urls.mirror_name("https://github.com/NVIDIA/TransformerEngine")
    assert urls.mirror_name("/x/demo/sources/fastmath.bundle").startswith("fastmath-")
    assert urls.mirror_name("git@github.com:deepseek-ai/DeepEP.git").startswith("DeepEP-")
    assert urls.mirror_name("https://host/").startswith("host-")


def test_insteadof_args_pass_each_mirror_as_git_config() -> None:
    assert urls.insteadof_args({
        "https://github.com/": "file:///srv/mirrors/github/",
        "https://gitlab.example/": "https://mirror.example/gitlab/",
    }) == [
        "-c", "url.file:///srv/mirrors/github/.insteadOf=https://github.com/",
        "-c", "url.https://mirror.example/gitlab/.insteadOf=https://gitlab.example/",
    ]
    assert urls.insteadof_args({}) == []


@pytest.mark.parametrize(("super_url", "sub_url", "expected"), [
    ("https://github.com/NVIDIA/TransformerEngine.git", "https://github.com/NVIDIA/cutlass.git",
     "https://github.com/NVIDIA/cutlass.git"),
    ("https://github.com/NVIDIA/TransformerEngine.git", "../cutlass.git", "https://github.com/NVIDIA/cutlass.git"),
    ("https://github.com/NVIDIA/TransformerEngine.git/", "../cutlass.git", "https://github.com/NVIDIA/cutlass.git"),
    ("https://github.com/NVIDIA/TransformerEngine.git", "../../google/googletest.git",
     "https://github.com/google/googletest.git"),
    ("https://github.com/NVIDIA/TransformerEngine.git", "./sub.git",
     "https://github.com/NVIDIA/TransformerEngine.git/sub.git"),
    ("git@github.com:NVIDIA/TransformerEngine.git", "../cutlass.git", "git@github.com:NVIDIA/cutlass.git"),
    ("git@host:TransformerEngine.git", "../cutlass.git", "git@host:cutlass.git"),
    ("/srv/repos/super", "../lib", "/srv/repos/lib"),
])
def test_resolve_submodule_url_like_git(super_url: str, sub_url: str, expected: str) -> None:
    assert urls.resolve_submodule_url(super_url, sub_url) == expected


def test_resolve_submodule_url_refuses_to_climb_above_the_url() -> None:
    with pytest.raises(SourceError, match="climbs above"):
        urls.resolve_submodule_url("super", "../../x")


def test_parse_gitmodules() -> None:
    text = ("submodule.3rdparty/cudnn-frontend.path\n3rdparty/cudnn-frontend\0"
            "submodule.3rdparty/cudnn-frontend.url\nhttps://github.com/NVIDIA/cudnn-frontend.git\0"
            "submodule.cutlass.path\n3rdparty/cutlass\0"
            "submodule.cutlass.url\nhttps://github.com/NVIDIA/cutlass.git\0"
            "submodule.cutlass.branch\nmain\0"
            "submodule.nourl.path\nx\0")
    assert gitrun.parse_gitmodules(text) == {
        "3rdparty/cudnn-frontend": "https://github.com/NVIDIA/cudnn-frontend.git",
        "3rdparty/cutlass": "https://github.com/NVIDIA/cutlass.git",
    }


def test_parse_ls_tree_gitlinks() -> None:
    text = ("100644 blob 1111111111111111111111111111111111111111\tREADME.md\0"
            "160000 commit 57e3cfb47a2d9e0d46eb6335c3dc411498efa198\t3rdparty/cutlass\0"
            "120000 blob 2222222222222222222222222222222222222222\tlink\0"
            "160000 commit f8d7d77c06936315286eb55f8de22cd23c188571\t3rdparty/googletest\0")
    assert gitrun.parse_ls_tree_gitlinks(text) == {
        "3rdparty/cutlass": "57e3cfb47a2d9e0d46eb6335c3dc411498efa198",
        "3rdparty/googletest": "f8d7d77c06936315286eb55f8de22cd23c188571",
    }


def test_parse_ls_remote_keeps_branches_tags_and_pr_heads_only() -> None:
    a, b, c, d, e = ("a" * 40, "b" * 40, "c" * 40, "d" * 40, "e" * 40)
    text = (f"{a}\tHEAD\n{a}\trefs/heads/main\n{b}\trefs/tags/v2.9\n{c}\trefs/pull/2146/head\n"
            f"{d}\trefs/pull/2146/merge\n{e}\trefs/notes/commits\n{b}\trefs/tags/v2.9^{{}}\n")
    assert gitrun.parse_ls_remote(text, pulls=True) == {
        "refs/heads/main": a, "refs/tags/v2.9": b, "refs/pull/2146/head": c}
    assert gitrun.parse_ls_remote(text, pulls=False) == {"refs/heads/main": a, "refs/tags/v2.9": b}


def _patch(name: str, sha: str) -> PatchFile:
    return PatchFile(name=name, path=Path("/nowhere") / name, sha256=sha)


def test_prepare_key_covers_commit_changes_their_order_and_exact_commits() -> None:
    base = "1" * 40
    p1 = PrChange(number=2146, head="a" * 40, commits=("a" * 40,))
    p2 = PrChange(number=2150, head="b" * 40, commits=("d" * 40, "b" * 40))
    pick = PickChange(sha="e" * 40)

    def key(*changes: prepare.Change, commit: str = base) -> str:
        return prepare.prepare_key(commit, changes)

    k = key(pick, p1, p2, _patch("x.patch", "0" * 64))
    assert k == key(pick, p1, p2, _patch("x.patch", "0" * 64))
    others = {
        key(pick, p1, p2, _patch("x.patch", "0" * 64), commit="2" * 40),
        key(pick, p2, p1, _patch("x.patch", "0" * 64)),  # order matters
        key(p1, pick, p2, _patch("x.patch", "0" * 64)),
        key(p1, p2, _patch("x.patch", "0" * 64)),  # without the cherry-pick
        key(pick, p1, PrChange(number=2150, head="c" * 40, commits=("d" * 40, "b" * 40)), _patch("x.patch", "0" * 64)),
        key(pick, p1, PrChange(number=2150, head="b" * 40, commits=("b" * 40,)), _patch("x.patch", "0" * 64)),
        key(pick, p1, PrChange(number=2150, head="b" * 40, mode="merge"), _patch("x.patch", "0" * 64)),
        key(pick, p1, p2, _patch("x.patch", "1" * 64)),
        key(pick, p1, p2, _patch("y.patch", "0" * 64)),  # the name is in the commit
        key(pick, p1, p2),
    }
    assert k not in others and len(others) == 10
    # where the patch lies on this machine is not part of the key
    moved = PatchFile(name="x.patch", path=Path("/elsewhere/x.patch"), sha256="0" * 64)
    assert key(pick, p1, p2, moved) == k


@pytest.mark.parametrize(("stderr", "kind"), [
    # measured on this machine: github.com does not resolve
    ("fatal: unable to access 'https://github.com/NVIDIA/TransformerEngine.git/': "
     "Could not resolve host: github.com", "unreachable"),
    ("ssh: Could not resolve hostname github.com: Name or service not known\n"
     "fatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\n"
     "and the repository exists.", "unreachable"),
    ("fatal: unable to look up github.invalid (port 9418) (Name or service not known)", "unreachable"),
    ("fatal: unable to access 'http://127.0.0.1:5/x.git/': Operation too slow. Less than 1000 bytes/sec "
     "transferred the last 3 seconds", "unreachable"),
    ("fatal: unable to access 'https://10.255.255.1/x.git/': SSL: certificate subject name (proxy) does not "
     "match target host name '10.255.255.1'", "unreachable"),
    ("fatal: repository 'https://pypi.org/x.git/' not found", "not-found"),
    ("fatal: '/tmp/nothing' does not appear to be a git repository", "not-found"),
    ("fatal: could not read Username for 'https://github.com': terminal prompts disabled", "auth"),
    ("remote: Invalid username or password.\nfatal: Authentication failed for 'https://x/'", "auth"),
    ("fatal: unable to access 'https://x/': The requested URL returned error: 403", "auth"),
    ("fatal: protocol error: bad pack header from 127.0.0.1:40123", "other"),
])
def test_classify_failure(stderr: str, kind: str) -> None:
    assert gitrun.classify_failure(stderr) == kind


def test_mirror_hint_names_the_host_base_and_both_ways_to_configure_a_mirror() -> None:
    hint = urls.mirror_hint("https://github.com/NVIDIA/TransformerEngine.git")
    assert '[git_mirrors] "https://github.com/" = "<mirror base>"' in hint
    assert "BUILDCTL_GIT_MIRRORS='https://github.com/=<mirror base>'" in hint
    assert "git config --global url.<mirror base>.insteadOf https://github.com/" in hint
    assert "refs/pull/*/head" in hint and "submodule" in hint
    assert "insteadOf git@github.com:" in urls.mirror_hint("git@github.com:deepseek-ai/DeepEP.git")


def test_conflict_files_from_apply() -> None:
    stderr = ("error: patch failed: transformer_engine/pytorch/module/base.py:120\n"
              "error: transformer_engine/pytorch/module/base.py: patch does not apply\n"
              "error: setup.py: does not exist in index\n"
              "error: new.txt: already exists in index\n")
    assert prepare.conflict_files_from_apply(stderr) == [
        "transformer_engine/pytorch/module/base.py", "setup.py", "new.txt"]
    assert prepare.conflict_files_from_apply("error: No valid patches in input") == []


def test_shortest_unique_prefixes() -> None:
    shas = ["abc1234" + "0" * 33, "abc1234" + "1" * 33, "abc1235" + "0" * 33]
    assert resolve.shortest_unique_prefixes(shas, 8) == {
        shas[0]: "abc12340", shas[1]: "abc12341", shas[2]: "abc12350"}
    assert resolve.shortest_unique_prefixes(shas[:1], 8) == {shas[0]: "abc12340"}


def test_check_patch(tmp_path: Path) -> None:
    f = tmp_path / "fix.patch"
    f.write_bytes(b"--- a/x\n+++ b/x\n")
    good = hashlib.sha256(f.read_bytes()).hexdigest()
    prepare.check_patch(PatchFile(name="patches/fix.patch", path=f, sha256=good))
    with pytest.raises(SourceError) as bad:
        prepare.check_patch(PatchFile(name="patches/fix.patch", path=f, sha256="0" * 64))
    assert "patch patches/fix.patch does not match its sha256" in str(bad.value)
    assert good in str(bad.value) and "0" * 64 in str(bad.value)
    with pytest.raises(SourceError, match=r"patch patches/gone.patch cannot be read"):
        prepare.check_patch(PatchFile(name="patches/gone.patch", path=tmp_path / "gone.patch", sha256=good))


def test_prepared_tree_short_sha_is_what_rev_parse_short_prints_in_an_export() -> None:
    t = PreparedTree(url="u", commit="1" * 40, tree="f8811da2901092e641e6c682b1698f75d1611f05", key="k", epoch=0)
    assert t.short == "f8811da"


MISSING_MANIFEST = """\
schema: 1
stack: t
base:
  alias: demo-base
variants:
  first:
    image: "127.0.0.1:5000/demo/base:1"
    platform: linux/amd64
    cuda: "13"
components:
  lib:
    repo: https://git.example/org/lib.git
    commit: 0123456789abcdef0123456789abcdef01234567
    missing_objects:
      - {repo: https://git.example/org/sub.git, path: media/a.png, blob: 0123456789ab, why: a picture}
"""


def test_missing_objects_are_read_and_checked_at_load_time() -> None:
    (mo,) = pins.load_text(MISSING_MANIFEST, "t.yaml").components[0].missing_objects
    assert (mo.repo, mo.path, mo.blob, mo.why) == ("https://git.example/org/sub.git", "media/a.png", "0123456789ab",
                                                   "a picture")
    for old, new, said in (("blob: 0123456789ab", "blob: xyz", "hex SHA"),
                           ("path: media/a.png", "path: ../a.png", "must stay inside"),
                           ("repo: https://git.example/org/sub.git", "repo: -oops", "must not start with '-'")):
        with pytest.raises(ManifestErrors) as err:
            pins.load_text(MISSING_MANIFEST.replace(old, new), "t.yaml")
        assert "components.lib.missing_objects[0]" in str(err.value) and said in str(err.value)


def test_allowances_match_exactly_and_refuse_files_a_build_reads() -> None:
    c = pins.load_text(MISSING_MANIFEST, "t.yaml").components[0]
    (a,) = missing.allowances(c, None)
    assert a.where == "t.yaml:15"
    assert a.matches("https://git.example/org/sub", "media/a.png", "0123456789abcdef")  # .git and prefix aside
    assert not a.matches("https://git.example/org/sub.git", "media/b.png", "0123456789abcdef")
    assert not a.matches("https://git.example/org/sub.git", "media/a.png", "0123456789ac")
    assert not a.matches("https://git.example/org/other.git", "media/a.png", "0123456789abcdef")
    assert [missing.build_reads(p) for p in ("docs/x.PDF", "media/y.svg", "include/z.h", "setup.py", "README")] == [
        False, False, True, True, True]
    header = pins.load_text(MISSING_MANIFEST.replace("media/a.png", "include/a.h"), "t.yaml").components[0]
    with pytest.raises(SourceError) as err:
        missing.allowances(header, None)
    assert "t.yaml:15" in str(err.value) and "include/a.h (blob 0123456789ab)" in str(err.value)
    assert "a build may read that file" in str(err.value)
    assert missing.placeholder(a, "https://git.example/org/sub.git", "0123456789abcdef").decode().startswith(
        "placeholder written by buildctl: blob 0123456789abcdef (media/a.png) is missing from the mirror of "
        "https://git.example/org/sub.git;\ndeclared in missing_objects at t.yaml:15: a picture")
