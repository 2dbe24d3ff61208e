"""The one place that makes the real things from the configuration: engines, sources, fetchers, resolvers, the smoke gate.

Commands and services ask here instead of constructing them (or importing another command to do it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl import syntax
from buildctl.config import BACKENDS, Config, registry_address
from buildctl.errors import UsageError
from buildctl.graph import routing
from buildctl.lock.resolvers import Resolvers
from buildctl.registry import credentials

if TYPE_CHECKING:
    from buildctl.builder.state import SmokeGate
    from buildctl.engine.engine import Engine
    from buildctl.sources.index import HttpFetcher, SimpleIndex
    from buildctl.sources.sources import Sources


def engine(config: Config, url: str | None = None, name: str = "default", backend: str | None = None) -> Engine:
    """A Docker engine client (``url`` None: DOCKER_HOST or the local socket) that builds with ``backend``
    (None: the configuration's, else classic)."""
    from buildctl.engine.engine import Engine

    chosen = backend or config.backend or "classic"
    assert chosen in BACKENDS, chosen  # checked where it was read (config.py, the commands' choices)
    return Engine(url, name=name, network_timeout=config.network_timeout, stall_timeout=config.stall_timeout,
                  backend="buildkit" if chosen == "buildkit" else "classic", docker_cli=config.docker_cli,
                  cli_memo=config.cache.root / "docker-cli.json")


@dataclass(frozen=True, kw_only=True)
class Builders:
    """Which engines a build runs on and how they build (``choose_builders``)."""

    backend: str  # config.BACKENDS
    endpoints: tuple[str | None, ...]  # None: DOCKER_HOST, else the local socket
    source: str  # where the list came from, for `plan` and `build` to say
    by_platform: Mapping[str, tuple[str, ...]] | None = None  # the configuration's [builders] table, when it applies

    def names(self) -> list[str]:
        return [f"engine{i}" if len(self.endpoints) > 1 else "default" for i in range(len(self.endpoints))]

    def describe(self) -> str:
        where = ", ".join(e or "the local engine (DOCKER_HOST or the socket)" for e in self.endpoints)
        return f"backend {self.backend} on {where} ({self.source})"


def check_registry_arg(registry: str | None) -> None:
    """``--registry``, checked as the configuration's ``registry`` is: it becomes part of every node's image name."""
    problem = registry_address(registry) if registry is not None else None
    if problem:
        raise UsageError(f"--registry {registry!r} {problem}", fix="give HOST[:PORT][/PATH], e.g. --registry 127.0.0.1:5000")


def choose_builders(config: Config, *, backend: str | None = None, engines: Sequence[str] = (),
                    builders: Sequence[str] = ()) -> Builders:
    """The engines and backend of a build, from `--backend`, `--engine` and `--builder` and the configuration
    (``backend``, ``builders``). ``--builder`` names BuildKit builders (endpoints: syntax.builder_endpoint),
    ``--engine`` engines; never both. The backend is the flag's, else the configuration's, else buildkit where
    builders are named and classic otherwise. The configuration's flat builders apply when the backend is buildkit
    and no --engine is given; its builders by platform (the [builders] table) with either backend, unless a flag
    names where to build."""
    if engines and builders:
        raise UsageError("--engine and --builder both name where to build: give one of them",
                         fix="--builder ENDPOINT for BuildKit builders (repeatable), --engine URL for engines")
    for b in builders:
        problem = syntax.builder_endpoint(b)
        if problem:
            raise UsageError(f"--builder {b!r} {problem}",
                             fix="e.g. --builder local, --builder unix:///var/run/docker.sock, "
                                 "--builder tcp://10.0.0.5:2376, --builder ssh://builder@host")
    twice = syntax.repeated(builders)
    if twice is not None:  # two clients of one engine, each given part of the nodes: one builder, named once
        raise UsageError(f"--builder {twice!r} is given twice", fix="name each builder once")
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r} is not a build backend", fix=f"use one of {', '.join(BACKENDS)}")
    if builders and backend == "classic":
        raise UsageError("--builder names BuildKit builders, and --backend classic builds without BuildKit",
                         fix="drop --backend classic, or name the engines with --engine URL")
    configured = config.builders or config.builders_by_platform
    chosen = backend or config.backend or ("buildkit" if builders or (configured and not engines) else "classic")
    if builders:
        listed, source = list(builders), "--builder"
    elif engines:
        listed, source = list(engines), "--engine"
    elif config.builders_by_platform:  # where each platform builds, with either backend (classic: engines)
        listed = [e for eps in config.builders_by_platform.values() for e in eps]
        return Builders(backend=chosen, endpoints=tuple(None if e == syntax.LOCAL_ENDPOINT else e for e in listed),
                        source=f"[builders] in {config.path or '$BUILDCTL_BUILDERS'}",
                        by_platform=config.builders_by_platform)
    elif chosen == "buildkit" and config.builders:
        listed, source = list(config.builders), f"builders in {config.path or 'the configuration'}"
    else:
        listed, source = [syntax.LOCAL_ENDPOINT], "the default engine"
    return Builders(backend=chosen, endpoints=tuple(None if e == syntax.LOCAL_ENDPOINT else e for e in listed),
                    source=source)


