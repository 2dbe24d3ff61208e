"""push.py against a data fake of the engine: retries, what is recorded, promotion, redaction."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from buildctl.errors import EngineError, PushError, UnreachableError
from buildctl.graph.graph import Graph, Node
from buildctl.graph.specs import BaseNodeSpec, NodeKind
from buildctl.labels import SMOKE_LABEL
from buildctl.registry.credentials import Redactor
from buildctl.ship import push
from tests.unit.fakes_ship import Event, FakeEngine, Image, stream_error

REG = "127.0.0.1:5999"
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64
PUSHED = [Event(status="Preparing", layer="l1"), Event(status="Pushed", layer="l1"),
          Event(status="Layer already exists", layer="l2"), Event(status="Layer already exists", layer="l3")]


def item(node: str = "assemble", key: str = "k1", moving: tuple[str, ...] = ()) -> push.PushItem:
    return push.PushItem(source=f"local/{node}:{key}", target=f"{REG}/demo/{node}:{key}", node=node, key=key,
                         moving=tuple(f"{REG}/demo/{node}:{t}" for t in moving))


def engine_with(*items: push.PushItem, smoke: str = "passed") -> FakeEngine:
    return FakeEngine(images={i.source: Image(labels={SMOKE_LABEL: smoke}) for i in items if i.source})


@dataclass(frozen=True)
class Verdict:
    """What services/evidence.PromotionCheck says, as data."""

    refusal: str

    def to_json(self) -> dict[str, Any]:
        return {"refusal": self.refusal}


def checks(refusals: Mapping[str, str]) -> Callable[[push.Pushed], Verdict]:
    """An evidence check that refuses the targets named (target -> why) and lets every other through."""
    return lambda p: Verdict(refusals.get(p.target, ""))


ALLOW = checks({})


def run(engine: FakeEngine, items: list[push.PushItem], tmp_path: Path, *, promote: bool = False,
        attempts: int = 3, redact: Redactor | None = None,
        evidence: Callable[[push.Pushed], Verdict] | None = ALLOW) -> tuple[push.PushReport, list[float], list[str]]:
    sleeps: list[float] = []
    said: list[str] = []
    report = push.run(engine, items, stack="demo", variant="v", registry=REG, promote=promote,
                      reports=tmp_path, redact=redact or Redactor(),
                      policy=push.RetryPolicy(attempts=attempts, first_delay=1.0, factor=2.0, max_delay=3.0),
                      sleep=sleeps.append, say=said.append, clock=lambda: "2026-01-02T03:04:05Z", evidence=evidence)
    return report, sleeps, said


def recorded(tmp_path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((tmp_path / "push/demo/v/latest.json").read_text())
    return data


def test_a_push_is_recorded_with_its_confirmed_digest_and_layer_counts(tmp_path: Path) -> None:
    it = item()
    eng = engine_with(it)
    eng.push_script = [(D1, PUSHED)]
    report, sleeps, _ = run(eng, [it], tmp_path)
    assert report.ok
    [p] = report.pushed
    assert (p.outcome, p.digest, p.uploaded, p.existing, p.attempts) == ("pushed", D1, 1, 2, 1)
    assert ("tag", (it.source, it.target)) in eng.calls
    assert recorded(tmp_path)["digests"] == {it.target: D1}
    assert (tmp_path / f"push/demo/v/2026-01-02T030405Z-{os.getpid()}.json").read_text() == \
        (tmp_path / "push/demo/v/latest.json").read_text()
    assert sleeps == []


def test_an_image_the_registry_already_has_is_not_pushed_at_all(tmp_path: Path) -> None:
    it = item()
    assert it.source is not None
    eng = FakeEngine(images={it.source: Image(repo_digests=(f"{REG}/demo/assemble@{D1}",))},
                     registry={it.target: D1})
    report, _, said = run(eng, [it], tmp_path)
    assert [c for c in eng.calls if c[0] in ("push", "tag")] == []
    assert report.pushed[0].outcome == "present" and report.pushed[0].digest == D1
    assert "nothing to upload" in said[0]


def test_another_image_under_an_immutable_tag_is_kept_not_overwritten_nor_promoted(tmp_path: Path) -> None:
    it = item(moving=("latest",))
    eng = engine_with(it)
    eng.registry[it.target] = D2
    report, _, _ = run(eng, [it], tmp_path, promote=True)
    assert [c for c in eng.calls if c[0] == "push"] == []
    assert report.pushed[0].outcome == "kept"
    assert report.promoted == ()
    assert "another image" in report.not_promoted[0].reason


def test_a_transient_failure_is_retried_with_exponential_backoff(tmp_path: Path) -> None:
    it = item()
    eng = engine_with(it)
    eng.push_script = [stream_error("Put http://x/v2/demo/manifests/k1: EOF"),
                       stream_error("connection reset by peer"), (D1, PUSHED)]
    report, sleeps, said = run(eng, [it], tmp_path, attempts=4)
    assert report.ok and report.pushed[0].attempts == 3
    assert sleeps == [1.0, 2.0]
    assert any("attempt 1 of 4 failed" in s for s in said)


def test_retries_are_bounded_and_a_failed_push_is_never_recorded(tmp_path: Path) -> None:
    first, second = item("python", "k0"), item("assemble", "k1")
    eng = engine_with(first, second)
    eng.push_script = [(D2, PUSHED)] + [stream_error("unexpected EOF")] * 3
    report, sleeps, _ = run(eng, [first, second], tmp_path, attempts=3)
    assert not report.ok
    assert sleeps == [1.0, 2.0]  # the third failure is the last attempt: no wait after it
    assert [p.target for p in report.pushed] == [first.target]
    [f] = report.failed
    assert (f.target, f.kind, f.attempts) == (second.target, "transient", 3)
    assert "after 3 attempts" in f.error and "run the push again" in f.fix
    data = recorded(tmp_path)
    assert data["digests"] == {first.target: D2} and data["ok"] is False


def test_the_backoff_delay_is_capped() -> None:
    policy = push.RetryPolicy(attempts=9, first_delay=2.0, factor=3.0, max_delay=20.0)
    assert [policy.delay(n) for n in range(1, 5)] == [2.0, 6.0, 18.0, 20.0]


def test_refused_credentials_are_not_retried_and_say_how_to_log_in(tmp_path: Path) -> None:
    it = item()
    eng = engine_with(it)
    eng.push_script = [stream_error("unauthorized: authentication required")]
    report, sleeps, _ = run(eng, [it], tmp_path)
    assert sleeps == [] and len([c for c in eng.calls if c[0] == "push"]) == 1
    [f] = report.failed
    assert f.kind == "auth" and "docker login 127.0.0.1:5999" in f.fix and "BUILDCTL_REGISTRY_AUTH" in f.fix


def test_an_unreachable_registry_fails_before_any_push(tmp_path: Path) -> None:
    first, second = item("python", "k0"), item()
    eng = engine_with(first, second)
    eng.registry_error = UnreachableError("registry 127.0.0.1:5999 cannot be reached", why="connection refused")
    report, sleeps, _ = run(eng, [first, second], tmp_path)
    assert [c for c in eng.calls if c[0] == "push"] == [] and sleeps == []
    assert report.failed[0].target == first.target and report.not_attempted == (second.target,)


def test_a_lookup_refused_for_credentials_is_an_auth_failure(tmp_path: Path) -> None:
    it = item()
    eng = engine_with(it)
    eng.registry_error = EngineError("looking up x failed", why="errors: unauthorized: authentication required")
    report, _, _ = run(eng, [it], tmp_path)
    assert report.failed[0].kind == "auth"


def test_secrets_are_redacted_in_what_is_said_and_recorded(tmp_path: Path) -> None:
    it = item()
    eng = engine_with(it)
    eng.push_script = [stream_error("denied for user bob password hunter2-secret")]
    report, _, said = run(eng, [it], tmp_path, redact=Redactor(secrets=("hunter2-secret",)))
    text = (tmp_path / "push/demo/v/latest.json").read_text() + "\n".join(said) + push.render(report)
    assert "hunter2-secret" not in text and "***" in text


def test_promotion_moves_tags_only_for_images_the_evidence_check_lets_through(tmp_path: Path) -> None:
    good, other = item("entrypoint", "k1", ("latest", "nightly")), item("other", "k2", ("latest",))
    assert good.source is not None and other.source is not None
    # the label says passed for both: promotion does not read it
    eng = FakeEngine(images={good.source: Image(labels={SMOKE_LABEL: "passed"}),
                             other.source: Image(labels={SMOKE_LABEL: "passed"})})
    eng.push_script = [(D1, PUSHED), (D2, PUSHED), (D1, []), (D1, [])]
    report, _, _ = run(eng, [good, other], tmp_path, promote=True,
                       evidence=checks({other.target: "no build-tier smoke evidence in the registry"}))
    assert [(p.target, p.digest) for p in report.promoted] == [
        (f"{REG}/demo/entrypoint:latest", D1), (f"{REG}/demo/entrypoint:nightly", D1)]
    [refused] = report.not_promoted
    assert refused.target == f"{REG}/demo/other:latest" and "no build-tier smoke evidence" in refused.reason
    assert recorded(tmp_path)["promotion_checks"] == [{"refusal": ""},
                                                      {"refusal": "no build-tier smoke evidence in the registry"}]
    pushes = [c[1] for c in eng.calls if c[0] == "push"]
    assert pushes.index(f"{REG}/demo/entrypoint:latest") > pushes.index(other.target)  # immutable ones first
    assert recorded(tmp_path)["digests"] == {good.target: D1, other.target: D2,
                                             f"{REG}/demo/entrypoint:latest": D1,
                                             f"{REG}/demo/entrypoint:nightly": D1}


def test_nothing_is_promoted_when_any_push_failed(tmp_path: Path) -> None:
    final, node = item("entrypoint", "k1", ("latest",)), item("wheel-x", "k2")
    eng = engine_with(final, node)
    eng.push_script = [(D1, PUSHED), stream_error("manifest invalid: bad")]
    report, _, _ = run(eng, [final, node], tmp_path, promote=True)
    # the reason names the push that failed
    assert report.promoted == () and report.not_promoted[0].reason == f"the push of {node.target} failed"
    assert len([c for c in eng.calls if c[0] == "push"]) == 2  # the permanent failure was not retried


def test_without_an_evidence_check_a_passed_label_promotes_nothing(tmp_path: Path) -> None:
    it = item(moving=("latest",))
    eng = engine_with(it, smoke="passed")
    eng.push_script = [(D1, PUSHED)]
    report, _, _ = run(eng, [it], tmp_path, promote=True, evidence=None)
    assert report.promoted == () and "no promotion check" in report.not_promoted[0].reason


def test_a_check_that_cannot_read_the_registry_refuses(tmp_path: Path) -> None:
    it = item(moving=("latest",))
    eng = engine_with(it)
    eng.push_script = [(D1, PUSHED)]

    def unreachable(_p: push.Pushed) -> Verdict:
        raise UnreachableError("the registry does not answer", why="connection refused")

    report, _, _ = run(eng, [it], tmp_path, promote=True, evidence=unreachable)
    assert report.promoted == ()
    assert report.not_promoted[0].reason == ("the promotion check failed: the registry does not answer "
                                             "(connection refused)")


def test_a_moving_tag_that_gets_another_digest_is_an_error(tmp_path: Path) -> None:
    it = item(moving=("latest",))
    eng = engine_with(it)
    eng.push_script = [(D1, PUSHED), (D2, [])]
    report, _, _ = run(eng, [it], tmp_path, promote=True)
    assert not report.ok and report.promoted == ()
    assert "not the digest of" in report.failed[0].error and report.failed[0].node == "promote"


def test_the_registry_dying_between_two_moving_tags_is_reported_exactly_and_a_rerun_converges(
        tmp_path: Path) -> None:
    """Issue 33 item 16: `default-nightly` moved, then the registry died before `nightly`: the report lists what
    moved and what did not, says ok: false (latest.json too), and a rerun moves the rest."""
    it = item("entrypoint", "k1", ("default-nightly", "nightly"))
    eng = engine_with(it)
    dead = stream_error("dial tcp 127.0.0.1:5999: connect: connection refused")
    eng.push_script = [(D1, PUSHED), (D1, []), dead, dead, dead]
    report, _, said = run(eng, [it], tmp_path, promote=True)
    assert [p.target for p in report.promoted] == [it.moving[0]]
    assert [(p.target, p.digest) for p in report.not_promoted] == [(it.moving[1], None)]
    assert [(f.target, f.node) for f in report.failed] == [(it.moving[1], "promote")]
    latest = json.loads((tmp_path / "push/demo/v/latest.json").read_text())
    assert latest["ok"] is False and latest["failed"][0]["target"] == it.moving[1]
    assert latest["digests"] == {it.target: D1, it.moving[0]: D1}
    assert any(line.startswith(f"FAILED    moving {it.moving[1]}") for line in said)
    # the registry is back: the rerun pushes nothing twice and moves both
    assert it.source is not None
    eng.images[it.source] = Image(labels={SMOKE_LABEL: "passed"}, repo_digests=(f"{REG}/demo/entrypoint@{D1}",))
    eng.push_script = [(D1, []), (D1, [])]
    again, _, _ = run(eng, [it], tmp_path, promote=True)
    assert again.ok and [p.target for p in again.promoted] == list(it.moving)
    assert again.pushed[0].outcome == "present"


def test_a_dated_tag_moves_to_the_new_image_and_evidence_goes_to_the_final_images_digest(tmp_path: Path) -> None:
    """Issue 33 item 12: a second nightly of a day: `nightly-YYYYMMDD` held the morning's image (D2); it moves to
    this run's (D1), and the evidence is attached to D1, the digest the final tag and every dated tag name."""
    final = item("entrypoint", "k1", ("nightly",))
    dated = push.PushItem(source=final.source, target=f"{REG}/demo:nightly-20261204", node="entrypoint", key="k1",
                          dated=True)
    immutable = push.PushItem(source=final.source, target=f"{REG}/demo:demo-default-abc", node="entrypoint",
                              key="k1")
    eng = engine_with(final)
    eng.registry = {dated.target: D2, immutable.target: D2}  # the morning's image under both
    eng.push_script = [(D1, PUSHED), (D1, []), (D1, [])]
    attached: list[str] = []

    def attach(p: push.Pushed) -> list[Any]:
        attached.append(p.digest)
        return []

    report = push.run(eng, [final, immutable, dated], stack="demo", variant="v", registry=REG, promote=True,
                      reports=tmp_path, redact=Redactor(), sleep=lambda _s: None, attach=attach,
                      evidence=ALLOW, attach_to=final.target)
    outcomes = {p.target: (p.outcome, p.digest) for p in report.pushed}
    assert outcomes == {final.target: ("pushed", D1), immutable.target: ("kept", D2), dated.target: ("pushed", D1)}
    assert attached == [D1] and report.ok
    assert [(p.target, p.digest) for p in report.promoted] == [(final.moving[0], D1)]


