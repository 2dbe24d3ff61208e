"""What the compiler-cache runs on the H200 gave (tests/data/gpu/h200-cache/, 2026-12-04 and 2026-12-06).

buildctl's rendered wheel script of deepseek-v3-gb200 / hopper / transformer-engine ran on the device tool's
H200 run after run with one ccache folder kept (job.sh); results.json is summarize.py's reading of the
lines the device returned (lease1/ - lease7/ results.jsonl). These tests hold results.json to those
lines and to itself: the runs that were asked for are there, every ratio comes from the recorded seconds, the
hits and misses add up. Leases 3, 4, 5 and 7 (the script rendered after 1616287, the machine's CC/CXX as they are)
are held to issue 34's done-when targets, from the raw lines; leases 4 and 5's breakdowns are summarize.py's
reading of their stamped logs. They read the figures; none is written here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "gpu" / "h200-cache"
RESULTS: dict[str, Any] = json.loads((DATA / "results.json").read_text())
TREES: dict[str, Any] = json.loads((DATA / "trees.json").read_text())


def runs(lease: str) -> dict[str, dict[str, Any]]:
    return {r["run"]: r for r in RESULTS["leases"][lease]["runs"]}


def raw(lease: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(x) for x in (DATA / lease / "results.jsonl").read_text().splitlines() if x.strip()]
    return {x["run"]: x for x in lines if "run" in x}


def facts(lease: str) -> dict[str, str]:
    lines = [json.loads(x) for x in (DATA / lease / "results.jsonl").read_text().splitlines() if x.strip()]
    return {x["fact"]: x["value"] for x in lines if "fact" in x}


def test_the_four_ccache_runs_are_there_in_order_each_on_its_tree_with_a_wheel() -> None:
    for lease in ("lease1", "lease3"):
        ccache = [r for r in RESULTS["leases"][lease]["runs"] if r["cache"] == "ccache"]
        assert [(r["run"], r["tree"]) for r in ccache] == [
            ("c1-cold", "A"), ("c2-pyonly", "B"), ("c3-onefile", "C"), ("c4-no2150", "D")], lease
    assert [r["cache"] for r in RESULTS["leases"]["lease3"]["runs"]] == ["ccache"] * 4
    for lease in RESULTS["leases"]:
        for r in runs(lease).values():
            short = RESULTS["trees"][r["tree"]]["short"]
            assert r["rc"] == 0 and r["seconds"] > 0, r["run"]
            # the wheel is the one of that run's tree: TE's version suffix is the tree's commit
            assert r["wheel"].startswith(f"transformer_engine-2.9.0+{short}-"), (r["run"], r["wheel"])


def test_results_json_is_what_the_device_returned() -> None:
    for lease in RESULTS["leases"]:
        back = raw(lease)
        assert list(back) == list(runs(lease)), lease
        for name, r in runs(lease).items():
            b = back[name]
            for key in ("tree", "cache", "rc", "seconds", "jobs", "wheel", "wheel_sha256", "command"):
                assert r[key] == b[key], (lease, name, key)
            if r["cache"] == "ccache":
                s = b["ccache_print_stats"]
                assert r["hits"] == s["direct_cache_hit"] + s["preprocessed_cache_hit"], name
                assert r["misses"] == s["cache_miss"], name
            else:
                st = b["sccache_stats"]["stats"]
                assert r["hits"] == sum(st["cache_hits"]["counts"].values()), name
                assert r["misses"] == sum(st["cache_misses"]["counts"].values()), name


def test_hits_and_misses_add_up() -> None:
    for lease in RESULTS["leases"]:
        rs = list(runs(lease).values())
        for cache in ("ccache", "sccache"):
            mine = [r for r in rs if r["cache"] == cache]
            if not mine:
                continue
            # every run of one tool compiles the same units: what one run misses, another hits
            assert len({r["hits"] + r["misses"] for r in mine}) == 1, (lease, cache, [(r["hits"], r["misses"]) for r in mine])
            assert mine[0]["run"].endswith("-cold") and mine[0]["hits"] <= mine[0]["misses"], (lease, cache)
        for r in rs:
            if r["cache"] != "ccache":
                continue
            s = r["ccache_stats"]
            # ccache's own two ledgers agree, and the script's per-compile log says what the outside counters say
            assert s.get("local_storage_hit", 0) == r["hits"] and s.get("local_storage_miss", 0) == r["misses"], r["run"]
            assert r["script_stats"]["hits"] == r["hits"] and r["script_stats"]["misses"] == r["misses"], r["run"]
    one = runs("lease1")
    # an unchanged tree but for .py files recompiles less than a tree with one more changed unit
    assert one["c3-onefile"]["misses"] > one["c2-pyonly"]["misses"]
    assert one["c1-cold"]["hits"] == 0 and runs("lease2")["r1-cold"]["hits"] == 0


def test_every_ratio_comes_from_the_recorded_seconds() -> None:
    assert RESULTS["comparisons"]
    for c in RESULTS["comparisons"]:
        by = runs(c["lease"])
        # a base is one run or, in lease 4, the mean of its two cold runs
        assert c["base_runs"] == ([c["base"]] if not c["base"].startswith("mean(") else c["base"][5:-1].split(", ")), c
        base = sum(by[b]["seconds"] for b in c["base_runs"]) / len(c["base_runs"])
        run = by[c["run"]]["seconds"]
        want = round(base / run, 2) if c["kind"] == "speedup" else round(run / base, 2)
        assert c["value"] == want, c
        if c["target"] is None:
            assert c["met"] is None, c
        else:
            assert c["met"] == (want >= c["target"] if c["kind"] == "speedup" else want <= c["target"]), c
    readme = (DATA / "README.md").read_text()
    for c in RESULTS["comparisons"]:
        assert f"{c['value']:.2f}" in readme, f"README.md lacks {c['name']}: {c['value']:.2f}"


def test_the_script_that_ran_is_buildctls_rendered_one_and_the_trees_are_the_named_ones() -> None:
    script = (DATA / RESULTS["script"]["file"]).read_text()
    assert hashlib.sha256(script.encode()).hexdigest() == RESULTS["script"]["sha256"] == TREES["wheel_script_sha256"]
    assert "/buildctl/tools/ccache" in script and "pip wheel --no-build-isolation" in script
    # lease 3 ran the script rendered after 1616287, which routes a CC/CXX set to a path through ccache; the
    # device's own sha256 of what it ran is that file's, and its trees are leases 1-2's
    own = RESULTS["leases"]["lease3"]["script"]
    script3 = (DATA / own["file"]).read_text()
    trees3 = json.loads((DATA / own["trees"]).read_text())
    sha3 = hashlib.sha256(script3.encode()).hexdigest()
    assert sha3 == own["sha256"] == trees3["wheel_script_sha256"] == facts("lease3")["wheel_script_sha256"]
    assert sha3 != RESULTS["script"]["sha256"]
    assert "for v in CC CXX; do" in script3 and 'PATH="/tmp/buildctl-ccache:$first$PATH"' in script3
    assert "for v in CC CXX; do" not in script
    for name, tree in trees3["trees"].items():
        assert (tree["commit"], tree["digest"]) == (TREES["trees"][name]["commit"], TREES["trees"][name]["digest"]), name
    for lease in RESULTS["leases"]:
        for r in runs(lease).values():
            tools = "/tmp/h200cache/tools' /buildctl/tools" if r["cache"] == "ccache" else "/tmp/h200cache/notools' /buildctl/tools"
            assert tools in r["command"] and f"src-{r['tree']}' /src" in r["command"], r["run"]
    t = TREES["trees"]
    assert all(p.endswith(".py") or p.startswith(".git/") for p in t["B"]["changed_vs_A"])  # #2286: Python only
    assert "commit dd7ab715a55d" not in t["A"]["changes"] and "commit dd7ab715a55d" in t["B"]["changes"]
    assert "PR #2150" in t["B"]["changes"] and "PR #2150" not in t["D"]["changes"]
    assert RESULTS["trees"]["C"]["from"] == t["B"]["commit"] and RESULTS["trees"]["C"]["file"].endswith(".cu")


def test_lease3_ran_with_the_machines_cc_and_cxx_and_every_unit_went_through_ccache() -> None:
    env = facts("lease3")["env_compilers"]
    assert "CC=/opt/gcc/bin/gcc " in env and "CXX=/opt/gcc/bin/g++ " in env, env
    assert "UNSET_CC_CXX" not in " ".join(RESULTS["leases"]["lease3"]["calls"])
    # torch's extension C++ units included: as many units as with CC/CXX unset (lease 2), where lease 1's
    # CC/CXX left 28 of them outside the cache
    three = runs("lease3")
    units = {r["hits"] + r["misses"] for r in three.values()}
    two = runs("lease2")["r1-cold"]
    assert units == {two["hits"] + two["misses"]}, units
    assert runs("lease1")["c1-cold"]["misses"] not in units


# Issue 34's done-when: from buildctl's own compile script, TE after a Python-only change and after a one-file
# source change each at least 10x faster than cold; after #2150 no more than 5% slower than cold. Each ratio is
# computed from the raw lines lease 3 returned and held against the target; what results.json (and the README
# tables made from it) says of it, its value and whether it is met, must be what the raw lines give. Lease 3 met
# the first (12.57x) and missed the other two (one-file 9.54x; without #2150 1.14 of the cold time): the issue
# stays open on them, and this test keeps the record of it honest rather than passing a target it missed.
LEASE3_MET = {"c2-pyonly": True, "c3-onefile": False, "c4-no2150": False}


@pytest.mark.parametrize(("run", "kind", "target"), [
    ("c2-pyonly", "speedup", 10.0),
    ("c3-onefile", "speedup", 10.0),
    ("c4-no2150", "slowdown", 1.05),
])
def test_lease3_against_issue_34s_targets(run: str, kind: str, target: float) -> None:
    back = raw("lease3")
    cold, secs = back["c1-cold"]["seconds"], back[run]["seconds"]
    recorded = next(c for c in RESULTS["comparisons"] if c["lease"] == "lease3" and c["run"] == run)
    assert (recorded["base"], recorded["kind"], recorded["target"]) == ("c1-cold", kind, target)
    value = cold / secs if kind == "speedup" else secs / cold
    met = value >= target if kind == "speedup" else value <= target
    assert recorded["value"] == round(value, 2), (run, value)
    assert recorded["met"] is met, f"{run}: {value:.2f} against {target}: results.json says met={recorded['met']}"
    assert met is LEASE3_MET[run], f"{run}: {value:.2f} against {target}; the README and the closing note say otherwise"


# Lease 4 (2026-12-06): c1-c4 as lease 3, then c5-cold2 (tree A again, a new empty ccache folder), so that the
# tree without #2150 sits between two cold runs. Each target is computed from the raw lines against c1, against
# c5 and against the mean of the two cold runs; results.json and the README must say what those give. Lease 4
# met all three against each base (py-only 13.57x / 14.15x / 13.86x, one-file 10.58x / 11.03x / 10.80x, without
# #2150 1.00 / 0.96 / 0.98 of the cold time); the one-file run is just over the line against c1.
LEASE4_BASES = ("c1-cold", "c5-cold2", "mean(c1-cold, c5-cold2)")
LEASE4_MET: dict[tuple[str, str], bool] = {
    (run, base): True for run in ("c2-pyonly", "c3-onefile", "c4-no2150") for base in LEASE4_BASES}
LEASE4_FOLDERS = {"c1-cold": "ccache", "c2-pyonly": "ccache", "c3-onefile": "ccache", "c4-no2150": "ccache",
                  "c5-cold2": "ccache2"}
TARGETS = {"c2-pyonly": ("speedup", 10.0), "c3-onefile": ("speedup", 10.0), "c4-no2150": ("slowdown", 1.05)}


def test_lease4_runs_are_there_in_order_each_on_its_tree_and_folder() -> None:
    four = runs("lease4")
    names = list(four)
    assert names == ["c1-cold", "c2-pyonly", "c3-onefile", "c4-no2150", "c5-cold2"], names
    trees = {"c1-cold": "A", "c2-pyonly": "B", "c3-onefile": "C", "c4-no2150": "D", "c5-cold2": "A"}
    for name, r in four.items():
        assert r["tree"] == trees[name] and r["cache"] == "ccache", name
        assert f"'/tmp/h200cache/{LEASE4_FOLDERS[name]}' /ccache" in r["command"], name
        # every line of the run's log went through job.sh's stamping reader
        assert 'python3 -c "$STAMP"' in r["command"], name
    # both cold runs start from an empty folder: nothing to hit
    assert four["c1-cold"]["hits"] == 0 and four["c5-cold2"]["hits"] == 0
    assert four["c1-cold"]["misses"] == four["c5-cold2"]["misses"]
    # the same wheel (name: version and tree) from the same tree, whichever folder; its bytes differ (the zip's times)
    assert four["c5-cold2"]["wheel"] == four["c1-cold"]["wheel"]
    env = facts("lease4")["env_compilers"]
    assert "CC=/opt/gcc/bin/gcc " in env and "CXX=/opt/gcc/bin/g++ " in env, env
    own = RESULTS["leases"]["lease4"]["script"]
    assert facts("lease4")["wheel_script_sha256"] == own["sha256"] == RESULTS["leases"]["lease3"]["script"]["sha256"]


@pytest.mark.parametrize(("run", "base"), [(run, base) for run in TARGETS for base in LEASE4_BASES])
def test_lease4_against_issue_34s_targets(run: str, base: str) -> None:
    check_target("lease4", run, base, TARGETS[run], LEASE4_MET[(run, base)])


def check_target(lease: str, run: str, base: str, kind_target: tuple[str, float], expected: bool) -> None:
    """``run`` against ``base`` (a run, or ``mean(a, b)``) of ``lease``, from the raw lines: results.json records
    that value and verdict, the verdict is ``expected``, and the README's table of the lease has that figure with
    that verdict on the row of that run and base."""
    back = raw(lease)
    kind, target = kind_target
    bases = base[5:-1].split(", ") if base.startswith("mean(") else [base]
    cold, secs = sum(back[b]["seconds"] for b in bases) / len(bases), back[run]["seconds"]
    value = cold / secs if kind == "speedup" else secs / cold
    met = value >= target if kind == "speedup" else value <= target
    recorded = next(c for c in RESULTS["comparisons"] if c["lease"] == lease and c["run"] == run and c["base"] == base)
    assert (recorded["kind"], recorded["target"], recorded["base_runs"]) == (kind, target, bases)
    assert recorded["value"] == round(value, 2), (run, base, value)
    assert recorded["met"] is met, f"{run} against {base}: {value:.2f}, results.json says met={recorded['met']}"
    assert met is expected, f"{run} against {base}: {value:.2f}; the README says otherwise"
    readme = (DATA / "README.md").read_text()
    verdict = "met" if met else "**not met**"
    row = f"| {lease.removeprefix('lease')} | {run} | {base} | {value:.2f}"
    assert any(line.startswith(row) and line.rstrip(" |").endswith(verdict) for line in readme.splitlines()), row


def load_summarize() -> Any:
    """summarize.py (beside the data, not a package) as a module."""
    return load_script("h200_cache_summarize", DATA / "summarize.py")


def check_phases(lease: str, markers: str = "PHASE_MARKERS", reader: str | None = None) -> None:
    """results.json's breakdown of ``lease`` is summarize.lease_phases of its runs (``reader``: summarize's reader
    of the logs, when not the default), and each run's phases are the markers' in order, start in order, none
    negative, and add up to the run's seconds."""
    summarize = load_summarize()
    lease_res = RESULTS["leases"][lease]
    extra = (getattr(summarize, reader),) if reader else ()
    assert lease_res["phases"] == summarize.lease_phases(lease, lease_res["runs"], *extra)
    for name, r in runs(lease).items():
        ph = lease_res["phases"][name]["phases"]
        assert [p[0] for p in ph] == [m[0] for m in getattr(summarize, markers)], name
        assert all(p[2] >= 0 for p in ph) and [p[1] for p in ph] == sorted(p[1] for p in ph), name
        assert abs(sum(p[2] for p in ph) - r["seconds"]) < 0.1 * len(ph), name


