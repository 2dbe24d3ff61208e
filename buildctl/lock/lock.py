"""`buildctl lock`: pin every floating value of a manifest, and say what drifted since.

``resolve(manifest, variant, resolvers, config)`` turns one variant into a ``VariantLock``:

- base image tag -> manifest digest, through the registry API (``Registry``), asked through a
  configured mirror when the manifest's registry has one (nvcr.io -> mirror);
- git: short SHA -> full SHA, branch -> head, PR -> head (refs/pull/N/head), submodule SHAs, the
  tree after applying PRs and patches (``GitResolver``, backed by sources.py);
- downloads marked ``sha256: compute`` -> sha256 of the file, fetched on the host (``Fetcher``);
- pip and apt -> exact versions, resolved INSIDE the pulled base (``InBase``), so that what the base
  already has, and its PIP_CONSTRAINT file, count; pip file hashes from the index (``PackageIndex``).

Everything is resolved before anything is written, and the file is written once, atomically:
a failure anywhere leaves the previous lock as it was. ``check`` re-resolves and returns the
differences (``Drift``); it writes nothing. The seams are Protocols so unit tests use data.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol, assert_never

from debian.debian_support import Version as DebianVersion
from packaging.utils import canonicalize_name

from buildctl.config import Config, mirror_url
from buildctl.errors import BuildctlError, EngineError, LockDrift, LockError, SourceError, UnreachableError
from buildctl.graph import graph
from buildctl.lock.lockfile import (
    DraggedCommit,
    Lock,
    LockedBase,
    LockedChange,
    LockedComponent,
    LockedDownload,
    LockedPatch,
    LockedPick,
    LockedPip,
    LockedPr,
    PrMode,
    VariantLock,
)
from buildctl.manifest.model import (
    SHA256_COMPUTE,
    Component,
    Manifest,
    PipConstraintPolicy,
    PipRequirement,
    Variant,
)

# ------------------------------------------------------------------------------------------ seams


class Registry(Protocol):
    """The registry API (Engine.registry_digest): None when the tag does not exist."""

    def registry_digest(self, ref: str) -> str | None: ...


class GitResolver(Protocol):
    """Git questions the lock asks (sources.py answers them, honouring git mirrors)."""

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        """Full SHA of a 7..40 digit prefix (ambiguous: SourceError listing the candidates); with
        ``branch``, the commit must be on it."""
        ...

    def branch_head(self, repo: str, branch: str) -> str: ...

    def pr_head(self, repo: str, number: int) -> str: ...

    def pr_change(self, repo: str, base: str, number: int, head: str, *, target: str = "main",
                  mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
        """The PR's own commits (and, mode merge, what the merge drags in besides)."""
        ...

    def apply(self, repo: str, commit: str, changes: Sequence[LockedChange], patch_paths: Mapping[str, Path]
              ) -> Applied:
        """Apply the changes in order: the resulting commit, empty picks, gitlinks of the result."""
        ...


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What applying a component's changes gave."""

    tree: str
    empty: tuple[str, ...] = ()  # upstream commits whose pick changed nothing
    gitlinks: Mapping[str, str] = field(default_factory=dict)  # submodule path -> SHA in `tree`


class Fetcher(Protocol):
    """Plain downloads on the host, with the user's CA bundle and a bounded timeout."""

    def sha256(self, url: str) -> str: ...

    def content(self, url: str) -> bytes: ...


class PackageIndex(Protocol):
    """sha256 of every file of ``name==version`` that pip may install where ``tags`` are supported."""

    def file_hashes(self, name: str, version: str, tags: Sequence[str]) -> tuple[str, ...]: ...


@dataclass(frozen=True, kw_only=True)
class ProbeRequest:
    """What to ask pip and apt inside the base image."""

    pip: tuple[str, ...] = ()  # runtime requirement lines, resolved after the removals
    build_pip: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # component -> lines
    apt: tuple[str, ...] = ()  # every apt package name to look up (runtime, cuDNN, build)
    apt_sources: Mapping[str, str] = field(default_factory=dict)  # repo name -> sources.list line
    files: Mapping[str, bytes] = field(default_factory=dict)  # keyrings, at their destination
    apt_debs: tuple[str, ...] = ()  # keyring packages to dpkg -i before apt-get update
    remove_pip: tuple[str, ...] = ()
    remove_paths: tuple[str, ...] = ()
    unset_constraint: bool = False

    @property
    def needed(self) -> bool:
        return bool(self.pip or self.build_pip or self.apt)


@dataclass(frozen=True, kw_only=True)
class PipInstall:
    """One distribution pip would install (from its --report)."""

    name: str
    version: str
    url: str = ""
    sha256: str | None = None
    requested: bool = False


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    python: str = ""  # x.y.z of the base's python3
    tags: tuple[str, ...] = ()  # wheel tags the base's pip supports, most preferred first
    installed: Mapping[str, str] = field(default_factory=dict)  # canonical name -> version, as shipped
    installed_after_remove: Mapping[str, str] = field(default_factory=dict)
    pip: tuple[PipInstall, ...] = ()
    build_pip: Mapping[str, tuple[PipInstall, ...]] = field(default_factory=dict)
    apt: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # package -> versions offered


