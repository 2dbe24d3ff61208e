"""Building a stack's variant: the plan's actions, the host's part first, then the missing nodes in parallel.

The run's parts, each a module of buildctl/builder/: state.py (what the parts share; options, report),
prepare.py (the host's part: sources, downloads, pip wheels), schedule.py (one run per stack, the
parallel executor over the engines, leftovers, interrupts), steps.py (building, pulling, publishing one
node), dryrun.py (what `build --dry-run` writes). This module puts them in order.

Its input is a ``BuildInput`` (inputs.py: the graph, names, a few values; never the manifest or the
lock file) and the plan (buildctl.graph.plan), made once this run holds the stack's lock; the plan
alone decides, per node, have / pull / build / publish. Order (each step fails before the next starts):

1. (before this module: buildctl.services.build checks the lock);
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
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import runs
from buildctl.builder import wheelhouse
from buildctl.builder.dryrun import Renderable, dry_run
from buildctl.builder.inputs import BuildInput, Fetchers
from buildctl.builder.prepare import HostPrep
from buildctl.builder.schedule import Scheduler
from buildctl.builder.state import (
    Action,
    BuildOptions,
    BuildProgress,
    BuildReport,
    NodeResult,
    Outcome,
    RunState,
    SmokeGate,
)
from buildctl.builder.steps import Steps, compile_jobs, extract_wheel, label_instruction, smoke_label
from buildctl.config import Config
from buildctl.errors import BuildFailed, EngineError, Interrupted, UsageError
from buildctl.graph.plan import ArchCheck, Plan
from buildctl.graph.specs import EntrypointNodeSpec
from buildctl.labels import SMOKE_LABEL

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine

__all__ = [
    "SMOKE_LABEL",
    "Action",
    "BuildOptions",
    "BuildProgress",
    "BuildReport",
    "NodeResult",
    "Outcome",
    "Renderable",
    "SmokeGate",
    "compile_jobs",
    "dry_run",
    "executed",
    "extract_wheel",
    "label_instruction",
    "run",
]


def executed(plan: Plan) -> tuple[dict[str, Action], set[str]]:
    """What a build executes of a plan: each needed node's action (skipped nodes left out) and the present
    nodes it publishes. A node the plan could not decide stops the build before anything starts."""
    actions: dict[str, Action] = {}
    if plan.refused is not None:  # no builder of the variant's platform may build them (graph/routing.py)
        raise EngineError(f"cannot build {plan.graph.stack}/{plan.graph.variant} ({plan.graph.platform}): "
                          f"{plan.refused[0]}", fix=plan.refused[1])
    unknown = [p for p in plan.nodes if p.action == "unknown"]
    if unknown:
        last = unknown[-1]  # the latest: the earlier ones are unknown because it is
        raise BuildFailed(f"cannot decide what to do with {last.node.name} of {plan.graph.stack}/{plan.graph.variant}"
                          + (f" (nor with {', '.join(p.node.name for p in unknown[:-1])})" if len(unknown) > 1 else ""),
                          why=last.because + (f" ({last.note})" if last.note else ""),
                          fix="check that the engine and the registry answer (`buildctl plan`), then build again")
    for p in plan.nodes:
        if p.action != "skip" and p.action != "unknown":  # (none is unknown here: mypy's narrowing)
            actions[p.node.name] = p.action
    return actions, set(plan.to_publish)


def run(job: BuildInput, *, decide: Callable[[], Plan], engines: Sequence[Engine], config: Config, fetchers: Fetchers,
        progress: BuildProgress, project: Path, options: BuildOptions | None = None,
        smoke_gate: SmokeGate | None = None) -> BuildReport:
    """Build ``job`` as the plan says. ``decide`` makes the plan (buildctl.graph.plan.make) once this run holds
    the stack's lock, so that a run that waited for another plans with what that one built."""
    if not engines:
        raise UsageError("no engine to build with")
    if len(engines) > 1 and job.registry is None:
        raise UsageError("several engines share a build through a registry, and there is none",
                         fix="pass --registry HOST:PORT (or set `registry` in the configuration)")
    return _Build(job, decide=decide, engines=engines, config=config, fetchers=fetchers, progress=progress,
                  project=project, options=options or BuildOptions(), smoke_gate=smoke_gate).run()


