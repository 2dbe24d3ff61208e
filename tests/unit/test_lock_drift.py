"""The drift diff of `buildctl lock --check` and its rendering, on lock values alone."""

from __future__ import annotations

from dataclasses import replace

from buildctl.lock.drift import Drift, diff_variant, render_drift
from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedDownload, LockedPip, VariantLock
from tests.helpers import lchanges

A, B, C, D = "a" * 40, "b" * 40, "c" * 40, "d" * 40


def base_lock() -> VariantLock:
    return VariantLock(
        base=LockedBase(ref="reg/base:1", digest="sha256:" + "0" * 64, platform="linux/amd64"),
        apt={"jq": "1.6-2.1", "curl": "7.88.1-10"},
        build_apt={"te": {"cmake": "3.25.1-1"}},
        downloads={"yq": LockedDownload(name="yq", url="https://x/yq", sha256="e" * 64, computed=True)},
        pip=(LockedPip(name="black", version="24.4.2", hashes=("sha256:1",)),
             LockedPip(name="pyyaml", version="6.0", in_base=True)),
        build_pip={"te": (LockedPip(name="nvidia-mathdx", version="25.1.1", hashes=("sha256:2",)),)},
        components={"te": LockedComponent(name="te", repo="r", commit=A, changes=lchanges(prs={"1": B}, patches={"p.patch": "f" * 64}),
                                          submodules={"sub": C}, tree=D, branch_head=A)},
        resolved_at="2025-01-01T00:00:00Z",
    )


def messages(drift: list[Drift]) -> list[str]:
    return [d.message() for d in drift]


def test_identical_locks_do_not_drift_even_when_resolved_at_differs() -> None:
    old = base_lock()
    assert diff_variant("v", old, replace(old, resolved_at="2030-01-01T00:00:00Z")) == []


def test_every_kind_of_drift_is_named_with_old_and_new() -> None:
    old = base_lock()
    assert old.base is not None
    te = old.components["te"]
    new = replace(
        old,
        base=replace(old.base, digest="sha256:" + "9" * 64),
        apt={"jq": "1.6-2.1+deb12u1", "curl": "7.88.1-10", "gdb": "13.1-3"},
        build_apt={"te": {"cmake": "3.25.1-2"}},
        downloads={"yq": replace(old.downloads["yq"], sha256="5" * 64)},
        pip=(LockedPip(name="black", version="24.4.2", hashes=("sha256:1", "sha256:3")),
             LockedPip(name="pyyaml", version="6.0.1", hashes=("sha256:4",))),
        build_pip={"te": (LockedPip(name="nvidia-mathdx", version="25.1.2", hashes=("sha256:2",)),)},
        components={"te": replace(te, commit=B, changes=lchanges(prs={"1": C, "2": D}, patches={"p.patch": "0" * 64}),
                                  submodules={"sub": D}, branch_head=B)},
    )
    assert messages(diff_variant("cuda13", old, new)) == [
        f"cuda13: base image reg/base:1 moved: sha256:{'0' * 64} -> sha256:{'9' * 64}",
        f"cuda13: component te: the commit now resolves to {B}, the lock has {A}",
        f"cuda13: component te: branch moved: {A} -> {B}",
        f"cuda13: component te: PR #1 head changed: {B} -> {C}",
        f"cuda13: component te: PR #2 head changed: (none) -> {D}",
        f"cuda13: component te: patch p.patch: sha256 {'f' * 64} -> {'0' * 64}",
        f"cuda13: component te: submodule sub: {C} -> {D}",
        f"cuda13: download yq: https://x/yq sha256 {'e' * 64} -> https://x/yq sha256 {'5' * 64}",
        "cuda13: apt gdb: (none) -> 13.1-3",
        "cuda13: apt jq: 1.6-2.1 -> 1.6-2.1+deb12u1",
        "cuda13: component te build apt cmake: 3.25.1-1 -> 3.25.1-2",
        "cuda13: pip black==24.4.2: 1 file hash(es) -> 2 file hash(es) (+1 -0)",
        "cuda13: pip pyyaml: 6.0 (in base) -> 6.0.1",
        "cuda13: component te build pip nvidia-mathdx: 25.1.1 -> 25.1.2",
    ]


def test_tree_is_reported_only_when_nothing_else_explains_it() -> None:
    old = base_lock()
    te = old.components["te"]
    only_tree = replace(old, components={"te": replace(te, tree=A)})
    assert messages(diff_variant("v", old, only_tree)) == [f"v: component te after applying PRs and patches: {D} -> {A}"]
    with_pr = replace(old, components={"te": replace(te, tree=A, changes=lchanges(prs={"1": A}, patches={"p.patch": "f" * 64}))})
    assert messages(diff_variant("v", old, with_pr)) == [f"v: component te: PR #1 head changed: {B} -> {A}"]


def test_branch_head_is_drift_but_not_part_of_the_lock_digest() -> None:
    old = base_lock()
    moved = replace(old, components={"te": replace(old.components["te"], branch_head=C)})
    assert messages(diff_variant("v", old, moved)) == [f"v: component te: branch moved: {A} -> {C}"]
    assert old.digest() == moved.digest()  # nothing built changes when only the branch moved
    assert VariantLock.from_json(moved.to_json()) == moved


def test_base_reference_change_and_component_added() -> None:
    old = base_lock()
    assert old.base is not None
    new = replace(old, base=replace(old.base, ref="reg/base:2"),
                  components={**old.components, "hybridep": replace(old.components["te"], name="hybridep")})
    assert messages(diff_variant("v", old, new)) == [
        "v: base image reference moved: reg/base:1 -> reg/base:2",
        "v: component hybridep: (none) -> in the manifest",
    ]


def test_render_drift_exact_text() -> None:
    drift = [Drift(variant="", kind="manifest", subject="pins/demo.yaml", old="1" * 64, new="2" * 64),
             Drift(variant="default", kind="pr", subject="component tool: PR #7", old=A, new=B)]
    assert render_drift("pins/demo.lock.json", drift) == (
        "pins/demo.lock.json is out of date (2 difference(s)):\n"
        "  - the manifest pins/demo.yaml was edited since locking (sha256 111111111111 -> 222222222222)\n"
        f"  - default: component tool: PR #7 head changed: {A} -> {B}"
    )
