"""tests/data/gpu/h200-train/report.py on training logs written here in Megatron-LM effebd81's own format:
the iteration line of megatron/training/training.py:1702-1763 (training_log) and the memory line of
megatron/training/utils.py:267-279 (report_memory), built with the same format strings."""

# ruff: noqa: UP032  (Megatron's own str.format calls, copied as they are)

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "data" / "gpu" / "h200-train" / "report.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("h200_train_report", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _load()


def iteration_line(iteration: int, train_iters: int, ms: float, losses: dict[str, float], *, gbs: int = 32,
                   lr: float = 1e-4, grad_norm: float | None = 3.25, nan: int = 0, throughput: float | None = None) -> str:
    # training.py:1702-1759 @ effebd81, the same format strings in the same order
    s = " [2026-12-02 15:15:15]"
    s += ' iteration {:8d}/{:8d} |'.format(iteration, train_iters)
    s += ' consumed samples: {:12d} |'.format(iteration * gbs)
    s += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)
    if throughput is not None:
        s += f' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'
    s += f' learning rate: {lr:.6E} |'
    s += f' global batch size: {gbs:5d} |'
    for key, avg in losses.items():
        if avg > 0.0:  # training.py:1746: only positive averages are printed (NaN > 0.0 is False)
            s += ' {}: {:.6E} |'.format(key, avg)
    s += f' loss scale: {65536.0:.1f} |'
    if grad_norm is not None:
        s += f' grad norm: {grad_norm:.3f} |'
    s += ' number of skipped iterations: {:3d} |'.format(0)
    s += ' number of nan iterations: {:3d} |'.format(nan)
    return s


def memory_line(iteration: int, allocated: float, max_allocated: float) -> str:
    # utils.py:270-279 @ effebd81 (torch >= 2.6 adds device usage), printed as "[Rank {}] {}"
    mb = 'memory (MB)'
    string = f'(after {iteration} iterations) ' + mb
    string += ' | allocated: {}'.format(allocated)
    string += ' | max allocated: {}'.format(max_allocated)
    string += ' | reserved: {}'.format(max_allocated + 512.0)
    string += ' | max reserved: {}'.format(max_allocated + 1024.0)
    string += ' | device usage: {}'.format(max_allocated + 2048.0)
    return "[Rank {}] {}".format(0, string)


def bert_log(n: int = 30) -> str:
    lines = ["> building BertWordPieceLowerCase tokenizer ..."]
    for i in range(1, n + 1):
        lines.append(iteration_line(i, n, 900.0 if i == 1 else 41.0 + (i % 3),
                                    {"lm loss": 8.1 - 0.1 * i, "sop loss": 0.70 - 0.002 * i}))
        if i == 1:
            lines.append(memory_line(1, 1536.25, 2817.5))
    lines.append("[after training is done] datetime: 2026-12-02 15:16:00")
    return "\n".join(lines) + "\n"


def test_the_line_format_is_megatrons() -> None:
    line = iteration_line(3, 30, 41.2, {"lm loss": 7.5, "sop loss": 0.69})
    assert line == (" [2026-12-02 15:15:15] iteration        3/      30 | consumed samples:           96 |"
                    " elapsed time per iteration (ms): 41.2 | learning rate: 1.000000E-04 | global batch size:"
                    "    32 | lm loss: 7.500000E+00 | sop loss: 6.900000E-01 | loss scale: 65536.0 |"
                    " grad norm: 3.250 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    p = R.parse_iteration(line)
    assert p["iteration"] == 3 and p["train_iters"] == 30
    assert p["fields"]["lm loss"] == 7.5 and p["fields"]["sop loss"] == 0.69
    assert p["fields"]["elapsed time per iteration (ms)"] == 41.2 and p["fields"]["global batch size"] == 32


def test_a_bert_run_whose_losses_fall() -> None:
    r = R.report(bert_log())
    assert r["loss_keys"] == ["lm loss", "sop loss"]
    assert r["iterations_logged"] == 30 and r["last_iteration"] == 30 and r["completed"]
    assert r["finite"] and r["loss_fell"] and r["nan_iterations"] == 0
    lm = r["losses"]["lm loss"]
    assert lm["first"] == pytest.approx(8.0) and lm["last"] == pytest.approx(5.1)
    assert lm["head_mean"] == pytest.approx(7.9) and lm["tail_mean"] == pytest.approx(5.2)
    assert r["step_ms"]["first"] == 900.0 and r["step_ms"]["median_after_first"] in (41.0, 42.0, 43.0)
    assert r["memory_mb"]["max_allocated"] == 2817.5 and r["memory_mb"]["max_reserved"] == 3841.5
    assert [it["iteration"] for it in r["per_iteration"]] == list(range(1, 31))
    json.dumps(r)  # the report is JSON as it stands


def test_a_gpt_run_with_the_throughput_field_and_lm_loss_only() -> None:
    text = "\n".join(iteration_line(i, 30, 120.0, {"lm loss": 11.0 - 0.05 * i}, throughput=310.5)
                     for i in range(1, 31))
    r = R.report(text, losses=["lm loss"])
    assert r["loss_keys"] == ["lm loss"] and r["finite"] and r["loss_fell"] and r["completed"]
    assert r["memory_mb"]["max_allocated"] is None


def test_a_nan_loss_drops_its_key_and_counts_as_not_finite() -> None:
    lines = [iteration_line(i, 30, 50.0, {"lm loss": math.nan if i == 5 else 8.0 - 0.1 * i}, nan=int(i == 5))
             for i in range(1, 31)]
    assert "lm loss" not in lines[4]
    r = R.report("\n".join(lines), losses=["lm loss"])
    assert not r["finite"] and r["nan_iterations"] == 1 and not r["loss_fell"]
    assert r["per_iteration"][4]["losses"]["lm loss"] is None


def test_a_loss_that_does_not_fall_and_a_run_that_stopped_early() -> None:
    text = "\n".join(iteration_line(i, 30, 50.0, {"lm loss": 7.0 + 0.01 * i}) for i in range(1, 12))
    r = R.report(text)
    assert r["finite"] and not r["loss_fell"] and not r["completed"] and r["last_iteration"] == 11
    assert r["losses"]["lm loss"]["drop"] < 0


def test_no_iteration_lines_is_not_ok(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error\n")
    assert R.main([str(log), "--profile", "bert-proxy-1gpu", "--rc", "1"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["iterations_logged"] == 0 and out["loss_keys"] == [] and out["rc"] == 1


def test_the_command_line_on_a_good_log(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "train.log"
    log.write_text(bert_log())
    assert R.main([str(log), "--profile", "bert-proxy-1gpu", "--losses", "lm loss,sop loss", "--rc", "0",
                   "--seconds", "95.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["profile"] == "bert-proxy-1gpu" and out["seconds"] == 95.5