class InBase(Protocol):
    """Runs pip and apt questions inside the base image ``image`` (pulled when needed)."""

    def probe(self, *, image: str, platform: str, request: ProbeRequest) -> ProbeResult: ...


@dataclass(frozen=True, kw_only=True)
class Resolvers:
    registry: Registry
    git: GitResolver
    in_base: InBase
    index: PackageIndex
    fetch: Fetcher


# ------------------------------------------------------------------------------------------ base


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    """A parsed image reference: registry host, repository path, tag and/or digest."""

    host: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @staticmethod
    def parse(ref: str) -> ImageRef:
        name, _, digest = ref.partition("@")
        head, _, rest = name.partition("/")
        # Docker's rule: the first component is a registry host when it has a '.' or ':' or is localhost.
        if rest and ("." in head or ":" in head or head == "localhost"):
            host, path = head, rest
        else:
            host, path = "docker.io", name if "/" in name else f"library/{name}"
        tag = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, _, tag = path.rpartition(":")
        if not digest and not tag:
            tag = "latest"
        return ImageRef(host=host, path=path, tag=tag, digest=digest or None)

    def name(self, host: str | None = None) -> str:
        return f"{host or self.host}/{self.path}"

    def with_tag(self, host: str | None = None) -> str:
        return f"{self.name(host)}:{self.tag}" if self.tag else self.name(host)


def mirror_for(ref: ImageRef, mirrors: Mapping[str, str]) -> str | None:
    return mirrors.get(ref.host)


def resolve_base(stack: str, variant: Variant, registry: Registry, mirrors: Mapping[str, str]) -> tuple[LockedBase, str]:
    """(locked base, the reference to pull it by: through the mirror, by digest)."""
    ref = ImageRef.parse(variant.image)
    mirror = mirror_for(ref, mirrors)
    if ref.digest and not ref.tag:
        return (LockedBase(ref=variant.image, digest=ref.digest, platform=variant.platform),
                f"{ref.name(mirror)}@{ref.digest}")
    query = ref.with_tag(mirror)
    via = f" through the mirror {mirror}" if mirror else ""
    try:
        digest = registry.registry_digest(query)
    except UnreachableError as exc:
        raise UnreachableError(
            f"cannot lock {stack}/{variant.name} here: the base image {variant.image} cannot be reached"
            f"{via} (registry {mirror or ref.host})",
            why=f"{exc.what}{'; ' + exc.why if exc.why else ''}",
            fix=(f"check that the mirror {mirror} is up and holds {ref.path}:{ref.tag}" if mirror else
                 f"lock on a machine that reaches {ref.host}, or configure a mirror that holds "
                 f"{ref.path}: registry_mirrors = {{ \"{ref.host}\" = \"HOST:PORT\" }} in the buildctl "
                 f"configuration (or BUILDCTL_REGISTRY_MIRRORS={ref.host}=HOST:PORT)"),
        ) from exc
    if digest is None:
        raise LockError(
            f"cannot lock {stack}/{variant.name}: the base image {query} does not exist",
            why=f"the registry {mirror or ref.host} has no tag {ref.tag!r} for {ref.path}",
            fix=f"correct variants.{variant.name}.image in the manifest, or push the image" +
                (f" to the mirror {mirror}" if mirror else ""),
        )
    if ref.digest and ref.digest != digest:
        raise LockError(
            f"base image {variant.image}: the tag now points at {digest}, not the digest given",
            fix="drop the tag or the digest from the reference, or update the digest",
        )
    return LockedBase(ref=variant.image, digest=digest, platform=variant.platform), f"{ref.name(mirror)}@{digest}"


# ------------------------------------------------------------------------------------------ git


def repo_location(repo: str, base_dir: Path) -> str:
    """A git URL as is; a plain path relative to the manifest's folder, made absolute."""
    if "://" in repo or re.match(r"^[\w.-]+@[\w.-]+:", repo):
        return repo
    return str((base_dir / repo).resolve())


def _in_component(c: Component, exc: BuildctlError) -> BuildctlError:
    what = f"component {c.name} ({c.at.file}:{c.at.line}): {exc.what}" if c.at.line else \
        f"component {c.name}: {exc.what}"
    return type(exc)(what, why=exc.why, fix=exc.fix)


