"""smoke.trainlog: Megatron-LM's training log read back, and the train check's verdict (pure).

The lines below are written in the exact format of megatron/training/training.py training_log @ effebd81
(lines 1702-1765: a loss is printed only when its average is above 0, so NaN never appears as a number)
and megatron/training/utils.py report_memory (267-279).
"""

from __future__ import annotations

import math

from smoke import trainlog


def line(it: int, of: int, losses: dict[str, float], *, ms: float = 800.0, skipped: int = 0, nan: int = 0) -> str:
    s = " [2026-12-02 16:01:02]"
    s += f" iteration {it:8d}/{of:8d} |"
    s += f" consumed samples: {it * 8:12d} |"
    s += f" elapsed time per iteration (ms): {ms:.1f} |"
    s += " throughput per GPU (TFLOP/s/GPU): 12.3 |"
    s += f" learning rate: {1e-3:.6E} |"
    s += f" global batch size: {8:5d} |"
    for k, v in losses.items():
        if v > 0.0:  # Megatron's own rule: NaN and 0 are left out
            s += f" {k}: {v:.6E} |"
    s += f" loss scale: {1.0:.1f} |"
    s += f" grad norm: {2.5:.3f} |"
    s += f" number of skipped iterations: {skipped:3d} |"
    s += f" number of nan iterations: {nan:3d} |"
    return s


MEMORY = ("[Rank 0] (after 1 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.75 | "
          "reserved: 3000.0 | max reserved: 3100.0 | device usage: 4000.0")


def falling(n: int = 30, key: str = "lm loss") -> str:
    lines = ["some startup output", "> building train, validation, and test datasets ..."]
    for i in range(1, n + 1):
        lines.append(line(i, n, {key: 9.0 - 0.2 * i}, ms=5000.0 if i == 1 else 800.0 + i))
        if i == 1:
            lines.append(MEMORY)
    return "\n".join(lines) + "\n"


def test_parse_reads_every_field_of_megatrons_line() -> None:
    log = trainlog.parse(falling(30))
    assert len(log.steps) == 30 and log.train_iters == 30
    s = log.steps[2]
    assert (s.iteration, s.of, s.step_ms, s.skipped, s.nan, s.grad_norm) == (3, 30, 803.0, 0, 0, 2.5)
    assert s.losses == {"lm loss": 8.4}
    assert log.memory_mb == {"allocated": 1234.5, "max allocated": 2345.75, "reserved": 3000.0,
                             "max reserved": 3100.0, "device usage": 4000.0}


def test_a_falling_loss_passes_with_step_time_and_memory() -> None:
    v = trainlog.judge(trainlog.parse(falling(30)), min_steps=20)
    assert v.ok, v.summary
    assert v.details["loss_key"] == "lm loss"
    assert math.isclose(v.details["first_mean"], 8.6) and math.isclose(v.details["last_mean"], 3.2)
    assert v.details["step_ms"]["first"] == 5000.0 and v.details["step_ms"]["median"] == 816.0  # warm-up left out
    assert "30 steps, lm loss 8.600 -> 3.200" in v.summary and "2346 MB max allocated" in v.summary


def test_bert_losses_are_both_kept_and_lm_loss_decides() -> None:
    text = "\n".join(line(i, 25, {"lm loss": 10 - 0.1 * i, "sop loss": 0.7}) for i in range(1, 26))
    log = trainlog.parse(text)
    assert log.steps[0].losses == {"lm loss": 9.9, "sop loss": 0.7}
    v = trainlog.judge(log, min_steps=20)
    assert v.ok and v.details["loss_key"] == "lm loss"


def test_a_loss_that_does_not_fall_fails() -> None:
    text = "\n".join(line(i, 30, {"lm loss": 5.0 + 0.01 * i}) for i in range(1, 31))
    v = trainlog.judge(trainlog.parse(text), min_steps=20)
    assert not v.ok and "lm loss did not fall" in v.summary


def test_nan_iterations_fail_even_though_megatron_prints_no_number_for_them() -> None:
    lines = [line(i, 30, {"lm loss": 9.0 - 0.2 * i}) for i in range(1, 31)]
    lines[10] = line(11, 30, {"lm loss": float("nan")}, nan=1)
    log = trainlog.parse("\n".join(lines))
    assert "lm loss" not in log.steps[10].losses
    v = trainlog.judge(log, min_steps=20)
    assert not v.ok and "1 iteration(s) with a NaN loss" in v.summary


def test_non_finite_printed_values_fail() -> None:
    lines = [line(i, 30, {"lm loss": 9.0 - 0.2 * i}) for i in range(1, 31)]
    lines[5] = lines[5].replace("lm loss: 7.800000E+00", "lm loss: inf")
    v = trainlog.judge(trainlog.parse("\n".join(lines)), min_steps=20)
    assert not v.ok and "non-finite loss values: [inf]" in v.summary


def test_too_few_steps_fail() -> None:
    v = trainlog.judge(trainlog.parse(falling(12)), min_steps=20)
    assert not v.ok and "12 step(s) logged, at least 20 needed" in v.summary


def test_skipped_fp16_steps_count_and_only_steps_with_a_loss_are_compared() -> None:
    lines = [line(1, 24, {}, skipped=1), line(2, 24, {}, skipped=1)]
    lines += [line(i, 24, {"lm loss": 11 - 0.3 * i}) for i in range(3, 25)]
    v = trainlog.judge(trainlog.parse("\n".join(lines)), min_steps=20)
    assert v.ok, v.summary
    assert v.details["skipped_iterations"] == 2 and math.isclose(v.details["first_mean"], 11 - 0.3 * 4)


def test_no_loss_at_all_fails() -> None:
    v = trainlog.judge(trainlog.parse("Traceback (most recent call last):\n  boom\n"), min_steps=1)
    assert not v.ok and "no step printed a loss" in v.summary and "0 step(s) logged" in v.summary
