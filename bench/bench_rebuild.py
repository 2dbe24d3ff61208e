#!/usr/bin/env python3
"""Rebuild cost of the demo stack: buildctl against what users would write instead (issue 14).

Side by side, on one engine, from one lock per state (each made by `buildctl lock`, as a user would after
editing the manifest), three ways to build the demo stack:

  buildctl     content-keyed nodes (`buildctl build`; no registry except in (d) and (e));
  multistage   buildctl's own graph as one multi-stage Dockerfile (bench/baselines.py);
  recipe       one stage in the seed guide's order: system packages and downloads, pip, the compile
               inside the same image, the install of what it built, the entrypoint.

Both Dockerfiles are built with BuildKit (DOCKER_BUILDKIT=1, Debian's /usr/bin/docker). Scenarios, each
repeated --reps times (each repetition makes a change never built before, so no cache holds it):

  (a) nothing changed;                          (b) a runtime pip pin bumped (six);
  (c) fastmath's PR list changed (a PR added);  (d) a second builder: a second engine with an empty cache
      that shares only the registry, with (d1) nothing changed and (d2) the pin of (b) bumped: buildctl
      against the recipe built with BuildKit --cache-from the image pushed with an inline cache;
  (e) pushing an unchanged image again: bytes sent to the registry (through a counting relay).

Figures: wall time, nodes (buildctl) or build steps (Dockerfiles) rebuilt, compiles run. The fastmath
compile gets realistic weight from generated C sources (--weight files, about 1.5 s of gcc CPU time each here;
the default 20 makes one compile about 30 s).
Then `plan` and no-op `build` time and peak memory of generated stacks of 10, 50 and 200 source-tree
components (--sizes). A table goes to stdout, every repetition's figures with the machine to
bench/results/<time>.json (--out).

    python3 bench/bench_rebuild.py [--reps N] [--weight N] [--sizes 10,50,200] [--registry HOST:PORT]
    python3 bench/bench_rebuild.py --quick    # CI: one repetition, small sizes, no apt, a pure-Python "compile",
                                              # all of (d) on one second engine, growth beside the scenarios

Needs the engine, a registry with the demo base (`make demo-up`; `make bench` runs it first), root for the
second engine, and BUILDCTL_CA_BUNDLE where pip needs a proxy's CA (`make bench` passes the host bundle).
Everything it makes (images, tags, containers, the second engine, pushed manifests) is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import baselines, growth, regproxy  # noqa: E402
from bench.engine2 import SecondEngineError, second_engine  # noqa: E402
from buildctl.build import pipeline, wheelhouse  # noqa: E402
from buildctl.config import Config, load_config  # noqa: E402
from buildctl.engine.engine import Engine  # noqa: E402
from buildctl.errors import BuildctlError  # noqa: E402
from buildctl.graph.specs import CompileEnvNodeSpec, PipPin, PythonNodeSpec  # noqa: E402
from buildctl.services import building, target  # noqa: E402
from buildctl.sources.sources import Sources  # noqa: E402

DEMO_REGISTRY = "127.0.0.1:5000"
BASE_PATH = "buildctl/demo-base:bookworm"
LOCAL_BASE = "buildctl-demo-base:bookworm"
DOCKER = "/usr/bin/docker"  # Debian's client: the engine's BuildKit without buildx (ENGINE.md)
PR7 = "      - {number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}   # adds clamp()\n"
SIX = "    - six==1.16.0\n"
SIX_BUMPS = ["1.17.0", "1.15.0", "1.14.0", "1.13.0", "1.12.0"]  # one per repetition: never built before
# PRs the bench adds to fastmath, one per repetition (numbers no demo bundle uses).
PR_BASE = 70
FASTMATH_COMMIT = "2ce4723579053c914fae1dee4bc38f8fd4da5557"
GIT_DATE = "2025-01-06T12:00:00+00:00"
TOOLS = ("buildctl", "multistage", "recipe")


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why (printed without a traceback)."""


class Quiet:
    def node(self, name: str, state: str, detail: str = "") -> None:
        pass

    def log(self, name: str, line: str) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class Fig:
    seconds: float
    rebuilt: int  # nodes (buildctl) or build steps (Dockerfiles) that ran
    total: int
    compiles: int
    detail: list[str] = field(default_factory=list)


_T0 = time.monotonic()


