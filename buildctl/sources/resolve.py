"""Questions `buildctl lock` asks a repository: a short SHA's full commit, a branch or PR head, a PR's own
commits (and what a merge of it drags in), the submodule gitlinks at a commit."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from buildctl.errors import SourceError
from buildctl.lock.lockfile import DraggedCommit, LockedPr, MergedUpstream, PrMode
from buildctl.sources.gitrun import last_lines, parse_ls_tree_gitlinks, parse_nul_records
from buildctl.sources.mirrors import Mirrors
from buildctl.sources.urls import is_sha


@dataclass(frozen=True, kw_only=True)
class CommitInfo:
    sha: str
    date: str  # committer date, ISO 8601
    subject: str

    def line(self) -> str:
        return f"{self.sha}  {self.date}  {self.subject}"


def shortest_unique_prefixes(shas: Sequence[str], min_len: int) -> dict[str, str]:
    """For each SHA the shortest prefix (>= min_len) that no other SHA in ``shas`` shares."""
    out: dict[str, str] = {}
    for s in shas:
        n = min_len
        while n < 40 and any(o != s and o.startswith(s[:n]) for o in shas):
            n += 1
        out[s] = s[:n]
    return out


def resolve_commit(cache: Mirrors, url: str, commit: str, *, branch: str | None = None) -> str:
    """Full SHA of ``commit`` (7 to 40 hex digits); with ``branch``, check it is on that branch."""
    prefix = commit.strip().lower()
    if not is_sha(prefix):
        raise SourceError(f"{commit!r} is not a commit SHA (7 to 40 hex digits) for {url}",
                          fix="give the full 40-digit SHA, or at least its first 7 digits")
    with cache.locked(url) as mirror:
        cache.refresh(url, mirror, pulls=True)
        if len(prefix) == 40:
            cache.ensure(url, mirror, [prefix], pulls=True, what="as written in the manifest")
            full = prefix
        else:
            candidates = _commits_with_prefix(cache, mirror, prefix)
            if not candidates:
                raise SourceError(
                    f"no commit {prefix} in {cache.git.display(url)}",
                    why="no branch, tag or PR head of the remote contains a commit with that prefix",
                    fix="check the SHA (and the branch it was on); give the full 40-digit SHA if the "
                        "commit is on no branch: the remote may still hand it out by full SHA",
                )
            if len(candidates) > 1:
                infos = _commit_infos(cache, mirror, candidates)
                unique = shortest_unique_prefixes([i.sha for i in infos], len(prefix) + 1)
                raise SourceError(
                    f"short SHA {prefix} is ambiguous in {url}: {len(infos)} commits start with it:\n"
                    + "\n".join(f"    {i.line()}" for i in infos),
                    why="a short SHA must name exactly one commit",
                    fix="write more digits in the manifest: "
                        + ", ".join(unique[i.sha] for i in infos),
                )
            full = candidates[0]
        if branch is not None:
            head = _branch_sha(cache, mirror, url, branch)
            contained = cache.git.run(["merge-base", "--is-ancestor", full, head], git_dir=mirror, check=False,
                                      what="check branch")
            if contained.rc == 1:
                raise SourceError(
                    f"commit {full} is not on branch {branch} of {url}",
                    why=f"{branch} is at {head} and does not contain it",
                    fix="correct the branch (or the commit) in the manifest; leave branch out if the "
                        "commit is on no branch",
                )
            if contained.rc != 0:
                raise SourceError(f"cannot check whether {full} is on {branch}", why=last_lines(contained.err))
        cache.keep(mirror, [full])
        return full


def _commits_with_prefix(cache: Mirrors, mirror: Path, prefix: str) -> list[str]:
    r = cache.git.run(["rev-parse", f"--disambiguate={prefix}"], git_dir=mirror, check=False,
                      what="expand short SHA")
    objects = [s for s in r.out.split() if is_sha(s, min_len=40)]
    if not objects:
        return []
    typed = cache.git.run(["cat-file", "--batch-check=%(objectname) %(objecttype)"], git_dir=mirror,
                          input_bytes="".join(f"{s}\n" for s in objects).encode(), what="expand short SHA")
    return sorted(line.split()[0] for line in typed.out.split("\n") if line.endswith(" commit"))


def _commit_infos(cache: Mirrors, mirror: Path, shas: Sequence[str]) -> list[CommitInfo]:
    # -z and NUL after every field: a subject may hold any character but NUL (CR, U+2028, ...)
    r = cache.git.run(["show", "-s", "-z", "--no-walk=unsorted", "--format=%H%x00%cI%x00%s", *shas],
                      git_dir=mirror, what="describe commits")
    try:
        records = parse_nul_records(r.out, 3)
    except ValueError as exc:
        raise SourceError(f"cannot read git's description of {len(shas)} commit(s)", why=str(exc)) from None
    infos = [CommitInfo(sha=h, date=d, subject=s) for h, d, s in records]
    return sorted(infos, key=lambda i: (i.date, i.sha))


def _branch_sha(cache: Mirrors, mirror: Path, url: str, branch: str) -> str:
    ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    r = cache.git.run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], git_dir=mirror, check=False,
                      what="find branch")
    if r.rc != 0:
        names = [b.removeprefix("refs/heads/") for b in cache.local_refs(mirror, pulls=False)
                 if b.startswith("refs/heads/")]
        close = difflib.get_close_matches(branch, names, n=3)
        raise SourceError(
            f"branch {branch} does not exist in {cache.git.display(url)}",
            why=f"it has {len(names)} branch(es)" + (f"; close: {', '.join(close)}" if close else ""),
            fix="correct the branch name in the manifest",
        )
    return r.out.strip()


def branch_head(cache: Mirrors, url: str, branch: str) -> str:
    """The commit ``branch`` points at now."""
    with cache.locked(url) as mirror:
        cache.refresh(url, mirror, pulls=True)
        return _branch_sha(cache, mirror, url, branch)


def pr_head(cache: Mirrors, url: str, number: int) -> str:
    """The head commit of PR ``number`` now (``refs/pull/N/head``, as GitHub publishes it)."""
    with cache.locked(url) as mirror:
        cache.refresh(url, mirror, pulls=True)
        r = cache.git.run(["rev-parse", "--verify", "--quiet", f"refs/pull/{number}/head^{{commit}}"],
                          git_dir=mirror, check=False, what="find PR head")
        if r.rc != 0 and f"refs/pull/{number}/head" in cache.remote_refs(url):
            cache.fetch_pr_on_demand(url, mirror, number)
            r = cache.git.run(["rev-parse", "--verify", "--quiet", f"refs/pull/{number}/head^{{commit}}"],
                              git_dir=mirror, check=False, what="find PR head")
        if r.rc != 0:
            count = sum(1 for ref in cache.local_refs(mirror, pulls=True) if ref.startswith("refs/pull/"))
            raise SourceError(
                f"PR #{number} not found in {cache.git.display(url)}",
                why=f"the remote has no refs/pull/{number}/head ({count} PR heads in all)"
                    + ("; it publishes no PR refs at all: a mirror made without `--mirror`?" if not count else ""),
                fix="check the PR number; a mirror must carry refs/pull/*/head (`git clone --mirror` does)",
            )
        sha = r.out.strip()
        cache.keep(mirror, [sha])
        return sha


def submodules(cache: Mirrors, url: str, commit: str) -> dict[str, str]:
    """{path: commit} of every submodule at ``commit``, nested ones included ("a/b")."""
    with cache.locked(url) as mirror:
        cache.ensure(url, mirror, [commit], pulls=True, what="superproject")
    return {s.path: s.commit for s in cache.submodule_list(url, commit, prefix="", depth=0)}


def _is_ancestor(cache: Mirrors, mirror: Path, ancestor: str, descendant: str) -> bool:
    r = cache.git.run(["merge-base", "--is-ancestor", ancestor, descendant], git_dir=mirror, check=False, what="ancestry")
    if r.rc not in (0, 1):
        raise SourceError(f"cannot tell whether {ancestor[:12]} is an ancestor of {descendant[:12]}", why=last_lines(r.err))
    return r.rc == 0


def _own_commits(cache: Mirrors, mirror: Path, number: int, head: str, exclude: str, target: str
                 ) -> tuple[list[str], list[str]]:
    """(own non-merge commits oldest first, merges of the target skipped): reachable from ``head``, not
    from ``exclude``. A merge of anything but the target cannot be replayed as picks: SourceError."""
    listing = cache.git.run(["rev-list", "--reverse", "--topo-order", "--parents", head, f"^{exclude}", "--"],
                            git_dir=mirror, what=f"list PR #{number} commits").out
    own: list[str] = []
    skipped: list[str] = []
    for line in filter(None, listing.split("\n")):
        sha, *parents = line.split()
        if len(parents) <= 1:
            own.append(sha)
        elif any(_is_ancestor(cache, mirror, p, exclude) for p in parents):
            skipped.append(sha)
        else:
            subject = cache.git.run(["show", "-s", "--format=%s", sha, "--"], git_dir=mirror, what="describe").out
            raise SourceError(
                f"PR #{number} holds a merge of a branch other than its target {target}: {sha[:12]} "
                f"({subject.strip()})",
                why="its own commits cannot be replayed one by one across that merge",
                fix=f"set apply: merge for PR #{number} (merges its head), or set target: to the branch it merged")
    return own, skipped


def pr_change(cache: Mirrors, url: str, base: str, number: int, head: str, *, target: str = "main",
              mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
    """Which commits PR ``number`` (at ``head``) brings: its own commits (reachable from its head and not
    from ``target``, merges of the target skipped; for a PR already merged by a merge commit M, M^1..M^2),
    and, with mode merge, the commits the merge drags in that are neither the base's nor the PR's."""
    with cache.locked(url) as mirror:
        cache.refresh(url, mirror, pulls=True)
        cache.ensure(url, mirror, [base, head], pulls=True, what=f"PR #{number}")
        tgt = _branch_sha(cache, mirror, url, target)
        own, skipped = _own_commits(cache, mirror, number, head, tgt, target)
        merged: MergedUpstream | None = None
        if not own and _is_ancestor(cache, mirror, head, tgt):
            merged = _merged_upstream(cache, mirror, number, head, tgt)
            if merged.how == "merge":
                m = merged.commit
                own, skipped = _own_commits(cache, mirror, number, f"{m}^2", f"{m}^1", target)
        dragged: list[DraggedCommit] = []
        if mode == "merge":
            mine = set(own)
            brought = cache.git.run(["rev-list", "--reverse", "--topo-order", "--no-merges",
                                     "--format=%H%x00%s", head, f"^{base}", "--"], git_dir=mirror,
                                    what=f"list what PR #{number} brings").out
            for line in brought.split("\n"):
                if "\0" in line:
                    sha, subject = line.split("\0", 1)
                    if sha not in mine:
                        dragged.append(DraggedCommit(sha=sha, subject=subject, by=f"PR #{number}"))
        cache.keep(mirror, [head, *own])
    return (LockedPr(number=number, head=head, mode=mode, target=target, commits=tuple(own),
                     skipped_merges=tuple(skipped), merged_upstream=merged), tuple(dragged))


def _merged_upstream(cache: Mirrors, mirror: Path, number: int, head: str, tgt: str) -> MergedUpstream:
    """How a PR whose head the target contains got there: a true merge commit M (oldest first-parent
    commit of the target that contains the head, with the head on its second side), or else a
    fast-forward/rebase that kept the SHAs."""
    chain = cache.git.run(["rev-list", "--first-parent", "--reverse", tgt, "--"], git_dir=mirror,
                          what="target history").out.split()
    if head in chain:
        return MergedUpstream(how="squash-or-rebase")
    lo, hi = 0, len(chain) - 1
    while lo < hi:  # ancestry of a fixed commit is monotone along a first-parent chain
        mid = (lo + hi) // 2
        if _is_ancestor(cache, mirror, head, chain[mid]):
            hi = mid
        else:
            lo = mid + 1
    m = chain[lo]
    parents = cache.git.run(["rev-list", "--parents", "-n", "1", m, "--"], git_dir=mirror,
                            what="parents").out.split()[1:]
    if (len(parents) >= 2 and _is_ancestor(cache, mirror, head, parents[1])
            and not _is_ancestor(cache, mirror, head, parents[0])):
        return MergedUpstream(how="merge", commit=m)
    return MergedUpstream(how="squash-or-rebase")


def gitlinks(cache: Mirrors, url: str, commit: str) -> dict[str, str]:
    """{path: SHA} of the submodule gitlinks in ``commit``'s tree, from the superproject alone (nothing
    of the submodules is fetched: a submodule mirror that lacks objects does not stop a lock)."""
    with cache.locked(url) as mirror:
        cache.ensure(url, mirror, [commit], pulls=True, what="superproject")
        return parse_ls_tree_gitlinks(
            cache.git.run(["ls-tree", "-r", "-z", "--full-tree", commit, "--"], git_dir=mirror, what="list tree").out)


def first_parent(cache: Mirrors, url: str, old: str, new: str) -> list[CommitInfo]:
    """The first-parent history from ``old`` (excluded) to ``new`` (included), oldest first (`buildctl bisect`).
    ``old`` must be an ancestor of ``new``."""
    for sha in (old, new):
        if not is_sha(sha, min_len=40):
            raise SourceError(f"{sha!r} is not a full commit SHA")
    with cache.locked(url) as mirror:
        cache.ensure(url, mirror, [old, new], pulls=True, what="to bisect between them")
        contained = cache.git.run(["merge-base", "--is-ancestor", old, new], git_dir=mirror, check=False,
                                  what="check ancestry")
        if contained.rc == 1:
            raise SourceError(f"{old[:12]} is not an ancestor of {new[:12]} in {cache.git.display(url)}",
                              why="the two commits are on diverged histories: there is no range to bisect",
                              fix="give a good and a bad lock whose commits are on one branch")
        if contained.rc != 0:
            raise SourceError(f"cannot check whether {old[:12]} is an ancestor of {new[:12]}",
                              why=last_lines(contained.err))
        r = cache.git.run(["rev-list", "--first-parent", "--reverse", f"{old}..{new}", "--"], git_dir=mirror,
                          what="list first-parent history")
        shas = [s for s in r.out.split() if is_sha(s, min_len=40)]
        infos = {i.sha: i for i in _commit_infos(cache, mirror, shas)} if shas else {}
        return [infos[s] for s in shas]
