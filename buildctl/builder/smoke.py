"""The host side of the smoke suite: running smoke/ in a container, its reports, the gate.

- The expectation comes from ``buildctl.graph.smoke_expect`` (pure, from manifest and lock); the build
  records it in the image, and by default the runner reads it (and the interpreter) from the image, so
  an image can be smoked anywhere without its manifest.
- ``run_smoke`` copies smoke/ into a container of the image (``Engine.run(files=...)``: no bind mount),
  runs ``python -m smoke`` with the image's own interpreter under a timeout, GPUs passed through for
  the GPU tier, parses the JSON report into typed results and saves it (JSON + JUnit + the suite's
  stderr) under the reports folder (``Config.cache.reports / "smoke" / stack / variant``), named by
  image id and tier, so that promotion can ask whether an image's GPU tier was run (``recorded``).
- ``gate(report)`` raises SmokeFailed listing the failing required checks; ``BuildGate`` is the
  callable `buildctl build` runs on the assembled image before the entrypoint node.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol
from xml.etree import ElementTree as ET

from buildctl import syntax, untrusted
from buildctl.engine.imageview import RunOutcome
from buildctl.errors import SmokeFailed, UsageError
from buildctl.graph.smoke_expect import (
    EXPECT_LABEL,
    PYTHON_LABEL,
    Expectation,
    decode_label,
)
from buildctl.imageref import ImageRef
from buildctl.safepath import write_atomic

REPORT_SCHEMA = 1
SUITE_ROOT = Path(__file__).resolve().parents[2] / "smoke"  # the in-image suite (top-level smoke/)
IN_IMAGE = "/tmp/buildctl-smoke"  # where the suite and expect.json go inside the container

Status = Literal["pass", "fail", "unsupported", "skipped"]
Tier = Literal["build", "gpu"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "unsupported", "skipped")


# ------------------------------------------------------------------------------------------ reports


@dataclass(frozen=True, kw_only=True)
class CheckOutcome:
    name: str
    status: Status
    summary: str
    required: bool
    deferred: Tier | None = None  # the other tier owns this check (see smoke/report.py)
    details: Mapping[str, Any] = field(default_factory=dict, compare=False)
    duration_s: float = 0.0

    @property
    def satisfied(self) -> bool:
        return self.status in ("pass", "unsupported") or (self.status == "skipped" and self.deferred is not None)


@dataclass(frozen=True, kw_only=True)
class SmokeReport:
    tier: Tier
    ok: bool
    image: str
    image_id: str
    stack: str
    variant: str
    checks: tuple[CheckOutcome, ...]
    error: str = ""
    suite_hash: str = ""  # the suite that made it (smoke/suite.py's hash; suite_hash() here)
    python: Mapping[str, str] = field(default_factory=dict)
    started: str = ""
    duration_s: float = 0.0
    exit_code: int = 0
    report_path: Path | None = None
    junit_path: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def failed(self) -> tuple[CheckOutcome, ...]:
        return tuple(c for c in self.checks if c.required and not c.satisfied)

    def summary(self) -> str:
        req = [c for c in self.checks if c.required]
        if self.error:
            return f"{self.tier} tier could not run: {self.error}"
        if self.failed:
            return f"{self.tier} tier FAILED: " + ", ".join(c.name for c in self.failed)
        notes = [f"{c.name} {c.status}" + (f" ({c.deferred} tier)" if c.deferred else "")
                 for c in req if c.status != "pass"]
        return (f"{self.tier} tier passed: {len(req)} required check(s)"
                + (f"; {', '.join(notes)}" if notes else ""))


def _bad_report(what: str, image: str, detail: str) -> SmokeFailed:
    return SmokeFailed(f"the smoke suite gave no usable report for {image}: {what}", why=detail,
                       fix="run `buildctl smoke IMAGE --json` to see the suite's output; the saved .log holds its stderr")


def parse_report(text: str, *, image: str, image_id: str, exit_code: int) -> SmokeReport:
    """The suite's stdout as a typed report. Raises SmokeFailed when it is not one."""
    try:  # the suite's output from inside the image: through the bounded reader
        data = untrusted.loads(text)
    except ValueError as exc:
        first = text.strip().splitlines()[0][:200] if text.strip() else "(nothing on stdout)"
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise _bad_report("its output is not JSON", image, f"{msg}; output began: {first}") from None
    if not isinstance(data, dict) or data.get("suite") != "smoke" or data.get("schema") != REPORT_SCHEMA:
        raise _bad_report("not a smoke report of schema 1", image, str(data)[:300])
    try:
        checks = []
        for c in data["checks"]:
            if c["status"] not in STATUSES:
                raise ValueError(f"status {c['status']!r} of {c['name']}")
            if c.get("deferred") not in (None, "build", "gpu"):
                raise ValueError(f"deferred {c['deferred']!r} of {c['name']}")
            checks.append(CheckOutcome(name=str(c["name"]), status=c["status"], summary=str(c["summary"]),
                                       required=bool(c["required"]), deferred=c.get("deferred"),
                                       details=c.get("details", {}), duration_s=float(c.get("duration_s", 0.0))))
        tier = data["tier"]
        if tier not in ("build", "gpu"):
            raise ValueError(f"tier {tier!r}")
        report = SmokeReport(tier=tier, ok=bool(data["ok"]), image=image, image_id=image_id,
                             stack=str(data.get("stack", "")), variant=str(data.get("variant", "")),
                             checks=tuple(checks), error=str(data.get("error", "")), python=data.get("python", {}),
                             suite_hash=str(data.get("suite_hash", "")),
                             started=str(data.get("started", "")), duration_s=float(data.get("duration_s", 0.0)),
                             exit_code=exit_code, raw=data)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad_report("the report is malformed", image, f"{type(exc).__name__}: {exc}") from exc
    # The suite's own verdict and ours must agree; a mismatch means the suite itself broke.
    if report.ok != (not report.failed and not report.error) or report.ok != (exit_code == 0):
        raise _bad_report(f"its verdict (ok={report.ok}, exit status {exit_code}) contradicts its checks", image,
                          ", ".join(f"{c.name}={c.status}" for c in report.checks))
    return report


