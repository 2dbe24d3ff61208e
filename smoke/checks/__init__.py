"""The checks, each with a build-tier part and (where it has one) a GPU-tier part.

A check function takes the Context and its Section of expect.json and returns a CheckResult; the
runner fills in ``required`` and the duration. Checks never raise for what they find: a problem in
the image is a failed result with the text Python (or the tool) gave.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from smoke.driver import Driver
from smoke.expect import Expect, Section
from smoke.prober import Prober, ProbeResult, Tools
from smoke.report import CheckResult, Tier, skipped


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """What the GPU tier found before the checks ran (the `gpu` probe)."""

    available: bool
    reason: str = ""  # why not, when not
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Context:
    expect: Expect
    tier: Tier
    prober: Prober
    tools: Tools
    driver: Driver
    env: Mapping[str, str]
    root: str = "/"  # file checks read the image's files under this root (unit tests: a tmp tree)
    gpu: Gpu | None = None
    # answers of REPEATABLE probes in this run, by their exact question (a check that asks what another asked
    # gets the same answer without a second process importing Megatron and TE)
    answers: dict[str, ProbeResult] = field(default_factory=dict, compare=False, repr=False)

    def path(self, p: str) -> str:
        return os.path.join(self.root, p.lstrip("/"))

    def probe(self, name: str, args: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
              stub: bool = True) -> ProbeResult:
        if name not in REPEATABLE:
            return self.prober.probe(name, args or {}, env=env, stub=stub)
        key = json.dumps([name, dict(args or {}), dict(env or {}), stub], sort_keys=True, default=str)
        if key not in self.answers:
            self.answers[key] = self.prober.probe(name, args or {}, env=env, stub=stub)
        return self.answers[key]


# Probes whose answer, for one question in one image and run, cannot change: parse_args of fixed arguments.
REPEATABLE = frozenset({"megatron_args"})


CheckFn = Callable[[Context, Section], CheckResult]


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    build: CheckFn | None
    gpu: CheckFn | None


def no_gpu(name: str, ctx: Context) -> CheckResult:
    gpu = ctx.gpu
    reason = gpu.reason if gpu else "the GPU probe did not run"
    return skipped(name, f"no GPU: {reason}", gpu=(gpu.info if gpu else {}))


def gpu_tier_repeats(name: str, run: CheckFn) -> CheckFn:
    """The GPU-tier part of a check that runs the same way as on the build host, given a GPU."""

    def gpu(ctx: Context, sec: Section) -> CheckResult:
        if ctx.gpu is None or not ctx.gpu.available:
            return no_gpu(name, ctx)
        return run(ctx, sec)

    return gpu


def import_failure(name: str, ctx: Context, what: str, res: ProbeResult, **details: Any) -> CheckResult:
    """A failed import: failed with Python's text, or deferred to the GPU tier when it needs a device."""
    from smoke.report import failed

    text = res.error_text() or "the probe gave no answer"
    info: dict[str, Any] = {"error": res.error, "probe": res.to_json(), **details}
    if ctx.tier == "build" and res.needs_device() and not ctx.driver.device:
        info.setdefault("driver", ctx.driver.to_json())
        return skipped(
            name, f"{what} needs a GPU device or a real CUDA driver ({text}): this part belongs to the GPU tier",
            deferred="gpu", **info)
    return failed(name, f"{what} failed: {text}", **info)


# ------------------------------------------------------------------------------ version text helpers

_CANON_RE = re.compile(r"[-_.]+")
_HEX_RE = re.compile(r"^g?([0-9a-f]{7,40})$")


def canon(name: str) -> str:
    """PEP 503 name: 'Transformer_Engine' and 'transformer-engine' are one distribution."""
    return _CANON_RE.sub("-", name).lower()


def split_version(version: str) -> tuple[str, str]:
    """'2.10.0.dev0+d2945c6' -> ('2.10.0.dev0', 'd2945c6'); a release '2.10.0' -> ('2.10.0', '')."""
    base, _, local = version.strip().partition("+")
    return base, local


def sha_of_local(local: str) -> str | None:
    """The git SHA prefix in a local version label ('d2945c6', 'gd2945c6.d20250101', '3f601f7.cu13')."""
    for part in re.split(r"[.+_-]", local.lower()):
        m = _HEX_RE.match(part)
        if m and not part.isdigit():
            return m.group(1)
    return None


def sha_matches(seen: str, expected: str) -> bool:
    """Prefix comparison: a short SHA matches the full one it abbreviates (7 hex digits at least)."""
    seen, expected = seen.lower(), expected.lower()
    n = min(len(seen), len(expected))
    return n >= 7 and seen[:n] == expected[:n]


def dotted_prefix(expected: str, seen: str) -> bool:
    """'9.14' matches '9.14.0.64'; '9.14.0.64' matches '9.14.0.64' (and not '9.14.1')."""
    e, s = expected.split("."), seen.split(".")
    return len(s) >= len(e) and s[: len(e)] == e


def base_version_equal(expected: str, seen: str) -> bool:
    """Equal release versions, written loosely or not ('2.10' == '2.10.0'; '2.10.0.dev0' != '2.10.0')."""
    def norm(v: str) -> list[str]:
        parts = re.split(r"[.]", v.strip().lower())
        while len(parts) > 1 and parts[-1] == "0":
            parts.pop()
        return parts

    return norm(expected) == norm(seen)
