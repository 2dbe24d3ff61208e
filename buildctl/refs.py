"""Image references, parsed once: registry / repository / tag / digest, and registry mirrors.

Docker's own rules (distribution/reference): the first path component is a registry only when it
holds a '.' or a ':' or is 'localhost'; otherwise the image lives on Docker Hub (docker.io, with
'library/' in front of a one-component name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from buildctl.errors import UsageError

DOCKER_HUB = "docker.io"
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    registry: str  # host[:port]; "docker.io" for Docker Hub
    repository: str  # path under the registry, e.g. nvidia/pytorch
    tag: str | None = None
    digest: str | None = None  # sha256:<64 hex>

    @property
    def name(self) -> str:
        """registry/repository, as RepoDigests spell it (Docker Hub names keep docker's short form)."""
        if self.registry == DOCKER_HUB:
            return self.repository.removeprefix("library/")
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def with_tag(self, tag: str) -> ImageRef:
        return replace(self, tag=tag, digest=None)

    def with_digest(self, digest: str) -> ImageRef:
        return replace(self, tag=None, digest=digest)

    def with_registry(self, registry: str) -> ImageRef:
        return replace(self, registry=registry)


def parse(text: str) -> ImageRef:
    """Parse ``[registry/]repository[:tag][@sha256:...]``. Raises UsageError naming the bad part."""
    rest = text.strip()
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise UsageError(f"image reference {text!r}: {digest!r} is not a sha256 digest",
                             fix="write it as NAME@sha256:<64 hex digits>")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise UsageError(f"image reference {text!r}: {tag!r} is not a valid tag")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path or not _REPO_RE.match(path):
        raise UsageError(f"image reference {text!r}: {path!r} is not a valid repository name",
                         fix="repository names are lower-case letters, digits and . _ - separated by /")
    return ImageRef(registry=registry, repository=path, tag=tag, digest=digest)


def mirrored(ref: ImageRef, mirrors: Mapping[str, str]) -> ImageRef:
    """The same image on the configured mirror of its registry (Config.registry_mirrors), if any."""
    mirror = mirrors.get(ref.registry)
    return ref.with_registry(mirror) if mirror else ref
