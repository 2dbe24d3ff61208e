"""attention's build tier on --use-flash-attn without flash_attn: legacy or Megatron-Core models decide.

The megatron packages here are MIMICS written by these tests into tmp folders (not Megatron-LM): their
parse_args declares only the dests that decide which models a launch builds, as the real parsers do:
- MCORE_DEFAULT has effebd81's shape: Megatron-Core models are the default, ``--use-legacy-models``
  (use_legacy_models) selects the legacy ones, ``--use-mcore-models`` is a deprecated flag kept under
  another dest.
- OLD_STYLE has early-2024 Megatron-LM's shape: legacy models are the default, ``--use-mcore-models``
  (use_mcore_models) opts in, no use_legacy_models.
- NEITHER declares neither dest.
At effebd81 only megatron/legacy/model/transformer.py reads use_flash_attn (it raises ImportError
'FlashAttention is not installed' when building the model); nothing under megatron/core does.
"""

from __future__ import annotations

from typing import Any

from smoke.prober import InProcessProber
from smoke.report import CheckResult
from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite

HEAD = """\
# MIMIC of Megatron-LM's argument parser for smoke unit tests: not Megatron-LM.
import argparse


def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    parser = argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)
    parser.add_argument('--num-layers', type=int)
    parser.add_argument('--use-flash-attn', action='store_true')
"""
TAIL = "    return parser.parse_args()\n"
MCORE_DEFAULT = HEAD + """\
    parser.add_argument('--use-legacy-models', action='store_true')
    parser.add_argument('--use-mcore-models', action='store_true', dest='deprecated_use_mcore_models')
""" + TAIL
OLD_STYLE = HEAD + "    parser.add_argument('--use-mcore-models', action='store_true')\n" + TAIL
NEITHER = HEAD + TAIL

MISSING = "the entrypoint passes --use-flash-attn but flash_attn is not installed"
RAISES = ("Megatron's legacy transformer (megatron/legacy/model/transformer.py) raises ImportError "
          "'FlashAttention is not installed' at model build")


def megatron(suite: Suite, parser: str) -> None:
    mimic.megatron(suite.site, flags=())
    mimic.write(suite.site, "megatron/training/arguments.py", parser)


def attention(suite: Suite, args: list[str] | None, **attn: Any) -> CheckResult:
    """The attention result of a run with the launch's megatron-args section (None: no such section)."""
    checks: dict[str, Any] = {"attention": {"backend": "auto", "use_flash_attn": True, **attn}}
    if args is not None:
        checks["megatron-args"] = {"args": args, "argv0": "pretrain_gpt.py"}
    report = suite.run({"required": ["attention"], "checks": checks})
    (result,) = [c for c in report.checks if c.name == "attention"]
    return result


def test_mcore_default_megatron_needs_no_flash_attn(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)
    r = attention(suite, ["--num-layers", "4", "--use-mcore-models", "--use-flash-attn"])
    assert r.status == "pass", r.summary
    assert r.summary == (
        "image env agrees with --attention-backend auto (Megatron sets NVTE_FLASH_ATTN=1 "
        "NVTE_FUSED_ATTN=1 NVTE_UNFUSED_ATTN=1); --use-flash-attn is read only by Megatron's legacy models "
        "(megatron/legacy/model/transformer.py) and this launch builds Megatron-Core models (decided by "
        "use_legacy_models), so flash_attn is not needed")
    assert r.details["flash_attn"] is None
    assert r.details["legacy_models"] is False
    answer = r.details["megatron_args"]["answer"]
    assert answer["legacy_models"] is False
    assert answer["legacy_models_from"] == "use_legacy_models"
    assert r.details["megatron_args"]["arguments"] == 4


def test_mcore_default_megatron_with_use_legacy_models_fails(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)
    r = attention(suite, ["--use-legacy-models", "--use-flash-attn"])
    assert r.status == "fail"
    assert r.summary == (f"{MISSING}, and this launch builds Megatron's legacy models (decided by "
                         f"use_legacy_models): {RAISES}")
    assert r.details["legacy_models"] is True


def test_old_style_megatron_defaults_to_legacy_models_and_fails(suite: Suite) -> None:
    megatron(suite, OLD_STYLE)
    r = attention(suite, ["--use-flash-attn"])
    assert r.status == "fail"
    assert r.summary == (f"{MISSING}, and this launch builds Megatron's legacy models (decided by "
                         f"use_mcore_models): {RAISES}")


def test_old_style_megatron_with_use_mcore_models_passes(suite: Suite) -> None:
    megatron(suite, OLD_STYLE)
    r = attention(suite, ["--use-mcore-models", "--use-flash-attn"])
    assert r.status == "pass", r.summary
    assert r.summary.endswith("this launch builds Megatron-Core models (decided by use_mcore_models), "
                              "so flash_attn is not needed")
    assert r.details["megatron_args"]["answer"]["legacy_models_from"] == "use_mcore_models"


