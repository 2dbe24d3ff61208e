"""The train check (GPU tier) against a tiny mimic of the baked launch script, run as a real process.

The mimic is NOT Megatron: it is a few lines of Python that print Megatron-LM's training-log lines
(format of megatron/training/training.py training_log @ effebd81) with losses the test chooses, and
record the environment it was started with. A GPU is declared available to the check (``Gpu``), since
what is tested is the check's handling of the run, not a device.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from smoke.checks import Context, Gpu
from smoke.checks import train as train_check
from smoke.expect import Section, parse
from smoke.prober import InProcessProber, SystemTools
from smoke.report import CheckResult
from tests.unit.smoke.smoke_harness import driver

MIMIC = r'''#!{python}
import json, math, os, sys, time
spec = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mimic.json")))
json.dump({{k: os.environ.get(k) for k in ("BUILDCTL_PROFILE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                          "MASTER_PORT", "SLURM_PROCID")}}, open(spec["env_out"], "w"))
print("> building train, validation, and test datasets ...", flush=True)
n = spec["steps"]
for i in range(1, n + 1):
    loss = spec["losses"][i - 1]
    s = " [2026-12-02 16:01:02] iteration {{:8d}}/{{:8d}} |".format(i, n)
    s += " consumed samples: {{:12d}} | elapsed time per iteration (ms): {{:.1f}} |".format(i * 8, 700.0 + i)
    s += " learning rate: 1.000000E-03 | global batch size:     8 |"
    if loss > 0.0:
        s += " lm loss: {{:.6E}} |".format(loss)
    s += " loss scale: 1.0 | grad norm: 1.500 | number of skipped iterations:   0 |"
    s += " number of nan iterations: {{:3d}} |".format(1 if math.isnan(loss) else 0)
    print(s, flush=True)
    if i == 1:
        print("[Rank 0] (after 1 iterations) memory (MB) | allocated: 100.0 | max allocated: 200.0 | reserved: 300.0 | max reserved: 300.0", flush=True)
time.sleep(spec.get("sleep", 0))
sys.exit(spec.get("exit", 0))
'''


def image(tmp_path: Path, spec: dict[str, Any]) -> Path:
    root = tmp_path / "image"
    bindir = root / "usr" / "local" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "buildctl-launch"
    script.write_text(MIMIC.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (bindir / "mimic.json").write_text(json.dumps({"env_out": str(tmp_path / "env.json"), **spec}))
    return root


def run(tmp_path: Path, spec: dict[str, Any], section: dict[str, Any] | None = None,
        env: dict[str, str] | None = None) -> CheckResult:
    root = image(tmp_path, spec)
    sec = {"profile": "proxy-1gpu", "script": "/usr/local/bin/buildctl-launch", "launcher": "srun",
           "min_steps": 20, "timeout_s": 60, "log_dir": str(tmp_path / "logs"), **(section or {})}
    exp = parse({"schema": 1, "stack": "t", "variant": "v", "required": ["train"], "checks": {"train": sec}})
    ctx = Context(expect=exp, tier="gpu", prober=InProcessProber(python_path=[]), tools=SystemTools(),
                  driver=driver(device=True), env={"PATH": os.environ["PATH"], **(env or {})}, root=str(root),
                  gpu=Gpu(available=True, info={"name": "mimic"}))
    return train_check.gpu(ctx, Section("train", exp.section("train")))


def test_a_run_whose_loss_falls_passes_and_keeps_every_step(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 30, "losses": [9 - 0.2 * i for i in range(30)]})
    assert r.status == "pass", r.summary
    assert r.summary.startswith("profile proxy-1gpu: 30 steps, lm loss 8.800 -> 3.400")
    d = r.details
    assert d["exit_code"] == 0 and d["steps"] == 30 and len(d["loss"]) == 30
    assert d["loss"][0] == {"iteration": 1, "lm loss": 9.0}
    assert d["memory_mb"]["max allocated"] == 200.0
    assert Path(d["log"]).read_text().count("] iteration ") == 30
    # srun launch: one rank, the profile chosen through the script's own variable
    env = json.loads((tmp_path / "env.json").read_text())
    assert env == {"BUILDCTL_PROFILE": "proxy-1gpu", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "SLURM_PROCID": None}


def test_a_slurm_step_around_the_suite_does_not_leak_into_the_rank(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 30, "losses": [9 - 0.2 * i for i in range(30)]},
            env={"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "MASTER_ADDR": "10.0.0.1"})
    assert r.status == "pass"
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["SLURM_PROCID"] is None and env["RANK"] == "0" and env["MASTER_ADDR"] == "10.0.0.1"


def test_torchrun_launch_gets_no_rank_variables(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 30, "losses": [9 - 0.2 * i for i in range(30)]}, {"launcher": "torchrun"})
    assert r.status == "pass"
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["RANK"] is None and env["BUILDCTL_PROFILE"] == "proxy-1gpu"


def test_a_rising_loss_fails_with_the_log_tail(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 30, "losses": [5 + 0.1 * i for i in range(30)]})
    assert r.status == "fail" and "lm loss did not fall" in r.summary
    assert any(" iteration       30/      30 |" in ln for ln in r.details["log_tail"])


def test_a_nan_step_fails(tmp_path: Path) -> None:
    losses = [9 - 0.2 * i for i in range(30)]
    losses[7] = float("nan")
    r = run(tmp_path, {"steps": 30, "losses": losses})
    assert r.status == "fail" and "NaN loss" in r.summary


def test_a_crash_fails_with_its_exit_status(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 3, "losses": [9, 8, 7], "exit": 3})
    assert r.status == "fail"
    assert "exit status 3" in r.summary and "3 step(s) logged, at least 20 needed" in r.summary


def test_a_run_past_its_limit_is_stopped_and_fails(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 30, "losses": [9 - 0.2 * i for i in range(30)], "sleep": 60}, {"timeout_s": 2})
    assert r.status == "fail" and "timed out after 2 s (stopped)" in r.summary


def test_a_missing_script_fails_saying_so(tmp_path: Path) -> None:
    r = run(tmp_path, {"steps": 1, "losses": [1]}, {"script": "/usr/local/bin/nothing-here"})
    assert r.status == "fail" and "/usr/local/bin/nothing-here is missing or not executable" in r.summary


@pytest.mark.parametrize("bad", [{"launcher": "mpirun"}, {"timeout_s": -1}, {"min_steps": True}, {"profile": None}])
def test_a_wrong_section_is_an_error_naming_the_key(tmp_path: Path, bad: dict[str, Any]) -> None:
    from smoke.expect import SectionError

    with pytest.raises(SectionError, match=r"checks\.train"):
        run(tmp_path, {"steps": 1, "losses": [1]}, bad)
