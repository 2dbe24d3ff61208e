"""The lock archive's two homes: the cache (``<cache>/reports/locks``) and the registry, beside the image.

- ``keep(config, lock)``: every variant lock a nightly or a bump builds from, filed by its hash;
- ``lock_evidence(lock, variant)``: the lock as evidence that ship.publish (``attest_kinds=("lock",)``)
  attaches beside the final image before any moving tag moves: an OCI 1.1 artifact (``archive.ARTIFACT_TYPE``)
  whose subject is the image manifest, through registry/attest.py as `push --attest provenance` attaches
  its statement (referrers API, or the ``sha256-<hex>`` referrers tag);
- ``resolve(...)``: the lock a REF names (a lock file, an archived hash, or an image: its lock-hash label,
  then the archive, then the artifact beside it in its registry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from buildctl import untrusted
from buildctl.config import Config
from buildctl.errors import BuildctlError, LockError, UsageError
from buildctl.imageref import ImageRef
from buildctl.labels import LOCK_LABEL
from buildctl.lock import archive, lockfile
from buildctl.lock.archive import Archived, LockArchive, Ref
from buildctl.lock.lockfile import Lock
from buildctl.registry import attest, credentials
from buildctl.registry.registry import RegistryClient
from buildctl.services import wiring


def store(config: Config) -> LockArchive:
    return LockArchive(config.cache.reports / "locks")


def keep(config: Config, lock: Lock) -> list[Archived]:
    """File ``lock`` under the hash of each of its variants in the cache's archive."""
    return store(config).save(lock)


def lock_evidence(lock: Lock, variant: str) -> attest.Evidence:
    v = lock.variants[variant]
    return attest.Evidence(kind="lock", artifact_type=archive.ARTIFACT_TYPE, media_type=archive.ARTIFACT_TYPE,
                           payload=lockfile.to_text(lock).encode(),
                           annotations={LOCK_LABEL: v.digest(), "io.buildctl.stack": lock.stack,
                                        "io.buildctl.variant": variant})


def _client(config: Config, registry: str) -> RegistryClient:
    return RegistryClient(registry, login=credentials.registry_login(os.environ, registry),
                          ca_bundle=config.ca_bundle, timeout=config.network_timeout,
                          redact=credentials.redactor_for(os.environ, registry))


@dataclass(frozen=True, kw_only=True)
class Resolved:
    lock: Lock
    variant: str
    lock_hash: str
    source: str  # where it came from, for people


def _from_file(path: Path, variant: str) -> Resolved:
    try:
        text = untrusted.read_capped(path, lockfile.MAX_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read the lock file {path}: {exc.strerror or exc}") from None
    except untrusted.Malformed as exc:
        raise UsageError(f"the REF file:{path}: {exc}: not a lock file", fix="give a lock file") from None
    lock = archive.from_text(text, str(path))
    if variant not in lock.variants:
        raise LockError(f"{path} has no lock of variant {variant} (it has {', '.join(sorted(lock.variants))})")
    return Resolved(lock=lock, variant=variant, lock_hash=lock.variants[variant].digest(), source=str(path))


def _labels_from_registry(client: RegistryClient, ref: ImageRef) -> tuple[dict[str, str], str]:
    """(the image config's labels, the manifest digest) of ``ref``, read from its registry."""
    got = client.manifest(ref.path, ref.digest or ref.tag or "latest")
    if got is None:
        raise UsageError(f"{ref.with_tag()} is neither in this engine nor in its registry")
    body, desc = got
    where = f"{ref.with_tag()} ({desc.digest})"
    try:  # registry content: every value's type checked before use (buildctl/untrusted.py)
        manifest = untrusted.obj(untrusted.loads(body), "manifest")
        config_digest = untrusted.text(untrusted.obj(manifest.get("config"), "config").get("digest"),
                                       "config.digest")
    except ValueError as exc:
        raise UsageError(f"{where} is not a single-platform image manifest: {exc}") from None
    blob = client.get_blob(ref.path, config_digest)
    if blob is None:
        raise UsageError(f"{where}: the registry has no config blob {config_digest}", fix="push the image again")
    try:
        image_config = untrusted.obj(untrusted.loads(blob), "the config blob")
        labels = untrusted.str_map(untrusted.obj(image_config.get("config") or {}, "config").get("Labels"),
                                   "config.Labels")
    except ValueError as exc:
        raise LockError(f"{where}: its config blob {config_digest} is not an image config: {exc}",
                        fix="give the lock file or its hash instead") from None
    return labels, desc.digest


def _from_image(config: Config, stack: str, image: str) -> Resolved:
    ref = ImageRef.parse(image)
    labels: dict[str, str] = {}
    digest = ""
    engine = wiring.engine(config)
    try:
        if engine.image_exists(image):
            labels = dict(engine.inspect_image(image).labels)
    finally:
        engine.close()
    client = _client(config, ref.host) if ref.host != "docker.io" else None
    if not labels and client is not None:
        labels, digest = _labels_from_registry(client, ref)
    lock_hash = labels.get(LOCK_LABEL, "")
    if not archive.FULL_HASH.fullmatch(lock_hash):
        raise LockError(f"{image} carries no lock hash ({LOCK_LABEL}={lock_hash or '(none)'})",
                        fix="give the lock file or its hash instead")
    found = store(config).find(stack, lock_hash)
    if found is not None:
        return Resolved(lock=found[0], variant=found[1], lock_hash=lock_hash, source=f"{image} -> archive")
    if client is None:
        raise LockError(f"the lock {lock_hash[:16]} of {image} is not in the archive {store(config).root}")
    if not digest:
        got = client.manifest(ref.path, ref.digest or ref.tag or "latest")
        digest = got[1].digest if got else ""
    for _desc, payload in attest.find(client, image, digest, archive.ARTIFACT_TYPE) if digest else []:
        try:
            lock = archive.from_text(payload, f"{ref.name()}@{digest} lock artifact")
            variant = archive.variant_with(lock, lock_hash, "the lock artifact")
        except BuildctlError:
            continue
        keep(config, lock)
        return Resolved(lock=lock, variant=variant, lock_hash=lock_hash, source=f"{image} -> registry artifact")
    raise LockError(f"the lock {lock_hash[:16]} of {image} is neither in the archive {store(config).root} nor "
                    "beside the image in its registry",
                    fix="give the lock file instead (it was built before locks were archived?)")


def resolve(config: Config, stack: str, variant: str, ref: Ref, *, cwd: Path) -> Resolved:
    """The lock ``ref`` names, for ``variant`` of ``stack`` (a hash or an image names its own variant)."""
    if ref.kind == "file":
        return _from_file(cwd / ref.value, variant)
    if ref.kind == "hash":
        found = store(config).find(stack, ref.value)
        if found is None:
            raise LockError(f"no lock {ref.value} of {stack} in the archive {store(config).root / stack}",
                            fix="give a lock file, or an image built from it")
        return Resolved(lock=found[0], variant=found[1], lock_hash=found[2], source=f"archive {found[2][:16]}")
    return _from_image(config, stack, ref.value)