class _Build:
    """One run: the plan, the host's part, then the scheduler over the node steps."""

    def __init__(self, job: BuildInput, *, decide: Callable[[], Plan], engines: Sequence[Engine], config: Config,
                 fetchers: Fetchers, progress: BuildProgress, project: Path, options: BuildOptions,
                 smoke_gate: SmokeGate | None) -> None:
        self.s = RunState(job, engines=engines, config=config, progress=progress, project=project, options=options,
                          smoke_gate=smoke_gate)
        self.decide = decide
        self.remote: set[str] = set()  # the final image, left in the registry (--no-load)
        self.schedule = Scheduler(self.s)
        self.steps = Steps(self.s, engine_for=self.schedule.engine)
        self.host = HostPrep(self.s, fetchers=fetchers, ensure=self.steps.ensure)

    def run(self) -> BuildReport:
        with self.schedule.exclusive():
            try:
                self.schedule.remove_leftovers()
                return self._run()
            except Interrupted as exc:
                exc.done = self.schedule.stop(exc.name)
                raise
            except KeyboardInterrupt:
                import signal
                raise Interrupted(signal.SIGINT, "SIGINT", self.schedule.stop("SIGINT")) from None
            finally:
                for e in self.s.engines:
                    e.intermediates = None
                shutil.rmtree(self.s.scratch, ignore_errors=True)

    def _run(self) -> BuildReport:
        actions, publish = self._actions()
        for name in sorted(n for n in self.s.untrusted if actions.get(n) not in (None, "have")):
            self.s.progress.node(name, "untrusted", "tagged in the engine without a record of a completed build "
                                                  "(an interrupted run?): built again")
        for name in self.s.g.names():
            if name not in actions:
                self.s.progress.node(name, "skipped", "not needed: a later node is present")
            elif actions[name] == "have":
                self.s.progress.node(name, "cached", "in the registry: left there (--no-load)" if name in self.remote
                                     else "")
                self.s.results.append(NodeResult(name=name, outcome="cached", engine=self.s.e0.name, ref=self.s.ref(name),
                                                 seconds=0.0))
        todo = {n for n, a in actions.items() if a != "have"} | publish
        if todo:
            if any(a == "build" for a in actions.values()):
                self._check_platform()
            self.steps.pull_early(actions)
            self.host.prepare_sources(actions)
            self.host.fetch_downloads(actions)
            self.host.fetch_compile_tool(actions)
            self.host.fetch_pip(actions)
            self.s.scratch.mkdir(parents=True, exist_ok=True)  # this run's: <cache>/tmp/run-<owner>/
            for e in self.s.engines:  # classic builds list their step images there: swept if this run is killed
                e.intermediates = self.s.scratch / runs.journal_name(e.address)
            with self._wheelhouse() as url:
                self.s.wheelhouse_url = url
                self.schedule.execute(actions, publish, self.steps.task)
        final = self.s.g.final.name
        if final in self.remote:  # --no-load: in the registry, left there; its smoke label is its spec's (the key's)
            spec = self.s.g.final.spec
            if self.s.g.gate and self.s.smoke == "not-run" and isinstance(spec, EntrypointNodeSpec):
                self.s.smoke = smoke_label(spec)
        elif self.s.opt.load and self.s.e0.name not in self.s.where.get(final, {self.s.e0.name}):
            self.s.e0.pull(self.s.ref(final))  # built by another engine: the user runs it from the first
        if self.s.g.gate and self.s.smoke == "not-run":
            there = self.s.where.get(final, {self.s.e0.name})
            holder = next(e for e in (self.s.e0, *self.s.engines) if e.name in there)
            labels = holder.inspect_image(self.s.ref(final)).labels
            self.s.smoke = "skipped" if labels.get(SMOKE_LABEL) == "skipped" else "passed"
        return BuildReport(final=self.s.ref(final), nodes=tuple(self.s.results), smoke=self.s.smoke, wheels=dict(self.s.wheels),
                           backend="+".join(dict.fromkeys(e.backend for e in self.s.engines)))

    def _actions(self) -> tuple[dict[str, Action], set[str]]:
        """The plan's actions and what it publishes; nothing else decides."""
        plan = self.decide()
        actions, publish = executed(plan)
        for p in plan.nodes:
            if p.untrusted:
                self.s.untrusted.add(p.node.name)
            if p.wheel is not None:
                self.s.wheels[p.node.component or ""] = p.wheel
            if p.remote:
                self.remote.add(p.node.name)
            elif p.action == "have" and p.node.kind not in ("base", "wheel"):
                self.s.where.setdefault(p.node.name, set()).add(self.s.e0.name)
        return actions, publish

    def _check_platform(self) -> None:
        """Each engine can build the variant's platform, with its backend (a BuildKit engine needs a docker CLI
        that drives BuildKit): said before anything is built."""
        for e in self.s.engines:
            how = e.check_backend()
            if e.backend != "classic":
                self.s.progress.node("backend", "checked", f"{e.name}: {how}")
            arch = ArchCheck(variant_platform=self.s.g.platform, engine_platform=e.platform(),
                             emulation=self.s.opt.emulation)
            if not arch.native and arch.emulation is False:
                raise EngineError(f"engine {e.name} cannot build {self.s.g.stack}/{self.s.g.variant}", why=arch.message(),
                                  fix="register emulation on the engine host, or build on a native engine")

    @contextlib.contextmanager
    def _wheelhouse(self) -> Iterator[str]:
        root = Path(tempfile.mkdtemp(prefix="wheelhouse-", dir=self.s.scratch))
        try:
            wheelhouse.link_tree(root, {**{p.name: p for p in self.s.pip.values()}, **self.s.pip_files})
            # by stack and variant only: the same URL for every cache keeps the engine's step cache shared
            port = wheelhouse.preferred_port(f"{self.s.g.stack}/{self.s.g.variant}")
            with wheelhouse.serve(root, port=port, host=self.s.config.wheelhouse_address or "127.0.0.1") as url:
                if not url.endswith(f":{port}/"):
                    self.s.progress.node("wheelhouse", "port", f"port {port} was taken: serving on {url} (the engine's "
                                         "step cache of the steps that read it is not reused this time)")
                self.s.wheelhouse_root = root
                yield url
        finally:
            shutil.rmtree(root, ignore_errors=True)
