"""Prepared trees: a component's base commit with its changes (upstream commits, PR commits, patch files)
applied in order and committed deterministically in the mirror, under a key of everything that decides
the resulting SHA; a change that does not apply is diagnosed (what it collides with, which order works).

Everything that writes commits runs with the user's and the system's git configuration switched off, a
fixed identity and dates taken from the base commit, so that the prepared commit has the same SHA on
every machine with the same git merge machinery (merge-ort, the default since git 2.34).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.errors import LockError, SourceError
from buildctl.lock.lockfile import LockedChange, LockedComponent, LockedPatch, LockedPick, LockedPr, PrMode
from buildctl.sources.gitrun import Result, last_lines
from buildctl.sources.mirrors import Mirrors, Submodule
from buildctl.sources.missing import Allowance, allowances
from buildctl.sources.resolve import pr_change
from buildctl.sources.urls import is_sha, normalize_repo

if TYPE_CHECKING:
    from buildctl.manifest.model import Change as ManifestChange
    from buildctl.manifest.model import Component

# The identity of every commit buildctl makes. Changing it (or PREPARE_RECIPE) changes every prepared
# tree SHA, so it is part of the prepared-tree key.
IDENTITY_NAME = "buildctl"
IDENTITY_EMAIL = "buildctl@localhost"
# Bump when the way PRs and patches are applied changes: the key of every prepared tree changes with it.
PREPARE_RECIPE = 2
# Length of the short SHA in exported trees: `git rev-parse --short HEAD` in an export prints this many
# digits (a full clone of a large repository may print more; compare by prefix).
SHORT_LEN = 7


@dataclass(frozen=True, kw_only=True)
class PrHead:
    """One upstream PR to apply: its number and the head SHA the lock recorded."""

    number: int
    head: str  # full 40-hex SHA


@dataclass(frozen=True, kw_only=True)
class PatchFile:
    """One patch file to apply, checked against its sha256 before use."""

    name: str  # as written in the manifest (relative path); part of the commit message, so of the SHA
    path: Path  # where it is on this machine
    sha256: str

    def label(self) -> str:
        return f"patch {self.name}"


@dataclass(frozen=True, kw_only=True)
class PickChange:
    """An upstream commit to cherry-pick."""

    sha: str  # full SHA

    def label(self) -> str:
        return f"commit {self.sha[:12]}"


@dataclass(frozen=True, kw_only=True)
class PrChange:
    """A PR to apply: its own commits cherry-picked in order, or (mode merge) its head merged."""

    number: int
    head: str  # full SHA
    mode: PrMode = "own-commits"
    commits: tuple[str, ...] = ()  # own-commits: exactly what is cherry-picked, in order

    def label(self) -> str:
        return f"PR #{self.number}"


Change = PickChange | PrChange | PatchFile


@dataclass(frozen=True, kw_only=True)
class PreparedTree:
    """A commit plus its PRs and patches, committed deterministically in the mirror."""

    url: str  # normalised repository URL
    commit: str  # the locked base commit
    tree: str  # the commit that carries PRs and patches (== commit when there are none)
    key: str  # sha256 of (commit, PR heads, patches, recipe): the cache key
    epoch: int  # base commit's committer time: the date of every commit made, and the mtime of exports
    changes: tuple[Change, ...] = ()
    submodules: tuple[Submodule, ...] = ()  # at `tree`, recursive
    empty: tuple[str, ...] = ()  # upstream commits whose pick changed nothing (already in the tree)
    allowed: tuple[Allowance, ...] = ()  # declared missing blobs: a placeholder in the export where one is missing
    reused: bool = field(default=False, compare=False)  # found in the cache

    @property
    def prs(self) -> tuple[PrChange, ...]:
        return tuple(c for c in self.changes if isinstance(c, PrChange))

    @property
    def patches(self) -> tuple[PatchFile, ...]:
        return tuple(c for c in self.changes if isinstance(c, PatchFile))

    @property
    def short(self) -> str:
        """What `git rev-parse --short HEAD` prints in an export of this tree (TE's version suffix)."""
        return self.tree[:SHORT_LEN]



def change_key(change: Change) -> list[object]:
    if isinstance(change, PickChange):
        return ["commit", change.sha]
    if isinstance(change, PrChange):
        return ["pr", change.number, change.head, change.mode, list(change.commits)]
    return ["patch", change.name, change.sha256]


def prepare_key(commit: str, changes: Sequence[Change]) -> str:
    """Cache key of a prepared tree: everything that determines its commit SHA, and nothing else."""
    data = {
        "recipe": PREPARE_RECIPE,
        "identity": f"{IDENTITY_NAME} <{IDENTITY_EMAIL}>",
        "commit": commit,
        "changes": [change_key(c) for c in changes],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def conflict_files_from_apply(stderr: str) -> list[str]:
    """The files `git apply` names in its errors (``patch failed: F:L``, ``F: does not exist``...)."""
    files: list[str] = []
    for line in stderr.splitlines():
        m = (re.match(r"^error: patch failed: (.+):\d+\Z", line)
             or re.match(r"^error: (.+): (?:does not exist in index|patch does not apply|already exists in index"
                         r"|does not match index|No such file or directory|already exists in working directory)\Z",
                         line))
        if m and m.group(1) not in files:
            files.append(m.group(1))
    return files


def change_signature(change: ManifestChange) -> tuple[str, str]:
    """What identifies a manifest change (kind and name), to compare it with a locked one."""
    if change.commit is not None:
        return ("commit", change.commit)
    if change.pr is not None:
        return ("pr", str(change.pr))
    return ("patch", change.patch or "")


def locked_signature(change: LockedChange) -> tuple[str, str]:
    if isinstance(change, LockedPick):
        return ("commit", change.sha)
    if isinstance(change, LockedPr):
        return ("pr", str(change.number))
    return ("patch", change.file)


def check_patch(patch: PatchFile) -> None:
    """Raise SourceError unless the patch file exists and matches its sha256."""
    try:
        data = patch.path.read_bytes()
    except OSError as exc:
        raise SourceError(f"patch {patch.name} cannot be read: {exc.strerror}",
                          why=f"looked for it at {patch.path}",
                          fix="restore the file, or remove it from the component's patches") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != patch.sha256:
        raise SourceError(
            f"patch {patch.name} does not match its sha256",
            why=f"the manifest says {patch.sha256}, the file at {patch.path} has {actual}",
            fix="if the change to the patch was intended, put the new sha256 in the manifest and re-lock",
        )


# ------------------------------------------------------------------------------- applying changes


@dataclass(frozen=True, kw_only=True)
class _Failure:
    index: int  # of the change that did not apply
    sha: str  # the commit being picked or merged ("" for a patch)
    files: tuple[str, ...]  # conflicting files
    detail: str  # git's last lines


def to_changes(changes: Sequence[LockedChange], patch_paths: Mapping[str, Path]) -> list[Change]:
    out: list[Change] = []
    for c in changes:
        if isinstance(c, LockedPick):
            out.append(PickChange(sha=c.sha))
        elif isinstance(c, LockedPr):
            out.append(PrChange(number=c.number, head=c.head, mode=c.mode, commits=c.commits))
        else:
            out.append(PatchFile(name=c.file, path=patch_paths[c.file], sha256=c.sha256))
    return out


def prepare(cache: Mirrors, url: str, commit: str, *, changes: Sequence[Change] = (), prs: Sequence[PrHead] = (),
            patches: Sequence[PatchFile] = (), submodules: bool = True, allow: Sequence[Allowance] = ()
            ) -> PreparedTree:
    """``commit`` with each change applied in order, committed deterministically.

    A cherry-pick keeps its author and gets ``-x``; a PR in own-commits mode is the cherry-picks of
    exactly the commits listed (``pr_change`` chose them at lock time), in merge mode one merge of its
    head; a patch is committed by buildctl. The committer is buildctl at the base commit's date. Picks
    that end up empty are kept (and reported in ``empty``). ``prs``: PR heads whose own commits (target
    main) are looked up here, applied after ``changes`` and before ``patches``. Nothing is stored unless
    everything applied; when something does not apply, the SourceError names the change, what it
    collides with, the files, and the reorderings / ``apply: merge`` that buildctl tried and that work.
    ``allow``: blobs a mirror may lack (``missing``): a commit whose tree lacks only those is copied
    without them, and the export writes a placeholder in their place.
    """
    if not is_sha(commit, min_len=40):
        raise SourceError(f"prepare needs a full commit SHA, got {commit!r}", fix="lock the stack first")
    for p in prs:
        if not is_sha(p.head, min_len=40):
            raise SourceError(f"PR #{p.number}: head {p.head!r} is not a full SHA", fix="lock the stack first")
    all_changes: list[Change] = list(changes)
    for p in prs:
        locked, _ = pr_change(cache, url, commit, p.number, p.head)
        all_changes.append(PrChange(number=p.number, head=p.head, commits=locked.commits))
    all_changes += patches
    for ch in all_changes:
        if isinstance(ch, PatchFile):
            check_patch(ch)
        elif isinstance(ch, PickChange) and not is_sha(ch.sha, min_len=40):
            raise SourceError(f"commit to cherry-pick {ch.sha!r} is not a full SHA", fix="lock the stack first")
    key = prepare_key(commit, all_changes)
    needed = [commit, *(c.sha for c in all_changes if isinstance(c, PickChange)),
              *(h for c in all_changes if isinstance(c, PrChange) for h in (c.head, *c.commits))]
    with cache.locked(url) as mirror:
        cache.ensure(url, mirror, needed, pulls=True, what="locked commits", allow=allow)
        cache.keep(mirror, needed)
        epoch = int(cache.git.run(["show", "-s", "--format=%ct", commit, "--"], git_dir=mirror, what="read date").out)
        reused = True
        if not all_changes:
            tree = commit
        else:
            found = cache.git.run(["rev-parse", "--verify", "--quiet", f"refs/buildctl/prepared/{key}^{{commit}}"],
                                  git_dir=mirror, check=False, what="find prepared tree")
            if found.rc == 0:
                tree = found.out.strip()
            else:
                tree = _apply(cache, url, mirror, commit, all_changes, key=key, epoch=epoch)
                reused = False
        empty = _empty_picks(cache, mirror, commit, tree, all_changes)
    subs = tuple(cache.submodule_list(url, tree, prefix="", depth=0, allow=allow)) if submodules else ()
    return PreparedTree(url=url, commit=commit, tree=tree, key=key, epoch=epoch, changes=tuple(all_changes),
                        submodules=subs, empty=empty, allowed=tuple(allow), reused=reused)


def _units(changes: Sequence[Change]) -> list[str]:
    """One entry per commit that applying ``changes`` makes, in order (what it came from)."""
    units: list[str] = []
    for c in changes:
        if isinstance(c, PickChange):
            units.append(c.sha)
        elif isinstance(c, PrChange):
            units += list(c.commits) if c.mode == "own-commits" else [f"merge:{c.head}"]
        else:
            units.append(f"patch:{c.name}")
    return units


def _empty_picks(cache: Mirrors, mirror: Path, commit: str, tree: str, changes: Sequence[Change]) -> tuple[str, ...]:
    if tree == commit:
        return ()
    units = _units(changes)
    out = cache.git.run(["rev-list", "--first-parent", "--reverse", "--format=%T", f"{commit}..{tree}", "--"],
                        git_dir=mirror, what="walk the prepared commits").out.split("\n")
    trees = [line.strip() for line in out if line.strip() and not line.startswith("commit ")]
    before = cache.git.run(["rev-parse", f"{commit}^{{tree}}"], git_dir=mirror, what="read tree").out.strip()
    if len(trees) != len(units):  # not a tree this recipe made: nothing to say
        return ()
    empty = []
    for unit, t in zip(units, trees, strict=True):
        if t == before and is_sha(unit, min_len=40):
            empty.append(unit)
        before = t
    return tuple(empty)


@contextlib.contextmanager

def _scratch(cache: Mirrors, mirror: Path, commit: str) -> Iterator[Path]:
    """A scratch repository that borrows the mirror's objects, at ``commit``: a failed change leaves
    nothing in the mirror, and only a complete result is fetched into it."""
    cache.tmp_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="prepare-", dir=cache.tmp_dir))
    try:
        cache.git.run(["init", "--quiet", str(work)], what="prepare")
        (work / ".git" / "objects" / "info" / "alternates").write_text(f"{mirror / 'objects'}\n")
        cache.git.run(["checkout", "--quiet", "--detach", commit, "--"], cwd=work, what="check out the locked commit")
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _apply(cache: Mirrors, url: str, mirror: Path, commit: str, changes: Sequence[Change], *, key: str,
           epoch: int) -> str:
    with _scratch(cache, mirror, commit) as work:
        failure = _run_changes(cache, work, changes, epoch=epoch)
        if failure is not None:
            raise _diagnose(cache, url, mirror, commit, changes, failure, epoch=epoch)
        head = cache.git.run(["rev-parse", "HEAD"], cwd=work, what="prepare").out.strip()
        cache.git.run(["update-ref", "refs/heads/prepared", head], cwd=work, what="prepare")
        cache.git.run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", str(work),
                       f"+refs/heads/prepared:refs/buildctl/prepared/{key}"], git_dir=mirror,
                      what="store the prepared tree")
        return head


