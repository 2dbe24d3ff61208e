"""Shared by every test tier.

Tiers, by folder (each test gets the tier's marker automatically):

- tests/unit         pure: no process, no network, no engine (tests/unit/conftest.py enforces it);
- tests/integration  local processes (git, pip, http servers on 127.0.0.1), no engine;
- tests/engine       a real Docker engine and a real registry (tests/engine/conftest.py). `make test`
                     sets BUILDCTL_REQUIRE_ENGINE=1: then a missing engine or registry FAILS these tests
                     instead of skipping them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ("tests.progress",)  # --progress-lines, which `make test` passes

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "engine")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: pure test (no process, no network, no engine)")
    config.addinivalue_line("markers", "integration: local processes and 127.0.0.1 servers, no engine")


# Under pytest-xdist (`make test`: two workers, `--dist loadfile`) each test file runs in one worker, and two files
# run at once, engine ones included. The engine tests are written for that: each names its images and
# repositories uniquely and removes only those, has its own cache, and no test removes the shared demo base tag
# (tests/engine/conftest.py's registry_base; removing it once broke a build in the other worker that read the
# base by digest).


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
        except ValueError:
            continue
        tier = parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def project_root() -> Path:
    """The checkout under test (holds pins/, images/, smoke/)."""
    return TESTS.parent