def test_a_failed_attach_is_named_as_such_not_as_an_unconfirmed_tag(tmp_path: Path) -> None:
    """Issue 33 item 18: the lock attach failed, so the moving tags stay: the reason says so."""
    it = item("entrypoint", "k1", ("nightly",))
    eng = engine_with(it)
    eng.push_script = [(D1, PUSHED)]

    def attach(_p: push.Pushed) -> list[Any]:
        raise PushError("PUT http://r/v2/demo/manifests/x: the registry answered HTTP 500 (4 attempts)",
                        why="storage failed")

    report = push.run(eng, [it], stack="demo", variant="v", registry=REG, promote=True, reports=tmp_path,
                      redact=Redactor(), sleep=lambda _s: None, attach=attach, evidence=ALLOW)
    reason = report.not_promoted[0].reason
    assert reason.startswith(f"attaching evidence to {it.target} failed: PUT") and "HTTP 500" in reason
    assert "immutable" not in reason


def test_render_names_every_outcome() -> None:
    report = push.PushReport(
        stack="demo", variant="v", registry=REG, started="t",
        pushed=(push.Pushed(target="r/a:k", digest=D1, node="python", key="k", outcome="pushed", uploaded=2,
                            existing=1, attempts=2),
                push.Pushed(target="r/b:k", digest=D2, node="assemble", key="k", outcome="present")),
        failed=(push.Failed(target="r/c:k", node="entrypoint", kind="transient", error="x", fix="f", attempts=4),),
        not_promoted=(push.Promotion(target="r/c:latest", source="r/c:k", digest=None, reason="why"),))
    assert push.render(report) == (
        "push demo/v to 127.0.0.1:5999\n"
        f"  python      r/a:k  {D1}  pushed (2 layer(s) uploaded, 1 already there, 2 attempts)\n"
        f"  assemble    r/b:k  {D2}  already in the registry (nothing sent)\n"
        "  entrypoint  r/c:k  FAILED (transient, 4 attempt(s)): x\n"
        "  not moved   r/c:latest: why\n"
        "result: FAILED\n")


