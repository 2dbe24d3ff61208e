"""Resolution of each kind of pin: base image -> digest, git components -> SHAs and trees, downloads -> sha256, pip and apt -> exact versions."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from debian.debian_support import Version as DebianVersion
from packaging.utils import canonicalize_name

from buildctl.config import mirror_url
from buildctl.errors import BuildctlError, LockDrift, LockError, SourceError, UnreachableError
from buildctl.imageref import ImageRef
from buildctl.lock.lockfile import (
    DraggedCommit,
    LockedBase,
    LockedChange,
    LockedComponent,
    LockedDownload,
    LockedPatch,
    LockedPick,
    LockedPip,
    LockedPr,
)
from buildctl.lock.resolvers import (
    Fetcher,
    GitResolver,
    PackageIndex,
    PipInstall,
    ProbeRequest,
    Registry,
)
from buildctl.manifest.model import (
    SHA256_COMPUTE,
    Component,
    Manifest,
    PipConstraintPolicy,
    PipRequirement,
    Variant,
)
from buildctl.manifest.requirements import download_wheel, runtime_requirements


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


def _in_component(component: Component, exc: BuildctlError) -> BuildctlError:
    what = f"component {component.name} ({component.at.file}:{component.at.line}): {exc.what}" if component.at.line else \
        f"component {component.name}: {exc.what}"
    return type(exc)(what, why=exc.why, fix=exc.fix)


def resolve_component(component: Component, git: GitResolver, base_dir: Path,
                      notes: list[str] | None = None) -> LockedComponent:
    """Lock one git component: base commit, each change exactly (a PR's commits), the resulting tree,
    what changes drag in, submodule gitlinks. ``notes`` collects what the user must hear (a PR merged
    upstream, picks that changed nothing)."""
    repo = repo_location(component.repo, base_dir)
    notes = notes if notes is not None else []
    try:
        commit = git.resolve_commit(repo, component.commit, branch=component.branch)
        branch_head = git.branch_head(repo, component.branch) if component.branch else ""
        changes: list[LockedChange] = []
        dragged: list[DraggedCommit] = []
        patch_paths: dict[str, Path] = {}
        for ch in component.steps:
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
        raise _in_component(component, exc) from exc
    final: list[LockedChange] = []
    for lc in changes:
        if isinstance(lc, LockedPr):
            empty = tuple(s for s in lc.commits if s in applied.empty)
            lc = dataclasses.replace(lc, empty=empty)
            notes.extend(pr_notes(component.name, lc))
        elif isinstance(lc, LockedPick) and lc.sha in applied.empty:
            notes.append(f"{component.name}: commit {lc.sha[:12]} changed nothing: the base has its change already")
        final.append(lc)
    # declared in the manifest; the placeholder itself is written by sources.export, where a mirror lacks the blob
    notes.extend(f"{component.name}: {mo.path} (blob {mo.blob[:12]}) of {mo.repo} may be missing from its mirror: an export "
                 f"then holds a placeholder there ({mo.why})" for mo in component.missing_objects)
    return LockedComponent(name=component.name, repo=component.repo, commit=commit, changes=tuple(final), dragged=tuple(dragged),
                           submodules=dict(applied.gitlinks) if component.submodules else {}, tree=applied.tree,
                           branch_head=branch_head)


def pr_notes(component: str, locked_pr: LockedPr) -> list[str]:
    """What a user must be told about how a PR was applied (never silent about applying nothing)."""
    out: list[str] = []
    where = f"{component}: PR #{locked_pr.number}"
    mu = locked_pr.merged_upstream
    if mu is not None and mu.how == "merge":
        out.append(f"{where} is merged into {locked_pr.target} already (merge commit {mu.commit[:12]}): applied as its "
                   f"{len(locked_pr.commits)} commit(s) {mu.commit[:12]}^1..{mu.commit[:12]}^2")
    elif mu is not None:
        out.append(f"{where} is in {locked_pr.target} already with the same commits (fast-forward or rebase merge): "
                   "it has no commits of its own, nothing is applied for it")
    elif locked_pr.mode == "own-commits" and not locked_pr.commits:
        out.append(f"{where} has no commits of its own (its head is on {locked_pr.target}): nothing is applied for it")
    if locked_pr.empty and locked_pr.mode == "own-commits":
        all_empty = len(locked_pr.empty) == len(locked_pr.commits)
        out.append(f"{where}: {'all' if all_empty else len(locked_pr.empty)} of its {len(locked_pr.commits)} commit(s) changed "
                   "nothing: the base has their change already (merged upstream by squash or rebase?)"
                   + (" - the PR adds nothing to this tree" if all_empty else ""))
    return out


def _sha256_file(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise LockError(f"cannot read patch {path}: {exc.strerror}") from exc


# ------------------------------------------------------------------------------------------ downloads


def resolve_downloads(manifest: Manifest, variant: Variant, fetch: Fetcher, *, names: set[str] | None = None
                      ) -> tuple[dict[str, LockedDownload], dict[str, bytes]]:
    """(locked downloads for the variant's platform, contents of the apt keyrings by download name)."""
    keyrings = {r.keyring for r in manifest.apt.repos if r.keyring}
    locked: dict[str, LockedDownload] = {}
    contents: dict[str, bytes] = {}
    for d in manifest.downloads:
        if names is not None and d.name not in names:
            continue
        pu = d.for_platform(variant.platform)
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


def cudnn_pattern(manifest: Manifest, variant: Variant) -> tuple[str, str] | None:
    spec = manifest.cudnn_for(variant)
    if spec is None:
        return None
    return spec.package, spec.apt_version or f"{spec.version}-*"


def download_wheels(manifest: Manifest, variant: Variant, downloads: Mapping[str, LockedDownload],
                    mirrors: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Canonical name -> (requirement line, sha256) of each ``install: pip`` download of the variant.

    The line is a direct reference with the locked checksum (``name @ URL#sha256=...``): pip in the base
    resolves the wheel together with the pip requirements, so that the wheel's own requirements are
    locked with them, and checks that it installs in that base.
    """
    out: dict[str, tuple[str, str]] = {}
    for d in manifest.downloads:
        if d.install != "pip" or d.name not in downloads:
            continue
        w = download_wheel(d, variant.platform)
        if w is None:
            continue
        name, _version, _filename, url = w
        sha = downloads[d.name].sha256
        out[name] = (f"{name} @ {mirror_url(url, mirrors or {})}#sha256={sha}", sha)
    return out


def probe_request(manifest: Manifest, variant: Variant, keyrings: Mapping[str, bytes],
                  wheels: Mapping[str, tuple[str, str]] | None = None) -> ProbeRequest:
    apt_names = [p.name for p in manifest.apt.packages]
    cud = cudnn_pattern(manifest, variant)
    if cud:
        apt_names.append(cud[0])
    for c in manifest.components:
        apt_names.extend(p.name for p in c.build.apt)
    sources: dict[str, str] = {}
    files: dict[str, bytes] = {}
    debs: list[str] = []
    downloads = {d.name: d for d in manifest.downloads}
    if apt_names:
        for r in manifest.apt.repos:
            line = r.lines.get(variant.platform) or r.lines.get("any")
            if line is None:
                continue
            sources[r.name] = line
            if r.keyring and r.keyring in keyrings:
                dest = downloads[r.keyring].dest
                files[dest] = keyrings[r.keyring]
                if dest.endswith(".deb"):
                    debs.append(dest)
    return ProbeRequest(
        pip=(*(r.text for r in runtime_requirements(manifest)), *(line for line, _ in (wheels or {}).values())),
        build_pip={c.name: tuple(r.text for r in c.build.requires) for c in manifest.components if c.build.requires},
        apt=tuple(dict.fromkeys(apt_names)),
        apt_sources=sources, files=files, apt_debs=tuple(debs),
        remove_pip=manifest.remove.pip, remove_paths=manifest.remove.paths,
        unset_constraint=manifest.pip.constraint is PipConstraintPolicy.UNSET,
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


def check_protected(manifest: Manifest, installs: Iterable[PipInstall], installed: Mapping[str, str], *, where: str) -> None:
    """A protected base package may only be replaced when the manifest says so (protect.replace)."""
    removed = {canonicalize_name(n) for n in manifest.remove.pip}
    allowed = {canonicalize_name(n) for n in manifest.protect.replace}
    for i in installs:
        name = canonicalize_name(i.name)
        have = installed.get(name)
        if have is None or have == i.version or name in removed or name in allowed:
            continue
        if any(fnmatch.fnmatchcase(name, pat) for pat in manifest.protect.packages):
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
