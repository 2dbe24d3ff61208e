"""One build run's shared state, and the types of what a run is given and gives back (options, progress, report)."""

from __future__ import annotations

import datetime
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from buildctl import runs
from buildctl.builder.inputs import BuildInput
from buildctl.builder.pushes import EarlyPull, Pushes
from buildctl.config import Config
from buildctl.graph.records import RecordStore, state_root

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine


Action = Literal["have", "pull", "build"]  # what a build executes (the plan's have / pull / build)
Outcome = Literal["cached", "pulled", "built"]


class BuildProgress(Protocol):
    def node(self, name: str, state: str, detail: str = "") -> None: ...

    def log(self, name: str, line: str) -> None: ...


class SmokeGate(Protocol):
    """Runs the build-host smoke tier on the assembled image; raises SmokeFailed when it does not pass."""

    def __call__(self, engine: Engine, image: str, /, *, log_file: Path) -> str: ...  # a one-line summary


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    jobs: int = 2  # nodes built at once, over all engines
    skip_smoke: bool = False
    compile_timeout: float = 6 * 3600.0  # a cold Transformer Engine build takes hours
    emulation: bool | None = None  # an emulator for the variant's platform is registered on the engine host
    host_cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    host_memory_gib: float = field(default_factory=lambda: _memory_gib())
    nocache: bool = False  # no engine step cache: every step runs afresh (`buildctl repro`)
    load: bool = True  # the final image ends in the first engine (--no-load: a final image in the registry stays there)
    emulated: tuple[str, ...] = ()  # the engines (names) that run the variant's platform under QEMU (--emulate)


@dataclass(frozen=True, kw_only=True)
class NodeResult:
    name: str
    outcome: Outcome
    engine: str
    ref: str
    seconds: float
    backend: str = ""  # how it was built: classic or buildkit ("" for one cached or pulled)
    # compiles: the compiler calls the compiler cache served and those it missed (None: no cache or no compile)
    cache_hits: int | None = None
    cache_misses: int | None = None


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    final: str
    nodes: tuple[NodeResult, ...]
    smoke: Literal["passed", "skipped", "not-run"]
    wheels: Mapping[str, Path] = field(default_factory=dict)
    backend: str = "classic"  # the engines' backend (classic or buildkit)

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



class RunState:
    """What the parts of one run (host preparation, scheduler, node steps) share: the input, the engines, and
    what the run found and made so far. Fields written from worker threads are written under ``lock``."""

    def __init__(self, job: BuildInput, *, engines: Sequence[Engine], config: Config, progress: BuildProgress,
                 project: Path, options: BuildOptions, smoke_gate: SmokeGate | None) -> None:
        self.t = job
        self.g = job.graph
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
        self.pip_files: dict[str, Path] = {}  # path in the wheelhouse -> a downloaded wheel (install: pip; the installer), verified
        self.built: dict[str, str] = {}  # "name==version" -> sha256 of the wheel built from its locked sdist
        self.wheels: dict[str, Path] = {}  # component -> its compiled wheel file
        self.compile_tool: Path | None = None  # the compiler cache's binary (builder/compilecache.py), when compiles use it
        self.cache_stats: dict[str, tuple[int, int]] = {}  # compile node -> (cache hits, misses) of its compile here
        self.busy: dict[str, int] = {e.name: 0 for e in self.engines}
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.smoke: Literal["passed", "skipped", "not-run"] = "not-run"
        self.wheelhouse_url = ""
        self.wheelhouse_root: Path | None = None
        self.scratch = config.cache.root / "tmp" / f"run-{runs.owner()}"  # this run's; removed at its end
        self.running: set[str] = set()  # tasks running now
        self.threads: list[threading.Thread] = []
        self.pushes = Pushes(self.threads)  # node pushes, in the background
        self.early: dict[str, EarlyPull] = {}  # node -> its pull started before the host's work (Steps.pull_early)
        self.untrusted: set[str] = set()  # nodes tagged in the engine without a record
        self._source: tuple[str, str] | None = None
        self.created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def source(self) -> str:
        """org.opencontainers.image.source: asked of git when a node is first built (a no-op runs no git)."""
        if self._source is None:
            self._source = project_source(self.project)
        return self._source[0]

    @property
    def revision(self) -> str:
        if self._source is None:
            self._source = project_source(self.project)
        return self._source[1]

    @property
    def e0(self) -> Engine:
        return self.engines[0]

    def ref(self, name: str) -> str:
        return self.t.refs[name]

    def log_file(self, name: str) -> Path:
        return self.config.cache.node_log(self.g.stack, self.g.variant, name.replace(":", "-"))

    def have(self, name: str, engine: Engine) -> None:
        with self.lock:
            self.where.setdefault(name, set()).add(engine.name)