@pytest.mark.parametrize(("text", "kind"), [
    ("unauthorized: authentication required", "auth"),
    ("denied: requested access to the resource is denied", "auth"),
    ("Patch http://127.0.0.1:1/v2/x/blobs/uploads/u: EOF", "transient"),
    ("received unexpected HTTP status: 502 Bad Gateway", "transient"),
    ("An image does not exist locally with the tag: x", "permanent"),
])
def test_classify(text: str, kind: str) -> None:
    assert push.classify(text) == kind


def test_a_node_in_neither_engine_nor_registry_fails_before_anything_is_pushed(tmp_path: Path) -> None:
    missing = push.PushItem(source=None, target=f"{REG}/demo/wheel-x:k9", node="wheel:x", key="k9")
    later = item()
    eng = engine_with(later)
    report, _, _ = run(eng, [missing, later], tmp_path)
    assert report.failed[0].kind == "permanent" and "neither in this engine nor in the registry" in report.failed[0].error
    assert report.not_attempted == (later.target,) and not [c for c in eng.calls if c[0] == "push"]


def test_a_node_built_elsewhere_is_present_but_never_promoted(tmp_path: Path) -> None:
    elsewhere = push.PushItem(source=None, target=f"{REG}/demo/final:k1", node="entrypoint", key="k1",
                              moving=(f"{REG}/demo:latest",))
    eng = FakeEngine(registry={elsewhere.target: D1})
    report, _, _ = run(eng, [elsewhere], tmp_path, promote=True)
    assert report.ok and report.pushed[0].outcome == "present" and report.promoted == ()
    assert "not built in this engine" in report.not_promoted[0].reason


