"""How an image was made, as supply-chain tooling reads it: an in-toto Statement (v1) whose predicate
is SLSA Provenance v1.

- subject: the image, by the digest of its registry manifest (what a registry, a signer and a policy
  engine name an image by);
- ``buildDefinition.externalParameters``: the stack, variant and manifest (with its sha256) it was
  built from;
- ``buildDefinition.internalParameters``: the lock hash the image's labels carry (the hash of the
  variant's resolved entries that node keys and tags use) and the lock's own integrity hash (lockcheck);
- ``buildDefinition.resolvedDependencies``: every input the lock pins, each as an in-toto
  ResourceDescriptor: the base image by digest; each git component's base commit, its changes in the
  order applied (cherry-picked commits; each PR's head and the exact commits applied from it; patches
  with their sha256), the commits a change dragged in, submodules and the prepared commit; downloads
  with their sha256; pip files with their sha256 (runtime and each component's build requirements;
  requirements the base already satisfies are named without a digest); apt packages at their exact
  versions (runtime, cuDNN and each component's build dependencies); and the lock file itself (the
  sha256 of its bytes).

The lock must be the one the image was built from: ``lock_for_image`` checks the image's
``io.buildctl.lock-hash`` label against it and refuses a lock that moved on, so that a statement never
names inputs the image was not built from. Pure apart from reading the lock file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, assert_never

from packageurl import PackageURL

from buildctl import __version__
from buildctl.engine.imageview import ImageView, at_hand
from buildctl.errors import LockError, UsageError
from buildctl.imageref import ImageRef
from buildctl.labels import BASE_DIGEST_LABEL, CREATED_LABEL, LOCK_LABEL, STACK_LABEL, VARIANT_LABEL
from buildctl.lock import lockcheck, lockfile
from buildctl.lock.lockfile import (
    Lock,
    LockedComponent,
    LockedPatch,
    LockedPick,
    LockedPip,
    LockedPr,
    VariantLock,
)
from buildctl.manifest import pins
from buildctl.registry import attest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# buildctl has no web home: its build type and builder are named by URNs (docs/concepts/evidence.md).
BUILD_TYPE = "urn:buildctl:build-type:image:v1"
BUILDER_ID = "urn:buildctl:builder:local"
MEDIA_TYPE = "application/vnd.in-toto+json"  # of the statement, as an OCI artifact's layer and type


@dataclass(frozen=True, kw_only=True)
class ImageLock:
    """The lock an image was built from, found in a project."""

    stack: str
    variant: str
    manifest_path: Path
    manifest_sha256: str  # as the lock recorded it (the manifest that was locked)
    lock_path: Path
    lock_sha256: str  # of the lock file's bytes, as read
    lock: Lock
    vlock: VariantLock


def lock_for_image(pins_dir: Path, labels: Mapping[str, str], image: str) -> ImageLock:
    """The lock in ``pins_dir`` that ``image`` (with ``labels``) was built from, or a clear error."""
    stack, variant, lock_hash = labels.get(STACK_LABEL), labels.get(VARIANT_LABEL), labels.get(LOCK_LABEL)
    if not stack or not variant:
        raise UsageError(f"{image} was not built by buildctl (no {STACK_LABEL} / {VARIANT_LABEL} labels)",
                         fix="give an image that `buildctl build` made")
    if not lock_hash or lock_hash == "unlocked":
        raise LockError(f"{image} was built without a lock: there are no locked inputs to state",
                        fix=f"lock the stack (`buildctl lock {stack}`), build again, then ask again")
    manifest = pins.find(pins_dir, stack)
    path = lockfile.lock_path(manifest)
    try:
        file_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        file_sha256 = ""
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    lock = lockfile.read(path)
    vlock = lock.variants.get(variant) if lock is not None and lock.stack == stack else None
    if lock is None or vlock is None:
        raise LockError(f"{image} was built from a lock of {stack}/{variant}, and {path} has none",
                        fix="run this in the project (or checkout) the image was built from: --project DIR")
    lockfile.refuse_partial(lock, variant, action="state the provenance of", lock_file=str(path))
    if vlock.digest() != lock_hash:
        raise LockError(f"{path} is not the lock {image} was built from",
                        why=f"the image's {LOCK_LABEL} is {lock_hash}, {stack}/{variant} in the lock hashes to "
                            f"{vlock.digest()} (re-locked since the build)",
                        fix="check out the lock the image was built from (git log -- " f"{path.name}), or rebuild")
    return ImageLock(stack=stack, variant=variant, manifest_path=manifest, manifest_sha256=lock.manifest_sha256,
                     lock_path=path, lock_sha256=file_sha256, lock=lock, vlock=vlock)


# ------------------------------------------------------------------------------------------ materials


def _rd(*, uri: str = "", name: str = "", digest: Mapping[str, str] | None = None,
        **annotations: str) -> dict[str, Any]:
    """An in-toto ResourceDescriptor (empty fields left out)."""
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if uri:
        out["uri"] = uri
    if digest:
        out["digest"] = dict(digest)
    ann = {k.replace("_", "-"): v for k, v in annotations.items() if v}
    if ann:
        out["annotations"] = ann
    return out


def _sha256(text: str) -> dict[str, str]:
    alg, sep, hexd = text.partition(":")
    return {alg: hexd} if sep else {"sha256": text}


def _arch(platform: str) -> str:
    return platform.split("/")[1] if "/" in platform else platform


def _oci_uri(ref: str, digest: str) -> str:
    r = ImageRef.parse(ref)
    qualifiers = {"repository_url": f"{r.host}/{r.path}"}
    if r.tag and ":" in ref.partition("@")[0].rsplit("/", 1)[-1]:
        qualifiers["tag"] = r.tag
    return PackageURL(type="oci", name=r.path.rsplit("/", 1)[-1].lower(), version=digest,
                      qualifiers=qualifiers).to_string()


def _pips(pins_: tuple[LockedPip, ...], scope: str) -> Iterator[dict[str, Any]]:
    for p in pins_:
        uri = PackageURL(type="pypi", name=p.name, version=p.version).to_string()
        if p.in_base:
            yield _rd(uri=uri, name=p.name, kind="pip", scope=scope, in_base="true")
        for h in p.hashes:
            yield _rd(uri=uri, name=p.name, digest=_sha256(h), kind="pip", scope=scope,
                      sdist="true" if p.sdist else "")


def _apts(apt: Mapping[str, str], arch: str, scope: str) -> Iterator[dict[str, Any]]:
    for name, version in sorted(apt.items()):
        # no vendor namespace: the lock records what the base's apt sources offered, not which distribution
        uri = PackageURL(type="deb", name=name, version=version, qualifiers={"arch": arch}).to_string()
        yield _rd(uri=uri, name=name, kind="apt", scope=scope)


def _component(name: str, locked: LockedComponent) -> Iterator[dict[str, Any]]:
    """A component's base commit, its changes in the order applied (the commits each brought), the
    commits its changes dragged in, its submodules and the prepared commit."""
    git = f"git+{locked.repo}"
    yield _rd(uri=f"{git}@{locked.commit}", name=name, digest={"gitCommit": locked.commit}, kind="git", component=name,
              role="base commit")
    for i, change in enumerate(locked.changes, 1):
        step = str(i)
        if isinstance(change, LockedPick):
            yield _rd(uri=f"{git}@{change.sha}", name=f"{name} commit {change.sha[:12]}",
                      digest={"gitCommit": change.sha}, kind="git", component=name, role="cherry-picked commit",
                      change=step)
        elif isinstance(change, LockedPr):
            pr = f"PR #{change.number}"
            yield _rd(uri=f"{git}@refs/pull/{change.number}/head", name=f"{name} {pr}",
                      digest={"gitCommit": change.head}, kind="git", component=name, role="pull request head",
                      change=step, mode=change.mode)
            empty = set(change.empty)
            for sha in change.commits:
                yield _rd(uri=f"{git}@{sha}", name=f"{name} {pr} commit {sha[:12]}", digest={"gitCommit": sha},
                          kind="git", component=name, role=f"commit of {pr}", change=step,
                          empty="true" if sha in empty else "")
            if change.merged_upstream is not None and change.merged_upstream.commit:
                m = change.merged_upstream.commit
                yield _rd(uri=f"{git}@{m}", name=f"{name} {pr} merge {m[:12]}", digest={"gitCommit": m}, kind="git",
                          component=name, role=f"upstream merge of {pr}", change=step)
        elif isinstance(change, LockedPatch):
            yield _rd(uri=change.file, name=f"{name} patch {change.file}", digest={"sha256": change.sha256},
                      kind="patch", component=name, change=step)
        else:
            assert_never(change)
    for d in locked.dragged:
        yield _rd(uri=f"{git}@{d.sha}", name=f"{name} commit {d.sha[:12]}", digest={"gitCommit": d.sha}, kind="git",
                  component=name, role=f"dragged in by {d.by}" if d.by else "dragged in")
    for path, sha in sorted(locked.submodules.items()):
        yield _rd(uri=f"{git}#{path}", name=f"{name} submodule {path}", digest={"gitCommit": sha}, kind="git",
                  component=name, role="submodule")
    yield _rd(uri=git, name=f"{name} prepared", digest={"gitCommit": locked.tree or locked.commit}, kind="git",
              component=name, role="prepared commit (base commit with the changes applied)")


def materials(vlock: VariantLock) -> list[dict[str, Any]]:
    """Every input ``vlock`` pins, as in-toto ResourceDescriptors, in a fixed order."""
    b = vlock.base
    if b is None or vlock.missing:
        raise LockError("a partial lock has no complete set of inputs to state",
                        why="; ".join(f"{k}: {why}" for k, why in sorted(vlock.missing.items())) or "no base",
                        fix="lock it fully (`buildctl lock STACK` without --partial)")
    out = [_rd(uri=_oci_uri(b.ref, b.digest), name="base", digest=_sha256(b.digest), kind="base-image",
               reference=b.ref, platform=b.platform)]
    for name, c in sorted(vlock.components.items()):
        out += _component(name, c)
    for name, d in sorted(vlock.downloads.items()):
        out.append(_rd(uri=d.url, name=name, digest={"sha256": d.sha256}, kind="download"))
    out += _pips(vlock.pip, "runtime")
    for comp, ps in sorted(vlock.build_pip.items()):
        out += _pips(ps, f"build:{comp}")
    arch = _arch(b.platform)
    out += _apts(vlock.apt, arch, "runtime")
    for comp, apt in sorted(vlock.build_apt.items()):
        out += _apts(apt, arch, f"build:{comp}")
    return out


# ------------------------------------------------------------------------------------------ subject


class ProvenanceEngine(Protocol):
    def image_exists(self, ref: str) -> bool: ...
    def inspect_image(self, ref: str) -> ImageView: ...
    def pull(self, ref: str, platform: str | None = None) -> str: ...


def subject_of(info: ImageView, image: str) -> tuple[str, str]:
    """(repository, manifest digest) that name ``image`` in a registry, from what the engine knows."""
    name, _, pinned = image.partition("@")
    pairs = [d.partition("@")[::2] for d in info.repo_digests]
    if pinned:
        hit = [(n, d) for n, d in pairs if d == pinned]
        return (hit[0][0] if hit else ImageRef.parse(name).name()), pinned
    if not image.startswith("sha256:") and pairs:
        wanted = ImageRef.parse(name).name()
        for n, d in pairs:
            if ImageRef.parse(n).name() == wanted:
                return n, d
    if len({d for _, d in pairs}) == 1:
        return pairs[0][0], pairs[0][1]
    if pairs:
        raise UsageError(f"{image} is in several repositories under different manifest digests: "
                         + ", ".join(f"{n}@{d}" for n, d in pairs),
                         fix="name the one meant (REPOSITORY@sha256:... or REPOSITORY:TAG)")
    raise UsageError(f"{image} has no registry manifest digest: it was never pushed or pulled, and an in-toto "
                     "subject names an image by the digest of its manifest",
                     fix="push it first (`buildctl push STACK`, which can attach the statement itself: "
                         "--attest provenance), then ask again")


def for_image(engine: ProvenanceEngine, pins_dir: Path, image: str, project: Path | None = None) -> dict[str, Any]:
    """The statement for ``image`` (pulled first when the engine does not have it)."""
    at_hand(engine, image)
    info = engine.inspect_image(image)
    name, digest = subject_of(info, image)
    found = lock_for_image(pins_dir, info.labels, image)
    return statement(subject_name=name, subject_digest=digest, found=found, labels=info.labels, image_id=info.id,
                     project=project)


# ------------------------------------------------------------------------------------------ statement


def statement(*, subject_name: str, subject_digest: str, found: ImageLock, labels: Mapping[str, str],
              image_id: str = "", project: Path | None = None) -> dict[str, Any]:
    """The in-toto Statement (SLSA Provenance v1) for the image ``subject_name@subject_digest``."""
    if not subject_digest.startswith("sha256:") or len(subject_digest) != 71:
        raise UsageError(f"{subject_name}: {subject_digest!r} is not a sha256 manifest digest")
    vlock = found.vlock

    def shown(path: Path) -> str:
        if project is not None and path.resolve().is_relative_to(project.resolve()):
            return str(path.resolve().relative_to(project.resolve()))
        return str(path)

    deps = materials(vlock)  # refuses a partial lock
    assert vlock.base is not None
    if labels.get(BASE_DIGEST_LABEL) and labels[BASE_DIGEST_LABEL] != vlock.base.digest:
        raise LockError(f"{subject_name} says its base is {labels[BASE_DIGEST_LABEL]}, the lock {vlock.base.digest}",
                        fix="the image's labels and its lock disagree: rebuild it")
    # the lock's own integrity hash (lockcheck: checked by lockfile.read, so it is the recorded one)
    integrity = str(lockcheck.integrity(found.lock.to_json())["sha256"])
    internal: dict[str, Any] = {"lockHash": vlock.digest(), "lockIntegritySha256": integrity,
                                "platform": vlock.base.platform}
    run: dict[str, Any] = {"builder": {"id": BUILDER_ID, "version": {"buildctl": __version__}}}
    if labels.get(CREATED_LABEL):
        run["metadata"] = {"finishedOn": labels[CREATED_LABEL]}
    if image_id:
        run["byproducts"] = [_rd(name="image config", digest=_sha256(image_id))]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": _sha256(subject_digest)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "stack": found.stack, "variant": found.variant,
                    "manifest": _rd(uri=shown(found.manifest_path), digest={"sha256": found.manifest_sha256}),
                },
                "internalParameters": internal,
                "resolvedDependencies": [
                    _rd(uri=shown(found.lock_path), name="lock", digest={"sha256": found.lock_sha256}, kind="lock",
                        lock_hash=vlock.digest(), lock_integrity=integrity),
                    *deps,
                ],
            },
            "runDetails": run,
        },
    }


def to_text(stmt: Mapping[str, Any]) -> str:
    """Canonical JSON text (sorted keys), as it is written and attached."""
    return json.dumps(stmt, indent=2, sort_keys=True) + "\n"


def evidence(statement: Mapping[str, Any]) -> attest.Evidence:
    """The statement as evidence to attach beside the image (registry/attest.py)."""
    return attest.Evidence(kind="provenance", artifact_type=MEDIA_TYPE, media_type=MEDIA_TYPE,
                           payload=to_text(statement).encode(),
                           annotations={attest.PREDICATE_ANNOTATION: str(statement.get("predicateType", ""))})
