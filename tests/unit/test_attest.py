"""Evidence beside an image: push.run attaches it once the image is confirmed, before moving tags;
registry credentials for the registry client (pure: data fakes, no registry)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from buildctl.errors import PushError
from buildctl.labels import SMOKE_LABEL
from buildctl.registry import attest, credentials
from buildctl.registry.credentials import Login, Redactor
from buildctl.registry.registry import Descriptor, referrers_tag
from buildctl.ship import provenance, push
from tests.unit.fakes_ship import Event, FakeEngine, Image

REG = "127.0.0.1:5999"
D1 = "sha256:" + "a" * 64
ART = "sha256:" + "c" * 64


class Allowed:
    refusal = ""

    def to_json(self) -> dict[str, str]:
        return {"refusal": ""}


def final_item() -> push.PushItem:
    return push.PushItem(source="local/entrypoint:k1", target=f"{REG}/demo:default-k1", node="entrypoint", key="k1",
                         moving=(f"{REG}/demo:latest",))


def run(tmp_path: Path, attach: Callable[[push.Pushed], list[attest.Attached]]) -> push.PushReport:
    it = final_item()
    eng = FakeEngine(images={"local/entrypoint:k1": Image(labels={SMOKE_LABEL: "passed"})})
    eng.push_script = [(D1, [Event(status="Pushed", layer="l1")]), (D1, [])]
    return push.run(eng, [it], stack="demo", variant="default", registry=REG, promote=True, reports=tmp_path,
                    redact=Redactor(secrets=("s3cret",)), sleep=lambda _s: None, clock=lambda: "2026-01-02T03:04:05Z",
                    attach=attach, evidence=lambda _p: Allowed())


def attached(pushed: push.Pushed) -> list[attest.Attached]:
    return [attest.Attached(kind="provenance", repository=f"{REG}/demo", subject=pushed.digest, artifact=ART,
                            artifact_type="application/vnd.in-toto+json", referrers_tag=referrers_tag(pushed.digest))]


def test_evidence_is_attached_to_the_confirmed_final_image_and_recorded(tmp_path: Path) -> None:
    seen: list[push.Pushed] = []

    def attach(p: push.Pushed) -> list[attest.Attached]:
        seen.append(p)
        return attached(p)

    report = run(tmp_path, attach)
    assert report.ok and [p.digest for p in seen] == [D1]
    assert [p.target for p in report.promoted] == [f"{REG}/demo:latest"]
    data = json.loads((tmp_path / "push/demo/default/latest.json").read_text())
    assert data["attached"] == [{"kind": "provenance", "repository": f"{REG}/demo", "subject": D1, "artifact": ART,
                                 "artifact_type": "application/vnd.in-toto+json",
                                 "referrers_tag": "sha256-" + "a" * 64}]
    assert f"attached    provenance {REG}/demo@{ART} -> {D1}" in push.render(report)


def test_an_attachment_that_fails_fails_the_push_and_moves_no_tag(tmp_path: Path) -> None:
    def attach(p: push.Pushed) -> list[attest.Attached]:
        raise PushError("PUT http://127.0.0.1:5999/v2/demo/manifests/x: the registry answered HTTP 500",
                        why="token s3cret rejected")

    report = run(tmp_path, attach)
    assert not report.ok and report.promoted == ()
    [failed] = report.failed
    assert failed.node == "attach" and failed.target == f"{REG}/demo:default-k1"
    assert "s3cret" not in failed.error and "***" in failed.error
    assert [p.digest for p in report.pushed] == [D1]  # the image itself stays confirmed
    assert json.loads((tmp_path / "push/demo/default/latest.json").read_text())["failed"][0]["node"] == "attach"


class FakeRegistry:
    def __init__(self) -> None:
        self.manifests = {("demo", D1): (b"{}", Descriptor(media_type="application/vnd.docker.distribution."
                                                                   "manifest.v2+json", digest=D1, size=2))}
        self.calls: list[tuple[str, str, Descriptor, str]] = []

    def manifest(self, repo: str, reference: str) -> tuple[bytes, Descriptor] | None:
        return self.manifests.get((repo, reference))

    def attach(self, repo: str, subject: Descriptor, *, artifact_type: str, payload: bytes, media_type: str,
               annotations: Mapping[str, str] | None = None) -> Descriptor:
        self.calls.append((repo, artifact_type, subject, json.dumps(annotations, sort_keys=True)))
        return Descriptor(media_type="application/vnd.oci.image.manifest.v1+json", digest=ART, size=10)

    def referrers(self, repo: str, subject: str, artifact_type: str = "") -> list[Descriptor]:
        return []

    def get_blob(self, repo: str, digest: str) -> bytes | None:
        return None


def test_attach_names_the_subject_by_its_registry_descriptor() -> None:
    reg = FakeRegistry()
    stmt = {"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://slsa.dev/provenance/v1"}
    got = attest.attach(reg, f"{REG}/demo:default-k1", D1, provenance.evidence(stmt))
    assert got == attest.Attached(kind="provenance", repository=f"{REG}/demo", subject=D1, artifact=ART,
                                  artifact_type="application/vnd.in-toto+json", referrers_tag="sha256-" + "a" * 64)
    [(repo, atype, subject, ann)] = reg.calls
    assert (repo, atype, subject.media_type, subject.size) == (
        "demo", "application/vnd.in-toto+json", "application/vnd.docker.distribution.manifest.v2+json", 2)
    assert json.loads(ann) == {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v1",
                               "io.buildctl.evidence": "provenance"}
    with pytest.raises(PushError, match="no such manifest"):
        attest.attach(reg, f"{REG}/other:t", D1, provenance.evidence(stmt))


def test_registry_login_from_the_environment_then_dockers_config(tmp_path: Path) -> None:
    env = {"DOCKER_CONFIG": str(tmp_path)}
    assert credentials.registry_login(env, REG) is None  # no config at all
    token = base64.b64encode(b"alice:pw:with:colons").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        f"https://{REG}/v1/": {"auth": token}, "other:5000": {"username": "bob", "password": "pw2"},
        "broken:1": {"auth": "%%%"}}}))
    assert credentials.registry_login(env, REG) == Login(username="alice", password="pw:with:colons")
    assert credentials.registry_login(env, "other:5000") == Login(username="bob", password="pw2")
    assert credentials.registry_login(env, "broken:1") is None
    assert credentials.registry_login({**env, credentials.AUTH_ENV: "ci:tok"}, REG) == Login(username="ci",
                                                                                           password="tok")
    assert "pw:with" not in repr(credentials.registry_login(env, REG))
