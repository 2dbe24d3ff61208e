"""Host: results.json from what the seven device leases brought back (lease1/ - lease7/: job.sh's
results.jsonl, job.log, tails.txt, logs.tar.gz as poll.sh left them in $OUT), trees.json (prepare_cache.py)
and the rendered script that each lease ran (leases 1-2: wheel-transformer-engine.sh here; lease 3, rendered
after 1616287: lease3/wheel-transformer-engine.sh with its own lease3/trees.json; leases 4 and 5 the same file,
each with its own trees.json). tests/unit/test_h200_cache.py reads results.json and checks it against the raw lines.
Lease 4's logs carry each line's seconds since its run began (job.sh's "+12.3s "): `phases` below reads them
out of lease4/logs.tar.gz into each run's breakdown (pip metadata, build_py, CMake configure, ninja, torch's
extension and link, install and zip); leases 6 and 7's (PIP_VERBOSE=1) the same way. Lease 5 ran without PIP_VERBOSE, so its logs hold pip's own lines alone:
`coarse_phases` cuts them into pip's start and metadata, the wheel's build (setup.py: configure, both compiles,
install and zip together) and pip's end.

    python3 tests/data/gpu/h200-cache/summarize.py      (writes tests/data/gpu/h200-cache/results.json)

Hits and misses: ccache's own counters of the run (`ccache --print-stats`, zeroed before it): hits =
direct_cache_hit + preprocessed_cache_hit, misses = cache_miss (each a compiler call that ccache could cache:
one translation unit). sccache counts each nvcc stage (nvcc, cudafe++, cicc, ptxas) as a request of its own;
its figures are kept as it gives them.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TAIL_LINES = 12

LEASE3_CALLS = [
    "env | grep -E '^(CC|CXX|CUDAHOSTCXX|CUDACXX)=' ; RUNS='c1-cold:A:ccache c2-pyonly:B:ccache "
    "c3-onefile:C:ccache c4-no2150:D:ccache' PIP_VERBOSE=1 WAIT_S=565 bash .devcarry/gcache/start.sh",
    "WAIT_S=330 bash .devcarry/gcache/poll.sh",
]
# device time that lease 3 took from the session (1334 s left before its first call, 526 s after the
# give-back); four earlier calls got no machine and took 466 s more (README.md here)
LEASE3_HELD_S = 808

LEASE4_CALLS = [
    "RUNS='c1-cold:A:ccache c2-pyonly:B:ccache c3-onefile:C:ccache c4-no2150:D:ccache "
    "c5-cold2:A:ccache:ccache2' PIP_VERBOSE=1 WAIT_S=520 bash .devcarry/gcache/start.sh",
    "WAIT_S=330 bash .devcarry/gcache/poll.sh",
]
# device time that lease 4 took (its two calls: 520.9 s and 240.7 s of wall, with the machine's start and the
# give-back 796 s; 373 s left after it); four earlier calls that session got no machine and took 631 s more
LEASE4_HELD_S = 796

LEASE5_CALLS = [
    "RUNS='c1-cold:A:ccache c2-pyonly:B:ccache c3-onefile:C:ccache c5-cold2:A:ccache:ccache2 "
    "c6-pyonly2:B:ccache:ccache2 c7-onefile2:C:ccache:ccache2 c4-no2150:D:ccache' WAIT_S=540 "
    "bash .devcarry/gcache/start.sh",
    "WAIT_S=540 bash .devcarry/gcache/poll.sh",
]
# device time that lease 5 took (its two calls: 541.1 s and 521.0 s of wall; held 582.8 s after the first,
# 1108.5 s after the second; 1800 s left before the first call, 688 s after the give-back); no failed calls
LEASE5_HELD_S = 1112
# Lease 6: trees A and D each cold on a new, empty folder of its own, one after the other on one machine: is tree D
# (the lock without #2150) itself slower to compile than tree A, with no cache entry to look up?
LEASE6_CALLS = [
    "export PIP_VERBOSE=1 RUNS='a-cold:A:ccache:ccacheA d-cold:D:ccache:ccacheD'; WAIT_S=555 "
    "bash .devcarry/gcache/start.sh",
]
# device time that lease 6 took: one call of 440.8 s of wall (the job done within it); held 1578.9 s of the
# session after it against 1108.5 s after lease 5 (470 s, the machine's start included), 214 s left after the
# give-back; no failed calls
LEASE6_HELD_S = 474
# Lease 7: tree D on the folder that tree A's cold run filled (the case), with tree D cold and a second tree A
# cold on new folders of their own, one machine: does tree D on A's folder pay for the cache's lookup on a miss?
LEASE7_CALLS = [
    "export PIP_VERBOSE=1 RUNS='a-cold:A:ccache:ccacheA d-onA:D:ccache:ccacheA d-cold:D:ccache:ccacheD "
    "a-cold2:A:ccache:ccacheA2'; WAIT_S=555 bash .devcarry/gcache/start.sh",
    "WAIT_S=540 bash .devcarry/gcache/poll.sh",
    "WAIT_S=580 bash .devcarry/gcache/poll.sh",
]
# device time that lease 7 took (a session of its own, 1800 s before the first call): three calls of 561.3 s,
# 541.2 s and 441.1 s of wall (the third found the job done); held 588.0 s, 1136.3 s and 1586.0 s after each,
# the machine's start included; 212 s left after the give-back; no failed calls
LEASE7_HELD_S = 1588

# What each lease ran: the device calls, as made (the device tool's `run`, carry [".devcarry/gcache"]).
LEASES: dict[str, dict[str, Any]] = {
    "lease1": {
        "date": "2026-12-04",
        "calls": [
            "SC_COLD_BEFORE_S=1050 SC_WARM_BEFORE_S=1500 WAIT_S=545 bash .devcarry/gcache/start.sh",
            "WAIT_S=560 bash .devcarry/gcache/poll.sh",
            "WAIT_S=200 bash .devcarry/gcache/poll.sh",
        ],
        "environment": "the machine's own: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ CUDAHOSTCXX=/opt/gcc/bin/g++ "
                       "(read in lease 2 on a fresh machine of the same image; lease 1 did not print them)",
        "held_s": 1293,
    },
    "lease2": {
        "date": "2026-12-04",
        "calls": [
            "env | grep -E '^(CC|CXX|CUDAHOSTCXX|CUDACXX)=' ; RUNS='r1-cold:A:ccache r2-pyonly:B:ccache' "
            "UNSET_CC_CXX=1 PIP_VERBOSE=1 WAIT_S=435 bash .devcarry/gcache/start.sh",
        ],
        "environment": "CC and CXX unset (UNSET_CC_CXX=1), as in a compile-env container whose image sets "
                       "neither; CUDAHOSTCXX=/opt/gcc/bin/g++ kept (nvcc's host compiler); PIP_VERBOSE=1 (pip "
                       "shows the build's commands)",
        "held_s": 434,
    },
    "lease3": {
        "date": "2026-12-06",
        "calls": LEASE3_CALLS,
        "machine": "nvidia-h100-x1's machine, not an H200: the device tool gave no H200 that session (NVIDIA H100 "
                   "80GB HBM3, the same image: driver 580.159.04, 16 cores, 125 GiB, nvcc 13.0.88, cmake 4.4.3, "
                   "Python 3.12.3, torch 2.11.0+cu130; the job's machine fact)",
        "environment": "the machine's own, as in lease 1: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ "
                       "CUDAHOSTCXX=/opt/gcc/bin/g++ (printed by the first call and by job.sh's env_compilers fact), "
                       "not unset; PIP_VERBOSE=1 (pip shows the build's commands); ccache only",
        "held_s": LEASE3_HELD_S,
        "script": {"file": "lease3/wheel-transformer-engine.sh", "trees": "lease3/trees.json",
                   "rendered": "images/wheel.sh.in of branch gpu at 150e027 (with 1616287: a CC/CXX set to a "
                               "compiler's path goes through ccache), rendered by prepare_cache.py through "
                               "pipeline.dry_run"},
    },
    "lease4": {
        "date": "2026-12-06",
        "calls": LEASE4_CALLS,
        "machine": "an H100 again, not an H200: the device tool gave no H200 that session (NVIDIA H100 80GB HBM3, "
                   "the same image as lease 3: driver 580.159.04, 16 cores, 125 GiB, nvcc 13.0.88, cmake 4.4.3, "
                   "Python 3.12.3, torch 2.11.0+cu130; the job's machine fact)",
        "environment": "the machine's own, as in leases 1 and 3: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ "
                       "CUDAHOSTCXX=/opt/gcc/bin/g++ (job.sh's env_compilers fact), not unset; PIP_VERBOSE=1; "
                       "ccache only; c1-c4 on one ccache folder as in lease 3, c5-cold2 on a second, new one",
        "held_s": LEASE4_HELD_S,
        "script": {"file": "lease3/wheel-transformer-engine.sh", "trees": "lease4/trees.json",
                   "rendered": "images/wheel.sh.in of main at 86620de (unchanged since 1616287), rendered again "
                               "by prepare_cache.py through pipeline.dry_run: the same file as lease 3's"},
    },
    "lease5": {
        "date": "2026-12-06",
        "calls": LEASE5_CALLS,
        "machine": "an H100 again, not an H200 (the call named no kind; the device tool gave nvidia-h100-x1's "
                   "machine): NVIDIA H100 80GB HBM3, the same image as leases 3-4: driver 580.159.04, 16 cores, "
                   "125 GiB, nvcc 13.0.88, cmake 4.4.3, Python 3.12.3, torch 2.11.0+cu130; the job's machine fact",
        "environment": "the machine's own, as in leases 1, 3 and 4: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ "
                       "CUDAHOSTCXX=/opt/gcc/bin/g++ (job.sh's env_compilers fact), not unset; PIP_VERBOSE unset "
                       "(leases 3-4 had PIP_VERBOSE=1); ccache only; c1-c3 on one ccache folder, c5-c7 on a "
                       "second, new one, then c4 on the first folder",
        "held_s": LEASE5_HELD_S,
        "script": {"file": "lease3/wheel-transformer-engine.sh", "trees": "lease5/trees.json",
                   "rendered": "the pack of lease 4 carried again (.devcarry/gcache/pack, its trees.json byte for "
                               "byte lease4/trees.json): the same file as lease 3's"},
    },
    "lease6": {
        "date": "2026-12-06",
        "calls": LEASE6_CALLS,
        "machine": "an H100 again (the call named no kind): NVIDIA H100 80GB HBM3, the same image as leases 3-5: "
                   "driver 580.159.04, 16 cores, 125 GiB, nvcc 13.0.88, cmake 4.4.3, Python 3.12.3, "
                   "torch 2.11.0+cu130; the job's machine fact",
        "environment": "the machine's own: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ CUDAHOSTCXX=/opt/gcc/bin/g++ "
                       "(job.sh's env_compilers fact); PIP_VERBOSE=1; ccache only; tree A cold on a new folder, "
                       "then tree D cold on another new folder",
        "held_s": LEASE6_HELD_S,
        "script": {"file": "lease3/wheel-transformer-engine.sh", "trees": "lease6/trees.json",
                   "rendered": "the pack of leases 4-5 carried again (.devcarry/gcache/pack, its trees.json byte "
                               "for byte lease4/trees.json): the same file as lease 3's"},
    },
    "lease7": {
        "date": "2026-12-06",
        "calls": LEASE7_CALLS,
        "machine": "an H100 again (the call named no kind): NVIDIA H100 80GB HBM3, the same image as leases 3-6: "
                   "driver 580.159.04, 16 cores, 125 GiB, nvcc 13.0.88, cmake 4.4.3, Python 3.12.3, "
                   "torch 2.11.0+cu130; the job's machine fact",
        "environment": "the machine's own: CC=/opt/gcc/bin/gcc CXX=/opt/gcc/bin/g++ CUDAHOSTCXX=/opt/gcc/bin/g++ "
                       "(job.sh's env_compilers fact); PIP_VERBOSE=1; ccache only; tree A cold on a new folder, "
                       "tree D on that folder, tree D cold on a second new folder, tree A cold on a third",
        "held_s": LEASE7_HELD_S,
        "script": {"file": "lease3/wheel-transformer-engine.sh", "trees": "lease7/trees.json",
                   "rendered": "the pack of leases 4-6 carried again (.devcarry/gcache/pack, its trees.json byte "
                               "for byte lease4/trees.json): the same file as lease 3's"},
    },
}

# Lease 4's breakdown: a run's log lines, each with its seconds since the run began, cut at these markers (the
# first line that matches each, in order); a phase is the time from its marker to the next one's, the last
# up to the run's own seconds, so that the phases add up to the run.
PHASE_MARKERS = [
    ("copy of the tree, pip start", None),
    ("pip metadata", re.compile(r"Preparing metadata \(pyproject\.toml\): started")),
    ("setup.py start (bdist_wheel)", re.compile(r"Preparing metadata \(pyproject\.toml\): finished")),
    ("build_py (and egg_info)", re.compile(r"running build_py$")),
    ("CMake configure", re.compile(r"Running command \S+cmake -S ")),
    ("ninja (libtransformer_engine, CMake)", re.compile(r"Running command \S+cmake --build ")),
    ("CMake install", re.compile(r"Running command \S+cmake --install ")),
    ("torch extension units (ninja)", re.compile(r"building 'transformer_engine_torch' extension")),
    ("torch extension link", re.compile(r"-shared -Wl,-O1 ")),
    ("install and zip (bdist_wheel)", re.compile(r"installing to build/bdist\.")),
    ("after the wheel (pip's end, ccache stats)", re.compile(r"Created wheel for transformer_engine")),
]
STAMP = re.compile(r"^\+(\d+\.\d)s (.*)$")


def phases(log: str, seconds: float) -> dict[str, Any]:
    """A stamped log's phases: [name, start, seconds], in order."""
    lines = stamped(log)
    out = cut(lines, PHASE_MARKERS, seconds)
    ninja = [t for t, text in lines if re.match(r"\s*\[\d+/\d+\] ", text)]
    return {"phases": out, "last_line_s": lines[-1][0], "ninja_lines": len(ninja)}


