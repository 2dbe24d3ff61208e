"""Host: results.json from what the three device leases brought back (lease1/, lease2/, lease3/: job.sh's
results.jsonl, job.log, tails.txt, logs.tar.gz as poll.sh left them in $OUT), trees.json (prepare_cache.py)
and the rendered script that each lease ran (leases 1-2: wheel-transformer-engine.sh here; lease 3, rendered
after 1616287: lease3/wheel-transformer-engine.sh with its own lease3/trees.json). tests/unit/test_h200_cache.py
reads results.json and checks it against the raw lines.

    python3 tests/data/gpu/h200-cache/summarize.py      (writes tests/data/gpu/h200-cache/results.json)

Hits and misses: ccache's own counters of the run (`ccache --print-stats`, zeroed before it): hits =
direct_cache_hit + preprocessed_cache_hit, misses = cache_miss (each a compiler call that ccache could cache:
one translation unit). sccache counts each nvcc stage (nvcc, cudafe++, cicc, ptxas) as a request of its own;
its figures are kept as it gives them.
"""

from __future__ import annotations

import hashlib
import json
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
}

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
    onefile = next(json.loads(x) for x in (HERE / "lease1" / "job.log").read_text().splitlines() if x.startswith('{"from"'))
    for lease in ("lease3",):  # variant.py onefile is deterministic: the same tree C in every lease
        again = next(json.loads(x) for x in (HERE / lease / "job.log").read_text().splitlines() if x.startswith('{"from"'))
        assert again == onefile, lease
    out["trees"]["C"] = {"made_by": "variant.py onefile on the device: tree B plus one line of code appended to one "
                                    ".cu file, a new commit id in .git/HEAD", **onefile,
                         "short": onefile["commit"][:7]}
    for lease, name, base, run, kind, target in COMPARISONS:
        by = {r["run"]: r for r in out["leases"][lease]["runs"]}
        b, r = by[base]["seconds"], by[run]["seconds"]
        value = round(b / r, 2) if kind == "speedup" else round(r / b, 2)
        met = None if target is None else (value >= target if kind == "speedup" else value <= target)
        out["comparisons"].append({"lease": lease, "name": name, "base": base, "run": run, "kind": kind,
                                   "value": value, "target": target, "met": met})
    (HERE / "results.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for cmp in out["comparisons"]:
        print(f"{cmp['lease']} {cmp['name']}: {cmp['kind']} {cmp['value']} (target {cmp['target']}, met {cmp['met']})")


if __name__ == "__main__":
    main()
