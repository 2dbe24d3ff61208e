"""Smoke evidence in the registry: `buildctl evidence IMAGE`, `buildctl evidence attach IMAGE REPORT`, the
promotion check (`push --promote`, `nightly`) and the smoke gate's reuse of evidence.

Evidence is an OCI 1.1 artifact (ship/evidence.py's SmokeEvidence, ARTIFACT_TYPE) whose subject is an
image manifest digest, attached and found through registry/attest.py (the referrers API where the registry
has it, the ``sha256-<hex>`` referrers tag where it has not). Three kinds reach the registry:

- the smoke gate's build-tier report, attached at push to the assembled image it ran on (the node image
  under its content tag) and carried to the final image, whose layers begin with that image's (checked
  from the two manifests);
- a GPU-tier report, made where the GPU is (`python3 -m smoke --tier gpu --image-digest D`) and attached
  here with `buildctl evidence attach`, which checks it (ship/evidence.py: from_report);
- nothing else: an artifact that does not read back as evidence for its subject is listed as a problem
  and never counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from buildctl import untrusted
from buildctl.builder import smoke
from buildctl.config import Config
from buildctl.errors import PushError, UnreachableError, UsageError
from buildctl.graph import graph
from buildctl.imageref import ImageRef
from buildctl.labels import STACK_LABEL, VARIANT_LABEL
from buildctl.manifest.model import GpuTier
from buildctl.registry import attest, credentials
from buildctl.registry.registry import RegistryClient
from buildctl.services import target
from buildctl.ship import evidence as ev
from buildctl.ship import sizes
from buildctl.ship.push import Pushed


def client(config: Config, host: str) -> RegistryClient:
    return RegistryClient(host, login=credentials.registry_login(os.environ, host), ca_bundle=config.ca_bundle,
                          timeout=config.network_timeout, redact=credentials.redactor_for(os.environ, host))


def read(reg: attest.ArtifactRegistry, repository: str, digest: str) -> tuple[list[ev.SmokeEvidence], list[str]]:
    """The smoke evidence attached to ``repository@digest`` that reads back as such, and a line per artifact
    that does not (never counted)."""
    found: list[ev.SmokeEvidence] = []
    problems: list[str] = []
    for desc, blob in attest.find(reg, repository, digest, ev.ARTIFACT_TYPE, problems):
        try:
            found.append(ev.from_payload(blob, where=f"{repository}@{desc.digest}", subject=digest,
                                         artifact=desc.digest))
        except ev.EvidenceRefused as exc:
            problems.append(exc.what)
    return found, problems


def attach(reg: attest.ArtifactRegistry, repository: str, digest: str, evidence: ev.SmokeEvidence) -> ev.SmokeEvidence:
    done = attest.attach(reg, repository, digest, attest.Evidence(
        kind="smoke", artifact_type=ev.ARTIFACT_TYPE, media_type=ev.ARTIFACT_TYPE, payload=evidence.to_payload(),
        annotations=evidence.annotations()))
    return replace(evidence, artifact=done.artifact)


def _image(reg: RegistryClient, image: str) -> sizes.RemoteImage:
    ref = ImageRef.parse(image)
    if ref.host == "docker.io" and not image.startswith("docker.io/"):
        raise UsageError(f"{image}: name the registry (HOST[:PORT]/REPOSITORY:TAG or @sha256:...)")
    remote = sizes.remote_image(reg, ref.name(), ref.digest or ref.tag or "latest")
    if remote is None:
        raise UsageError(f"the registry {ref.host} has no image {image}", fix="push it first (`buildctl push`)")
    return remote


# ------------------------------------------------------------------------------------------ the commands


@dataclass(frozen=True, kw_only=True)
class Listing:
    image: str  # repository@digest
    suite_hash: str  # this buildctl's
    evidence: tuple[ev.SmokeEvidence, ...]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "suite_hash": self.suite_hash, "problems": list(self.problems),
                "evidence": [{**{k: v for k, v in e.to_json().items() if k != "report"}, "artifact": e.artifact,
                              "current_suite": e.suite_hash == self.suite_hash} for e in self.evidence]}


def list_evidence(config: Config, image: str) -> Listing:
    reg = client(config, ImageRef.parse(image).host)
    remote = _image(reg, image)
    found, problems = read(reg, remote.repository, remote.digest)
    return Listing(image=f"{remote.repository}@{remote.digest}", suite_hash=smoke.suite_hash(),
                   evidence=tuple(sorted(found, key=lambda e: (e.tier, e.started))), problems=tuple(problems))


def attach_report(config: Config, image: str, report_file: Path) -> tuple[str, ev.SmokeEvidence]:
    """Check the report in ``report_file`` against ``image`` (its digest, stack, variant) and this buildctl's
    suite, then attach it: (repository@digest, the evidence as attached)."""
    where = str(report_file)
    try:  # the report first: a file that is no report is refused before the registry is asked
        raw = untrusted.read_capped(report_file, ev.MAX_REPORT)
    except OSError as exc:
        raise UsageError(f"cannot read the report {report_file}: {exc.strerror or exc}") from exc
    except untrusted.Malformed as exc:
        raise ev.EvidenceRefused(f"{where}: {exc}: not a smoke report") from None
    data = ev.parse_json(raw, where)
    reg = client(config, ImageRef.parse(image).host)
    remote = _image(reg, image)
    stack, variant = remote.labels.get(STACK_LABEL), remote.labels.get(VARIANT_LABEL)
    if not stack or not variant:
        raise ev.EvidenceRefused(f"{remote.repository}@{remote.digest} carries no {STACK_LABEL} / {VARIANT_LABEL} labels",
                                 fix="attach evidence to images buildctl built")
    e = ev.from_report(data, where=where, subject=remote.digest, suite_hash=smoke.suite_hash(), stack=stack,
                       variant=variant, attached_by="buildctl evidence attach")
    return f"{remote.repository}@{remote.digest}", attach(reg, remote.repository, remote.digest, e)


# ------------------------------------------------------------------------------------------ promotion


@dataclass(frozen=True, kw_only=True)
class PromotionCheck:
    """What promotion read for one pushed image (push.PromotionVerdict)."""

    image: str
    decision: ev.Decision
    sizes: sizes.SizeReport | None = None
    notes: tuple[str, ...] = ()  # what was attached or reused on the way, problems seen
    problems: tuple[str, ...] = field(default=())

    @property
    def refusal(self) -> str:
        if not self.decision.ok:
            return self.decision.reason
        if self.sizes is not None and self.sizes.over and self.sizes.fail:
            return f"size budget: {self.sizes.summary()}"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "refusal": self.refusal, "evidence": self.decision.to_json(),
                "sizes": None if self.sizes is None else self.sizes.to_json(), "notes": list(self.notes),
                "problems": list(self.problems)}


def _gate_evidence(reg: RegistryClient, target: target.Target, assemble: sizes.RemoteImage, report_dir: Path,
                   local_id: str | None, suite: str) -> tuple[ev.SmokeEvidence | None, str]:
    """The build-tier evidence of the assembled image: in the registry, else the gate's saved report of this
    very image (same config digest), attached now."""
    found, _problems = read(reg, assemble.repository, assemble.digest)
    have = ev.newest(found, "build", suite)
    if have is not None:
        return have, f"build-tier evidence of {assemble.repository}@{assemble.digest} found ({have.artifact})"
    if local_id is None or local_id != assemble.config:
        return None, ""
    saved = smoke.recorded(report_dir, local_id, "build")
    if saved is None or saved.suite_hash != suite:
        return None, ""
    made = ev.from_report({**saved.raw, "subject": assemble.digest}, where=str(saved.report_path),
                          subject=assemble.digest, suite_hash=suite, stack=target.manifest.stack, variant=target.variant.name,
                          attached_by="smoke gate")
    done = attach(reg, assemble.repository, assemble.digest, made)
    return done, f"attached the smoke gate's report to {assemble.repository}@{assemble.digest} ({done.artifact})"


def checker(config: Config, target: target.Target, *, registry: str, moving: Sequence[str],
            local_id: Callable[[str], str | None]) -> Callable[[Pushed], PromotionCheck]:
    """push.run's ``evidence``: the promotion check of the final image of ``target``. ``local_id(node)`` is the
    local image id of a node (None: not here)."""
    reg = client(config, registry)
    report_dir = config.cache.reports / "smoke" / target.manifest.stack / target.variant.name
    smoke_spec = target.manifest.smoke
    waiver = smoke_spec.gpu_waiver if smoke_spec.gpu_tier is GpuTier.WAIVED else None
    budget = target.variant.budget or target.manifest.budget

    def check(pushed: Pushed) -> PromotionCheck:
        suite = smoke.suite_hash()
        repository = ImageRef.parse(pushed.target).name()
        final = sizes.remote_image(reg, repository, pushed.digest)
        if final is None:
            raise PushError(f"{pushed.target}: the registry no longer has {pushed.digest}")
        found, problems = read(reg, repository, pushed.digest)
        notes = []
        if ev.newest(found, "build", suite) is not None:
            notes.append("build-tier evidence of this digest and suite is in the registry: reused")
        elif target.graph.gate:
            node = target.graph.node("assemble")
            aref = ImageRef.parse(graph.image_ref(registry, target.repository, node.name, node.key))
            assemble = sizes.remote_image(reg, aref.name(), aref.tag or "")
            if assemble is not None and sizes.begins_with(final, assemble):
                gate_ev, note = _gate_evidence(reg, target, assemble, report_dir, local_id(node.name), suite)
                if gate_ev is not None:
                    notes.append(note)
                    found.append(attach(reg, repository, pushed.digest, ev.carried(
                        gate_ev, subject=pushed.digest, tested=f"{assemble.repository}@{assemble.digest}")))
                    notes.append(f"carried it to {repository}@{pushed.digest} (the assembled image plus the entrypoint)")
        decision = ev.decide(found, subject=pushed.digest, suite_hash=suite, gpu_waiver=waiver)
        tag = f"{target.variant.name}-{moving[0]}" if moving else ""
        promoted = sizes.remote_image(reg, repository, tag) if tag else None
        report = sizes.size_report(final, promoted, against_tag=f"{repository}:{tag}", budget=
                                   budget.bytes if budget else None, fail=bool(budget and budget.fail))
        return PromotionCheck(image=f"{repository}@{pushed.digest}", decision=decision, sizes=report,
                              notes=tuple(notes), problems=tuple(problems))

    return check


@dataclass(frozen=True, kw_only=True)
class GateReuse:
    """The smoke gate's question (build/smoke.EvidenceLookup): does the registry hold passed build-tier
    evidence of this suite for the image's digest there? A registry that does not answer means no: the
    suite runs."""

    config: Config
    registry: str

    def reusable(self, repo_digests: Sequence[str], suite_hash: str) -> dict[str, str] | None:
        for entry in repo_digests:
            name, _, digest = entry.partition("@")
            if ImageRef.parse(name).host != self.registry or not digest:
                continue
            try:
                found, _problems = read(client(self.config, self.registry), name, digest)
            except (PushError, UnreachableError):
                return None
            e = ev.reusable(found, tier="build", suite_hash=suite_hash)
            if e is not None:
                return {"image": f"{name}@{digest}", "artifact": e.artifact,
                        "made": f"made {e.started} by the suite {e.suite_hash[:19]}, attached by {e.attached_by}"}
        return None
