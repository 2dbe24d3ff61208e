"""Fixtures for unit tests of the smoke suite's checks: in-process probes over mimic module trees.

Unit tests may not start processes: the autouse fixture below makes any attempt fail loudly, so a
check that reached for a subprocess would show up here rather than pass by accident.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from smoke_harness import Suite


@pytest.fixture(autouse=True)
def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"unit tests may not start processes: {args[:1]!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(os, "system", refuse)


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[Suite]:
    site, image = tmp_path / "site", tmp_path / "image"
    site.mkdir()
    image.mkdir()
    yield Suite(site=site, image=image)