def _env_for(epoch: int) -> dict[str, str]:
    date = f"@{epoch} +0000"
    return {"GIT_COMMITTER_NAME": IDENTITY_NAME, "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
            "GIT_COMMITTER_DATE": date}


def _run_changes(cache: Mirrors, work: Path, changes: Sequence[Change], *, epoch: int) -> _Failure | None:
    """Apply ``changes`` in ``work``; the first failure, or None when all applied."""
    committer = _env_for(epoch)
    author = {"GIT_AUTHOR_NAME": IDENTITY_NAME, "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
              "GIT_AUTHOR_DATE": committer["GIT_COMMITTER_DATE"]}
    for index, ch in enumerate(changes):
        if isinstance(ch, PickChange):
            shas: Sequence[str] = [ch.sha]
        elif isinstance(ch, PrChange) and ch.mode == "own-commits":
            shas = ch.commits
        elif isinstance(ch, PrChange):
            r = cache.git.run(["merge", "--no-ff", "--no-edit", "--no-gpg-sign", "--no-rerere-autoupdate", "-m",
                               f"Merge PR #{ch.number} ({ch.head})", ch.head], cwd=work,
                              env={**committer, **author}, check=False, what=f"merge PR #{ch.number}")
            if r.rc != 0:
                return _failure(cache, work, index, ch.head, r)
            continue
        else:
            r = cache.git.run(["apply", "--index", "--whitespace=nowarn", "--", str(ch.path)], cwd=work, check=False,
                              what=f"patch {ch.name}")
            if r.rc != 0:
                return _Failure(index=index, sha="", files=tuple(conflict_files_from_apply(r.err)),
                                detail=last_lines(r.err))
            cache.git.run(["commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty", "--cleanup=verbatim",
                           "-m", f"Apply patch {ch.name}\n\nsha256: {ch.sha256}\n"],
                          cwd=work, env={**committer, **author}, what=f"commit patch {ch.name}")
            continue
        for sha in shas:
            r = cache.git.run(["cherry-pick", "-x", "--allow-empty", "--keep-redundant-commits", "--no-gpg-sign",
                               "--cleanup=verbatim", "--no-rerere-autoupdate", sha], cwd=work, env=committer,
                              check=False, what=ch.label())
            if r.rc != 0:
                return _failure(cache, work, index, sha, r)
    return None