def lease_phases(lease: str, runs: list[dict[str, Any]], reader: Any = None) -> dict[str, Any]:
    reader = reader or phases
    with tarfile.open(HERE / lease / "logs.tar.gz") as tar:
        logs = {m.name[:-4]: tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile() and m.name.endswith(".log") and m.name != "job.log"}
    return {r["run"]: reader(logs[r["run"]], r["seconds"]) for r in runs}


# Lease 5's logs (no PIP_VERBOSE): pip's own lines only, cut the same way.
COARSE_MARKERS = [
    ("copy of the tree, pip start", None),
    ("pip metadata", re.compile(r"Preparing metadata \(pyproject\.toml\): started")),
    ("the wheel's build (setup.py bdist_wheel: configure, compiles, install, zip)",
     re.compile(r"Building wheel for transformer_engine \(pyproject\.toml\): started")),
    ("after the wheel (pip's end, ccache stats)",
     re.compile(r"Building wheel for transformer_engine \(pyproject\.toml\): finished")),
]


def cut(lines: list[tuple[float, str]], markers: list[tuple[str, Any]], seconds: float) -> list[list[Any]]:
    starts: list[tuple[str, float]] = [(markers[0][0], 0.0)]
    i = 0
    for name, pat in markers[1:]:
        assert pat is not None
        while i < len(lines) and not pat.search(lines[i][1]):
            i += 1
        assert i < len(lines), f"no line for {name}"
        starts.append((name, lines[i][0]))
    ends = [t for _, t in starts[1:]] + [seconds]
    out: list[list[Any]] = [[name, t, round(end - t, 1)] for (name, t), end in zip(starts, ends, strict=True)]
    assert all(x[2] >= 0 for x in out), out
    return out


