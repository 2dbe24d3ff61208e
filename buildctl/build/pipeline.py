"""Building a stack's variant: what the host prepares first, then the missing nodes, in parallel.

Its input is a ``BuildInput`` (inputs.py: the graph, names, a few values; never the manifest or the
lock file) and the plan (buildctl.graph.plan), made once this run holds the stack's lock; the plan
alone decides, per node, have / pull / build / publish. Order (each step fails before the next starts):

1. (before this module: buildctl.services.building checks the lock);
2. the plan: its actions are executed, nothing else (``buildctl plan`` shows the same actions);
3. the engine's platform against the variant's;
4. on the host: prepare the git sources the builds need (a PR that does not apply stops here),
   download and verify downloads, download the pip wheels the builds install;
5. build (up to ``jobs`` at once, over one or more engines), then pushed to the registry so that other
   engines and builders pull it; the smoke gate runs on the assembled image before the entrypoint.

A node is tagged by its key last: the build goes to a temporary local tag (``buildctl-part/<owner>``),
its whiteouts are normalised, its record is written, and only then does the content tag appear. A tag
without a record (an older buildctl, a run killed between tag and record) is not trusted: the node is
built (or pulled) again, and ``buildctl plan`` says why.

One run per stack, variant and cache at a time: ``<cache>/locks/<stack>.<variant>.lock`` (flock). A
second run waits, saying so, then finds what the first built. SIGINT and SIGTERM (``Interrupted``) stop the
run: running builds are cut (the engine removes their containers), compile and smoke containers are
removed, the run's temporary folder ``<cache>/tmp/run-<owner>/`` is removed, and the exception says so.
A later run first removes what runs that died (SIGKILL, a crash) left: containers and temporary tags
carrying their owner, and their temporary folders.

A compile node runs the component's build command in a container of its compile-env image, with the
exported source read-only at /src, a persistent ccache at /ccache and /out for the wheel; the wheel is
kept under ``<cache>/wheels/<component>/<key>/`` and pushed as a one-file image (FROM scratch) tagged
by key, which a builder without the wheel pulls instead of compiling.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import io
import json
import math
import os
import queue
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from buildctl import quoting, runs, safepath
from buildctl.build import normalise, wheelhouse
from buildctl.build.inputs import BuildInput
from buildctl.config import Config
from buildctl.errors import (
    BuildctlError,
    BuildFailed,
    EngineError,
    Interrupted,
    SmokeFailed,
    UsageError,
)
from buildctl.graph import render
from buildctl.graph.graph import Graph, Node, shared_labels
from buildctl.graph.plan import ArchCheck, Plan
from buildctl.graph.records import NodeRecord, RecordStore, state_root
from buildctl.graph.specs import (
    AssembleNodeSpec,
    CompileEnvNodeSpec,
    CudnnNodeSpec,
    EntrypointNodeSpec,
    FileSpec,
    PipPin,
    PythonNodeSpec,
    SystemNodeSpec,
    WheelNodeSpec,
)
from buildctl.sources.export import BUILD_GIT_ENV
from buildctl.sources.index import DEFAULT_INDEX, HttpFetcher, SimpleIndex

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine

Action = Literal["have", "pull", "build"]  # what a build executes (the plan's have / pull / build)
Outcome = Literal["cached", "pulled", "built"]
SMOKE_LABEL = "io.buildctl.smoke"


class Progress(Protocol):
    def node(self, name: str, state: str, detail: str = "") -> None: ...

    def log(self, name: str, line: str) -> None: ...


class SmokeGate(Protocol):
    """Runs the build-host smoke tier on the assembled image; raises SmokeFailed when it does not pass."""

    def __call__(self, engine: Engine, image: str, /, *, log_file: Path) -> str: ...  # a one-line summary


@dataclass(frozen=True, kw_only=True)
class Options:
    jobs: int = 2  # nodes built at once, over all engines
    skip_smoke: bool = False
    compile_timeout: float = 6 * 3600.0  # a cold Transformer Engine build takes hours
    emulation: bool | None = None  # an emulator for the variant's platform is registered on the engine host
    host_cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    host_memory_gib: float = field(default_factory=lambda: _memory_gib())
    nocache: bool = False  # no engine step cache: every step runs afresh (`buildctl repro`)


@dataclass(frozen=True, kw_only=True)
class NodeResult:
    name: str
    outcome: Outcome
    engine: str
    ref: str
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Report:
    final: str
    nodes: tuple[NodeResult, ...]
    smoke: Literal["passed", "skipped", "not-run"]
    wheels: Mapping[str, Path] = field(default_factory=dict)

    def outcome(self, name: str) -> Outcome | None:
        return next((n.outcome for n in self.nodes if n.name == name), None)

    @property
    def built(self) -> list[str]:
        return [n.name for n in self.nodes if n.outcome == "built"]


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 4.0


def compile_jobs(*, cores: int, memory_gib: float, per_job_gib: float, concurrent: int) -> int:
    """Parallel compile jobs for one compile: what the cores allow and what memory allows, shared by the
    compiles running at once (parallel nvcc running out of memory is the commonest TE build failure)."""
    share = max(1, concurrent)
    by_cores = cores // share
    by_memory = math.floor(memory_gib / share / per_job_gib) if per_job_gib > 0 else by_cores
    return max(1, min(by_cores, by_memory))


def project_source(project: Path) -> tuple[str, str]:
    """(org.opencontainers.image.source, .revision): the project's git remote and commit, where known."""
    def git(*args: str) -> str:
        try:
            r = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=10,
                               check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return r.stdout.strip() if r.returncode == 0 else ""
    return git("config", "--get", "remote.origin.url") or "buildctl", git("rev-parse", "HEAD") or "unknown"


