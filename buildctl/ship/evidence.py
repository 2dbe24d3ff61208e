"""Smoke evidence bound to an image's manifest digest: what it is, how a report becomes it, what promotion decides.

A smoke report (smoke/README.md, schema 1) is untrusted input: a GPU host wrote it, a person carried it
here. ``from_report`` accepts one only when its shape is a smoke report's, the subject it names is the
image's manifest digest, the suite that made it is the suite of this buildctl (``suite_hash``), its stack
and variant are the image's, and, for the GPU tier, it names the GPU model and the driver. The result, a
``SmokeEvidence``, is what goes to the registry (``to_payload``: canonical JSON, the suite's own report
inside) as an OCI 1.1 artifact of type ``ARTIFACT_TYPE`` whose subject is the image (registry/attest.py),
and what ``from_payload`` reads back, checking the same again: a registry is no more trusted than a file.

``decide`` is promotion's rule (shared/DESIGN.md): a moving tag moves only with build-tier evidence and
GPU-tier evidence of the current suite that passed (the newest of each tier decides), or a GPU-tier
waiver the manifest states. ``reusable`` says which evidence an unchanged image may reuse instead of
running the suite again (same digest, suite, tier, and for the GPU tier the same GPU model and driver).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from buildctl import untrusted
from buildctl.errors import BuildctlError, SmokeFailed

ARTIFACT_TYPE = "application/vnd.buildctl.smoke.evidence.v1+json"
SCHEMA = 1
MAX_DEPTH = 32  # a smoke report nests 6 levels (checks[i].details.x ...)
MAX_REPORT = 4 << 20  # a GPU tier's report with every TE log line is ~100 KB; refuse what is far past that
TIER_ANNOTATION = "io.buildctl.smoke.tier"
SUITE_ANNOTATION = "io.buildctl.smoke.suite"
OK_ANNOTATION = "io.buildctl.smoke.ok"
GPU_ANNOTATION = "io.buildctl.smoke.gpu"
Tier = Literal["build", "gpu"]
AttachedBy = Literal["smoke gate", "buildctl push", "buildctl evidence attach"]
ATTACHED_BY: tuple[AttachedBy, ...] = ("smoke gate", "buildctl push", "buildctl evidence attach")
STATUSES = ("pass", "fail", "unsupported", "skipped")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_DRIVER = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){1,3}\Z")
_CAPABILITY = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\Z")
_TEXT = re.compile(r"^[\x20-\x7e]{1,120}\Z")  # a GPU's name as torch gives it: printable, one short line
_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{5,15}Z\Z")


class EvidenceRefused(BuildctlError):
    """A report or an artifact that is not evidence for this image (exit 15)."""

    exit_code = 15


@dataclass(frozen=True, kw_only=True)
class Gpu:
    name: str  # torch's device name, e.g. "NVIDIA H200"
    driver: str  # the NVIDIA driver version, e.g. "580.159.04"
    capability: str = ""
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "driver": self.driver, "capability": self.capability, "count": self.count}

    def describe(self) -> str:
        return f"{self.count or 1}x {self.name}, driver {self.driver}"


@dataclass(frozen=True, kw_only=True)
class SmokeEvidence:
    tier: Tier
    subject: str  # the image manifest digest it is evidence for
    suite_hash: str  # the suite that made it
    ok: bool
    stack: str
    variant: str
    started: str  # when the suite ran (the report's own time)
    attached_by: AttachedBy
    tested: str = ""  # the image the suite ran on when not the subject itself: <repo>@<digest> (the gate's assembled image)
    gpu: Gpu | None = None
    failed: tuple[str, ...] = ()
    reused_from: str = ""  # the artifact this one repeats (carried from the tested image to the final one)
    report: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    artifact: str = ""  # the artifact manifest digest, once read back from the registry

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": "smoke", "tier": self.tier, "subject": self.subject,
                "suite_hash": self.suite_hash, "ok": self.ok, "stack": self.stack, "variant": self.variant,
                "started": self.started, "attached_by": self.attached_by, "tested": self.tested,
                "gpu": None if self.gpu is None else self.gpu.to_json(), "failed": list(self.failed),
                "reused_from": self.reused_from, "report": dict(self.report)}

    def to_payload(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    def annotations(self) -> dict[str, str]:
        out = {TIER_ANNOTATION: self.tier, SUITE_ANNOTATION: self.suite_hash, OK_ANNOTATION: str(self.ok).lower()}
        if self.gpu is not None:
            out[GPU_ANNOTATION] = f"{self.gpu.name}; driver {self.gpu.driver}"
        return out

    def describe(self) -> str:
        verdict = "passed" if self.ok else "FAILED (" + ", ".join(self.failed) + ")"
        gpu = f" on {self.gpu.describe()}" if self.gpu else ""
        at = f" [{self.artifact}]" if self.artifact else ""
        return f"{self.tier} tier {verdict}{gpu}, suite {self.suite_hash[:19]}, {self.started}, by {self.attached_by}{at}"


# ------------------------------------------------------------------------------------------ reading


def _refuse(where: str, what: str, fix: str = "") -> EvidenceRefused:
    return EvidenceRefused(f"{where}: {what}", fix=fix or "give the report `python3 -m smoke` wrote for this image "
                                                         "(smoke/README.md: --image-digest names the image)")


def _gpu(report: Mapping[str, Any], where: str) -> Gpu:
    driver = report.get("driver")
    gpu = driver.get("gpu") if isinstance(driver, dict) else None
    if not isinstance(gpu, dict) or gpu.get("available") is not True:
        raise _refuse(where, "a GPU-tier report that saw no GPU (driver.gpu.available is not true)")
    name, version = gpu.get("name"), gpu.get("driver_version")
    if not isinstance(name, str) or not _TEXT.match(name):
        raise _refuse(where, f"driver.gpu.name: expected the GPU model (printable, at most 120 characters), got "
                             f"{str(name)[:60]!r}")
    if not isinstance(version, str) or not _DRIVER.match(version):
        raise _refuse(where, f"driver.gpu.driver_version: expected the NVIDIA driver version (e.g. 580.159.04), got "
                             f"{str(version)[:60]!r}",
                      fix="run the GPU tier with this suite, which records the driver (smoke/suite.py)")
    capability, count = gpu.get("capability", ""), gpu.get("count", 0)
    if not isinstance(capability, str) or (capability and not _CAPABILITY.match(capability)):
        raise _refuse(where, f"driver.gpu.capability: expected MAJOR.MINOR, got {str(capability)[:20]!r}")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 4096:
        raise _refuse(where, f"driver.gpu.count: expected a GPU count, got {str(count)[:20]!r}")
    return Gpu(name=name, driver=version, capability=capability, count=count)


def _verdict(report: Mapping[str, Any], where: str) -> tuple[bool, tuple[str, ...]]:
    """ok and the failing required checks, checked against the checks themselves (smoke/report.py's rule)."""
    checks = report.get("checks")
    if not isinstance(checks, list) or len(checks) > 200:
        raise _refuse(where, "checks: expected a list of check results")
    failed = []
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or c.get("status") not in STATUSES \
                or c.get("deferred") not in (None, "build", "gpu") or not isinstance(c.get("required"), bool):
            raise _refuse(where, f"checks[{i}]: not a check result (name, status, required, deferred)")
        satisfied = c["status"] in ("pass", "unsupported") or (c["status"] == "skipped" and c["deferred"] is not None)
        if c["required"] and not satisfied:
            failed.append(c["name"])
    ok, error = report.get("ok"), report.get("error", "")
    if not isinstance(ok, bool) or not isinstance(error, str):
        raise _refuse(where, "ok / error: expected true or false / a string")
    if ok != (not failed and not error):
        raise _refuse(where, f"its verdict (ok={ok}) contradicts its checks (failing: {', '.join(failed) or 'none'}"
                             f"{'; error: ' + error[:80] if error else ''})")
    return ok, tuple(failed) + (("(suite could not run)",) if error else ())


def from_report(report: Any, *, where: str, subject: str, suite_hash: str, stack: str, variant: str,
                attached_by: AttachedBy, tested: str = "") -> SmokeEvidence:
    """A smoke report (the suite's JSON) as evidence for the image ``subject`` of ``stack``/``variant``;
    EvidenceRefused says why not (naming ``where``, the file or artifact it came from)."""
    if not isinstance(report, dict) or report.get("suite") != "smoke" or report.get("schema") != 1:
        raise _refuse(where, "not a smoke report of schema 1 (suite: smoke, schema: 1)")
    tier = report.get("tier")
    if tier not in ("build", "gpu"):
        raise _refuse(where, f"tier: expected build or gpu, got {str(tier)[:20]!r}")
    named = report.get("subject", "")
    if not named:
        raise _refuse(where, "the report names no image (subject is empty)",
                      fix=f"run the suite with --image-digest {subject} (the digest of the image it tests)")
    if named != subject:
        raise _refuse(where, f"the report is for the image {str(named)[:80]}, not for {subject}",
                      fix="attach it to the image it names, or run the suite on this image")
    made_by = report.get("suite_hash", "")
    if made_by != suite_hash:
        raise _refuse(where, f"made by another smoke suite ({str(made_by)[:80] if made_by else 'one that records no hash'}); "
                             f"this buildctl's suite is {suite_hash}",
                      fix="run this checkout's smoke/ (the same suite buildctl runs) on the image and attach its report")
    for key, want in (("stack", stack), ("variant", variant)):
        if report.get(key) != want:
            raise _refuse(where, f"{key}: the report is for {str(report.get(key))[:60]!r}, the image is {want!r}",
                          fix="run the suite with the image's own expectation (its io.buildctl.smoke.expect label)")
    started = report.get("started")
    if not isinstance(started, str) or not _TIME.match(started):
        raise _refuse(where, f"started: expected a UTC time (2026-12-02T04:02:22Z), got {str(started)[:40]!r}")
    ok, failed = _verdict(report, where)
    return SmokeEvidence(tier=tier, subject=subject, suite_hash=suite_hash, ok=ok, stack=stack, variant=variant,
                         started=started, attached_by=attached_by, tested=tested,
                         gpu=_gpu(report, where) if tier == "gpu" else None, failed=failed, report=report)


def parse_json(data: bytes, where: str) -> Any:
    """A report's or a payload's JSON through the bounded reader: EvidenceRefused (exit 15) when it is not UTF-8
    JSON or nests deeper than any report does (a 100,000-deep ``[[[`` under the size cap)."""
    try:
        return untrusted.loads(data, max_depth=MAX_DEPTH)
    except ValueError as exc:
        msg = str(exc) if isinstance(exc, untrusted.Malformed) else f"not JSON ({exc})"
        raise _refuse(where, msg) from None


def from_payload(data: bytes, *, where: str, subject: str, artifact: str = "") -> SmokeEvidence:
    """An artifact's payload read back from the registry, checked as a report is (its own suite hash kept:
    ``decide`` tells another suite's evidence apart)."""
    if len(data) > MAX_REPORT:
        raise _refuse(where, f"larger than {MAX_REPORT} bytes")
    doc = parse_json(data, where)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("kind") != "smoke":
        raise _refuse(where, f"not smoke evidence of schema {SCHEMA}")
    by, suite = doc.get("attached_by"), doc.get("suite_hash")
    if by not in ATTACHED_BY or not isinstance(suite, str) or not _DIGEST.match(suite):
        raise _refuse(where, "attached_by / suite_hash: not what buildctl writes")
    if doc.get("subject") != subject:
        raise _refuse(where, f"the evidence names {str(doc.get('subject'))[:80]}, not the image it is attached to "
                             f"({subject})", fix="remove the stale entry from the registry")
    report = doc.get("report")
    # the suite's report inside names the image the suite ran on: the subject, or the tested image
    tested = doc.get("tested") or ""
    inner_subject = subject if not tested else str(tested).rpartition("@")[2]
    ev = from_report(report, where=where, subject=inner_subject, suite_hash=suite,
                     stack=str(doc.get("stack", "")), variant=str(doc.get("variant", "")), attached_by=by,
                     tested=str(tested))
    if (ev.tier, ev.ok) != (doc.get("tier"), doc.get("ok")):
        raise _refuse(where, "its tier / ok contradict the report inside")
    return SmokeEvidence(tier=ev.tier, subject=subject, suite_hash=suite, ok=ev.ok, stack=ev.stack,
                         variant=ev.variant, started=ev.started, attached_by=by, tested=ev.tested, gpu=ev.gpu,
                         failed=ev.failed, reused_from=str(doc.get("reused_from") or ""), report=ev.report,
                         artifact=artifact)


def carried(evidence: SmokeEvidence, *, subject: str, tested: str) -> SmokeEvidence:
    """``evidence`` (evidence for the image the suite ran on) as evidence for the image built on it: the final image
    is the gated image plus the entrypoint layer (the caller has checked that its layers begin with it)."""
    return SmokeEvidence(tier=evidence.tier, subject=subject, suite_hash=evidence.suite_hash, ok=evidence.ok, stack=evidence.stack,
                         variant=evidence.variant, started=evidence.started, attached_by="buildctl push", tested=tested,
                         gpu=evidence.gpu, failed=evidence.failed, reused_from=evidence.artifact, report=evidence.report)


# ------------------------------------------------------------------------------------------ deciding


@dataclass(frozen=True, kw_only=True)
class Decision:
    ok: bool
    reason: str  # why not, when not
    used: tuple[SmokeEvidence, ...] = ()  # the evidence the decision rests on
    notes: tuple[str, ...] = ()  # e.g. the waiver, evidence of other suites that was set aside

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "reason": self.reason, "notes": list(self.notes),
                "used": [{"tier": e.tier, "artifact": e.artifact, "suite_hash": e.suite_hash, "ok": e.ok,
                          "started": e.started, "attached_by": e.attached_by,
                          "gpu": None if e.gpu is None else e.gpu.to_json()} for e in self.used]}


