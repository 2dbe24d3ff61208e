"""Helpers for tests that need something from the machine (an engine, a registry, root)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import urllib.parse
import uuid
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from buildctl.lock.lockfile import LockedChange, LockedPatch, LockedPr

REQUIRE_ENGINE = os.environ.get("BUILDCTL_REQUIRE_ENGINE") == "1"


def unavailable(what: str, fix: str = "") -> NoReturn:
    """``what`` is missing: fail when `make test` required it (BUILDCTL_REQUIRE_ENGINE=1), else skip.

    A skipped engine test must never count as a pass in CI, so under `make test` this is a failure.
    """
    if REQUIRE_ENGINE:
        pytest.fail(
            f"{what}\n  BUILDCTL_REQUIRE_ENGINE=1: engine tests must run, not skip."
            + (f"\n  fix: {fix}" if fix else ""),
            pytrace=False,
        )
    pytest.skip(f"{what}; run `make test`, which sets up the engine, the base image and a registry")


def load_script(name: str, path: Path) -> ModuleType:
    """The Python file ``path``, outside any package (images/, demo/, tests/data/...), as a module named ``name``;
    in sys.modules while it runs, as dataclasses need, and not after."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def unique(prefix: str = "t") -> str:
    """A short name no other test run uses (tests share one engine with other people)."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def lchanges(prs: dict[str, str] | None = None, patches: dict[str, str] | None = None
             ) -> tuple[LockedChange, ...]:
    """Locked changes (schema 2) from the old prs/patches mappings: PRs in order, then patches."""
    return (tuple(LockedPr(number=int(n), head=h) for n, h in (prs or {}).items())
            + tuple(LockedPatch(file=f, sha256=s) for f, s in (patches or {}).items()))


# -- what a provenance statement must name: every value of a lock entry (tests of provenance.py)

# Not an input of any build, or said otherwise: informational (resolved_at, branch_head: excluded from the
# lock hash too; a PR's target branch, how it was merged upstream, a dragged commit's subject and label),
# flags (computed, in_base, sdist: annotations), platform (the arch of each apt purl), ref (the base is named
# by digest), and a PR's merges of its target that were left out (not applied: no input).
LOCK_NOT_INPUTS = frozenset({"resolved_at", "branch_head", "computed", "in_base", "sdist", "platform", "ref",
                             "target", "how", "subject", "by", "skipped_merges", "kind"})
# The lock format's own field names; every other key of a mapping is data (a package, a file, a path).
LOCK_FIELDS = frozenset({"base", "digest", "apt", "build_apt", "downloads", "url", "sha256", "pip", "build_pip",
                         "name", "version", "hashes", "components", "repo", "changes", "sha", "number", "head",
                         "mode", "commits", "empty", "merged_upstream", "commit", "file", "dragged", "submodules",
                         "tree"})


def locked_values(data: object, key: str = "") -> list[tuple[str, str]]:
    """(key, value) of every string in a variant's lock entry, and the data keys of its mappings (package
    names, PR numbers, patch files), leaving out what is not an input."""
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k in LOCK_NOT_INPUTS:
                continue
            if k not in LOCK_FIELDS:
                out.append((key, str(k)))
            out += locked_values(v, str(k))
    elif isinstance(data, list):
        for v in data:
            out += locked_values(v, key)
    elif isinstance(data, str | int) and not isinstance(data, bool) and data != "":
        out.append((key, str(data)))
    return out


def _pieces(value: str) -> set[str]:
    from packageurl import PackageURL

    out = {value, value.rpartition("#")[2], value.rpartition("@")[2]}
    if value.startswith("git+"):
        bare = value.removeprefix("git+").partition("#")[0]
        out |= {bare, bare.rpartition("@")[0] or bare}
    if value.startswith("pkg:"):
        purl = PackageURL.from_string(value)
        out |= {purl.name, purl.version or "", *(str(q) for q in (purl.qualifiers or {}).values())}
    out.update(urllib.parse.unquote(t) for t in re.split(r"[@?&=#/]", value))
    return out


def named_by(descriptors: list[dict[str, object]]) -> set[str]:
    """Everything in-toto ResourceDescriptors name: their values, and what their URIs name (a purl's name,
    version and qualifiers; a git URI's repository, ref and path; the parts between separators)."""
    out: set[str] = set()
    for d in descriptors:
        values = [d.get("uri", ""), d.get("name", "")]
        for field in ("digest", "annotations"):
            values += list((d.get(field) or {}).values())  # type: ignore[attr-defined]
        for v in values:
            out |= _pieces(str(v))
    return out


def unnamed_lock_values(lock_entry: object, descriptors: list[dict[str, object]]) -> list[tuple[str, str]]:
    """The values of ``lock_entry`` that no descriptor names ([] when the statement names every input)."""
    named = named_by(descriptors)
    return [(k, v) for k, v in locked_values(lock_entry) if v not in named and v.removeprefix("sha256:") not in named]
