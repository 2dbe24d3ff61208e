"""A submodule mirror that lacks a blob (as the cutlass mirror lacks a PNG under media/images/): the lock
records the gitlink without fetching the submodule, and preparing the tree names what is missing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from buildctl.errors import SourceError
from buildctl.lock.lockfile import LockedComponent
from buildctl.lock.resolve import resolve_component
from buildctl.manifest.model import Component, MissingObject
from buildctl.sources.sources import Sources

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_GLOBAL": os.devnull,
       "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "@1700000000 +0000", "GIT_COMMITTER_DATE": "@1700000000 +0000"}


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


def test_a_submodule_mirror_without_a_blob_locks_by_gitlink_and_prepare_names_the_missing_file(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    (sub / "media" / "images").mkdir(parents=True)
    git("init", "-q", "-b", "main", str(sub))
    (sub / "kernel.h").write_text("int k;\n")
    (sub / "media" / "images" / "perf.png").write_bytes(b"\x89PNG big picture")
    git("add", ".", cwd=sub)
    git("commit", "-q", "-m", "sub", cwd=sub)
    sub_sha = git("rev-parse", "HEAD", cwd=sub)
    blob = git("rev-parse", "HEAD:media/images/perf.png", cwd=sub)
    sub_mirror = tmp_path / "sub.git"
    git("clone", "-q", "--bare", "--no-local", str(sub), str(sub_mirror))
    git("--git-dir", str(sub_mirror), "repack", "-q", "-a", "-d")
    # Drop the blob from the mirror: unpack everything loose, then delete its file.
    packs = list((sub_mirror / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        (sub_mirror / "objects" / "pack" / pack.name).rename(tmp_path / pack.name)
        with (tmp_path / pack.name).open("rb") as fh:
            subprocess.run(["git", "--git-dir", str(sub_mirror), "unpack-objects", "-q"], stdin=fh, env=ENV, check=True)
        (sub_mirror / "objects" / "pack" / pack.with_suffix(".idx").name).unlink()
    (sub_mirror / "objects" / blob[:2] / blob[2:]).unlink()

    top = tmp_path / "top"
    git("init", "-q", "-b", "main", str(top))
    (top / "README").write_text("top\n")
    (top / ".gitmodules").write_text(f'[submodule "3rdparty/sub"]\n\tpath = 3rdparty/sub\n\turl = {sub_mirror}\n')
    git("add", ".", cwd=top)
    git("update-index", "--add", "--cacheinfo", f"160000,{sub_sha},3rdparty/sub", cwd=top)
    git("commit", "-q", "-m", "top", cwd=top)
    top_sha = git("rev-parse", "HEAD", cwd=top)

    s = Sources(cache=tmp_path / "cache")
    assert s.gitlinks(str(top), top_sha) == {"3rdparty/sub": sub_sha}  # the lock's view: nothing fetched
    assert not any((tmp_path / "cache" / "mirrors").glob("sub-*.git"))
    with pytest.raises(SourceError) as err:
        s.prepare(str(top), top_sha)
    text = str(err.value)
    assert f"lacks 1 object(s) that the tree of the commit at {sub_sha[:12]} holds: media/images/perf.png (blob {blob[:12]})" in text
    assert "complete that mirror" in text


def _drop_blob(mirror: Path, blob: str, scratch: Path) -> None:
    for pack in list((mirror / "objects" / "pack").glob("*.pack")):
        moved = scratch / pack.name
        pack.rename(moved)
        with moved.open("rb") as fh:
            subprocess.run(["git", "--git-dir", str(mirror), "unpack-objects", "-q"], stdin=fh, env=ENV, check=True)
        pack.with_suffix(".idx").unlink()
    (mirror / "objects" / blob[:2] / blob[2:]).unlink()


def test_a_mirror_whose_other_refs_lack_objects_still_serves_what_is_pinned(tmp_path: Path) -> None:
    """As the Megatron-LM and cudnn-frontend mirrors: some PR heads (or old history) hold a blob the mirror
    lacks. The pinned commit, its branch and the other PRs lock; a submodule whose history (not tree) lacks
    it is fetched alone."""
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", str(work))
    (work / "big.bin").write_bytes(b"large file, later deleted")
    (work / "a.txt").write_text("a\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "old", cwd=work)
    blob = git("rev-parse", "HEAD:big.bin", cwd=work)
    git("rm", "-q", "big.bin", cwd=work)
    git("commit", "-q", "-m", "drop big file", cwd=work)
    main = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "-q", "-b", "good", cwd=work)
    (work / "b.txt").write_text("b\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "good pr", cwd=work)
    good = git("rev-parse", "HEAD", cwd=work)
    mirror = tmp_path / "m.git"
    git("clone", "-q", "--bare", "--no-local", str(work), str(mirror))
    git("--git-dir", str(mirror), "update-ref", "refs/pull/1/head", good)
    git("--git-dir", str(mirror), "update-ref", "-d", "refs/heads/good")
    # history that lacks the blob: main's first commit
    _drop_blob(mirror, blob, tmp_path)

    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError) as err:  # the whole history cannot be fetched: said so
        s.resolve_commit(str(mirror), main[:10], branch="main")
    assert f"lacks 1 object(s) that its history holds: {blob}" in str(err.value)
    # as a submodule (its tree is complete): fetched alone, shallow
    sub = Sources(cache=tmp_path / "cache-sub")
    out = sub.export(sub.prepare(str(mirror), main, submodules=False), tmp_path / "out")
    assert (out / "a.txt").read_text() == "a\n" and not (out / "big.bin").exists()


def test_pr_heads_that_lack_objects_do_not_stop_the_rest_from_locking(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", str(work))
    (work / "a.txt").write_text("a\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "main", cwd=work)
    main = git("rev-parse", "HEAD", cwd=work)
    heads = {}
    for n, name in ((1, "fine.txt"), (2, "huge.bin")):
        git("checkout", "-q", "-b", f"pr{n}", main, cwd=work)
        (work / name).write_text(f"pr {n}\n")
        git("add", ".", cwd=work)
        git("commit", "-q", "-m", f"pr {n}", cwd=work)
        heads[n] = git("rev-parse", "HEAD", cwd=work)
    blob = git("rev-parse", f"{heads[2]}:huge.bin", cwd=work)
    mirror = tmp_path / "m.git"
    git("clone", "-q", "--bare", "--no-local", str(work), str(mirror))
    for n, head in heads.items():
        git("--git-dir", str(mirror), "update-ref", f"refs/pull/{n}/head", head)
        git("--git-dir", str(mirror), "update-ref", "-d", f"refs/heads/pr{n}")
    _drop_blob(mirror, blob, tmp_path)

    s = Sources(cache=tmp_path / "cache")
    assert s.resolve_commit(str(mirror), main[:10], branch="main") == main  # heads and tags only
    assert s.pr_head(str(mirror), 1) == heads[1]  # fetched when asked
    with pytest.raises(SourceError) as err:
        s.pr_head(str(mirror), 2)
    assert f"lacks 1 object(s) that the tree of the commit at {heads[2][:12]} holds: huge.bin" in str(err.value)
    again = Sources(cache=tmp_path / "cache")  # the next run remembers: no whole fetch attempted again
    assert again.pr_head(str(mirror), 1) == heads[1]


# -- declared missing blobs (manifest missing_objects): a placeholder for exactly that blob, refusals otherwise


def _super_with_incomplete_sub(tmp_path: Path, drop: str = "media/images/perf.png") -> tuple[Path, Path, str, str, str]:
    """(superproject, submodule mirror, superproject commit, submodule commit, dropped blob)."""
    sub = tmp_path / "sub"
    (sub / "media" / "images").mkdir(parents=True)
    git("init", "-q", "-b", "main", str(sub))
    (sub / "kernel.h").write_text("int k;\n")
    (sub / "media" / "images" / "perf.png").write_bytes(b"\x89PNG big picture")
    git("add", ".", cwd=sub)
    git("commit", "-q", "-m", "sub", cwd=sub)
    sub_sha = git("rev-parse", "HEAD", cwd=sub)
    blob = git("rev-parse", f"HEAD:{drop}", cwd=sub)
    sub_mirror = tmp_path / "sub.git"
    git("clone", "-q", "--bare", "--no-local", str(sub), str(sub_mirror))
    git("--git-dir", str(sub_mirror), "repack", "-q", "-a", "-d")
    _drop_blob(sub_mirror, blob, tmp_path)
    top = tmp_path / "top"
    git("init", "-q", "-b", "main", str(top))
    (top / "README").write_text("top\n")
    (top / ".gitmodules").write_text(f'[submodule "3rdparty/sub"]\n\tpath = 3rdparty/sub\n\turl = {sub_mirror}\n')
    git("add", ".", cwd=top)
    git("update-index", "--add", "--cacheinfo", f"160000,{sub_sha},3rdparty/sub", cwd=top)
    git("commit", "-q", "-m", "top", cwd=top)
    return top, sub_mirror, git("rev-parse", "HEAD", cwd=top), sub_sha, blob


def _component(top: Path, commit: str, *declared: MissingObject) -> tuple[Component, LockedComponent]:
    c = Component(name="te", repo=str(top), commit=commit, missing_objects=declared)
    return c, LockedComponent(name="te", repo=str(top), commit=commit, tree=commit)


def test_a_declared_missing_blob_becomes_a_placeholder_in_the_export_and_a_lock_note(tmp_path: Path) -> None:
    top, sub_mirror, top_sha, sub_sha, blob = _super_with_incomplete_sub(tmp_path)
    c, locked = _component(top, top_sha, MissingObject(repo=str(sub_mirror), path="media/images/perf.png",
                                                       blob=blob[:12], why="a chart; no build reads media/"))
    s = Sources(cache=tmp_path / "cache")
    notes: list[str] = []
    assert resolve_component(c, s, tmp_path, notes).submodules == {"3rdparty/sub": sub_sha}
    assert notes == [f"te: media/images/perf.png (blob {blob[:12]}) of {sub_mirror} may be missing from its mirror: "
                     "an export then holds a placeholder there (a chart; no build reads media/)"]
    prepared = s.prepare_component(c, locked)
    assert [x.commit for x in prepared.submodules] == [sub_sha]
    assert not list((tmp_path / "cache" / "mirrors").glob("*.git/objects/pack/tmp_pack_*"))  # failed fetches' debris
    out = s.exported(prepared)
    assert (out / "3rdparty/sub/kernel.h").read_text() == "int k;\n"  # the rest of the tree is there
    text = (out / "3rdparty/sub/media/images/perf.png").read_text()
    assert text.startswith(f"placeholder written by buildctl: blob {blob} (media/images/perf.png) is missing")
    assert "a chart; no build reads media/" in text
    info = json.loads((out / ".git" / "buildctl-source.json").read_text())
    assert info["placeholders"] == [{"repo": str(sub_mirror), "path": "3rdparty/sub/media/images/perf.png",
                                     "blob": blob, "why": "a chart; no build reads media/"}]
    # the next run finds the commit in the cache and writes the placeholder again, from the declaration alone
    again = Sources(cache=tmp_path / "cache").export(Sources(cache=tmp_path / "cache").prepare_component(c, locked),
                                                     tmp_path / "again")
    assert (again / "3rdparty/sub/media/images/perf.png").read_text() == text
    # without the declaration the cache's incomplete copy is refused at export, naming the file
    bare, _ = _component(top, top_sha)
    with pytest.raises(SourceError) as err:
        s.export(Sources(cache=tmp_path / "cache").prepare_component(bare, locked), tmp_path / "undeclared")
    assert f"3rdparty/sub/media/images/perf.png (blob {blob[:12]}) is missing from the cache mirror" in str(err.value)
    assert "missing_objects" in (err.value.fix or "")


def test_an_undeclared_missing_blob_is_refused_naming_file_path_and_blob(tmp_path: Path) -> None:
    top, sub_mirror, top_sha, sub_sha, blob = _super_with_incomplete_sub(tmp_path)
    for other in (MissingObject(repo=str(sub_mirror), path="media/images/other.png", blob=blob, why="x"),
                  MissingObject(repo=str(sub_mirror), path="media/images/perf.png", blob="0123456789ab", why="x"),
                  MissingObject(repo=str(tmp_path / "elsewhere.git"), path="media/images/perf.png", blob=blob,
                                why="x")):
        c, locked = _component(top, top_sha, other)
        with pytest.raises(SourceError) as err:
            Sources(cache=tmp_path / "cache").prepare_component(c, locked)
        text = str(err.value)
        assert f"lacks 1 object(s) that the tree of the commit at {sub_sha[:12]} holds: media/images/perf.png (blob {blob[:12]})" in text
        assert f"declare it in the component's missing_objects: {{repo: {sub_mirror}, path: media/images/perf.png, blob: {blob[:12]}" in text
    assert not (tmp_path / "cache" / "exports").exists()  # nothing exported


def test_a_declared_missing_blob_that_the_build_reads_is_refused(tmp_path: Path) -> None:
    top, sub_mirror, top_sha, _, blob = _super_with_incomplete_sub(tmp_path, drop="kernel.h")
    c, locked = _component(top, top_sha, MissingObject(repo=str(sub_mirror), path="kernel.h", blob=blob, why="x"))
    with pytest.raises(SourceError) as err:
        Sources(cache=tmp_path / "cache").prepare_component(c, locked)
    assert f"component te declares kernel.h (blob {blob[:12]}) of {sub_mirror} as missing, but a build may read" in str(err.value)
    assert not (tmp_path / "cache" / "mirrors").exists()  # refused before anything was fetched
    # undeclared, it is refused as any missing blob, without the offer to declare it
    bare, _ = _component(top, top_sha)
    with pytest.raises(SourceError) as err:
        Sources(cache=tmp_path / "cache").prepare_component(bare, locked)
    assert f"holds: kernel.h (blob {blob[:12]})" in str(err.value) and "missing_objects" not in str(err.value)


AIRGAP_MANIFEST = """\
schema: 1
stack: gapped
base: {{alias: test-base}}
variants:
  default: {{image: "127.0.0.1:9/none/base:1", platform: linux/amd64, cuda: "13"}}
