#!/usr/bin/env python3
"""Rebuild cost of the demo stack: buildctl against what users would write instead (issue 14).

Side by side, on one engine, from one lock per state (each made by `buildctl lock`, as a user would after
editing the manifest), three ways to build the demo stack:

  buildctl     content-keyed nodes (`buildctl build`; no registry except in (d) and (e));
  multistage   buildctl's own graph as one multi-stage Dockerfile (bench/baselines.py);
  recipe       one stage in the seed guide's order: system packages and downloads, pip, the compile
               inside the same image, the install of what it built, the entrypoint.

Both Dockerfiles are built with BuildKit (DOCKER_BUILDKIT=1, Debian's /usr/bin/docker). Scenarios, each
repeated --reps times (each repetition makes a change never built before, in this run or an earlier one (the
generated repository carries the run's id: project.fastmath_repo), so no cache holds it):

  (a) nothing changed;                          (b) a runtime pip pin bumped (six);
  (c) fastmath's PR list changed (a PR added);  (d) a second builder: a second engine with an empty cache
      that shares only the registry, with (d1) nothing changed and (d2) the pin of (b) bumped: buildctl
      (with --no-load, a fleet builder's run: what the registry has stays there) against the recipe built
      with BuildKit --cache-from the image pushed with an inline cache; (d1p) is (d1) with the final image
      pulled into the second engine (no --no-load), against the same recipe figures;
  (e) pushing an unchanged image again: bytes sent to the registry (through a counting relay);
  (c2) (c) with another PR on a fresh second engine that shares only the registry and the compiler-cache
      server with the first: buildctl against the multi-stage file with ccache in a cache mount (empty there).

Two variants of the multi-stage file (bench/baselines.py): with ccache in a BuildKit cache mount
(multistage-cm, in (c) and (c2)) and installing with uv instead of pip (multistage-uv, in (b)). Every buildctl
build uses the run's own redis-server (bench/cacheserver.py, started empty, stopped after) as its compiler
cache (BUILDCTL_COMPILE_CACHE). The bisect figure: --bisect commits after fastmath's main, each adding code to
one generated file; the states a bisection builds, in its order, built on the first builder; the compile
node's seconds summed against its seconds in the cold build of s0.

Figures: wall time, nodes (buildctl) or build steps (Dockerfiles) rebuilt, compiles run. The fastmath
compile gets realistic weight from generated C sources (--weight files, about 1.5 s of gcc CPU time each here;
the default 20 makes one compile about 30 s).
Then `plan` and no-op `build` time and peak memory of generated stacks of 10, 50 and 200 source-tree
components (--sizes), and of a graph of 200 nodes (--graph-nodes: 98 compiled components, each compile a
stdlib script that writes a tiny wheel). A table goes to stdout, every repetition's figures with the machine to
bench/results/<time>.json (--out).

    python3 bench/bench_rebuild.py [--reps N] [--weight N] [--sizes 10,50,200] [--registry HOST:PORT]
                                   [--bisect N] [--bisect-only] [--no-buildkit-backend] [--big-base]
    python3 bench/bench_rebuild.py --quick    # CI: one repetition, small sizes, no apt, a pure-Python "compile",
                                              # all of (d) on one second engine, growth beside the scenarios

--big-base runs every scenario (and the growth stacks) on a base of real size: the demo base plus torch and its CUDA
wheels from PyPI (bench/bigbase.py), made once and kept under a content tag in the engine and the registry; the
result's "base" names the base every row used (name, digest, size, files), in either mode.

Needs the engine, a registry with the demo base (`make demo-up`; `make bench` runs it first), root for the
second engine, and BUILDCTL_CA_BUNDLE where pip needs a proxy's CA (`make bench` passes the host bundle).
Everything it makes (images, tags, containers, the second engine, pushed manifests) is removed at the end.

This file holds the scenarios and main; its parts: bench/common.py (shared constants, errors, docker and
registry calls), project.py (the demo project's states and locks), runner.py (the three tools run and
timed), figures.py (the report), baselines.py (the Dockerfiles), growth.py, regproxy.py, engine2.py,
cacheserver.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bigbase, cacheserver, growth, regproxy  # noqa: E402
from bench.cacheserver import CacheServerError  # noqa: E402
from bench.common import (  # noqa: E402
    BASE_PATH,
    BUILDKIT,
    DEMO_REGISTRY,
    DOCKER,
    LOCAL_BASE,
    TOOLS,
    BenchError,
    Fig,
    docker,
    registry_has,
    say,
)
from bench.engine2 import SecondEngineError, second_engine  # noqa: E402
from bench.figures import machine, markdown, spread, summary, table, uptime  # noqa: E402
from bench.project import SIX_BUMPS, fastmath_repo, lock_all, manifests  # noqa: E402
from bench.runner import Bench  # noqa: E402
from buildctl import safepath, syntax, untrusted  # noqa: E402
from buildctl.builder import wheelhouse  # noqa: E402
from buildctl.config import load_config  # noqa: E402
from buildctl.engine.engine import Engine  # noqa: E402
from buildctl.errors import BuildctlError, UsageError  # noqa: E402
from buildctl.lock.pinsteps import Bisection  # noqa: E402
from buildctl.services import target  # noqa: E402


def run_growth(b: Bench, sizes: list[int], reps: int, base_image: str, graph_nodes: int = 0) -> dict[str, Any]:
    out = [_one_size(b, n, reps, base_image) for n in sizes]
    res: dict[str, Any] = {
        "sizes": out,
        "plan_growth": growth.name_growth(sizes, [g["plan"]["cpu_runs_s"] for g in out]),
        "noop_growth": growth.name_growth(sizes, [g["noop"]["cpu_runs_s"] for g in out]),
        "plan_growth_wall": growth.name_growth(sizes, [g["plan"]["runs_s"] for g in out]),
        "noop_growth_wall": growth.name_growth(sizes, [g["noop"]["runs_s"] for g in out]),
        "note": "each figure is one process (python start-up and imports included); the growth is named from "
                "the CPU time (user + system, children included) of every repetition (growth.name_growth); "
                "*_growth_wall names it from the wall times"}
    if graph_nodes:
        # a graph of that many nodes: compiled components (a compile-env and a wheel node each) on base, system,
        # python and assemble, each compile a stdlib script writing a tiny wheel (growth.MKWHEEL)
        res["graph"] = _one_size(b, (graph_nodes - 4) // 2, reps, base_image, compiled=True)
    return res


def _one_size(b: Bench, n: int, reps: int, base_image: str, compiled: bool = False) -> dict[str, Any]:
    kind = "compiled" if compiled else "source-tree"
    say(f"growth: {n} {kind} components")
    name = f"{n}{'c' if compiled else ''}"
    gp = b.work / f"growth-{name}"
    (gp / "pins").mkdir(parents=True)
    (gp / "images").symlink_to(ROOT / "images")
    shas = growth.make_repo(b.work / "git" / f"gen-{name}.git", n, compiled=compiled)
    (gp / "pins" / "gen.yaml").write_text(growth.manifest(n, b.work / "git" / f"gen-{name}.git", shas, base_image,
                                                          f"bench-{b.run_id}/gen{'' if b.quick else name}",
                                                          compiled=compiled))
    # a cache and a repository per size, so that no size's figures carry another's state (sharing them made
    # plan of 200 components 0.25 s slower, seen in one run); --quick (no timing claims) shares both: system
    # and python are the same for all sizes, so each untimed first build there only builds what differs
    cache = b.work / ("growth-cache" if b.quick else f"growth-cache-{name}")
    env = {**b.env, "BUILDCTL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    locked = growth.measure(growth.buildctl(gp, "lock", "gen"), env, f"lock of the {n}-component stack")
    env_t = {**b.env, "BUILDCTL_CACHE": str(cache)}
    t = target.load(gp, load_config(env_t), "gen", None, local_only=True, skip_smoke=True)
    b.made_refs += [("", t.refs[x.name]) for x in t.graph.nodes if x.kind != "base"]
    first = growth.measure(growth.buildctl(gp, "build", "gen", "--local", "--skip-smoke"), env,
                           f"first build of the {n}-component stack")
    say(f"  {len(t.graph.nodes)} nodes; lock {locked.seconds:.2f}s, first build {first.seconds:.2f}s (untimed); then "
        f"{reps} plan(s) and {reps} no-op build(s)")
    plans = [growth.measure(growth.buildctl(gp, "plan", "gen", "--json"), env, "plan") for _ in range(reps)]
    noops = [growth.measure(growth.buildctl(gp, "build", "gen", "--local", "--skip-smoke"), env, "no-op build")
             for _ in range(reps)]
    return {"components": n, "kind": kind, "nodes": len(t.graph.nodes), "first_build_s": first.seconds,
            "plan": _measured(plans), "noop": _measured(noops)}


def _measured(ms: list[growth.Measured]) -> dict[str, Any]:
    return {"seconds": spread([m.seconds for m in ms]), "runs_s": [m.seconds for m in ms],
            "cpu_s": spread([m.cpu_s for m in ms]), "cpu_runs_s": [m.cpu_s for m in ms],
            "peak_mib": max(m.peak_mib for m in ms)}


def growth_or_error(b: Bench, sizes: list[int], reps: int, base_ref: str, graph_nodes: int = 0) -> dict[str, Any]:
    """run_growth's result, or {"error": ...}: the scenarios' figures are kept, and the run still fails (exit 1)
    after writing them."""
    try:
        return run_growth(b, sizes, reps, base_ref, graph_nodes)
    except (growth.GrowthError, BuildctlError, subprocess.CalledProcessError) as exc:
        say(f"growth failed: {exc}")
        return {"error": str(exc)}


def scenarios(b: Bench, reps: int, proxy: str, counter: regproxy.Counter, res: dict[str, Any],
              bisect: tuple[list[tuple[str, int]], int] | None = None) -> None:
    runs: dict[str, dict[str, list[Fig]]] = {k: {t: [] for t in TOOLS}
                                             for k in ("a", "b", "c", "c2", "d1", "d2", "d1p")}
    res["runs"] = runs
    recipe_s0 = f"{proxy}/{b.repository}-recipe:s0"
    recipe_s0_direct = f"{b.registry}/{b.repository}-recipe:s0"  # the same image, by the registry's own address
    multi_s0 = f"{proxy}/{b.repository}-multistage:s0"
    cm_s0_direct = f"{b.registry}/{b.repository}-multistage-cm:s0"  # (c2)'s --cache-from

    say("host inputs of every state (pip wheels, source trees)")
    b.prefetch()
    if b.no_backend_column:
        b.buildkit_missing = "left out of this run (--no-buildkit-backend)"
    else:
        b.setup_buildkit()
    ours = ["buildctl"] if b.buildkit_missing else ["buildctl", BUILDKIT]
    res["buildkit_backend"] = {"ran": not b.buildkit_missing, "why": b.buildkit_missing}
    # cold builds (informational: the Dockerfiles' builds are cold by their run label; buildctl's classic one
    # too where --quick is off, with the engine's step cache disabled; the BuildKit backend's is the command's).
    # buildctl's classic one runs in this process: its compile node's own seconds are the bisect's yardstick.
    say("cold builds of s0")
    res["cold"] = {tool: asdict(b.buildctl("s0", tool=tool, nocache=not b.quick, in_process=tool == "buildctl"))
                   for tool in ours}
    res["cold"].update({kind: asdict(b.dockerfile(kind, "s0")) for kind in DOCKERFILES})

    # The base through the relay first, uncounted: its blobs are in the registry already (nothing is sent), and
    # the engine learns that they are there under the relay's address too, so each tool's first push mounts the
    # base's layers instead of uploading them; otherwise whichever tool pushes first pays for the base.
    say("the base at the relay's address (uncounted: the registry has its blobs)")
    b.tag_push(b.target(b.work / "cache", None).base_ref, f"{proxy}/{b.base_path}")
    # publish s0 through the counting relay: buildctl's nodes, and both Dockerfiles' images (inline cache)
    say("first push of s0 (through the counting relay)")
    push: dict[str, dict[str, Any]] = {}
    u0 = counter.snapshot()[0]
    cli_push(b, proxy)
    push["buildctl"] = {"first": counter.snapshot()[0] - u0, "again": []}
    for kind, remote in (("multistage", multi_s0), ("recipe", recipe_s0)):
        u0 = counter.snapshot()[0]
        b.tag_push(f"buildctl-bench-{kind}:{b.run_id}-s0", remote)
        push[kind] = {"first": counter.snapshot()[0] - u0, "again": []}
    res["push"] = push
    if b.cache_server:
        # what (c2)'s fresh builder finds for the cache-mount file: its s0 with an inline cache (uncounted)
        b.tag_push(f"buildctl-bench-multistage-cm:{b.run_id}-s0", cm_s0_direct)
    if BUILDKIT in ours and not b.quick:
        # what (d) finds in the registry for the BuildKit backend's project: its s0, pushed by the same command
        # (uncounted: (e) is the push command's, whichever backend built the images)
        say("push of s0 built with the BuildKit backend (uncounted, for (d))")
        cli_push(b, b.registry, BUILDKIT)

    # the Dockerfiles each scenario builds besides the plain two: the cache-mount file where a compile changes,
    # the uv file where a runtime pin does
    extra = {"a": [], "b": ["multistage-uv"], "c": ["multistage-cm"]}
    for r in range(reps):
        say(f"repetition {r + 1} of {reps}")
        # back at s0 (the cold builds left every tool there for the first repetition), then (a) timed
        if r:
            for tool in ours:
                b.buildctl("s0", tool=tool)
            for kind in ("multistage", "recipe"):
                b.dockerfile(kind, "s0")
        # each repetition starts with another tool (the order rotates): what one build leaves the machine doing (the
        # engine committing, the kernel writing back a large layer) falls on each tool's figures in turn
        order = [*ours, *DOCKERFILES]
        order = order[r % len(order):] + order[:r % len(order)]
        for key, state in (("a", "s0"), ("b", f"b{r}"), ("c", f"c{r}")):
            for tool in (t for t in order if t in ours or t in ("multistage", "recipe") or t in extra[key]):
                runs[key][tool].append(b.buildctl(state, tool=tool) if tool in ours else b.dockerfile(tool, state))
        # (e) pushing the unchanged s0 again
        u0 = counter.snapshot()[0]
        cli_push(b, proxy)
        push["buildctl"]["again"].append(counter.snapshot()[0] - u0)
        for kind, remote in (("multistage", multi_s0), ("recipe", recipe_s0)):
            u0 = counter.snapshot()[0]
            done = docker(["push", remote])
            if done.returncode != 0:
                raise BenchError(f"docker push {remote} failed: {done.stderr.strip()[-800:]}")
            push[kind]["again"].append(counter.snapshot()[0] - u0)
        # (d) a second builder with an empty cache, sharing only the registry: a fresh engine (and buildctl cache)
        # per tool and scenario. --quick (counts, no timing claims) runs all of (d) on one second engine: buildctl's
        # (d1) then (d2), then the recipe's (BuildKit's cache is its own: the classic images there do not count),
        # and not with the BuildKit backend (CI time; the classic backend's (d) checks what buildctl shares).
        # The tools reach the registry itself here, not the counting relay ((e) needs it, (d) does not).
        # (c2) another PR of fastmath on a fresh builder that shares the registry and the compiler-cache server:
        # buildctl (its local cache root empty, the server's objects from the first builder's compiles) against the
        # cache-mount file (its mount empty there), --cache-from its s0; --quick: on the same second engine.
        with contextlib.ExitStack() as shared:
            e2_shared = shared.enter_context(second_engine(b.bridges)) if b.quick else None
            # buildctl runs as a builder of a fleet: --no-load (what the registry has stays there; a pull is for a
            # parent a build needs). (d1p, full runs only) is (d1) with the final image pulled into the engine.
            for tool in [*(["buildctl"] if b.quick else ours), "recipe", "multistage-cm"]:
                scenes = [("d1", "s0"), ("d2", f"b{r}")] + ([("d1p", "s0")] if tool != "recipe" and not b.quick else [])
                if tool == "multistage-cm":
                    scenes = []
                if b.cache_server and tool in ("buildctl", "multistage-cm"):
                    scenes.append(("c2", f"c2-{r}"))
                for key, state in scenes:
                    with contextlib.ExitStack() as own:
                        e2 = e2_shared or own.enter_context(second_engine(b.bridges))
                        cache = b.work / f"cache-{tool}-{'d' if b.quick else key}-{r}"
                        if tool not in DOCKERFILES:
                            runs[key][tool].append(b.buildctl(state, tool=tool, engine=e2, cache=cache,
                                                              registry=b.registry, no_load=key != "d1p",
                                                              read_pull=key == "c2"))
                        else:
                            runs[key][tool].append(b.dockerfile(tool, state, host=e2.address,
                                                                cache_from=recipe_s0_direct if tool == "recipe"
                                                                else cm_s0_direct))
                        if not b.quick:
                            shutil.rmtree(cache, ignore_errors=True)
    if any(runs["d1p"].values()):  # (d1p) is compared with the recipe's own (d1): the same builds
        runs["d1p"]["recipe"] = list(runs["d1"]["recipe"])
    if bisect:
        res["bisect"] = run_bisect(b, bisect[0], bisect[1], res["cold"]["buildctl"])
    res["summary"] = {k: {t: summary(v) for t, v in tools.items() if v} for k, tools in runs.items()}
    res["runs"] = {k: {t: [asdict(f) for f in v] for t, v in tools.items() if v} for k, tools in runs.items()}


DOCKERFILES = ("multistage", "multistage-cm", "multistage-uv", "recipe")


def bisect_alone(b: Bench, res: dict[str, Any], bisect: tuple[list[tuple[str, int]], int]) -> None:
    """--bisect-only: the cold build of s0 (buildctl, in this process, the engine's step cache off), then the
    bisect; no other scenario."""
    say("host inputs of every state (pip wheels, source trees)")
    b.prefetch()
    res["buildkit_backend"] = {"ran": False, "why": "left out of this run (--bisect-only)"}
    say("cold build of s0")
    res["cold"] = {"buildctl": asdict(b.buildctl("s0", nocache=True, in_process=True))}
    res["bisect"] = run_bisect(b, bisect[0], bisect[1], res["cold"]["buildctl"])
    res["summary"], res["runs"] = {}, {}


def bisect_order(n: int, culprit: int) -> list[tuple[str, int]]:
    """The states a bisection of fastmath's ``n`` commits after main builds, in its order, when commit ``culprit``
    (1..n) is the first bad one: the good end (s0, main: built already), the bad end (commit n), then the
    candidates lock/pinsteps.Bisection picks, as `buildctl bisect` judges them. (state, commit) pairs."""
    steps = [("s0", 0), (f"bis{n}", n)]
    search = Bisection(n)  # candidate i is commit i + 1; the one before the first (main) is good, the last bad
    while (i := search.next()) is not None:
        steps.append((f"bis{i + 1}", i + 1))
        search.record(i, i + 1 >= culprit)
    if search.culprit + 1 != culprit:
        raise BenchError(f"the bisect found commit {search.culprit + 1}, not {culprit}")
    return steps


def run_bisect(b: Bench, order: list[tuple[str, int]], culprit: int, cold: dict[str, Any]) -> dict[str, Any]:
    """Each state of the bisect built in turn on the first builder (its cache, the compiler-cache server), as
    `buildctl bisect` builds them; the compile nodes' seconds summed against the cold compile of s0."""
    say(f"bisect: {len(order) - 1} states after the good end, in the order a bisection builds them")
    steps = []
    for state, commit in order:
        f = b.buildctl(state, in_process=True)
        steps.append({"state": state, "commit": commit, **asdict(f)})
    total = sum(s["compile_s"] or 0.0 for s in steps)
    yardstick = cold.get("compile_s") or 0.0
    return {"commits": max(c for _, c in order), "culprit": culprit,
            "steps": steps, "compiles": sum(s["compiles"] for s in steps), "compile_s": total,
            "cold_compile_s": yardstick, "ratio": total / yardstick if yardstick else None,
            "note": "compile_s: the wheel:fastmath node's own seconds in each build (0 where the state was built "
                    "already); cold_compile_s: that node's seconds in the cold build of s0"}


def cli_push(b: Bench, registry: str, tool: str = "buildctl") -> None:
    """`buildctl push demo --registry REGISTRY` of s0 (node images by content tag, the final image), as a user
    runs it; the tags it makes in the engine are removed with the rest (they carry the run's repository)."""
    b.use("s0", tool)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(b.project_of(tool)), "-q", "push",
                           "demo", "--registry", registry], env={**b.env, "BUILDCTL_CACHE": str(b.cache_of(tool))},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BenchError(f"`buildctl push demo --registry {registry}` exited {done.returncode}:\n    {tail}")
    say(f"  buildctl push s0 ({tool}): {time.monotonic() - start:.2f}s")


