"""lock/pinsteps.py: the pin changes between two locks, their order, applying them, and the bisection (pure)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedDownload, LockedPip
from buildctl.lock.pinsteps import Bisection, apply, pin_changes
from tests.unit.test_lock_drift import A, B, C, D, base_lock


def bad_lock():  # type: ignore[no-untyped-def]
    good = base_lock()
    return replace(
        good,
        base=LockedBase(ref="reg/base:1", digest="sha256:" + "1" * 64, platform="linux/amd64"),
        apt={"jq": "1.7-1", "wget": "1.21"},  # jq moved, curl gone, wget new
        build_apt={"te": {"cmake": "3.26.0-1"}, "dp": {"ninja": "1.11"}},
        downloads={"yq": LockedDownload(name="yq", url="https://x/yq", sha256="9" * 64, computed=True)},
        pip=(LockedPip(name="black", version="24.8.0", hashes=("sha256:3",)), LockedPip(name="attrs", version="23.1")),
        build_pip={},
        components={**good.components,
                    "te": replace(good.components["te"], commit=B, tree=C, branch_head=D),
                    "aa": LockedComponent(name="aa", repo="r2", commit=C, tree=C)},
        resolved_at="2025-02-02T00:00:00Z")


def test_every_unit_that_differs_is_one_change_in_the_fixed_order() -> None:
    labels = [c.label() for c in pin_changes(base_lock(), bad_lock())]
    assert labels == [
        f"base image: sha256:{'0' * 64} -> sha256:{'1' * 64}",
        f"component aa: (none) -> {C}",
        f"component te: {A} -> {B}",
        f"download yq: {'e' * 64} -> {'9' * 64}",
        "apt curl: 7.88.1-10 -> (none)",
        "apt jq: 1.6-2.1 -> 1.7-1",
        "apt wget: (none) -> 1.21",
        "build apt dp/ninja: (none) -> 1.11",
        "build apt te/cmake: 3.25.1-1 -> 3.26.0-1",
        "pip attrs: (none) -> 23.1",
        "pip black: 24.4.2 -> 24.8.0",
        "pip pyyaml: 6.0 (in base) -> (none)",
        "build pip te/nvidia-mathdx: 25.1.1 -> (none)",
    ]


def test_a_moved_branch_head_alone_is_no_pin_change_and_the_order_does_not_depend_on_dict_order() -> None:
    good = base_lock()
    moved = replace(good, components={"te": replace(good.components["te"], branch_head=B)}, resolved_at="x")
    assert pin_changes(good, moved) == []
    bad = bad_lock()
    shuffled = replace(bad, apt=dict(reversed(list(bad.apt.items()))),
                       components=dict(reversed(list(bad.components.items()))))
    assert pin_changes(good, shuffled) == pin_changes(good, bad)


def test_all_changes_applied_give_the_bad_lock_and_none_the_good_one() -> None:
    good, bad = base_lock(), bad_lock()
    changes = pin_changes(good, bad)
    assert apply(good, bad, changes).digest() == bad.digest()
    assert apply(good, bad, []).digest() == good.digest()


def test_applying_in_any_order_reaches_the_same_lock_and_each_prefix_differs_by_one_unit() -> None:
    good, bad = base_lock(), bad_lock()
    changes = pin_changes(good, bad)
    for perm in itertools.islice(itertools.permutations(changes), 50):
        assert apply(good, bad, list(perm)).digest() == bad.digest()
    for k in range(len(changes)):
        step = pin_changes(apply(good, bad, changes[:k]), apply(good, bad, changes[:k + 1]))
        assert step == [changes[k]]


def test_one_change_applied_touches_only_its_unit() -> None:
    good, bad = base_lock(), bad_lock()
    pip_black = next(c for c in pin_changes(good, bad) if c.label().startswith("pip black"))
    v = apply(good, bad, [pip_black])
    assert [p.version for p in v.pip] == ["24.8.0", "6.0"]  # in its place, the rest as it was
    assert v.apt == good.apt and v.components == good.components and v.base == good.base


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 100])
def test_the_bisection_finds_every_possible_first_bad_in_at_most_ceil_log2_n_verdicts(n: int) -> None:
    for first_bad in range(n):
        search = Bisection(n)
        verdicts = 0
        while (k := search.next()) is not None:
            search.record(k, k >= first_bad)
            verdicts += 1
        assert search.culprit == first_bad
        assert verdicts <= Bisection.most_steps(n)
    assert Bisection.most_steps(16) == 4


def test_the_bisection_asks_deterministically_and_refuses_verdicts_outside_its_range() -> None:
    search = Bisection(16)
    asked = []
    while (k := search.next()) is not None:
        asked.append(k)
        search.record(k, k >= 10)
    assert asked == [7, 11, 9, 10]
    fresh = Bisection(4)
    with pytest.raises(ValueError):
        fresh.record(3, True)  # the last is known bad already
    with pytest.raises(ValueError):
        _ = fresh.culprit  # not finished
    with pytest.raises(ValueError):
        Bisection(0)