def stamped(log: str) -> list[tuple[float, str]]:
    return [(float(m.group(1)), m.group(2)) for m in map(STAMP.match, log.splitlines()) if m]


def coarse_phases(log: str, seconds: float) -> dict[str, Any]:
    """A stamped log without PIP_VERBOSE: [name, start, seconds] of pip's start, metadata, the build, its end."""
    lines = stamped(log)
    return {"phases": cut(lines, COARSE_MARKERS, seconds), "last_line_s": lines[-1][0]}


def mean_of(a: str, b: str) -> str:
    return f"mean({a}, {b})"

# (lease, name, base run, run, kind, target): speedup = base/run seconds (>= target), slowdown = run/base (<= target)
COMPARISONS = [
    ("lease1", "python-only change (#2286), ccache", "c1-cold", "c2-pyonly", "speedup", 10.0),
    ("lease1", "one-file .cu change, ccache", "c1-cold", "c3-onefile", "speedup", 10.0),
    ("lease1", "tree without #2150, ccache", "c1-cold", "c4-no2150", "slowdown", 1.05),
    ("lease1", "python-only change (#2286), sccache", "s1-cold", "s2-pyonly", "speedup", None),
    ("lease1", "cold: sccache against ccache", "c1-cold", "s1-cold", "speedup", None),
    ("lease2", "python-only change (#2286), ccache, CC/CXX unset", "r1-cold", "r2-pyonly", "speedup", 10.0),
    ("lease3", "python-only change (#2286), ccache, CC/CXX set, script after 1616287", "c1-cold", "c2-pyonly", "speedup", 10.0),
    ("lease3", "one-file .cu change, ccache, CC/CXX set, script after 1616287", "c1-cold", "c3-onefile", "speedup", 10.0),
    ("lease3", "tree without #2150, ccache, CC/CXX set, script after 1616287", "c1-cold", "c4-no2150", "slowdown", 1.05),
]
# Lease 4: c1-c4 as lease 3, then a second cold run c5 (tree A, a new empty ccache folder), so that the tree
# without #2150 sits between two cold runs of one machine. Each run against c1, c5 and the mean of the two.
for _name, _run, _kind, _target in (("python-only change (#2286)", "c2-pyonly", "speedup", 10.0),
                                    ("one-file .cu change", "c3-onefile", "speedup", 10.0),
                                    ("tree without #2150", "c4-no2150", "slowdown", 1.05)):
    for _base in ("c1-cold", "c5-cold2", mean_of("c1-cold", "c5-cold2")):
        COMPARISONS.append(("lease4", f"{_name}, ccache, against {_base}", _base, _run, _kind, _target))
