"""Publishing images: immutable tags first, confirmed by digest; moving tags only after the smoke gate.

``push_items`` pushes a list of ``PushItem`` (a local image and the registry ref of its immutable tag)
in order and returns a ``PushReport``. For each item:

1. the registry is asked for the tag first: when it already holds this very image (the local image's
   RepoDigests name the registry's digest) nothing is pushed at all; when it holds another image under
   an immutable tag, that image is kept and never overwritten;
2. otherwise the image is tagged and pushed; the engine decodes every chunk of the push stream (an
   error chunk is a failure even though docker-py does not raise) and confirms the pushed digest by
   reading the manifest back from the registry. Layers the registry has are not uploaded again (the
   engine checks each blob first: "Layer already exists");
3. a failure that may pass (a cut connection, a timeout, a 5xx, a 429) is retried with exponential backoff,
   bounded in attempts and time, by the engine under retrying.py's one policy (what it gave up on is counted,
   not retried again here); one that will not (refused credentials, an unknown image) is not. Dated tags
   (``nightly-YYYYMMDD``, ``PushItem.dated``) name the day's latest image: a later run of the day moves them.

``promote`` then moves moving tags (latest, nightly) only when every immutable tag was confirmed and
the ``evidence`` check passes for the image: it reads the smoke evidence attached to the pushed digest
in the registry (services/evidence.py; never a label the builder wrote) and the size budget; and it
confirms that each moving tag has the very digest of the immutable one; a moving tag that fails is in the
report (``failed`` and ``not_promoted``, ``ok: false``) with the ones after it, and a rerun moves them. A ``ReportSink`` rewrites the report file after every confirmation, so the file never
lists a push the registry has not confirmed. Every text that leaves this module goes through the
``Redactor``: credentials never reach output, logs or reports.

The nightly job reuses these pieces with its own items and moving tags.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl import retrying
from buildctl.engine.imageview import ImageView, ProgressView
from buildctl.engine.values import ATTEMPT_AGAIN
from buildctl.errors import BuildctlError, PushError, PushStalled, UnreachableError
from buildctl.graph.graph import Graph, image_ref
from buildctl.imageref import ImageRef
from buildctl.registry.attest import Attached
from buildctl.registry.credentials import Redactor
from buildctl.safepath import write_atomic

REPORT_SCHEMA = 1
ErrorKind = Literal["auth", "transient", "permanent"]
Outcome = Literal["pushed", "present", "kept"]

_AUTH = ("unauthorized", "authentication required", "denied", "no basic auth credentials",
         "incorrect username or password")
# HTTP 401 as a status, never the digits inside a port or a name (127.0.0.1:40189 is no refusal)
_STATUS_401 = re.compile(r"(?<![\w.:/-])401(?![\w.:/-])")
# An error that says the request itself is wrong: pushing again cannot help.
_PERMANENT = ("no such image", "does not exist locally", "invalid reference", "manifest invalid",
              "name invalid", "unsupported", "blob unknown to registry", "no space left")


class PushFailed(PushError):
    """A push that failed for good, saying which kind of failure and after how many attempts."""

    def __init__(self, what: str, *, why: str, fix: str, kind: ErrorKind, attempts: int) -> None:
        super().__init__(what, why=why, fix=fix)
        self.kind: ErrorKind = kind
        self.attempts = attempts


class PromotionVerdict(Protocol):
    """What the promotion check found for a pushed image (services/evidence.PromotionCheck): ``refusal``
    says why its moving tags must not move ("" when they may)."""

    @property
    def refusal(self) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


class PushEngine(Protocol):
    def inspect_image(self, ref: str) -> ImageView: ...
    def tag(self, image: str, ref: str) -> None: ...
    def push(self, ref: str, *, on_progress: Callable[[Any], None] | None = None) -> str: ...
    def registry_digest(self, ref: str) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff: ``attempts`` tries in all, waiting first_delay, x factor, ... up to max_delay."""

    attempts: int = 4
    first_delay: float = 2.0
    factor: float = 2.0
    max_delay: float = 30.0

    def delay(self, failed_attempts: int) -> float:
        return float(min(self.max_delay, self.first_delay * self.factor ** (failed_attempts - 1)))