def executed(plan: Plan) -> tuple[dict[str, Action], set[str]]:
    """What a build executes of a plan: each needed node's action (skipped nodes left out) and the present
    nodes it publishes. A node the plan could not decide stops the build before anything starts."""
    actions: dict[str, Action] = {}
    for p in plan.nodes:
        if p.action == "unknown":
            raise BuildFailed(f"cannot decide what to do with {p.node.name} of {plan.graph.stack}/{plan.graph.variant}",
                              why=p.because + (f" ({p.note})" if p.note else ""),
                              fix="check that the engine and the registry answer (`buildctl plan`), then build again")
        if p.action != "skip":
            actions[p.node.name] = p.action
    return actions, set(plan.to_publish)


# ------------------------------------------------------------------------------------------ the run


def run(job: BuildInput, *, decide: Callable[[], Plan], engines: Sequence[Engine], config: Config,
        progress: Progress, project: Path, options: Options | None = None,
        smoke_gate: SmokeGate | None = None) -> Report:
    """Build ``job`` as the plan says. ``decide`` makes the plan (buildctl.graph.plan.make) once this run holds
    the stack's lock, so that a run that waited for another plans with what that one built."""
    if not engines:
        raise UsageError("no engine to build with")
    if len(engines) > 1 and job.registry is None:
        raise UsageError("several engines share a build through a registry, and there is none",
                         fix="pass --registry HOST:PORT (or set `registry` in the configuration)")
    return _Build(job, decide=decide, engines=engines, config=config, progress=progress, project=project,
                  options=options or Options(), smoke_gate=smoke_gate).run()


