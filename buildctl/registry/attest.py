"""Evidence attached beside an image in its registry: OCI 1.1 artifacts whose subject is the image.

One mechanism for every kind of evidence: an ``Evidence`` (its artifact type, the media type of its
one payload blob, annotations) is attached to the image manifest digest through the registry client
(registry.py: the artifact manifest, then the referrers API or the ``sha256-<hex>`` referrers tag), and
found again with ``find``. Provenance (an in-toto statement, made evidence by ship/provenance.py) is the first kind; smoke evidence can be
attached the same way with its own artifact type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from buildctl import untrusted
from buildctl.errors import PushError
from buildctl.imageref import ImageRef
from buildctl.registry.registry import Descriptor, referrers_tag

PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # what docker buildx, cosign and oras annotate with
KIND_ANNOTATION = "io.buildctl.evidence"


class ArtifactRegistry(Protocol):
    """The slice of registry.RegistryClient attaching and finding use."""

    def manifest(self, repo: str, reference: str) -> tuple[bytes, Descriptor] | None: ...
    def attach(self, repo: str, subject: Descriptor, *, artifact_type: str, payload: bytes, media_type: str,
               annotations: Mapping[str, str] | None = None) -> Descriptor: ...
    def referrers(self, repo: str, subject: str, artifact_type: str = "") -> list[Descriptor]: ...
    def get_blob(self, repo: str, digest: str) -> bytes | None: ...


@dataclass(frozen=True, kw_only=True)
class Evidence:
    kind: str  # e.g. "provenance"
    artifact_type: str
    media_type: str
    payload: bytes
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Attached:
    """An artifact the registry holds, referring to an image."""

    kind: str
    repository: str  # host/path
    subject: str  # the image manifest digest
    artifact: str  # the artifact manifest digest
    artifact_type: str
    referrers_tag: str  # where registries without the referrers API list it

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "repository": self.repository, "subject": self.subject,
                "artifact": self.artifact, "artifact_type": self.artifact_type, "referrers_tag": self.referrers_tag}


def attach(client: ArtifactRegistry, image: str, digest: str, evidence: Evidence) -> Attached:
    """Attach ``evidence`` to the manifest ``digest`` of ``image`` (host/path[:tag]) in its registry."""
    ref = ImageRef.parse(image.partition("@")[0])
    found = client.manifest(ref.path, digest)
    if found is None:
        raise PushError(f"cannot attach {evidence.kind} to {ref.name()}@{digest}: the registry has no such manifest",
                        fix="push the image first")
    subject = found[1]
    art = client.attach(ref.path, subject, artifact_type=evidence.artifact_type, payload=evidence.payload,
                        media_type=evidence.media_type,
                        annotations={KIND_ANNOTATION: evidence.kind, **evidence.annotations})
    return Attached(kind=evidence.kind, repository=ref.name(), subject=digest, artifact=art.digest,
                    artifact_type=evidence.artifact_type, referrers_tag=referrers_tag(digest))


def find(client: ArtifactRegistry, image: str, digest: str, artifact_type: str,
         problems: list[str] | None = None) -> list[tuple[Descriptor, bytes]]:
    """Every artifact of ``artifact_type`` referring to ``digest``, with its payload (read back and checked).

    Registry content buildctl did not write is checked by type before use (buildctl/untrusted.py): a referrer
    whose manifest is not an object, whose ``subject`` is not a descriptor naming ``digest`` or whose
    ``layers`` are not one descriptor is left out, with a line naming it in ``problems``: one odd referrer
    never ends `evidence`, `push --promote` or `nightly`."""
    ref = ImageRef.parse(image.partition("@")[0])
    out = []
    for d in client.referrers(ref.path, digest, artifact_type):
        where = f"{ref.name()}@{d.digest}"
        got = client.manifest(ref.path, d.digest)
        if got is None:
            continue
        try:
            manifest = untrusted.obj(untrusted.loads(got[0]), "the manifest")
            subject = untrusted.obj(manifest.get("subject"), "subject")
            if subject.get("digest") != digest:
                raise untrusted.Malformed(f"subject: names {str(subject.get('digest'))[:80]}, not {digest} "
                                          "(a stale entry of the referrers tag?)")
            layers = untrusted.array(manifest.get("layers", []), "layers")
            if len(layers) != 1:
                raise untrusted.Malformed(f"layers: {len(layers)} layer(s), not the one payload")
            layer = Descriptor.from_json(layers[0], f"{where} layers[0]")
        except (ValueError, PushError) as exc:
            if problems is not None:
                problems.append(f"{where}: referrer of {digest} left out: {exc}")
            continue
        blob = client.get_blob(ref.path, layer.digest)
        if blob is not None:
            out.append((d, blob))
    return out