@dataclass(frozen=True, kw_only=True)
class PushItem:
    source: str | None  # the local image (tag or id); None: not built here (fine if the registry has it)
    target: str  # registry/repository:immutable-tag
    node: str  # graph node name; the final image's node for the image itself
    key: str = ""  # the node's content key ("" for tags that are not content keys)
    moving: tuple[str, ...] = ()  # moving refs (…:latest, …:nightly) it gets if its smoke passed
    # a dated tag (``nightly-YYYYMMDD``): it names the image of the day's latest run, so a later run of the same
    # day moves it (confirmed by digest) instead of keeping the morning's image under it
    dated: bool = False


@dataclass(frozen=True, kw_only=True)
class Pushed:
    """An immutable tag the registry confirmed, with what it took."""

    target: str
    digest: str
    node: str
    key: str
    outcome: Outcome  # pushed now | already present (nothing sent) | kept (another image under the tag)
    uploaded: int = 0  # layers sent
    existing: int = 0  # layers the registry already had
    attempts: int = 0  # push attempts made (0 when nothing was pushed)
    engine_retries: int = 0  # uploads the engine itself retried ("Retrying in N seconds")

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "digest": self.digest, "node": self.node, "key": self.key,
                "outcome": self.outcome, "uploaded_layers": self.uploaded, "existing_layers": self.existing,
                "attempts": self.attempts, "engine_retries": self.engine_retries}


@dataclass(frozen=True, kw_only=True)
class Failed:
    target: str
    node: str
    kind: ErrorKind
    error: str  # what failed and why (redacted)
    fix: str
    attempts: int

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "node": self.node, "kind": self.kind, "error": self.error, "fix": self.fix,
                "attempts": self.attempts}


@dataclass(frozen=True, kw_only=True)
class Promotion:
    target: str  # the moving ref, e.g. registry/repo:latest
    source: str  # the immutable ref it now equals (or would have)
    digest: str | None  # None when not promoted
    reason: str = ""  # why not, when not

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "source": self.source, "digest": self.digest, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class PushReport:
    stack: str
    variant: str
    registry: str
    started: str
    finished: str = ""
    pushed: tuple[Pushed, ...] = ()
    failed: tuple[Failed, ...] = ()
    not_attempted: tuple[str, ...] = ()
    promoted: tuple[Promotion, ...] = ()
    not_promoted: tuple[Promotion, ...] = ()
    attached: tuple[Attached, ...] = ()  # evidence attached beside the final image
    checks: tuple[Mapping[str, Any], ...] = ()  # what promotion read for each image (evidence, sizes)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_attempted

    def digests(self) -> dict[str, str]:
        """ref -> digest of everything the registry confirmed (immutable and moving tags)."""
        out = {p.target: p.digest for p in self.pushed}
        out.update({p.target: p.digest for p in self.promoted if p.digest})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "ok": self.ok, "stack": self.stack, "variant": self.variant,
                "registry": self.registry, "started": self.started, "finished": self.finished,
                "digests": dict(sorted(self.digests().items())),
                "pushed": [p.to_json() for p in self.pushed], "failed": [f.to_json() for f in self.failed],
                "not_attempted": list(self.not_attempted),
                "promoted": [p.to_json() for p in self.promoted],
                "not_promoted": [p.to_json() for p in self.not_promoted],
                "attached": [a.to_json() for a in self.attached],
                "promotion_checks": [dict(c) for c in self.checks]}


class ReportSink:
    """``<reports>/push/<stack>/<variant>/<started>.json`` (and latest.json), rewritten atomically after
    every confirmation: a push that was not confirmed is never in it."""

    def __init__(self, reports: Path, stack: str, variant: str, started: str, redact: Redactor) -> None:
        self.folder = reports / "push" / stack / variant
        # the pid too: two runs started in the same second keep a report each
        self.path = self.folder / f"{started.replace(':', '')}-{os.getpid()}.json"
        self.redact = redact

    def write(self, report: PushReport) -> None:
        text = self.redact(json.dumps(report.to_json(), indent=2, sort_keys=True)) + "\n"
        write_atomic(self.path, text)
        write_atomic(self.folder / "latest.json", text)