components:
  te:
    repo: https://github.com/acme/top.git
    commit: {commit}
    branch: main
    submodules: true
    missing_objects:
      - repo: https://github.com/acme/sub.git
        path: media/images/perf.png
        blob: {blob}
        why: a chart; no build reads media/
"""


def test_build_dry_run_through_git_mirrors_with_an_incomplete_submodule_mirror(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """What `buildctl build deepseek-v3-gb200 --variant hopper --dry-run` does against the fetched mirrors (TE's
    cutlass submodule mirror lacks a PNG), made small: GitHub URLs in the manifest and in .gitmodules, mirrors laid
    out as DIR/<owner>/<name>.git and named by git_mirrors, no engine. The lock records the gitlink and the note;
    the dry run prepares the tree from the incomplete mirror and renders every node."""
    from buildctl import cli

    top, sub_mirror, top_sha, sub_sha, blob = _super_with_incomplete_sub(tmp_path)
    (top / ".gitmodules").write_text('[submodule "3rdparty/sub"]\n\tpath = 3rdparty/sub\n'
                                     '\turl = https://github.com/acme/sub.git\n')
    git("add", ".gitmodules", cwd=top)
    git("commit", "-q", "-m", "submodule by its GitHub URL", cwd=top)
    top_sha = git("rev-parse", "HEAD", cwd=top)
    mirrors = tmp_path / "mirrors"
    (mirrors / "acme").mkdir(parents=True)
    git("clone", "-q", "--mirror", str(top), str(mirrors / "acme" / "top.git"))
    sub_mirror.rename(mirrors / "acme" / "sub.git")
    proj = tmp_path / "project"
    (proj / "pins").mkdir(parents=True)
    (proj / "images").symlink_to(Path(__file__).resolve().parents[2] / "images")
    (proj / "pins" / "gapped.yaml").write_text(AIRGAP_MANIFEST.format(commit=top_sha, blob=blob[:12]))
    (tmp_path / "config.toml").write_text(f'git_mirrors = {{ "https://github.com/" = "file://{mirrors}/" }}\n'
                                          "network_timeout = 5\n")
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("BUILDCTL_GIT_MIRRORS", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")

    assert cli.main(["--project", str(proj), "lock", "gapped", "--partial", "--only", "git", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lock = json.loads((proj / "pins" / "gapped.lock.json").read_text())
    te = lock["variants"]["default"]["components"]["te"]
    assert te["submodules"] == {"3rdparty/sub": sub_sha}
    notes = json.dumps(lock.get("notes", [])) + json.dumps(out)
    assert f"media/images/perf.png (blob {blob[:12]})" in notes and "placeholder" in notes

    dry = tmp_path / "dry"
    assert cli.main(["--project", str(proj), "build", "gapped", "--dry-run", "--out", str(dry)]) == 0
    said = capsys.readouterr().out
    assert f"source te: prepared {te['tree']}" in said
    assert "plan assemble: unknown (the engine could not be asked)" in said  # the final node
    assert "skip (not needed: a later node is present)" not in said  # nothing is known present
    assert (dry / "wheel-te.sh").is_file() and (dry / "assemble.Dockerfile").is_file()
    assert "+ no changes, 1 submodule(s))" in said  # the submodule's commit came from its incomplete mirror
    # (its export, with the placeholder, is the build's next step: test_a_declared_missing_blob_becomes_...)
