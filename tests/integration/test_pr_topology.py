"""PR application against a repository with the real topology (tests/pr_topology.py): PR branches that
merged their target at different points, PRs merged upstream by merge commit and by squash, PRs whose own
commit conflicts. Real git, local repositories.

Before issue 10 buildctl replayed each PR's first-parent history (merges of main picked with -m 1):
test_two_prs_that_merged_main_apply_as_their_own_commits_in_either_order and
test_the_lock_records_exactly_the_commits_applied fail there with "PR #20 does not apply ... conflicts in:
build.sh", as TE's #2146 + #2150 did on d2945c6; the reversed order applied but dragged main in (L5 c).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from buildctl.commands import lock as cmd_lock
from buildctl.errors import SourceError
from buildctl.lock import lockfile
from buildctl.lock.lockfile import LockedComponent, LockedPr, VariantLock
from buildctl.lock.resolve import resolve_component
from buildctl.manifest.model import Change, Component, PullRequest
from buildctl.sources.prepare import PrHead
from buildctl.sources.sources import Sources
from tests.pr_topology import Topology, make


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return make(tmp_path_factory.mktemp("topology") / "upstream.git")


def read(s: Sources, tree: str, url: str, name: str) -> str:
    return subprocess.run(["git", "--git-dir", str(s.mirror_path(url)), "show", f"{tree}:{name}"],
                          capture_output=True, text=True, check=True).stdout


def component(topo: Topology, commit: str, *changes: Change, branch: str | None = "main") -> Component:
    return Component(name="te", repo=str(topo.path), commit=commit, branch=branch, changes=changes, submodules=False)


def lock(topo: Topology, tmp_path: Path, c: Component, notes: list[str] | None = None) -> LockedComponent:
    return resolve_component(c, Sources(cache=tmp_path / "cache"), tmp_path, notes)


def pr(locked: LockedComponent, number: int) -> LockedPr:
    p = locked.pr(number)
    assert p is not None
    return p


def test_two_prs_that_merged_main_apply_as_their_own_commits_in_either_order(topo: Topology, tmp_path: Path) -> None:
    url = str(topo.path)
    s = Sources(cache=tmp_path / "cache")
    prs = [PrHead(number=10, head=topo.a_merge2), PrHead(number=20, head=topo.b_merge)]
    one = s.prepare(url, topo.m1, prs=prs)
    other = s.prepare(url, topo.m1, prs=list(reversed(prs)))
    for tree in (one.tree, other.tree):
        assert read(s, tree, url, "build.sh").splitlines()[4] == "L5 a"  # main's later commits are not dragged in
        assert read(s, tree, url, "cpu.py") == "FAST = 1\nCACHE = True\n"
        assert read(s, tree, url, "pdl.py") == "PDL = 1  # launch\n"
        assert read(s, tree, url, "grouped.py") == "WGRAD = 'dummy'\n"  # the base's own
    assert one.empty == () and other.empty == ()


def test_the_lock_records_exactly_the_commits_applied(topo: Topology, tmp_path: Path) -> None:
    c = Component(name="te", repo=str(topo.path), commit=topo.m1, branch="main", submodules=False,
                  prs=(PullRequest(number=10, head=topo.a_merge2[:10]), PullRequest(number=20)))
    locked = Sources(cache=tmp_path / "cache", base_dir=tmp_path).lock_component(c)
    assert locked.prs == {"10": topo.a_merge2, "20": topo.b_merge}
    p10, p20 = pr(locked, 10), pr(locked, 20)
    assert (p10.mode, p10.commits, p10.skipped_merges) == ("own-commits", (topo.a1, topo.a2),
                                                          (topo.a_merge1, topo.a_merge2))
    assert (p20.commits, p20.skipped_merges, p20.merged_upstream) == ((topo.b1, topo.b2), (topo.b_merge,), None)
    assert locked.dragged == () and locked.tree not in ("", topo.m1)
    assert VariantLock.from_json({"base": None, "missing": {"base": "x"}, "components": {"te": locked.to_json()}}
                                 ).components["te"] == locked


def test_the_guides_shape_a_release_tag_plus_a_cherry_pick_plus_two_prs(topo: Topology, tmp_path: Path) -> None:
    c = component(topo, topo.r1, Change(commit=topo.m1), Change(pr=10, head=topo.a_merge2), Change(pr=20),
                  branch="release_v1")
    locked = lock(topo, tmp_path, c)
    s = Sources(cache=tmp_path / "cache")
    url = str(topo.path)
    assert locked.picks == (topo.m1,) and pr(locked, 10).commits == (topo.a1, topo.a2)
    assert read(s, locked.tree, url, "VERSION.txt") == "1.0.0\n"
    assert read(s, locked.tree, url, "grouped.py") == "WGRAD = 'dummy'\n"
    assert read(s, locked.tree, url, "build.sh").splitlines()[4] == "L5 a"
    rows = cmd_lock.summary("v", VariantLock(base=None, components={"te": locked}))
    text = "\n".join(r[1] for r in rows)
    assert f"cherry-pick {topo.m1}" in text and "PR #10" in text and "2 own commit(s) picked, 2 merge(s) of main skipped" in text


def test_apply_merge_merges_the_head_and_names_what_it_drags_in(topo: Topology, tmp_path: Path) -> None:
    c = component(topo, topo.m1, Change(pr=20, head=topo.b_merge, apply="merge"))
    locked = lock(topo, tmp_path, c)
    p = pr(locked, 20)
    assert p.mode == "merge" and p.commits == (topo.b1, topo.b2)
    assert [(d.sha, d.subject, d.by) for d in locked.dragged] == [
        (topo.m2, "Build wheels for more CUDA versions (#2278)", "PR #20")]
    s = Sources(cache=tmp_path / "cache")
    assert read(s, locked.tree, str(topo.path), "build.sh").splitlines()[4] == "L5 b"
    rows = cmd_lock.summary("v", VariantLock(base=None, components={"te": locked}))
    assert any(f"dragged in by PR #20: {topo.m2[:12]} Build wheels" in r[1] for r in rows)


def test_a_pr_merged_upstream_by_a_merge_commit_is_applied_as_m1_to_m2(topo: Topology, tmp_path: Path) -> None:
    notes: list[str] = []
    locked = lock(topo, tmp_path, component(topo, topo.m1, Change(pr=40)), notes)
    p = pr(locked, 40)
    assert p.merged_upstream is not None and (p.merged_upstream.how, p.merged_upstream.commit) == ("merge", topo.m4)
    assert p.commits == (topo.c1, topo.c2) and p.empty == ()
    assert any(f"merge commit {topo.m4[:12]}" in n and "2 commit(s)" in n for n in notes)
    s = Sources(cache=tmp_path / "cache")
    assert read(s, locked.tree, str(topo.path), "feature2.py") == "PART = 2\n"


def test_a_pr_merged_upstream_by_squash_gives_empty_picks_and_says_so(topo: Topology, tmp_path: Path) -> None:
    notes: list[str] = []
    locked = lock(topo, tmp_path, component(topo, topo.m5, Change(pr=50)), notes)
    p = pr(locked, 50)
    assert p.commits == (topo.d1, topo.d2) and p.empty == (topo.d1, topo.d2)
    assert any("all of its 2 commit(s) changed nothing" in n and "squash" in n for n in notes)


def test_an_own_commit_that_conflicts_names_the_commit_what_it_collides_with_and_no_guessed_fix(
        topo: Topology, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        lock(topo, tmp_path, component(topo, topo.m3, Change(pr=60)))
    text = str(err.value)
    assert f"PR #60 does not apply to {topo.m3[:12]}" in text
    assert f'its commit {topo.e1[:12]} "change L5 another way" collides with the base {topo.m3[:12]} in: build.sh' in text
    assert "buildctl tried apply: merge for PR #60: none applies" in text
    assert "drop" not in text.lower()
    # against an earlier change: named as such; neither the other order nor a merge applies it
    with pytest.raises(SourceError) as err:
        lock(topo, tmp_path, component(topo, topo.m0, Change(pr=60), Change(pr=70)))
    text = str(err.value)
    assert "PR #70 does not apply" in text and "collides with PR #60 (applied before it) in: build.sh" in text
    assert "PR #70 before PR #60, apply: merge for PR #70: none applies" in text


def test_apply_merge_is_offered_only_when_it_works(topo: Topology, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        lock(topo, tmp_path, component(topo, topo.m3, Change(pr=70)))
    assert "this works (buildctl tried it): set apply: merge for PR #70" in str(err.value)
    locked = lock(topo, tmp_path, component(topo, topo.m3, Change(pr=70, apply="merge")))
    s = Sources(cache=tmp_path / "cache")
    assert read(s, locked.tree, str(topo.path), "build.sh").splitlines()[4] == "L5 k"
    assert [d.sha for d in locked.dragged] == []  # everything else its branch merged is in the base


def test_another_order_is_offered_when_it_works(topo: Topology, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        lock(topo, tmp_path, component(topo, topo.m1, Change(commit=topo.m3), Change(commit=topo.m2)))
    text = str(err.value)
    assert f"commit {topo.m3[:12]} does not apply to {topo.m1[:12]}" in text
    assert f"collides with the base {topo.m1[:12]} in: build.sh" in text
    assert f"this works (buildctl tried it): apply commit {topo.m3[:12]} after commit {topo.m2[:12]}" in text
    ok = lock(topo, tmp_path, component(topo, topo.m1, Change(commit=topo.m2), Change(commit=topo.m3)))
    assert ok.picks == (topo.m2, topo.m3)


TOPO_MANIFEST = """\
schema: 1
stack: topo
base: {{alias: test-base}}
variants:
  default: {{image: "127.0.0.1:9/none/base:1", platform: linux/amd64, cuda: "13"}}