def test_lease4_breakdown_is_the_stamped_logs_reading_and_adds_up() -> None:
    check_phases("lease4")


# Lease 5 (2026-12-06, an H100 of the same image): a second pair of warm runs on a second cold cache. c1-cold,
# c2-pyonly, c3-onefile on folder 1; c5-cold2 (tree A, a new empty folder), c6-pyonly2, c7-onefile2 on folder 2;
# then c4-no2150 on folder 1. Each warm run is held to its target against its own folder's cold run, the other
# cold run and the mean of the two; c4 against c1, c5 and the mean. Lease 5 met both warm targets in both pairs
# against every base (py-only 13.94x-14.73x; one-file 10.36x-11.54x, c3 against c1 the thinnest at 10.36x) and
# MISSED the #2150 target against every base: c4-no2150 took 356.8 s, 1.23 / 1.18 / 1.20 of the cold time (target
# <= 1.05), as lease 3 missed it (1.14) and lease 4 met it (0.96-1.00). The README says so; this test keeps the
# record of the miss rather than passing a target the lease did not meet.
LEASE5_MEAN = "mean(c1-cold, c5-cold2)"
LEASE5_BASES = {"c2-pyonly": ("c1-cold", "c5-cold2", LEASE5_MEAN), "c3-onefile": ("c1-cold", "c5-cold2", LEASE5_MEAN),
                "c6-pyonly2": ("c5-cold2", "c1-cold", LEASE5_MEAN), "c7-onefile2": ("c5-cold2", "c1-cold", LEASE5_MEAN),
                "c4-no2150": ("c1-cold", "c5-cold2", LEASE5_MEAN)}