# Lease 5: a pair of warm runs on each of two cold caches (c1 -> c2, c3 on folder 1; c5 -> c6, c7 on folder 2, new),
# then the tree without #2150 on folder 1. Each warm run against its own folder's cold run, the other cold run and
# the mean of the two; c4 against c1, c5 and the mean.
_MEAN5 = mean_of("c1-cold", "c5-cold2")
for _name, _run, _kind, _target, _bases in (
        ("python-only change (#2286)", "c2-pyonly", "speedup", 10.0, ("c1-cold", "c5-cold2", _MEAN5)),
        ("one-file .cu change", "c3-onefile", "speedup", 10.0, ("c1-cold", "c5-cold2", _MEAN5)),
        ("python-only change (#2286), second folder", "c6-pyonly2", "speedup", 10.0, ("c5-cold2", "c1-cold", _MEAN5)),
        ("one-file .cu change, second folder", "c7-onefile2", "speedup", 10.0, ("c5-cold2", "c1-cold", _MEAN5)),
        ("tree without #2150", "c4-no2150", "slowdown", 1.05, ("c1-cold", "c5-cold2", _MEAN5))):
    for _base in _bases:
        COMPARISONS.append(("lease5", f"{_name}, ccache, against {_base}", _base, _run, _kind, _target))