def classify(text: str) -> ErrorKind:
    low = text.lower()
    if any(m in low for m in _AUTH) or _STATUS_401.search(low):
        return "auth"
    if any(m in low for m in _PERMANENT):
        return "permanent"
    return "transient"


def _utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(kw_only=True)
class _Layers:
    """Per-layer final status of one push, from the engine's progress events."""

    status: dict[str, str] = field(default_factory=dict)
    retries: int = 0
    again: int = 0  # whole pushes the engine tried again (a transient failure: retrying.py)

    def __call__(self, event: ProgressView) -> None:
        if event.status.startswith(ATTEMPT_AGAIN):
            self.again += 1
        elif event.status.startswith("Retrying"):
            self.retries += 1
        elif event.layer and (event.status in ("Pushed", "Layer already exists")
                              or event.status.startswith("Mounted from")):
            self.status[event.layer] = event.status

    @property
    def uploaded(self) -> int:
        return sum(1 for s in self.status.values() if s == "Pushed")

    @property
    def existing(self) -> int:
        return sum(1 for s in self.status.values() if s != "Pushed")


class Publisher:
    """Pushes items through an engine with retries, redaction and a report sink."""

    def __init__(self, engine: PushEngine, *, redact: Redactor, policy: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = lambda _t: None,
                 log: Callable[[str], None] = lambda _t: None) -> None:
        self.engine = engine
        self.redact = redact
        self.policy = policy
        self.sleep = sleep
        self._say = say
        self._log = log

    def say(self, text: str) -> None:
        text = self.redact(text)
        self._say(text)
        self._log(text)

    # -- one immutable tag

    def _registry_has(self, ref: str) -> str | None:
        try:
            return self.engine.registry_digest(ref)
        except UnreachableError:
            raise
        except BuildctlError as exc:
            raise self._error(ref, exc, attempts=0) from exc

    def _error(self, ref: str, exc: BuildctlError, *, attempts: int) -> PushFailed:
        text = f"{exc.what}: {exc.why}" if exc.why else exc.what
        kind = classify(text)
        host = ImageRef.parse(ref).host
        fix = {
            "auth": f"the registry {host} refused the credentials: log in with `docker login {host}`, "
                    "or set BUILDCTL_REGISTRY_AUTH=USER:PASSWORD",
            "permanent": exc.fix or "correct the cause above and push again",
            # "kept failing" only after retries: a failure before the first push attempt is just a failure
            "transient": (f"the registry {host} kept failing" if attempts > 1 else f"the registry {host} failed")
                         + "; check it and run the push again (what was confirmed is not pushed twice)",
        }[kind]
        tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        return PushFailed(self.redact(f"push of {ref} failed{tries}"), why=self.redact(text), fix=fix,
                          kind=kind, attempts=attempts)

    def push_one(self, item: PushItem) -> Pushed:
        target = ImageRef.parse(item.target)
        remote = self._registry_has(item.target)
        if remote is not None and item.source is None:
            # built elsewhere under the same content key: the registry's copy is this node
            self.say(f"present   {item.target} {remote} (built elsewhere; not in this engine)")
            return Pushed(target=item.target, digest=remote, node=item.node, key=item.key, outcome="present")
        if item.source is None:
            raise PushFailed(f"node {item.node} is neither in this engine nor in the registry ({item.target})",
                             why="it has not been built, or was built under another key",
                             fix="build it first (`buildctl build STACK --variant V`), then push", kind="permanent",
                             attempts=0)
        if remote is not None:
            local = self.engine.inspect_image(item.source)
            if f"{target.name()}@{remote}" in local.repo_digests:
                self.say(f"present   {item.target} {remote} (nothing to upload)")
                return Pushed(target=item.target, digest=remote, node=item.node, key=item.key, outcome="present")
            if not item.dated:
                self.say(f"kept      {item.target} {remote}: the registry holds another image under this "
                         "immutable tag; it is not overwritten")
                return Pushed(target=item.target, digest=remote, node=item.node, key=item.key, outcome="kept")
            self.say(f"moving    {item.target} from {remote}: a dated tag names the day's latest image")
        self.engine.tag(item.source, item.target)
        digest, layers, attempts = self._push_with_retries(item.target)
        self.say(f"pushed    {item.target} {digest} ({layers.uploaded} layer(s) uploaded, "
                 f"{layers.existing} already there)")
        return Pushed(target=item.target, digest=digest, node=item.node, key=item.key, outcome="pushed",
                      uploaded=layers.uploaded, existing=layers.existing, attempts=attempts,
                      engine_retries=layers.retries)

    def _push_with_retries(self, ref: str) -> tuple[str, _Layers, int]:
        attempt = 0
        while True:
            attempt += 1
            layers = _Layers()

            def progress(event: ProgressView, layers: _Layers = layers) -> None:
                layers(event)
                self._log(self.redact(f"{ref}: {event}"))
                if event.status.startswith("Retrying") and not event.status.startswith(ATTEMPT_AGAIN):
                    # the engine's own upload retries (up to about a minute) would otherwise look like a hang
                    self.say(f"retrying  {ref}: the engine retries an upload"
                             f"{' of layer ' + event.layer if event.layer else ''} ({event.status})")
                elif event.status.startswith(ATTEMPT_AGAIN):
                    self.say(f"retry     {ref}: {event.status}")

            try:
                digest = self.engine.push(ref, on_progress=progress)
                return digest, layers, attempt + layers.again
            except (PushError, UnreachableError) as exc:
                # the engine retries transient answers itself (retrying.py, the one policy of every registry
                # call): what it gave up on is not retried again here, only counted
                made = retrying.attempts_made(exc)
                err = self._error(ref, exc, attempts=attempt - 1 + max(made, 1))
                # a stall was retried by the engine layer already (each attempt waits stall_timeout)
                if err.kind != "transient" or attempt >= self.policy.attempts or isinstance(exc, PushStalled) \
                        or made:
                    raise err from exc
                wait = self.policy.delay(attempt)
                self.say(f"retry     {ref}: attempt {attempt} of {self.policy.attempts} failed "
                         f"({err.why}); next in {wait:g} s")
                self.sleep(wait)

    # -- a list of them, then the moving tags

    def push_items(self, items: Sequence[PushItem], report: PushReport,
                   sink: ReportSink | None = None) -> PushReport:
        for i, item in enumerate(items):
            try:
                done = self.push_one(item)
            except (PushError, UnreachableError) as exc:
                err = exc if isinstance(exc, PushFailed) else self._error(item.target, exc, attempts=0)
                failed = Failed(target=item.target, node=item.node, kind=err.kind, fix=self.redact(err.fix),
                                error=self.redact(f"{err.what}: {err.why}" if err.why else err.what),
                                attempts=err.attempts)
                report = replace(report, failed=(*report.failed, failed),
                                 not_attempted=tuple(x.target for x in items[i + 1:]))
                self.say(f"FAILED    {item.target}: {err.why or err.what}")
                break
            report = replace(report, pushed=(*report.pushed, done))
            if sink is not None:
                sink.write(report)
        return report

    def promote(self, items: Sequence[PushItem], report: PushReport, evidence: Mapping[str, str],
                sink: ReportSink | None = None) -> PushReport:
        """Move each item's moving tags, if all pushes were confirmed and its ``evidence`` check (target ->
        refusal, "" for none) let it through."""
        confirmed = {p.target: p for p in report.pushed}
        broken = ""  # a moving tag that failed: the rest are not attempted (the report lists each)
        for item in items:
            for moving in item.moving:
                if broken:
                    report = replace(report, not_promoted=(*report.not_promoted, Promotion(
                        target=moving, source=item.target, digest=None,
                        reason=f"not attempted: moving {broken} failed")))
                    self.say(f"not moved {moving}: not attempted (moving {broken} failed)")
                    continue
                reason = _refusal(item, report, confirmed) or evidence.get(
                    item.target, "no promotion check was made for it (smoke evidence is read from the registry)")
                if reason:
                    report = replace(report, not_promoted=(*report.not_promoted,
                                     Promotion(target=moving, source=item.target, digest=None, reason=reason)))
                    self.say(f"not moved {moving}: {reason}")
                    continue
                want = confirmed[item.target].digest
                assert item.source is not None  # _refusal: a promoted image was built here
                try:
                    self.engine.tag(item.source, moving)
                    digest, _layers, _attempts = self._push_with_retries(moving)
                    if digest != want:
                        raise PushError(f"moving tag {moving} got {digest}, not the digest of {item.target} ({want})",
                                        why="the registry made a different manifest for the same image",
                                        fix="check the registry; the immutable tag is unaffected")
                except (PushError, UnreachableError) as exc:
                    err = exc if isinstance(exc, PushFailed) else self._error(moving, exc, attempts=0)
                    text = self.redact(f"{err.what}: {err.why}" if err.why else err.what)
                    broken = moving
                    report = replace(
                        report, failed=(*report.failed, Failed(
                            target=moving, node="promote", kind=err.kind, error=text, attempts=err.attempts,
                            fix=self.redact(err.fix or "run again: confirmed tags are not pushed twice"))),
                        not_promoted=(*report.not_promoted,
                                      Promotion(target=moving, source=item.target, digest=None, reason=text)))
                    self.say(f"FAILED    moving {moving}: {err.why or err.what}")
                    if sink is not None:
                        sink.write(report)
                    continue
                report = replace(report, promoted=(*report.promoted,
                                 Promotion(target=moving, source=item.target, digest=digest)))
                self.say(f"moved     {moving} -> {digest}")
                if sink is not None:
                    sink.write(report)
        return report