LEASE5_TARGETS = {**TARGETS, "c6-pyonly2": TARGETS["c2-pyonly"], "c7-onefile2": TARGETS["c3-onefile"]}
LEASE5_MET: dict[tuple[str, str], bool] = {
    (run, base): run != "c4-no2150" for run, bases in LEASE5_BASES.items() for base in bases}
LEASE5_ORDER = [("c1-cold", "A", "ccache"), ("c2-pyonly", "B", "ccache"), ("c3-onefile", "C", "ccache"),
                ("c5-cold2", "A", "ccache2"), ("c6-pyonly2", "B", "ccache2"), ("c7-onefile2", "C", "ccache2"),
                ("c4-no2150", "D", "ccache")]


def test_lease5_runs_are_there_in_order_each_on_its_tree_and_folder() -> None:
    five = runs("lease5")
    assert [(n, r["tree"]) for n, r in five.items()] == [(n, t) for n, t, _ in LEASE5_ORDER]
    for name, _tree, folder in LEASE5_ORDER:
        r = five[name]
        assert r["cache"] == "ccache" and f"'/tmp/h200cache/{folder}' /ccache" in r["command"], name
        assert 'python3 -c "$STAMP"' in r["command"], name
    # both cold runs start from an empty folder; each warm pair hits and misses as the other one does
    assert five["c1-cold"]["hits"] == five["c5-cold2"]["hits"] == 0
    assert five["c1-cold"]["misses"] == five["c5-cold2"]["misses"]
    for a, b in (("c2-pyonly", "c6-pyonly2"), ("c3-onefile", "c7-onefile2")):
        assert (five[a]["hits"], five[a]["misses"], five[a]["wheel"]) == (five[b]["hits"], five[b]["misses"], five[b]["wheel"])
    # the one-file change misses one unit more than the Python-only change, on either folder
    assert five["c3-onefile"]["misses"] == five["c2-pyonly"]["misses"] + 1
    env = facts("lease5")["env_compilers"]
    assert "CC=/opt/gcc/bin/gcc " in env and "CXX=/opt/gcc/bin/g++ " in env and "PIP_VERBOSE=<unset>" in env, env
    assert "NVIDIA H100" in facts("lease5")["machine"]
    own = RESULTS["leases"]["lease5"]["script"]
    assert facts("lease5")["wheel_script_sha256"] == own["sha256"] == RESULTS["leases"]["lease3"]["script"]["sha256"]