def _graph() -> Graph:
    spec = BaseNodeSpec(image="b:1", digest=None, platform="linux/amd64")

    def node(name: str, kind: NodeKind, *parents: str) -> Node:
        return Node(name=name, kind=kind, parents=parents, spec=spec, template="t", unlocked=(), key=f"{name[:3]}" * 8)

    return Graph(stack="demo", variant="bookworm", platform="linux/amd64", lock_digest="l" * 64, gate="entrypoint",
                 nodes=(node("base", "base"), node("python", "python", "base"), node("wheel:x", "wheel", "base"),
                        node("assemble", "assemble", "python", "wheel:x"), node("entrypoint", "entrypoint", "assemble")))


def test_stack_items_name_nodes_by_content_key_and_the_final_image_publicly() -> None:
    local = {"python", "assemble", "entrypoint"}
    items = push.stack_items(_graph(), registry=REG, repository="buildctl/demo",
                             locate=lambda n, k: f"local/{n}:{k}" if n in local else None,
                             moving=("latest",), default_variant=True)
    assert [(i.node, i.source, i.target, i.moving) for i in items] == [
        ("python", "local/python:" + "pyt" * 8, f"{REG}/buildctl/demo/python:" + "pyt" * 8, ()),
        ("wheel:x", None, f"{REG}/buildctl/demo/wheel-x:" + "whe" * 8, ()),
        ("assemble", "local/assemble:" + "ass" * 8, f"{REG}/buildctl/demo/assemble:" + "ass" * 8, ()),
        ("entrypoint", "local/entrypoint:" + "ent" * 8, f"{REG}/buildctl/demo/entrypoint:" + "ent" * 8, ()),
        ("entrypoint", "local/entrypoint:" + "ent" * 8, f"{REG}/buildctl/demo:bookworm-" + ("ent" * 8)[:16],
         (f"{REG}/buildctl/demo:bookworm-latest", f"{REG}/buildctl/demo:latest")),
    ]
    assert push.moving_refs("r/p", "v2", ("nightly",), default_variant=False) == ("r/p:v2-nightly",)


