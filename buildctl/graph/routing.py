"""Which builders a variant's nodes go to (pure, given a BuilderProbe): the builders of the variant's platform.

A builder's platform is asked of it (the engine's version: Os/Arch, normalised), never taken from the
configuration: a builder configured for linux/arm64 that answers linux/amd64 is an error naming both, unless
the user asked for emulation (``--emulate``) and its host has a QEMU handler for the platform. Every variant
has one platform, so all its nodes go to the same builders (the scheduler picks one of them per node).

Without a native builder, nothing of the variant is built, and with ``--emulate`` everything but the compiles:
a compile under QEMU is hopeless (Megatron-LM's own emulated arm64 image build did not finish in six hours where
the native amd64 one took 2h16m, NVIDIA/Megatron-LM#7492), so a compile node to build is refused before
anything starts (``refusal``), saying which platform's builder is missing and how to configure one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from buildctl.errors import EngineError

PLATFORMS = ("linux/amd64", "linux/arm64")  # the platforms a variant may declare (manifest.model.Platform)
_ARCH = {"x86_64": "amd64", "x86-64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
         "arm64/v8": "arm64"}
COMPILE_KINDS = ("wheel",)  # nodes that run a compiler: never under emulation


def normalise(answer: str) -> str:
    """An engine's ``Os/Arch`` as a platform: ``linux/x86_64`` -> ``linux/amd64``, ``linux/aarch64`` ->
    ``linux/arm64`` (anything else lower-cased, as it came)."""
    os_, _, arch = answer.strip().partition("/")
    return f"{(os_ or 'linux').lower()}/{_ARCH.get(arch.lower(), arch.lower())}"


def qemu_name(platform: str) -> str:
    """The binfmt_misc handler name that runs ``platform``'s binaries (qemu-aarch64 for linux/arm64)."""
    arch = platform.split("/")[-1]
    return "qemu-" + {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


class BuilderProbe(Protocol):
    """What routing asks about a builder (services/wiring.EngineProbe asks the engines)."""

    def platform(self, endpoint: str) -> str: ...  # the engine's Os/Arch; EngineError when it does not answer

    def emulates(self, endpoint: str, platform: str) -> bool | None: ...  # a QEMU handler on its host (None: unknown)


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """The builders named for a build: per platform (config ``[builders]``), or without one (a flat list, the flags,
    the default engine), which then serve the platform they answer."""

    by_platform: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    any_platform: tuple[str, ...] = ()
    source: str = "the default engine"  # where they were named, for messages
    emulate: bool = False  # --emulate: builders of another platform may run nodes without compiles under QEMU


@dataclass(frozen=True, kw_only=True)
class Builder:
    endpoint: str  # syntax.builder_endpoint ("local": DOCKER_HOST, else the local socket)
    answered: str  # its platform, as it answered (normalised)
    emulated: bool = False  # runs the variant's platform under QEMU

    def label(self) -> str:
        return self.endpoint + (f" (emulated on {self.answered})" if self.emulated else "")


@dataclass(frozen=True, kw_only=True)
class Route:
    platform: str  # the variant's
    builders: tuple[Builder, ...]  # where its nodes go (empty: no builder can build it)
    missing: str = ""  # no native builder: which and how to configure one ("" when there is one)
    fix: str = ""
    notes: tuple[str, ...] = ()

    @property
    def emulated(self) -> bool:
        return bool(self.builders) and all(b.emulated for b in self.builders)

    def label(self) -> str:
        return ", ".join(b.label() for b in self.builders) or "none"


def route(platform: str, fleet: Fleet, probe: BuilderProbe) -> Route:
    """The builders for ``platform``: the native ones; else, with ``fleet.emulate``, those that emulate it; else
    none (``missing`` says what to configure). Raises EngineError for a builder configured for ``platform``
    that answers another, unless it runs emulated on request."""
    asked: dict[str, str | None] = {}
    native: list[Builder] = []
    emulated: list[Builder] = []
    notes: list[str] = []

    def answer(endpoint: str) -> str | None:
        """Its platform; None when it does not answer (said, and it is not used: the others may be)."""
        if endpoint not in asked:
            try:
                asked[endpoint] = normalise(probe.platform(endpoint))
            except EngineError as exc:
                asked[endpoint] = None
                notes.append(f"builder {endpoint} did not answer ({exc.what}): not used")
        return asked[endpoint]

    def try_emulated(endpoint: str, got: str) -> bool:
        can = probe.emulates(endpoint, platform)
        if can is False:
            notes.append(f"--emulate: builder {endpoint} ({got}) has no {qemu_name(platform)} handler registered with "
                         "binfmt_misc on its host")
            return False
        emulated.append(Builder(endpoint=endpoint, answered=got, emulated=True))
        if can is None:
            notes.append(f"builder {endpoint} ({got}) runs {platform} under emulation on request (--emulate); whether its "
                         f"host has a {qemu_name(platform)} handler is not known here: its first RUN fails if not")
        return True

    # the builders configured for this platform, then those named for any: a builder that answers another
    # platform is an error in the first case (unless emulated on request), only said in the second
    listed = [(ep, True) for ep in fleet.by_platform.get(platform, ())] + [(ep, False) for ep in fleet.any_platform]
    for ep, configured in listed:
        got = answer(ep)
        if got is None:
            continue
        if got == platform:
            native.append(Builder(endpoint=ep, answered=got))
        elif fleet.emulate and try_emulated(ep, got):
            continue
        elif not configured:
            notes.append(f"builder {ep} is {got}: not used for {platform}")
        else:
            raise EngineError(
                f"builder {ep} is configured for {platform} ({fleet.source}) and answered {got}",
                why="a builder's platform is asked of its engine, never taken from the configuration"
                    + ("; --emulate was given, but its host has no "
                       f"{qemu_name(platform)} handler registered with binfmt_misc" if fleet.emulate else ""),
                fix=f"list it under \"{got}\" instead, or name a {platform} builder"
                    + ("" if fleet.emulate else f" (to run {platform} nodes without compiles on it under QEMU: "
                                                "--emulate, with a QEMU handler registered on its host)"))
    if not native and not emulated and fleet.emulate:
        for other, eps in fleet.by_platform.items():  # a builder of another platform whose host emulates this one
            for ep in eps if other != platform else ():
                if answer(ep) == other and probe.emulates(ep, platform):
                    emulated.append(Builder(endpoint=ep, answered=other, emulated=True))
    if native:
        if emulated:
            notes.append(f"{len(native)} native {platform} builder(s): the emulated one(s) are not used")
        return Route(platform=platform, builders=tuple(native), notes=tuple(notes))
    seen = ", ".join(f"{ep} is {got}" if got else f"{ep} did not answer" for ep, got in asked.items())
    missing = f"no native {platform} builder" + (f" ({seen})" if seen else "")
    fix = (f"configure one: [builders] \"{platform}\" = [\"ssh://USER@HOST\"] in the configuration file "
           f"(or BUILDCTL_BUILDERS=\"{platform}=ssh://USER@HOST\"), or name one with --builder")
    silent = [ep for ep in fleet.by_platform.get(platform, ()) if asked.get(ep, "") is None]
    if silent:
        fix = f"check that {', '.join(silent)} answer{'s' if len(silent) == 1 else ''} (the engine's version), or {fix}"
    return Route(platform=platform, builders=tuple(emulated), missing=missing, fix=fix, notes=tuple(notes))


def refusal(route: Route, to_build: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """(what, fix) when the nodes to build (``(name, kind)``) cannot be built on ``route``'s builders, else None:
    every node without a builder of the variant's platform, a compile under emulation always."""
    if not to_build or (route.builders and not route.emulated):
        return None
    compiles = [name for name, kind in to_build if kind in COMPILE_KINDS]
    why_not = ("a compile is never run under emulation: QEMU makes compiles many times slower (Megatron-LM's "
               "emulated arm64 image build did not finish in six hours where the native amd64 one took 2h16m, "
               "NVIDIA/Megatron-LM#7492)")
    if route.emulated:
        if not compiles:
            return None
        return (f"{', '.join(compiles)} would compile under QEMU on {route.label()}: refused ({route.missing}); "
                f"{why_not}", route.fix)
    names = [name for name, _ in to_build]
    what = f"{len(names)} node(s) to build ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): {route.missing}"
    if compiles:
        return what, f"{route.fix}. {why_not[0].upper()}{why_not[1:]}"
    return what, (f"{route.fix}; or pass --emulate to build these nodes (no compile among them) under QEMU on a "
                  f"builder whose host has a {qemu_name(route.platform)} handler")


def for_nodes(route: Route, nodes: Sequence[tuple[str, str, str]]) -> Mapping[str, str]:
    """Per node (``(name, kind, action)``), the builder it goes to, as `plan` names it: the route's builders for a
    node to build or pull, ``refused: ...`` for one to build that cannot be, ``-`` for one with nothing to do."""
    to_build = [(n, k) for n, k, a in nodes if a == "build"]
    refused = refusal(route, to_build) is not None
    out: dict[str, str] = {}
    for name, kind, action in nodes:
        if action not in ("build", "pull"):
            out[name] = "-"
        elif action == "build" and refused and (not route.emulated or kind in COMPILE_KINDS):
            out[name] = ("refused: compile under emulation" if route.emulated
                         else f"refused: no {route.platform} builder")
        elif not route.builders:
            out[name] = f"no {route.platform} builder"
        else:
            out[name] = route.label()
    return out