def _failure(cache: Mirrors, work: Path, index: int, sha: str, result: Result) -> _Failure:
    files = cache.git.run(["diff", "--name-only", "--diff-filter=U"], cwd=work, check=False,
                          what="list conflicts").out.split()
    return _Failure(index=index, sha=sha, files=tuple(files), detail=last_lines(result.err))


def _touches(cache: Mirrors, mirror: Path, base: str, change: Change) -> set[str]:
    """The files a change modifies."""
    if isinstance(change, PatchFile):
        r = cache.git.run(["apply", "--numstat", "--", str(change.path)], check=False, what="read patch")
        return {line.split("\t", 2)[2] for line in r.out.split("\n") if line.count("\t") >= 2}
    if isinstance(change, PrChange) and change.mode == "merge":
        mb = cache.git.run(["merge-base", base, change.head], git_dir=mirror, check=False, what="merge-base").out.strip()
        shas = [f"{mb}..{change.head}"] if mb else []
        r = cache.git.run(["diff", "--name-only", *(shas or [change.head]), "--"], git_dir=mirror, check=False,
                          what="files")
        return set(r.out.split())
    shas = [change.sha] if isinstance(change, PickChange) else list(change.commits)
    out: set[str] = set()
    for sha in shas:
        r = cache.git.run(["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", sha, "--"], git_dir=mirror,
                          check=False, what="files")
        out |= set(r.out.split())
    return out


