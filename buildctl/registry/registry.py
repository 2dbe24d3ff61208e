"""The OCI distribution HTTP API: the ONLY module that speaks to a registry directly.

Images go through the engine (engine.py, docker-py); what docker-py cannot push goes through here:
OCI 1.1 artifacts that refer to an image (``attach``: provenance now, smoke evidence later), and the
reads that find them again (``referrers``). What it speaks, and nothing more:

- blobs: ``HEAD /v2/<repo>/blobs/<digest>`` (skip what is there), ``POST .../blobs/uploads/`` then
  ``PUT <location>&digest=...`` (a monolithic upload), ``GET`` to read one back;
- manifests: ``HEAD``/``GET``/``PUT /v2/<repo>/manifests/<reference>``;
- referrers: ``GET /v2/<repo>/referrers/<digest>`` where the registry has the API (OCI 1.1), else the
  referrers tag schema: an image index under the tag ``sha256-<hex>`` of the subject, which ``attach``
  keeps up to date. Debian's docker-registry (distribution 2.8) has no referrers API, so the tag is
  what it gets: a registry that has the API says so with an ``OCI-Subject`` header on the manifest PUT,
  and then the tag is left alone (the spec's rule).
- auth: a 401 names the scheme. ``Basic``: the configured user and password; ``Bearer``: a token from
  the realm it names, for ``repository:<repo>:pull,push``, asked with the credentials when there are
  some (anonymous otherwise). Credentials come from the caller (credentials.registry_login).
- TLS with the configured CA bundle added to the system's; plain HTTP only for loopback hosts, as the
  engine treats 127.0.0.0/8 as insecure by default, and only after HTTPS failed there.

Every error is a BuildctlError saying what failed, why and what to do, with credentials redacted;
every request is bounded by ``timeout``, every response read by a size limit. A transient answer (5xx, 429,
a reset, cut or timed-out connection) is retried with backoff under retrying.py's one policy, bounded in
attempts and time; a blob upload that fails so starts a new upload session.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from buildctl import retrying, syntax, untrusted
from buildctl.errors import BuildctlError, PushError, UnreachableError
from buildctl.registry.credentials import Login, Redactor

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
EMPTY_CONFIG = b"{}"
MAX_MANIFEST = 4 << 20  # the size distribution itself accepts for a manifest
MAX_BLOB = 64 << 20  # what we read back (attestations are small)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_REPO = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*\Z")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str
    size: int
    artifact_type: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(sorted(self.annotations.items()))
        return out

    @staticmethod
    def from_json(data: Any, where: str) -> Descriptor:
        if not isinstance(data, dict):
            raise PushError(f"{where}: a descriptor is not an object")
        digest, size, media = data.get("digest"), data.get("size"), data.get("mediaType")
        if not isinstance(digest, str) or not _DIGEST.match(digest) or not isinstance(size, int) or size < 0 \
                or not isinstance(media, str):
            raise PushError(f"{where}: malformed descriptor {json.dumps(data)[:200]}")
        ann = data.get("annotations") or {}
        return Descriptor(media_type=media, digest=digest, size=size,
                          artifact_type=str(data.get("artifactType") or ""),
                          annotations={str(k): str(v) for k, v in ann.items()} if isinstance(ann, dict) else {})


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag for ``digest``: ``sha256-<hex>`` (OCI distribution spec 1.1)."""
    if not _DIGEST.match(digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return digest.replace(":", "-", 1)


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") == 1 or host.startswith("[") else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class _Answer:
    status: int
    headers: Message
    body: bytes


class RegistryClient:
    """One registry host (``host[:port]``), through its HTTP API."""

    def __init__(self, host: str, *, login: Login | None = None, ca_bundle: Path | None = None,
                 timeout: float = 10.0, redact: Redactor | None = None, retry: retrying.Backoff | None = None,
                 sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = lambda _t: None) -> None:
        problem = "is empty" if not host else syntax.host_port(host)  # it becomes the authority of every URL
        if problem:
            raise PushError(f"not a registry host: {host!r} {problem}", fix="give HOST or HOST:PORT")
        self.host = host
        self.login = login
        self.timeout = timeout
        self.retry = retry or retrying.policy_from_env()
        self.sleep = sleep
        self.say = say
        self.redact = (redact or Redactor()).with_secrets(
            *((login.password, self._basic_header(login).removeprefix("Basic ")) if login else ()))
        self._ssl = ssl.create_default_context()
        if ca_bundle is not None:
            try:
                self._ssl.load_verify_locations(cafile=str(ca_bundle))
            except (OSError, ssl.SSLError) as exc:
                raise PushError(f"cannot read the CA bundle {ca_bundle}: {exc}",
                                fix="correct ca_bundle in the configuration (BUILDCTL_CA_BUNDLE)") from exc
        self._scheme: str | None = None
        self._tokens: dict[str, str] = {}  # scope -> bearer token
        self._basic = False  # the registry asked for Basic: send it with every request from then on
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._ssl),
                                                   _NoRedirect())

    def __repr__(self) -> str:
        return f"RegistryClient({self.host!r})"

    # -- transport

    def _raw(self, method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None,
             limit: int = MAX_MANIFEST) -> _Answer:
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                data = r.read(limit + 1) if method != "HEAD" else b""
                status, hdrs = r.status, r.headers
        except urllib.error.HTTPError as exc:
            data = exc.read(limit + 1) if exc.fp is not None else b""
            status, hdrs = exc.code, exc.headers
        except http.client.HTTPException as exc:  # an answer cut short (IncompleteRead, a bad status line)
            raise ConnectionResetError(f"the answer was cut: {exc!r}"[:300]) from exc
        if len(data) > limit:
            raise PushError(self.redact(f"{method} {url}: the answer is larger than {limit} bytes"),
                            fix="check that the registry is the one meant")
        return _Answer(status=status, headers=hdrs, body=data)

    def _base(self) -> str:
        if self._scheme is None:
            self._scheme, _n = retrying.retry(
                self._probe, transient=lambda e: 0.0 if getattr(e, "transient", False) else None,
                policy=self.retry, sleep=self.sleep)
        return f"{self._scheme}://{self.host}"

    def _probe(self) -> str:
        schemes = ("https", "http") if _loopback(self.host) else ("https",)
        problems = []
        cut = False
        for scheme in schemes:
            try:
                self._raw("GET", f"{scheme}://{self.host}/v2/")
                return scheme
            except OSError as exc:  # URLError and SSLError are OSErrors
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ssl.SSLCertVerificationError):
                    # it speaks TLS with a certificate we do not trust: never fall back to plain HTTP
                    raise UnreachableError(
                        self.redact(f"the registry {self.host}: its TLS certificate is not trusted"),
                        why=str(reason), fix="name the CA that signed it: ca_bundle in the configuration "
                                             "(BUILDCTL_CA_BUNDLE)") from exc
                problems.append(f"{scheme}: {reason}")
                cut = cut or _transient_os(exc)
        error = UnreachableError(
            self.redact(f"the registry {self.host} does not answer"), why="; ".join(problems),
            fix=f"check that {self.host} is up and reachable from here (and, behind a TLS-intercepting proxy, "
                "that ca_bundle names its CA)")
        error.transient = cut  # type: ignore[attr-defined]
        raise error

    def _auth_header(self, challenge: str, scope: str) -> str | None:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.login is None:
                return None
            self._basic = True
            return self._basic_header(self.login)
        if scheme.lower() != "bearer":
            return None
        if scope in self._tokens:
            return f"Bearer {self._tokens[scope]}"
        fields = dict(_CHALLENGE.findall(params))
        realm = fields.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            return None
        query = {k: v for k, v in (("service", fields.get("service", "")), ("scope", scope)) if v}
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        headers = {"Authorization": self._basic_header(self.login)} if self.login is not None else {}
        try:
            answer = self._raw("GET", url, headers=headers, limit=1 << 20)
        except OSError as exc:
            raise UnreachableError(self.redact(f"the token service of {self.host} does not answer ({realm})"),
                                   why=str(getattr(exc, "reason", exc))) from exc
        if answer.status != 200:
            return None
        try:
            data = untrusted.obj(untrusted.loads(answer.body), "the token answer")
            token = data.get("token") or data.get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            return None
        self.redact = self.redact.with_secrets(token)
        self._tokens[scope] = token
        return f"Bearer {token}"

    @staticmethod
    def _basic_header(login: Login) -> str:
        return "Basic " + base64.b64encode(f"{login.username}:{login.password}".encode()).decode()

    def request(self, method: str, path_or_url: str, *, repo: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None, limit: int = MAX_MANIFEST,
                accepted: Sequence[int] = (200,), retry: bool = True) -> _Answer:
        """One API request, authenticated as the registry asks; a status outside ``accepted`` (and not 404,
        which the caller reads) raises. A transient failure (5xx, 429, a reset or timed-out connection) is
        retried by the one policy of retrying.py (``retry=False``: the caller retries a sequence itself);
        the error raised then carries ``transient = True``."""
        url = path_or_url if "://" in path_or_url else self._base() + path_or_url

        def once() -> _Answer:
            answer = self._once(method, url, repo=repo, body=body, headers=headers, limit=limit)
            if answer.status in retrying.TRANSIENT_STATUS and answer.status not in accepted:
                raise _Busy(answer)
            return answer

        def transient(exc: BaseException) -> float | None:
            if isinstance(exc, _Busy):
                return retrying.retry_after(exc.answer.headers.get("Retry-After")) or 0.0
            return 0.0 if _transient_os(exc) else None

        def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            self.say(self.redact(f"retry     {method} {url}: attempt {attempt} of {self.retry.attempts} failed "
                                 f"({_short(exc)}); next in {wait:.3g} s"))

        try:
            check = retrying.once_for_timeouts(transient, lambda e: isinstance(getattr(e, "reason", e), TimeoutError))
            answer, _n = retrying.retry(once, transient=check if retry else (lambda _e: None), policy=self.retry,
                                        sleep=self.sleep, on_retry=on_retry, host=self.host)
        except _Busy as busy:
            error = self._failure(method, url, busy.answer, attempts=retrying.attempts_made(busy))
            error.transient = True  # type: ignore[attr-defined]
            error.retry_attempts = retrying.attempts_made(busy)  # type: ignore[attr-defined]
            raise error from None
        except OSError as exc:
            attempts = retrying.attempts_made(exc)
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            reason = getattr(exc, "reason", exc)
            cut = _transient_os(exc)
            error = UnreachableError(
                self.redact(f"{method} {url} failed{tries}"), why=self.redact(str(reason)),
                fix=(f"the connection to the registry {self.host} was cut or timed out"
                     + (" every time" if attempts > 1 else "")
                     + "; check the registry and what sits between it and this host, then run again") if cut else
                    f"check that the registry {self.host} is up and listens there")
            error.transient = cut  # type: ignore[attr-defined]
            error.retry_attempts = attempts  # type: ignore[attr-defined]
            raise error from exc
        if answer.status in accepted or (answer.status == 404 and method in ("GET", "HEAD")):
            return answer
        raise self._failure(method, url, answer)

    def _once(self, method: str, url: str, *, repo: str, body: bytes | None, headers: Mapping[str, str] | None,
              limit: int) -> _Answer:
        scope = f"repository:{repo}:pull,push"
        hdrs = dict(headers or {})
        if scope in self._tokens:
            hdrs["Authorization"] = f"Bearer {self._tokens[scope]}"
        elif self._basic and self.login is not None:
            hdrs["Authorization"] = self._basic_header(self.login)
        answer = self._raw(method, url, body=body, headers=hdrs, limit=limit)
        if answer.status == 401:
            challenge = answer.headers.get("WWW-Authenticate", "")
            auth = self._auth_header(challenge, scope)
            if auth is not None:
                answer = self._raw(method, url, body=body, headers={**hdrs, "Authorization": auth}, limit=limit)
        return answer

    def _failure(self, method: str, url: str, answer: _Answer, *, attempts: int = 0) -> BuildctlError:
        detail = answer.body[:500].decode("utf-8", "replace").strip()
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        what = self.redact(f"{method} {url}: the registry answered HTTP {answer.status}{tries}")
        if answer.status in (401, 403):
            return PushError(what, why=self.redact(detail or "unauthorized"),
                             fix=f"the registry {self.host} refused the credentials: log in with `docker login "
                                 f"{self.host}`, or set BUILDCTL_REGISTRY_AUTH=USER:PASSWORD")
        if answer.status == 429:
            return PushError(what, why=self.redact(detail or "too many requests"),
                             fix=f"the registry {self.host} limits the rate of requests: run again later")
        if answer.status >= 500:
            return PushError(what, why=self.redact(detail or "(no detail)"),
                             fix=f"the registry {self.host} failed on its side: check its log and its storage (a "
                                 "full disk answers 500), then run again")
        return PushError(what, why=self.redact(detail or "(no detail)"),
                         fix="check the registry's log; a registry older than distribution 2.7 may not take OCI "
                             "manifests")

    # -- blobs

    def blob_exists(self, repo: str, digest: str) -> bool:
        _check(repo, digest)
        return self.request("HEAD", f"/v2/{repo}/blobs/{digest}", repo=repo).status == 200

    def push_blob(self, repo: str, data: bytes, media_type: str) -> Descriptor:
        digest = sha256_digest(data)
        _check(repo, digest)
        desc = Descriptor(media_type=media_type, digest=digest, size=len(data))
        if self.blob_exists(repo, digest):
            return desc

        def upload() -> None:
            start = self.request("POST", f"/v2/{repo}/blobs/uploads/", repo=repo, accepted=(202,),
                                 headers={"Content-Length": "0"}, body=b"")
            location = start.headers.get("Location", "")
            if not location:
                raise PushError(f"the registry {self.host} started an upload without a Location",
                                fix="check the registry")
            url = urllib.parse.urljoin(self._base() + "/", location)
            if urllib.parse.urlsplit(url).netloc != self.host:
                raise PushError(self.redact(f"the registry {self.host} sent the upload elsewhere ({url})"),
                                fix="uploads to another host are not followed")
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
            # not retried alone: an upload session the registry failed is not resumed, a new one is started
            self.request("PUT", url, repo=repo, body=data, accepted=(201,), retry=False,
                         headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})

        def again(exc: BaseException) -> float | None:
            fresh = getattr(exc, "transient", False) and not retrying.attempts_made(exc)
            return 0.0 if fresh else None

        retrying.retry(upload, transient=again, policy=self.retry, sleep=self.sleep)
        return desc

    def get_blob(self, repo: str, digest: str, *, limit: int = MAX_BLOB) -> bytes | None:
        _check(repo, digest)
        answer = self.request("GET", f"/v2/{repo}/blobs/{digest}", repo=repo, limit=limit)
        if answer.status == 404:
            return None
        if sha256_digest(answer.body) != digest:
            raise PushError(f"the registry {self.host} returned blob {digest} with other content",
                            fix="the registry's storage is damaged or it is not the registry meant")
        return answer.body

    # -- manifests

    def manifest(self, repo: str, reference: str) -> tuple[bytes, Descriptor] | None:
        """(bytes, descriptor) of the manifest ``reference`` (a tag or digest) names; None: none."""
        _check(repo, reference)
        answer = self.request("GET", f"/v2/{repo}/manifests/{reference}", repo=repo,
                              headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if answer.status == 404:
            return None
        digest = sha256_digest(answer.body)
        if _DIGEST.match(reference) and digest != reference:
            raise PushError(f"the registry {self.host} returned manifest {reference} with other content",
                            fix="the registry's storage is damaged or it is not the registry meant")
        media = _media_type(answer.body) or (answer.headers.get("Content-Type") or "").split(";")[0].strip()
        return answer.body, Descriptor(media_type=media, digest=digest, size=len(answer.body))

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> tuple[Descriptor, bool]:
        """PUT a manifest; (its descriptor, whether the registry says it indexed the subject itself)."""
        _check(repo, reference)
        answer = self.request("PUT", f"/v2/{repo}/manifests/{reference}", repo=repo, body=data, accepted=(201,),
                              headers={"Content-Type": media_type})
        digest = sha256_digest(data)
        said = answer.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise PushError(f"the registry {self.host} stored the manifest under {said}, not its digest {digest}",
                            fix="check the registry")
        return (Descriptor(media_type=media_type, digest=digest, size=len(data)),
                bool(answer.headers.get("OCI-Subject")))

    # -- referrers

    def referrers(self, repo: str, subject: str, artifact_type: str = "") -> list[Descriptor]:
        """Manifests that refer to ``subject``: the referrers API where there is one, else the tag schema."""
        _check(repo, subject)
        query = f"?artifactType={urllib.parse.quote(artifact_type)}" if artifact_type else ""
        answer = self.request("GET", f"/v2/{repo}/referrers/{subject}{query}", repo=repo,
                              headers={"Accept": OCI_INDEX})
        ctype = (answer.headers.get("Content-Type") or "").split(";")[0].strip()
        # reading: an entry that is not a descriptor is left out (one odd entry never hides the others)
        if answer.status == 200 and ctype == OCI_INDEX:
            found = _index_entries(answer.body, f"referrers of {subject}", skip_malformed=True)
        else:
            got = self.manifest(repo, referrers_tag(subject))
            found = _index_entries(got[0], f"{repo}:{referrers_tag(subject)}", skip_malformed=True) if got else []
        return [d for d in found if not artifact_type or d.artifact_type == artifact_type]

    def attach(self, repo: str, subject: Descriptor, *, artifact_type: str, payload: bytes, media_type: str,
               annotations: Mapping[str, str] | None = None) -> Descriptor:
        """Push ``payload`` as an OCI 1.1 artifact whose subject is ``subject``, findable by ``referrers``.

        The artifact is an image manifest with ``artifactType``, the empty config and one layer (the
        payload). Where the registry does not index subjects itself, the referrers tag ``sha256-<hex>``
        of the subject gets an image index with the artifact added (what was there is kept)."""
        self.push_blob(repo, EMPTY_CONFIG, OCI_EMPTY)
        layer = self.push_blob(repo, payload, media_type)
        ann = dict(sorted((annotations or {}).items()))
        manifest: dict[str, Any] = {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
            "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
            "layers": [layer.to_json()],
            "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        }
        if ann:
            manifest["annotations"] = ann
        data = canonical_json(manifest)
        desc, indexed = self.put_manifest(repo, sha256_digest(data), data, OCI_MANIFEST)
        desc = Descriptor(media_type=OCI_MANIFEST, digest=desc.digest, size=desc.size, artifact_type=artifact_type,
                          annotations=ann)
        if not indexed:
            self._add_to_referrers_tag(repo, subject.digest, desc)
        return desc

    def _add_to_referrers_tag(self, repo: str, subject: str, desc: Descriptor) -> None:
        tag = referrers_tag(subject)
        got = self.manifest(repo, tag)
        entries = _index_entries(got[0], f"{repo}:{tag}") if got else []
        if any(d.digest == desc.digest for d in entries):
            return
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX,
                 "manifests": [d.to_json() for d in (*entries, desc)]}
        self.put_manifest(repo, tag, canonical_json(index), OCI_INDEX)


class _Busy(Exception):
    """A transient HTTP answer (5xx, 429), raised inside ``request`` so that retrying.retry sees it."""

    def __init__(self, answer: _Answer) -> None:
        super().__init__(f"HTTP {answer.status}")
        self.answer = answer


def _transient_os(exc: BaseException) -> bool:
    """A connection that was reset, cut or timed out (not one refused, not an untrusted certificate)."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLCertVerificationError | ConnectionRefusedError):
        return False
    if isinstance(reason, str):
        return retrying.transient_text(reason)
    return isinstance(reason, ConnectionResetError | ConnectionAbortedError | BrokenPipeError | TimeoutError
                      | ssl.SSLEOFError)


def _short(exc: BaseException) -> str:
    if isinstance(exc, _Busy):
        return str(exc)
    return str(getattr(exc, "reason", exc))[:200]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A registry may redirect blob reads to storage: followed for GET/HEAD only, never with a body."""

    def redirect_request(self, req: urllib.request.Request, response: Any, code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        if req.get_method() not in ("GET", "HEAD"):
            return None
        new = super().redirect_request(req, response, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")  # credentials stay with the registry
        return new


def _check(repo: str, reference: str) -> None:
    if not _REPO.match(repo) or len(repo) > 255:
        raise PushError(f"not a repository name: {repo!r}", fix="use lowercase names separated by /")
    if not (_DIGEST.match(reference) or _TAG.match(reference)):
        raise PushError(f"not a tag or sha256 digest: {reference!r}")


def _media_type(body: bytes) -> str:
    """The manifest's own mediaType field (what a descriptor of it must say), or ""."""
    try:
        data = untrusted.loads(body)
    except ValueError:
        return ""
    media = data.get("mediaType") if isinstance(data, dict) else None
    return media if isinstance(media, str) else ""


def _index_entries(body: bytes, where: str, *, skip_malformed: bool = False) -> list[Descriptor]:
    """The descriptors an image index lists. An entry that is not a descriptor: PushError naming it, or with
    ``skip_malformed`` (reading referrers) left out; adding to a referrers tag keeps every entry or refuses."""
    try:
        data = untrusted.loads(body)
    except ValueError as exc:
        raise PushError(f"{where}: not an image index ({exc})", fix="check the registry") from None
    manifests = data.get("manifests") if isinstance(data, dict) else None
    if not isinstance(manifests, list):
        raise PushError(f"{where}: not an image index (no manifests list)",
                        fix="the tag is used for something else; remove it from the registry")
    out = []
    for i, m in enumerate(manifests):
        try:
            out.append(Descriptor.from_json(m, f"{where}: manifests[{i}]"))
        except PushError:
            if not skip_malformed:
                raise
    return out
