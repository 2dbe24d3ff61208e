"""A BOM in the formats other tools read: CycloneDX 1.6 JSON (through cyclonedx-python-lib).

``cyclonedx(bom, vlock)`` turns what ``bom.collect`` read from an image into a CycloneDX document:

- the image itself is ``metadata.component`` (a container, by its registry digest where the engine
  knows one);
- the base image, by digest (``org.opencontainers.image.base.*`` labels), as a container component;
- every Python distribution (purl ``pkg:pypi/...``) and every Debian package (``pkg:deb/<os>/...``
  with its architecture and distribution);
- every component buildctl prepared from git (``io.buildctl.component.*`` labels: the prepared commit),
  with, when the lock the image was built from is given, its repository, base commit, the changes
  applied on top (cherry-picks, PR heads and the commits applied from them, patches with their sha256)
  and submodules, as CycloneDX pedigree and properties.

The document is validated against the CycloneDX 1.6 JSON schema before it is returned (``validate``),
so an invalid one never leaves this module. Pure: no engine, no network.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, assert_never

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom as CdxBom
from cyclonedx.model.component import Commit, Component, ComponentType, Pedigree
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from buildctl import __version__
from buildctl.errors import BuildctlError
from buildctl.imageref import ImageRef
from buildctl.labels import LOCK_LABEL, STACK_LABEL, VARIANT_LABEL
from buildctl.lock.lockfile import LockedComponent, LockedPatch, LockedPick, LockedPr, VariantLock
from buildctl.ship.bom import Bom

PROP = "buildctl:"  # namespace of our CycloneDX properties


class InvalidDocument(BuildctlError):
    """A document we made does not validate against its schema: a bug here, never the user's input."""


def _oci_purl(ref: str, digest: str) -> PackageURL | None:
    """pkg:oci/<name>@<digest>?repository_url=<host>/<path>[&tag=<tag>] (purl-spec's oci type)."""
    if not digest.startswith("sha256:"):
        return None
    r = ImageRef.parse(ref)
    qualifiers = {"repository_url": f"{r.host}/{r.path}"}
    if r.tag and ":" in ref.partition("@")[0].rsplit("/", 1)[-1]:  # a tag the reference names
        qualifiers["tag"] = r.tag
    return PackageURL(type="oci", name=r.path.rsplit("/", 1)[-1].lower(), version=digest, qualifiers=qualifiers)


def _digest_hash(digest: str) -> list[HashType]:
    alg, _, hexd = digest.partition(":")
    return [HashType(alg=HashAlgorithm.SHA_256, content=hexd)] if alg == "sha256" and len(hexd) == 64 else []


def manifest_digest(bom: Bom) -> tuple[str, str] | None:
    """(name, sha256:...) of the image's registry manifest, where the engine knows one."""
    wanted = ImageRef.parse(bom.image).name() if "@" not in bom.image else bom.image.partition("@")[0]
    pairs = [d.partition("@") for d in bom.repo_digests]
    for name, _, digest in pairs:
        if ImageRef.parse(name).name() == wanted:
            return name, digest
    return (pairs[0][0], pairs[0][2]) if pairs else None


def _props(items: Iterable[tuple[str, str]]) -> list[Property]:
    return [Property(name=f"{PROP}{k}", value=v) for k, v in items if v]


def _vcs(repo: str) -> list[ExternalReference]:
    return [ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(repo))]


def _component(name: str, prepared: str, locked: LockedComponent | None) -> Component:
    ref = f"component:{name}"
    if locked is None:
        return Component(type=ComponentType.LIBRARY, name=name, version=prepared, bom_ref=ref,
                         properties=_props([("prepared-commit", prepared)]))
    commits = [Commit(uid=locked.commit, message="base commit")]
    props: list[tuple[str, str]] = []
    for change in locked.changes:
        if isinstance(change, LockedPick):
            commits.append(Commit(uid=change.sha, message="cherry-picked"))
            props.append((f"pick:{change.sha}", change.sha))
        elif isinstance(change, LockedPr):
            commits.append(Commit(uid=change.head, message=f"PR #{change.number} head"))
            commits += [Commit(uid=sha, message=f"applied from PR #{change.number} ({change.mode})")
                        for sha in change.commits if sha != change.head]
            props.append((f"pr:{change.number}", change.head))
        elif isinstance(change, LockedPatch):
            props.append((f"patch:{change.file}", f"sha256:{change.sha256}"))
        else:
            assert_never(change)
    if locked.tree and locked.tree != locked.commit:
        commits.append(Commit(uid=locked.tree, message="prepared: the base commit with the changes applied"))
    upstream = Component(type=ComponentType.LIBRARY, name=name, version=locked.commit, bom_ref=f"{ref}@upstream",
                         external_references=_vcs(locked.repo))
    props = [("prepared-commit", prepared), ("commit", locked.commit), ("tree", locked.tree or locked.commit), *props,
             *((f"submodule:{p}", sha) for p, sha in sorted(locked.submodules.items()))]
    return Component(
        type=ComponentType.LIBRARY, name=name, version=prepared, bom_ref=ref,
        purl=PackageURL(type="generic", name=name, version=prepared,
                        qualifiers={"vcs_url": f"git+{locked.repo}@{locked.commit}"}),
        external_references=_vcs(locked.repo), properties=_props(props),
        pedigree=Pedigree(ancestors=[upstream], commits=commits),
    )


