"""Declared missing objects: blobs a mirror lacks that no build reads, and the placeholders that stand in.

A mirror made without its large blobs (the cutlass mirror lacks one PNG under media/images/) cannot hand
out a commit whose tree holds one: git's upload-pack dies ("possible repository corruption"). A
component may declare such a blob (``missing_objects: [{repo, path, blob, why}]`` in the manifest);
then buildctl copies the commit from the local mirror without it and writes a short text file in its
place in the export, for exactly that repository, path and blob. Anything else that is missing is
refused, naming the file, its path and blob and how to declare or fix it, and so is a declaration of a
file a build may read: only pictures and documents can be stood in for (``PLACEHOLDER_SUFFIXES``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.errors import SourceError
from buildctl.sources.urls import normalize_repo

if TYPE_CHECKING:
    from buildctl.manifest.model import Component

# Files no build compiles, configures or imports: a placeholder in their place cannot change a wheel.
PLACEHOLDER_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico", ".pdf")


@dataclass(frozen=True, kw_only=True)
class Allowance:
    """One declared missing blob: repository, path in it, SHA (or prefix), why, where it was declared."""

    repo: str  # normalised, as the superproject's .gitmodules resolves it (before mirror rules)
    path: str
    blob: str
    why: str
    where: str  # the manifest's file name and line

    def matches(self, url: str, path: str, sha: str) -> bool:
        return same_repo(self.repo, url) and self.path == path and sha.startswith(self.blob)

    def label(self) -> str:
        return f"{self.path} (blob {self.blob[:12]}) of {self.repo}"


def same_repo(left: str, right: str) -> bool:
    """Whether two repository strings name the same repository (a trailing '/' or '.git' aside)."""
    def norm(url: str) -> str:
        return url.rstrip("/").removesuffix(".git")
    return norm(left) == norm(right)


def build_reads(path: str) -> bool:
    """Whether a build may read the file at ``path`` (anything but a picture or a document)."""
    return not path.lower().endswith(PLACEHOLDER_SUFFIXES)


def allowances(component: Component, base_dir: Path | None) -> tuple[Allowance, ...]:
    """The component's declared missing blobs; SourceError for one at a path a build may read."""
    out: list[Allowance] = []
    for mo in component.missing_objects:
        if build_reads(mo.path):
            raise SourceError(
                f"{mo.at}: component {component.name} declares {mo.path} (blob {mo.blob[:12]}) of {mo.repo} "
                "as missing, but a build may read that file",
                why="buildctl stands in for pictures and documents only (" + " ".join(PLACEHOLDER_SUFFIXES)
                    + "): a placeholder for a source, build or data file would change what is built",
                fix="complete the mirror (fetch the blob from the original repository into it) and remove the "
                    "entry from missing_objects",
            )
        # the manifest's file name, not its path: the placeholder is part of an export, the same on every machine
        where = f"{Path(mo.at.file).name}:{mo.at.line}" if mo.at.file else "the manifest"
        out.append(Allowance(repo=normalize_repo(mo.repo, base_dir), path=mo.path, blob=mo.blob, why=mo.why,
                             where=where))
    return tuple(out)


def split(url: str, found: Sequence[tuple[str, str]], allow: Sequence[Allowance]
          ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(declared, undeclared) of the missing ``(blob, path)`` pairs of a tree of ``url``."""
    declared = [(s, p) for s, p in found if any(a.matches(url, p, s) for a in allow)]
    return declared, [f for f in found if f not in declared]


def declaration(url: str, sha: str, path: str) -> str:
    """The manifest entry that would declare this missing blob (for a 'fix')."""
    return f"{{repo: {url}, path: {path}, blob: {sha[:12]}, why: ...}}"


def placeholder(allowance: Allowance, url: str, sha: str) -> bytes:
    """The text written in place of a declared missing blob."""
    return (f"placeholder written by buildctl: blob {sha} ({allowance.path}) is missing from the mirror of {url};\n"
            f"declared in missing_objects at {allowance.where}: {allowance.why}\n").encode()