def newest(found: Sequence[SmokeEvidence], tier: Tier, suite_hash: str) -> SmokeEvidence | None:
    """The newest evidence of ``tier`` made by ``suite_hash`` (the one that decides), or None."""
    mine = [e for e in found if e.tier == tier and e.suite_hash == suite_hash]
    return max(mine, key=lambda e: (e.started, e.artifact)) if mine else None


def decide(found: Sequence[SmokeEvidence], *, subject: str, suite_hash: str, gpu_waiver: str | None) -> Decision:
    """May a moving tag point at ``subject``? ``gpu_waiver``: the manifest's reason when it waives the GPU tier."""
    used: list[SmokeEvidence] = []
    notes: list[str] = []
    tiers: tuple[Tier, ...] = ("build",) if gpu_waiver is not None else ("build", "gpu")
    if gpu_waiver is not None:
        notes.append(f"GPU tier waived by the manifest: {gpu_waiver}")
    for tier in tiers:
        ev = newest(found, tier, suite_hash)
        if ev is None:
            others = sorted({e.suite_hash for e in found if e.tier == tier})
            if others:
                return Decision(ok=False, used=tuple(used), notes=tuple(notes), reason=(
                    f"the {tier}-tier evidence for {subject} was made by another smoke suite "
                    f"({', '.join(h[:19] for h in others)}); this buildctl's suite is {suite_hash[:19]}"))
            how = "the smoke gate's report is attached at push" if tier == "build" else \
                "run `python3 -m smoke --tier gpu --image-digest DIGEST` on a GPU host, then `buildctl evidence attach`"
            return Decision(ok=False, used=tuple(used), notes=tuple(notes),
                            reason=f"no {tier}-tier smoke evidence in the registry for {subject} ({how})")
        if not ev.ok:
            return Decision(ok=False, used=(*used, ev), notes=tuple(notes),
                            reason=f"the {tier}-tier evidence for {subject} says the suite failed: "
                                   f"{', '.join(ev.failed)} ({ev.artifact or 'not yet attached'})")
        used.append(ev)
    return Decision(ok=True, reason="", used=tuple(used), notes=tuple(notes))


def reusable(found: Sequence[SmokeEvidence], *, tier: Tier, suite_hash: str, gpu: Gpu | None = None) -> SmokeEvidence | None:
    """Evidence an unchanged image reuses instead of running the suite again: the newest of ``tier`` made by
    ``suite_hash``, passed, and (GPU tier) on the same GPU model and driver."""
    ev = newest([e for e in found if gpu is None or (e.gpu is not None and (e.gpu.name, e.gpu.driver)
                                                      == (gpu.name, gpu.driver))], tier, suite_hash)
    return ev if ev is not None and ev.ok else None


def gate_refusal(decision: Decision) -> SmokeFailed:
    return SmokeFailed(f"not promoted: {decision.reason}", fix="attach the missing evidence (`buildctl evidence attach "
                                                               "IMAGE REPORT`), then promote again")