@pytest.mark.parametrize(("run", "base"), [(run, base) for run, bases in LEASE5_BASES.items() for base in bases])
def test_lease5_against_issue_34s_targets(run: str, base: str) -> None:
    check_target("lease5", run, base, LEASE5_TARGETS[run], LEASE5_MET[(run, base)])


def test_lease5_breakdown_is_the_stamped_logs_reading_and_adds_up() -> None:
    check_phases("lease5", "COARSE_MARKERS", "coarse_phases")


# Lease 6 (2026-12-06, an H100 of the same image): tree A, then tree D (the lock without #2150), each cold on a new
# empty folder of its own, PIP_VERBOSE=1. No target of the issue's: it tells whether tree D is itself slower to
# compile than tree A, which every c4-against-c1 figure of leases 1-5 folds into the cache's cost. It is not:
# 214.4 s against 214.5 s, phase by phase alike.
def test_lease6_compiles_tree_d_cold_as_fast_as_tree_a_cold() -> None:
    six = runs("lease6")
    assert [(n, r["tree"]) for n, r in six.items()] == [("a-cold", "A"), ("d-cold", "D")]
    back = raw("lease6")
    for name, folder in (("a-cold", "ccacheA"), ("d-cold", "ccacheD")):
        r = six[name]
        assert (r["hits"], r["misses"]) == (0, 97) and f"'/tmp/h200cache/{folder}' /ccache" in r["command"], name
        assert r["seconds"] == back[name]["seconds"]
    env = facts("lease6")["env_compilers"]
    assert "CC=/opt/gcc/bin/gcc " in env and "PIP_VERBOSE=1" in env, env
    assert facts("lease6")["wheel_script_sha256"] == RESULTS["leases"]["lease3"]["script"]["sha256"]
    [cmp] = [c for c in RESULTS["comparisons"] if c["lease"] == "lease6"]
    ratio = back["d-cold"]["seconds"] / back["a-cold"]["seconds"]
    assert (cmp["run"], cmp["base"], cmp["value"], cmp["met"]) == ("d-cold", "a-cold", round(ratio, 2), None)
    assert abs(ratio - 1) < 0.05, ratio  # what the README says of it: the trees compile alike cold
    # phase by phase (the stamped PIP_VERBOSE logs): the two compiles' CMake and torch-extension parts alike
    summarize = load_summarize()
    assert RESULTS["leases"]["lease6"]["phases"] == summarize.lease_phases("lease6", list(six.values()))
    ph = {n: dict((p[0], p[2]) for p in RESULTS["leases"]["lease6"]["phases"][n]["phases"]) for n in six}
    for phase in ("ninja (libtransformer_engine, CMake)", "torch extension units (ninja)"):
        assert abs(ph["d-cold"][phase] / ph["a-cold"][phase] - 1) < 0.05, phase
    readme = (DATA / "README.md").read_text()
    assert "| 6 | d-cold (empty, its own folder) | D | 214.4 | 0 / 97 |" in readme


