"""Git sources as one object: mirrors in the cache, answers for the lock, prepared and exported trees.

``Sources`` is what callers hold (the lock's ``GitResolver``, the build's source preparation); the work is
done by the rooms beside it: ``gitrun`` (the one place that runs git), ``urls`` (repository locations,
mirror rules), ``mirrors`` (the cache's mirrors, fetching, missing objects), ``resolve`` (the lock's
questions), ``prepare`` (base + changes, committed deterministically) and ``export`` (plain files for a
build context). Every git failure leaves as ``SourceError`` (the repository answered, but not what we
need) or ``UnreachableError`` (it could not be reached in time).

Layout under ``Config.cache.sources``:

- ``mirrors/<name>-<hash of URL>.git``: one bare mirror per repository URL, holding the remote's
  branches, tags and PR heads (``refs/pull/N/head``) under their own names, plus
  ``refs/buildctl/prepared/<key>`` (prepared trees) and ``refs/buildctl/keep/<sha>`` (commits a lock
  named, so that a force-pushed PR or a deleted branch cannot take them away from the cache).
- ``mirrors/<name>.lock``: an flock held while a mirror is fetched or written.
- ``exports/<tree sha>/``: cached exported trees; ``tmp/``: scratch (same file system, for renames).

Mirrors: a manifest URL is fetched through git's own ``url.<base>.insteadOf`` rules (the user's git
configuration) and ``Config.git_mirrors`` (passed as ``-c url.<mirror>.insteadOf=<orig>``); submodule
URLs go through the same mapping. Mirrors are keyed by the URL as written, so pointing at a mirror
reuses the cache. URLs may also be local paths (relative ones are resolved against the manifest's
folder) or git bundle files.

Network: every remote is asked with `git ls-remote` first, killed after ``network_timeout`` (+3 s), so an
unreachable host fails in seconds (github.com on a machine without DNS for it: "Could not resolve host",
in well under a second) and nothing is fetched when no ref moved. Fetches are bounded by curl's
low-speed limit (http.lowSpeedLimit/lowSpeedTime) and a long overall timeout. GIT_TERMINAL_PROMPT=0 and,
unless the user chose an ssh command, ``ssh -o BatchMode=yes -o ConnectTimeout=N``: buildctl never prompts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.lock.lockfile import DraggedCommit, LockedChange, LockedComponent, LockedPr, PrMode
from buildctl.lock.resolvers import Applied
from buildctl.sources import export as _export
from buildctl.sources import prepare as _prepare
from buildctl.sources import resolve
from buildctl.sources.gitrun import Git
from buildctl.sources.mirrors import Mirrors
from buildctl.sources.prepare import Change, PatchFile, PreparedTree, PrHead
from buildctl.sources.urls import normalize_repo

if TYPE_CHECKING:
    from buildctl.config import Config
    from buildctl.manifest.model import Component


class Sources:
    """Git mirrors and prepared trees under one cache folder.

    Resolution functions fetch a repository at most once per ``Sources`` object (one consistent view
    per `buildctl lock` run); make a new object to see later changes. ``prepare`` fetches only when
    an object it needs is missing, so that builds of a locked stack work offline from the cache.
    """

    def __init__(self, *, cache: Path, mirrors: Mapping[str, str] | None = None, network_timeout: float = 10.0,
                 base_dir: Path | None = None, fetch_timeout: float | None = None,
                 ca_bundle: Path | None = None) -> None:
        self.cache = cache
        self.base_dir = base_dir
        self.git = Git(mirrors=mirrors, network_timeout=network_timeout, ca_bundle=ca_bundle)
        # A fetch of a large repository (TE with cutlass) legitimately takes minutes; stalls are caught by
        # the low-speed limit, unreachable hosts by the ls-remote that always comes first.
        limit = float(fetch_timeout) if fetch_timeout else max(1800.0, 60 * self.git.network_timeout)
        self.mirrors = Mirrors(self.git, cache, fetch_timeout=limit)

    @classmethod
    def from_config(cls, config: Config, *, base_dir: Path | None = None) -> Sources:
        return cls(cache=config.cache.sources, mirrors=config.git_mirrors,
                   network_timeout=config.network_timeout, base_dir=base_dir, ca_bundle=config.ca_bundle)

    def url(self, repo: str) -> str:
        """The repository string as buildctl uses it (relative paths made absolute)."""
        return normalize_repo(repo, self.base_dir)

    def mirror_path(self, repo: str) -> Path:
        return self.mirrors.path(self.url(repo))

    def effective_url(self, url: str) -> str:
        """The URL git fetches after insteadOf rules (the user's and Config.git_mirrors) are applied."""
        return self.git.effective_url(url)

    # -- resolution (used by `buildctl lock`: lock.GitResolver)

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        """Full SHA of ``commit`` (7 to 40 hex digits); with ``branch``, check it is on that branch."""
        return resolve.resolve_commit(self.mirrors, self.url(repo), commit, branch=branch)

    def branch_head(self, repo: str, branch: str) -> str:
        """The commit ``branch`` points at now."""
        return resolve.branch_head(self.mirrors, self.url(repo), branch)

    def first_parent(self, repo: str, old: str, new: str) -> list[resolve.CommitInfo]:
        """The first-parent history from ``old`` (excluded) to ``new`` (included), oldest first."""
        return resolve.first_parent(self.mirrors, self.url(repo), old, new)

    def pr_head(self, repo: str, number: int) -> str:
        """The head commit of PR ``number`` now (``refs/pull/N/head``, as GitHub publishes it)."""
        return resolve.pr_head(self.mirrors, self.url(repo), number)

    def pr_change(self, repo: str, base: str, number: int, head: str, *, target: str = "main",
                  mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
        """Which commits PR ``number`` (at ``head``) brings (see ``resolve.pr_change``)."""
        return resolve.pr_change(self.mirrors, self.url(repo), base, number, head, target=target, mode=mode)

    def submodules(self, repo: str, commit: str) -> dict[str, str]:
        """{path: commit} of every submodule at ``commit``, nested ones included ("a/b")."""
        return resolve.submodules(self.mirrors, self.url(repo), commit)

    def gitlinks(self, repo: str, commit: str) -> dict[str, str]:
        """{path: SHA} of the submodule gitlinks in ``commit``'s tree, from the superproject alone."""
        return resolve.gitlinks(self.mirrors, self.url(repo), commit)

    def apply(self, repo: str, commit: str, changes: Sequence[LockedChange], patch_paths: Mapping[str, Path],
              ) -> Applied:
        """The lock's view of ``prepare``: apply locked changes; the tree, empty picks and gitlinks."""
        prepared = self.prepare(repo, commit, changes=_prepare.to_changes(changes, patch_paths), submodules=False)
        return Applied(tree=prepared.tree, empty=prepared.empty, gitlinks=self.gitlinks(repo, prepared.tree))

    def lock_component(self, component: Component) -> LockedComponent:
        """Everything `buildctl lock` records for a git component (``lock.resolve_component`` over this)."""
        from buildctl.lock.resolve import resolve_component

        return resolve_component(component, self, self.base_dir or Path.cwd())

    # -- prepared trees and exports (build time)

    def prepare(self, repo: str, commit: str, *, changes: Sequence[Change] = (), prs: Sequence[PrHead] = (),
                patches: Sequence[PatchFile] = (), submodules: bool = True) -> PreparedTree:
        """``commit`` with each change applied in order, committed deterministically (``prepare.prepare``)."""
        return _prepare.prepare(self.mirrors, self.url(repo), commit, changes=changes, prs=prs, patches=patches,
                                submodules=submodules)

    def prepare_component(self, component: Component, locked: LockedComponent, *,
                          check_tree: bool = True) -> PreparedTree:
        """``prepare`` for a manifest component at its lock; checks the result against the lock's ``tree``."""
        return _prepare.prepare_component(self.mirrors, component, locked, base_dir=self.base_dir,
                                          check_tree=check_tree)

    def export(self, prepared: PreparedTree, dest: Path, *, git_head: bool = True) -> Path:
        """Write the prepared tree, submodules included, into ``dest`` (which must not exist)."""
        return _export.export(self.mirrors, prepared, dest, git_head=git_head)

    def exported(self, prepared: PreparedTree, *, git_head: bool = True) -> Path:
        """A cached export of ``prepared`` under the cache's exports/ (written once per tree)."""
        return _export.exported(self.mirrors, prepared, git_head=git_head)