def resolve_component(c: Component, git: GitResolver, base_dir: Path,
                      notes: list[str] | None = None) -> LockedComponent:
    """Lock one git component: base commit, each change exactly (a PR's commits), the resulting tree,
    what changes drag in, submodule gitlinks. ``notes`` collects what the user must hear (a PR merged
    upstream, picks that changed nothing)."""
    repo = repo_location(c.repo, base_dir)
    notes = notes if notes is not None else []
    try:
        commit = git.resolve_commit(repo, c.commit, branch=c.branch)
        branch_head = git.branch_head(repo, c.branch) if c.branch else ""
        changes: list[LockedChange] = []
        dragged: list[DraggedCommit] = []
        patch_paths: dict[str, Path] = {}
        for ch in c.steps:
            if ch.commit is not None:
                changes.append(LockedPick(sha=git.resolve_commit(repo, ch.commit)))
            elif ch.pr is not None:
                head = git.pr_head(repo, ch.pr)
                if ch.head and not head.startswith(ch.head):
                    raise LockDrift(
                        f"PR #{ch.pr} has moved: its head is now {head}, the manifest reviewed {ch.head}",
                        why="someone pushed to the PR since its head was written into the manifest",
                        fix=f"review the new commits, then set head: {head} for PR #{ch.pr} "
                            "(or drop head: to follow the PR)",
                    )
                pr, drags = git.pr_change(repo, commit, ch.pr, head, target=ch.target, mode=ch.apply)
                changes.append(pr)
                dragged += drags
            else:
                assert ch.patch is not None
                path = base_dir / ch.patch
                changes.append(LockedPatch(file=ch.patch, sha256=_sha256_file(path)))
                patch_paths[ch.patch] = path
        applied = git.apply(repo, commit, changes, patch_paths)
    except (SourceError, UnreachableError, LockError) as exc:
        raise _in_component(c, exc) from exc
    final: list[LockedChange] = []
    for lc in changes:
        if isinstance(lc, LockedPr):
            empty = tuple(s for s in lc.commits if s in applied.empty)
            lc = dataclasses.replace(lc, empty=empty)
            notes.extend(pr_notes(c.name, lc))
        elif isinstance(lc, LockedPick) and lc.sha in applied.empty:
            notes.append(f"{c.name}: commit {lc.sha[:12]} changed nothing: the base has its change already")
        final.append(lc)
    # declared in the manifest; the placeholder itself is written by sources.export, where a mirror lacks the blob
    notes.extend(f"{c.name}: {mo.path} (blob {mo.blob[:12]}) of {mo.repo} may be missing from its mirror: an export "
                 f"then holds a placeholder there ({mo.why})" for mo in c.missing_objects)
    return LockedComponent(name=c.name, repo=c.repo, commit=commit, changes=tuple(final), dragged=tuple(dragged),
                           submodules=dict(applied.gitlinks) if c.submodules else {}, tree=applied.tree,
                           branch_head=branch_head)


def pr_notes(component: str, pr: LockedPr) -> list[str]:
    """What a user must be told about how a PR was applied (never silent about applying nothing)."""
    out: list[str] = []
    where = f"{component}: PR #{pr.number}"
    mu = pr.merged_upstream
    if mu is not None and mu.how == "merge":
        out.append(f"{where} is merged into {pr.target} already (merge commit {mu.commit[:12]}): applied as its "
                   f"{len(pr.commits)} commit(s) {mu.commit[:12]}^1..{mu.commit[:12]}^2")
    elif mu is not None:
        out.append(f"{where} is in {pr.target} already with the same commits (fast-forward or rebase merge): "
                   "it has no commits of its own, nothing is applied for it")
    elif pr.mode == "own-commits" and not pr.commits:
        out.append(f"{where} has no commits of its own (its head is on {pr.target}): nothing is applied for it")
    if pr.empty and pr.mode == "own-commits":
        all_empty = len(pr.empty) == len(pr.commits)
        out.append(f"{where}: {'all' if all_empty else len(pr.empty)} of its {len(pr.commits)} commit(s) changed "
                   "nothing: the base has their change already (merged upstream by squash or rebase?)"
                   + (" - the PR adds nothing to this tree" if all_empty else ""))
    return out


