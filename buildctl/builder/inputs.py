"""What a build is given: the graph's nodes and names, plus the few values the host fetches with.

The build reads neither the manifest nor the lock file: the service that loads a target
(buildctl.services.build) turns them into this, and the plan (buildctl.graph.plan) says what to do
with each node. Source trees come through ``SourceTrees``, which knows the locked components; what the
host fetches with through ``Fetchers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from buildctl.graph import render
from buildctl.graph.graph import Graph
from buildctl.sources.index import HttpFetcher, SimpleIndex


class SourceTrees(Protocol):
    """The git components of the target, prepared at their lock and exported for a build context."""

    def tree(self, component: str) -> str: ...  # the locked tree SHA (what the progress line names)

    def export(self, component: str) -> Path: ...  # prepared (changes applied) and exported; raises what preparing raises


class Fetchers(Protocol):
    """How the host fetches, made from the configuration when asked (buildctl.services.wiring.HostFetchers)."""

    def downloads(self) -> HttpFetcher: ...  # manifest downloads and pip files (download mirrors applied)

    def index(self) -> tuple[SimpleIndex, HttpFetcher]: ...  # the package index and what reads its files (sdists)


@dataclass(frozen=True, kw_only=True)
class BuildInput:
    graph: Graph
    refs: Mapping[str, str]  # node name -> image reference (the base as it is pulled)
    registry: str | None  # where node images are shared; None: the engines' own
    base_ref: str
    templates: render.Templates
    python: str  # the variant's Python version: pip wheels are downloaded for it
    image_python: str  # the image's own python command: sdists are built with it in the base
    base_image: str  # the base's name, for the OCI base labels
    base_digest: str  # the base's locked digest ("" when unlocked)
    bit_level: frozenset[str]  # node kinds declared bit-level reproducible: their whiteouts get a fixed time
    sources: SourceTrees
