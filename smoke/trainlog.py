"""Megatron-LM's training log, read back: the losses of each step, step times, memory (pure, stdlib only).

The format is Megatron's own (megatron/training/training.py ``training_log`` @ effebd81, lines 1702-1765):

    [2026-12-02 16:01:02] iteration        3/      30 | consumed samples:           24 | elapsed time per
    iteration (ms): 812.3 | ... | learning rate: 1.000000E-03 | global batch size:     8 | lm loss:
    9.012345E+00 | loss scale: 1.0 | grad norm: 3.210 | number of skipped iterations:   0 | number of
    nan iterations:   0 |

(one line). A loss is printed only when its average over the logged steps is above 0 (``if avg > 0.0``), so
a NaN loss never appears as a number: it shows as a missing loss and in "number of nan iterations".
``report_memory`` (megatron/training/utils.py:267-279) prints once, after the first logged step:

    [Rank 0] (after 1 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.6 | reserved: ...
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

_ITER_RE = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
_FIELD_RE = re.compile(r"\s*([^|:]+?):\s*([^|]*?)\s*\|")
_MEMORY_RE = re.compile(r"memory \(MB\)((?:\s*\|\s*[a-z ]+:\s*[-+0-9.eE]+)+)")
_MEMORY_FIELD_RE = re.compile(r"\|\s*([a-z ]+?):\s*([-+0-9.eE]+)")
# fields of the iteration line that are not losses
_NOT_LOSSES = frozenset({
    "consumed samples", "skipped samples", "elapsed time per iteration (ms)", "throughput per GPU (TFLOP/s/GPU)",
    "energy per GPU (J/iter/GPU)", "power per GPU (W/GPU)", "learning rate", "decoupled learning rate",
    "global batch size", "loss scale", "grad norm", "num zeros", "params norm", "number of skipped iterations",
    "number of nan iterations",
})


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class Step:
    iteration: int
    of: int  # the run's train iterations
    losses: dict[str, float] = field(default_factory=dict)  # "lm loss" -> value (absent when 0 or NaN)
    step_ms: float | None = None
    skipped: int = 0  # iterations skipped since the last logged one (fp16 loss-scale overflow)
    nan: int = 0  # iterations whose loss was NaN since the last logged one
    grad_norm: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "losses": dict(self.losses), "step_ms": self.step_ms,
                "skipped": self.skipped, "nan": self.nan, "grad_norm": self.grad_norm}


@dataclass(frozen=True, kw_only=True)
class TrainLog:
    steps: tuple[Step, ...]
    memory_mb: dict[str, float] = field(default_factory=dict)  # Megatron's report_memory fields

    @property
    def train_iters(self) -> int | None:
        return self.steps[-1].of if self.steps else None

    def loss_key(self) -> str | None:
        """The loss the run optimises: 'lm loss' when present, else the first loss any step printed."""
        keys = [k for s in self.steps for k in s.losses]
        if "lm loss" in keys:
            return "lm loss"
        return keys[0] if keys else None


def parse(text: str) -> TrainLog:
    steps: list[Step] = []
    memory: dict[str, float] = {}
    for line in text.splitlines():
        m = _ITER_RE.search(line)
        if m:
            fields = {k.strip(): v.strip() for k, v in _FIELD_RE.findall(m.group(3) + ("" if m.group(3).endswith("|") else "|"))}
            losses: dict[str, float] = {}
            for key, value in fields.items():
                n = _number(value)
                if key not in _NOT_LOSSES and key.endswith("loss") and n is not None:
                    losses[key] = n
            step_ms = _number(fields.get("elapsed time per iteration (ms)", ""))
            grad = _number(fields.get("grad norm", ""))
            steps.append(Step(iteration=int(m.group(1)), of=int(m.group(2)), losses=losses, step_ms=step_ms,
                              skipped=int(_number(fields.get("number of skipped iterations", "0")) or 0),
                              nan=int(_number(fields.get("number of nan iterations", "0")) or 0), grad_norm=grad))
            continue
        mm = _MEMORY_RE.search(line)
        if mm and not memory:
            for key, value in _MEMORY_FIELD_RE.findall(mm.group(1)):
                n = _number(value)
                if n is not None:
                    memory[key.strip()] = n
    return TrainLog(steps=tuple(steps), memory_mb=memory)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    ok: bool
    summary: str
    details: dict[str, Any]


def judge(log: TrainLog, *, min_steps: int, window: int = 3) -> Verdict:
    """Whether the run trained: at least ``min_steps`` logged steps, every loss finite and no NaN step, and
    the mean loss of the last ``window`` steps with a loss below the mean of the first ``window``."""
    key = log.loss_key()
    losses = [s.losses[key] for s in log.steps if key is not None and key in s.losses]
    times = [s.step_ms for s in log.steps[1:] if s.step_ms is not None]  # the first step includes warm-up
    details: dict[str, Any] = {
        "steps": len(log.steps), "train_iters": log.train_iters, "loss_key": key,
        "loss": [{"iteration": s.iteration, **s.losses} for s in log.steps],
        "step_ms": {"first": log.steps[0].step_ms if log.steps else None,
                    "median": sorted(times)[len(times) // 2] if times else None,
                    "min": min(times) if times else None, "max": max(times) if times else None},
        "skipped_iterations": sum(s.skipped for s in log.steps), "nan_iterations": sum(s.nan for s in log.steps),
        "memory_mb": dict(log.memory_mb),
    }
    problems: list[str] = []
    if len(log.steps) < min_steps:
        problems.append(f"{len(log.steps)} step(s) logged, at least {min_steps} needed")
    if details["nan_iterations"]:
        problems.append(f"{details['nan_iterations']} iteration(s) with a NaN loss (Megatron's count)")
    bad = [v for v in losses if not math.isfinite(v)]
    if bad:
        problems.append(f"non-finite loss values: {bad[:3]}")
    if key is None:
        problems.append("no step printed a loss")
    elif len(losses) < 2 * window:
        problems.append(f"{len(losses)} step(s) with a {key}: too few to tell whether it falls (need {2 * window})")
    else:
        first = sum(losses[:window]) / window
        last = sum(losses[-window:]) / window
        details.update(first_mean=first, last_mean=last)
        if not last < first:
            problems.append(f"{key} did not fall: mean of the first {window} steps {first:.4f}, of the last "
                            f"{window} {last:.4f}")
    if problems:
        return Verdict(ok=False, summary="; ".join(problems), details=details)
    med = details["step_ms"]["median"]
    peak = log.memory_mb.get("max allocated")
    return Verdict(ok=True, details=details, summary=(
        f"{len(log.steps)} steps, {key} {details['first_mean']:.3f} -> {details['last_mean']:.3f} (mean of the "
        f"first / last {window})" + (f", {med:.0f} ms a step" if med is not None else "")
        + (f", {peak:.0f} MB max allocated" if peak is not None else "")))
