"""A Megatron-LM training log, read into a JSON report: per-iteration losses and step times, peak memory,
the iterations reached, whether the losses fell and stayed finite.

    python3 report.py LOG [--profile NAME] [--losses 'lm loss,sop loss'] [--iters N] [--rc RC] [--seconds S]

The line formats are Megatron-LM effebd81's:
- megatron/training/training.py:1702-1763 (training_log): ` [YYYY-mm-dd HH:MM:SS] iteration {:8d}/{:8d} |
  consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | [throughput per GPU (TFLOP/s/GPU):
  {:.1f} |] learning rate: {:.6E} | global batch size: {:5d} | <key>: {:.6E} | ... | loss scale: {:.1f} |
  [grad norm: {:.3f} |] [num zeros: ... |] [params norm: {:.3f} |] number of skipped iterations: {:3d} |
  number of nan iterations: {:3d} |`. A loss key is printed only when its average is > 0.0
  (training.py:1746), so a NaN loss leaves its key out of that line: a missing key counts as not finite.
- megatron/training/utils.py:267-279 (report_memory), after the first logged iteration
  (training.py:1769): `[Rank 0] (after N iterations) memory (MB) | allocated: X | max allocated: X |
  reserved: X | max reserved: X | device usage: X`.

Stdlib only; the import is pure (tests/unit/smoke/test_h200_train_report.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
MEMORY = re.compile(r"memory \(MB\)(.*)$")
FIELD = re.compile(r"^\s*([^:|]+?):\s*(\S+)\s*$")
NOT_LOSSES = ("loss scale",)
TAIL = 3  # "first vs last few": the mean of the first and of the last TAIL logged iterations


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_iteration(line: str) -> dict[str, Any] | None:
    """One training_log line as {iteration, train_iters, fields: {name: float}}, or None."""
    m = ITERATION.search(line)
    if not m:
        return None
    fields: dict[str, float] = {}
    for part in m.group(3).split("|"):
        f = FIELD.match(part)
        if f:
            value = _number(f.group(2))
            if value is not None:
                fields[f.group(1).strip()] = value
    return {"iteration": int(m.group(1)), "train_iters": int(m.group(2)), "fields": fields}


def parse_memory(line: str) -> dict[str, float] | None:
    """A report_memory line's figures in MB ({allocated, max allocated, reserved, ...}), or None."""
    m = MEMORY.search(line)
    if not m:
        return None
    out: dict[str, float] = {}
    for part in m.group(1).split("|"):
        f = FIELD.match(part)
        if f:
            value = _number(f.group(2))
            if value is not None:
                out[f.group(1).strip()] = value
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def report(text: str, losses: list[str] | None = None, iters: int | None = None) -> dict[str, Any]:
    """The report of one log. `losses`: the loss keys every iteration line must carry (default: every key
    with 'loss' in its name seen in any line, 'loss scale' aside); `iters`: the iterations expected."""
    lines = [p for p in (parse_iteration(x) for x in text.splitlines()) if p is not None]
    memory = [m for m in (parse_memory(x) for x in text.splitlines()) if m is not None]
    keys = losses if losses is not None else sorted({k for p in lines for k in p["fields"]
                                                     if "loss" in k and k not in NOT_LOSSES})
    per_iter = []
    for p in lines:
        f = p["fields"]
        per_iter.append({"iteration": p["iteration"], "step_ms": f.get("elapsed time per iteration (ms)"),
                         "losses": {k: f.get(k) for k in keys}, "lr": f.get("learning rate"),
                         "grad_norm": f.get("grad norm"), "skipped": f.get("number of skipped iterations"),
                         "nan": f.get("number of nan iterations")})
    loss_summary: dict[str, Any] = {}
    for k in keys:
        vals = [it["losses"][k] for it in per_iter]
        present = [v for v in vals if v is not None]
        finite = bool(vals) and len(present) == len(vals) and all(math.isfinite(v) for v in present)
        entry: dict[str, Any] = {"finite": finite, "first": present[0] if present else None,
                                 "last": present[-1] if present else None}
        if finite and len(present) >= 2:
            n = min(TAIL, len(present) // 2)
            head, tail = _mean(present[:n]), _mean(present[-n:])
            entry.update(head_mean=head, tail_mean=tail, fell=tail < head, drop=head - tail)
        else:
            entry.update(head_mean=None, tail_mean=None, fell=False, drop=None)
        loss_summary[k] = entry
    steps = [it["step_ms"] for it in per_iter if it["step_ms"] is not None]
    # The first logged step carries compile/warm-up time: the steady figure is the median of the rest.
    rest = sorted(steps[1:]) if len(steps) > 1 else sorted(steps)
    last_iter = per_iter[-1]["iteration"] if per_iter else 0
    train_iters = lines[-1]["train_iters"] if lines else None
    expected = iters if iters is not None else train_iters
    nan_iters = sum(int(it["nan"] or 0) for it in per_iter)
    skipped = sum(int(it["skipped"] or 0) for it in per_iter)
    out: dict[str, Any] = {
        "iterations_logged": len(per_iter),
        "last_iteration": last_iter,
        "train_iters": train_iters,
        "completed": expected is not None and last_iter >= expected,
        "loss_keys": keys,
        "losses": loss_summary,
        "finite": bool(keys) and all(v["finite"] for v in loss_summary.values()) and nan_iters == 0,
        "loss_fell": bool(keys) and all(v["fell"] for v in loss_summary.values()),
        "nan_iterations": nan_iters,
        "skipped_iterations": skipped,
        "step_ms": {"first": steps[0] if steps else None,
                    "median_after_first": rest[len(rest) // 2] if rest else None,
                    "min": min(steps) if steps else None, "max": max(steps) if steps else None},
        "memory_mb": {"max_allocated": max((m.get("max allocated", 0.0) for m in memory), default=None),
                      "max_reserved": max((m.get("max reserved", 0.0) for m in memory), default=None),
                      "reports": memory},
        "per_iteration": per_iter,
    }
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--profile")
    ap.add_argument("--losses", help="comma-separated loss keys every iteration must carry")
    ap.add_argument("--iters", type=int, help="iterations expected (default: the log's train_iters)")
    ap.add_argument("--rc", type=int, help="the launch's exit status, recorded")
    ap.add_argument("--seconds", type=float, help="the launch's wall time, recorded")
    a = ap.parse_args(argv)
    with open(a.log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    r = report(text, [k.strip() for k in a.losses.split(",")] if a.losses else None, a.iters)
    r = {"profile": a.profile, "log": a.log, "rc": a.rc, "seconds": a.seconds, **r}
    r["ok"] = bool(r["completed"] and r["finite"] and r["loss_fell"] and (a.rc in (None, 0)))
    json.dump(r, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
