"""An image reference parsed once: registry host, repository path, tag and/or digest (shared by lock, graph, ship, registry)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from buildctl import syntax
from buildctl.errors import UsageError

_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_IMAGE_ID_RE = re.compile(r"^(?:sha256:[0-9a-f]{64}|[0-9a-f]{12,64})\Z")  # an engine's image id, or its short form


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    """A parsed image reference: registry host, repository path, tag and/or digest."""

    host: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @staticmethod
    def parse(ref: str) -> ImageRef:
        name, _, digest = ref.partition("@")
        head, _, rest = name.partition("/")
        # Docker's rule: the first component is a registry host when it has a '.' or ':' or is localhost.
        if rest and ("." in head or ":" in head or head == "localhost"):
            host, path = head, rest
        else:
            host, path = "docker.io", name if "/" in name else f"library/{name}"
        tag = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, _, tag = path.rpartition(":")
        if not digest and not tag:
            tag = "latest"
        return ImageRef(host=host, path=path, tag=tag, digest=digest or None)

    def name(self, host: str | None = None) -> str:
        return f"{host or self.host}/{self.path}"

    def with_tag(self, host: str | None = None) -> str:
        return f"{self.name(host)}:{self.tag}" if self.tag else self.name(host)


def problem(ref: str) -> str | None:
    """Why ``ref`` (a command-line argument) is not an image reference, or None: docker's grammar,
    [HOST[:PORT]/]REPOSITORY[:TAG][@sha256:<64 hex>], the host possibly [IPv6]:PORT. Checked before a registry
    is asked, so that a digest of no hex is a usage error, never the registry's refusal."""
    bad = syntax.control(ref)
    if bad:
        return bad
    parsed = ImageRef.parse(ref)
    if "@" in ref and not _DIGEST_RE.match(parsed.digest or ""):
        return f"has the digest {parsed.digest or ''!r}, not sha256:<64 lower-case hex digits>"
    bad = syntax.host_port(parsed.host)
    if bad:
        return f"names the registry host {parsed.host!r}, which {bad}"
    bad = syntax.repository(parsed.path)
    if bad:
        return f"names the repository {parsed.path!r}, which {bad}"
    if ref.partition("@")[0].endswith(":"):  # (parse reads an empty tag as none, then as latest)
        return "has an empty tag"
    if parsed.tag is not None and not _TAG_RE.match(parsed.tag):
        return f"has the tag {parsed.tag!r}, not 1 to 128 of letters, digits, '_', '.' and '-' (not first)"
    return None


def local_problem(ref: str) -> str | None:
    """``problem`` of an IMAGE that may also be a local image's id (``sha256:<64 hex>``, or 12 to 64 hex digits as
    ``docker images`` shows them): smoke, bom, provenance and diff take either."""
    return None if _IMAGE_ID_RE.match(ref) else problem(ref)


def checked(value: str, what: str = "IMAGE", *, local_id: bool = False) -> str:
    """A command's IMAGE argument, checked before an engine or registry is asked: a malformed one is a usage error
    naming it (exit 2), never the engine's or registry's refusal (a digest of no hex was the registry's 'not found',
    exit 11) or an engine that cannot be reached. ``local_id``: a local image's id is one too (``local_problem``:
    smoke, bom, provenance and diff take either; evidence needs a registry reference)."""
    bad = local_problem(value) if local_id else problem(value)
    if bad:
        raise UsageError(f"{what} {value!r} {bad}",
                         fix="give a local image's tag or id, or [HOST[:PORT]/]REPOSITORY[:TAG][@sha256:<64 hex>]"
                         if local_id else "give HOST[:PORT]/REPOSITORY:TAG or HOST[:PORT]/REPOSITORY@sha256:<64 hex>")
    return value
