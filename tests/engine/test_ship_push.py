"""push.py against the real engine and real registries: digests, dedupe, cut connections, credentials.

Images here are small (FROM scratch + a file of random bytes), so a push uploads one fresh layer and
the tests stay fast; every tag a test makes locally is removed by image_cleanup.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.capture import CaptureResult  # what capfd.readouterr() returns (not public in pytest)

from buildctl.builder import smoke
from buildctl.cli import main
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.graph import graph
from buildctl.labels import SMOKE_LABEL
from buildctl.lock import archive
from buildctl.registry import attest, credentials
from buildctl.registry.credentials import Redactor
from buildctl.registry.registry import RegistryClient
from buildctl.services import evidence, target
from buildctl.services.target import Target
from buildctl.ship import evidence as ev
from buildctl.ship import push
from tests.engine.conftest import ImageCleanup
from tests.engine.shiptools import (
    CutRule,
    RegistryProcess,
    Relay,
    demo_project,
    htpasswd,
    http_answer,
    manifest_digest,
)
from tests.helpers import unique

FAST = push.RetryPolicy(attempts=3, first_delay=0.2, factor=2.0, max_delay=1.0)
MANIFEST_PUT = rb"PUT /v2/\S+/manifests/"
LAYER_PATCH = rb"PATCH /v2/\S+/blobs/uploads/"


def small_image(engine: Engine, cleanup: ImageCleanup, tmp_path: Path, *, size: int = 2_000_000,
                labels: dict[str, str] | None = None) -> str:
    """A one-layer image of ``size`` random bytes (so its layer is new to every registry)."""
    ctx = tmp_path / unique("ctx")
    ctx.mkdir()
    (ctx / "blob").write_bytes(os.urandom(size))
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n")
    tag = cleanup(f"buildctl-shiptest/{unique('img')}:t")
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels=labels or {})
    return tag


def item(source: str, registry: str, cleanup: ImageCleanup, *, repo: str | None = None, key: str = "k1",
         moving: tuple[str, ...] = ()) -> push.PushItem:
    repo = repo or unique("shiptest-")
    target = cleanup(f"{registry}/{repo}/final:{key}")
    refs = tuple(cleanup(f"{registry}/{repo}/final:{tag}") for tag in moving)
    return push.PushItem(source=source, target=target, node="final", key=key, moving=refs)


@dataclass(frozen=True)
class Verdict:
    """The promotion check's answer (push.PromotionVerdict); services/evidence's real one is exercised by
    `buildctl push demo` below and by tests/engine/test_evidence_engine.py."""

    refusal: str

    def to_json(self) -> dict[str, Any]:
        return {"refusal": self.refusal}


def run(engine: Engine, items: list[push.PushItem], reports: Path, *, promote: bool = False,
        redact: Redactor | None = None, log: Path | None = None,
        refuse: Mapping[str, str] | None = None) -> push.PushReport:
    lines: list[str] = []
    report = push.run(engine, items, stack="shiptest", variant="v", registry="test", promote=promote,
                      reports=reports, redact=redact or Redactor(), policy=FAST, say=print, log=lines.append,
                      evidence=lambda p: Verdict((refuse or {}).get(p.target, "")))
    if log is not None:
        log.write_text("\n".join(lines) + "\n")
    return report


def recorded(reports: Path) -> dict[str, str]:
    data = json.loads((reports / "push/shiptest/v/latest.json").read_text())
    digests: dict[str, str] = data["digests"]
    return digests


@pytest.fixture
def relay(registry: str) -> Iterator[Relay]:
    r = Relay(upstream=registry)
    yield r
    r.close()


def test_a_push_is_confirmed_by_the_registrys_own_digest(engine: Engine, registry: str, image_cleanup: ImageCleanup,
                                                         tmp_path: Path) -> None:
    source = small_image(engine, image_cleanup, tmp_path)
    it = item(source, registry, image_cleanup)
    report = run(engine, [it], tmp_path)
    assert report.ok
    [p] = report.pushed
    repo, tag = it.target.split("/", 1)[1].rsplit(":", 1)
    assert p.outcome == "pushed" and p.uploaded == 1
    assert p.digest == manifest_digest(registry, repo, tag)  # asked over HTTP, not through the engine
    assert f"{registry}/{repo}@{p.digest}" in engine.inspect_image(source).repo_digests
    assert recorded(tmp_path) == {it.target: p.digest}


def test_a_second_push_of_an_unchanged_image_uploads_no_layer(engine: Engine, relay: Relay,
                                                              image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    source = small_image(engine, image_cleanup, tmp_path)
    repo = unique("shiptest-")
    first = item(source, relay.addr, image_cleanup, repo=repo)
    assert run(engine, [first], tmp_path).pushed[0].uploaded == 1
    assert relay.count("POST", r"/blobs/uploads/$") >= 1  # the relay does see uploads when there are some

    relay.reset()
    again = run(engine, [first], tmp_path)
    assert again.ok and again.pushed[0].outcome == "present"
    assert relay.count("POST", "/blobs/uploads/") == 0 and relay.count("PATCH", "") == 0
    assert relay.count("PUT", "") == 0

    # The same image under a new immutable tag: the engine pushes, but the registry's layer dedupe
    # means only the manifest travels.
    relay.reset()
    other = item(source, relay.addr, image_cleanup, repo=repo, key="k2")
    [p] = run(engine, [other], tmp_path).pushed
    assert (p.outcome, p.uploaded, p.existing) == ("pushed", 0, 1)
    assert relay.count("POST", "/blobs/uploads/") == 0 and relay.count("PATCH", "") == 0
    assert relay.count("PUT", "/manifests/") == 1
    assert p.digest == again.pushed[0].digest


def test_a_second_run_of_the_day_moves_the_dated_tag_and_the_lock_goes_beside_the_new_image(
        engine: Engine, registry: str, image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    """Issue 33 item 12, as `nightly demo`, a CFLAGS edit, `nightly demo` made it (services/ship's items: the final
    image's own tag, the lock-hash tag, the dated tags): the second run's image gets `nightly-YYYYMMDD` and the
    lock artifact, though the dated tag named the morning's image. (The whole two nightlies take 4.5 minutes
    here: measured once, `nightly demo` twice with the edit, before and after the fix.)"""
    repo = unique("shiptest-")
    public = f"{registry}/{repo}"
    lock_tag, dated = image_cleanup(f"{public}:demo-default-abc"), image_cleanup(f"{public}:nightly-20261204")
    evidence = attest.Evidence(kind="lock", artifact_type=archive.ARTIFACT_TYPE, media_type=archive.ARTIFACT_TYPE,
                               payload=b'{"lock": "demo"}')
    client = RegistryClient(registry)

    def attach(p: push.Pushed) -> list[attest.Attached]:
        return [attest.attach(client, p.target, p.digest, evidence)]

    digests = []
    for key in ("morning", "evening"):
        source = small_image(engine, image_cleanup, tmp_path)
        final = push.PushItem(source=source, target=image_cleanup(f"{public}:default-{key}"), node="entrypoint",
                              key=key, moving=(image_cleanup(f"{public}:nightly"),))
        items = [final, push.PushItem(source=source, target=lock_tag, node="entrypoint", key=key),
                 push.PushItem(source=source, target=dated, node="entrypoint", key=key, dated=True)]
        report = push.run(engine, items, stack="shiptest", variant="v", registry="test", promote=True,
                          reports=tmp_path, redact=Redactor(), policy=FAST, attach=attach, attach_to=final.target,
                          evidence=lambda _p: Verdict(""))
        assert report.ok, push.render(report)
        digests.append(report.pushed[0].digest)
    morning, evening = digests
    assert morning != evening
    assert manifest_digest(registry, repo, "nightly") == manifest_digest(registry, repo, "nightly-20261204") == evening
    assert manifest_digest(registry, repo, "demo-default-abc") == morning  # immutable: kept
    for digest in (morning, evening):  # each image has its own lock beside it
        assert [b for _d, b in attest.find(client, public, digest, archive.ARTIFACT_TYPE)] == [evidence.payload]


def test_a_manifest_upload_cut_once_is_retried_and_completes(engine: Engine, registry: str, relay: Relay,
                                                             image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    relay.rule = CutRule(pattern=MANIFEST_PUT, offset=40, times=1)
    source = small_image(engine, image_cleanup, tmp_path)
    it = item(source, relay.addr, image_cleanup)
    report = run(engine, [it], tmp_path)
    assert report.ok and relay.cuts == 1
    [p] = report.pushed
    assert p.attempts == 2  # the stream carried the error; push.py retried
    repo, tag = it.target.split("/", 1)[1].rsplit(":", 1)
    assert p.digest == manifest_digest(registry, repo, tag)
    assert recorded(tmp_path) == {it.target: p.digest}


def test_a_503_on_the_manifest_upload_and_on_the_lookup_is_retried_by_the_engine(
        engine: Engine, registry: str, relay: Relay, image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    """Issue 33 item 14: the engine's push and digest look-up (node pushes during a build, promotion, plan) go
    through retrying.py as registry.py does: one 503 does not fail them."""
    source = small_image(engine, image_cleanup, tmp_path)
    it = item(source, relay.addr, image_cleanup)
    engine.tag(source, it.target)
    relay.rule = CutRule(pattern=MANIFEST_PUT, offset=0, times=1, answer=http_answer(503, "Service Unavailable"))
    events: list[str] = []
    digest = engine.push(it.target, on_progress=lambda e: events.append(str(e)))
    assert relay.cuts == 1 and any(e.startswith("Retrying the whole transfer") for e in events)
    repo, tag = it.target.split("/", 1)[1].rsplit(":", 1)
    assert digest == manifest_digest(registry, repo, tag)
    relay.rule = CutRule(pattern=rb"(HEAD|GET) /v2/\S+/manifests/", offset=0, times=1,
                         answer=http_answer(503, "Service Unavailable"))
    relay.cuts = 0
    assert engine.registry_digest(it.target) == digest and relay.cuts == 1


def test_a_layer_upload_cut_midway_is_retried_and_completes(engine: Engine, registry: str, relay: Relay,
                                                            image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    # 1 MB into a 2 MB incompressible layer: the engine itself retries a failed layer upload
    # ("Retrying in 5 seconds"); the push completes and the report counts that retry.
    relay.rule = CutRule(pattern=LAYER_PATCH, offset=1_000_000, times=1)
    source = small_image(engine, image_cleanup, tmp_path)
    it = item(source, relay.addr, image_cleanup)
    report = run(engine, [it], tmp_path)
    assert report.ok and relay.cuts == 1
    [p] = report.pushed
    assert p.engine_retries >= 1 and p.uploaded == 1
    repo, tag = it.target.split("/", 1)[1].rsplit(":", 1)
    assert p.digest == manifest_digest(registry, repo, tag)


def test_a_connection_cut_every_time_fails_clearly_and_nothing_is_recorded(
        engine: Engine, registry: str, relay: Relay, image_cleanup: ImageCleanup, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    relay.rule = CutRule(pattern=MANIFEST_PUT, offset=40, times=None)
    source = small_image(engine, image_cleanup, tmp_path)
    it = item(source, relay.addr, image_cleanup)
    report = run(engine, [it], tmp_path)
    assert not report.ok and report.pushed == () and relay.cuts == FAST.attempts
    [f] = report.failed
    assert (f.kind, f.attempts) == ("transient", FAST.attempts)
    assert "after 3 attempts" in f.error and "EOF" in f.error and "run the push again" in f.fix
    assert "FAILED" in push.render(report) and "FAILED" in capsys.readouterr().out
    repo, tag = it.target.split("/", 1)[1].rsplit(":", 1)
    assert manifest_digest(registry, repo, tag) is None  # and the registry indeed has no such tag
    assert recorded(tmp_path) == {}


def test_moving_tags_follow_only_the_promotion_check_and_get_the_immutable_digest(
        engine: Engine, registry: str, image_cleanup: ImageCleanup, tmp_path: Path) -> None:
    good = small_image(engine, image_cleanup, tmp_path, labels={SMOKE_LABEL: "passed"})
    refused = small_image(engine, image_cleanup, tmp_path, labels={SMOKE_LABEL: "passed"})
    gi = item(good, registry, image_cleanup, moving=("latest", "nightly"))
    si = item(refused, registry, image_cleanup, moving=("latest",))
    report = run(engine, [gi, si], tmp_path, promote=True, refuse={si.target: "no build-tier smoke evidence"})
    assert report.ok
    grepo = gi.target.split("/", 1)[1].rsplit(":", 1)[0]
    srepo = si.target.split("/", 1)[1].rsplit(":", 1)[0]
    immutable = manifest_digest(registry, grepo, "k1")
    assert immutable is not None
    assert manifest_digest(registry, grepo, "latest") == immutable == manifest_digest(registry, grepo, "nightly")
    assert manifest_digest(registry, srepo, "latest") is None
    assert [p.target for p in report.not_promoted] == [f"{registry}/{srepo}:latest"]
    assert recorded(tmp_path)[f"{registry}/{grepo}:latest"] == immutable


# -- credentials


USER = "buildctl"
PASSWORD = "Pa55-" + "x7Qz" * 4  # distinctive, so that finding it anywhere is certain


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    folder = tmp_path_factory.mktemp("auth")
    reg = RegistryProcess(htpasswd=htpasswd(folder, USER, PASSWORD))
    yield reg
    reg.stop()


def _docker_config(folder: Path, registry: str, user: str, password: str) -> Path:
    import base64

    folder.mkdir()
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    return folder


def _everything_written(tmp_path: Path, captured: CaptureResult[str], *extra: str) -> str:
    files = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
                      and p.suffix in (".json", ".log"))
    return "\n".join((captured.out, captured.err, files, *extra))


def test_wrong_credentials_fail_clearly_and_no_secret_is_shown(
        engine: Engine, auth_registry: RegistryProcess, image_cleanup: ImageCleanup, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    source = small_image(engine, image_cleanup, tmp_path)
    wrong = PASSWORD[::-1]
    config = _docker_config(tmp_path / "docker", auth_registry.addr, USER, wrong)
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    it = item(source, auth_registry.addr, image_cleanup)
    reports = tmp_path / "reports"
    eng = Engine(name="auth-test")  # docker-py reads DOCKER_CONFIG when its client is made
    try:
        report = run(eng, [it], reports, redact=credentials.redactor_for(os.environ, auth_registry.addr),
                     log=tmp_path / "push.log")
    finally:
        eng.close()
    [f] = report.failed
    assert f.kind == "auth" and f.attempts == 0
    assert "refused the credentials" in f.fix and f"docker login {auth_registry.addr}" in f.fix
    assert "unauthorized" in f.error
    text = _everything_written(tmp_path, capfd.readouterr(), push.render(report), repr(report))
    assert wrong not in text and PASSWORD not in text
    assert manifest_digest(auth_registry.addr, it.target.split("/", 1)[1].rsplit(":", 1)[0], "k1",
                           auth=(USER, PASSWORD)) is None


def test_credentials_from_the_environment_push_and_are_never_shown(
        engine: Engine, auth_registry: RegistryProcess, image_cleanup: ImageCleanup, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    source = small_image(engine, image_cleanup, tmp_path)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-docker-config"))
    reports = tmp_path / "reports"
    results: dict[str, Any] = {}
    for password in (PASSWORD[::-1], PASSWORD):  # wrong first, then right
        env = {**os.environ, credentials.AUTH_ENV: f"{USER}:{password}"}
        it = item(source, auth_registry.addr, image_cleanup)
        with credentials.docker_credentials(env, auth_registry.addr):
            eng = Engine(name="auth-env-test")
            try:
                results[password] = (it, run(eng, [it], reports, redact=credentials.redactor_for(env, auth_registry.addr),
                                             log=tmp_path / f"push-{len(results)}.log"))
            finally:
                eng.close()
    _bad_item, bad = results[PASSWORD[::-1]]
    good_item, good = results[PASSWORD]
    assert bad.failed[0].kind == "auth" and not bad.pushed
    assert good.ok
    repo = good_item.target.split("/", 1)[1].rsplit(":", 1)[0]
    assert good.pushed[0].digest == manifest_digest(auth_registry.addr, repo, "k1", auth=(USER, PASSWORD))
    text = _everything_written(tmp_path, capfd.readouterr(), push.render(bad), push.render(good))
    assert PASSWORD not in text and PASSWORD[::-1] not in text
    assert os.environ["DOCKER_CONFIG"] == str(tmp_path / "empty-docker-config")  # restored


# -- `buildctl push STACK` on the demo stack, with its nodes standing in for a build


def built_nodes(engine: Engine, cleanup: ImageCleanup, tmp_path: Path, root: Path, smoke: str) -> Target:
    """Tag a small image as each node of the demo graph, as a build would (the final one with ``smoke``;
    a build past a skipped gate has its own entrypoint key, as `buildctl build --skip-smoke` makes)."""
    t = target.load(root, load_config({"HOME": str(tmp_path), "BUILDCTL_CACHE": str(tmp_path / "cache")}),
                    "demo", None, local_only=True, skip_smoke=smoke == "skipped")
    for n in t.graph.nodes:
        if n.kind == "base":
            continue
        labels = {SMOKE_LABEL: smoke} if n.name == t.graph.final.name else {}
        image = small_image(engine, cleanup, tmp_path, size=50_000, labels=labels)
        engine.tag(image, cleanup(graph.image_ref(None, t.repository, n.name, n.key)))
    return t


def push_cli(root: Path, tmp_path: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    return main(["--project", str(root), "push", "demo", *args])


def forget(cleanup: ImageCleanup, t: Target, registry: str) -> None:
    """The local tags `push` makes (registry names) are removed with the test's other images."""
    for item in push.stack_items(t.graph, registry=registry, repository=t.repository, locate=lambda n, k: None,
                                 moving=("latest",), default_variant=True):
        cleanup(item.target)
        for moving in item.moving:
            cleanup(moving)