components:
  te:
    repo: {repo}
    commit: {commit}
    branch: main
    submodules: false
    changes:
{changes}
"""


def project(tmp_path: Path, topo: Topology, commit: str, changes: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    proj = tmp_path / "project"
    (proj / "pins").mkdir(parents=True, exist_ok=True)
    if not (proj / "images").exists():
        (proj / "images").symlink_to(Path(__file__).resolve().parents[2] / "images")
    repo = os.path.relpath(topo.path, proj / "pins")  # manifests name local repositories relative to themselves
    (proj / "pins" / "topo.yaml").write_text(TOPO_MANIFEST.format(repo=repo, commit=commit, changes=changes))
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return proj


def test_partial_git_lock_plan_dry_run_and_refused_build(topo: Topology, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from buildctl import cli

    proj = project(tmp_path, topo, topo.m1, f"      - {{pr: 10, head: {topo.a_merge2}}}\n      - {{pr: 20}}\n",
                   monkeypatch)
    assert cli.main(["--project", str(proj), "lock", "topo", "--partial", "--only", "git", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["partial"]["default"]["base"] == "not asked (lock --only git)"
    assert cli.main(["--project", str(proj), "plan", "topo", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    wheel = next(n for n in plan["nodes"] if n["name"] == "wheel:te")
    assert wheel["own_inputs_locked"] and wheel["provisional"]
    assert wheel["waits_for"] == ["base: base 127.0.0.1:9/none/base:1 digest"]
    assert any("is partial (not locked: base)" in n for n in plan["notes"])
    assert cli.main(["--project", str(proj), "build", "topo", "--dry-run", "--out", str(tmp_path / "dry")]) == 0
    assert "source te: prepared " in capsys.readouterr().out
    assert cli.main(["--project", str(proj), "build", "topo"]) == 4
    err = capsys.readouterr().err
    assert "partial lock (missing: base)" in err and "not asked" in err


def test_dry_run_shows_a_change_that_does_not_apply_before_anything_is_built(
        topo: Topology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from buildctl import cli

    proj = project(tmp_path, topo, topo.m3, f"      - {{pr: 60, head: {topo.e1}}}\n", monkeypatch)
    lock = {"schema": 2, "stack": "topo", "manifest_sha256": hashlib.sha256((proj / "pins" / "topo.yaml").read_bytes()).hexdigest(),
            "variants": {"default": {
                "base": {"ref": "127.0.0.1:9/none/base:1", "digest": "sha256:" + "0" * 64, "platform": "linux/amd64"},
                "components": {"te": {"repo": os.path.relpath(topo.path, proj / "pins"), "base": topo.m3, "tree": "f" * 40, "changes": [
                    {"kind": "pr", "number": 60, "head": topo.e1, "mode": "own-commits", "commits": [topo.e1]}]}}}}}
    lockfile.write_data(proj / "pins" / "topo.lock.json", lock)
    assert cli.main(["--project", str(proj), "build", "topo", "--dry-run", "--out", str(tmp_path / "dry")]) == 7
    err = capsys.readouterr().err
    assert f"PR #60 does not apply to {topo.m3[:12]}" in err and "in: build.sh" in err
    assert not (tmp_path / "dry").exists()  # stopped before rendering anything