def say(text: str) -> None:
    print(f"bench: [{time.monotonic() - _T0:6.1f}s] {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ setup


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **growth.GIT_ENV, "GIT_AUTHOR_DATE": GIT_DATE, "GIT_COMMITTER_DATE": GIT_DATE}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def weight_source(i: int, functions: int = 40) -> str:
    """One generated C file: ``functions`` loops that gcc -O2 works on (about 2 s of gcc here)."""
    out = [f"/* generated by bench/bench_rebuild.py: compile weight, file {i} */", "#include <stddef.h>"]
    for f in range(functions):
        out += [f"double bench_w{i}_{f}(const double *x, size_t n) {{", "    double acc = 0.0;",
                "    for (size_t k = 0; k + 8 < n; k++) {"]
        out += [f"        acc += (x[k + {j % 8}] * {j + 1}.5 - x[k + {(j * 3) % 8}] / {j + 2}.25)"
                f" * (acc > {j}.0 ? {f + 1}.0 : -{j + 1}.0);" for j in range(24)]
        out += ["    }", "    return acc;", "}"]
    return "\n".join(out) + "\n"


def fastmath_repo(work: Path, weight: int, reps: int, *, light: bool = False) -> tuple[Path, str, list[str]]:
    """The bench's copy of the fastmath repository: main carries ``weight`` generated C files (compiled into
    the extension), and refs/pull/(PR_BASE+r)/head for each repetition r is a one-line change on top of it.
    ``light`` (--quick): main builds no C extension, so that the compile needs no compiler (and no apt).
    Returns (bare repository, main's SHA, the PR heads)."""
    bare = work / "git" / "fastmath.git"
    git("init", "-q", "--bare", str(bare))
    git("-C", str(bare), "fetch", "-q", str(ROOT / "demo" / "sources" / "fastmath.bundle"), "refs/*:refs/*")
    tree = work / "git" / "fastmath"
    git("clone", "-q", str(bare), str(tree))
    git("-C", str(tree), "checkout", "-q", "-B", "main", FASTMATH_COMMIT)
    if weight:
        names = []
        for i in range(weight):
            (tree / "fastmath" / f"_weight{i}.c").write_text(weight_source(i))
            names.append(f"fastmath/_weight{i}.c")
        setup = (tree / "setup.py").read_text()
        old = '["fastmath/_core.c"]'
        if old not in setup:
            raise BenchError(f"demo/sources/fastmath.bundle: setup.py no longer lists {old}")
        (tree / "setup.py").write_text(setup.replace(old, json.dumps(["fastmath/_core.c", *names])))
        git("-C", str(tree), "add", "-A")
        git("-C", str(tree), "commit", "-q", "-m", f"bench: {weight} generated C files (compile weight)")
    if light:
        setup = (tree / "setup.py").read_text()
        if "    ext_modules=[\n" not in setup:
            raise BenchError("demo/sources/fastmath.bundle: setup.py has no `ext_modules=[` line any more")
        (tree / "setup.py").write_text(setup.replace("    ext_modules=[\n", "    ext_modules=[] and [\n"))
        git("-C", str(tree), "commit", "-q", "-am", "bench (quick): no C extension, a pure-Python wheel")
    main = git("-C", str(tree), "rev-parse", "HEAD")
    git("-C", str(tree), "push", "-q", "-f", "origin", "HEAD:refs/heads/main")
    heads = []
    for r in range(reps):
        git("-C", str(tree), "checkout", "-q", main)
        with (tree / "fastmath" / "_core.c").open("a") as f:
            f.write(f"/* bench: PR {PR_BASE + r} */\n")
        git("-C", str(tree), "commit", "-q", "-am", f"bench PR {PR_BASE + r}: a one-line change")
        heads.append(git("-C", str(tree), "rev-parse", "HEAD"))
        git("-C", str(tree), "push", "-q", "origin", f"HEAD:refs/pull/{PR_BASE + r}/head")
    return bare, main, heads


@dataclass
class States:
    """Manifest text per state: s0, and b<r>, c<r> per repetition; their locks once made."""

    texts: dict[str, str]
    locks: dict[str, str] = field(default_factory=dict)


APT = """apt:
  packages:
    - jq=1.6*          # a pattern: the lock resolves it to bookworm's exact version
    - less             # unversioned: the lock pins it
"""
BUILD_APT = "      apt: [gcc, libc6-dev, python3-dev, git]   # git: the wheel version carries +<short sha>, as TE's does\n"