# Lease 6: tree D cold against tree A cold, each on its own empty folder: the trees' own compile times, no cache
# entry involved (no target of the issue's: it tells what lease 5's c4 against c1 compared)
COMPARISONS.append(("lease6", "tree without #2150 cold, against tree A cold (both empty folders)", "a-cold", "d-cold",
                    "slowdown", None))
# Lease 7: tree D on tree A's folder (the case) against both cold runs of tree A and their mean (target
# <= 1.05), and against tree D cold on its own folder (no target: what the folder's lookup on a miss costs, the
# tree the same); tree D cold against the mean of A's (no target: the spread of cold runs on this machine)
_MEAN7 = mean_of("a-cold", "a-cold2")
for _base in ("a-cold", "a-cold2", _MEAN7):
    COMPARISONS.append(("lease7", f"tree without #2150 on tree A's folder, against {_base}", _base, "d-onA",
                        "slowdown", 1.05))
COMPARISONS.append(("lease7", "tree without #2150 on tree A's folder, against tree D cold (its own folder)", "d-cold",
                    "d-onA", "slowdown", None))
COMPARISONS.append(("lease7", "tree without #2150 cold, against the mean of tree A's cold runs (all empty folders)",
                    _MEAN7, "d-cold", "slowdown", None))


def nonzero(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if v and not k.endswith("_timestamp")}