def render_junit(report: SmokeReport) -> str:
    """JUnit XML of a report: a required check that does not satisfy the tier is a failure; unsupported and
    deferred results, and checks that are not required, are <skipped> with their reason."""
    suite = ET.Element("testsuite", name=f"buildctl.smoke.{report.tier}", tests=str(len(report.checks)),
                       failures=str(len(report.failed)), errors="1" if report.error else "0",
                       skipped=str(sum(1 for c in report.checks if c.status != "pass" and not (c.required and not c.satisfied))),
                       time=f"{report.duration_s:.3f}")
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="image", value=report.image)
    if report.error:
        ET.SubElement(ET.SubElement(suite, "testcase", classname="smoke", name="expect"), "error", message=report.error)
    for c in report.checks:
        case = ET.SubElement(suite, "testcase", classname=f"smoke.{report.tier}", name=c.name, time=f"{c.duration_s:.3f}")
        if c.required and not c.satisfied:
            ET.SubElement(case, "failure", message=f"{c.status}: {c.summary}")
        elif c.status != "pass":
            note = "" if c.required else " (not required)"
            ET.SubElement(case, "skipped", message=f"{c.status}{note}: {c.summary}")
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


SAVED_MAX = 64 << 20  # bytes of a saved report read at most (a suite's report is tens of KiB)


def report_stem(image_id: str, tier: Tier) -> str:
    return f"{image_id.removeprefix('sha256:')[:12]}.{tier}"


