"""What a manifest asks pip for: the runtime requirements (the manifest's own, then the compiled components'
install requirements) and the wheel an ``install: pip`` download names. Pure functions of the manifest model,
shared by the locker (lock/) and the graph (graph/)."""

from __future__ import annotations

import urllib.parse

from packaging.utils import parse_wheel_filename

from buildctl.manifest.model import Download, Manifest, PipRequirement


def runtime_requirements(manifest: Manifest) -> tuple[PipRequirement, ...]:
    """The runtime pip requirements: the manifest's, then the compiled wheels' own (install.requires)."""
    out = list(manifest.pip.requirements)
    seen = {r.name for r in out}
    for c in manifest.components:
        for r in c.install.requires:
            if r.name not in seen:
                out.append(r)
                seen.add(r.name)
    return tuple(out)


def download_wheel(download: Download, platform: str) -> tuple[str, str, str, str] | None:
    """(canonical name, version, file name, url) of an ``install: pip`` download's wheel for ``platform``."""
    u = download.for_platform(platform)
    if u is None:
        return None
    path = urllib.parse.unquote(urllib.parse.urlsplit(u.url).path.rsplit("/", 1)[-1])
    name, version, _, _ = parse_wheel_filename(path)  # the loader checked it parses
    return str(name), str(version), path, u.url