class _Build:
    def __init__(self, job: BuildInput, *, decide: Callable[[], Plan], engines: Sequence[Engine], config: Config,
                 progress: Progress, project: Path, options: Options, smoke_gate: SmokeGate | None) -> None:
        self.t = job
        self.g = job.graph
        self.decide = decide
        self.engines = list(engines)
        self.config = config
        self.progress = progress
        self.project = project
        self.opt = options
        self.smoke_gate = smoke_gate
        self.records = RecordStore(state_root(config.cache))
        self.results: list[NodeResult] = []
        self.where: dict[str, set[str]] = {}  # node -> names of engines that have its image
        self.prepared: dict[str, Path] = {}  # component -> exported source tree
        self.downloads: dict[str, Path] = {}  # download name -> verified file
        self.pip: dict[str, Path] = {}  # "name==version" -> wheel file
        self.pip_files: dict[str, Path] = {}  # wheel file name -> a downloaded wheel (install: pip), verified
        self.built: dict[str, str] = {}  # "name==version" -> sha256 of the wheel built from its locked sdist
        self.wheels: dict[str, Path] = {}  # component -> its compiled wheel file
        self.busy: dict[str, int] = {e.name: 0 for e in self.engines}
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.smoke: Literal["passed", "skipped", "not-run"] = "not-run"
        self.wheelhouse_url = ""
        self._wheelhouse_root: Path | None = None
        self.scratch = config.cache.root / "tmp" / f"run-{runs.owner()}"  # this run's; removed at its end
        self.running: set[str] = set()  # tasks running now
        self.threads: list[threading.Thread] = []
        self.untrusted: set[str] = set()  # nodes tagged in the engine without a record
        self.source, self.revision = project_source(project)
        self.created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def e0(self) -> Engine:
        return self.engines[0]

    def ref(self, name: str) -> str:
        return self.t.refs[name]

    def log_file(self, name: str) -> Path:
        return self.config.cache.node_log(self.g.stack, self.g.variant, name.replace(":", "-"))

    # -- 3. platform

    def _check_platform(self) -> None:
        for e in self.engines:
            arch = ArchCheck(variant_platform=self.g.platform, engine_platform=e.platform(),
                             emulation=self.opt.emulation)
            if not arch.native and arch.emulation is False:
                raise EngineError(f"engine {e.name} cannot build {self.g.stack}/{self.g.variant}", why=arch.message(),
                                  fix="register emulation on the engine host, or build on a native engine")

    # -- 4. the host's part

    def _prepare_sources(self, actions: Mapping[str, Action]) -> None:
        """Prepared, exported source trees for every compile and source-tree install to run."""
        wanted = [n.component for n in self.g.nodes if n.kind == "wheel" and actions.get(n.name) == "build"]
        assemble = self.g.node("assemble").spec if "assemble" in self.g.names() else None
        if actions.get("assemble") == "build" and isinstance(assemble, AssembleNodeSpec):
            wanted += [tr.component for tr in assemble.trees]
        for name in dict.fromkeys(wanted):
            assert name is not None
            self.progress.node(self._node_for(name), "sources", f"preparing {name} at {self.t.sources.tree(name)[:12]}")
            self.prepared[name] = self.t.sources.export(name)

    def _node_for(self, component: str) -> str:
        return f"wheel:{component}" if f"wheel:{component}" in self.g.names() else "assemble"

    def _fetch_downloads(self, actions: Mapping[str, Action]) -> None:
        files: dict[str, FileSpec] = {}
        for n in self.g.nodes:
            if actions.get(n.name) == "build" and isinstance(n.spec, CudnnNodeSpec | SystemNodeSpec | CompileEnvNodeSpec):
                files.update({f.name: f for f in n.spec.files})
        if not files:
            return
        fetcher = HttpFetcher.from_config(self.config)
        folder = self.config.cache.downloads / "files"
        folder.mkdir(parents=True, exist_ok=True)
        for f in files.values():
            assert f.sha256, "a locked graph has every checksum"
            dest = folder / f.sha256
            if not (dest.is_file() and wheelhouse.sha256_file(dest) == f.sha256):
                self._download(fetcher, f, dest)
            self.downloads[f.name] = dest

    def _download(self, fetcher: HttpFetcher, f: FileSpec, dest: Path) -> None:
        tmp = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        with fetcher.open(f.url) as resp, tmp.open("wb") as out:
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != f.sha256:
            tmp.unlink(missing_ok=True)
            raise BuildFailed(f"download {f.name} from {f.url} does not match its sha256",
                              why=f"expected {f.sha256}, got {h.hexdigest()}",
                              fix="the file changed upstream: check it, then update the manifest or re-lock")
        tmp.replace(dest)

    def _fetch_pip(self, actions: Mapping[str, Action]) -> None:
        # by name and version: a build requirement may pin another version than the runtime does
        pins: dict[tuple[str, str | None], PipPin] = {}
        for n in self.g.nodes:
            if actions.get(n.name) == "build" and isinstance(n.spec, PythonNodeSpec | CompileEnvNodeSpec):
                pins.update({(p.name, p.version): p for p in n.spec.to_install})
        if not pins:
            return
        self.progress.node("python" if actions.get("python") == "build" else next(
            n for n, a in actions.items() if a == "build"), "wheels", f"{len(pins)} pip wheel(s) on the host")
        # wheels the manifest downloads (install: pip): fetched and verified like any download, served by file name
        downloaded = [p for p in pins.values() if p.download]
        if downloaded:
            fetcher = HttpFetcher.from_config(self.config)
            folder = self.config.cache.downloads / "files"
            folder.mkdir(parents=True, exist_ok=True)
            for p in downloaded:
                assert p.hashes, "a locked graph has every checksum"
                sha = p.hashes[0].removeprefix("sha256:")
                dest = folder / sha
                if not (dest.is_file() and wheelhouse.sha256_file(dest) == sha):
                    self._download(fetcher, FileSpec(name=p.download, dest="", mode="0644", sha256=sha, url=p.url), dest)
                self.pip_files[p.filename] = dest
        sdists = [p for p in pins.values() if p.sdist]
        if sdists:
            self._build_sdists(sdists)
        self.pip = wheelhouse.download(
            sorted((p for p in pins.values() if not p.download and not p.sdist), key=lambda p: (p.name, p.version or "")),
            folder=self.config.cache.downloads / "pip",
            python=self.t.python, platform=self.g.platform, config=self.config,
            log_file=self.log_file("pip-download"))

    def _build_sdists(self, pins: Sequence[PipPin]) -> None:
        """Requirements only a source distribution fits: fetched on the host by the lock's sha256 and built into
        a wheel in a container of the base with no network (nothing runs on the host, nothing is fetched inside
        an image build). The wheel is kept under the sdist's hash and the base's digest."""
        from buildctl.engine.engine import Mount

        fetcher = HttpFetcher(ca_bundle=self.config.ca_bundle, timeout=self.config.network_timeout)
        index = SimpleIndex([self.config.pip_index_url or DEFAULT_INDEX, *self.config.pip_extra_index_urls], fetcher)
        folder = self.config.cache.downloads / "pip" / "sdists"
        base = self.t.base_digest or "unlocked"
        log = self.log_file("sdists")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(parents=True, exist_ok=True)
        for p in pins:
            sdist = wheelhouse.fetch_sdist(p, folder=folder, index=index, fetcher=fetcher)
            keep = self.config.cache.downloads / "pip" / "built" / sdist.parent.name / base.replace(":", "-")
            made = sorted(keep.glob("*.whl")) if keep.is_dir() else []
            if len(made) != 1:
                self._ensure(self.e0, "base")
                self.progress.log("python", f"building {p.name}=={p.version} from its sdist in the base")
                out = Path(tempfile.mkdtemp(prefix="sdist-", dir=self.scratch))
                try:
                    script = wheelhouse.sdist_script(self.t.image_python, sdist.name, render.EPOCH)
                    result = self.e0.run(self.t.base_ref, ["/bin/sh", "/buildctl/sdist.sh"], entrypoint=[],
                                         mounts=[Mount(source=sdist.parent, target="/in", read_only=True),
                                                 Mount(source=out, target="/out", read_only=False)],
                                         files={"/buildctl/sdist.sh": script.encode()}, user="0",
                                         network_mode="none", timeout=1800.0)
                    with log.open("a") as f:
                        f.write(f"$ build {sdist.name} in {self.t.base_ref}\n{result.stdout}{result.stderr}\n")
                    wheels = sorted(out.glob("*.whl"))
                    if not result.ok or len(wheels) != 1:
                        tail = wheelhouse.build_output(result.stdout + result.stderr)
                        raise BuildFailed(
                            f"pip requirement {p.name}=={p.version} exists only as a source distribution "
                            f"({sdist.name}), and building it into a wheel in the base failed; log: {log}",
                            why=tail or f"exit status {result.exit_code}",
                            fix="the sdist is built with the base's own build tools (--no-build-isolation, no "
                                "network): add what it needs to the base, or pin a version of it that has a wheel")
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    tmp = Path(tempfile.mkdtemp(prefix=".built-", dir=keep.parent))
                    shutil.copy2(wheels[0], tmp / wheels[0].name)
                    shutil.rmtree(keep, ignore_errors=True)
                    os.replace(tmp, keep)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                made = sorted(keep.glob("*.whl"))
            wheel = made[0]
            self.pip_files[wheel.name] = wheel
            self.built[f"{p.name}=={p.version}"] = wheelhouse.sha256_file(wheel)

    # -- the whole run

    def run(self) -> Report:
        with self._exclusive():
            try:
                self._remove_leftovers()
                return self._run()
            except Interrupted as exc:
                exc.done = self._stop(exc.name)
                raise
            except KeyboardInterrupt:
                import signal
                raise Interrupted(signal.SIGINT, "SIGINT", self._stop("SIGINT")) from None
            finally:
                shutil.rmtree(self.scratch, ignore_errors=True)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One run per stack, variant and cache: the second waits (saying for whom), then reuses the first's work."""
        folder = self.config.cache.root / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.g.stack}.{self.g.variant}")
        path = folder / f"{slug}.lock"
        with path.open("a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                # short: a progress line keeps 100 characters of detail
                self.progress.node("lock", "waiting", f"{holder} builds {self.g.stack}/{self.g.variant} with this "
                                   "cache: waiting, then reusing its work")
                fcntl.flock(f, fcntl.LOCK_EX)
                self.progress.node("lock", "acquired", "the other build finished; going on")
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()}\n")
            f.flush()
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    f.seek(0)
                    f.truncate()
                fcntl.flock(f, fcntl.LOCK_UN)

    def _remove_leftovers(self) -> None:
        """What runs that died left behind: their containers and temporary tags, their temporary folders."""
        containers: list[str] = []
        tags: list[str] = []
        for e in self.engines:
            c, t = e.remove_leftovers()
            containers += c
            tags += t
        folders = runs.sweep_scratch(self.config.cache.root / "tmp")
        folders += runs.sweep_scratch(self.config.cache.wheels, nested=True)
        if containers or tags or folders:
            self.progress.node("leftovers", "removed", f"left by runs that died: {len(containers)} container(s), "
                               f"{len(tags)} temporary tag(s), {len(folders)} temporary folder(s)")

    def _stop(self, signame: str) -> str:
        """After SIGINT/SIGTERM: cut running work, wait for the workers, remove what this run started; say what."""
        self.cancelled.set()
        stopped = sorted(self.running)
        removed: list[str] = []
        for e in self.engines:
            removed += e.cancel()
        deadline = time.monotonic() + 60
        for th in self.threads:
            th.join(timeout=max(0.1, deadline - time.monotonic()))
        tags = 0
        for e in self.engines:
            with contextlib.suppress(BuildctlError):
                tags += e.remove_own_part_tags()
            e.resume()
        folders = sum(1 for _ in self.scratch.iterdir()) if self.scratch.is_dir() else 0
        shutil.rmtree(self.scratch, ignore_errors=True)
        alive = [th.name.removeprefix("buildctl-") for th in self.threads if th.is_alive()]
        return (f"stopped {', '.join(stopped) if stopped else 'before any node started'}; removed "
                f"{len(removed)} container(s), {tags} temporary tag(s) and {folders} temporary folder(s) of this run"
                + (f"; still stopping: {', '.join(alive)}" if alive else "")
                + "; nothing half-done was tagged or recorded: run the same command again to resume")

    def _actions(self) -> tuple[dict[str, Action], set[str]]:
        """The plan's actions and what it publishes; nothing else decides."""
        plan = self.decide()
        actions, publish = executed(plan)
        for p in plan.nodes:
            if p.untrusted:
                self.untrusted.add(p.node.name)
            if p.wheel is not None:
                self.wheels[p.node.component or ""] = p.wheel
            if p.action == "have" and p.node.kind not in ("base", "wheel"):
                self.where.setdefault(p.node.name, set()).add(self.e0.name)
        return actions, publish

    def _run(self) -> Report:
        actions, publish = self._actions()
        for name in sorted(n for n in self.untrusted if actions.get(n) not in (None, "have")):
            self.progress.node(name, "untrusted", "tagged in the engine without a record of a completed build "
                                                  "(an interrupted run?): built again")
        for name in self.g.names():
            if name not in actions:
                self.progress.node(name, "skipped", "not needed: a later node is present")
            elif actions[name] == "have":
                self.progress.node(name, "cached")
                self.results.append(NodeResult(name=name, outcome="cached", engine=self.e0.name, ref=self.ref(name),
                                               seconds=0.0))
        todo = {n for n, a in actions.items() if a != "have"} | publish
        if todo:
            if any(a == "build" for a in actions.values()):
                self._check_platform()
            self._prepare_sources(actions)
            self._fetch_downloads(actions)
            self._fetch_pip(actions)
            self.scratch.mkdir(parents=True, exist_ok=True)  # this run's: <cache>/tmp/run-<owner>/
            with self._wheelhouse() as url:
                self.wheelhouse_url = url
                self._execute(actions, publish)
        final = self.g.final.name
        if self.e0.name not in self.where.get(final, {self.e0.name}):
            self.e0.pull(self.ref(final))  # built by another engine: the user runs it from the first
        if self.g.gate and self.smoke == "not-run":
            labels = self.e0.inspect_image(self.ref(final)).labels
            self.smoke = "skipped" if labels.get(SMOKE_LABEL) == "skipped" else "passed"
        return Report(final=self.ref(final), nodes=tuple(self.results), smoke=self.smoke, wheels=dict(self.wheels))

    @contextlib.contextmanager
    def _wheelhouse(self) -> Iterator[str]:
        root = Path(tempfile.mkdtemp(prefix="wheelhouse-", dir=self.scratch))
        try:
            wheelhouse.link_tree(root, {**{p.name: p for p in self.pip.values()}, **self.pip_files})
            # by stack and variant only: the same URL for every cache keeps the engine's step cache shared
            port = wheelhouse.preferred_port(f"{self.g.stack}/{self.g.variant}")
            with wheelhouse.serve(root, port=port) as url:
                if not url.endswith(f":{port}/"):
                    self.progress.node("wheelhouse", "port", f"port {port} was taken: serving on {url} (the engine's "
                                       "step cache of the steps that read it is not reused this time)")
                self._wheelhouse_root = root
                yield url
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # -- 5. execution

    def _execute(self, actions: Mapping[str, Action], publish: set[str]) -> None:
        """Run the tasks, each when its parents are done, at most ``jobs`` at once.

        Workers are daemon threads. On SIGINT/SIGTERM the main thread raises here; ``run`` then cancels the
        engines' work (streams cut: the engine cancels the builds and removes their containers; compile and
        smoke containers removed) and waits for the workers to unwind. After a failure no new task starts;
        the running ones finish.
        """
        tasks = {n for n, a in actions.items() if a in ("pull", "build")} | publish
        deps = {n: {p for p in self.g.node(n).parents if p in tasks} if actions[n] == "build" else set()
                for n in tasks}
        done: set[str] = set()
        started: set[str] = set()
        running: set[str] = set()
        failures: list[BaseException] = []
        finished: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()

        def work(name: str) -> None:
            try:
                self._task(name, actions[name], name in publish)
                finished.put((name, None))
            except BaseException as exc:  # handed to the main thread, which raises it
                finished.put((name, exc))

        jobs = max(1, self.opt.jobs)
        try:
            while True:
                if not failures:
                    for n in self.g.names():  # topological order: parents first
                        if n in tasks and n not in started and deps[n] <= done and len(running) < jobs:
                            started.add(n)
                            running.add(n)
                            th = threading.Thread(target=work, args=(n,), name=f"buildctl-{n}", daemon=True)
                            self.threads.append(th)
                            with self.lock:
                                self.running.add(n)
                            th.start()
                if not running:
                    break
                try:
                    n, exc = finished.get(timeout=0.5)  # a bounded wait keeps Ctrl-C responsive
                except queue.Empty:
                    continue
                running.discard(n)
                with self.lock:
                    self.running.discard(n)
                if exc is None:
                    done.add(n)
                else:
                    failures.append(exc)
                    self.progress.node(n, "failed", getattr(exc, "what", str(exc)))
        except BaseException:
            self.cancelled.set()  # whatever still finishes keeps no wheel and pushes nothing
            raise
        if failures:
            raise failures[0]

    @contextlib.contextmanager
    def _engine(self, prefer: Sequence[str] = ()) -> Iterator[Engine]:
        """The engine for a task: an idle one that already holds a parent (no pull), else the least busy.

        A parent is pulled from the registry in seconds, so an idle engine beats a busy one that has it.
        """
        with self.lock:
            idle = min(self.busy.values())
            holders = [e for e in self.engines if self.busy[e.name] == idle
                       and any(e.name in self.where.get(p, ()) for p in prefer)]
            e = min(holders or self.engines, key=lambda x: (self.busy[x.name], self.engines.index(x)))
            self.busy[e.name] += 1
        try:
            yield e
        finally:
            with self.lock:
                self.busy[e.name] -= 1

    def _task(self, name: str, action: Action, publish: bool) -> None:
        node = self.g.node(name)
        start = time.monotonic()
        with self._engine(node.parents) as e:
            if action == "have" and publish:
                self._publish(e, node)
                return
            if name in self.untrusted and e.image_exists(self.ref(name)):
                # the untrusted image goes (its tag would otherwise move and leave it dangling)
                e.remove_image(self.ref(name))
            if action == "pull":
                self.progress.node(name, "pulling", self.ref(name))
                if node.kind == "wheel":
                    self._pull_wheel(e, node)
                    self.records.save(self.g.stack, self.g.variant, NodeRecord.of(self.g, node, engine=e.name))
                else:
                    e.pull(self.ref(name), platform=self.g.platform if node.kind == "base" else None)
                    self._have(name, e)
                    if node.kind != "base":
                        self.records.save(self.g.stack, self.g.variant, NodeRecord.of(self.g, node, engine=e.name))
                outcome: Outcome = "pulled"
            else:
                self.progress.node(name, "building")
                if node.kind == "wheel":
                    self._build_wheel(e, node)
                else:
                    self._build_image(e, node)
                outcome = "built"
        seconds = time.monotonic() - start
        with self.lock:
            self.results.append(NodeResult(name=name, outcome=outcome, engine=e.name, ref=self.ref(name),
                                           seconds=seconds))
        self.progress.node(name, outcome, f"{self.ref(name)} on {e.name}")

    def _have(self, name: str, e: Engine) -> None:
        with self.lock:
            self.where.setdefault(name, set()).add(e.name)

    def _ensure(self, e: Engine, name: str) -> None:
        """Make the image of node ``name`` present in engine ``e`` (pulling what another engine pushed)."""
        ref = self.ref(name)
        if e.name in self.where.get(name, ()) or e.image_exists(ref):
            self._have(name, e)
            return
        node = self.g.node(name)
        e.pull(ref, platform=self.g.platform if node.kind == "base" else None)
        self._have(name, e)

    def _push(self, e: Engine, node: Node) -> None:
        if self.t.registry is None or self.cancelled.is_set():
            return
        self.progress.node(node.name, "pushing", self.ref(node.name))
        e.push(self.ref(node.name))

    def _publish(self, e: Engine, node: Node) -> None:
        """A node present here but not in the registry (built before with the registry down): push it."""
        if node.kind == "wheel" and not e.image_exists(self.ref(node.name)):
            self._wheel_image(e, node, self.wheels[node.component or ""])
        else:
            self._ensure(e, node.name)
        self._push(e, node)

    def _labels(self, node: Node) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.source": self.source,
            "org.opencontainers.image.revision": self.revision,
            "org.opencontainers.image.created": self.created,
            "org.opencontainers.image.base.name": self.t.base_image,
            "org.opencontainers.image.base.digest": self.t.base_digest,
            **shared_labels(self.g, node),
        }
        if isinstance(node.spec, AssembleNodeSpec | EntrypointNodeSpec):
            labels.update(node.spec.labels)
        if isinstance(node.spec, EntrypointNodeSpec):
            labels[SMOKE_LABEL] = "skipped" if node.spec.smoke == "skipped" else "passed"
        return labels

    def _parent_ref(self, node: Node) -> str:
        return self.t.base_ref if node.parents[0] == "base" else self.ref(node.parents[0])

    def _build_image(self, e: Engine, node: Node) -> None:
        self._ensure(e, node.parents[0])
        if isinstance(node.spec, EntrypointNodeSpec) and node.spec.smoke == "gate":
            self._gate(e, node)
        wheels: dict[str, render.WheelFile] = {}
        if isinstance(node.spec, AssembleNodeSpec):
            for w in node.spec.wheels:
                f = self.wheels[w.component]
                wheels[w.component] = render.WheelFile(filename=f.name, sha256=wheelhouse.sha256_file(f))
                assert self._wheelhouse_root is not None
                wheelhouse.link_tree(self._wheelhouse_root, {f"components/{w.component}/{f.name}": f})
        rendered = render.render(node, templates=self.t.templates, parent_ref=self._parent_ref(node), wheels=wheels,
                                 built=self.built)
        part = self._part_ref(node)
        try:
            with self._context(node, rendered, labels=self._labels(node)) as ctx:
                e.build(context_dir=ctx, dockerfile="Dockerfile", tag=part, labels={},
                        buildargs={render.WHEELHOUSE_ARG: self.wheelhouse_url} if rendered.wheelhouse else None,
                        network_mode="host" if rendered.wheelhouse else None,
                        on_log=lambda line: self.progress.log(node.name, line), log_file=self.log_file(node.name),
                        nocache=self.opt.nocache)
            self._settle_whiteouts(e, node, rendered, part)
            self._record_and_tag(e, node, part)
        finally:
            with contextlib.suppress(BuildctlError):
                e.remove_image(part)  # the temporary tag (with it the image, when it never got its content tag)
        self._have(node.name, e)
        self._push(e, node)

    def _part_ref(self, node: Node) -> str:
        from buildctl.engine.engine import PART_REPOSITORY

        return f"{PART_REPOSITORY}/{runs.owner()}:{node.slug}"

    def _record_and_tag(self, e: Engine, node: Node, part: str) -> None:
        """The record of the completed build first, then the content tag: a tag always has its record."""
        if self.cancelled.is_set():
            raise BuildFailed(f"{node.name}: cancelled", why="the build was interrupted")
        self.records.save(self.g.stack, self.g.variant, NodeRecord.of(
            self.g, node, built_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), engine=e.name))
        e.tag(part, self.ref(node.name))

    def _settle_whiteouts(self, e: Engine, node: Node, rendered: render.Rendered, ref: str) -> None:
        """Give the whiteouts of a node declared bit-level a fixed time (normalise.py): a RUN that deleted a file
        of a lower layer left one with the time of the build, and a RUN cannot touch it. The check costs a
        `docker save` of the node image (about 1.7 s for the demo's 190 MB), so only bit-level RUN nodes pay it."""
        if node.kind not in self.t.bit_level:
            return
        if not any(line.startswith("RUN ") for line in rendered.dockerfile.splitlines()):
            return
        below = len(e.inspect_image(self._parent_ref(node)).layers)
        if normalise.settle_whiteouts(e, ref, parent_layers=below, scratch=self.scratch,
                                      epoch=render.EPOCH):
            self.progress.log(node.name, "whiteouts given a fixed time (save, rewrite, load)")

    def _gate(self, e: Engine, node: Node) -> None:
        assemble = self.ref("assemble")
        if self.smoke_gate is None:
            raise SmokeFailed("no smoke runner is available to gate the entrypoint",
                              fix="pass --skip-smoke to build past the gate (the image is labelled smoke=skipped)")
        self.progress.node(node.name, "smoke", f"build-host tier on {assemble}")
        summary = self.smoke_gate(e, assemble, log_file=self.log_file("smoke"))
        self.smoke = "passed"
        self.progress.log(node.name, summary)

    @contextlib.contextmanager
    def _context(self, node: Node, rendered: render.Rendered, *, labels: Mapping[str, str]) -> Iterator[Path]:
        ctx = Path(tempfile.mkdtemp(prefix=f"ctx-{node.slug}-", dir=self.scratch))
        try:
            (ctx / "Dockerfile").write_text(rendered.dockerfile + label_instruction(labels))
            for cf in rendered.context:
                self._materialize(ctx, cf)
            rootfs = ctx / "rootfs"
            if rootfs.is_dir():
                for dirpath, dirnames, _ in os.walk(rootfs, topdown=False):
                    for d in dirnames:
                        p = Path(dirpath) / d
                        if not p.is_symlink():
                            os.chmod(p, render.dir_mode(p.relative_to(rootfs).as_posix()))
                            os.utime(p, (render.EPOCH, render.EPOCH))
            yield ctx
        finally:
            shutil.rmtree(ctx, ignore_errors=True)

    def _materialize(self, ctx: Path, cf: render.ContextFile) -> None:
        target = safepath.inside(ctx, cf.path)
        if cf.tree is not None:
            shutil.copytree(self.prepared[cf.tree], target, symlinks=True)
            return
        if cf.wheel is not None:
            target.mkdir(parents=True, exist_ok=True)
            f = self.wheels[cf.wheel]
            shutil.copy2(f, target / f.name)
            os.utime(target / f.name, (render.EPOCH, render.EPOCH))
            return
        if cf.download is not None:
            shutil.copyfile(self.downloads[cf.download], target)
        else:
            target.write_text(cf.text or "")
        os.chmod(target, int(cf.mode, 8))
        os.utime(target, (render.EPOCH, render.EPOCH))

    # -- wheels

    def _build_wheel(self, e: Engine, node: Node) -> None:
        from buildctl.engine.engine import Mount

        spec = node.spec
        assert isinstance(spec, WheelNodeSpec) and node.component
        self._ensure(e, node.parents[0])
        rendered = render.render(node, templates=self.t.templates, parent_ref=self.ref(node.parents[0]))
        assert rendered.script is not None
        compiles = sum(1 for n in self.g.nodes if n.kind == "wheel")
        jobs = compile_jobs(cores=self.opt.host_cores, memory_gib=self.opt.host_memory_gib,
                            per_job_gib=spec.memory_per_job_gib, concurrent=min(self.opt.jobs, compiles))
        self.config.cache.ccache.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix=f"out-{node.slug}-", dir=self.scratch))
        log = self.log_file(node.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.progress.log(node.name, f"compiling with {jobs} job(s)")
            result = e.run(self.ref(node.parents[0]), ["/buildctl/wheel.sh"], entrypoint=["/bin/sh"],
                           # the tree keeps the host user's uid (cp -a): git would call it "dubious" and the
                           # version would lose its +sha, so the copy is marked safe (sources.BUILD_GIT_ENV)
                           env={"BUILDCTL_JOBS": str(jobs), **BUILD_GIT_ENV},
                           mounts=[Mount(source=self.prepared[node.component], target="/src", read_only=True),
                                   Mount(source=self.config.cache.ccache, target="/ccache", read_only=False),
                                   Mount(source=out, target="/out", read_only=False)],
                           files={"/buildctl/wheel.sh": rendered.script.encode()},
                           network_mode="none", timeout=self.opt.compile_timeout)
            log.write_text(f"$ compile {node.component} in {self.ref(node.parents[0])} ({jobs} jobs)\n"
                           + result.stdout + result.stderr)
            lines = (result.stdout + result.stderr).strip().splitlines()
            if lines:
                self.progress.log(node.name, lines[-1])
            made = sorted(out.glob("*.whl"))
            if not result.ok or len(made) != 1:
                tail = "\n".join(f"    {x}" for x in lines[-12:])
                why = ("timed out" if result.timed_out else f"exit status {result.exit_code}") if not result.ok else (
                    f"the build command left {len(made)} wheel(s) in /out, not one")
                raise BuildFailed(f"compile of {node.component} failed; full log: {log}",
                                  why=why + (f"\n  last log lines:\n{tail}" if tail else ""),
                                  fix=f"read {log}, correct the component or its build settings, and build again")
            wheel = self._keep_wheel(node, made[0])
        finally:
            shutil.rmtree(out, ignore_errors=True)
        self._wheel_image(e, node, wheel)
        self._push(e, node)

    def _keep_wheel(self, node: Node, made: Path) -> Path:
        """Move a finished wheel to wheels/<component>/<key>/, whole or not at all."""
        assert node.component
        if self.cancelled.is_set():
            raise BuildFailed(f"{node.name}: cancelled", why="the build was interrupted")
        final = self.config.cache.wheels / node.component / node.key
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"run-{runs.owner()}-", dir=final.parent))  # swept if this run dies
        shutil.copy2(made, tmp / made.name)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        with self.lock:
            self.wheels[node.component] = final / made.name
        return final / made.name

    def _wheel_image(self, e: Engine, node: Node, wheel: Path) -> None:
        with self.lock:
            self.wheels[node.component or ""] = wheel
        rendered = render.render(node, templates=self.t.templates, parent_ref="scratch")
        part = self._part_ref(node)
        try:
            with self._context(node, rendered, labels=self._labels(node)) as ctx:
                e.build(context_dir=ctx, dockerfile="Dockerfile", tag=part, labels={},
                        log_file=self.log_file(node.name + "-image"), nocache=self.opt.nocache)
            self._record_and_tag(e, node, part)
        finally:
            with contextlib.suppress(BuildctlError):
                e.remove_image(part)
        self._have(node.name, e)

    def _pull_wheel(self, e: Engine, node: Node) -> None:
        """Take the wheel out of its one-file image (pulled when the engine lacks it): no compile."""
        assert node.component
        ref = self.ref(node.name)
        if not e.image_exists(ref):
            e.pull(ref)
        self._have(node.name, e)
        with tempfile.TemporaryDirectory(prefix="wheel-", dir=self.scratch) as tmp:
            tar = Path(tmp) / "image.tar"
            e.save(ref, tar)
            found = extract_wheel(tar, Path(tmp) / "out")
            if found is None:
                raise BuildFailed(f"the image {ref} holds no wheel", fix="remove it from the registry and build again")
            self._keep_wheel(node, found)


