"""What the bench reports: medians and spreads, the machine, the Markdown page and the plain table."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.bigbase import label as base_label
from bench.common import BUILDKIT, LABELS, TOOLS, Fig, docker
from buildctl.engine.engine import Engine


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(runs: list[Fig]) -> dict[str, Any]:
    return {"seconds": spread([r.seconds for r in runs]), "rebuilt": sorted({r.rebuilt for r in runs}),
            "total": runs[0].total, "compiles": sorted({r.compiles for r in runs}),
            "cache": [r.compile_detail for r in runs if r.compile_detail],
            "pull_s": [r.pull_s for r in runs if r.pull_s is not None]}


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


# per scenario: its label, and what buildctl is compared with (the other tool's median over buildctl's)
ROWS = [("a", "(a) nothing changed", ("multistage",)),
        ("b", "(b) runtime pip pin bumped (six)", ("recipe", "multistage", "multistage-uv")),
        ("c", "(c) fastmath's PR list changed (a PR added)", ("recipe", "multistage", "multistage-cm")),
        ("c2", "(c2) as (c), another PR, on a fresh second builder sharing the registry and the compiler-cache server",
         ("multistage-cm",)),
        ("d1", "(d1) second builder, empty cache, nothing changed", ("recipe",)),
        ("d2", "(d2) second builder, empty cache, the pin of (b) bumped", ("recipe",)),
        ("d1p", "(d1p) as (d1), the final image pulled into the second engine (no --no-load)", ("recipe",))]
_SHORT = {"multistage": "multi-stage", "multistage-cm": "multi-stage with cache mount",
          "multistage-uv": "multi-stage with uv", "recipe": "recipe"}


def ratios(t: dict[str, Any], versus: tuple[str, ...]) -> str:
    """``recipe / buildctl: 8.3x (classic), 9.0x (BuildKit)`` for each tool compared with, from one run."""
    out = []
    for other in (v for v in versus if v in t):
        cells = [f"{ratio(t[other]['seconds']['median'], t[ours]['seconds']['median'])} ({name})"
                 for ours, name in (("buildctl", "classic"), (BUILDKIT, "BuildKit")) if ours in t]
        out.append(f"{_SHORT[other]} / buildctl: {', '.join(cells)}")
    return "; ".join(out) or "-"


def markdown(res: dict[str, Any]) -> str:
    """The benchmark tables (docs/benchmarks/rebuild.md) from one result file (`--report FILE`); the BuildKit backend's column only where the
    run had it."""
    s = res["summary"]
    tools = [t for t in TOOLS if t != BUILDKIT or any(BUILDKIT in v for v in s.values())]
    out = [f"Every row below ran on {base_label(res.get('base'))}.", "",
           f"| scenario, on {base_short(res.get('base'))} | " + " | ".join(LABELS[t] for t in tools) + " | ratio |",
           "|---" * (len(tools) + 2) + "|"]
    for key, label, versus in ROWS:
        if not s.get(key):
            continue
        t = s[key]
        cells = [_cell(t[tool], "nodes" if tool.startswith("buildctl") else "steps") if tool in t else "-"
                 for tool in tools]
        out.append(f"| {label} | {' | '.join(cells)} | {ratios(t, versus)} |")
    counts = [f"{label.split(' ')[0]} {LABELS[tool]}: {', '.join(t[tool]['cache'])}" for key, label, _ in ROWS
              for t in [s.get(key) or {}] for tool in TOOLS if t.get(tool, {}).get("cache")]
    if counts:
        out += ["", "Compiler cache, per repetition: " + "; ".join(counts) + "."]
    floor = c2_pull_line(s.get("c2") or {}, res.get("runs", {}).get("c2") or {})
    if floor:
        out += ["", floor]
    if res.get("bisect"):
        out += ["", bisect_line(res["bisect"])]
    e = res.get("push", {})
    if e:
        pushed = [t for t in TOOLS if t in e]
        out += ["", f"| (e) bytes sent to the registry, on {base_short(res.get('base'))} | " + " | ".join(_SHORT.get(t, t) for t in pushed) + " |",
                "|---" * (len(pushed) + 1) + "|",
                "| first push of s0 | " + " | ".join(f"{e[t]['first']:,}" for t in pushed) + " |",
                "| the unchanged s0 pushed again | " + " | ".join(spread_txt(e[t]["again"]) for t in pushed) + " |"]
    g = res.get("growth", {})
    if g.get("sizes"):
        out += ["", "| components | nodes | `plan`: wall, median (CPU, fastest) | peak | no-op `build`: wall, median (CPU, fastest) | peak |",
                "|---|---|---|---|---|---|"]
        for row in g["sizes"]:
            out.append(f"| {row['components']} | {row['nodes']} | {_wall_cpu(row['plan'])} | "
                       f"{row['plan']['peak_mib']:.0f} MiB | {_wall_cpu(row['noop'])} | {row['noop']['peak_mib']:.0f} MiB |")
        gr = g.get("graph")
        if gr:
            out.append(f"| {gr['components']} compiled | {gr['nodes']} | {_wall_cpu(gr['plan'])} | "
                       f"{gr['plan']['peak_mib']:.0f} MiB | {_wall_cpu(gr['noop'])} | {gr['noop']['peak_mib']:.0f} MiB |")
        out += ["", f"Growth, from CPU time (every repetition): plan {g['plan_growth']['growth']}; "
                    f"no-op build {g['noop_growth']['growth']}."]
    why = res.get("buildkit_backend", {}).get("why")
    if why:
        out += ["", f"{BUILDKIT}: {why}."]
    return "\n".join(out)


def base_short(base: dict[str, Any] | None) -> str:
    """The base in a table's header: ``the demo base`` or ``the torch base``."""
    return f"the {(base or {}).get('kind', 'demo')} base"