def manifests(registry: str, repository: str, repo: Path, main: str, heads: list[str], *,
              light: bool = False) -> States:
    # demo-trainer stays ../demo/sources/ (each project has a `demo` link to the checkout's); fastmath is the
    # bench's own copy, by file:// URL (a manifest names no absolute host path)
    text = (ROOT / "pins" / "demo.yaml").read_text()
    if "../demo/sources/fastmath.bundle" not in text:
        raise BenchError("pins/demo.yaml no longer takes fastmath from ../demo/sources/fastmath.bundle")
    text = text.replace("../demo/sources/fastmath.bundle", repo.as_uri()).replace(FASTMATH_COMMIT, main)
    text = text.replace("127.0.0.1:5000", registry)
    text = re.sub(r"(?m)^  repository: .*$", f"  repository: {repository}", text)
    for needle in (PR7, SIX, *((APT, BUILD_APT) if light else ())):
        if needle not in text:
            raise BenchError(f"pins/demo.yaml no longer holds the line the bench changes:\n{needle}")
    if light:  # --quick: no apt packages at all (what costs most in a cold build here)
        text = text.replace(APT, "").replace(BUILD_APT, "")
    texts = {"s0": text}
    for r, head in enumerate(heads):
        texts[f"b{r}"] = text.replace(SIX, f"    - six=={SIX_BUMPS[r]}\n")
        texts[f"c{r}"] = text.replace(PR7, PR7 + f"      - {{number: {PR_BASE + r}, head: {head}}}   # bench\n")
    return States(texts=texts)


def lock_all(states: States, work: Path, env: dict[str, str]) -> None:
    """`buildctl lock demo` once per state, each in a project and cache of its own (a few at a time)."""
    def one(name: str) -> tuple[str, str]:
        project = work / "locks" / name
        (project / "pins").mkdir(parents=True)
        (project / "images").symlink_to(ROOT / "images")
        (project / "demo").symlink_to(ROOT / "demo")
        (project / "pins" / "demo.yaml").write_text(states.texts[name])
        done = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(project), "-q", "lock", "demo"],
                              env={**env, "BUILDCTL_CACHE": str(work / "lockcache" / name)},
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BenchError(f"`buildctl lock demo` of state {name} failed (exit {done.returncode}):\n    {tail}")
        return name, (project / "pins" / "demo.lock.json").read_text()

    with ThreadPoolExecutor(max_workers=3) as pool:
        for name, text in pool.map(one, states.texts):
            states.locks[name] = text


