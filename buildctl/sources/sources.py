"""Git sources: local mirrors, pin resolution for the lock, prepared trees for builds.

The only module that runs git. Every git failure leaves here as ``SourceError`` (the repository
answered, but not what we need) or ``UnreachableError`` (it could not be reached in time).

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

Determinism: everything that writes commits (cherry-picks, patches) runs with the user's and the
system's git configuration switched off, a fixed identity and dates taken from the base commit,
so that the prepared commit has the same SHA on every machine with the same git merge machinery
(merge-ort, the default since git 2.34).

Exports and version suffixes: an export carries no history, but a minimal ``.git`` (HEAD = the prepared
commit, no objects, core.abbrev=7) at its top and in each submodule, so that `git rev-parse --short HEAD`
in the build tree prints ``PreparedTree.short``: TE's version becomes ``<VERSION.txt>+<tree[:7]>``, the
short SHA of the prepared commit (the lock's ``tree``), not of the base commit. The build needs git for
that (TE drops the suffix silently without it) and, where it runs as another user than the files' owner,
``BUILD_GIT_ENV``. ``.git/buildctl-source.json`` records URL, commit, PRs, patches and submodules.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from buildctl.errors import LockError, SourceError, UnreachableError
from buildctl.lock.lock import Applied
from buildctl.lock.lockfile import (
    DraggedCommit,
    LockedChange,
    LockedComponent,
    LockedPatch,
    LockedPick,
    LockedPr,
    MergedUpstream,
    PrMode,
)

if TYPE_CHECKING:
    from buildctl.config import Config
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
# Branches, tags and GitHub's PR heads. Other refs (refs/pull/N/merge, refs/changes, notes) are not mirrored.
_REFSPECS_ALL = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", "+refs/pull/*/head:refs/pull/*/head")
_REFSPECS_NO_PULLS = _REFSPECS_ALL[:2]
_MAX_SUBMODULE_DEPTH = 8
# merge-ort as the cherry-pick default (2.34) makes prepared SHAs agree across machines; GIT_CONFIG_GLOBAL
# (2.32), which isolates local work from the user's configuration, is silently ignored by older git.
MIN_GIT = (2, 34)
# Low-speed abort: below this many bytes/s for network_timeout seconds (curl's low-speed limit).
_LOW_SPEED_BYTES = 1000
# Small network commands get network_timeout plus this before buildctl kills them, so that curl's own
# low-speed abort (a clearer message) comes first for http(s); git:// and ssh only stop at our kill.
_KILL_GRACE_S = 3.0

# Variables that point git at another repository, index or identity: never inherited from the caller
# (buildctl may run inside a git hook, where GIT_DIR and GIT_INDEX_FILE are set).
_REPO_ENV = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS", "GIT_SHALLOW_FILE", "GIT_QUARANTINE_PATH",
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
})

# Environment for a build that runs `git rev-parse --short HEAD` in an exported tree it does not own
# (a mounted source in a container running as another user): git >= 2.35.2 refuses such a repository
# ("dubious ownership") and TE would then silently drop its version suffix. Command-line scope config
# from the environment is one of the places git honours safe.directory from.
BUILD_GIT_ENV: Mapping[str, str] = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.directory",
    "GIT_CONFIG_VALUE_0": "*",
}

HEX_RE = re.compile(r"^[0-9a-f]+$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_RE = re.compile(r"^(?:[^@/:]+@)?[^/:]+:(?!//)")


# ------------------------------------------------------------------------------------------ values


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
class CommitInfo:
    sha: str
    date: str  # committer date, ISO 8601
    subject: str

    def line(self) -> str:
        return f"{self.sha}  {self.date}  {self.subject}"


@dataclass(frozen=True, kw_only=True)
class Submodule:
    path: str  # relative to the top of the component, nested ones joined with '/'
    url: str  # resolved (relative .gitmodules URLs made absolute), before mirror mapping
    commit: str


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


FailureKind = Literal["unreachable", "not-found", "auth", "other"]


# ---------------------------------------------------------------------------------- pure helpers


def parse_git_version(text: str) -> tuple[int, int]:
    """``git version 2.39.5`` (or ``2.45.1.windows.1``, ``2.39.3 (Apple Git-146)``) -> (2, 39)."""
    m = re.search(r"(\d+)\.(\d+)", text)
    if not m:
        raise SourceError(f"cannot read the git version from {text.strip()!r}")
    return int(m.group(1)), int(m.group(2))


def is_sha(text: str, *, min_len: int = 7) -> bool:
    """Lower-case hex of min_len..40 digits."""
    return min_len <= len(text) <= 40 and bool(HEX_RE.match(text))


def url_kind(repo: str) -> Literal["url", "scp", "path"]:
    """How git reads a repository string: scheme URL, scp-like ``host:path``, or a local path."""
    if _SCHEME_RE.match(repo):
        return "url"
    # git reads "a:b" as ssh only when no slash comes before the colon ("./a:b" is a path)
    if _SCP_RE.match(repo) and not repo.startswith(("/", ".")):
        return "scp"
    return "path"


def normalize_repo(repo: str, base_dir: Path | None) -> str:
    """A repository string made absolute: relative paths are taken from ``base_dir`` (the manifest's folder)."""
    repo = repo.strip()
    if url_kind(repo) != "path":
        return repo
    p = Path(repo).expanduser()
    if not p.is_absolute():
        if base_dir is None:
            raise SourceError(f"repository {repo!r} is a relative path, but no folder to resolve it against",
                              fix="give an absolute path or URL, or load the manifest from its file")
        p = base_dir / p
    return os.path.normpath(p)


def mirror_name(url: str) -> str:
    """Folder name of the mirror of ``url``: a readable stem plus a hash of the exact URL."""
    stem = re.split(r"[/:]", url.rstrip("/"))[-1]
    for suffix in (".git", ".bundle"):
        stem = stem.removesuffix(suffix)
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem)[:40] or "repo"
    return f"{stem}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def insteadof_args(mirrors: Mapping[str, str]) -> list[str]:
    """``git -c`` options that make git fetch ``orig...`` from ``mirror...`` (Config.git_mirrors)."""
    args: list[str] = []
    for orig, mirror in sorted(mirrors.items()):
        # config.py checks both sides at load time; a value that slipped through must still not change which
        # setting `-c name=value` makes (git splits at the first '=') or add a line to git's configuration
        for side in (orig, mirror):
            if "=" in mirror or any(c in side for c in "\n\r\x00") or side.startswith("-"):
                raise SourceError(f"refusing the git mirror rule {orig!r} -> {mirror!r}",
                                  why="a side starts with '-' or holds a line break, or the mirror holds '='",
                                  fix="correct git_mirrors in the configuration")
        args += ["-c", f"url.{mirror}.insteadOf={orig}"]
    return args


def resolve_submodule_url(super_url: str, sub_url: str) -> str:
    """A .gitmodules URL made absolute the way git does (submodule--helper's relative_url): ``./x`` and
    ``../x`` are relative to the superproject's URL as written, before insteadOf rewriting."""
    if not sub_url.startswith(("./", "../")):
        return sub_url
    base, rest, colon = super_url.rstrip("/"), sub_url, False
    while rest.startswith(("./", "../")):
        if rest.startswith("./"):
            rest = rest[2:]
            continue
        rest = rest[3:]
        cut = base.rfind("/")
        if cut < 0:
            cut = base.rfind(":")
            colon = cut >= 0
        if cut < 0:
            raise SourceError(f"submodule URL {sub_url!r} climbs above {super_url!r}",
                              fix="fix the submodule URL in .gitmodules, or map it with git_mirrors")
        base = base[:cut]
    return f"{base}{':' if colon else '/'}{rest}"