def demo_built(engine: Engine, cleanup: ImageCleanup, tmp_path: Path, project_root: Path, registry: str, *,
               smoke: str) -> tuple[Path, Target, str]:
    """The demo stack, pushed to a repository of its own, with every node standing in as built."""
    root = demo_project(tmp_path, project_root, f"{registry}/{unique('shipbase-')}/demo-base:bookworm")
    repository = unique("shipdemo-")
    manifest = root / "pins" / "demo.yaml"
    manifest.write_text(manifest.read_text().replace("repository: buildctl/demo", f"repository: {repository}"))
    t = built_nodes(engine, cleanup, tmp_path, root, smoke=smoke)
    forget(cleanup, t, registry)
    return root, t, repository


def test_push_command_publishes_every_node_and_promotes_only_on_evidence_of_this_suite(
        engine: Engine, registry: str, project_root: Path, image_cleanup: ImageCleanup, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The nodes stand in as built (labelled smoke=passed, but no gate ran): promotion reads the registry, finds
    no evidence, then evidence made by another suite, and moves nothing; tests/engine/test_evidence_engine.py
    shows evidence that lets it through."""
    root, t, repository = demo_built(engine, image_cleanup, tmp_path, project_root, registry, smoke="passed")

    assert push_cli(root, tmp_path, "--registry", registry, "--promote", "--json", monkeypatch=monkeypatch) == 10
    report = json.loads(capsys.readouterr().out)
    final = t.graph.final
    public = f"{repository}:{t.variant.name}-{final.key[:16]}"
    nodes = [n for n in t.graph.nodes if n.kind != "base"]
    assert [p["node"] for p in report["pushed"]] == [n.name for n in nodes] + [final.name]
    for n in nodes:  # every node under its content tag, confirmed against the registry's own answer
        path, tag = graph.image_ref(None, repository, n.name, n.key).rsplit(":", 1)
        assert report["digests"][f"{registry}/{path}:{tag}"] == manifest_digest(registry, path, tag)
    public_path, public_tag = public.split(":")
    immutable = manifest_digest(registry, public_path, public_tag)
    assert immutable is not None
    assert manifest_digest(registry, repository, "latest") is None
    assert {p["reason"] for p in report["not_promoted"]} == {
        f"no build-tier smoke evidence in the registry for {immutable} (the smoke gate's report is attached at push)"}

    # evidence a suite other than this buildctl's made (a real build-tier report of the H200 run, named for
    # this image): set aside, nothing moves
    other = json.loads((Path(__file__).parents[1] / "data/gpu/h200-hopper/report-build.json").read_text())
    other_suite = "sha256:" + "0" * 64
    made = ev.from_report({**other, "stack": "demo", "variant": "default", "subject": immutable,
                           "suite_hash": other_suite}, where="h200", subject=immutable, suite_hash=other_suite,
                                 stack="demo", variant="default", attached_by="buildctl push")
    evidence.attach(RegistryClient(registry), f"{registry}/{public_path}", immutable, made)
    assert push_cli(root, tmp_path, "--registry", registry, "--promote", "--json", monkeypatch=monkeypatch) == 10
    again = json.loads(capsys.readouterr().out)
    assert {p["reason"] for p in again["not_promoted"]} == {
        f"the build-tier evidence for {immutable} was made by another smoke suite (sha256:000000000000); "
        f"this buildctl's suite is {smoke.suite_hash()[:19]}"}
    assert manifest_digest(registry, repository, "latest") is None

    # Again, unchanged: nothing is sent.
    assert push_cli(root, tmp_path, "--registry", registry, "--json", monkeypatch=monkeypatch) == 0
    again = json.loads(capsys.readouterr().out)
    assert {p["outcome"] for p in again["pushed"]} == {"present"}


def test_push_command_does_not_move_latest_past_a_skipped_smoke(
        engine: Engine, registry: str, project_root: Path, image_cleanup: ImageCleanup, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root, t, repository = demo_built(engine, image_cleanup, tmp_path, project_root, registry, smoke="skipped")
    assert push_cli(root, tmp_path, "--registry", registry, "--promote", monkeypatch=monkeypatch) == 10
    out = capsys.readouterr()
    [line] = [x for x in out.out.splitlines() if f"{registry}/{repository}:latest:" in x]
    assert line.split()[:2] == ["not", "moved"] and "no build-tier smoke evidence in the registry" in line
    assert "no build-tier smoke evidence in the registry" in out.err
    assert "was built with the smoke gate skipped: pushing it" in out.err
    assert manifest_digest(registry, repository, "latest") is None
    assert manifest_digest(registry, repository, f"{t.variant.name}-{t.graph.final.key[:16]}") is not None


def test_push_command_with_wrong_credentials_fails_clearly_and_shows_no_secret(
        engine: Engine, auth_registry: RegistryProcess, project_root: Path, image_cleanup: ImageCleanup,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    root = demo_project(tmp_path, project_root, f"{auth_registry.addr}/buildctl/demo-base:bookworm")
    t = built_nodes(engine, image_cleanup, tmp_path, root, smoke="passed")
    forget(image_cleanup, t, auth_registry.addr)
    wrong = PASSWORD[::-1]
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.setenv(credentials.AUTH_ENV, f"{USER}:{wrong}")
    assert push_cli(root, tmp_path, "--registry", auth_registry.addr, "--promote", monkeypatch=monkeypatch) == 11
    captured = capfd.readouterr()
    assert "refused the credentials" in captured.err and f"docker login {auth_registry.addr}" in captured.err
    text = _everything_written(tmp_path, captured)
    assert wrong not in text and PASSWORD not in text
    assert list((tmp_path / "cache" / "logs" / "push").rglob("*.log"))  # the log was written, and checked