def ccache_counts(stats: dict[str, Any]) -> dict[str, int]:
    return {"hits": int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0)),
            "misses": int(stats.get("cache_miss", 0))}


def tail(tails: str, run: str) -> list[str]:
    marker = f"=== {run}: log, last 40 lines\n"
    if marker not in tails:
        return []
    body = tails.split(marker, 1)[1].split("\n=== ", 1)[0]
    return body.splitlines()[-TAIL_LINES:]


def run_record(raw: dict[str, Any], tails: str) -> dict[str, Any]:
    rec: dict[str, Any] = {k: raw[k] for k in ("run", "tree", "cache", "rc", "seconds", "jobs", "wheel", "wheel_sha256",
                                               "load_before", "load_after", "cache_dir_kib", "command")}
    if "ccache_print_stats" in raw:
        rec.update(ccache_counts(raw["ccache_print_stats"]))
        rec["ccache_stats"] = nonzero(raw["ccache_print_stats"])
        script = raw.get("script_stats") or {}
        rec["script_stats"] = {**ccache_counts(script), "file": "/out/.buildctl-ccache-stats.json"} if script else None
    if "sccache_stats" in raw:
        s = raw["sccache_stats"]["stats"]
        rec["sccache"] = {"compile_requests": s["compile_requests"], "requests_executed": s["requests_executed"],
                          "cache_hits": s["cache_hits"]["adv_counts"], "cache_misses": s["cache_misses"]["adv_counts"],
                          "non_cacheable_compilations": s["non_cacheable_compilations"]}
        rec["hits"] = sum(s["cache_hits"]["counts"].values())
        rec["misses"] = sum(s["cache_misses"]["counts"].values())
    rec["log_tail"] = tail(tails, raw["run"])
    return rec