def test_defect9_no_kept_failing_after_zero_attempts(tmp_path: Path) -> None:
    """Issue 11, item 9: a registry lookup that failed before any push attempt said the registry "kept failing"."""
    it = item()
    eng = engine_with(it)
    eng.registry_error = EngineError("looking up x failed", why="500 Internal Server Error: EOF")
    report, _, _ = run(eng, [it], tmp_path)
    [f] = report.failed
    assert f.kind == "transient" and f.attempts == 0
    assert "kept failing" not in f.fix and "the registry 127.0.0.1:5999 failed" in f.fix
    # after retries it did keep failing, and says so
    eng = engine_with(it)
    eng.push_script = [stream_error("unexpected EOF")] * 3
    report, _, _ = run(eng, [it], tmp_path, attempts=3)
    assert "kept failing" in report.failed[0].fix


def test_defect9_the_engines_own_retries_are_said(tmp_path: Path) -> None:
    """Issue 11, item 9: the engine's own upload retries ("Retrying in 5 seconds") were silent for up to 57 s."""
    it = item()
    eng = engine_with(it)
    eng.push_script = [(D1, [Event(status="Preparing", layer="l1"), Event(status="Retrying in 5 seconds", layer="l1"),
                             Event(status="Retrying in 10 seconds", layer="l1"), Event(status="Pushed", layer="l1")])]
    report, _, said = run(eng, [it], tmp_path)
    assert report.ok and report.pushed[0].engine_retries == 2
    retrying = [s for s in said if s.startswith("retrying")]
    assert retrying == [f"retrying  {it.target}: the engine retries an upload of layer l1 (Retrying in 5 seconds)",
                        f"retrying  {it.target}: the engine retries an upload of layer l1 (Retrying in 10 seconds)"]


def test_a_port_with_401_in_it_is_not_an_auth_failure() -> None:
    # CI once pushed through a relay on port 40189: its EOF was taken for a refusal and not retried
    from buildctl.ship.push import classify
    assert classify('Put "http://127.0.0.1:40189/v2/x/manifests/k1": EOF') == "transient"
    assert classify("unexpected status: 401 Unauthorized") == "auth"
    assert classify("received unexpected HTTP status: 401") == "auth"
