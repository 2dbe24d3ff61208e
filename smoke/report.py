"""Check results, the JSON report and its JUnit rendering (standard library only)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.etree import ElementTree as ET

from smoke import REPORT_SCHEMA

Status = Literal["pass", "fail", "unsupported", "skipped"]
Tier = Literal["build", "gpu"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "unsupported", "skipped")
TIERS: tuple[Tier, ...] = ("build", "gpu")


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """What one check found.

    ``deferred`` names the other tier when this tier has nothing of the check to run (the build
    tier cannot ask a GPU; a TE import that needs a device belongs to the GPU tier). Such a
    result does not count against the tier; a skip without ``deferred`` does.
    """

    name: str
    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    deferred: Tier | None = None
    required: bool = False
    duration_s: float = 0.0

    @property
    def satisfied(self) -> bool:
        """Whether this result lets a tier pass when the check is required."""
        if self.status in ("pass", "unsupported"):
            return True
        return self.status == "skipped" and self.deferred is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "details": self.details,
            "deferred": self.deferred,
            "required": self.required,
            "duration_s": round(self.duration_s, 3),
        }


def passed(name: str, summary: str, **details: Any) -> CheckResult:
    return CheckResult(name=name, status="pass", summary=summary, details=details)


def failed(name: str, summary: str, **details: Any) -> CheckResult:
    return CheckResult(name=name, status="fail", summary=summary, details=details)


def unsupported(name: str, summary: str, **details: Any) -> CheckResult:
    return CheckResult(name=name, status="unsupported", summary=summary, details=details)


def skipped(name: str, summary: str, *, deferred: Tier | None = None, **details: Any) -> CheckResult:
    return CheckResult(name=name, status="skipped", summary=summary, details=details, deferred=deferred)


@dataclass(frozen=True, kw_only=True)
class Report:
    tier: Tier
    stack: str
    variant: str
    checks: tuple[CheckResult, ...]
    python: dict[str, str]
    driver: dict[str, Any]
    started: str
    duration_s: float
    error: str = ""  # the suite itself could not run (bad expect.json): nothing was checked
    suite_hash: str = ""  # smoke.suite.suite_hash: which suite made this report
    subject: str = ""  # the image manifest digest the run was told it tests (--image-digest), or ""

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.required and not c.satisfied]

    @property
    def ok(self) -> bool:
        return not self.error and not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "suite": "smoke",
            "suite_hash": self.suite_hash,
            "subject": self.subject,
            "tier": self.tier,
            "ok": self.ok,
            "error": self.error,
            "stack": self.stack,
            "variant": self.variant,
            "python": self.python,
            "driver": self.driver,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "failed": self.failed,
            "deferred": [c.name for c in self.checks if c.status == "skipped" and c.deferred],
            "counts": {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES},
            "checks": [c.to_json() for c in self.checks],
        }

    def to_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def junit_xml(report: Report) -> str:
    """JUnit XML: one testcase per check; required checks that do not satisfy the tier are failures.

    A required check skipped without deferral is a failure here too (CI would otherwise count it
    as passing); unsupported and deferred results, and results of checks that are not required,
    are <skipped> with their reason. A suite that could not run is one testcase ("expect") with an
    <error>. The suite's counts are those of the testcases written.
    """
    cls = f"smoke.{report.tier}"
    cases: list[ET.Element] = []
    counts = {"failure": 0, "error": 0, "skipped": 0}
    if report.error:
        case = ET.Element("testcase", classname=cls, name="expect")
        ET.SubElement(case, "error", message=report.error)
        counts["error"] += 1
        cases.append(case)
    for c in report.checks:
        case = ET.Element("testcase", classname=cls, name=c.name, time=f"{c.duration_s:.3f}")
        body = json.dumps(c.details, indent=2, sort_keys=True)
        if c.required and not c.satisfied:
            el = ET.SubElement(case, "failure", message=f"{c.status}: {c.summary}")
            el.text = body
            counts["failure"] += 1
        elif c.status != "pass":
            note = "" if c.required else " (not required)"
            ET.SubElement(case, "skipped", message=f"{c.status}{note}: {c.summary}")
            ET.SubElement(case, "system-out").text = body
            counts["skipped"] += 1
        cases.append(case)
    suite = ET.Element(
        "testsuite",
        name=cls,
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{report.duration_s:.3f}",
        timestamp=report.started,
    )
    suite.extend(cases)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
