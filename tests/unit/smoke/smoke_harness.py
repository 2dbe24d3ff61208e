"""Helpers for unit tests of the smoke suite: run checks in-process over mimic module trees."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from smoke import runner  # noqa: E402
from smoke.driver import Driver  # noqa: E402
from smoke.expect import parse  # noqa: E402
from smoke.prober import InProcessProber, ProbeResult, ToolResult  # noqa: E402
from smoke.report import CheckResult, Report  # noqa: E402


@dataclass
class FakeTools:
    """cuobjdump answers by (flag, file name); `which` returns the configured path."""

    path: str | None = "/usr/local/cuda/bin/cuobjdump"
    outputs: dict[tuple[str, str], ToolResult] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def which(self, name: str, extra_dirs: Sequence[str] = ()) -> str | None:
        return self.path

    def run(self, argv: Sequence[str], *, timeout: float) -> ToolResult:
        self.calls.append(list(argv))
        key = (argv[1], os.path.basename(argv[2]))
        return self.outputs.get(key, ToolResult(exit_code=0, stdout="", stderr=f"cuobjdump info    : File '{argv[2]}' does not contain device code"))


def driver(*, device: bool = False, stub: bool = False) -> Driver:
    return Driver(device=device, stub="/usr/local/cuda/lib64/stubs/libcuda.so" if stub else None,
                  stub_dir="/tmp/stub" if stub else None, mode="auto", note="test")


class RanksProber(InProcessProber):
    """In-process probes, and a FAKE of the multi-rank launcher: each rank answers what the test set."""

    def __init__(self, *, python_path: Sequence[str], answers: Sequence[Mapping[str, Any]] | None,
                 calls: list[dict[str, Any]]) -> None:
        super().__init__(python_path=python_path)
        self.answers = answers
        self.calls = calls

    def probe_ranks(self, name: str, args: Mapping[str, Any], *, ranks: int, timeout: float) -> list[ProbeResult]:
        self.calls.append({"name": name, "args": dict(args), "ranks": ranks, "timeout": timeout})
        if self.answers is None:
            return super().probe_ranks(name, args, ranks=ranks, timeout=timeout)
        return [ProbeResult(data=dict(a), how=f"fake rank {i}") for i, a in enumerate(self.answers)]


@dataclass
class Suite:
    """Runs checks of one expectation in-process over the mimic trees of a test."""

    site: Path  # where mimic modules and dist-infos go (first on sys.path for the probes)
    image: Path  # the "image" root for file checks (dpkg status, headers, CUDA_HOME, source trees)
    tools: FakeTools = field(default_factory=FakeTools)
    rank_answers: Sequence[Mapping[str, Any]] | None = None  # what the fake launcher's ranks answer
    rank_calls: list[dict[str, Any]] = field(default_factory=list)

    def run(self, expect: Mapping[str, Any], *, tier: str = "build", device: bool = False,
            env: Mapping[str, str] | None = None) -> Report:
        exp = parse({"schema": 1, "stack": "t", "variant": "v", **expect})
        prober = RanksProber(python_path=[str(self.site), *exp.python_path], answers=self.rank_answers,
                             calls=self.rank_calls)
        return runner.run(exp, "gpu" if tier == "gpu" else "build", prober=prober, tools=self.tools,
                          driver=driver(device=device), env=dict(env or {}), root=str(self.image))

    def check(self, name: str, section: Mapping[str, Any], **kw: Any) -> CheckResult:
        report = self.run({"required": [name], "checks": {name: dict(section)}}, **kw)
        (result,) = report.checks
        return result
