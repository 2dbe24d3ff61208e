"""Exports: a prepared tree written out as plain files for a build context, submodules included.

An export carries no history, but a minimal ``.git`` (HEAD = the prepared commit, no objects,
core.abbrev=7) at its top and in each submodule, so that `git rev-parse --short HEAD` in the build tree
prints ``PreparedTree.short``: TE's version becomes ``<VERSION.txt>+<tree[:7]>``, the short SHA of the
prepared commit (the lock's ``tree``), not of the base commit. The build needs git for that (TE drops the
suffix silently without it) and, where it runs as another user than the files' owner, ``BUILD_GIT_ENV``.
``.git/buildctl-source.json`` records URL, commit, PRs, patches and submodules.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from buildctl.errors import SourceError
from buildctl.sources.mirrors import Mirrors
from buildctl.sources.missing import Allowance, build_reads, declaration, placeholder
from buildctl.sources.prepare import SHORT_LEN, PreparedTree, change_key

# Environment for a build that runs `git rev-parse --short HEAD` in an exported tree it does not own
# (a mounted source in a container running as another user): git >= 2.35.2 refuses such a repository
# ("dubious ownership") and TE would then silently drop its version suffix. Command-line scope config
# from the environment is one of the places git honours safe.directory from.
BUILD_GIT_ENV: Mapping[str, str] = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}


def export(cache: Mirrors, prepared: PreparedTree, dest: Path, *, git_head: bool = True) -> Path:
    """Write the prepared tree, submodules included, into ``dest`` (which must not exist).

    No .git history goes along. With ``git_head`` a minimal ``.git`` (HEAD = the prepared tree, no
    objects) sits at the top and in each submodule, so that `git rev-parse --short HEAD` prints
    ``prepared.short`` there (TE and DeepEP take their version suffix from it; `git status` does
    not work in it). Every file, link and folder gets ``prepared.epoch`` as its mtime. A blob the
    mirror lacks is refused, unless ``prepared.allowed`` declares it: then a placeholder text stands at
    its path, and ``.git/buildctl-source.json`` lists it under ``placeholders``.
    """
    if dest.exists():
        raise SourceError(f"cannot export {prepared.url} into {dest}: it exists",
                          fix="remove it or export elsewhere")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        placeholders: list[dict[str, str]] = []
        _write_tree(cache, prepared.url, prepared.tree, tmp, prepared.allowed, placeholders)
        for sub in prepared.submodules:
            target = tmp / sub.path
            _write_tree(cache, sub.url, sub.commit, target, prepared.allowed, placeholders, prefix=f"{sub.path}/")
        if git_head:
            _minimal_git(tmp / ".git", prepared.tree, {
                **({"placeholders": placeholders} if placeholders else {}),
                "url": prepared.url, "commit": prepared.commit, "tree": prepared.tree,
                "changes": [change_key(c) for c in prepared.changes],
                "prs": {str(p.number): p.head for p in prepared.prs},
                "patches": {p.name: p.sha256 for p in prepared.patches},
                "submodules": {s.path: s.commit for s in prepared.submodules},
            })
            for sub in prepared.submodules:
                _minimal_git(tmp / sub.path / ".git", sub.commit, None)
        _fix_mtimes(tmp, prepared.epoch)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
        os.utime(dest, (prepared.epoch, prepared.epoch))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def exported(cache: Mirrors, prepared: PreparedTree, *, git_head: bool = True) -> Path:
    """A cached export of ``prepared`` under the cache's exports/ (written once per tree)."""
    placeholders = [[a.repo, a.path, a.blob, a.why, a.where] for a in prepared.allowed]
    variant = json.dumps([git_head, [[s.path, s.commit] for s in prepared.submodules],
                          *([placeholders] if placeholders else [])])
    dest = cache.root / "exports" / f"{prepared.tree}-{hashlib.sha256(variant.encode()).hexdigest()[:12]}"
    if dest.is_dir():
        return dest
    try:
        return export(cache, prepared, dest, git_head=git_head)
    except SourceError:
        if dest.is_dir():  # another process exported it meanwhile
            return dest
        raise


def _write_tree(cache: Mirrors, url: str, commit: str, root: Path, allow: Sequence[Allowance],
                placeholders: list[dict[str, str]], *, prefix: str = "") -> None:
    mirror = cache.path(url)
    listing = cache.git.run(["ls-tree", "-r", "-z", "--full-tree", commit], git_dir=mirror, what="list tree").out
    blobs: list[tuple[str, str, str]] = []  # (mode, sha, path)
    root.mkdir(parents=True, exist_ok=True)
    for item in filter(None, listing.split("\0")):
        meta, _, path = item.partition("\t")
        mode, kind, sha = meta.split(" ")
        parts = path.split("/")
        if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise SourceError(f"{url} at {commit[:12]} has an unsafe path {path!r}",
                              why="refusing to write it outside the tree or into a .git folder")
        if kind == "commit":
            (root / path).mkdir(parents=True, exist_ok=True)  # filled by the submodule's own export
        elif kind == "blob":
            blobs.append((mode, sha, path))
    _write_blobs(cache, url, commit, mirror, root, blobs, allow, placeholders, prefix=prefix)


def _write_blobs(cache: Mirrors, url: str, commit: str, mirror: Path, root: Path,
                 blobs: Sequence[tuple[str, str, str]], allow: Sequence[Allowance],
                 placeholders: list[dict[str, str]], *, prefix: str) -> None:
    if not blobs:
        return
    with cache.git.blobs(mirror) as reader:
        for mode, sha, path in blobs:
            header, data = reader.read(sha)
            if data is None:
                declared = next((a for a in allow if a.matches(url, path, sha)), None)
                if declared is None or mode == "120000":
                    raise SourceError(
                        f"{url} at {commit[:12]}: {prefix}{path} (blob {sha[:12]}) is missing from the cache mirror "
                        f"{mirror}", why=header,
                        fix="remove the mirror folder and run again" + (
                            "" if build_reads(path) else "; if the mirror it comes from lacks the blob and no build "
                            f"reads it, declare it in the component's missing_objects: {declaration(url, sha, path)}"))
                data = placeholder(declared, url, sha)
                placeholders.append({"repo": url, "path": f"{prefix}{path}", "blob": sha, "why": declared.why})
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                os.symlink(data.decode("utf-8", "surrogateescape"), target)
            else:
                target.write_bytes(data)
                os.chmod(target, 0o755 if mode == "100755" else 0o644)


def _minimal_git(git_dir: Path, head: str, info: Mapping[str, object] | None) -> None:
    for d in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (git_dir / d).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text(f"{head}\n")
    # core.abbrev pins the short SHA length, whatever the builder's git would guess for the repository.
    (git_dir / "config").write_text(
        f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tabbrev = {SHORT_LEN}\n")
    if info is not None:
        (git_dir / "buildctl-source.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def _fix_mtimes(root: Path, epoch: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in (*filenames, *dirnames):
            os.utime(os.path.join(dirpath, name), (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))
