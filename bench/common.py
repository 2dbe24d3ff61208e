"""What the bench's parts share: where things are, its one error, its progress lines, docker and registry calls."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_REGISTRY = "127.0.0.1:5000"


BASE_PATH = "buildctl/demo-base:bookworm"


LOCAL_BASE = "buildctl-demo-base:bookworm"


DOCKER = "/usr/bin/docker"  # Debian's client: the engine's BuildKit without buildx (docs/reference/engine-facts.md)


TOOLS = ("buildctl", "buildctl-buildkit", "multistage", "multistage-cm", "multistage-uv", "recipe")


BUILDKIT = "buildctl-buildkit"  # buildctl with `--backend buildkit`: its own project (repository) and cache


LABELS = {"buildctl": "buildctl", BUILDKIT: "buildctl, BuildKit backend", "multistage": "multi-stage Dockerfile",
          "multistage-cm": "multi-stage, ccache in a cache mount", "multistage-uv": "multi-stage, uv for pip",
          "recipe": "recipe Dockerfile"}


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why (printed without a traceback)."""


class Quiet:
    """A build's progress, silent; what each node said last (its state and detail) kept in ``said``."""

    def __init__(self) -> None:
        self.said: dict[str, tuple[str, str]] = {}

    def node(self, name: str, state: str, detail: str = "") -> None:
        self.said[name] = (state, detail)

    def log(self, name: str, line: str) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class Fig:
    seconds: float
    rebuilt: int  # nodes (buildctl) or build steps (Dockerfiles) that ran
    total: int
    compiles: int
    detail: list[str] = field(default_factory=list)
    compile_s: float | None = None  # the compile nodes' own seconds (builds run in the bench's process only)
    compile_detail: str = ""  # what the compile node reported when done (its compiler cache's hits and misses)
    # (c2): the seconds the fresh builder spent pulling the compile environment ("pulled" in the build's progress;
    # None: no progress read, or nothing pulled), the part of the build that no cache can save there
    pull_s: float | None = None


_T0 = time.monotonic()


def say(text: str) -> None:
    print(f"bench: [{time.monotonic() - _T0:6.1f}s] {text}", file=sys.stderr, flush=True)


def registry_digest(registry: str, path: str) -> str:
    """The digest the registry gives for ``path`` (name:tag), or "" where it has no such manifest."""
    name, tag = path.rsplit(":", 1)
    req = urllib.request.Request(f"http://{registry}/v2/{name}/manifests/{tag}", method="HEAD", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.headers.get("Docker-Content-Digest", ""))
    except urllib.error.HTTPError:
        return ""
    except OSError as exc:
        raise BenchError(f"the registry {registry} does not answer ({exc})") from exc


def registry_has(registry: str, path: str) -> bool:
    return bool(registry_digest(registry, path))


def docker(args: list[str], *, host: str | None = None, buildkit: bool = False,
           timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if host:
        env["DOCKER_HOST"] = host
    if buildkit:
        env["DOCKER_BUILDKIT"] = "1"
    return subprocess.run([DOCKER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _get(url: str, method: str = "GET", accept: str = "") -> tuple[bytes, dict[str, str]]:
    req = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read(), dict(r.headers)


def delete_repositories(registry: str, prefix: str) -> None:
    """Delete every tag of the registry's repositories under ``prefix`` (blobs go at its next garbage collection)."""
    accept = ("application/vnd.docker.distribution.manifest.v2+json, "
              "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json")
    try:
        repos = json.loads(_get(f"http://{registry}/v2/_catalog?n=1000")[0]).get("repositories") or []
        for repo in (r for r in repos if r.startswith(prefix)):
            tags = json.loads(_get(f"http://{registry}/v2/{repo}/tags/list")[0]).get("tags") or []
            for tag in tags:
                with contextlib.suppress(OSError):
                    _, headers = _get(f"http://{registry}/v2/{repo}/manifests/{tag}", "HEAD", accept)
                    digest = headers.get("Docker-Content-Digest", "")
                    if digest:
                        _get(f"http://{registry}/v2/{repo}/manifests/{digest}", "DELETE")
    except (OSError, ValueError) as exc:
        say(f"could not remove the run's repositories from {registry}: {exc}")