def test_no_megatron_args_section_cannot_tell_and_fails(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)  # present in the image, but the expectation does not say how it is launched
    r = attention(suite, None)
    assert r.status == "fail"
    assert r.summary == (f"{MISSING}; {RAISES}, and whether this launch builds legacy or Megatron-Core models "
                         "could not be told: the expectation has no megatron-args section to parse the launch with")
    assert r.details["legacy_models"] is None


def test_namespace_with_neither_dest_cannot_tell_and_fails(suite: Suite) -> None:
    megatron(suite, NEITHER)
    r = attention(suite, ["--use-flash-attn"])
    assert r.status == "fail"
    assert r.summary.endswith("could not be told: megatron.training.arguments.parse_args's namespace has neither "
                              "use_legacy_models nor use_mcore_models")


def test_rejected_arguments_cannot_tell_and_fail(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)
    r = attention(suite, ["--use-flash-attn", "--no-such-flag"])
    assert r.status == "fail"
    assert r.summary.endswith("could not be told: Megatron's parser rejects the baked arguments: "
                              "pretrain_gpt.py: error: unrecognized arguments: --no-such-flag")


def test_megatron_that_does_not_import_cannot_tell_and_fails(suite: Suite) -> None:
    r = attention(suite, ["--use-flash-attn"])  # no megatron in the image at all
    assert r.status == "fail"
    assert "could not be told: importing megatron.training.arguments (import megatron.training.arguments) failed: " \
           "ModuleNotFoundError" in r.summary


def test_flash_attn_installed_passes_without_asking_megatron(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)
    mimic.write(suite.site, "flash_attn/__init__.py", "raise ImportError('never imported by the check')\n")
    r = attention(suite, ["--use-legacy-models", "--use-flash-attn"])
    assert r.status == "pass", r.summary
    assert r.summary.endswith("; flash_attn is installed for --use-flash-attn")
    assert "megatron_args" not in r.details


def test_env_disagreement_still_fails_a_mcore_launch(suite: Suite) -> None:
    megatron(suite, MCORE_DEFAULT)
    report = suite.run({"required": ["attention"], "checks": {
        "attention": {"backend": "fused", "use_flash_attn": True},
        "megatron-args": {"args": ["--use-flash-attn"]}}}, env={"NVTE_FLASH_ATTN": "1"})
    (r,) = [c for c in report.checks if c.name == "attention"]
    assert r.status == "fail"
    assert r.summary == ("NVTE_FLASH_ATTN=1 in the image, but --attention-backend fused makes Megatron require it "
                         "unset or 0 (Megatron asserts this at start-up)")
    assert r.details["legacy_models"] is False


def test_megatron_args_probe_answers_legacy_models(suite: Suite) -> None:
    prober = InProcessProber(python_path=[str(suite.site)])
    cases = [(MCORE_DEFAULT, [], False, "use_legacy_models"),
             (MCORE_DEFAULT, ["--use-legacy-models"], True, "use_legacy_models"),
             (MCORE_DEFAULT, ["--use-mcore-models"], False, "use_legacy_models"),
             (OLD_STYLE, [], True, "use_mcore_models"),
             (OLD_STYLE, ["--use-mcore-models"], False, "use_mcore_models"),
             (NEITHER, [], None, None)]
    for parser, args, legacy, dest in cases:
        megatron(suite, parser)
        res = prober.probe("megatron_args", {"args": args})
        assert res.ok, res.data
        assert (res.data["legacy_models"], res.data["legacy_models_from"]) == (legacy, dest), (parser, args)


def test_the_launch_is_parsed_once_for_attention_and_megatron_args(suite: Suite) -> None:
    """Both checks ask the megatron_args probe the same question: one parse in the run (smoke.checks.REPEATABLE),
    and both checks read its answer. The mimic parser counts its calls in a file beside it."""
    counter = suite.site / "parses.txt"
    counting = MCORE_DEFAULT.replace(
        "def parse_args(extra_args_provider=None, ignore_unknown_args=False):\n",
        "def parse_args(extra_args_provider=None, ignore_unknown_args=False):\n"
        f"    with open({str(counter)!r}, 'a') as f:\n        f.write('parse\\n')\n")
    megatron(suite, counting)
    args = ["--num-layers", "4", "--use-mcore-models", "--use-flash-attn"]
    report = suite.run({"required": ["attention", "megatron-args"], "checks": {
        "attention": {"backend": "auto", "use_flash_attn": True},
        "megatron-args": {"args": args, "argv0": "pretrain_gpt.py"}}})
    by = {c.name: c for c in report.checks}
    assert by["attention"].status == "pass", by["attention"].summary
    assert by["megatron-args"].status == "pass", by["megatron-args"].summary
    assert counter.read_text().splitlines() == ["parse"]