def _wall_cpu(m: dict[str, Any]) -> str:
    cpu = f" ({min(m['cpu_runs_s']):.2f} s)" if "cpu_runs_s" in m else ""
    return f"{m['seconds']['median']:.2f} s{cpu}"


def table(res: dict[str, Any]) -> str:
    s = res["summary"]
    tools = [t for t in TOOLS if t != BUILDKIT or any(BUILDKIT in v for v in s.values())]
    rows: list[tuple[str, ...]] = [("scenario", *tools, "ratio")]
    for key, label, versus in ROWS:
        t = s.get(key)
        if not t:
            continue
        cells = []
        for tool in tools:
            f = t.get(tool)
            cells.append("-" if f is None else
                         f"{f['seconds']['median']:.2f}s {'/'.join(map(str, f['rebuilt']))} of {f['total']} "
                         f"c{'/'.join(map(str, f['compiles']))}")
        rows.append((label, *cells, ratios(t, versus)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"base: {base_label(res.get('base'))}"]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.append("  (cells: median wall time, nodes or steps rebuilt of all, cN: compiles run)")
    if res.get("buildkit_backend", {}).get("why"):
        out.append(f"{BUILDKIT}: {res['buildkit_backend']['why']}")
    floor = c2_pull_line(s.get("c2") or {}, res.get("runs", {}).get("c2") or {})
    if floor:
        out.append(floor)
    if res.get("bisect"):
        out.append(bisect_line(res["bisect"]))
    e = res.get("push")
    if e:
        out.append("(e) bytes sent to the registry: " + ", ".join(
            f"{tool} first push {e[tool]['first']:,} B, unchanged again {spread_txt(e[tool]['again'])} B"
            for tool in TOOLS if tool in e))
    for g in res.get("growth", {}).get("sizes", []):
        out.append(f"growth {g['components']:>4} components: plan {_wall_cpu(g['plan'])} CPU "
                   f"({g['plan']['peak_mib']:.0f} MiB peak), no-op build {_wall_cpu(g['noop'])} CPU "
                   f"({g['noop']['peak_mib']:.0f} MiB peak)")
    gr = res.get("growth", {}).get("graph")
    if gr:
        out.append(f"graph {gr['nodes']:>4} nodes ({gr['components']} compiled components): plan {_wall_cpu(gr['plan'])} "
                   f"CPU, no-op build {_wall_cpu(gr['noop'])} CPU (first build {gr['first_build_s']:.0f} s, untimed)")
    if res.get("growth", {}).get("error"):
        out.append(f"growth: FAILED: {res['growth']['error']}")
    elif res.get("growth"):
        out.append(f"growth of plan (CPU time): {res['growth']['plan_growth']['growth']}")
        out.append(f"growth of no-op build (CPU time): {res['growth']['noop_growth']['growth']}")
    return "\n".join(out)


def c2_pull_line(t: dict[str, Any], runs: dict[str, Any]) -> str:
    """(c2)'s floor: per repetition, the seconds buildctl's fresh builder spent pulling the compile environment
    (its progress) of the build's seconds, and what 5x the cache-mount file's median leaves; "" where the run
    has no such figure (no (c2), or a result file from before it was read)."""
    ours = [r for r in runs.get("buildctl", []) if r.get("pull_s") is not None]
    if not ours:
        return ""
    reps = ", ".join(f"{r['pull_s']:.1f} of {r['seconds']:.1f} s" for r in ours)
    cm = t.get("multistage-cm", {}).get("seconds", {}).get("median")
    budget = f"; 5x the cache-mount file's median ({cm:.2f} s) leaves {cm / 5:.2f} s" if cm else ""
    return (f"(c2) the fresh builder's pull of the compile environment (before its compile can start), per "
            f"repetition: {reps}{budget}.")


def spread_txt(values: list[int]) -> str:
    return f"{min(values):,}" if min(values) == max(values) else f"{min(values):,}..{max(values):,}"


def bisect_line(bis: dict[str, Any]) -> str:
    """The bisect figure: its compiles' seconds against one cold compile, and each step's."""
    steps = ", ".join(f"commit {st['commit']}: " + (f"{st['compile_s']:.1f} s" if st["compiles"] else "nothing built"
                                                     if not st["rebuilt"] else "no compile")
                      + (f" ({st['compile_detail'].split(': ', 1)[-1]})" if st.get("compile_detail") else "")
                      for st in bis["steps"])
    ratio = f"{bis['ratio']:.2f}x" if bis.get("ratio") is not None else "n/a"
    return (f"Bisect of {bis['commits']} commits inside fastmath (first bad: commit {bis['culprit']}; "
            f"{len(bis['steps'])} states judged, the good end s0 built already): {bis['compiles']} compile(s), "
            f"{bis['compile_s']:.1f} s of compiling against {bis['cold_compile_s']:.1f} s for one cold compile: "
            f"{ratio} ({steps}).")
