"""Fixtures for unit tests of the smoke suite's checks: in-process probes over mimic module trees.

tests/unit/conftest.py forbids processes and sockets, so a check that reached for a subprocess
would fail here rather than pass by accident: the in-process prober is the only way in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.smoke.smoke_harness import Suite


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[Suite]:
    site, image = tmp_path / "site", tmp_path / "image"
    site.mkdir()
    image.mkdir()
    yield Suite(site=site, image=image)