@contextlib.contextmanager
def base_in(engine: Engine, registry: str, local_base: str) -> Iterator[None]:
    """The demo base in ``registry`` (pushed from ``local_base`` when missing; the tag made for it removed after)."""
    if registry_has(registry, BASE_PATH):
        yield
        return
    ref = f"{registry}/{BASE_PATH}"
    if not engine.image_exists(local_base):
        raise BenchError(f"the registry {registry} has no {BASE_PATH} and the engine has no {local_base}",
                         )
    say(f"pushing {local_base} to {ref}")
    engine.tag(local_base, ref)
    try:
        engine.push(ref)
        yield
    finally:
        engine.remove_image(ref)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="what the CI test runs (no timing claims): one repetition, sizes 2 and 4, the demo "
                         "without apt packages, its compile a pure-Python wheel build, all of (d) on one second "
                         "engine, and the growth stacks measured while the scenarios run")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each scenario (default 3, at most 5)")
    ap.add_argument("--weight", type=int, default=20, help="generated C files in the compile (default 20: one "
                    "compile takes about 30 s here)")
    ap.add_argument("--bisect", type=int, default=16, help="commits of the bisect inside fastmath (default 16, "
                    "--quick 2; 0: no bisect)")
    ap.add_argument("--sizes", default="10,50,200", help="component counts of the growth stacks (default 10,50,200)")
    ap.add_argument("--graph-nodes", type=int, default=200, help="also plan and no-op build a graph of about this "
                    "many nodes (compiled components, each compile a tiny stdlib wheel build; default 200, 0: not)")
    ap.add_argument("--bisect-only", action="store_true", help="only the cold build of s0 and the bisect")
    ap.add_argument("--no-buildkit-backend", action="store_true", help="leave buildctl's BuildKit backend column out "
                    "(a shorter run)")
    ap.add_argument("--registry", default=os.environ.get("BUILDCTL_BENCH_REGISTRY", DEMO_REGISTRY),
                    help=f"registry holding (or to be given) the demo base (default {DEMO_REGISTRY}, as make demo)")
    ap.add_argument("--base-image", default=LOCAL_BASE, help=f"local demo base to push when the registry lacks it "
                    f"(default {LOCAL_BASE})")
    ap.add_argument("--big-base", action="store_true", help="every scenario on a base of real size: the demo base "
                    "plus torch and its CUDA wheels from PyPI (bench/bigbase.py; made once, kept under a content tag "
                    "in the engine and the registry)")
    ap.add_argument("--big-base-wheels", type=Path, metavar="DIR", help="with --big-base: the folder to download "
                    "its wheels into (kept; default: a temporary folder, removed once the base is made)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for the JSON result")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (images are removed regardless)")
    ap.add_argument("--report", type=Path, metavar="FILE", help="print the benchmark tables (docs/benchmarks/) from a result file; "
                    "builds nothing")
    args = ap.parse_args(argv)
    if args.report:
        try:  # a result file is JSON of this bench's shape; anything else (a FIFO, 100,000 '[', a list) is said so
            print(markdown(untrusted.obj(untrusted.loads(untrusted.read_regular(args.report, REPORT_MAX)), "result")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"bench: error: {args.report}: not a result file of this bench ({exc!r})", file=sys.stderr)
            return 1
        return 0
    if args.quick:
        args.reps, args.weight, args.sizes, args.graph_nodes, args.bisect = 1, 0, "2,4", 0, min(args.bisect, 2)
    sizes = check_options(ap, args)
    if not Path(DOCKER).exists():
        print(f"bench: error: {DOCKER} (Debian's docker.io client, which can use BuildKit) is missing",
              file=sys.stderr)
        return 1
    # SIGTERM (a CI timeout, `kill`) goes the way of Ctrl-C: through the cleanup of what the run made
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _main(args, sizes)
    except (BenchError, SecondEngineError, CacheServerError, growth.GrowthError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
    except BuildctlError as exc:
        print(f"bench: error: {exc.what}" + (f"\n  why: {exc.why}" if exc.why else "")
              + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    return 1


REPORT_MAX = 64 << 20  # bytes of a result file --report reads at most (a full run's is about 100 KB)


def check_options(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """The growth sizes, once every option is checked (ap.error, exit 2: a value found wrong only after an hour of
    builds, or a traceback then, is worse). Returns the sizes of --sizes."""
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error(f"--sizes takes counts separated by commas, not {args.sizes!r}")
    if not sizes or sizes[0] < 1 or any(b <= a for a, b in itertools.pairwise(sizes)):
        # name_growth divides by the step between two sizes, and fits a line through them
        ap.error(f"--sizes takes increasing component counts of at least 1 (10,50,200), not {args.sizes!r}")
    if not 1 <= args.reps <= len(SIX_BUMPS):
        ap.error(f"--reps must be 1 to {len(SIX_BUMPS)}")
    if not 0 <= args.bisect <= 64:
        ap.error("--bisect must be 0 to 64")
    if args.weight < 0:
        ap.error(f"--weight must be 0 or more generated C files, not {args.weight}")
    if args.graph_nodes != 0 and args.graph_nodes < 6:
        ap.error(f"--graph-nodes must be 0 (no graph) or at least 6 (the 4 fixed nodes and one component's 2), "
                 f"not {args.graph_nodes}")
    host, colon, port = args.registry.rpartition(":")
    if not colon or not port.isdigit() or host.startswith("[") or syntax.host_port(args.registry):
        # the registry relay (bench/regproxy.py) connects to HOST and PORT
        ap.error(f"--registry must be HOST:PORT (a name or an IPv4 address), not {args.registry!r}")
    try:
        safepath.usable_folder(args.out, "--out")
    except UsageError as exc:
        ap.error(exc.what)
    return sizes


def _main(args: argparse.Namespace, sizes: list[int]) -> int:
    load_before = uptime()
    started = datetime.datetime.now(datetime.UTC)
    run_id = uuid.uuid4().hex[:10]
    work = Path(tempfile.mkdtemp(prefix="buildctl-bench-"))
    # buildctl is timed as a user runs it: with Python's bytecode cache (a session that sets
    # PYTHONDONTWRITEBYTECODE would make every buildctl process compile its modules again, ~0.3 s here)
    env = {k: v for k, v in os.environ.items() if k not in ("BUILDCTL_CACHE", "PYTHONDONTWRITEBYTECODE")}
    env["BUILDCTL_CONFIG"] = env.get("BUILDCTL_CONFIG", str(work / "no-config.toml"))
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    repository = f"bench-{run_id}/demo"
    engine = Engine(network_timeout=load_config(env).network_timeout, name=f"bench-{run_id}")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip() or os.environ.get("BENCH_COMMIT", "unknown")
    res: dict[str, Any] = {"run_id": run_id, "commit": commit, "command": [sys.executable, *sys.argv], "started": started.isoformat(timespec="seconds"),
                           "settings": {"reps": args.reps, "weight_files": args.weight, "sizes": sizes,
                                        "quick": args.quick, "registry": args.registry,
                                        "graph_nodes": args.graph_nodes, "bisect_commits": args.bisect,
                                        "buildkit_backend_column": not args.no_buildkit_backend,
                                        "bisect_only": args.bisect_only, "big_base": args.big_base,
                                        "bytecode_cache": True, "dropped_env": sorted(
                                            {"PYTHONDONTWRITEBYTECODE"} & set(os.environ))},
                           "load_before": load_before}
    b: Bench | None = None
    try:
        engine.ping()
        res["machine"] = machine(engine)
        with contextlib.ExitStack() as stack:
            stack.enter_context(base_in(engine, args.registry, args.base_image))
            # which base every row uses (the result's "base"): the demo base, or the big one (made once, kept)
            if args.big_base:
                res["base"] = bigbase.ensure(args.registry, BASE_PATH, args.big_base_wheels)
            else:
                res["base"] = bigbase.describe_demo(args.registry, BASE_PATH, args.base_image)
            proxy, counter = stack.enter_context(regproxy.relay(args.registry))
            # the compiler-cache server every buildctl build of the run uses (a fleet's setting): (c2)'s second
            # builder shares it with the first. Without redis-server, buildctl's local default and no (c2).
            why = cacheserver.missing()
            server = "" if why else stack.enter_context(cacheserver.redis_server())
            res["cache_server"] = {"ran": not why, "why": why, "url": server}
            if server:
                env["BUILDCTL_COMPILE_CACHE"] = server
                say(f"compiler-cache server {server} (BUILDCTL_COMPILE_CACHE)")
            else:
                say(f"(c2) is skipped: {why}")
            project = work / "project"
            (project / "pins").mkdir(parents=True)
            (project / "images").symlink_to(ROOT / "images")
            (project / "demo").symlink_to(ROOT / "demo")
            say(f"work folder {work}; fastmath with {args.weight} generated C file(s)")
            fm = fastmath_repo(work, args.weight, args.reps, light=args.quick, bisect=args.bisect, salt=run_id)
            # the bisect's culprit: about two thirds in, so that it goes both ways
            bisect = (bisect_order(args.bisect, max(1, (2 * args.bisect + 2) // 3)), max(1, (2 * args.bisect + 2) // 3)
                      ) if args.bisect else None
            states = manifests(args.registry, repository, fm, light=args.quick,
                               bisect=tuple(c for _, c in bisect[0] if c) if bisect else ())
            if args.big_base:
                states.texts = {k: bigbase.rebase(v, f"{args.registry}/{BASE_PATH}", res["base"]["ref"])
                                for k, v in states.texts.items()}
            say(f"locking {len(states.texts)} states with `buildctl lock demo`")
            lock_all(states, work, env)
            whdir = work / "wheelhouse"
            whdir.mkdir()
            (work / "logs").mkdir()
            b = Bench(work=work, project=project, engine=engine, registry=args.registry, repository=repository,
                      run_id=run_id, env=env, states=states, quick=args.quick, wheelhouse_dir=whdir,
                      cache_server=server, no_backend_column=args.no_buildkit_backend,
                      base_path=res["base"]["ref"].split("/", 1)[1] if args.big_base else BASE_PATH)
            base_ref = res["base"]["ref"] if args.big_base else f"{args.registry}/{BASE_PATH}"
            with wheelhouse.serve(whdir, port=0) as url:
                b.wheelhouse_url = url
                if args.bisect_only:
                    if not bisect:
                        raise BenchError("--bisect-only needs a bisect (--bisect N, N > 0)")
                    bisect_alone(b, res, bisect)
                elif args.quick:
                    # --quick (counts, no timing claims): the growth stacks (--local, their own cache, nothing
                    # through the counting relay) are built and measured while the scenarios run
                    with ThreadPoolExecutor(max_workers=1) as pool:
                        beside = pool.submit(growth_or_error, b, sizes, args.reps, base_ref)
                        scenarios(b, args.reps, proxy, counter, res, bisect)
                        res["growth"] = beside.result()
                else:
                    scenarios(b, args.reps, proxy, counter, res, bisect)
            if args.bisect_only:
                res["growth"] = {}
            elif not args.quick:
                res["growth"] = growth_or_error(b, sizes, args.reps, base_ref, args.graph_nodes)
    finally:
        if b is not None:
            say("removing what the bench made")
            b.cleanup()
            res["second_engine_bridges"] = b.bridges
        engine.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = uptime()
    res["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / (f"{started.strftime('%Y%m%dT%H%M%SZ')}{'-quick' if args.quick else ''}"
                      f"{'-bigbase' if args.big_base else ''}.json")
    out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(table(res))
    print(f"\nbase: {bigbase.label(res.get('base'))}")
    print(f"machine: {res['machine']['cores']} cores, {res['machine']['memory_gib']} GiB, engine "
          f"{res['machine']['engine']}; load before: {load_before}; after: {res['load_after']}")
    print(f"results: {out}")
    return 1 if res["growth"].get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
