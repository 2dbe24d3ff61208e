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

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "engine")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: pure test (no process, no network, no engine)")
    config.addinivalue_line("markers", "integration: local processes and 127.0.0.1 servers, no engine")
    # pytest-xdist's own marker, named here too so that a run without xdist accepts it (--strict-markers)
    config.addinivalue_line("markers", "xdist_group(name): tests that run in one xdist worker, in order")


# Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`) the engine tests share one engine and
# its images, so they run in one worker, one after the other, as without xdist; the other tiers fill the
# other. The bench test belongs with them: beside them, its clean-up once removed the base image (by digest)
# that a build in the other worker was about to read (test_the_ca_bundle_is_in_no_layer_and_no_history).
ENGINE_GROUP = "engine"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
        except ValueError:
            continue
        tier = parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "engine":
            item.add_marker(pytest.mark.xdist_group(ENGINE_GROUP))


@pytest.fixture(scope="session")
def project_root() -> Path:
    """The checkout under test (holds pins/, images/, smoke/)."""
    return TESTS.parent
