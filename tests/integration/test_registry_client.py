"""registry.py against Debian's docker-registry (distribution 2.8) on 127.0.0.1: blobs, manifests, OCI 1.1
artifacts attached to an image and found again through the referrers tag (2.8 has no referrers API),
Basic auth from htpasswd, TLS with a CA bundle, and a Bearer token flow (a small token-only server:
distribution's own token auth needs a signing setup these tests do not need to exercise).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from buildctl.errors import PushError, UnreachableError
from buildctl.registry import attest
from buildctl.registry.credentials import Login
from buildctl.registry.registry import (
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    RegistryClient,
    canonical_json,
    referrers_tag,
    sha256_digest,
)
from tests.engine.shiptools import free_port, htpasswd
from tests.integration.pyindex import ClosingHTTPServer

USER = "attester"
PASSWORD = "Zq-" + "r9Wm" * 4


class Registry:
    """docker-registry serving 127.0.0.1:<port> from a temporary folder (htpasswd and TLS optional)."""

    def __init__(self, folder: Path, *, auth: Path | None = None, tls: tuple[Path, Path] | None = None) -> None:
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        extra = f"auth:\n  htpasswd:\n    realm: t\n    path: {auth}\n" if auth else ""
        tls_text = f"  tls:\n    certificate: {tls[0]}\n    key: {tls[1]}\n" if tls else ""
        (folder / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.addr}\n  secret: t\n{tls_text}{extra}")
        exe = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        self.proc = subprocess.Popen([exe, "serve", str(folder / "config.yml")], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.addr}/v2/", timeout=1):
                    break
            except urllib.error.HTTPError:
                break  # up: 401 (auth) or 400 (TLS asked over plain HTTP)
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("docker-registry did not come up") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp("plain"))
    yield reg
    reg.stop()


def image_manifest(client: RegistryClient, repo: str, content: bytes) -> Descriptor:
    """A small image in ``repo`` (an OCI manifest, one layer), tagged ``v1``: the subject to attach to."""
    config = client.push_blob(repo, json.dumps({"architecture": "amd64", "os": "linux"}).encode(),
                              "application/vnd.oci.image.config.v1+json")
    layer = client.push_blob(repo, content, "application/vnd.oci.image.layer.v1.tar")
    data = canonical_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config.to_json(),
                           "layers": [layer.to_json()]})
    desc, _ = client.put_manifest(repo, "v1", data, OCI_MANIFEST)
    return desc


def raw(addr: str, path: str, accept: str = OCI_INDEX) -> bytes:
    req = urllib.request.Request(f"http://{addr}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=5) as r:
        return bytes(r.read())


def test_attach_two_artifacts_then_find_them_through_the_referrers_tag(plain: Registry) -> None:
    client = RegistryClient(plain.addr)
    subject = image_manifest(client, "attach/one", b"layer one")
    evidence = attest.Evidence(kind="provenance", artifact_type="application/vnd.in-toto+json",
                               media_type="application/vnd.in-toto+json", payload=b'{"statement": 1}\n')
    first = attest.attach(client, f"{plain.addr}/attach/one:v1", subject.digest, evidence)
    other = attest.Evidence(kind="smoke", artifact_type="application/vnd.buildctl.smoke+json",
                            media_type="application/json", payload=b'{"smoke": "passed"}')
    second = attest.attach(client, f"{plain.addr}/attach/one:v1", subject.digest, other)
    again = attest.attach(client, f"{plain.addr}/attach/one:v1", subject.digest, evidence)  # same bytes: one entry
    assert again.artifact == first.artifact and first.referrers_tag == "sha256-" + subject.digest[7:]

    # Read back without buildctl: the referrers tag is an OCI index listing both artifacts, with their types.
    index = json.loads(raw(plain.addr, f"/v2/attach/one/manifests/{referrers_tag(subject.digest)}"))
    assert index["mediaType"] == OCI_INDEX
    assert [(m["digest"], m["artifactType"]) for m in index["manifests"]] == [
        (first.artifact, "application/vnd.in-toto+json"), (second.artifact, "application/vnd.buildctl.smoke+json")]
    assert index["manifests"][0]["annotations"]["io.buildctl.evidence"] == "provenance"
    artifact = json.loads(raw(plain.addr, f"/v2/attach/one/manifests/{first.artifact}", OCI_MANIFEST))
    assert artifact["subject"] == {"mediaType": OCI_MANIFEST, "digest": subject.digest, "size": subject.size}
    assert artifact["config"]["mediaType"] == OCI_EMPTY and artifact["artifactType"] == "application/vnd.in-toto+json"
    assert raw(plain.addr, f"/v2/attach/one/blobs/{artifact['layers'][0]['digest']}") == evidence.payload

    # And through the client: filtered by type, payloads checked against their digests.
    found = attest.find(client, f"{plain.addr}/attach/one", subject.digest, "application/vnd.in-toto+json")
    assert [(d.digest, body) for d, body in found] == [(first.artifact, evidence.payload)]
    assert {d.digest for d in client.referrers("attach/one", subject.digest)} == {first.artifact, second.artifact}
    # an image with nothing attached has no referrers (no tag: an empty list, not an error)
    lonely = image_manifest(client, "attach/one", b"another layer")
    assert client.referrers("attach/one", lonely.digest) == []


def test_attaching_to_a_manifest_the_registry_lacks_fails_and_writes_nothing(plain: Registry) -> None:
    client = RegistryClient(plain.addr)
    missing = sha256_digest(b"no such manifest")
    with pytest.raises(PushError, match="the registry has no such manifest"):
        attest.attach(client, f"{plain.addr}/attach/none:v1", missing,
                      attest.Evidence(kind="provenance", artifact_type="a/b", media_type="a/b", payload=b"x"))
    assert client.manifest("attach/none", referrers_tag(missing)) is None


def test_a_blob_is_uploaded_once_and_read_back_checked(plain: Registry) -> None:
    client = RegistryClient(plain.addr)
    desc = client.push_blob("blobs/x", b"content", "application/octet-stream")
    assert desc.digest == sha256_digest(b"content") and client.blob_exists("blobs/x", desc.digest)
    assert client.push_blob("blobs/x", b"content", "application/octet-stream") == desc
    assert client.get_blob("blobs/x", desc.digest) == b"content"
    assert client.get_blob("blobs/x", sha256_digest(b"other")) is None
    with pytest.raises(PushError, match="not a repository name"):
        client.blob_exists("../etc", desc.digest)


def test_basic_auth_from_the_login_and_a_refusal_that_shows_no_secret(tmp_path: Path) -> None:
    (tmp_path / "reg").mkdir()
    reg = Registry(tmp_path / "reg", auth=htpasswd(tmp_path, USER, PASSWORD))
    try:
        good = RegistryClient(reg.addr, login=Login(username=USER, password=PASSWORD))
        subject = image_manifest(good, "auth/img", b"layer")
        art = good.attach("auth/img", subject, artifact_type="a/b", payload=b"evidence", media_type="a/b")
        assert [d.digest for d in good.referrers("auth/img", subject.digest)] == [art.digest]
        wrong = RegistryClient(reg.addr, login=Login(username=USER, password=PASSWORD[::-1]))
        with pytest.raises(PushError) as exc:
            wrong.push_blob("auth/img", b"more", "a/b")
        text = f"{exc.value}"
        assert "HTTP 401" in text and "refused the credentials" in text and PASSWORD[::-1] not in text
        with pytest.raises(PushError, match="HTTP 401"):
            RegistryClient(reg.addr).push_blob("auth/img", b"anonymous", "a/b")
    finally:
        reg.stop()


def _certs(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=buildctl test CA")
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "key.pem", "-out", "req.csr", "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "req.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "cert.pem", "-days", "2", "-extfile", "ext.cnf")
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


def test_tls_with_the_configured_ca_bundle_and_no_fallback_to_http_past_an_untrusted_certificate(
        tmp_path: Path) -> None:
    ca, cert, key = _certs(tmp_path)
    (tmp_path / "reg").mkdir()
    reg = Registry(tmp_path / "reg", tls=(cert, key))
    try:
        client = RegistryClient(reg.addr, ca_bundle=ca)
        subject = image_manifest(client, "tls/img", b"layer")
        client.attach("tls/img", subject, artifact_type="a/b", payload=b"evidence", media_type="a/b")
        assert len(client.referrers("tls/img", subject.digest)) == 1
        with pytest.raises(UnreachableError, match="its TLS certificate is not trusted") as exc:
            RegistryClient(reg.addr).manifest("tls/img", "v1")
        assert "ca_bundle" in exc.value.fix
    finally:
        reg.stop()


class _TokenRegistry(BaseHTTPRequestHandler):
    """401 Bearer on /v2/..., a token for Basic USER:PASSWORD on /token, 404 for any manifest."""

    seen: list[tuple[str, str]] = []  # noqa: RUF012 (one test's record)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth.split(" ")[0]))
        if self.path.startswith("/token"):
            want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            ok = auth == want and "scope=repository%3Abearer%2Fimg%3Apull%2Cpush" in self.path
            body = json.dumps({"token": "t0ken-" + PASSWORD} if ok else {}).encode()
            self.send_response(200 if ok else 401)
        elif auth == "Bearer t0ken-" + PASSWORD:
            body = b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}'
            self.send_response(404)
        else:
            body = b'{"errors": [{"code": "UNAUTHORIZED"}]}'
            self.send_response(401)
            port = self.server.server_address[1]  # type: ignore[index]  # an AF_INET server: (host, port)
            self.send_header("WWW-Authenticate",
                             f'Bearer realm="http://127.0.0.1:{port}/token",service="test-registry"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_bearer_token_from_the_realm_with_the_login(tmp_path: Path) -> None:
    server = ClosingHTTPServer(("127.0.0.1", 0), _TokenRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        addr = f"127.0.0.1:{server.server_address[1]}"
        client = RegistryClient(addr, login=Login(username=USER, password=PASSWORD))
        assert client.manifest("bearer/img", "v1") is None  # 404 with the token: asked, got, used
        assert ("/v2/bearer/img/manifests/v1", "Bearer") in _TokenRegistry.seen
        assert client.manifest("bearer/img", "v2") is None
        assert sum(1 for p, _ in _TokenRegistry.seen if p.startswith("/token")) == 1  # the token is reused
        with pytest.raises(PushError, match="HTTP 401") as exc:
            RegistryClient(addr, login=Login(username=USER, password="wrong")).manifest("bearer/img", "v1")
        assert PASSWORD not in str(exc.value)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
