"""The git runner: the one place that starts git, with a clean environment, bounded time, and git's errors
turned into ours (``SourceError``: it answered, but not what we need; ``UnreachableError``: not in time).

Network commands get the mirror rules (``-c url.<mirror>.insteadOf=<orig>``), curl's low-speed limit and
the CA bundle; local ones run without the user's or the system's configuration, so that what buildctl
writes does not depend on who runs it. Callers put ``--`` before every positional that comes from a
manifest (URLs, refs, paths); the runner refuses a URL that would read as an option anyway.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from buildctl.errors import SourceError, UnreachableError
from buildctl.sources.urls import insteadof_args, mirror_hint

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

FailureKind = Literal["unreachable", "not-found", "auth", "other"]

# ------------------------------------------------------------------------------ reading git's output


def parse_git_version(text: str) -> tuple[int, int]:
    """``git version 2.39.5`` (or ``2.45.1.windows.1``, ``2.39.3 (Apple Git-146)``) -> (2, 39)."""
    m = re.search(r"(\d+)\.(\d+)", text)
    if not m:
        raise SourceError(f"cannot read the git version from {text.strip()!r}")
    return int(m.group(1)), int(m.group(2))



def parse_gitmodules(text: str) -> dict[str, str]:
    """``git config -z --list`` output of a .gitmodules blob -> {path: url}."""
    entries: dict[str, dict[str, str]] = {}
    for item in filter(None, text.split("\0")):
        key, _, value = item.partition("\n")
        m = re.match(r"^submodule\.(.+)\.(path|url)\Z", key)
        if m:
            entries.setdefault(m.group(1), {})[m.group(2)] = value
    return {e["path"].strip("/"): e["url"] for e in entries.values() if "path" in e and "url" in e}


def parse_nul_records(text: str, width: int) -> list[tuple[str, ...]]:
    """Output of ``git show -s -z --format=F1%x00F2%x00...`` (``width`` fields a commit) -> one tuple a commit.

    Every field ends in NUL (``-z`` ends each commit's record with one too), so a field may hold any other
    character: a subject's CR, FF, VT, FS/GS/RS, NEL, U+2028 or U+2029 (that ``str.splitlines`` would split at)
    stays inside its field. Output that does not come in whole records is refused, not half-read."""
    fields = text.split("\0")
    if fields and fields[-1] in ("", "\n"):
        fields.pop()
    if len(fields) % width:
        raise ValueError(f"git printed {len(fields)} NUL-separated field(s), not records of {width}")
    return [tuple(fields[i:i + width]) for i in range(0, len(fields), width)]


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
    for line in text.split("\n"):  # git ends lines with LF only: a ref may hold U+2028, CR, ...
        sha, _, ref = line.partition("\t")
        if ref.endswith("^{}"):  # a peeled tag (ls-remote without --refs): the tag itself is listed too
            continue
        if ref.startswith(("refs/heads/", "refs/tags/")) or (
            pulls and re.fullmatch(r"refs/pull/[^/]+/head", ref)
        ):
            out[ref] = sha
    return out


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


@dataclass(frozen=True, kw_only=True)
class Result:
    rc: int
    out: str
    err: str


class _Timeout(Exception):
    pass


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


def last_lines(text: str, count: int = 4) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("hint:")]
    return " / ".join(lines[-count:]) if lines else "(git printed nothing)"


class BlobReader:
    """`git cat-file --batch` kept open: objects read one after the other through one process."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self._stdin = stdin
        self._stdout = stdout

    def read(self, sha: str) -> tuple[str, bytes | None]:
        """(git's header line, the content) of blob ``sha``; content None when it is not a blob here."""
        self._stdin.write(f"{sha}\n".encode())
        self._stdin.flush()
        header = self._stdout.readline().decode()
        got, kind, size = [*header.split(), "", "", ""][:3]
        if kind != "blob" or got != sha:
            if kind and kind != "missing" and size.isdigit():  # another kind of object: skip its content
                self._stdout.read(int(size) + 1)
            return header.strip(), None
        data = self._stdout.read(int(size))
        self._stdout.read(1)  # the newline after each object
        return header.strip(), data


class Git:
    """Runs git for one configuration: mirror rules, network timeout, CA bundle."""

    def __init__(self, *, mirrors: Mapping[str, str] | None = None, network_timeout: float = 10.0,
                 ca_bundle: Path | None = None) -> None:
        self.mirrors = dict(mirrors or {})
        self.network_timeout = float(network_timeout)
        # The configured CA bundle (a TLS-intercepting proxy's): git over https trusts it as pip does.
        self.ca_bundle = ca_bundle
        self._ssh_default: bool | None = None
        self._git_checked = False

    def env(self, *, network: bool) -> dict[str, str]:
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
            _, out, _ = _run_process(["git", "--version"], env=self.env(network=False), cwd=None, timeout=60,
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

    def run(self, args: Sequence[str], *, git_dir: Path | None = None, cwd: Path | None = None,
            network: bool = False, timeout: float | None = None, input_bytes: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = True, what: str = "",
            url: str = "") -> Result:
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
        full_env = self.env(network=network)
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
                    f"git remote {self.display(url)} did not answer within {limit:g}s ({what or args[0]})",
                    why="the host accepts no connection or sends nothing (a firewall, an air-gapped site)",
                    fix=mirror_hint(url),
                ) from None
            raise SourceError(f"git {args[0]} took longer than {limit:g}s ({what})",
                              fix="look for a stuck process or a very slow disk, then run again") from None
        result = Result(rc=rc, out=out.decode("utf-8", "replace"), err=err.decode("utf-8", "replace"))
        if check and rc != 0:
            if network:
                self.raise_network(result, url=url, what=what or " ".join(args[:1]))
            raise SourceError(f"git {' '.join(args[:2])} failed ({what})" if what else f"git {args[0]} failed",
                              why=last_lines(result.err))
        return result

    def display(self, url: str) -> str:
        """``url``, plus where git really goes when a mirror rule rewrites it."""
        if not url:
            return "(unknown)"
        effective = self.effective_url(url)
        return url if effective == url else f"{url} (mapped to {effective})"

    def effective_url(self, url: str) -> str:
        """The URL git fetches after insteadOf rules (the user's and Config.git_mirrors) are applied."""
        try:
            rc, out, _ = _run_process(["git", *insteadof_args(self.mirrors), "ls-remote", "--get-url", "--", url],
                                      env=self.env(network=True), cwd=None, timeout=self.network_timeout,
                                      input_bytes=None)
        except (OSError, _Timeout):
            return url
        return (out.decode().strip() or url) if rc == 0 else url

    def raise_network(self, result: Result, *, url: str, what: str) -> None:
        kind = classify_failure(result.err)
        shown = self.display(url)
        why = last_lines(result.err)
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
    def blobs(self, git_dir: Path) -> Iterator[BlobReader]:
        """A ``BlobReader`` on ``git_dir`` (one process for all the blobs of an export)."""
        if not self._git_checked:
            self._check_git()
        argv = ["git", "--git-dir", str(git_dir), "cat-file", "--batch"]
        proc = subprocess.Popen(argv, env=self.env(network=False), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            yield BlobReader(proc.stdin, proc.stdout)
        finally:
            proc.stdin.close()
            proc.stdout.close()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