def _refusal(item: PushItem, report: PushReport, confirmed: Mapping[str, Pushed]) -> str:
    if not report.ok:
        # say what failed: an evidence attach is not an immutable tag
        attach = [f for f in report.failed if f.node == "attach"]
        if attach:
            return f"attaching evidence to {attach[0].target} failed: {attach[0].error}"
        if report.failed:
            return f"the push of {report.failed[0].target} failed" + (
                f" ({len(report.not_attempted)} later tag(s) not attempted)" if report.not_attempted else "")
        return "not every immutable tag was confirmed"
    done = confirmed.get(item.target)
    if done is None:
        return f"{item.target} was not confirmed"
    if done.outcome == "kept":
        return f"the registry holds another image under {item.target}; this build's smoke result does not cover it"
    if item.source is None:
        return "it was not built in this engine, so no smoke result here covers it"
    return ""


def moving_refs(public: str, variant: str, tags: Sequence[str], *, default_variant: bool) -> tuple[str, ...]:
    """``public:<variant>-<tag>`` for each moving tag, and plain ``public:<tag>`` for the default variant."""
    out = [f"{public}:{variant}-{t}" for t in tags]
    if default_variant:
        out += [f"{public}:{t}" for t in tags]
    return tuple(out)


def stack_items(graph: Graph, *, registry: str, repository: str, locate: Callable[[str, str], str | None],
                moving: Sequence[str] = (), default_variant: bool = False) -> list[PushItem]:
    """What `buildctl push` publishes for one variant (pure): every built node under its content tag
    (graph.image_ref, the names any builder derives), then the final image under its public name
    ``<registry>/<repository>:<variant>-<key>``, which is the one moving tags point at.

    ``locate(node, key)`` names the local image of a node, or None when this engine does not have it.
    """
    items = [PushItem(source=locate(n.name, n.key), target=image_ref(registry, repository, n.name, n.key),
                      node=n.name, key=n.key)
             for n in graph.nodes if n.kind != "base"]
    final = graph.final
    public = f"{registry}/{repository.strip('/')}"
    items.append(PushItem(source=locate(final.name, final.key), target=f"{public}:{graph.variant}-{final.key[:16]}",
                          node=final.name, key=final.key,
                          moving=moving_refs(public, graph.variant, moving, default_variant=default_variant)))
    return items


