"""Package indexes and plain downloads, seen from the host (urllib; the one module that speaks HTTP).

- ``HttpFetcher``: bounded GETs with the user's CA bundle; sha256 of a download, streamed.
- ``fetch_verified``: a download into a file, kept only when its sha256 is the one expected.
- ``SimpleIndex``: the PEP 503 / PEP 691 simple API of one or more indexes: the files of a release
  and their sha256, so that the lock records every file pip may install for a platform.

Errors become ours: a host that cannot be reached in time is an ``UnreachableError`` naming it;
an answer that is not what we need is a ``LockError``. Credentials in URLs never reach a message.
"""

from __future__ import annotations

import hashlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, Protocol

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from buildctl import untrusted
from buildctl.config import Config, mirror_url
from buildctl.errors import BuildFailed, LockError, UnreachableError

DEFAULT_INDEX = "https://pypi.org/simple/"
CHUNK = 1 << 20


def _prefix(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}/"


def redact(url: str) -> str:
    """``url`` without user:password (index URLs may carry tokens)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit((parts.scheme, "***@" + host, parts.path, parts.query, parts.fragment))


class HttpFetcher:
    def __init__(self, *, ca_bundle: Path | None = None, timeout: float = 10.0,
                 mirrors: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self.mirrors = dict(mirrors or {})  # URL prefix -> mirror prefix (Config.download_mirrors)
        self._ca_bundle = ca_bundle
        self._ssl_context: ssl.SSLContext | None = None

    @property
    def _ssl(self) -> ssl.SSLContext:
        """Made on the first request (reading a CA bundle costs about 20 ms: a run that fetches nothing skips it)."""
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context(cafile=str(self._ca_bundle) if self._ca_bundle else None)
        return self._ssl_context

    @classmethod
    def from_config(cls, config: Config) -> HttpFetcher:
        return cls(ca_bundle=config.ca_bundle, timeout=config.network_timeout, mirrors=config.download_mirrors)

    def open(self, url: str, *, accept: str | None = None) -> IO[bytes]:
        asked = url
        url = mirror_url(url, self.mirrors)
        via = f" through the mirror {redact(url)}" if url != asked else ""
        req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        try:
            resp: IO[bytes] = urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl)
            return resp
        except urllib.error.HTTPError as exc:
            raise LockError(f"{redact(asked)}{via} answered HTTP {exc.code} {exc.reason}",
                            fix="check the URL in the manifest or the index settings in the configuration") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UnreachableError(
                f"cannot reach {urllib.parse.urlsplit(url).netloc.rsplit('@', 1)[-1] or url}"
                f" (for {redact(asked)}{via})",
                why=f"{reason} (timeout {self.timeout:g} s)",
                fix=("" if via else "or point download_mirrors at a mirror of it in the buildctl configuration "
                     f"(download_mirrors = {{ \"{_prefix(asked)}\" = \"<mirror prefix>\" }}, or "
                     "BUILDCTL_DOWNLOAD_MIRRORS); ")
                    + "check the network or proxy; a TLS-intercepting proxy needs its CA as ca_bundle "
                    "(BUILDCTL_CA_BUNDLE) in the buildctl configuration",
            ) from None

    def get(self, url: str, *, accept: str | None = None, limit: int = 64 << 20) -> tuple[bytes, str, str]:
        """(body, content type, final URL) of a small resource."""
        with self.open(url, accept=accept) as resp:
            body = _read(resp, url, self.timeout, limit)
            headers: Any = getattr(resp, "headers", {})
            ctype = str(headers.get("Content-Type", "")) if headers else ""
            final = str(getattr(resp, "url", url) or url)
        return body, ctype, final

    def content(self, url: str) -> bytes:
        """A small download (an apt keyring) as bytes."""
        return self.get(url)[0]

    def sha256(self, url: str) -> str:
        h = hashlib.sha256()
        with self.open(url) as resp:
            while True:
                chunk = _read_chunk(resp, url, self.timeout)
                if not chunk:
                    break
                h.update(chunk)
        return h.hexdigest()


def _read_chunk(resp: IO[bytes], url: str, timeout: float) -> bytes:
    try:
        return resp.read(CHUNK)
    except (TimeoutError, ConnectionError, OSError) as exc:
        raise UnreachableError(f"download of {redact(url)} stalled", why=f"{exc} (timeout {timeout:g} s)",
                               fix="retry; check the network or proxy") from None


def _read(resp: IO[bytes], url: str, timeout: float, limit: int) -> bytes:
    out = bytearray()
    while chunk := _read_chunk(resp, url, timeout):
        out += chunk
        if len(out) > limit:
            raise LockError(f"{redact(url)} is larger than {limit >> 20} MiB", why="not an index page")
    return bytes(out)


class Opener(Protocol):
    """What ``fetch_verified`` needs of a fetcher (``HttpFetcher``, or a fake in a test)."""

    def open(self, url: str, *, accept: str | None = None) -> IO[bytes]: ...


def fetch_verified(fetcher: Opener, url: str, sha256: str, dest: Path, *, label: str, fix: str) -> None:
    """``url`` into ``dest``, streamed through ``dest.part`` and renamed into place only when its sha256 is
    ``sha256`` (one attempt, no retry). A mismatch removes the part and is a ``BuildFailed`` saying
    "<label> does not match its sha256", with ``fix``; the fetcher's own errors pass through."""
    tmp = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    with fetcher.open(url) as resp, tmp.open("wb") as out:
        while chunk := resp.read(CHUNK):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != sha256:
        tmp.unlink(missing_ok=True)
        raise BuildFailed(f"{label} does not match its sha256", why=f"expected {sha256}, got {h.hexdigest()}",
                          fix=fix)
    tmp.replace(dest)


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def parse_project_page(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """Files listed by a PEP 691 JSON or PEP 503 HTML project page."""
    files: list[IndexFile] = []
    if "json" in content_type:
        try:  # an index's answer: bounded, every value's type checked before use (buildctl/untrusted.py)
            data = untrusted.obj(untrusted.loads(body), "the project page")
            for i, f in enumerate(untrusted.array(data.get("files", []), "files")):
                entry = untrusted.obj(f, f"files[{i}]")
                sha256 = untrusted.str_map(entry.get("hashes"), f"files[{i}].hashes").get("sha256")
                files.append(IndexFile(filename=untrusted.text(entry.get("filename"), f"files[{i}].filename"),
                                       url=urllib.parse.urljoin(page_url, untrusted.text(entry.get("url"),
                                                                                         f"files[{i}].url")),
                                       sha256=sha256))
        except ValueError as exc:
            raise LockError(f"the package index page {redact(page_url)} is not a PEP 691 project page: {exc}",
                            fix="check the index URL (configuration pip_index_url / the manifest's index)") from None
        return files
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for href, text in parser.links:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        algo, _, digest = fragment.partition("=")
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        files.append(IndexFile(filename=name, url=url, sha256=digest if algo == "sha256" and digest else None))
    return files


def file_release(filename: str) -> tuple[str, Version, frozenset[str] | None] | None:
    """(canonical name, version, wheel tags or None for an sdist); None for anything else."""
    try:
        if filename.endswith(".whl"):
            name, version, _build, tags = parse_wheel_filename(filename)
            return name, version, frozenset(str(t) for t in tags)
        name, version = parse_sdist_filename(filename)
        return name, version, None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def select_files(files: Iterable[IndexFile], name: str, version: str, tags: Sequence[str]) -> list[IndexFile]:
    """The files of ``name==version`` that pip may install where ``tags`` are supported.

    Compatible wheels; the source distributions only when no wheel fits (pip would build one).
    Without tags (pip too old to tell), every file of the release.
    """
    want = Version(version)
    canon = canonicalize_name(name)
    supported = set(tags)
    wheels: list[IndexFile] = []
    sdists: list[IndexFile] = []
    for f in files:
        rel = file_release(f.filename)
        if rel is None or rel[0] != canon or rel[1] != want:
            continue
        if rel[2] is None:
            sdists.append(f)
        elif not supported or rel[2] & supported:
            wheels.append(f)
    return wheels or sdists


class SimpleIndex:
    """The simple API of ``urls`` (the index, then the extra indexes), read on the host."""

    ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"

    def __init__(self, urls: Sequence[str], fetcher: HttpFetcher) -> None:
        self.urls = [u if u.endswith("/") else u + "/" for u in urls] or [DEFAULT_INDEX]
        self.fetcher = fetcher

    def files(self, name: str) -> list[IndexFile]:
        out: list[IndexFile] = []
        for base in self.urls:
            page = urllib.parse.urljoin(base, canonicalize_name(name) + "/")
            try:
                body, ctype, final = self.fetcher.get(page, accept=self.ACCEPT)
            except LockError:  # 404: this index does not have the project; another may
                continue
            out.extend(parse_project_page(body, ctype, final))
        return out

    def file_hashes(self, name: str, version: str, tags: Sequence[str]) -> tuple[str, ...]:
        """``sha256:<hex>`` of every file of ``name==version`` installable with ``tags``."""
        chosen = select_files(self.files(name), name, version, tags)
        hashes = {f.sha256 if f.sha256 else self.fetcher.sha256(f.url) for f in chosen}
        return tuple(sorted(f"sha256:{h}" for h in hashes))
