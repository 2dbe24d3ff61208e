"""Repository locations: how git reads a repo string, mirror folder names, insteadOf rules, submodule URLs."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from buildctl.errors import SourceError

HEX_RE = re.compile(r"^[0-9a-f]+\Z")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_RE = re.compile(r"^(?:[^@/:]+@)?[^/:]+:(?!//)")


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