# Lease 7 (2026-12-06, an H100 of the same image): a-cold (tree A, new folder ccacheA), d-onA (tree D on ccacheA: the
# issue's case, c4 of leases 1-5), d-cold (tree D, new folder ccacheD), a-cold2 (tree A, new folder ccacheA2),
# PIP_VERBOSE=1. d-onA against a-cold, a-cold2 and their mean is held to the #2150 target (<= 1.05): lease 7 MET it
# against every base (365.7 s: 0.98 / 0.96 / 0.97), with the same cache work as lease 5's missed c4 (4 / 93, 95
# manifest or result reads found). d-onA against d-cold (0.88) and d-cold against A's mean (1.10) have no target:
# they say the lookup on a miss cost nothing these runs resolve, and that one cold run drifted 10% with no cache
# entry to look up. The expected verdicts are the recorded ones; a lease that misses says so (as lease 5's c4 does).
LEASE7_MEAN = "mean(a-cold, a-cold2)"
LEASE7_ORDER = [("a-cold", "A", "ccacheA"), ("d-onA", "D", "ccacheA"), ("d-cold", "D", "ccacheD"),
                ("a-cold2", "A", "ccacheA2")]
LEASE7_MET = {"a-cold": True, "a-cold2": True, LEASE7_MEAN: True}


