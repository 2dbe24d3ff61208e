"""Shipping a built variant (``publish``): nodes by content tag, the final image by its public and extra tags,
evidence, moving tags.

Shared by `buildctl push` (commands/ship.py; its verify, bom, provenance and diff call ship/ directly) and
`buildctl nightly`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.config import Config
from buildctl.errors import PushError, UsageError, disk_full
from buildctl.graph import graph
from buildctl.imageref import ImageRef
from buildctl.lock import lockfile
from buildctl.registry import attest, credentials
from buildctl.registry.registry import RegistryClient
from buildctl.services import evidence, lockarchive, target, wiring
from buildctl.ship import provenance, push

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine


@contextmanager
def _engine(config: Config) -> Iterator[Engine]:
    engine = wiring.engine(config)
    try:
        yield engine
    finally:
        engine.close()


def _attacher(project: Path, config: Config, engine: Engine, registry: str, redact: credentials.Redactor, source: str | None,
              kinds: Sequence[str], target: target.Target) -> Callable[[push.Pushed], list[attest.Attached]]:
    """What attaches the ``kinds`` of evidence to the final image once it is pushed (push.run calls it):
    ``provenance`` (an in-toto statement) and ``lock`` (the lock it was built from: services/lockarchive.py)."""

    def attach(pushed: push.Pushed) -> list[attest.Attached]:
        if source is None:
            raise PushError(f"cannot attach evidence to {pushed.target}: the image is not in this engine",
                            why="its labels name the lock it was built from", fix="build it here, then push")
        info = engine.inspect_image(source)
        client = RegistryClient(registry, login=credentials.registry_login(os.environ, registry),
                                ca_bundle=config.ca_bundle, timeout=config.network_timeout, redact=redact)
        out = []
        for kind in kinds:
            if kind == "lock":
                if target.lock is None:
                    raise PushError(f"cannot attach the lock to {pushed.target}: {target.manifest.stack} has no lock")
                out.append(attest.attach(client, pushed.target, pushed.digest,
                                         lockarchive.lock_evidence(target.lock, target.variant.name)))
                continue
            if kind != "provenance":
                raise UsageError(f"no evidence of kind {kind!r}")
            found = provenance.lock_for_image(project / "pins", info.labels, source)
            stmt = provenance.statement(subject_name=ImageRef.parse(pushed.target).name(), subject_digest=pushed.digest,
                                        found=found, labels=info.labels, image_id=info.id, project=project)
            out.append(attest.attach(client, pushed.target, pushed.digest, provenance.evidence(stmt)))
        return out

    return attach


def publish(project: Path, config: Config, built: target.Target, *, registry_arg: str | None, moving: Sequence[str],
            promote: bool, say: Callable[[str], None], warn: Callable[[str], None], extra_tags: Sequence[str] = (),
            attest_kinds: Sequence[str] = (), dated_tags: Sequence[str] = ()) -> tuple[target.Target, push.PushReport]:
    """Push a built variant: nodes by content tag, the final image by its public tag and ``extra_tags``
    (immutable) and ``dated_tags`` (``nightly-YYYYMMDD``: moved to this run's image, confirmed by digest), then the evidence ``attest_kinds`` beside the final image, then, with ``promote``, the
    ``moving`` tags (only past a passed smoke gate). Shared by `buildctl push` and `buildctl nightly`."""
    lockfile.refuse_partial(built.lock, built.variant.name, action="push", lock_file=str(lockfile.lock_path(built.manifest_path)))
    if built.registry is None:
        raise UsageError(f"no registry to push {built.manifest.stack} to",
                         fix="pass --registry HOST:PORT, set `registry` in the configuration, or add push.registry "
                             "to the manifest")
    registry = built.registry
    # Where a build may have tagged its nodes: under the registry it shared them through, or locally only.
    homes = list(dict.fromkeys([registry, config.registry, built.manifest.push.registry if built.manifest.push else None,
                                None]))
    redact = credentials.redactor_for(os.environ, registry)
    log = config.cache.logs / "push" / built.manifest.stack / f"{built.variant.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with credentials.docker_credentials(os.environ, registry), _engine(config) as engine, \
            log.open("a", encoding="utf-8") as logf:

        def write_log(line: str) -> None:
            try:
                logf.write(line + "\n")
            except OSError as exc:  # the cache is full: the push fails naming its log, not with a traceback
                if full := disk_full(log, exc):
                    raise full from exc
                raise

        def locate(node: str, key: str) -> str | None:
            return next((ref for home in homes
                         if engine.image_exists(ref := graph.image_ref(home, built.repository, node, key))), None)

        final = built.graph.final
        if built.graph.gate and locate(final.name, final.key) is None:
            # A build past a skipped smoke gate made another final image (the gate is one of its inputs):
            # push that one, which is labelled smoke=skipped and so is never promoted.
            skipped = target.load(project, config, built.manifest.stack, built.variant.name,
                                  registry=registry_arg, skip_smoke=True)
            if locate(skipped.graph.final.name, skipped.graph.final.key) is not None:
                warn(f"the final image of {built.manifest.stack}/{built.variant.name} here was built with the smoke "
                            "gate skipped: pushing it; no moving tag will point at it")
                built = skipped

        items = push.stack_items(built.graph, registry=registry, repository=built.repository, locate=locate,
                                 moving=moving, default_variant=built.variant.name == built.manifest.default_variant.name)
        public = f"{registry}/{built.repository.strip('/')}"
        last = items[-1]
        items += [push.PushItem(source=last.source, target=f"{public}:{tag}", node=last.node, key=last.key)
                  for tag in extra_tags]
        items += [push.PushItem(source=last.source, target=f"{public}:{tag}", node=last.node, key=last.key,
                                dated=True) for tag in dated_tags]
        # evidence goes to the digest of the final image's own tag: the one every moving and dated tag names
        attach = _attacher(project, config, engine, registry, redact, last.source, attest_kinds,
                           built) if attest_kinds else None

        def local_id(node: str) -> str | None:
            ref = locate(node, built.graph.node(node).key)
            return engine.inspect_image(ref).id if ref else None

        # promotion reads the smoke evidence of the pushed digest from the registry (and the size budget)
        check = evidence.checker(config, built, registry=registry, moving=moving, local_id=local_id) if promote else None
        report = push.run(engine, items, stack=built.manifest.stack, variant=built.variant.name, registry=registry,
                          promote=promote, reports=config.cache.reports, redact=redact,
                          say=say, log=write_log, attach=attach, evidence=check, attach_to=last.target)
    return built, report