def parse_gitmodules(text: str) -> dict[str, str]:
    """``git config -z --list`` output of a .gitmodules blob -> {path: url}."""
    entries: dict[str, dict[str, str]] = {}
    for item in filter(None, text.split("\0")):
        key, _, value = item.partition("\n")
        m = re.match(r"^submodule\.(.+)\.(path|url)$", key)
        if m:
            entries.setdefault(m.group(1), {})[m.group(2)] = value
    return {e["path"].strip("/"): e["url"] for e in entries.values() if "path" in e and "url" in e}


def parse_ls_tree_gitlinks(text: str) -> dict[str, str]:
    """``git ls-tree -r -z`` output -> {path: commit} of the gitlinks (mode 160000) in it."""
    out: dict[str, str] = {}
    for item in filter(None, text.split("\0")):
        meta, _, path = item.partition("\t")
        mode, _type, obj = meta.split(" ")
        if mode == "160000":
            out[path] = obj
    return out


def parse_ls_remote(text: str, *, pulls: bool) -> dict[str, str]:
    """``git ls-remote --refs`` output -> {ref: sha} of the refs a mirror keeps."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        sha, _, ref = line.partition("\t")
        if ref.endswith("^{}"):  # a peeled tag (ls-remote without --refs): the tag itself is listed too
            continue
        if ref.startswith(("refs/heads/", "refs/tags/")) or (
            pulls and re.fullmatch(r"refs/pull/[^/]+/head", ref)
        ):
            out[ref] = sha
    return out


def _change_key(c: Change) -> list[object]:
    if isinstance(c, PickChange):
        return ["commit", c.sha]
    if isinstance(c, PrChange):
        return ["pr", c.number, c.head, c.mode, list(c.commits)]
    return ["patch", c.name, c.sha256]


def prepare_key(commit: str, changes: Sequence[Change]) -> str:
    """Cache key of a prepared tree: everything that determines its commit SHA, and nothing else."""
    data = {
        "recipe": PREPARE_RECIPE,
        "identity": f"{IDENTITY_NAME} <{IDENTITY_EMAIL}>",
        "commit": commit,
        "changes": [_change_key(c) for c in changes],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


_UNREACHABLE_MARKERS = (
    "could not resolve host", "could not resolve hostname", "unable to look up", "name or service not known",
    "temporary failure in name resolution", "connection refused", "connection timed out", "timed out",
    "operation too slow", "failed to connect", "network is unreachable", "no route to host",
    "connection reset", "ssl", "certificate", "gnutls", "proxy", "could not read from remote repository",
    "empty reply from server", "the remote end hung up unexpectedly",
)
_NOT_FOUND_MARKERS = (
    "not found", "does not appear to be a git repository", "does not exist", "no such file or directory",
    "is not a valid", "not a git repository", "could not read bundle", "unrecognized header",
)
_AUTH_MARKERS = (
    "authentication failed", "terminal prompts disabled", "could not read username", "could not read password",
    "permission denied", "returned error: 401", "returned error: 403",
)


def classify_failure(stderr: str) -> FailureKind:
    """Sort a failed network git command by its message: could not reach, no such repo, no access, other."""
    text = stderr.lower()
    if any(m in text for m in _AUTH_MARKERS):
        return "auth"
    if any(m in text for m in _NOT_FOUND_MARKERS):
        return "not-found"
    if any(m in text for m in _UNREACHABLE_MARKERS):
        return "unreachable"
    return "other"


def mirror_hint(url: str) -> str:
    """How to point buildctl at a mirror of ``url`` (the 'fix' of an unreachable remote)."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/]+/)", url)
    base = m.group(1) if m else (url.split(":", 1)[0] + ":" if url_kind(url) == "scp" else url)
    return (
        f"if this machine cannot reach it, use a mirror: in the buildctl config file add "
        f"[git_mirrors] \"{base}\" = \"<mirror base>\" (or set BUILDCTL_GIT_MIRRORS='{base}=<mirror base>'), "
        f"or tell git itself: git config --global url.<mirror base>.insteadOf {base} "
        f"(a mirror must carry refs/pull/*/head for PRs: `git clone --mirror` does; submodule repositories "
        f"need mirrors too)"
    )


def conflict_files_from_apply(stderr: str) -> list[str]:
    """The files `git apply` names in its errors (``patch failed: F:L``, ``F: does not exist``...)."""
    files: list[str] = []
    for line in stderr.splitlines():
        m = (re.match(r"^error: patch failed: (.+):\d+$", line)
             or re.match(r"^error: (.+): (?:does not exist in index|patch does not apply|already exists in index"
                         r"|does not match index|No such file or directory|already exists in working directory)$",
                         line))
        if m and m.group(1) not in files:
            files.append(m.group(1))
    return files


def shortest_unique_prefixes(shas: Sequence[str], min_len: int) -> dict[str, str]:
    """For each SHA the shortest prefix (>= min_len) that no other SHA in ``shas`` shares."""
    out: dict[str, str] = {}
    for s in shas:
        n = min_len
        while n < 40 and any(o != s and o.startswith(s[:n]) for o in shas):
            n += 1
        out[s] = s[:n]
    return out


def change_signature(c: ManifestChange) -> tuple[str, str]:
    """What identifies a manifest change (kind and name), to compare it with a locked one."""
    if c.commit is not None:
        return ("commit", c.commit)
    if c.pr is not None:
        return ("pr", str(c.pr))
    return ("patch", c.patch or "")


def locked_signature(c: LockedChange) -> tuple[str, str]:
    if isinstance(c, LockedPick):
        return ("commit", c.sha)
    if isinstance(c, LockedPr):
        return ("pr", str(c.number))
    return ("patch", c.file)


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


# ------------------------------------------------------------------------------------------ runner


@dataclass(frozen=True, kw_only=True)
class _Result:
    rc: int
    out: str
    err: str


class _Timeout(Exception):
    pass


@dataclass(frozen=True, kw_only=True)
class _Failure:
    index: int  # of the change that did not apply
    sha: str  # the commit being picked or merged ("" for a patch)
    files: tuple[str, ...]  # conflicting files
    detail: str  # git's last lines


