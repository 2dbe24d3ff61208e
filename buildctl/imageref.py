"""An image reference parsed once: registry host, repository path, tag and/or digest (shared by lock, graph, ship, registry)."""

from __future__ import annotations

from dataclasses import dataclass


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
