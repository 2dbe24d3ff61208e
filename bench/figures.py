"""What the bench reports: medians and spreads, the machine, the Markdown page and the plain table."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.common import TOOLS, Fig, docker
from buildctl.engine.engine import Engine


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(runs: list[Fig]) -> dict[str, Any]:
    return {"seconds": spread([r.seconds for r in runs]), "rebuilt": sorted({r.rebuilt for r in runs}),
            "total": runs[0].total, "compiles": sorted({r.compiles for r in runs})}


def machine(engine: Engine) -> dict[str, Any]:
    mem = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), 0)
    version = docker(["version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})"]).stdout.strip()
    return {"cores": os.cpu_count(), "memory_gib": round(mem / (1 << 20), 1), "engine": version,
            "kernel": platform.release(), "python": platform.python_version(), "engine_address": engine.address}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "n/a"


def _cell(f: dict[str, Any], unit: str) -> str:
    sec = f["seconds"]
    rebuilt = "/".join(map(str, f["rebuilt"]))
    return (f"{sec['median']:.2f} s ({sec['min']:.2f}-{sec['max']:.2f}), {rebuilt} of {f['total']} {unit}, "
            f"{'/'.join(map(str, f['compiles']))} compile(s)")


def markdown(res: dict[str, Any]) -> str:
    """The README's tables from one result file (`--report FILE`)."""
    s = res["summary"]
    out = ["| scenario | buildctl | multi-stage Dockerfile | recipe Dockerfile | ratio |", "|---|---|---|---|---|"]
    rows = [("a", "(a) nothing changed", "multistage", "multi-stage / buildctl"),
            ("b", "(b) runtime pip pin bumped (six)", "recipe", "recipe / buildctl"),
            ("c", "(c) fastmath's PR list changed (a PR added)", "recipe", "recipe / buildctl"),
            ("d1", "(d1) second builder, empty cache, nothing changed", "recipe", "recipe / buildctl"),
            ("d2", "(d2) second builder, empty cache, the pin of (b) bumped", "recipe", "recipe / buildctl")]
    for key, label, versus, name in rows:
        if key not in s:
            continue
        t = s[key]
        base = t["buildctl"]["seconds"]["median"]
        cells = [_cell(t[tool], "nodes" if tool == "buildctl" else "steps") if tool in t else "-" for tool in TOOLS]
        out.append(f"| {label} | {' | '.join(cells)} | {name}: {ratio(t[versus]['seconds']['median'], base)} |")
    e = res.get("push", {})
    if e:
        out += ["", "| (e) bytes sent to the registry | buildctl | multi-stage | recipe |", "|---|---|---|---|",
                "| first push of s0 | " + " | ".join(f"{e[t]['first']:,}" for t in TOOLS) + " |",
                "| the unchanged s0 pushed again | " + " | ".join(spread_txt(e[t]["again"]) for t in TOOLS) + " |"]
    g = res.get("growth", {})
    if g.get("sizes"):
        out += ["", "| components | nodes | `plan`: wall, median (CPU, fastest) | peak | no-op `build`: wall, median (CPU, fastest) | peak |",
                "|---|---|---|---|---|---|"]
        for row in g["sizes"]:
            out.append(f"| {row['components']} | {row['nodes']} | {_wall_cpu(row['plan'])} | "
                       f"{row['plan']['peak_mib']:.0f} MiB | {_wall_cpu(row['noop'])} | {row['noop']['peak_mib']:.0f} MiB |")
        out += ["", f"Growth, from CPU time (every repetition): plan {g['plan_growth']['growth']}; "
                    f"no-op build {g['noop_growth']['growth']}."]
    return "\n".join(out)


def _wall_cpu(m: dict[str, Any]) -> str:
    cpu = f" ({min(m['cpu_runs_s']):.2f} s)" if "cpu_runs_s" in m else ""
    return f"{m['seconds']['median']:.2f} s{cpu}"


def table(res: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [("scenario", "buildctl", "multistage", "recipe", "recipe/buildctl",
                                    "multistage/buildctl")]
    labels = {"a": "(a) nothing changed", "b": "(b) runtime pip pin bumped (six)",
              "c": "(c) fastmath PR list changed (PR added)", "d1": "(d1) second builder, nothing changed",
              "d2": "(d2) second builder, pin of (b) bumped"}
    for key, label in labels.items():
        s = res["summary"].get(key)
        if not s:
            continue
        cells = []
        for tool in TOOLS:
            f = s.get(tool)
            cells.append("-" if f is None else
                         f"{f['seconds']['median']:.2f}s {'/'.join(map(str, f['rebuilt']))} of {f['total']} "
                         f"c{'/'.join(map(str, f['compiles']))}")
        b = s["buildctl"]["seconds"]["median"]
        rec = s.get("recipe")
        mul = s.get("multistage")
        rows.append((label, *cells, ratio(rec["seconds"]["median"], b) if rec else "-",
                     ratio(mul["seconds"]["median"], b) if mul else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.append("  (cells: median wall time, nodes or steps rebuilt of all, cN: compiles run)")
    e = res.get("push")
    if e:
        out.append("(e) bytes sent to the registry: " + ", ".join(
            f"{tool} first push {e[tool]['first']:,} B, unchanged again {spread_txt(e[tool]['again'])} B"
            for tool in TOOLS if tool in e))
    for g in res.get("growth", {}).get("sizes", []):
        out.append(f"growth {g['components']:>4} components: plan {_wall_cpu(g['plan'])} CPU "
                   f"({g['plan']['peak_mib']:.0f} MiB peak), no-op build {_wall_cpu(g['noop'])} CPU "
                   f"({g['noop']['peak_mib']:.0f} MiB peak)")
    if res.get("growth", {}).get("error"):
        out.append(f"growth: FAILED: {res['growth']['error']}")
    elif res.get("growth"):
        out.append(f"growth of plan (CPU time): {res['growth']['plan_growth']['growth']}")
        out.append(f"growth of no-op build (CPU time): {res['growth']['noop_growth']['growth']}")
    return "\n".join(out)


def spread_txt(values: list[int]) -> str:
    return f"{min(values):,}" if min(values) == max(values) else f"{min(values):,}..{max(values):,}"