def build_engines(config: Config, chosen: Builders) -> list[Engine]:
    """One Engine per endpoint of ``chosen``, each building with its backend."""
    return [engine(config, url, name=name, backend=chosen.backend)
            for url, name in zip(chosen.endpoints, chosen.names(), strict=True)]


class EngineProbe:
    """routing.BuilderProbe over real engines: each builder asked its platform once (the engine's version, kept by its
    client), its host's QEMU handlers read where the engine is local (a unix socket). ``close`` ends the clients."""

    def __init__(self, config: Config, backend: str) -> None:
        self.config = config
        self.backend = backend
        self.engines: dict[str, Engine] = {}

    def engine(self, endpoint: str) -> Engine:
        if endpoint not in self.engines:
            self.engines[endpoint] = engine(self.config, None if endpoint == syntax.LOCAL_ENDPOINT else endpoint,
                                            name=endpoint, backend=self.backend)
        return self.engines[endpoint]

    def platform(self, endpoint: str) -> str:
        return self.engine(endpoint).platform()

    def emulates(self, endpoint: str, platform: str) -> bool | None:
        return emulation_registered(self.engine(endpoint).address, platform)

    def close(self) -> None:
        for e in self.engines.values():
            e.close()
        self.engines.clear()


def fleet(chosen: Builders, *, emulate: bool = False) -> routing.Fleet:
    """The builders ``chosen`` names, for routing: by platform (the [builders] table), else each serving the
    platform it answers."""
    named = tuple(e or syntax.LOCAL_ENDPOINT for e in chosen.endpoints)
    if chosen.by_platform is not None:
        return routing.Fleet(by_platform=chosen.by_platform, source=chosen.source, emulate=emulate)
    return routing.Fleet(any_platform=named, source=chosen.source, emulate=emulate)


@dataclass(frozen=True, kw_only=True)
class Routed:
    """A variant's route and the engines its build uses: the route's builders, or (none can build it) the first
    builder named, for the plan's questions and the pulls (anything to build is refused: plan.Plan.refused)."""

    route: routing.Route
    engines: tuple[Engine, ...]

    @property
    def emulated(self) -> tuple[str, ...]:
        return tuple(e.name for e, b in zip(self.engines, self.route.builders, strict=False) if b.emulated)

    def close(self) -> None:
        for e in self.engines:
            e.close()


def engines_for(config: Config, backend: str, route: routing.Route, *, fallback: str = syntax.LOCAL_ENDPOINT) -> Routed:
    """The engines of a route's builders (named as a build's engines always were), or ``fallback``'s alone."""
    endpoints = [b.endpoint for b in route.builders] or [fallback]
    return Routed(route=route, engines=tuple(
        engine(config, None if ep == syntax.LOCAL_ENDPOINT else ep,
               name="default" if len(endpoints) == 1 else f"engine{i}", backend=backend)
        for i, ep in enumerate(endpoints)))


