"""The manifest's declared reproducibility level of a node kind (``repro.levels``): what a build needs to know
(which nodes are bit-level) without loading the comparison code of buildctl.repro.repro."""

from __future__ import annotations

from collections.abc import Mapping

from buildctl.manifest.model import ReproLevel


def level_for(kind: str, levels: Mapping[str, ReproLevel]) -> ReproLevel | None:
    """The manifest's declared level for a node kind (compile covers compile-env and wheel nodes)."""
    key = "compile" if kind in ("compile-env", "wheel") else kind
    return levels.get(key)
