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


# Under pytest-xdist (`make test`: two workers, `--dist loadfile`) each test file runs in one worker, and two files
# run at once, engine ones included. The engine tests are written for that: each names its images and
# repositories uniquely and removes only those, has its own cache, and no test removes the shared demo base tag
# (tests/engine/conftest.py's registry_base; removing it once broke a build in the other worker that read the
# base by digest).


# The order files start in under `make test` (`--no-loadscope-reorder`: xdist then hands out files in this order,
# each to the first free worker): the longest first, so that the last to start are short and the two workers end
# together (xdist's default, most tests first, started the one-test bench file last). Seconds per file from a
# `.ci/run` on an emptied engine (ci20, 3a10ccf, `--durations`); a file not listed goes after these, in its tier's
# order (engine, integration, unit). Only the order: what runs is the same.
LONGEST_FIRST = ("test_build.py", "test_buildkit.py", "test_repro.py", "test_bench.py", "test_nightly_engine.py",
                 "test_interrupts.py", "test_bump_bisect.py", "test_evidence_engine.py", "test_engine.py",
                 "test_downloads_sdists.py", "test_whiteout_fastpath.py")


def _start_order(item: pytest.Item) -> tuple[int, int]:
    try:
        parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
    except ValueError:
        return (len(LONGEST_FIRST), len(TIERS))
    name = parts[-1]
    if parts[0] == "engine" and name in LONGEST_FIRST:
        return (LONGEST_FIRST.index(name), 0)
    return (len(LONGEST_FIRST), ("engine", "integration", "unit").index(parts[0]) if parts[0] in TIERS else len(TIERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
        except ValueError:
            continue
        tier = parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_start_order)  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def project_root() -> Path:
    """The checkout under test (holds pins/, images/, smoke/)."""
    return TESTS.parent