def route(config: Config, chosen: Builders, platform: str, *, emulate: bool = False) -> Routed:
    """Route a variant of ``platform`` over the builders ``chosen`` names (routing.route: each builder asked)."""
    probe = EngineProbe(config, chosen.backend)
    try:
        r = routing.route(platform, fleet(chosen, emulate=emulate), probe)
    finally:
        probe.close()
    named = [e or syntax.LOCAL_ENDPOINT for e in chosen.endpoints]
    return engines_for(config, chosen.backend, r, fallback=named[0] if named else syntax.LOCAL_ENDPOINT)


def sources(config: Config, base_dir: Path | None = None) -> Sources:
    """The git sources (mirrors, insteadOf rules and the sources cache from the configuration)."""
    from buildctl.sources.sources import Sources

    return Sources.from_config(config, base_dir=base_dir)


def fetcher(config: Config) -> HttpFetcher:
    from buildctl.sources.index import HttpFetcher

    return HttpFetcher.from_config(config)


def index(config: Config, fetch: HttpFetcher | None = None) -> SimpleIndex:
    """The package index (pip_index_url, then the extra ones), as `buildctl lock` reads it."""
    from buildctl.sources.index import DEFAULT_INDEX, SimpleIndex

    return SimpleIndex([config.pip_index_url or DEFAULT_INDEX, *config.pip_extra_index_urls], fetch or fetcher(config))


class HostFetchers:
    """build.inputs.Fetchers from the configuration, each made when the build first needs it (a CA bundle is read
    then, not before)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def downloads(self) -> HttpFetcher:
        return fetcher(self.config)

    def index(self) -> tuple[SimpleIndex, HttpFetcher]:
        # as the build has always read them: without the download mirrors (the lock reads the index with them;
        # whether the two should agree is an open question, kept as it was)
        from buildctl.sources.index import HttpFetcher

        plain = HttpFetcher(ca_bundle=self.config.ca_bundle, timeout=self.config.network_timeout)
        return index(self.config, plain), plain


def resolvers(config: Config) -> Resolvers:
    """The resolvers that reach the engine, git remotes and package indexes."""
    from buildctl.lock.inbase import EngineInBase

    e = engine(config)
    fetch = fetcher(config)
    return Resolvers(registry=e, git=sources(config), in_base=EngineInBase(e, config), index=index(config, fetch),
                     fetch=fetch)


def emulation_registered(engine_address: str, variant_platform: str) -> bool | None:
    """Whether this host's binfmt_misc has a qemu handler for the platform (None: the engine is remote)."""
    if not engine_address.startswith("unix://"):
        return None
    try:
        state = Path(f"/proc/sys/fs/binfmt_misc/{routing.qemu_name(variant_platform)}").read_text()
    except OSError:
        return False
    return state.splitlines()[:1] == ["enabled"]


@contextlib.contextmanager
def registry_credentials(registry: str | None, env: Mapping[str, str]) -> Iterator[None]:
    """BUILDCTL_REGISTRY_AUTH for the registry a build shares its nodes through (credentials.docker_credentials),
    the same door `buildctl push` opens; nothing changes without a registry or without the variable."""
    if not registry:
        yield
        return
    with credentials.docker_credentials(env, registry):
        yield


def smoke_gate(config: Config, stack: str, variant: str, registry: str | None = None) -> SmokeGate:
    """The build-host smoke tier (smoke.BuildGate) as the gate before the entrypoint; reports under the cache.
    With the ``registry`` the build shares its nodes through, an assembled image whose digest there has
    build-tier evidence of this suite reuses it (services/evidence.GateReuse). Made when the gate first runs:
    a build with nothing to gate does not import the suite's runner and the evidence lookup (0.1 s)."""
    return _LazyGate(config=config, report_dir=config.cache.reports / "smoke" / stack / variant, registry=registry)


@dataclass
class _LazyGate:
    config: Config
    report_dir: Path
    registry: str | None
    _gate: SmokeGate | None = None

    def __call__(self, engine: Engine, image: str, /, *, log_file: Path) -> str:
        if self._gate is None:
            from buildctl.builder.smoke import BuildGate
            from buildctl.services.evidence import GateReuse

            self._gate = BuildGate(report_dir=self.report_dir, evidence=GateReuse(config=self.config,
                                                                                  registry=self.registry)
                                   if self.registry else None)
        return self._gate(engine, image, log_file=log_file)