def main() -> None:
    trees = json.loads((HERE / "trees.json").read_text())
    script = (HERE / "wheel-transformer-engine.sh").read_text()
    assert hashlib.sha256(script.encode()).hexdigest() == trees["wheel_script_sha256"]
    out: dict[str, Any] = {
        "schema": 1,
        "what": "buildctl's rendered wheel script of deepseek-v3-gb200 / hopper / transformer-engine on the "
                "device tool's H200, run after run with one compiler cache kept (README.md here)",
        "script": {"file": "wheel-transformer-engine.sh", "sha256": trees["wheel_script_sha256"],
                   "leases": "lease1, lease2 (lease3 ran its own: leases.lease3.script)",
                   "rendered": "images/wheel.sh.in of branch cache at c193246 (merged into gpu as 167357e), "
                               "rendered by prepare_cache.py through pipeline.dry_run",
                   "jobs": trees["jobs"]},
        "trees": {k: {kk: v[kk] for kk in ("commit", "short", "changes", "digest")} for k, v in trees["trees"].items()},
        "leases": {},
        "comparisons": [],
    }
    for lease, meta in LEASES.items():
        meta = dict(meta)
        if "script" in meta:  # a lease that ran a script of its own (rendered again), with its own trees.json
            own = json.loads((HERE / meta["script"]["trees"]).read_text())
            text = (HERE / meta["script"]["file"]).read_text()
            assert hashlib.sha256(text.encode()).hexdigest() == own["wheel_script_sha256"], lease
            # the same trees as leases 1-2: the same commits and digests of buildctl's exports
            for name, tree in own["trees"].items():
                assert (tree["commit"], tree["digest"]) == (trees["trees"][name]["commit"], trees["trees"][name]["digest"]), name
            meta["script"] = {**meta["script"], "sha256": own["wheel_script_sha256"], "jobs": own["jobs"]}
        lines = [json.loads(x) for x in (HERE / lease / "results.jsonl").read_text().splitlines() if x.strip()]
        tails = (HERE / lease / "tails.txt").read_text()
        facts = {x["fact"]: x["value"] for x in lines if "fact" in x}
        runs = [run_record(x, tails) for x in lines if "run" in x]
        out["leases"][lease] = {**meta, "facts": facts, "runs": runs}
        if lease == "lease4":
            out["leases"][lease]["phases"] = lease_phases(lease, runs)
        if lease == "lease5":
            out["leases"][lease]["phases"] = lease_phases(lease, runs, coarse_phases)
        if lease in ("lease6", "lease7"):
            out["leases"][lease]["phases"] = lease_phases(lease, runs)
    onefile = next(json.loads(x) for x in (HERE / "lease1" / "job.log").read_text().splitlines() if x.startswith('{"from"'))
    for lease in ("lease3", "lease4", "lease5", "lease6", "lease7"):  # variant.py onefile is deterministic: the same tree C in every lease
        again = next(json.loads(x) for x in (HERE / lease / "job.log").read_text().splitlines() if x.startswith('{"from"'))
        assert again == onefile, lease
    out["trees"]["C"] = {"made_by": "variant.py onefile on the device: tree B plus one line of code appended to one "
                                    ".cu file, a new commit id in .git/HEAD", **onefile,
                         "short": onefile["commit"][:7]}
    for lease, name, base, run, kind, target in COMPARISONS:
        by = {r["run"]: r for r in out["leases"][lease]["runs"]}
        bases = base[len("mean("):-1].split(", ") if base.startswith("mean(") else [base]
        b, r = sum(by[x]["seconds"] for x in bases) / len(bases), by[run]["seconds"]
        value = round(b / r, 2) if kind == "speedup" else round(r / b, 2)
        met = None if target is None else (value >= target if kind == "speedup" else value <= target)
        out["comparisons"].append({"lease": lease, "name": name, "base": base, "base_runs": bases, "run": run,
                                   "kind": kind, "value": value, "target": target, "met": met})
    (HERE / "results.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for cmp in out["comparisons"]:
        print(f"{cmp['lease']} {cmp['name']}: {cmp['kind']} {cmp['value']} (target {cmp['target']}, met {cmp['met']})")


if __name__ == "__main__":
    main()