def label_instruction(labels: Mapping[str, str]) -> str:
    """One LABEL instruction for all labels (the engine turns a build's ``labels`` into one step each,
    about 0.1 s apiece). Keys and values are quoted by ``quoting.dockerfile``."""
    if not labels:
        return ""
    pairs = [f"{quoting.dockerfile(k)}={quoting.dockerfile(v)}" for k, v in sorted(labels.items())]
    return "LABEL " + " \\\n      ".join(pairs) + "\n"


def extract_wheel(image_tar: Path, dest: Path) -> Path | None:
    """The one wheel under /wheel/ in a `docker save` archive of a one-file wheel image."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(image_tar) as outer:
        names = outer.getnames()
        manifest = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for layer in manifest[0]["Layers"]:
            if layer not in names:
                continue
            data = outer.extractfile(layer)
            if data is None:
                continue
            with tarfile.open(fileobj=io.BytesIO(data.read())) as inner:
                for m in inner.getmembers():
                    path = m.name.lstrip("./")
                    if m.isfile() and path.startswith("wheel/") and path.endswith(".whl") and "/" not in path[6:]:
                        out = dest / Path(path).name
                        src = inner.extractfile(m)
                        assert src is not None
                        out.write_bytes(src.read())
                        return out
    return None


class Renderable(Protocol):
    """What rendering a target's nodes needs (services.target.Target and inputs.BuildInput have it)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def refs(self) -> Mapping[str, str]: ...

    @property
    def base_ref(self) -> str: ...

    @property
    def templates(self) -> render.Templates: ...