def recorded(report_dir: Path, image_id: str, tier: Tier) -> SmokeReport | None:
    """The saved report of ``tier`` for an image id (promotion asks this for the GPU tier), or None."""
    path = report_dir / f"{report_stem(image_id, tier)}.json"
    try:  # a file of the cache: a regular one of bounded size and depth, of the shape save_report writes
        saved = untrusted.obj(untrusted.loads(untrusted.read_regular(path, SAVED_MAX)), "the saved report")
        text, image, exit_code = json.dumps(saved["report"]), str(saved["image"]), int(saved["exit_code"])
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _bad_report(f"{path} cannot be read", image_id, exc.strerror or str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise _bad_report(f"{path} is not JSON", image_id, exc.msg) from exc
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Malformed too: a FIFO, too large or deep
        raise _bad_report(f"{path} is not a saved smoke report", image_id, f"{type(exc).__name__}: {exc}") from exc
    report = parse_report(text, image=image, image_id=image_id, exit_code=exit_code)
    return replace(report, report_path=path)


# ---------------------------------------------------------------------------------------------- run


class ImageLabels(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def repo_digests(self) -> Sequence[str]: ...


class EvidenceLookup(Protocol):
    """Evidence an unchanged image reuses instead of running the suite (services/evidence.GateReuse)."""

    def reusable(self, repo_digests: Sequence[str], suite_hash: str) -> Mapping[str, str] | None: ...


class SmokeEngine(Protocol):
    """What the runner needs of buildctl.engine.engine.Engine."""

    def inspect_image(self, ref: str) -> ImageLabels: ...

    def run(self, image: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            files: Mapping[str, bytes] | None = None, workdir: str | None = None, gpus: bool = False,
            timeout: float) -> RunOutcome: ...


def suite_files(root: Path = SUITE_ROOT) -> dict[str, bytes]:
    """The suite's Python files, keyed by their path inside the container."""
    if not (root / "__main__.py").is_file():
        raise UsageError(f"the smoke suite is not at {root}",
                         fix="run buildctl from a checkout (smoke/ sits beside buildctl/)")
    files = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        files[f"{IN_IMAGE}/smoke/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return files


def suite_hash(root: Path = SUITE_ROOT) -> str:
    """The hash of the suite this buildctl runs: what ``python3 -m smoke`` writes as the report's ``suite_hash``
    (smoke/suite.py, over the same files ``suite_files`` copies into the container)."""
    h = hashlib.sha256()
    prefix = f"{IN_IMAGE}/smoke/"
    for rel, data in sorted((k.removeprefix(prefix), v) for k, v in suite_files(root).items()):
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return "sha256:" + h.hexdigest()


def registry_digest(image: str, repo_digests: Sequence[str]) -> str:
    """The registry manifest digest of ``image`` (a reference by digest, or the engine's record of its
    repository's digest after a push or pull), or "" when the engine knows none."""
    ref = ImageRef.parse(image)
    if ref.digest:
        return ref.digest
    found = {d.partition("@")[2] for d in repo_digests if d.partition("@")[0] == ref.name()}
    return found.pop() if len(found) == 1 else ""


def expectation_of(engine: SmokeEngine, image: str) -> Expectation:
    info = engine.inspect_image(image)
    value = info.labels.get(EXPECT_LABEL)
    if not value:
        raise UsageError(f"{image} carries no {EXPECT_LABEL} label, so its smoke expectations are unknown",
                         fix="pass --stack STACK [--variant V] to compute them from the manifest and lock")
    return decode_label(value, f"{image} label {EXPECT_LABEL}")


def checked_python(python: str) -> str:
    """``--python``, held to the rule of the manifest's smoke.python (syntax.interpreter): a UsageError if not."""
    problem = syntax.interpreter(python)
    if problem:
        raise UsageError(f"--python {python!r} {problem}")
    return python


def _interpreter(image: str, python: str | None, label: str | None, expected: str) -> str:
    """The program the container runs: --python, else the image's PYTHON_LABEL, else the expectation's (the
    manifest's smoke.python, or what the image's EXPECT_LABEL records), else python3; held to the rule of
    smoke.python and --python (syntax.interpreter) whichever gave it, before a container is started. A label
    (or an expectation read from the image) that breaks it is the image's fault: SmokeFailed naming both."""
    if python:
        return checked_python(python)
    if label:
        where = f"its {PYTHON_LABEL} label"
        chosen = label
    else:
        where = f"runner.python of its smoke expectation ({EXPECT_LABEL} label, or the manifest's smoke.python)"
        chosen = expected or "python3"
    problem = syntax.interpreter(chosen)
    if problem:
        raise SmokeFailed(f"the smoke suite cannot run in {image}: {where} says {chosen!r}, which {problem}",
                          why="the interpreter is run in the container as one word, so it must be a plain name or path",
                          fix="rebuild the image from a manifest whose smoke.python is right, or pass --python")
    return chosen


def run_smoke(engine: SmokeEngine, image: str, expect: Expectation | None, *, gpus: bool = False,
              timeout: float | None = None, report_dir: Path, python: str | None = None,
              suite_root: Path = SUITE_ROOT) -> SmokeReport:
    """Run the suite's build tier (or, with ``gpus``, its GPU tier) in a container of ``image``.

    ``expect`` None: the expectation the image's label records. The report is saved under
    ``report_dir`` as ``<image id>.<tier>.json`` / ``.xml`` / ``.log`` before it is returned; a report
    that does not pass is returned too (``gate`` decides). Raises SmokeFailed when the suite gave no report.
    """
    info = engine.inspect_image(image)
    exp = expect if expect is not None else expectation_of(engine, image)
    tier: Tier = "gpu" if gpus else "build"
    interpreter = _interpreter(image, python, info.labels.get(PYTHON_LABEL), exp.python)
    files = suite_files(suite_root)
    files[f"{IN_IMAGE}/expect.json"] = (json.dumps(exp.suite_json(), indent=2, sort_keys=True) + "\n").encode()
    limit = timeout if timeout is not None else exp.timeout_s
    command = [interpreter, "-m", "smoke", "--expect", f"{IN_IMAGE}/expect.json", "--tier", tier]
    subject = registry_digest(image, info.repo_digests)
    if subject:  # the report names the image it tested, as `buildctl evidence attach` wants it
        command += ["--image-digest", subject]
    result = engine.run(image, command, env={"PYTHONDONTWRITEBYTECODE": "1"}, files=files, workdir=IN_IMAGE,
                        gpus=gpus, timeout=limit)
    stem = report_stem(info.id, tier)
    report_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(report_dir / f"{stem}.log", f"$ {' '.join(command)}\nexit status {result.exit_code}\n"
                 f"--- stderr\n{result.stderr}--- stdout\n{result.stdout}")
    if result.timed_out:
        raise SmokeFailed(f"the smoke suite ({tier} tier) on {image} ran past {limit:.0f} s and was stopped",
                          why=f"its output is in {report_dir / (stem + '.log')}",
                          fix="raise smoke.timeout_s in the manifest (or --timeout), or find the probe that hangs")
    if result.exit_code not in (0, 1, 2):
        tail = " / ".join(result.stderr.strip().splitlines()[-3:]) or "(no stderr)"
        raise SmokeFailed(f"the smoke suite did not run in {image}: `{interpreter} -m smoke` exited {result.exit_code}",
                          why=tail, fix=f"check that {interpreter} exists in the image (smoke.python in the manifest, "
                          f"or the {PYTHON_LABEL} label); the full output is in {report_dir / (stem + '.log')}")
    report = parse_report(result.stdout, image=image, image_id=info.id, exit_code=result.exit_code)
    report_path = report_dir / f"{stem}.json"
    junit_path = report_dir / f"{stem}.xml"
    saved = {"schema": REPORT_SCHEMA, "image": image, "image_id": info.id, "tier": tier, "exit_code": result.exit_code,
             "expectation": exp.to_json(), "report": report.raw}
    write_atomic(report_path, json.dumps(saved, indent=2, sort_keys=True) + "\n")
    final = replace(report, report_path=report_path, junit_path=junit_path)
    write_atomic(junit_path, render_junit(final))
    return final


def gate(report: SmokeReport) -> None:
    """Raise SmokeFailed, listing the failing required checks, unless the report lets the image through."""
    where = f"; report: {report.report_path}" if report.report_path else ""
    if report.error:
        raise SmokeFailed(f"smoke {report.tier} tier could not run on {report.image}: {report.error}",
                          fix=f"fix the expectation (see smoke/README.md){where}")
    if report.failed:
        names = ", ".join(c.name for c in report.failed)
        lines = [f"{c.name}: {c.status}: {c.summary}" for c in report.failed]
        raise SmokeFailed(f"smoke {report.tier} tier failed on {report.image}: {names}",
                          why="\n       ".join(lines),
                          fix=f"fix the image (or the manifest's expectations) and run `buildctl smoke` again{where}")


@dataclass(frozen=True, kw_only=True)
class BuildGate:
    """The gate `buildctl build` runs on the assembled image before the entrypoint node (pipeline.SmokeGate)."""

    report_dir: Path
    timeout: float | None = None
    evidence: EvidenceLookup | None = None  # build-tier evidence in the registry for the image's digest

    def __call__(self, engine: SmokeEngine, image: str, *, log_file: Path) -> str:
        if self.evidence is not None:
            info = engine.inspect_image(image)
            reused = self.evidence.reusable(info.repo_digests, suite_hash())
            if reused is not None:
                # same content (digest), suite and tier: the suite is not run again; the record says whose evidence
                summary = f"build tier passed: reused evidence {reused['artifact']} of {reused['image']} " \
                          f"({reused['made']})"
                self.report_dir.mkdir(parents=True, exist_ok=True)
                write_atomic(self.report_dir / f"{report_stem(info.id, 'build')}.reused.json",
                             json.dumps({"image": image, "image_id": info.id, **reused}, indent=2, sort_keys=True) + "\n")
                write_atomic(log_file, summary + "\n")
                return summary
        report = run_smoke(engine, image, None, report_dir=self.report_dir, timeout=self.timeout)
        lines = [report.summary(), *(f"  {c.name:14} {c.status:11} {c.summary}" for c in report.checks),
                 f"report: {report.report_path}"]
        write_atomic(log_file, "\n".join(lines) + "\n")
        gate(report)
        return report.summary()