def document(bom: Bom, vlock: VariantLock | None = None) -> CdxBom:
    """The CycloneDX model of ``bom`` (components from the lock ``vlock`` when it is the image's)."""
    doc = CdxBom()
    doc.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="buildctl",
                                                version=__version__))
    found = manifest_digest(bom)
    image_name = ImageRef.parse(bom.image.partition("@")[0]).name() if not bom.image.startswith("sha256:") \
        else bom.image
    image = Component(
        type=ComponentType.CONTAINER, name=image_name, bom_ref="image",
        version=found[1] if found else bom.image_id,
        purl=_oci_purl(found[0], found[1]) if found else None, hashes=_digest_hash(found[1]) if found else [],
        properties=_props([("image-id", bom.image_id), ("platform", bom.platform),
                           ("stack", bom.labels.get(STACK_LABEL, "")), ("variant", bom.labels.get(VARIANT_LABEL, "")),
                           ("lock-hash", bom.labels.get(LOCK_LABEL, "")), ("python", bom.python or "")]))
    doc.metadata.component = image
    parts: list[Component] = []
    base_name, base_digest = bom.base.get("name", ""), bom.base.get("digest", "")
    if base_name or base_digest:
        parts.append(Component(
            type=ComponentType.CONTAINER, name=ImageRef.parse(base_name).name() if base_name else "base",
            version=base_digest or None, bom_ref="base", purl=_oci_purl(base_name, base_digest) if base_name else None,
            hashes=_digest_hash(base_digest), properties=_props([("reference", base_name), ("role", "base image")])))
    locked = dict(vlock.components) if vlock is not None else {}
    for name, prepared in sorted(bom.components.items()):
        parts.append(_component(name, prepared, locked.get(name)))
    for name, version in sorted(bom.pip.items(), key=lambda kv: canonicalize_name(kv[0])):
        pname = canonicalize_name(name)
        parts.append(Component(type=ComponentType.LIBRARY, name=name, version=version, bom_ref=f"pypi:{pname}",
                               purl=PackageURL(type="pypi", name=pname, version=version),
                               properties=_props([("shadows", ", ".join(bom.shadowed.get(name, ())))])))
    os_id = bom.os_release.get("ID", "debian") or "debian"
    distro = f"{os_id}-{bom.os_release['VERSION_ID']}" if bom.os_release.get("VERSION_ID") else ""
    for name, version in sorted((bom.deb or {}).items()):
        qualifiers = {k: v for k, v in (("arch", bom.deb_arch.get(name, "")), ("distro", distro)) if v}
        parts.append(Component(type=ComponentType.LIBRARY, name=name, version=version, bom_ref=f"deb:{name}",
                               purl=PackageURL(type="deb", namespace=os_id, name=name, version=version,
                                               qualifiers=qualifiers)))
    for c in parts:
        doc.components.add(c)
    doc.register_dependency(image, parts)
    for key, why in sorted(bom.errors.items()):
        doc.metadata.properties.add(Property(name=f"{PROP}not-read:{key}", value=why))
    return doc


def cyclonedx(bom: Bom, vlock: VariantLock | None = None) -> str:
    """CycloneDX 1.6 JSON of ``bom``, validated against the schema."""
    text = JsonV1Dot6(document(bom, vlock)).output_as_string(indent=2)
    validate(text)
    return text


def validate(text: str) -> None:
    """Raise InvalidDocument unless ``text`` is CycloneDX 1.6 JSON that the schema accepts."""
    # imported here: jsonschema's format checkers build a grammar at import (seconds)
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise InvalidDocument("the CycloneDX document buildctl made does not validate against the 1.6 schema",
                              why=str(error)[:2000], fix="this is a bug in buildctl: please report it with the image")


def components_by_purl(text: str) -> dict[str, dict[str, Any]]:
    """purl -> component of a CycloneDX JSON document (for readers and tests)."""
    data = json.loads(text)
    return {c["purl"]: c for c in data.get("components", []) if "purl" in c}