def dry_run(t: Renderable, out: Path, *, wheels: Mapping[str, render.WheelFile] | None = None) -> list[Path]:
    """Write every node's rendered Dockerfile, compile script, context listing and every text file of its
    context (``<node>.context/<path>``: the launch script among them) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for n in t.graph.nodes:
        if n.kind == "base":
            continue
        parent = t.base_ref if n.parents[0] == "base" else t.refs[n.parents[0]]
        r = render.render(n, templates=t.templates, parent_ref=parent, wheels=wheels)
        df = out / f"{n.slug}.Dockerfile"
        df.write_text(r.dockerfile)
        written.append(df)
        if r.script is not None:
            sh = out / f"{n.slug}.sh"
            sh.write_text(r.script)
            written.append(sh)
        if r.context:
            # every text file of the context, at its path (the launch script, keyrings' lists, ...), so that the
            # whole image reads as text; downloads, source trees and wheels are named (they are fetched/built)
            folder = out / f"{n.slug}.context"
            for c in r.context:
                if c.text is not None:
                    f = safepath.inside(folder, c.path)
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(c.text)
                    f.chmod(int(c.mode, 8))
                    written.append(f)
            listing = out / f"{n.slug}.context.txt"
            listing.write_text("".join(f"{c.path}  mode {c.mode}  " + (
                f"download {c.download}" if c.download else f"source tree of {c.tree}" if c.tree else
                f"wheel of {c.wheel}" if c.wheel else
                f"text, {len(c.text or '')} bytes, in {folder.name}/{c.path}") + "\n" for c in r.context))
            written.append(listing)
    summary = out / "graph.json"
    summary.write_text(json.dumps({"stack": t.graph.stack, "variant": t.graph.variant, "nodes": [
        {"name": n.name, "key": n.key, "ref": t.refs[n.name], "parents": list(n.parents),
         "unlocked": list(n.unlocked)} for n in t.graph.nodes]}, indent=2) + "\n")
    written.append(summary)
    return written