def registry_has(registry: str, path: str) -> bool:
    name, tag = path.rsplit(":", 1)
    req = urllib.request.Request(f"http://{registry}/v2/{name}/manifests/{tag}", method="HEAD", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError:
        return False
    except OSError as exc:
        raise BenchError(f"the registry {registry} does not answer ({exc})",
                         ) from exc


def docker(args: list[str], *, host: str | None = None, buildkit: bool = False,
           timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if host:
        env["DOCKER_HOST"] = host
    if buildkit:
        env["DOCKER_BUILDKIT"] = "1"
    return subprocess.run([DOCKER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


# ------------------------------------------------------------------------------------------ the bench


_BUILT = re.compile(r"built (\d+) node\(s\)(?: \(([^)]*)\))?")
_STEP = re.compile(r"^#(\d+) \[([^\]]+)\] (\S+)")
_CACHED = re.compile(r"^#(\d+) CACHED\s*$")
_MARK = re.compile(rf"^#\d+ \d+\.\d+ {baselines.COMPILE_MARK} (\S+)")


def parse_buildkit(output: str) -> tuple[int, int, list[str]]:
    """(steps that ran, steps, compiles that ran) from `docker build --progress=plain` output."""
    steps: dict[str, str] = {}
    cached: set[str] = set()
    compiles: list[str] = []
    for line in output.splitlines():
        m = _STEP.match(line)
        if m and not m.group(2).startswith("internal") and m.group(3) in ("RUN", "COPY", "ADD"):
            steps[m.group(1)] = m.group(3)
        c = _CACHED.match(line)
        if c:
            cached.add(c.group(1))
        k = _MARK.match(line)
        if k:
            compiles.append(k.group(1))
    ran = [s for s in steps if s not in cached]
    return len(ran), len(steps), compiles


@dataclass
class Bench:
    work: Path
    project: Path
    engine: Engine
    registry: str  # holds the base; where (d) shares nodes
    repository: str
    run_id: str
    env: dict[str, str]
    states: States
    quick: bool
    wheelhouse_dir: Path
    wheelhouse_url: str = ""
    made_refs: list[tuple[str, str]] = field(default_factory=list)  # (engine address or "", ref) to remove
    bridges: list[str] = field(default_factory=list)  # of the second engines started

    def config(self, cache: Path) -> Config:
        return load_config({**self.env, "BUILDCTL_CACHE": str(cache)})

    def use(self, state: str) -> None:
        pins = self.project / "pins"
        (pins / "demo.yaml").write_text(self.states.texts[state])
        (pins / "demo.lock.json").write_text(self.states.locks[state])

    def target(self, cache: Path, registry: str | None) -> target.Target:
        return target.load(self.project, self.config(cache), "demo", None, registry=registry,
                           local_only=registry is None, skip_smoke=True)

    # -- buildctl

    def buildctl(self, state: str, *, engine: Engine | None = None, cache: Path | None = None,
                 registry: str | None = None, nocache: bool = False) -> Fig:
        """`buildctl build demo` of ``state``: the command a user runs, timed from its start (the Python start-up
        and imports included). ``nocache`` (the cold build): in this process, with the engine's step cache off,
        which the command has no option for."""
        self.use(state)
        cache = cache or self.work / "cache"
        eng = engine or self.engine
        t = self.target(cache, registry)
        for n in t.graph.nodes:
            if n.kind != "base":
                self.made_refs.append((eng.address, t.refs[n.name]))
        if nocache:
            config = self.config(cache)
            start = time.monotonic()
            report = building.build_target(t, engines=[eng], config=config, progress=Quiet(), project=self.project,
                                           sources=Sources.from_config(config, base_dir=self.project / "pins"),
                                           options=pipeline.Options(jobs=2, skip_smoke=True, nocache=True))
            seconds = time.monotonic() - start
            built = report.built
        else:
            argv = [sys.executable, "-m", "buildctl", "--project", str(self.project), "-q", "build", "demo",
                    "--skip-smoke", "--engine", eng.address,
                    *(["--registry", registry] if registry else ["--local"])]
            start = time.monotonic()
            done = subprocess.run(argv, env={**self.env, "BUILDCTL_CACHE": str(cache)}, capture_output=True,
                                  text=True, check=False)
            seconds = time.monotonic() - start
            if done.returncode != 0:
                tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise BenchError(f"`buildctl build demo` of state {state} exited {done.returncode}:\n    {tail}")
            m = _BUILT.search(done.stdout)
            if m is None:
                raise BenchError(f"`buildctl build demo` printed no 'built N node(s)' line:\n{done.stdout[-800:]}")
            built = [x for x in (m.group(2) or "").split(", ") if x]
            if len(built) != int(m.group(1)):
                raise BenchError(f"cannot read the built nodes from {m.group(0)!r}")
        say(f"  buildctl {state} on {eng.name}: {seconds:.2f}s, built {', '.join(built) or 'nothing'}")
        return Fig(seconds=seconds, rebuilt=len(built), total=len(t.graph.nodes) - 1,
                   compiles=sum(1 for b in built if b.startswith("wheel:")), detail=built)

    def prefetch(self) -> None:
        """The host inputs of every state, before anything is timed: pip wheels (one pip run per distinct name),
        prepared source trees. What is timed is then the build; buildctl would otherwise pay, inside its time,
        the downloads and git work the Dockerfiles' contexts get for free."""
        cache = self.work / "cache"
        pins: dict[tuple[str, str | None], PipPin] = {}
        for state in self.states.texts:
            self.use(state)
            t = self.target(cache, None)
            for n in t.graph.nodes:
                if isinstance(n.spec, PythonNodeSpec | CompileEnvNodeSpec):
                    pins.update({(p.name, p.version): p for p in n.spec.to_install})
        t = self.target(cache, None)
        wheelhouse.download(sorted(pins.values(), key=lambda p: (p.name, p.version or "")),
                            folder=cache / "downloads" / "pip", python=t.variant.python, platform=t.graph.platform,
                            config=self.config(cache), log_file=self.work / "logs" / "prefetch-pip.log")
        for state in self.states.texts:
            self.inputs(state)

    # -- the Dockerfiles

    def inputs(self, state: str) -> baselines.Inputs:
        """The source trees and downloads of ``state``, as buildctl's host step prepared them."""
        self.use(state)
        cache = self.work / "cache"
        config = self.config(cache)
        t = self.target(cache, None)
        assert t.vlock is not None
        sources = Sources.from_config(config, base_dir=self.project / "pins")
        prepared = building.LockedSources(t.manifest, t.vlock, sources)  # as buildctl's build prepares them
        trees = {c.name: prepared.export(c.name) for c in t.manifest.components}
        # the pip wheels buildctl downloaded for the state (runtime and build requirements) go in the wheelhouse
        wheelhouse.link_tree(self.wheelhouse_dir,
                             {p.name: p for p in (cache / "downloads" / "pip").glob("*.whl")})
        return baselines.Inputs(trees=trees, downloads=cache / "downloads" / "files")

    def dockerfile(self, kind: str, state: str, *, host: str | None = None, cache_from: str | None = None) -> Fig:
        inputs = self.inputs(state)
        t = self.target(self.work / "cache", None)
        ctx = Path(tempfile.mkdtemp(prefix=f"ctx-{kind}-", dir=self.work))
        try:
            write = baselines.multistage if kind == "multistage" else baselines.recipe
            final = write(t, ctx, inputs, self.run_id)
            for dirpath, dirnames, filenames in os.walk(ctx):
                for name in [*dirnames, *filenames]:
                    p = Path(dirpath) / name
                    if not p.is_symlink():
                        os.utime(p, (315532800, 315532800))
            tag = f"buildctl-bench-{kind}:{self.run_id}-{state}"
            self.made_refs.append((host or "", tag))
            args = ["build", "--progress=plain", "--network=host", "--target", final, "-t", tag,
                    "--build-arg", f"BUILDCTL_WHEELHOUSE={self.wheelhouse_url}",
                    "--build-arg", f"{baselines.RUN_ARG}={self.run_id}", "--build-arg", "BUILDKIT_INLINE_CACHE=1"]
            if cache_from:
                args += ["--cache-from", cache_from]
            start = time.monotonic()
            done = docker([*args, str(ctx)], host=host, buildkit=True)
            seconds = time.monotonic() - start
        finally:
            shutil.rmtree(ctx, ignore_errors=True)
        output = done.stdout + done.stderr
        (self.work / "logs" / f"{kind}-{state}-{time.monotonic_ns()}.log").write_text(output)
        if done.returncode != 0:
            tail = "\n    ".join(output.strip().splitlines()[-20:])
            raise BenchError(f"docker build of the {kind} Dockerfile ({state}) failed:\n    {tail}")
        ran, total, compiles = parse_buildkit(output)
        say(f"  {kind} {state}{' on ' + host if host else ''}: {seconds:.2f}s, {ran} of {total} steps ran, "
            f"{len(compiles)} compile(s)")
        return Fig(seconds=seconds, rebuilt=ran, total=total, compiles=len(compiles), detail=compiles)

    def tag_push(self, local: str, remote: str, *, host: str | None = None) -> None:
        for args in (["tag", local, remote], ["push", remote]):
            done = docker(args, host=host)
            if done.returncode != 0:
                raise BenchError(f"docker {' '.join(args)} failed: {(done.stdout + done.stderr).strip()[-800:]}")
        self.made_refs.append((host or "", remote))

    # -- cleanup

    def cleanup(self) -> None:
        for address, ref in reversed(self.made_refs):
            if address and address != self.engine.address:
                continue  # on the second engine: gone with it
            with contextlib.suppress(BuildctlError):
                self.engine.remove_image(ref, force=True)
        # images of the Dockerfiles' builds carry the run's label; parents only go after their children
        for _ in range(20):
            ids = docker(["images", "-aq", "--filter", f"label={baselines.LABEL}={self.run_id}"]).stdout.split()
            if not ids:
                break
            docker(["rmi", "-f", *dict.fromkeys(ids)])
        # tags `buildctl push` made (the final image's), and anything else named after the run
        names = docker(["images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
        for ref in names:
            if f"bench-{self.run_id}" in ref:
                with contextlib.suppress(BuildctlError):
                    self.engine.remove_image(ref, force=True)
        delete_repositories(self.registry, f"bench-{self.run_id}")


def _get(url: str, method: str = "GET", accept: str = "") -> tuple[bytes, dict[str, str]]:
    req = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read(), dict(r.headers)


def delete_repositories(registry: str, prefix: str) -> None:
    """Delete every tag of the registry's repositories under ``prefix`` (blobs go at its next garbage collection)."""
    accept = ("application/vnd.docker.distribution.manifest.v2+json, "
              "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json")
    try:
        repos = json.loads(_get(f"http://{registry}/v2/_catalog?n=1000")[0]).get("repositories") or []
        for repo in (r for r in repos if r.startswith(prefix)):
            tags = json.loads(_get(f"http://{registry}/v2/{repo}/tags/list")[0]).get("tags") or []
            for tag in tags:
                with contextlib.suppress(OSError):
                    _, headers = _get(f"http://{registry}/v2/{repo}/manifests/{tag}", "HEAD", accept)
                    digest = headers.get("Docker-Content-Digest", "")
                    if digest:
                        _get(f"http://{registry}/v2/{repo}/manifests/{digest}", "DELETE")
    except (OSError, ValueError) as exc:
        say(f"could not remove the run's repositories from {registry}: {exc}")


# ------------------------------------------------------------------------------------------ figures


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


# ------------------------------------------------------------------------------------------ main


def run_growth(b: Bench, sizes: list[int], reps: int, base_image: str) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for n in sizes:
        say(f"growth: {n} source-tree components")
        gp = b.work / f"growth-{n}"
        (gp / "pins").mkdir(parents=True)
        (gp / "images").symlink_to(ROOT / "images")
        shas = growth.make_repo(b.work / "git" / f"gen-{n}.git", n)
        (gp / "pins" / "gen.yaml").write_text(growth.manifest(n, b.work / "git" / f"gen-{n}.git", shas, base_image,
                                                                  f"bench-{b.run_id}/gen{'' if b.quick else n}"))
        # a cache and a repository per size, so that no size's figures carry another's state (sharing them made
        # plan of 200 components 0.25 s slower, seen in one run); --quick (no timing claims) shares both: system
        # and python are the same for all sizes, so each untimed first build there only builds what differs
        cache = b.work / ("growth-cache" if b.quick else f"growth-cache-{n}")
        env = {**b.env, "BUILDCTL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
        locked = growth.measure(growth.buildctl(gp, "lock", "gen"), env, f"lock of the {n}-component stack")
        env_t = {**b.env, "BUILDCTL_CACHE": str(cache)}
        t = target.load(gp, load_config(env_t), "gen", None, local_only=True, skip_smoke=True)
        b.made_refs += [("", t.refs[x.name]) for x in t.graph.nodes if x.kind != "base"]
        first = growth.measure(growth.buildctl(gp, "build", "gen", "--local", "--skip-smoke"), env,
                               f"first build of the {n}-component stack")
        say(f"  lock {locked.seconds:.2f}s, first build {first.seconds:.2f}s (untimed); then {reps} plan(s) and "
            f"{reps} no-op build(s)")
        plans = [growth.measure(growth.buildctl(gp, "plan", "gen", "--json"), env, "plan") for _ in range(reps)]
        noops = [growth.measure(growth.buildctl(gp, "build", "gen", "--local", "--skip-smoke"), env, "no-op build")
                 for _ in range(reps)]
        out.append({"components": n, "nodes": len(t.graph.nodes),
                    "plan": _measured(plans), "noop": _measured(noops)})
    return {"sizes": out,
            "plan_growth": growth.name_growth(sizes, [g["plan"]["cpu_runs_s"] for g in out]),
            "noop_growth": growth.name_growth(sizes, [g["noop"]["cpu_runs_s"] for g in out]),
            "plan_growth_wall": growth.name_growth(sizes, [g["plan"]["runs_s"] for g in out]),
            "noop_growth_wall": growth.name_growth(sizes, [g["noop"]["runs_s"] for g in out]),
            "note": "each figure is one process (python start-up and imports included); the growth is named from "
                    "the CPU time (user + system, children included) of every repetition (growth.name_growth); "
                    "*_growth_wall names it from the wall times"}


def _measured(ms: list[growth.Measured]) -> dict[str, Any]:
    return {"seconds": spread([m.seconds for m in ms]), "runs_s": [m.seconds for m in ms],
            "cpu_s": spread([m.cpu_s for m in ms]), "cpu_runs_s": [m.cpu_s for m in ms],
            "peak_mib": max(m.peak_mib for m in ms)}


def growth_or_error(b: Bench, sizes: list[int], reps: int, base_ref: str) -> dict[str, Any]:
    """run_growth's result, or {"error": ...}: the scenarios' figures are kept, and the run still fails (exit 1)
    after writing them."""
    try:
        return run_growth(b, sizes, reps, base_ref)
    except (growth.GrowthError, BuildctlError, subprocess.CalledProcessError) as exc:
        say(f"growth failed: {exc}")
        return {"error": str(exc)}


def scenarios(b: Bench, reps: int, proxy: str, counter: regproxy.Counter, res: dict[str, Any]) -> None:
    runs: dict[str, dict[str, list[Fig]]] = {k: {t: [] for t in TOOLS} for k in ("a", "b", "c", "d1", "d2")}
    res["runs"] = runs
    recipe_s0 = f"{proxy}/{b.repository}-recipe:s0"
    recipe_s0_direct = f"{b.registry}/{b.repository}-recipe:s0"  # the same image, by the registry's own address
    multi_s0 = f"{proxy}/{b.repository}-multistage:s0"

    say("host inputs of every state (pip wheels, source trees)")
    b.prefetch()
    # cold builds (informational: the Dockerfiles' builds are cold by their run label; buildctl's too
    # where --quick is off, with the engine's step cache disabled)
    say("cold builds of s0")
    res["cold"] = {"buildctl": asdict(b.buildctl("s0", nocache=not b.quick)),
                   "multistage": asdict(b.dockerfile("multistage", "s0")),
                   "recipe": asdict(b.dockerfile("recipe", "s0"))}

    # The base through the relay first, uncounted: its blobs are in the registry already (nothing is sent), and
    # the engine learns that they are there under the relay's address too, so each tool's first push mounts the
    # base's layers instead of uploading them; otherwise whichever tool pushes first pays for the base.
    say("the base at the relay's address (uncounted: the registry has its blobs)")
    b.tag_push(b.target(b.work / "cache", None).base_ref, f"{proxy}/{BASE_PATH}")
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

    for r in range(reps):
        say(f"repetition {r + 1} of {reps}")
        # back at s0 (the cold builds left every tool there for the first repetition), then (a) timed
        if r:
            b.buildctl("s0")
            for kind in ("multistage", "recipe"):
                b.dockerfile(kind, "s0")
        runs["a"]["buildctl"].append(b.buildctl("s0"))
        for kind in ("multistage", "recipe"):
            runs["a"][kind].append(b.dockerfile(kind, "s0"))
        for key in ("b", "c"):
            state = f"{key}{r}"
            runs[key]["buildctl"].append(b.buildctl(state))
            for kind in ("multistage", "recipe"):
                runs[key][kind].append(b.dockerfile(kind, state))
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
        # (d1) then (d2), then the recipe's (BuildKit's cache is its own: the classic images there do not count).
        # Both tools reach the registry itself here, not the counting relay ((e) needs it, (d) does not).
        with contextlib.ExitStack() as shared:
            e2_shared = shared.enter_context(second_engine(b.bridges)) if b.quick else None
            for tool in ("buildctl", "recipe"):
                for key, state in (("d1", "s0"), ("d2", f"b{r}")):
                    with contextlib.ExitStack() as own:
                        e2 = e2_shared or own.enter_context(second_engine(b.bridges))
                        cache = b.work / f"cache-{tool}-{'d' if b.quick else key}-{r}"
                        if tool == "buildctl":
                            runs[key][tool].append(b.buildctl(state, engine=e2, cache=cache, registry=b.registry))
                        else:
                            runs[key][tool].append(b.dockerfile("recipe", state, host=e2.address,
                                                                cache_from=recipe_s0_direct))
                        if not b.quick:
                            shutil.rmtree(cache, ignore_errors=True)
    res["summary"] = {k: {t: summary(v) for t, v in tools.items() if v} for k, tools in runs.items()}
    res["runs"] = {k: {t: [asdict(f) for f in v] for t, v in tools.items() if v} for k, tools in runs.items()}


def cli_push(b: Bench, registry: str) -> None:
    """`buildctl push demo --registry REGISTRY` of s0 (node images by content tag, the final image), as a user
    runs it; the tags it makes in the engine are removed with the rest (they carry the run's repository)."""
    b.use("s0")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(b.project), "-q", "push", "demo",
                           "--registry", registry], env={**b.env, "BUILDCTL_CACHE": str(b.work / "cache")},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BenchError(f"`buildctl push demo --registry {registry}` exited {done.returncode}:\n    {tail}")
    say(f"  buildctl push s0: {time.monotonic() - start:.2f}s")


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
    ap.add_argument("--sizes", default="10,50,200", help="component counts of the growth stacks (default 10,50,200)")
    ap.add_argument("--registry", default=os.environ.get("BUILDCTL_BENCH_REGISTRY", DEMO_REGISTRY),
                    help=f"registry holding (or to be given) the demo base (default {DEMO_REGISTRY}, as make demo)")
    ap.add_argument("--base-image", default=LOCAL_BASE, help=f"local demo base to push when the registry lacks it "
                    f"(default {LOCAL_BASE})")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for the JSON result")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (images are removed regardless)")
    ap.add_argument("--report", type=Path, metavar="FILE", help="print the README's tables from a result file; "
                    "builds nothing")
    args = ap.parse_args(argv)
    if args.report:
        try:
            print(markdown(json.loads(args.report.read_text())))
        except (OSError, ValueError, KeyError) as exc:
            print(f"bench: error: {args.report}: not a result file of this bench ({exc!r})", file=sys.stderr)
            return 1
        return 0
    if args.quick:
        args.reps, args.weight, args.sizes = 1, 0, "2,4"
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error(f"--sizes takes counts separated by commas, not {args.sizes!r}")
    if not 1 <= args.reps <= len(SIX_BUMPS):
        ap.error(f"--reps must be 1 to {len(SIX_BUMPS)}")
    if not Path(DOCKER).exists():
        print(f"bench: error: {DOCKER} (Debian's docker.io client, which can use BuildKit) is missing",
              file=sys.stderr)
        return 1
    # SIGTERM (a CI timeout, `kill`) goes the way of Ctrl-C: through the cleanup of what the run made
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _main(args, sizes)
    except (BenchError, SecondEngineError, growth.GrowthError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
    except BuildctlError as exc:
        print(f"bench: error: {exc.what}" + (f"\n  why: {exc.why}" if exc.why else "")
              + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    return 1


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
                                        "bytecode_cache": True, "dropped_env": sorted(
                                            {"PYTHONDONTWRITEBYTECODE"} & set(os.environ))},
                           "load_before": load_before}
    b: Bench | None = None
    try:
        engine.ping()
        res["machine"] = machine(engine)
        with base_in(engine, args.registry, args.base_image), regproxy.relay(args.registry) as (proxy, counter):
            project = work / "project"
            (project / "pins").mkdir(parents=True)
            (project / "images").symlink_to(ROOT / "images")
            (project / "demo").symlink_to(ROOT / "demo")
            say(f"work folder {work}; fastmath with {args.weight} generated C file(s)")
            repo, main, heads = fastmath_repo(work, args.weight, args.reps, light=args.quick)
            states = manifests(args.registry, repository, repo, main, heads, light=args.quick)
            say(f"locking {len(states.texts)} states with `buildctl lock demo`")
            lock_all(states, work, env)
            whdir = work / "wheelhouse"
            whdir.mkdir()
            (work / "logs").mkdir()
            b = Bench(work=work, project=project, engine=engine, registry=args.registry, repository=repository,
                      run_id=run_id, env=env, states=states, quick=args.quick, wheelhouse_dir=whdir)
            base_ref = f"{args.registry}/{BASE_PATH}"
            with wheelhouse.serve(whdir, port=0) as url:
                b.wheelhouse_url = url
                if args.quick:
                    # --quick (counts, no timing claims): the growth stacks (--local, their own cache, nothing
                    # through the counting relay) are built and measured while the scenarios run
                    with ThreadPoolExecutor(max_workers=1) as pool:
                        beside = pool.submit(growth_or_error, b, sizes, args.reps, base_ref)
                        scenarios(b, args.reps, proxy, counter, res)
                        res["growth"] = beside.result()
                else:
                    scenarios(b, args.reps, proxy, counter, res)
            if not args.quick:
                res["growth"] = growth_or_error(b, sizes, args.reps, base_ref)
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
    out = args.out / f"{started.strftime('%Y%m%dT%H%M%SZ')}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(table(res))
    print(f"\nmachine: {res['machine']['cores']} cores, {res['machine']['memory_gib']} GiB, engine "
          f"{res['machine']['engine']}; load before: {load_before}; after: {res['load_after']}")
    print(f"results: {out}")
    return 1 if res["growth"].get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