def run(engine: PushEngine, items: Sequence[PushItem], *, stack: str, variant: str, registry: str,
        promote: bool, reports: Path, redact: Redactor, policy: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = lambda _t: None,
        log: Callable[[str], None] = lambda _t: None, clock: Callable[[], str] = _utc,
        attach: Callable[[Pushed], Sequence[Attached]] | None = None,
        evidence: Callable[[Pushed], PromotionVerdict] | None = None, attach_to: str | None = None) -> PushReport:
    """Push every item, then (with ``attach``) attach evidence to the last one (the final image, once all
    were confirmed), then (with ``promote``) ask ``evidence`` about each confirmed image that has moving
    tags and move them where it has no refusal; the report is written as it goes. An attachment or a
    check that fails is a failure of the push: moving tags then stay where they are."""
    started = clock()
    publisher = Publisher(engine, redact=redact, policy=policy, sleep=sleep, say=say, log=log)
    sink = ReportSink(reports, stack, variant, started, redact)
    report = PushReport(stack=stack, variant=variant, registry=registry, started=started)
    report = publisher.push_items(items, report, sink)
    if report.ok and items:
        # the image the tags name: ``attach_to`` (the final image's own tag), never a tag the registry kept
        # for another image; then every dated tag of it must name that very digest
        subject = attach_to or items[-1].target
        last = next(p for p in report.pushed if p.target == subject)
        stray = [f"{p.target} names {p.digest}" for p in report.pushed
                 if p.node == last.node and p.digest != last.digest
                 and any(i.target == p.target and i.dated for i in items)]
        if stray:
            report = replace(report, failed=(*report.failed, Failed(
                target=last.target, node="verify", kind="transient", attempts=1,
                error=redact(f"the dated tags of {last.target} do not name its digest {last.digest}: "
                             + "; ".join(stray)), fix="check the registry: another push moved them meanwhile")))
            sink.write(report)
    if attach is not None and report.ok and items:
        last = next(p for p in report.pushed if p.target == (attach_to or items[-1].target))
        try:
            done = tuple(attach(last))
        except (PushError, UnreachableError) as exc:
            text = redact(f"{exc.what}: {exc.why}" if exc.why else exc.what)
            report = replace(report, failed=(*report.failed, Failed(
                target=last.target, node="attach", kind=classify(text), error=text,
                fix=redact(exc.fix or "check the registry, then push again"), attempts=1)))
            publisher.say(f"FAILED    attach to {last.target}: {text}")
        else:
            for a in done:
                publisher.say(f"attached  {a.kind} {a.repository}@{a.artifact} (subject {a.subject}; "
                              f"referrers tag {a.referrers_tag})")
            report = replace(report, attached=(*report.attached, *done))
        sink.write(report)
    if promote:
        refusals: dict[str, str] = {}
        for item in items:
            it = next((p for p in report.pushed if p.target == item.target), None)
            if not item.moving or it is None or evidence is None or not report.ok:
                continue
            try:
                verdict = evidence(it)
                refusals[item.target] = verdict.refusal
                report = replace(report, checks=(*report.checks, verdict.to_json()))
            except (PushError, UnreachableError) as exc:
                refusals[item.target] = redact(f"the promotion check failed: {exc.what}" + (f" ({exc.why})" if exc.why else ""))
        report = publisher.promote(items, report, refusals, sink)
    report = replace(report, finished=clock())
    sink.write(report)
    return report