def _tries(cache: Mirrors, mirror: Path, commit: str, changes: Sequence[Change], *, epoch: int) -> bool:
    with _scratch(cache, mirror, commit) as work:
        return _run_changes(cache, work, changes, epoch=epoch) is None


def _diagnose(cache: Mirrors, url: str, mirror: Path, commit: str, changes: Sequence[Change], failure: _Failure, *,
              epoch: int) -> SourceError:
    """The error for a change that does not apply: what, against what, which files, and the fixes that
    buildctl tried and that work (another order; apply: merge for a PR)."""
    ch = changes[failure.index]
    files = set(failure.files)
    earlier = [(j, changes[j]) for j in range(failure.index) if files & _touches(cache, mirror, commit, changes[j])]
    against = (", ".join(c.label() for _, c in earlier) + " (applied before it)") if earlier else \
        f"the base {commit[:12]}"
    picked = ""
    if (failure.sha and isinstance(ch, PrChange) and ch.mode == "own-commits") or isinstance(ch, PickChange):
        subject = cache.git.run(["show", "-s", "--format=%s", failure.sha, "--"], git_dir=mirror, check=False,
                                what="describe").out.strip()
        picked = f"its commit {failure.sha[:12]} \"{subject}\" " if isinstance(ch, PrChange) else f"\"{subject}\" "
    works: list[str] = []
    tried: list[str] = []
    for j, other in earlier:
        order = [*changes[:j], ch, *changes[j:failure.index], *changes[failure.index + 1:]]
        tried.append(f"{ch.label()} before {other.label()}")
        if _tries(cache, mirror, commit, order, epoch=epoch):
            works.append(f"apply {ch.label()} before {other.label()} (move it up in the component's changes)")
    for k in range(failure.index + 1, len(changes)):
        later = changes[k]
        if not files & _touches(cache, mirror, commit, later):
            continue
        order = [*changes[:failure.index], *changes[failure.index + 1:k + 1], ch, *changes[k + 1:]]
        tried.append(f"{ch.label()} after {later.label()}")
        if _tries(cache, mirror, commit, order, epoch=epoch):
            works.append(f"apply {ch.label()} after {later.label()} (move it down in the component's changes)")
    if isinstance(ch, PrChange) and ch.mode == "own-commits":
        merged = PrChange(number=ch.number, head=ch.head, mode="merge")
        tried.append(f"apply: merge for {ch.label()}")
        if _tries(cache, mirror, commit, [*changes[:failure.index], merged, *changes[failure.index + 1:]], epoch=epoch):
            works.append(f"set apply: merge for {ch.label()} (it then brings what its branch merged, not only "
                         "its own commits: `buildctl pins show` lists them once locked)")
    what = f"{ch.label()} does not apply to {commit[:12]} of {url}"
    why = (f"{picked or 'it '}collides with {against} in: {', '.join(sorted(files))}" if files
           else f"{picked or 'it '}fails: {failure.detail}")
    if works:
        fix = "this works (buildctl tried it): " + "; or ".join(works)
    else:
        fix = ((f"buildctl tried {', '.join(tried)}: none applies; " if tried else "")
               + "the conflict needs resolving by hand: rebase the change onto the base with the changes "
                 "before it and apply the result as a patch file")
    return SourceError(what, why=why, fix=fix)


