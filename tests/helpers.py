"""Helpers for tests that need something from the machine (an engine, a registry, root)."""

from __future__ import annotations

import os
import uuid
from typing import NoReturn

import pytest

from buildctl.lockfile import LockedChange, LockedPatch, LockedPr

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


def unique(prefix: str = "t") -> str:
    """A short name no other test run uses (tests share one engine with other people)."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def lchanges(prs: dict[str, str] | None = None, patches: dict[str, str] | None = None
             ) -> tuple[LockedChange, ...]:
    """Locked changes (schema 2) from the old prs/patches mappings: PRs in order, then patches."""
    return (tuple(LockedPr(number=int(n), head=h) for n, h in (prs or {}).items())
            + tuple(LockedPatch(file=f, sha256=s) for f, s in (patches or {}).items()))