def render(report: PushReport) -> str:
    lines = [f"push {report.stack}/{report.variant} to {report.registry}"]
    w = max([len(p.node) for p in report.pushed] + [len(f.node) for f in report.failed] + [len("not moved")])
    for p in report.pushed:
        what = {"pushed": f"pushed ({p.uploaded} layer(s) uploaded, {p.existing} already there"
                          + (f", {p.attempts} attempts" if p.attempts > 1 else "") + ")",
                "present": "already in the registry (nothing sent)",
                "kept": "kept: the registry holds another image under this immutable tag"}[p.outcome]
        lines.append(f"  {p.node:<{w}}  {p.target}  {p.digest}  {what}")
    for f in report.failed:
        lines.append(f"  {f.node:<{w}}  {f.target}  FAILED ({f.kind}, {f.attempts} attempt(s)): {f.error}")
    lines += [f"  {'':<{w}}  {t}  not attempted" for t in report.not_attempted]
    lines += [f"  {'moved':<{w}}  {p.target} -> {p.digest}" for p in report.promoted]
    lines += [f"  {'not moved':<{w}}  {p.target}: {p.reason}" for p in report.not_promoted]
    lines += [f"  {'attached':<{w}}  {a.kind} {a.repository}@{a.artifact} -> {a.subject} (referrers tag "
              f"{a.referrers_tag})" for a in report.attached]
    lines.append("result: ok" if report.ok else "result: FAILED")
    return "\n".join(lines) + "\n"