def test_lease7_runs_are_there_in_order_each_on_its_tree_and_folder() -> None:
    seven = runs("lease7")
    assert [(n, r["tree"]) for n, r in seven.items()] == [(n, t) for n, t, _ in LEASE7_ORDER]
    back = raw("lease7")
    for name, _tree, folder in LEASE7_ORDER:
        r = seven[name]
        assert r["cache"] == "ccache" and f"'/tmp/h200cache/{folder}' /ccache" in r["command"], name
        assert 'python3 -c "$STAMP"' in r["command"], name
        assert r["seconds"] == back[name]["seconds"], name
    for name in ("a-cold", "d-cold", "a-cold2"):
        assert (seven[name]["hits"], seven[name]["misses"]) == (0, 97), name
    # tree D on A's folder does the cache work of lease 5's c4, to the count: what lease 5 paid for, this lease paid
    five, mine = raw("lease5")["c4-no2150"]["ccache_print_stats"], back["d-onA"]["ccache_print_stats"]
    for key in ("direct_cache_hit", "cache_miss", "preprocessed_cache_miss", "local_storage_read_hit",
                "local_storage_read_miss", "local_storage_write"):
        assert mine.get(key, 0) == five.get(key, 0), key
    assert (seven["d-onA"]["hits"], seven["d-onA"]["misses"]) == (4, 93)
    assert seven["d-onA"]["wheel"] == seven["d-cold"]["wheel"] and seven["a-cold"]["wheel"] == seven["a-cold2"]["wheel"]
    env = facts("lease7")["env_compilers"]
    assert "CC=/opt/gcc/bin/gcc " in env and "PIP_VERBOSE=1" in env, env
    assert "NVIDIA H100" in facts("lease7")["machine"]
    own = RESULTS["leases"]["lease7"]["script"]
    assert facts("lease7")["wheel_script_sha256"] == own["sha256"] == RESULTS["leases"]["lease3"]["script"]["sha256"]