def prepare_component(cache: Mirrors, component: Component, locked: LockedComponent, *, base_dir: Path | None,
                      check_tree: bool = True) -> PreparedTree:
    """``prepare`` for a manifest component at its lock; checks the result against the lock's ``tree``."""
    want = [change_signature(mc) for mc in component.steps]
    have = [locked_signature(lc) for lc in locked.changes]
    if want != have:
        missing = next((component.steps[i].label() for i, w in enumerate(want) if w not in have), "")
        raise LockError(f"component {component.name}: "
                        + (f"{missing} is not in the lock" if missing else "its changes differ from the lock's"),
                        why=f"manifest: {', '.join(c.label() for c in component.steps) or 'none'}; lock: "
                            f"{', '.join(c.label() for c in locked.changes) or 'none'}",
                        fix="re-lock: buildctl lock STACK (the manifest changed since)")
    for mc, lc in zip(component.steps, locked.changes, strict=True):
        if isinstance(lc, LockedPatch) and mc.sha256 != lc.sha256:
            raise LockError(f"component {component.name}: patch {lc.file} changed since the lock",
                            fix="re-lock: buildctl lock STACK")
        if isinstance(lc, LockedPr) and mc.apply != lc.mode:
            raise LockError(f"component {component.name}: PR #{lc.number} is apply: {mc.apply} in the manifest, "
                            f"{lc.mode} in the lock", fix="re-lock: buildctl lock STACK")
    paths = {p.file: _patch_path(base_dir, p.file) for p in component.patches}
    prepared = prepare(cache, normalize_repo(component.repo, base_dir), locked.commit,
                       changes=to_changes(locked.changes, paths), submodules=component.submodules,
                       allow=allowances(component, base_dir))
    if check_tree and locked.tree and prepared.tree != locked.tree:
        raise SourceError(
            f"component {component.name}: prepared tree {prepared.tree} differs from the lock's {locked.tree}",
            why="applying the same changes gave another commit here: a different git merge "
                "machine (git < 2.34 lacks merge-ort as default) or a hand-edited lock",
            fix="use git >= 2.34, or re-lock on this machine if the difference is understood",
        )
    return prepared


def _patch_path(base_dir: Path | None, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() or base_dir is None else base_dir / p
