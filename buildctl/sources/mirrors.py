"""The cache's mirrors: one bare repository per URL, locked while written, refreshed from its remote only
when a ref moved or a commit is missing, and the commits a lock names kept; submodules listed through them.

A remote that cannot hand out what is wanted because it lacks objects (a mirror without some large blobs)
is named with the files it lacks, instead of git's "possible repository corruption".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from buildctl.errors import SourceError
from buildctl.sources.gitrun import (
    Git,
    Result,
    classify_failure,
    last_lines,
    parse_gitmodules,
    parse_ls_remote,
    parse_ls_tree_gitlinks,
)
from buildctl.sources.missing import Allowance, build_reads, declaration, split
from buildctl.sources.urls import mirror_name, resolve_submodule_url, url_kind

# Branches, tags and GitHub's PR heads. Other refs (refs/pull/N/merge, refs/changes, notes) are not mirrored.
_REFSPECS_ALL = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", "+refs/pull/*/head:refs/pull/*/head")
_REFSPECS_NO_PULLS = _REFSPECS_ALL[:2]
_MAX_SUBMODULE_DEPTH = 8


@dataclass(frozen=True, kw_only=True)
class Submodule:
    path: str  # relative to the top of the component, nested ones joined with '/'
    url: str  # resolved (relative .gitmodules URLs made absolute), before mirror mapping
    commit: str


class Mirrors:
    """Bare mirrors under ``cache/mirrors``; scratch space under ``cache/tmp`` (same file system).

    A remote is refreshed at most once per object (one consistent view per `buildctl lock` run).
    """

    def __init__(self, git: Git, cache: Path, *, fetch_timeout: float) -> None:
        self.git = git
        self.root = cache
        self.fetch_timeout = fetch_timeout
        self._fresh: set[tuple[str, bool]] = set()
        self._remote_refs: dict[str, dict[str, str]] = {}  # url -> refs as ls-remote listed them

    @property
    def dir(self) -> Path:
        return self.root / "mirrors"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    def path(self, url: str) -> Path:
        """The mirror folder of ``url`` (a normalised repository URL)."""
        return self.dir / f"{mirror_name(url)}.git"

    def remote_refs(self, url: str) -> dict[str, str]:
        """The refs the last ls-remote of ``url`` listed (empty before one ran)."""
        return self._remote_refs.get(url, {})

    @contextlib.contextmanager
    def locked(self, url: str) -> Iterator[Path]:
        """Hold the mirror's lock (other buildctl processes share the cache); yield its folder."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = mirror_name(url)
        with open(self.dir / f"{name}.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield self.dir / f"{name}.git"
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def init(self, mirror: Path, url: str) -> None:
        if (mirror / "HEAD").is_file():
            return
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="mirror-", dir=self.tmp_dir))
        try:
            self.git.run(["init", "--quiet", "--bare", str(tmp)], what="create mirror")
            # For people reading the cache; fetches always name the URL explicitly.
            self.git.run(["config", "--", "buildctl.url", url], git_dir=tmp, what="create mirror")
            shutil.rmtree(mirror, ignore_errors=True)
            os.replace(tmp, mirror)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def local_refs(self, mirror: Path, *, pulls: bool) -> dict[str, str]:
        r = self.git.run(["for-each-ref", "--format=%(objectname)\t%(refname)",
                          "refs/heads", "refs/tags", *(["refs/pull"] if pulls else [])],
                         git_dir=mirror, what="list mirror refs")
        return parse_ls_remote(r.out, pulls=pulls)

    def refresh(self, url: str, mirror: Path, *, pulls: bool, wanted: Sequence[str] = (),
                allow: Sequence[Allowance] = ()) -> None:
        """Bring the mirror up to date with the remote (called with the mirror locked). ``wanted``: the
        commits the caller needs, named when the remote turns out to lack objects they hold."""
        if (url, pulls) in self._fresh or (url, True) in self._fresh:
            return
        self.init(mirror, url)
        # ls-remote first: small, bounded by network_timeout, so an unreachable host fails in seconds;
        # and when nothing moved (the common case for a re-lock) there is nothing to fetch.
        remote = parse_ls_remote(
            self.git.run(["ls-remote", "--refs", "--", url], network=True, url=url, what="ls-remote").out, pulls=True)
        self._remote_refs[url] = remote
        # A mirror that lacks objects some PR heads hold (large blobs left out) cannot be fetched whole:
        # such a remote is marked in the cache mirror, and its PR heads are fetched one by one when asked.
        narrow = pulls and self.git.run(["config", "--get", "buildctl.pullsOnDemand"], git_dir=mirror,
                                        check=False, what="read mirror config").out.strip() == "true"
        wide = pulls and not narrow
        if {k: v for k, v in remote.items() if wide or not k.startswith("refs/pull/")} != self.local_refs(
                mirror, pulls=wide):
            r = self.fetch_refs(url, mirror, _REFSPECS_ALL if wide else _REFSPECS_NO_PULLS, prune=True)
            if r.rc != 0 and wide and self.lacks_objects(r) and self.local_remote(url) is not None:
                r = self.fetch_refs(url, mirror, _REFSPECS_NO_PULLS, prune=True)
                if r.rc == 0:
                    self.git.run(["config", "buildctl.pullsOnDemand", "true"], git_dir=mirror, what="mark mirror")
            if r.rc != 0:
                self.explain_missing_objects(url, r, wanted, allow)  # raises when the wanted commits lack objects
                if wanted and self.lacks_objects(r) and self.local_remote(url) is not None:
                    return  # other refs of this mirror are incomplete, not the wanted commits: fetched by SHA
                self.git.raise_network(r, url=url, what="fetch")
        self._fresh.add((url, pulls))

    def fetch_refs(self, url: str, mirror: Path, refspecs: Sequence[str], *, prune: bool = False,
                   depth: int | None = None, what: str = "fetch") -> Result:
        r = self.git.run(["--git-dir", str(mirror), "fetch", "--quiet", *(["--prune"] if prune else []),
                          *([f"--depth={depth}"] if depth else []), "--no-tags", "--no-write-fetch-head", "--", url,
                          *refspecs], network=True, url=url, timeout=self.fetch_timeout, check=False, what=what)
        if r.rc != 0:
            # a fetch that died mid-pack (upload-pack of a remote that lacks objects) leaves its partial pack
            # behind; the mirror is locked, so no other fetch into it is writing one now
            for partial in (mirror / "objects" / "pack").glob("tmp_pack_*"):
                partial.unlink(missing_ok=True)
        return r

    @staticmethod
    def lacks_objects(result: Result) -> bool:
        text = result.err.lower()
        return any(m in text for m in ("corruption", "pack-objects died", "missing blob", "missing tree",
                                       "unable to read", "bad object", "did not send all necessary objects"))

    def fetch_pr_on_demand(self, url: str, mirror: Path, number: int) -> None:
        """For a remote whose PR heads are fetched one by one: fetch refs/pull/N/head now."""
        ref = f"refs/pull/{number}/head"
        sha = self._remote_refs.get(url, {}).get(ref)
        if sha is None:
            return
        r = self.fetch_refs(url, mirror, [f"+{ref}:{ref}"])
        if r.rc != 0:
            self.explain_missing_objects(url, r, [sha])
            self.git.raise_network(r, url=url, what=f"fetch PR #{number}")

    def local_remote(self, url: str) -> Path | None:
        """Where a local remote (a path or file:// URL, after mirror rules) is on this machine."""
        effective = self.git.effective_url(url)
        if effective.startswith("file://"):
            effective = effective[len("file://"):]
        elif url_kind(effective) != "path":
            return None
        p = Path(effective)
        return p if p.exists() else None

    def explain_missing_objects(self, url: str, result: Result, wanted: Sequence[str],
                                allow: Sequence[Allowance] = ()) -> list[tuple[str, str]]:
        """A fetch that died because the remote lacks objects (a mirror without its large blobs): raise a
        SourceError that names them, with their paths in the wanted commits, instead of git's error;
        unless every one is declared in ``allow``: then the declared (blob, path) pairs (empty when the
        wanted trees lack nothing, or nothing could be listed)."""
        if not self.lacks_objects(result):
            return []
        remote = self.local_remote(url)
        if remote is None:
            return []
        # With wanted commits, only their own trees matter (what an export writes): history that lacks
        # objects is left to a shallow fetch. Without, the remote's whole history is what failed.
        tips = ["--no-walk", *wanted] if wanted else ["--all"]
        listing = self.git.run(["--git-dir", str(remote), "rev-list", "--objects", "--missing=print", *tips, "--"],
                               check=False, what="list the remote's objects")
        missing = [line[1:].strip() for line in listing.out.split("\n") if line.startswith("?")]
        if not missing:
            return []
        paths: dict[str, str] = {}
        for tip in wanted:
            tree = self.git.run(["--git-dir", str(remote), "ls-tree", "-r", "-z", "--full-tree", tip, "--"],
                                check=False, what="list tree").out
            for item in filter(None, tree.split("\0")):
                meta, _, path = item.partition("\t")
                sha = meta.split(" ")[-1]
                if sha in missing:
                    paths.setdefault(sha, path)
        besides = ""
        if wanted and all(m in paths for m in missing):
            declared, undeclared = split(url, [(m, paths[m]) for m in missing], allow)
            if not undeclared:
                return declared
            if declared:  # name only what is not declared
                missing = [s for s, _ in undeclared]
                besides = f" (besides {len(declared)} declared in missing_objects)"
        shown = [f"{paths[m]} (blob {m[:12]})" if m in paths else m for m in missing[:10]]
        at = f" at {', '.join(w[:12] for w in wanted)}" if wanted else ""
        declare = ""
        if wanted and missing[0] in paths and not build_reads(paths[missing[0]]):
            declare = ("; or, since no build reads it, declare it in the component's missing_objects: "
                       + declaration(url, missing[0], paths[missing[0]]))
        raise SourceError(
            f"{self.git.display(url)} lacks {len(missing)} object(s) that {'the tree of the commit' if wanted else 'its history'}"
            f"{at} holds: {', '.join(shown)}{' ...' if len(missing) > 10 else ''}{besides}",
            why=f"the repository at {remote} is incomplete, so git cannot hand out the commit "
                f"({last_lines(result.err, 2)})",
            fix="complete that mirror (fetch the missing objects from the original repository into it), or point "
                "git_mirrors at a complete one; the lock does not need them (it records submodules by their gitlinks)"
                + declare,
        )

    def missing(self, mirror: Path, shas: Sequence[str]) -> list[str]:
        if not shas:
            return []
        if not (mirror / "HEAD").is_file():
            return list(shas)
        r = self.git.run(["cat-file", "--batch-check=%(objectname) %(objecttype)"], git_dir=mirror,
                         input_bytes="".join(f"{s}^{{commit}}\n" for s in shas).encode(), what="look up commits")
        lines = r.out.split("\n")[:len(shas)]
        return [s for s, line in zip(shas, lines, strict=True) if not line.endswith(" commit")]

    def ensure(self, url: str, mirror: Path, shas: Sequence[str], *, pulls: bool, what: str,
               allow: Sequence[Allowance] = ()) -> None:
        """Make sure the mirror has these commits: refresh, then ask for each missing one by SHA. A commit
        whose tree lacks only blobs declared in ``allow`` is copied from the local remote without them."""
        missing = self.missing(mirror, shas)
        if not missing:
            return
        self.refresh(url, mirror, pulls=pulls, wanted=missing, allow=allow)
        for sha in self.missing(mirror, missing):
            # Servers that allow it (GitHub does) hand out a commit by SHA even when no ref points at it.
            r = self.fetch_refs(url, mirror, [f"+{sha}:refs/buildctl/keep/{sha}"], what="fetch by SHA")
            if r.rc != 0 and self.lacks_objects(r) and self.local_remote(url) is not None:
                # raises when the commit's own tree lacks objects, unless only declared ones
                if self.explain_missing_objects(url, r, [sha], allow):
                    self.copy_without_missing(url, mirror, sha)
                    continue
                # only its history lacks objects (a mirror without some large blobs): the commit alone will do
                # for what is read from it here (an export of its tree); the mirror becomes shallow there.
                r = self.fetch_refs(url, mirror, [f"+{sha}:refs/buildctl/keep/{sha}"], depth=1, what="fetch by SHA")
            if r.rc != 0 and classify_failure(r.err) == "unreachable":
                self.git.raise_network(r, url=url, what="fetch by SHA")
        still = self.missing(mirror, missing)
        if still:
            raise SourceError(
                f"commit {still[0]} ({what}) is not in {self.git.display(url)}",
                why="no branch, tag or PR head of the remote contains it, and the remote does not hand it out "
                    "by SHA (force-pushed or deleted?)",
                fix="check the SHA; re-lock if the lock is old; a mirror must carry the commit too",
            )

    def copy_without_missing(self, url: str, mirror: Path, sha: str) -> None:
        """Copy commit ``sha`` and the objects of its tree that the local remote has into the mirror, as a
        shallow commit (git's own fetch cannot: upload-pack dies on the missing blob). Only called once
        every missing object of that tree was found declared."""
        remote = self.local_remote(url)
        assert remote is not None
        objects = self.git.run(["--git-dir", str(remote), "rev-list", "--objects", "--no-walk", "--missing=allow-any",
                                sha, "--"], what="list the commit's objects").out
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        # pack-objects writes the pack and its index under the base name, into the mirror's own pack folder
        self.git.run(["--git-dir", str(remote), "pack-objects", "-q", str(mirror / "objects" / "pack" / "pack")],
                     input_bytes=objects.encode(), what="copy the commit's objects")
        shallow = mirror / "shallow"
        have = shallow.read_text().split() if shallow.is_file() else []
        if sha not in have:
            shallow.write_text("".join(f"{s}\n" for s in [*have, sha]))
        self.keep(mirror, [sha])

    def keep(self, mirror: Path, shas: Sequence[str]) -> None:
        """Pin commits a lock names, so that pruning refs and gc cannot drop them from the cache."""
        stdin = "".join(f"update refs/buildctl/keep/{s} {s}\n" for s in dict.fromkeys(shas))
        if stdin:
            self.git.run(["update-ref", "--stdin"], git_dir=mirror, input_bytes=stdin.encode(), what="keep commits")

    # -- submodules

    def submodule_list(self, url: str, commit: str, *, prefix: str, depth: int,
                       allow: Sequence[Allowance] = ()) -> list[Submodule]:
        """The submodules at ``commit`` (nested ones joined with '/'), each commit fetched into its mirror."""
        if depth > _MAX_SUBMODULE_DEPTH:
            raise SourceError(f"submodules nest deeper than {_MAX_SUBMODULE_DEPTH} levels under {url}",
                              why="a submodule that contains itself?")
        mirror = self.path(url)
        links = parse_ls_tree_gitlinks(
            self.git.run(["ls-tree", "-r", "-z", "--full-tree", commit], git_dir=mirror, what="list tree").out)
        if not links:
            return []
        gm = self.git.run(["config", "-z", "--blob", f"{commit}:.gitmodules", "--list"], git_dir=mirror,
                          check=False, what="read .gitmodules")
        urls = parse_gitmodules(gm.out) if gm.rc == 0 else {}
        out: list[Submodule] = []
        for path, sha in sorted(links.items()):
            if path not in urls:
                raise SourceError(f"submodule {prefix}{path} of {url} at {commit[:12]} has no URL",
                                  why=".gitmodules has no entry with that path",
                                  fix="the commit is broken for recursive checkouts; pick another commit")
            sub_url = resolve_submodule_url(url, urls[path])
            with self.locked(sub_url) as sub_mirror:
                self.ensure(sub_url, sub_mirror, [sha], pulls=False, what=f"submodule {prefix}{path}", allow=allow)
                self.keep(sub_mirror, [sha])
            out.append(Submodule(path=f"{prefix}{path}", url=sub_url, commit=sha))
            out += self.submodule_list(sub_url, sha, prefix=f"{prefix}{path}/", depth=depth + 1, allow=allow)
        return out