@pytest.mark.parametrize("base", list(LEASE7_MET))
def test_lease7_against_issue_34s_target(base: str) -> None:
    check_target("lease7", "d-onA", base, TARGETS["c4-no2150"], LEASE7_MET[base])


def test_lease7_comparisons_without_target_and_breakdown() -> None:
    back = raw("lease7")
    mean_a = (back["a-cold"]["seconds"] + back["a-cold2"]["seconds"]) / 2
    free = {(c["run"], c["base"]): c for c in RESULTS["comparisons"] if c["lease"] == "lease7" and c["target"] is None}
    assert set(free) == {("d-onA", "d-cold"), ("d-cold", LEASE7_MEAN)}
    assert free["d-onA", "d-cold"]["value"] == round(back["d-onA"]["seconds"] / back["d-cold"]["seconds"], 2)
    assert free["d-cold", LEASE7_MEAN]["value"] == round(back["d-cold"]["seconds"] / mean_a, 2)
    readme = (DATA / "README.md").read_text()
    for (run, base), c in free.items():
        row = f"| 7 | {run} | {base} | {c['value']:.2f}"
        assert any(line.startswith(row) and line.rstrip(" |").endswith("no target") for line in readme.splitlines()), row
    section = readme.split("\n## Lease 7\n", 1)[1].split("\n## ", 1)[0].splitlines()
    check_phases("lease7")
    seven = RESULTS["leases"]["lease7"]
    # the README's breakdown rows are these figures, in the runs' order
    by = {n: {p[0]: p[2] for p in seven["phases"][n]["phases"]} for n in runs("lease7")}
    for phase in ("CMake configure", "ninja (libtransformer_engine, CMake)", "torch extension units (ninja)"):
        row = f"| {phase} | " + " | ".join(str(by[n][phase]) for n, _, _ in LEASE7_ORDER) + " |"
        assert row in section, row