def _sha256_file(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise LockError(f"cannot read patch {path}: {exc.strerror}") from exc


# ------------------------------------------------------------------------------------------ downloads


def resolve_downloads(m: Manifest, v: Variant, fetch: Fetcher, *, names: set[str] | None = None
                      ) -> tuple[dict[str, LockedDownload], dict[str, bytes]]:
    """(locked downloads for the variant's platform, contents of the apt keyrings by download name)."""
    keyrings = {r.keyring for r in m.apt.repos if r.keyring}
    locked: dict[str, LockedDownload] = {}
    contents: dict[str, bytes] = {}
    for d in m.downloads:
        if names is not None and d.name not in names:
            continue
        pu = d.for_platform(v.platform)
        if pu is None:
            continue
        compute = pu.sha256 == SHA256_COMPUTE
        if d.name in keyrings:
            data = fetch.content(pu.url)
            sha = hashlib.sha256(data).hexdigest()
            if not compute and sha != pu.sha256:
                raise LockError(f"download {d.name}: {pu.url} has sha256 {sha}, the manifest says {pu.sha256}",
                                fix="check the URL; update the sha256 only if the new file is trusted")
            contents[d.name] = data
        else:
            sha = fetch.sha256(pu.url) if compute else pu.sha256
        locked[d.name] = LockedDownload(name=d.name, url=pu.url, sha256=sha, computed=compute)
    return locked, contents


# ------------------------------------------------------------------------------------------ pip + apt


def cudnn_pattern(m: Manifest, v: Variant) -> tuple[str, str] | None:
    spec = m.cudnn_for(v)
    if spec is None:
        return None
    return spec.package, spec.apt_version or f"{spec.version}-*"


def download_wheels(m: Manifest, v: Variant, downloads: Mapping[str, LockedDownload],
                    mirrors: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Canonical name -> (requirement line, sha256) of each ``install: pip`` download of the variant.

    The line is a direct reference with the locked checksum (``name @ URL#sha256=...``): pip in the base
    resolves the wheel together with the pip requirements, so that the wheel's own requirements are
    locked with them, and checks that it installs in that base.
    """
    out: dict[str, tuple[str, str]] = {}
    for d in m.downloads:
        if d.install != "pip" or d.name not in downloads:
            continue
        w = graph.download_wheel(d, v.platform)
        if w is None:
            continue
        name, _version, _filename, url = w
        sha = downloads[d.name].sha256
        out[name] = (f"{name} @ {mirror_url(url, mirrors or {})}#sha256={sha}", sha)
    return out


def probe_request(m: Manifest, v: Variant, keyrings: Mapping[str, bytes],
                  wheels: Mapping[str, tuple[str, str]] | None = None) -> ProbeRequest:
    apt_names = [p.name for p in m.apt.packages]
    cud = cudnn_pattern(m, v)
    if cud:
        apt_names.append(cud[0])
    for c in m.components:
        apt_names.extend(p.name for p in c.build.apt)
    sources: dict[str, str] = {}
    files: dict[str, bytes] = {}
    debs: list[str] = []
    downloads = {d.name: d for d in m.downloads}
    if apt_names:
        for r in m.apt.repos:
            line = r.lines.get(v.platform) or r.lines.get("any")
            if line is None:
                continue
            sources[r.name] = line
            if r.keyring and r.keyring in keyrings:
                dest = downloads[r.keyring].dest
                files[dest] = keyrings[r.keyring]
                if dest.endswith(".deb"):
                    debs.append(dest)
    return ProbeRequest(
        pip=(*(r.text for r in graph.runtime_requirements(m)), *(line for line, _ in (wheels or {}).values())),
        build_pip={c.name: tuple(r.text for r in c.build.requires) for c in m.components if c.build.requires},
        apt=tuple(dict.fromkeys(apt_names)),
        apt_sources=sources, files=files, apt_debs=tuple(debs),
        remove_pip=m.remove.pip, remove_paths=m.remove.paths,
        unset_constraint=m.pip.constraint is PipConstraintPolicy.UNSET,
    )


def pip_pins(requirements: Sequence[PipRequirement], installs: Iterable[PipInstall],
             installed: Mapping[str, str], tags: Sequence[str], index: PackageIndex, *, where: str,
             downloads: Mapping[str, str] | None = None) -> tuple[LockedPip, ...]:
    """What pip would install (exact version + file hashes) and the requirements the base satisfies.

    ``downloads``: canonical name -> sha256 of the wheels the manifest downloads: their hash is the
    download's, not the index's (the index does not have them).
    """
    out: dict[str, LockedPip] = {}
    for i in installs:
        name = canonicalize_name(i.name)
        if downloads and name in downloads:
            out[name] = LockedPip(name=name, version=i.version, hashes=(f"sha256:{downloads[name]}",))
            continue
        hashes = set(index.file_hashes(name, i.version, tags))
        if i.sha256:
            hashes.add(f"sha256:{i.sha256}")
        sdist = _is_sdist(i.url)
        if not hashes:
            raise LockError(f"no file hash for {name}=={i.version} (wanted by {where})",
                            why=f"the index lists no file of it that fits the base, and pip's report has none "
                                f"(it came from {i.url or 'an unknown location'})",
                            fix="check the index settings (pip_index_url, pip_extra_index_urls)")
        out[name] = LockedPip(name=name, version=i.version, hashes=tuple(sorted(hashes)), sdist=sdist)
    for r in requirements:
        if r.name in out:
            continue
        version = installed.get(r.name)
        if version is None:
            raise LockError(f"pip neither installs {r.text!r} nor finds it installed in {where}",
                            why="pip's report and the base's installed distributions disagree",
                            fix="run `pip install --dry-run` for it inside the base image to see why")
        out[r.name] = LockedPip(name=r.name, version=version, in_base=True)
    return tuple(sorted(out.values(), key=lambda p: p.name))


def _is_sdist(url: str) -> bool:
    """Whether pip's report says it would build this distribution from a source archive."""
    path = url.split("#", 1)[0].split("?", 1)[0].lower()
    return bool(path) and path.endswith((".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar"))


def check_protected(m: Manifest, installs: Iterable[PipInstall], installed: Mapping[str, str], *, where: str) -> None:
    """A protected base package may only be replaced when the manifest says so (protect.replace)."""
    removed = {canonicalize_name(n) for n in m.remove.pip}
    allowed = {canonicalize_name(n) for n in m.protect.replace}
    for i in installs:
        name = canonicalize_name(i.name)
        have = installed.get(name)
        if have is None or have == i.version or name in removed or name in allowed:
            continue
        if any(fnmatch.fnmatchcase(name, pat) for pat in m.protect.packages):
            raise LockError(
                f"the pip requirements would replace the base's protected {name} {have} with {i.version} ({where})",
                why="a requirement (or one of its dependencies) needs another version of a package "
                    "the manifest protects",
                fix=f"pin a requirement version that works with {name} {have}, or list {name} under "
                    "protect.replace if replacing it is intended",
            )


def newest_first(package: str, versions: Iterable[str], *, where: str) -> list[str]:
    """``versions`` as dpkg orders them (python-debian's ``Version``), newest first."""
    try:
        return sorted(set(versions), key=DebianVersion, reverse=True)
    except ValueError as exc:  # a version that is not a Debian version at all
        raise LockError(f"apt package {package}: {where} offers a version that is not a Debian version",
                        why=str(exc), fix="check the apt sources configured for it (apt.repos)") from exc


def select_apt(package: str, pattern: str, available: Iterable[str], *, where: str) -> str:
    """The exact version to lock for ``package`` given the manifest's ``pattern``.

    ``pattern`` is an exact version, ``*`` (any: the highest offered) or a glob such as ``1.6*``
    (the highest offered version that matches). ``where`` names the base image for messages.
    """
    offered = newest_first(package, available, where=where)
    if not offered:
        raise LockError(
            f"apt package {package} is not offered by the apt sources of {where}",
            why="apt-cache madison lists no version of it (a typo, a virtual package, or a repository "
                "that is not configured)",
            fix="check the package name, or add its repository under apt.repos in the manifest",
        )
    if "*" not in pattern and "?" not in pattern:
        if pattern in offered:
            return pattern
        raise LockError(
            f"apt package {package}={pattern} is not offered by {where}",
            why=f"offered versions: {', '.join(offered[:8])}",
            fix=f"pin one of the offered versions, or a pattern such as {package}={pattern.split('-')[0]}*",
        )
    matching = [v for v in offered if fnmatch.fnmatchcase(v, pattern)]
    if not matching:
        raise LockError(
            f"no version of apt package {package} matches {pattern!r} in {where}",
            why=f"offered versions: {', '.join(offered[:8])}",
            fix="change the version pattern in the manifest to one of these",
        )
    return matching[0]


def resolve_apt(packages: Iterable[tuple[str, str]], offered: Mapping[str, Sequence[str]], *, where: str) -> dict[str, str]:
    return {name: select_apt(name, pattern, offered.get(name, ()), where=where) for name, pattern in packages}


# ------------------------------------------------------------------------------------------ resolve


def _now() -> datetime:
    return datetime.now(UTC)


# Section groups `lock --only` picks from (a partial lock records the rest as not asked).
GROUPS = ("base", "git", "downloads", "packages")


def _sections_of_packages(m: Manifest, v: Variant) -> list[str]:
    """The lock sections the in-base probe fills for this variant."""
    out = []
    if m.apt.packages or m.cudnn_for(v) is not None:
        out.append("apt")
    if any(c.build.apt for c in m.components):
        out.append("build_apt")
    if m.pip.requirements:
        out.append("pip")
    if any(c.build.requires for c in m.components):
        out.append("build_pip")
    return out


def _why(exc: BuildctlError) -> str:
    return exc.what + (f" ({exc.why})" if exc.why else "")


def resolve(m: Manifest, v: Variant, resolvers: Resolvers, config: Config, *,
            now: Callable[[], datetime] = _now, partial: bool = False, only: Iterable[str] | None = None,
            notes: list[str] | None = None) -> VariantLock:
    """Pin every floating value of variant ``v``; raises (and returns nothing) on any failure.

    ``partial``: a section whose host cannot be reached (UnreachableError; for the in-base probe also an
    engine that is not there) is recorded in ``missing`` with the reason instead of failing the lock.
    ``only``: resolve these groups (GROUPS) alone; the others are recorded as not asked (needs partial).
    """
    base_dir = Path(m.path).parent if m.path else Path.cwd()
    wanted = set(GROUPS if only is None else only)
    not_asked = f"not asked (lock --only {','.join(sorted(wanted))})"
    missing: dict[str, str] = {}

    def tolerate(section: str, exc: BuildctlError) -> None:
        if not partial or not isinstance(exc, UnreachableError | EngineError):
            raise exc
        missing[section] = _why(exc)

    base: LockedBase | None = None
    pull_ref = ""
    if "base" in wanted:
        try:
            base, pull_ref = resolve_base(m.stack, v, resolvers.registry, config.registry_mirrors)
        except BuildctlError as exc:
            tolerate("base", exc)
    else:
        missing["base"] = not_asked
    components: dict[str, LockedComponent] = {}
    for c in m.components:
        if "git" not in wanted:
            missing[f"components.{c.name}"] = not_asked
            continue
        try:
            components[c.name] = resolve_component(c, resolvers.git, base_dir, notes)
        except BuildctlError as exc:
            tolerate(f"components.{c.name}", exc)
    downloads: dict[str, LockedDownload] = {}
    keyrings: dict[str, bytes] = {}
    for d in m.downloads:
        if "downloads" not in wanted:
            if d.for_platform(v.platform) is not None:
                missing[f"downloads.{d.name}"] = not_asked
            continue
        try:
            got, content = resolve_downloads(m, v, resolvers.fetch, names={d.name})
        except BuildctlError as exc:
            tolerate(f"downloads.{d.name}", exc)
            continue
        downloads.update(got)
        keyrings.update(content)
    wheels = download_wheels(m, v, downloads, config.download_mirrors)
    request = probe_request(m, v, keyrings, wheels)
    pip: tuple[LockedPip, ...] = ()
    build_pip: dict[str, tuple[LockedPip, ...]] = {}
    apt: dict[str, str] = {}
    build_apt: dict[str, dict[str, str]] = {}
    probe_sections = _sections_of_packages(m, v)
    blocked = ""
    if "packages" not in wanted:
        blocked = not_asked
    elif base is None and request.needed:
        blocked = f"resolved inside the base image, which is not locked ({missing.get('base', '')})"
    elif request.needed:
        lacking = [r.keyring for r in m.apt.repos if r.keyring and f"downloads.{r.keyring}" in missing]
        wheels_missing = [d.name for d in m.downloads if d.install == "pip" and f"downloads.{d.name}" in missing]
        if lacking and any(s in probe_sections for s in ("apt", "build_apt")):
            blocked = f"needs the apt keyring download {', '.join(lacking)}, which is not locked"
        elif wheels_missing:
            blocked = f"resolved together with the wheel download {', '.join(wheels_missing)}, which is not locked"
    if blocked:
        missing.update({s: blocked for s in probe_sections})
    elif request.needed:
        assert base is not None
        where = f"{v.image} ({v.platform})"
        try:
            result = resolvers.in_base.probe(image=pull_ref, platform=v.platform, request=request)
        except BuildctlError as exc:
            tolerate("packages", exc)
            why = missing.pop("packages")
            missing.update({s: why for s in probe_sections})
        else:
            if result.python and not (result.python + ".").startswith(v.python + "."):
                raise LockError(f"{m.stack}/{v.name}: the base's python is {result.python}, the variant says {v.python}",
                                fix=f"set variants.{v.name}.python: \"{'.'.join(result.python.split('.')[:2])}\"")
            check_protected(m, result.pip, result.installed, where=where)
            pip = pip_pins(graph.runtime_requirements(m), result.pip, result.installed_after_remove, result.tags,
                           resolvers.index, where=where, downloads={n: sha for n, (_, sha) in wheels.items()})
            for c in m.components:
                if c.build.requires:
                    build_pip[c.name] = pip_pins(c.build.requires, result.build_pip.get(c.name, ()),
                                                 result.installed, result.tags, resolvers.index,
                                                 where=f"{where}, build requirements of {c.name}")
            wanted_apt = [(p.name, p.version) for p in m.apt.packages]
            cud = cudnn_pattern(m, v)
            if cud:
                wanted_apt.append(cud)
            apt = resolve_apt(wanted_apt, result.apt, where=where)
            for c in m.components:
                if c.build.apt:
                    build_apt[c.name] = resolve_apt([(p.name, p.version) for p in c.build.apt], result.apt,
                                                    where=f"{where}, build dependencies of {c.name}")
    if missing and not partial:
        raise LockError(f"{m.stack}/{v.name}: --only leaves sections unlocked", fix="add --partial")
    return VariantLock(base=base, apt=apt, build_apt=build_apt, downloads=downloads, pip=pip,
                       build_pip=build_pip, components=components, missing=missing,
                       resolved_at=now().strftime("%Y-%m-%dT%H:%M:%SZ"))


# ------------------------------------------------------------------------------------------ the file


def _content(v: VariantLock) -> dict[str, object]:
    data = v.to_json()
    data.pop("resolved_at")
    return data


@dataclass(frozen=True, kw_only=True)
class LockOutcome:
    lock: Lock
    resolved: Mapping[str, VariantLock]
    unchanged: tuple[str, ...]  # resolved variants whose content did not change
    stale: tuple[str, ...]  # variants kept from a lock of an older manifest
    dropped: tuple[str, ...]  # variants no longer in the manifest, removed from the lock
    notes: tuple[str, ...] = ()  # how changes were applied, where the user must hear it (merged PRs, empty picks)


def lock_stack(m: Manifest, manifest_sha256: str, variants: Sequence[str], resolvers: Resolvers, config: Config,
               existing: Lock | None, *, now: Callable[[], datetime] = _now, partial: bool = False,
               only: Iterable[str] | None = None) -> LockOutcome:
    """The new lock: ``variants`` resolved, every other variant's entry kept as it was."""
    notes: list[str] = []
    resolved = {name: resolve(m, m.variant(name), resolvers, config, now=now, partial=partial, only=only,
                              notes=notes) for name in variants}
    known = {v.name for v in m.variants}
    kept = dict(existing.variants) if existing is not None and existing.stack == m.stack else {}
    dropped = tuple(sorted(n for n in kept if n not in known))
    merged = {n: v for n, v in kept.items() if n in known}
    unchanged = []
    for name, new in resolved.items():
        old = merged.get(name)
        if old is not None and _content(old) == _content(new):
            # Keep the old time too, so that re-locking an unchanged stack leaves the file unchanged.
            new = dataclasses.replace(new, resolved_at=old.resolved_at)
            unchanged.append(name)
        merged[name] = new
    stale = tuple(sorted(n for n in merged if n not in resolved and existing is not None
                         and existing.manifest_sha256 != manifest_sha256))
    return LockOutcome(lock=Lock(stack=m.stack, manifest_sha256=manifest_sha256, variants=merged),
                       resolved=resolved, unchanged=tuple(unchanged), stale=stale, dropped=dropped,
                       notes=tuple(dict.fromkeys(notes)))


# ------------------------------------------------------------------------------------------ drift


DriftKind = Literal["manifest", "variant", "base", "component", "commit", "branch", "pr", "pick", "submodule",
                    "patch", "tree", "download", "pip", "build-pip", "apt", "build-apt", "missing"]

NONE = "(none)"


@dataclass(frozen=True, kw_only=True)
class Drift:
    """One difference between the lock and what the pins resolve to now."""

    variant: str  # "" for the whole stack
    kind: DriftKind
    subject: str
    old: str
    new: str

    def message(self) -> str:
        s, o, n = self.subject, self.old, self.new
        match self.kind:
            case "manifest":
                text = f"the manifest {s} was edited since locking (sha256 {o[:12]} -> {n[:12]})"
            case "variant":
                text = f"variant {s} is not in the lock"
            case "base":
                text = f"base image {s} moved: {o} -> {n}"
            case "commit":
                text = f"{s}: the commit now resolves to {n}, the lock has {o}"
            case "branch":
                text = f"{s} moved: {o} -> {n}"
            case "pr":
                text = f"{s} head changed: {o} -> {n}"
            case "patch":
                text = f"{s}: sha256 {o} -> {n}"
            case "tree":
                text = f"{s} after applying PRs and patches: {o} -> {n}"
            case "download":
                text = f"download {s}: {o} -> {n}"
            case "pip":
                text = f"pip {s}: {o} -> {n}"
            case "apt":
                text = f"apt {s}: {o} -> {n}"
            case "component":
                text = f"component {s}: {o} -> {n}"
            case "missing":
                text = f"{s}: {o} -> {n}"
            case "submodule" | "build-pip" | "build-apt" | "pick":
                text = f"{s}: {o} -> {n}"
            case _:
                assert_never(self.kind)
        return f"{self.variant}: {text}" if self.variant else text

    def to_json(self) -> dict[str, str]:
        return {"variant": self.variant, "kind": self.kind, "subject": self.subject, "old": self.old,
                "new": self.new, "message": self.message()}


def _pip_text(p: LockedPip | None) -> str:
    if p is None:
        return NONE
    return f"{p.version} (in base)" if p.in_base else p.version


def _diff_pips(variant: str, kind: DriftKind, prefix: str, old: Iterable[LockedPip], new: Iterable[LockedPip]
               ) -> list[Drift]:
    o = {p.name: p for p in old}
    n = {p.name: p for p in new}
    out = []
    for name in sorted(set(o) | set(n)):
        a, b = o.get(name), n.get(name)
        if a is not None and b is not None and (a.version, a.in_base) == (b.version, b.in_base):
            if a.hashes != b.hashes:
                added, removed = len(set(b.hashes) - set(a.hashes)), len(set(a.hashes) - set(b.hashes))
                out.append(Drift(variant=variant, kind=kind, subject=f"{prefix}{name}=={a.version}",
                                 old=f"{len(a.hashes)} file hash(es)",
                                 new=f"{len(b.hashes)} file hash(es) (+{added} -{removed})"))
            continue
        out.append(Drift(variant=variant, kind=kind, subject=f"{prefix}{name}", old=_pip_text(a), new=_pip_text(b)))
    return out


def _diff_map(variant: str, kind: DriftKind, prefix: str, old: Mapping[str, str], new: Mapping[str, str]
              ) -> list[Drift]:
    return [Drift(variant=variant, kind=kind, subject=f"{prefix}{k}", old=old.get(k, NONE), new=new.get(k, NONE))
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _diff_component(variant: str, name: str, a: LockedComponent, b: LockedComponent) -> list[Drift]:
    c = f"component {name}"
    out: list[Drift] = []
    if a.repo != b.repo:
        out.append(Drift(variant=variant, kind="component", subject=name, old=f"repo {a.repo}", new=f"repo {b.repo}"))
    if a.commit != b.commit:
        out.append(Drift(variant=variant, kind="commit", subject=c, old=a.commit, new=b.commit))
    if a.branch_head != b.branch_head:
        out.append(Drift(variant=variant, kind="branch", subject=f"{c}: branch", old=a.branch_head or NONE,
                         new=b.branch_head or NONE))
    if a.picks != b.picks:
        out.append(Drift(variant=variant, kind="pick", subject=f"{c}: cherry-picks",
                         old=", ".join(x[:12] for x in a.picks) or NONE, new=", ".join(x[:12] for x in b.picks) or NONE))
    out += _diff_map(variant, "pr", f"{c}: PR #", a.prs, b.prs)
    for number, head in b.prs.items():
        pa, pb = a.pr(int(number)), b.pr(int(number))
        if pa is not None and pb is not None and pa.head == head and (pa.mode, pa.commits) != (pb.mode, pb.commits):
            out.append(Drift(variant=variant, kind="pr", subject=f"{c}: PR #{number} commits applied",
                             old=f"{pa.mode}: {len(pa.commits)} commit(s)", new=f"{pb.mode}: {len(pb.commits)} commit(s)"))
    out += _diff_map(variant, "patch", f"{c}: patch ", a.patches, b.patches)
    out += _diff_map(variant, "submodule", f"{c}: submodule ", a.submodules, b.submodules)
    # The tree follows from commit, PRs and patches; report it only when nothing above explains it.
    if a.tree != b.tree and not out:
        out.append(Drift(variant=variant, kind="tree", subject=c, old=a.tree, new=b.tree))
    return out


def diff_variant(variant: str, old: VariantLock, new: VariantLock) -> list[Drift]:
    """Every difference between two locks of one variant, in a fixed order."""
    out: list[Drift] = []
    ob, nb = old.base, new.base
    if ob is None or nb is None:
        if ob != nb:
            out.append(Drift(variant=variant, kind="base", subject="digest", old=ob.digest if ob else NONE,
                             new=nb.digest if nb else NONE))
    elif ob.ref != nb.ref:
        out.append(Drift(variant=variant, kind="base", subject="reference", old=ob.ref, new=nb.ref))
    elif ob.digest != nb.digest:
        out.append(Drift(variant=variant, kind="base", subject=nb.ref, old=ob.digest, new=nb.digest))
    for sec in sorted(set(old.missing) | set(new.missing)):
        if (sec in old.missing) != (sec in new.missing):
            out.append(Drift(variant=variant, kind="missing", subject=f"section {sec}",
                             old="not locked" if sec in old.missing else "locked",
                             new="not locked" if sec in new.missing else "locked"))
    for name in sorted(set(old.components) | set(new.components)):
        a, b = old.components.get(name), new.components.get(name)
        if a is None or b is None:
            out.append(Drift(variant=variant, kind="component", subject=name,
                             old="locked" if a else NONE, new="in the manifest" if b else NONE))
        else:
            out += _diff_component(variant, name, a, b)
    for name in sorted(set(old.downloads) | set(new.downloads)):
        da, db = old.downloads.get(name), new.downloads.get(name)
        ta = f"{da.url} sha256 {da.sha256}" if da else NONE
        tb = f"{db.url} sha256 {db.sha256}" if db else NONE
        if ta != tb:
            out.append(Drift(variant=variant, kind="download", subject=name, old=ta, new=tb))
    out += _diff_map(variant, "apt", "", old.apt, new.apt)
    for comp in sorted(set(old.build_apt) | set(new.build_apt)):
        out += _diff_map(variant, "build-apt", f"component {comp} build apt ",
                         old.build_apt.get(comp, {}), new.build_apt.get(comp, {}))
    out += _diff_pips(variant, "pip", "", old.pip, new.pip)
    for comp in sorted(set(old.build_pip) | set(new.build_pip)):
        out += _diff_pips(variant, "build-pip", f"component {comp} build pip ",
                          old.build_pip.get(comp, ()), new.build_pip.get(comp, ()))
    return out


def check(m: Manifest, manifest_file: str, manifest_sha256: str, variants: Sequence[str], resolvers: Resolvers,
          config: Config, existing: Lock | None, *, now: Callable[[], datetime] = _now) -> list[Drift]:
    """What drifted between the lock and the pins resolved now (empty: the lock is current)."""
    if existing is None:
        raise LockError(f"{m.stack} has no lock to check",
                        fix=f"create it with `buildctl lock {m.stack}`")
    drift: list[Drift] = []
    if existing.manifest_sha256 != manifest_sha256:
        drift.append(Drift(variant="", kind="manifest", subject=manifest_file, old=existing.manifest_sha256,
                           new=manifest_sha256))
    for name in variants:
        new = resolve(m, m.variant(name), resolvers, config, now=now)
        old = existing.variants.get(name)
        if old is None:
            drift.append(Drift(variant="", kind="variant", subject=name, old=NONE, new=NONE))
        else:
            drift += diff_variant(name, old, new)
    return drift


def render_drift(lock_file: str, drift: Sequence[Drift]) -> str:
    lines = [f"{lock_file} is out of date ({len(drift)} difference(s)):"]
    lines += [f"  - {d.message()}" for d in drift]
    return "\n".join(lines)