def _run_process(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None, timeout: float,
                 input_bytes: bytes | None) -> tuple[int, bytes, bytes]:
    # A new session: git's helpers (git-remote-https, ssh) die with it on timeout, and ssh cannot open
    # the terminal to ask for a password or a host key (which would hang until the timeout).
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=dict(env), start_new_session=True,
        stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(input_bytes, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise _Timeout from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out, err


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
        # The configured CA bundle (a TLS-intercepting proxy's): git over https trusts it as pip does.
        self.ca_bundle = ca_bundle
        self.mirrors = dict(mirrors or {})
        self.network_timeout = float(network_timeout)
        # A fetch of a large repository (TE with cutlass) legitimately takes minutes; stalls are caught by
        # the low-speed limit, unreachable hosts by the ls-remote that always comes first.
        self.fetch_timeout = float(fetch_timeout) if fetch_timeout else max(1800.0, 60 * self.network_timeout)
        self.base_dir = base_dir
        self._fresh: set[tuple[str, bool]] = set()
        self._remote_refs: dict[str, dict[str, str]] = {}  # url -> refs as ls-remote listed them
        self._ssh_default: bool | None = None
        self._git_checked = False

    @classmethod
    def from_config(cls, config: Config, *, base_dir: Path | None = None) -> Sources:
        return cls(cache=config.cache.sources, mirrors=config.git_mirrors,
                   network_timeout=config.network_timeout, base_dir=base_dir, ca_bundle=config.ca_bundle)

    # -- paths

    @property
    def _mirrors_dir(self) -> Path:
        return self.cache / "mirrors"

    @property
    def _tmp_dir(self) -> Path:
        return self.cache / "tmp"

    def url(self, repo: str) -> str:
        """The repository string as buildctl uses it (relative paths made absolute)."""
        return normalize_repo(repo, self.base_dir)

    def mirror_path(self, repo: str) -> Path:
        return self._mirrors_dir / f"{mirror_name(self.url(repo))}.git"

    # -- running git

    def _env(self, *, network: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANGUAGE="C", GIT_LFS_SKIP_SMUDGE="1")
        if network:
            if self.ca_bundle is not None:
                # GIT_SSL_CAINFO outranks http.sslCAInfo (and is set on many machines): set both.
                env["GIT_SSL_CAINFO"] = str(self.ca_bundle)
            if self._use_default_ssh(env):
                env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={max(1, int(self.network_timeout))}"
        else:
            # Local work must not depend on who runs it: no user or system config (hooks, merge.renames,
            # commit.gpgSign, core.autocrlf, rerere ...), and none from the environment either.
            for k in list(env):
                if k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")) or k in (
                        "GIT_CONFIG", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS"):
                    del env[k]
            env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
        return env

    def _use_default_ssh(self, env: Mapping[str, str]) -> bool:
        """Whether to set our bounded ssh command (only where the user has not chosen one)."""
        if "GIT_SSH_COMMAND" in env or "GIT_SSH" in env:
            return False
        if self._ssh_default is None:
            try:
                rc, _, _ = _run_process(["git", "config", "--get", "core.sshCommand"], env=env, cwd=None,
                                        timeout=self.network_timeout, input_bytes=None)
            except (OSError, _Timeout):
                rc = 1
            self._ssh_default = rc != 0
        return self._ssh_default

    def _check_git(self) -> None:
        try:
            _, out, _ = _run_process(["git", "--version"], env=self._env(network=False), cwd=None, timeout=60,
                                     input_bytes=None)
        except FileNotFoundError as exc:
            raise SourceError("git is not installed", why=str(exc),
                              fix="install git (apt-get install git) and run the command again") from exc
        except _Timeout:
            raise SourceError("`git --version` did not finish within 60s") from None
        version = parse_git_version(out.decode())
        if version < MIN_GIT:
            raise SourceError(
                f"git {out.decode().strip()} is too old for buildctl",
                why=f"prepared trees need git >= {MIN_GIT[0]}.{MIN_GIT[1]} to get the same commit SHAs everywhere",
                fix="install a newer git (Debian bookworm has 2.39)",
            )
        self._git_checked = True

    def _git(self, args: Sequence[str], *, git_dir: Path | None = None, cwd: Path | None = None,
             network: bool = False, timeout: float | None = None, input_bytes: bytes | None = None,
             env: Mapping[str, str] | None = None, check: bool = True, what: str = "",
             url: str = "") -> _Result:
        if not self._git_checked:
            self._check_git()
        if url and (url.startswith("-") or any(c in url for c in "\n\r\x00")):
            # every call below also puts "--" before the URL; this names the problem instead of git's error
            raise SourceError(f"refusing the repository location {url!r}",
                              why="it starts with '-' (git would read it as an option) or holds a line break",
                              fix="give the component an https://, ssh://, file:// URL, git@host:path or a path "
                                  "relative to the manifest")
        argv = ["git"]
        if network:
            argv += insteadof_args(self.mirrors)
            argv += ["-c", f"http.lowSpeedLimit={_LOW_SPEED_BYTES}",
                     "-c", f"http.lowSpeedTime={max(1, int(self.network_timeout))}"]
            if self.ca_bundle is not None:
                argv += ["-c", f"http.sslCAInfo={self.ca_bundle}"]
        else:
            argv += ["-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0",
                     "-c", "maintenance.auto=false"]
        if git_dir is not None:
            argv += ["--git-dir", str(git_dir)]
        argv += list(args)
        full_env = self._env(network=network)
        if env:
            full_env.update(env)
        limit = timeout if timeout is not None else (self.network_timeout + _KILL_GRACE_S if network else 600.0)
        try:
            rc, out, err = _run_process(argv, env=full_env, cwd=cwd, timeout=limit, input_bytes=input_bytes)
        except FileNotFoundError as exc:
            raise SourceError("git is not installed", why=str(exc),
                              fix="install git (apt-get install git) and run the command again") from exc
        except _Timeout:
            if network:
                raise UnreachableError(
                    f"git remote {self._display(url)} did not answer within {limit:g}s ({what or args[0]})",
                    why="the host accepts no connection or sends nothing (a firewall, an air-gapped site)",
                    fix=mirror_hint(url),
                ) from None
            raise SourceError(f"git {args[0]} took longer than {limit:g}s ({what})",
                              fix="look for a stuck process or a very slow disk, then run again") from None
        result = _Result(rc=rc, out=out.decode("utf-8", "replace"), err=err.decode("utf-8", "replace"))
        if check and rc != 0:
            if network:
                self._raise_network(result, url=url, what=what or " ".join(args[:1]))
            raise SourceError(f"git {' '.join(args[:2])} failed ({what})" if what else f"git {args[0]} failed",
                              why=_last_lines(result.err))
        return result

    def _display(self, url: str) -> str:
        """``url``, plus where git really goes when a mirror rule rewrites it."""
        if not url:
            return "(unknown)"
        effective = self.effective_url(url)
        return url if effective == url else f"{url} (mapped to {effective})"

    def effective_url(self, url: str) -> str:
        """The URL git fetches after insteadOf rules (the user's and Config.git_mirrors) are applied."""
        try:
            rc, out, _ = _run_process(["git", *insteadof_args(self.mirrors), "ls-remote", "--get-url", "--", url],
                                      env=self._env(network=True), cwd=None, timeout=self.network_timeout,
                                      input_bytes=None)
        except (OSError, _Timeout):
            return url
        return (out.decode().strip() or url) if rc == 0 else url

    def _raise_network(self, result: _Result, *, url: str, what: str) -> None:
        kind = classify_failure(result.err)
        shown = self._display(url)
        why = _last_lines(result.err)
        if kind == "unreachable":
            tls = any(m in result.err.lower() for m in ("certificate", "ssl", "gnutls"))
            fix = mirror_hint(url)
            if tls:
                fix = ((f"git was given the configured ca_bundle {self.ca_bundle} (http.sslCAInfo): check that it "
                        "holds the CA that signed this server's certificate; " if self.ca_bundle else
                        "behind a TLS-intercepting proxy, set ca_bundle (BUILDCTL_CA_BUNDLE) in the buildctl "
                        "configuration: git gets it as http.sslCAInfo, as pip gets it as --cert; ") + fix)
            raise UnreachableError(f"cannot reach git remote {shown} ({what})", why=why, fix=fix)
        if kind == "not-found":
            raise SourceError(f"git remote {shown} has no repository there ({what})", why=why,
                              fix="check the component's repo URL (and the mirror it maps to)")
        if kind == "auth":
            raise SourceError(f"git remote {shown} refused access ({what})", why=why,
                              fix="set up credentials for it in git (a credential helper or ssh key); "
                                  "buildctl never prompts")
        raise SourceError(f"git {what} failed for {shown}", why=why,
                          fix="run the same git command by hand to see more, then run again")

    # -- mirrors

    @contextlib.contextmanager
    def _locked(self, url: str) -> Iterator[Path]:
        """Hold the mirror's lock (other buildctl processes share the cache); yield its folder."""
        self._mirrors_dir.mkdir(parents=True, exist_ok=True)
        name = mirror_name(url)
        with open(self._mirrors_dir / f"{name}.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield self._mirrors_dir / f"{name}.git"
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _init_mirror(self, mirror: Path, url: str) -> None:
        if (mirror / "HEAD").is_file():
            return
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="mirror-", dir=self._tmp_dir))
        try:
            self._git(["init", "--quiet", "--bare", str(tmp)], what="create mirror")
            # For people reading the cache; fetches always name the URL explicitly.
            self._git(["config", "--", "buildctl.url", url], git_dir=tmp, what="create mirror")
            shutil.rmtree(mirror, ignore_errors=True)
            os.replace(tmp, mirror)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _local_refs(self, mirror: Path, *, pulls: bool) -> dict[str, str]:
        r = self._git(["for-each-ref", "--format=%(objectname)\t%(refname)",
                       "refs/heads", "refs/tags", *(["refs/pull"] if pulls else [])],
                      git_dir=mirror, what="list mirror refs")
        return parse_ls_remote(r.out, pulls=pulls)

    def _refresh(self, url: str, mirror: Path, *, pulls: bool, wanted: Sequence[str] = ()) -> None:
        """Bring the mirror up to date with the remote (called with the mirror locked). ``wanted``: the
        commits the caller needs, named when the remote turns out to lack objects they hold."""
        if (url, pulls) in self._fresh or (url, True) in self._fresh:
            return
        self._init_mirror(mirror, url)
        # ls-remote first: small, bounded by network_timeout, so an unreachable host fails in seconds;
        # and when nothing moved (the common case for a re-lock) there is nothing to fetch.
        remote = parse_ls_remote(
            self._git(["ls-remote", "--refs", "--", url], network=True, url=url, what="ls-remote").out, pulls=True)
        self._remote_refs[url] = remote
        # A mirror that lacks objects some PR heads hold (large blobs left out) cannot be fetched whole:
        # such a remote is marked in the cache mirror, and its PR heads are fetched one by one when asked.
        narrow = pulls and self._git(["config", "--get", "buildctl.pullsOnDemand"], git_dir=mirror,
                                     check=False, what="read mirror config").out.strip() == "true"
        wide = pulls and not narrow
        if {k: v for k, v in remote.items() if wide or not k.startswith("refs/pull/")} != self._local_refs(
                mirror, pulls=wide):
            r = self._fetch_refs(url, mirror, _REFSPECS_ALL if wide else _REFSPECS_NO_PULLS, prune=True)
            if r.rc != 0 and wide and self._lacks_objects(r) and self._local_remote(url) is not None:
                r = self._fetch_refs(url, mirror, _REFSPECS_NO_PULLS, prune=True)
                if r.rc == 0:
                    self._git(["config", "buildctl.pullsOnDemand", "true"], git_dir=mirror, what="mark mirror")
            if r.rc != 0:
                self._explain_missing_objects(url, r, wanted)  # raises when the wanted commits lack objects
                if wanted and self._lacks_objects(r) and self._local_remote(url) is not None:
                    return  # other refs of this mirror are incomplete, not the wanted commits: fetched by SHA
                self._raise_network(r, url=url, what="fetch")
        self._fresh.add((url, pulls))

    def _fetch_refs(self, url: str, mirror: Path, refspecs: Sequence[str], *, prune: bool = False) -> _Result:
        return self._git(["--git-dir", str(mirror), "fetch", "--quiet", *(["--prune"] if prune else []), "--no-tags",
                          "--no-write-fetch-head", "--", url, *refspecs],
                         network=True, url=url, timeout=self.fetch_timeout, check=False, what="fetch")

    @staticmethod
    def _lacks_objects(r: _Result) -> bool:
        text = r.err.lower()
        return any(m in text for m in ("corruption", "pack-objects died", "missing blob", "missing tree",
                                       "unable to read", "bad object", "did not send all necessary objects"))

    def _fetch_pr_on_demand(self, url: str, mirror: Path, number: int) -> None:
        """For a remote whose PR heads are fetched one by one: fetch refs/pull/N/head now."""
        ref = f"refs/pull/{number}/head"
        sha = self._remote_refs.get(url, {}).get(ref)
        if sha is None:
            return
        r = self._fetch_refs(url, mirror, [f"+{ref}:{ref}"])
        if r.rc != 0:
            self._explain_missing_objects(url, r, [sha])
            self._raise_network(r, url=url, what=f"fetch PR #{number}")

    def _local_remote(self, url: str) -> Path | None:
        """Where a local remote (a path or file:// URL, after mirror rules) is on this machine."""
        effective = self.effective_url(url)
        if effective.startswith("file://"):
            effective = effective[len("file://"):]
        elif url_kind(effective) != "path":
            return None
        p = Path(effective)
        return p if p.exists() else None

    def _explain_missing_objects(self, url: str, r: _Result, wanted: Sequence[str]) -> None:
        """A fetch that died because the remote lacks objects (a mirror without its large blobs): raise a
        SourceError that names them, with their paths in the wanted commits, instead of git's error."""
        if not self._lacks_objects(r):
            return
        remote = self._local_remote(url)
        if remote is None:
            return
        # With wanted commits, only their own trees matter (what an export writes): history that lacks
        # objects is left to a shallow fetch. Without, the remote's whole history is what failed.
        tips = ["--no-walk", *wanted] if wanted else ["--all"]
        listing = self._git(["--git-dir", str(remote), "rev-list", "--objects", "--missing=print", *tips, "--"],
                            check=False, what="list the remote's objects")
        missing = [line[1:].strip() for line in listing.out.splitlines() if line.startswith("?")]
        if not missing:
            return
        paths: dict[str, str] = {}
        for tip in wanted:
            tree = self._git(["--git-dir", str(remote), "ls-tree", "-r", "-z", "--full-tree", tip, "--"],
                             check=False, what="list tree").out
            for item in filter(None, tree.split("\0")):
                meta, _, path = item.partition("\t")
                sha = meta.split(" ")[-1]
                if sha in missing:
                    paths.setdefault(sha, path)
        shown = [f"{paths[m]} (blob {m[:12]})" if m in paths else m for m in missing[:10]]
        at = f" at {', '.join(w[:12] for w in wanted)}" if wanted else ""
        raise SourceError(
            f"{self._display(url)} lacks {len(missing)} object(s) that {'the tree of the commit' if wanted else 'its history'}"
            f"{at} holds: {', '.join(shown)}{' ...' if len(missing) > 10 else ''}",
            why=f"the repository at {remote} is incomplete, so git cannot hand out the commit "
                f"({_last_lines(r.err, 2)})",
            fix="complete that mirror (fetch the missing objects from the original repository into it), or point "
                "git_mirrors at a complete one; the lock does not need them (it records submodules by their gitlinks)",
        )

    def _missing(self, mirror: Path, shas: Sequence[str]) -> list[str]:
        if not shas:
            return []
        if not (mirror / "HEAD").is_file():
            return list(shas)
        r = self._git(["cat-file", "--batch-check=%(objectname) %(objecttype)"], git_dir=mirror,
                      input_bytes="".join(f"{s}^{{commit}}\n" for s in shas).encode(), what="look up commits")
        lines = r.out.splitlines()
        return [s for s, line in zip(shas, lines, strict=True) if not line.endswith(" commit")]

    def _ensure(self, url: str, mirror: Path, shas: Sequence[str], *, pulls: bool, what: str) -> None:
        """Make sure the mirror has these commits: refresh, then ask for each missing one by SHA."""
        missing = self._missing(mirror, shas)
        if not missing:
            return
        self._refresh(url, mirror, pulls=pulls, wanted=missing)
        for sha in self._missing(mirror, missing):
            # Servers that allow it (GitHub does) hand out a commit by SHA even when no ref points at it.
            r = self._git(["--git-dir", str(mirror), "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                           "--", url, f"+{sha}:refs/buildctl/keep/{sha}"],
                          network=True, url=url, timeout=self.fetch_timeout, check=False, what="fetch by SHA")
            if r.rc != 0 and self._lacks_objects(r) and self._local_remote(url) is not None:
                self._explain_missing_objects(url, r, [sha])  # raises when the commit's own tree lacks objects
                # only its history lacks objects (a mirror without some large blobs): the commit alone will do
                # for what is read from it here (an export of its tree); the mirror becomes shallow there.
                r = self._git(["--git-dir", str(mirror), "fetch", "--quiet", "--depth=1", "--no-tags",
                               "--no-write-fetch-head", "--", url, f"+{sha}:refs/buildctl/keep/{sha}"],
                              network=True, url=url, timeout=self.fetch_timeout, check=False, what="fetch by SHA")
            if r.rc != 0 and classify_failure(r.err) == "unreachable":
                self._raise_network(r, url=url, what="fetch by SHA")
        still = self._missing(mirror, missing)
        if still:
            raise SourceError(
                f"commit {still[0]} ({what}) is not in {self._display(url)}",
                why="no branch, tag or PR head of the remote contains it, and the remote does not hand it out "
                    "by SHA (force-pushed or deleted?)",
                fix="check the SHA; re-lock if the lock is old; a mirror must carry the commit too",
            )

    def _keep(self, mirror: Path, shas: Sequence[str]) -> None:
        """Pin commits a lock names, so that pruning refs and gc cannot drop them from the cache."""
        stdin = "".join(f"update refs/buildctl/keep/{s} {s}\n" for s in dict.fromkeys(shas))
        if stdin:
            self._git(["update-ref", "--stdin"], git_dir=mirror, input_bytes=stdin.encode(), what="keep commits")

    # -- resolution (used by `buildctl lock`)

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        """Full SHA of ``commit`` (7 to 40 hex digits); with ``branch``, check it is on that branch."""
        url = self.url(repo)
        prefix = commit.strip().lower()
        if not is_sha(prefix):
            raise SourceError(f"{commit!r} is not a commit SHA (7 to 40 hex digits) for {url}",
                              fix="give the full 40-digit SHA, or at least its first 7 digits")
        with self._locked(url) as mirror:
            self._refresh(url, mirror, pulls=True)
            if len(prefix) == 40:
                self._ensure(url, mirror, [prefix], pulls=True, what="as written in the manifest")
                full = prefix
            else:
                candidates = self._commits_with_prefix(mirror, prefix)
                if not candidates:
                    raise SourceError(
                        f"no commit {prefix} in {self._display(url)}",
                        why="no branch, tag or PR head of the remote contains a commit with that prefix",
                        fix="check the SHA (and the branch it was on); give the full 40-digit SHA if the "
                            "commit is on no branch: the remote may still hand it out by full SHA",
                    )
                if len(candidates) > 1:
                    infos = self._commit_infos(mirror, candidates)
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
                head = self._branch_sha(mirror, url, branch)
                contained = self._git(["merge-base", "--is-ancestor", full, head], git_dir=mirror, check=False,
                                      what="check branch")
                if contained.rc == 1:
                    raise SourceError(
                        f"commit {full} is not on branch {branch} of {url}",
                        why=f"{branch} is at {head} and does not contain it",
                        fix="correct the branch (or the commit) in the manifest; leave branch out if the "
                            "commit is on no branch",
                    )
                if contained.rc != 0:
                    raise SourceError(f"cannot check whether {full} is on {branch}", why=_last_lines(contained.err))
            self._keep(mirror, [full])
            return full

    def _commits_with_prefix(self, mirror: Path, prefix: str) -> list[str]:
        r = self._git(["rev-parse", f"--disambiguate={prefix}"], git_dir=mirror, check=False,
                      what="expand short SHA")
        objects = [s for s in r.out.split() if is_sha(s, min_len=40)]
        if not objects:
            return []
        typed = self._git(["cat-file", "--batch-check=%(objectname) %(objecttype)"], git_dir=mirror,
                          input_bytes="".join(f"{s}\n" for s in objects).encode(), what="expand short SHA")
        return sorted(line.split()[0] for line in typed.out.splitlines() if line.endswith(" commit"))

    def _commit_infos(self, mirror: Path, shas: Sequence[str]) -> list[CommitInfo]:
        r = self._git(["show", "-s", "--no-walk=unsorted", "--format=%H%x00%cI%x00%s", *shas], git_dir=mirror,
                      what="describe commits")
        infos = [CommitInfo(sha=h, date=d, subject=s) for h, d, s in
                 (line.split("\0", 2) for line in r.out.splitlines() if line)]
        return sorted(infos, key=lambda i: (i.date, i.sha))

    def _branch_sha(self, mirror: Path, url: str, branch: str) -> str:
        ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
        r = self._git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], git_dir=mirror, check=False,
                      what="find branch")
        if r.rc != 0:
            names = [b.removeprefix("refs/heads/") for b in self._local_refs(mirror, pulls=False)
                     if b.startswith("refs/heads/")]
            close = difflib.get_close_matches(branch, names, n=3)
            raise SourceError(
                f"branch {branch} does not exist in {self._display(url)}",
                why=f"it has {len(names)} branch(es)" + (f"; close: {', '.join(close)}" if close else ""),
                fix="correct the branch name in the manifest",
            )
        return r.out.strip()

    def branch_head(self, repo: str, branch: str) -> str:
        """The commit ``branch`` points at now."""
        url = self.url(repo)
        with self._locked(url) as mirror:
            self._refresh(url, mirror, pulls=True)
            return self._branch_sha(mirror, url, branch)

    def pr_head(self, repo: str, number: int) -> str:
        """The head commit of PR ``number`` now (``refs/pull/N/head``, as GitHub publishes it)."""
        url = self.url(repo)
        with self._locked(url) as mirror:
            self._refresh(url, mirror, pulls=True)
            r = self._git(["rev-parse", "--verify", "--quiet", f"refs/pull/{number}/head^{{commit}}"],
                          git_dir=mirror, check=False, what="find PR head")
            if r.rc != 0 and f"refs/pull/{number}/head" in self._remote_refs.get(url, {}):
                self._fetch_pr_on_demand(url, mirror, number)
                r = self._git(["rev-parse", "--verify", "--quiet", f"refs/pull/{number}/head^{{commit}}"],
                              git_dir=mirror, check=False, what="find PR head")
            if r.rc != 0:
                count = sum(1 for ref in self._local_refs(mirror, pulls=True) if ref.startswith("refs/pull/"))
                raise SourceError(
                    f"PR #{number} not found in {self._display(url)}",
                    why=f"the remote has no refs/pull/{number}/head ({count} PR heads in all)"
                        + ("; it publishes no PR refs at all: a mirror made without `--mirror`?" if not count else ""),
                    fix="check the PR number; a mirror must carry refs/pull/*/head (`git clone --mirror` does)",
                )
            sha = r.out.strip()
            self._keep(mirror, [sha])
            return sha

    def submodules(self, repo: str, commit: str) -> dict[str, str]:
        """{path: commit} of every submodule at ``commit``, nested ones included ("a/b")."""
        url = self.url(repo)
        with self._locked(url) as mirror:
            self._ensure(url, mirror, [commit], pulls=True, what="superproject")
        return {s.path: s.commit for s in self._submodule_list(url, commit, prefix="", depth=0)}

    def _submodule_list(self, url: str, commit: str, *, prefix: str, depth: int) -> list[Submodule]:
        if depth > _MAX_SUBMODULE_DEPTH:
            raise SourceError(f"submodules nest deeper than {_MAX_SUBMODULE_DEPTH} levels under {url}",
                              why="a submodule that contains itself?")
        mirror = self._mirrors_dir / f"{mirror_name(url)}.git"
        links = parse_ls_tree_gitlinks(
            self._git(["ls-tree", "-r", "-z", "--full-tree", commit], git_dir=mirror, what="list tree").out)
        if not links:
            return []
        gm = self._git(["config", "-z", "--blob", f"{commit}:.gitmodules", "--list"], git_dir=mirror,
                       check=False, what="read .gitmodules")
        urls = parse_gitmodules(gm.out) if gm.rc == 0 else {}
        out: list[Submodule] = []
        for path, sha in sorted(links.items()):
            if path not in urls:
                raise SourceError(f"submodule {prefix}{path} of {url} at {commit[:12]} has no URL",
                                  why=".gitmodules has no entry with that path",
                                  fix="the commit is broken for recursive checkouts; pick another commit")
            sub_url = resolve_submodule_url(url, urls[path])
            with self._locked(sub_url) as sub_mirror:
                self._ensure(sub_url, sub_mirror, [sha], pulls=False, what=f"submodule {prefix}{path}")
                self._keep(sub_mirror, [sha])
            out.append(Submodule(path=f"{prefix}{path}", url=sub_url, commit=sha))
            out += self._submodule_list(sub_url, sha, prefix=f"{prefix}{path}/", depth=depth + 1)
        return out

    # -- pull requests (used by `buildctl lock`)

    def _is_ancestor(self, mirror: Path, a: str, b: str) -> bool:
        r = self._git(["merge-base", "--is-ancestor", a, b], git_dir=mirror, check=False, what="ancestry")
        if r.rc not in (0, 1):
            raise SourceError(f"cannot tell whether {a[:12]} is an ancestor of {b[:12]}", why=_last_lines(r.err))
        return r.rc == 0

    def _own_commits(self, mirror: Path, number: int, head: str, exclude: str, target: str
                     ) -> tuple[list[str], list[str]]:
        """(own non-merge commits oldest first, merges of the target skipped): reachable from ``head``, not
        from ``exclude``. A merge of anything but the target cannot be replayed as picks: SourceError."""
        listing = self._git(["rev-list", "--reverse", "--topo-order", "--parents", head, f"^{exclude}", "--"],
                            git_dir=mirror, what=f"list PR #{number} commits").out
        own: list[str] = []
        skipped: list[str] = []
        for line in filter(None, listing.split("\n")):
            sha, *parents = line.split()
            if len(parents) <= 1:
                own.append(sha)
            elif any(self._is_ancestor(mirror, p, exclude) for p in parents):
                skipped.append(sha)
            else:
                subject = self._git(["show", "-s", "--format=%s", sha, "--"], git_dir=mirror, what="describe").out
                raise SourceError(
                    f"PR #{number} holds a merge of a branch other than its target {target}: {sha[:12]} "
                    f"({subject.strip()})",
                    why="its own commits cannot be replayed one by one across that merge",
                    fix=f"set apply: merge for PR #{number} (merges its head), or set target: to the branch it merged")
        return own, skipped

    def pr_change(self, repo: str, base: str, number: int, head: str, *, target: str = "main",
                  mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
        """Which commits PR ``number`` (at ``head``) brings: its own commits (reachable from its head and not
        from ``target``, merges of the target skipped; for a PR already merged by a merge commit M, M^1..M^2),
        and, with mode merge, the commits the merge drags in that are neither the base's nor the PR's."""
        url = self.url(repo)
        with self._locked(url) as mirror:
            self._refresh(url, mirror, pulls=True)
            self._ensure(url, mirror, [base, head], pulls=True, what=f"PR #{number}")
            tgt = self._branch_sha(mirror, url, target)
            own, skipped = self._own_commits(mirror, number, head, tgt, target)
            merged: MergedUpstream | None = None
            if not own and self._is_ancestor(mirror, head, tgt):
                merged = self._merged_upstream(mirror, number, head, tgt)
                if merged.how == "merge":
                    m = merged.commit
                    own, skipped = self._own_commits(mirror, number, f"{m}^2", f"{m}^1", target)
            dragged: list[DraggedCommit] = []
            if mode == "merge":
                mine = set(own)
                brought = self._git(["rev-list", "--reverse", "--topo-order", "--no-merges",
                                     "--format=%H%x00%s", head, f"^{base}", "--"], git_dir=mirror,
                                    what=f"list what PR #{number} brings").out
                for line in brought.split("\n"):
                    if "\0" in line:
                        sha, subject = line.split("\0", 1)
                        if sha not in mine:
                            dragged.append(DraggedCommit(sha=sha, subject=subject, by=f"PR #{number}"))
            self._keep(mirror, [head, *own])
        return (LockedPr(number=number, head=head, mode=mode, target=target, commits=tuple(own),
                         skipped_merges=tuple(skipped), merged_upstream=merged), tuple(dragged))

    def _merged_upstream(self, mirror: Path, number: int, head: str, tgt: str) -> MergedUpstream:
        """How a PR whose head the target contains got there: a true merge commit M (oldest first-parent
        commit of the target that contains the head, with the head on its second side), or else a
        fast-forward/rebase that kept the SHAs."""
        chain = self._git(["rev-list", "--first-parent", "--reverse", tgt, "--"], git_dir=mirror,
                          what="target history").out.split()
        if head in chain:
            return MergedUpstream(how="squash-or-rebase")
        lo, hi = 0, len(chain) - 1
        while lo < hi:  # ancestry of a fixed commit is monotone along a first-parent chain
            mid = (lo + hi) // 2
            if self._is_ancestor(mirror, head, chain[mid]):
                hi = mid
            else:
                lo = mid + 1
        m = chain[lo]
        parents = self._git(["rev-list", "--parents", "-n", "1", m, "--"], git_dir=mirror, what="parents").out.split()[1:]
        if len(parents) >= 2 and self._is_ancestor(mirror, head, parents[1]) and not self._is_ancestor(
                mirror, head, parents[0]):
            return MergedUpstream(how="merge", commit=m)
        return MergedUpstream(how="squash-or-rebase")

    def gitlinks(self, repo: str, commit: str) -> dict[str, str]:
        """{path: SHA} of the submodule gitlinks in ``commit``'s tree, from the superproject alone (nothing
        of the submodules is fetched: a submodule mirror that lacks objects does not stop a lock)."""
        url = self.url(repo)
        with self._locked(url) as mirror:
            self._ensure(url, mirror, [commit], pulls=True, what="superproject")
            return parse_ls_tree_gitlinks(
                self._git(["ls-tree", "-r", "-z", "--full-tree", commit, "--"], git_dir=mirror, what="list tree").out)

    def apply(self, repo: str, commit: str, changes: Sequence[LockedChange], patch_paths: Mapping[str, Path],
              ) -> Applied:
        """The lock's view of ``prepare``: apply locked changes; the tree, empty picks and gitlinks."""
        prepared = self.prepare(repo, commit, changes=self.to_changes(changes, patch_paths), submodules=False)
        return Applied(tree=prepared.tree, empty=prepared.empty, gitlinks=self.gitlinks(repo, prepared.tree))

    @staticmethod
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

    # -- prepared trees (build time, and `buildctl lock` to record `tree`)

    def prepare(self, repo: str, commit: str, *, changes: Sequence[Change] = (), prs: Sequence[PrHead] = (),
                patches: Sequence[PatchFile] = (), submodules: bool = True) -> PreparedTree:
        """``commit`` with each change applied in order, committed deterministically.

        A cherry-pick keeps its author and gets ``-x``; a PR in own-commits mode is the cherry-picks of
        exactly the commits listed (``pr_change`` chose them at lock time), in merge mode one merge of its
        head; a patch is committed by buildctl. The committer is buildctl at the base commit's date. Picks
        that end up empty are kept (and reported in ``empty``). ``prs``: PR heads whose own commits (target
        main) are looked up here, applied after ``changes`` and before ``patches``. Nothing is stored unless
        everything applied; when something does not apply, the SourceError names the change, what it
        collides with, the files, and the reorderings / ``apply: merge`` that buildctl tried and that work.
        """
        url = self.url(repo)
        if not is_sha(commit, min_len=40):
            raise SourceError(f"prepare needs a full commit SHA, got {commit!r}", fix="lock the stack first")
        for p in prs:
            if not is_sha(p.head, min_len=40):
                raise SourceError(f"PR #{p.number}: head {p.head!r} is not a full SHA", fix="lock the stack first")
        all_changes: list[Change] = list(changes)
        for p in prs:
            locked, _ = self.pr_change(repo, commit, p.number, p.head)
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
        with self._locked(url) as mirror:
            self._ensure(url, mirror, needed, pulls=True, what="locked commits")
            self._keep(mirror, needed)
            epoch = int(self._git(["show", "-s", "--format=%ct", commit, "--"], git_dir=mirror, what="read date").out)
            reused = True
            if not all_changes:
                tree = commit
            else:
                found = self._git(["rev-parse", "--verify", "--quiet", f"refs/buildctl/prepared/{key}^{{commit}}"],
                                  git_dir=mirror, check=False, what="find prepared tree")
                if found.rc == 0:
                    tree = found.out.strip()
                else:
                    tree = self._apply(url, mirror, commit, all_changes, key=key, epoch=epoch)
                    reused = False
            empty = self._empty_picks(mirror, commit, tree, all_changes)
        subs = tuple(self._submodule_list(url, tree, prefix="", depth=0)) if submodules else ()
        return PreparedTree(url=url, commit=commit, tree=tree, key=key, epoch=epoch, changes=tuple(all_changes),
                            submodules=subs, empty=empty, reused=reused)

    @staticmethod
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

    def _empty_picks(self, mirror: Path, commit: str, tree: str, changes: Sequence[Change]) -> tuple[str, ...]:
        if tree == commit:
            return ()
        units = self._units(changes)
        out = self._git(["rev-list", "--first-parent", "--reverse", "--format=%T", f"{commit}..{tree}", "--"],
                        git_dir=mirror, what="walk the prepared commits").out.split("\n")
        trees = [line.strip() for line in out if line.strip() and not line.startswith("commit ")]
        before = self._git(["rev-parse", f"{commit}^{{tree}}"], git_dir=mirror, what="read tree").out.strip()
        if len(trees) != len(units):  # not a tree this recipe made: nothing to say
            return ()
        empty = []
        for unit, t in zip(units, trees, strict=True):
            if t == before and is_sha(unit, min_len=40):
                empty.append(unit)
            before = t
        return tuple(empty)

    @contextlib.contextmanager
    def _scratch(self, mirror: Path, commit: str) -> Iterator[Path]:
        """A scratch repository that borrows the mirror's objects, at ``commit``: a failed change leaves
        nothing in the mirror, and only a complete result is fetched into it."""
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="prepare-", dir=self._tmp_dir))
        try:
            self._git(["init", "--quiet", str(work)], what="prepare")
            (work / ".git" / "objects" / "info" / "alternates").write_text(f"{mirror / 'objects'}\n")
            self._git(["checkout", "--quiet", "--detach", commit, "--"], cwd=work, what="check out the locked commit")
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _apply(self, url: str, mirror: Path, commit: str, changes: Sequence[Change], *, key: str, epoch: int) -> str:
        with self._scratch(mirror, commit) as work:
            failure = self._run_changes(work, changes, epoch=epoch)
            if failure is not None:
                raise self._diagnose(url, mirror, commit, changes, failure, epoch=epoch)
            head = self._git(["rev-parse", "HEAD"], cwd=work, what="prepare").out.strip()
            self._git(["update-ref", "refs/heads/prepared", head], cwd=work, what="prepare")
            self._git(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", str(work),
                       f"+refs/heads/prepared:refs/buildctl/prepared/{key}"], git_dir=mirror,
                      what="store the prepared tree")
            return head

    def _env_for(self, epoch: int) -> dict[str, str]:
        date = f"@{epoch} +0000"
        return {"GIT_COMMITTER_NAME": IDENTITY_NAME, "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
                "GIT_COMMITTER_DATE": date}

    def _run_changes(self, work: Path, changes: Sequence[Change], *, epoch: int) -> _Failure | None:
        """Apply ``changes`` in ``work``; the first failure, or None when all applied."""
        committer = self._env_for(epoch)
        author = {"GIT_AUTHOR_NAME": IDENTITY_NAME, "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
                  "GIT_AUTHOR_DATE": committer["GIT_COMMITTER_DATE"]}
        for index, ch in enumerate(changes):
            if isinstance(ch, PickChange):
                shas: Sequence[str] = [ch.sha]
            elif isinstance(ch, PrChange) and ch.mode == "own-commits":
                shas = ch.commits
            elif isinstance(ch, PrChange):
                r = self._git(["merge", "--no-ff", "--no-edit", "--no-gpg-sign", "--no-rerere-autoupdate", "-m",
                               f"Merge PR #{ch.number} ({ch.head})", ch.head], cwd=work,
                              env={**committer, **author}, check=False, what=f"merge PR #{ch.number}")
                if r.rc != 0:
                    return self._failure(work, index, ch.head, r)
                continue
            else:
                r = self._git(["apply", "--index", "--whitespace=nowarn", "--", str(ch.path)], cwd=work, check=False,
                              what=f"patch {ch.name}")
                if r.rc != 0:
                    return _Failure(index=index, sha="", files=tuple(conflict_files_from_apply(r.err)),
                                    detail=_last_lines(r.err))
                self._git(["commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty", "--cleanup=verbatim",
                           "-m", f"Apply patch {ch.name}\n\nsha256: {ch.sha256}\n"],
                          cwd=work, env={**committer, **author}, what=f"commit patch {ch.name}")
                continue
            for sha in shas:
                r = self._git(["cherry-pick", "-x", "--allow-empty", "--keep-redundant-commits", "--no-gpg-sign",
                               "--cleanup=verbatim", "--no-rerere-autoupdate", sha], cwd=work, env=committer,
                              check=False, what=ch.label())
                if r.rc != 0:
                    return self._failure(work, index, sha, r)
        return None

    def _failure(self, work: Path, index: int, sha: str, r: _Result) -> _Failure:
        files = self._git(["diff", "--name-only", "--diff-filter=U"], cwd=work, check=False,
                          what="list conflicts").out.split()
        return _Failure(index=index, sha=sha, files=tuple(files), detail=_last_lines(r.err))

    def _touches(self, mirror: Path, base: str, ch: Change) -> set[str]:
        """The files a change modifies."""
        if isinstance(ch, PatchFile):
            r = self._git(["apply", "--numstat", "--", str(ch.path)], check=False, what="read patch")
            return {line.split("\t", 2)[2] for line in r.out.splitlines() if line.count("\t") >= 2}
        if isinstance(ch, PrChange) and ch.mode == "merge":
            mb = self._git(["merge-base", base, ch.head], git_dir=mirror, check=False, what="merge-base").out.strip()
            shas = [f"{mb}..{ch.head}"] if mb else []
            r = self._git(["diff", "--name-only", *(shas or [ch.head]), "--"], git_dir=mirror, check=False,
                          what="files")
            return set(r.out.split())
        shas = [ch.sha] if isinstance(ch, PickChange) else list(ch.commits)
        out: set[str] = set()
        for sha in shas:
            r = self._git(["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", sha, "--"], git_dir=mirror,
                          check=False, what="files")
            out |= set(r.out.split())
        return out

    def _tries(self, mirror: Path, commit: str, changes: Sequence[Change], *, epoch: int) -> bool:
        with self._scratch(mirror, commit) as work:
            return self._run_changes(work, changes, epoch=epoch) is None

    def _diagnose(self, url: str, mirror: Path, commit: str, changes: Sequence[Change], f: _Failure, *,
                  epoch: int) -> SourceError:
        """The error for a change that does not apply: what, against what, which files, and the fixes that
        buildctl tried and that work (another order; apply: merge for a PR)."""
        ch = changes[f.index]
        files = set(f.files)
        earlier = [(j, changes[j]) for j in range(f.index) if files & self._touches(mirror, commit, changes[j])]
        against = (", ".join(c.label() for _, c in earlier) + " (applied before it)") if earlier else \
            f"the base {commit[:12]}"
        picked = ""
        if (f.sha and isinstance(ch, PrChange) and ch.mode == "own-commits") or isinstance(ch, PickChange):
            subject = self._git(["show", "-s", "--format=%s", f.sha, "--"], git_dir=mirror, check=False,
                                what="describe").out.strip()
            picked = f"its commit {f.sha[:12]} \"{subject}\" " if isinstance(ch, PrChange) else f"\"{subject}\" "
        works: list[str] = []
        tried: list[str] = []
        for j, other in earlier:
            order = [*changes[:j], ch, *changes[j:f.index], *changes[f.index + 1:]]
            tried.append(f"{ch.label()} before {other.label()}")
            if self._tries(mirror, commit, order, epoch=epoch):
                works.append(f"apply {ch.label()} before {other.label()} (move it up in the component's changes)")
        for k in range(f.index + 1, len(changes)):
            later = changes[k]
            if not files & self._touches(mirror, commit, later):
                continue
            order = [*changes[:f.index], *changes[f.index + 1:k + 1], ch, *changes[k + 1:]]
            tried.append(f"{ch.label()} after {later.label()}")
            if self._tries(mirror, commit, order, epoch=epoch):
                works.append(f"apply {ch.label()} after {later.label()} (move it down in the component's changes)")
        if isinstance(ch, PrChange) and ch.mode == "own-commits":
            merged = PrChange(number=ch.number, head=ch.head, mode="merge")
            tried.append(f"apply: merge for {ch.label()}")
            if self._tries(mirror, commit, [*changes[:f.index], merged, *changes[f.index + 1:]], epoch=epoch):
                works.append(f"set apply: merge for {ch.label()} (it then brings what its branch merged, not only "
                             "its own commits: `buildctl pins show` lists them once locked)")
        what = f"{ch.label()} does not apply to {commit[:12]} of {url}"
        why = (f"{picked or 'it '}collides with {against} in: {', '.join(sorted(files))}" if files
               else f"{picked or 'it '}fails: {f.detail}")
        if works:
            fix = "this works (buildctl tried it): " + "; or ".join(works)
        else:
            fix = ((f"buildctl tried {', '.join(tried)}: none applies; " if tried else "")
                   + "the conflict needs resolving by hand: rebase the change onto the base with the changes "
                     "before it and apply the result as a patch file")
        return SourceError(what, why=why, fix=fix)

    def lock_component(self, component: Component) -> LockedComponent:
        """Everything `buildctl lock` records for a git component (``lock.resolve_component`` over this)."""
        from buildctl.lock.lock import resolve_component

        return resolve_component(component, self, self.base_dir or Path.cwd())

    def prepare_component(self, component: Component, locked: LockedComponent, *,
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
        paths = {p.file: self._patch_path(p.file) for p in component.patches}
        prepared = self.prepare(component.repo, locked.commit, changes=self.to_changes(locked.changes, paths),
                                submodules=component.submodules)
        if check_tree and locked.tree and prepared.tree != locked.tree:
            raise SourceError(
                f"component {component.name}: prepared tree {prepared.tree} differs from the lock's {locked.tree}",
                why="applying the same changes gave another commit here: a different git merge "
                    "machine (git < 2.34 lacks merge-ort as default) or a hand-edited lock",
                fix="use git >= 2.34, or re-lock on this machine if the difference is understood",
            )
        return prepared

    def _patch_path(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() or self.base_dir is None else self.base_dir / p

    # -- export

    def export(self, prepared: PreparedTree, dest: Path, *, git_head: bool = True) -> Path:
        """Write the prepared tree, submodules included, into ``dest`` (which must not exist).

        No .git history goes along. With ``git_head`` a minimal ``.git`` (HEAD = the prepared tree, no
        objects) sits at the top and in each submodule, so that `git rev-parse --short HEAD` prints
        ``prepared.short`` there (TE and DeepEP take their version suffix from it; `git status` does
        not work in it). Every file, link and folder gets ``prepared.epoch`` as its mtime.
        """
        if dest.exists():
            raise SourceError(f"cannot export {prepared.url} into {dest}: it exists",
                              fix="remove it or export elsewhere")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            self._write_tree(prepared.url, prepared.tree, tmp)
            for sub in prepared.submodules:
                target = tmp / sub.path
                self._write_tree(sub.url, sub.commit, target)
            if git_head:
                _minimal_git(tmp / ".git", prepared.tree, {
                    "url": prepared.url, "commit": prepared.commit, "tree": prepared.tree,
                    "changes": [_change_key(c) for c in prepared.changes],
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

    def exported(self, prepared: PreparedTree, *, git_head: bool = True) -> Path:
        """A cached export of ``prepared`` under the cache's exports/ (written once per tree)."""
        variant = json.dumps([git_head, [[s.path, s.commit] for s in prepared.submodules]])
        dest = self.cache / "exports" / f"{prepared.tree}-{hashlib.sha256(variant.encode()).hexdigest()[:12]}"
        if dest.is_dir():
            return dest
        try:
            return self.export(prepared, dest, git_head=git_head)
        except SourceError:
            if dest.is_dir():  # another process exported it meanwhile
                return dest
            raise

    def _write_tree(self, url: str, commit: str, root: Path) -> None:
        mirror = self._mirrors_dir / f"{mirror_name(url)}.git"
        listing = self._git(["ls-tree", "-r", "-z", "--full-tree", commit], git_dir=mirror, what="list tree").out
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
        self._write_blobs(mirror, root, blobs)

    def _write_blobs(self, mirror: Path, root: Path, blobs: Sequence[tuple[str, str, str]]) -> None:
        if not blobs:
            return
        argv = ["git", "--git-dir", str(mirror), "cat-file", "--batch"]
        proc = subprocess.Popen(argv, env=self._env(network=False), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for mode, sha, path in blobs:
                proc.stdin.write(f"{sha}\n".encode())
                proc.stdin.flush()
                header = proc.stdout.readline().decode()
                got, kind, size = [*header.split(), "", "", ""][:3]
                if kind != "blob" or got != sha:
                    raise SourceError(f"object {sha} for {path} is missing from {mirror}", why=header.strip(),
                                      fix="remove the mirror folder and run again")
                data = proc.stdout.read(int(size))
                proc.stdout.read(1)  # the newline after each object
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if mode == "120000":
                    os.symlink(data.decode("utf-8", "surrogateescape"), target)
                else:
                    target.write_bytes(data)
                    os.chmod(target, 0o755 if mode == "100755" else 0o644)
        finally:
            proc.stdin.close()
            proc.stdout.close()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


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


def _last_lines(text: str, n: int = 4) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("hint:")]
    return " / ".join(lines[-n:]) if lines else "(git printed nothing)"
