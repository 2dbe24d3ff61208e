"""lint(): flag checks against a Megatron-like tree the tests write, and the consistency checks.

Findings must name the manifest file and line of the argument, the flag, and a suggestion.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.errors import ArgsLintFailed
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.megatron.consistency import LayoutError, moe_layer_pattern, parse_layout
from buildctl.megatron.lintargs import LintReport, lint, lint_for_plan, no_source_cache

PROJECT = Path(__file__).resolve().parents[2]

# A Megatron-like arguments.py written for these tests (the forms, not Megatron's code).
ARGUMENTS = """\
    import argparse

    from megatron.core.transformer.enums import AttnBackend

    def parse_args():
        parser = argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)
        group = parser.add_argument_group(title='all')
        group.add_argument('--num-layers', type=int, default=None)
        group.add_argument('--hidden-size', type=int, default=None)
        group.add_argument('--num-attention-heads', type=int, default=None)
        group.add_argument('--tensor-model-parallel-size', type=int, default=1)
        group.add_argument('--pipeline-model-parallel-size', type=int, default=1)
        group.add_argument('--context-parallel-size', type=int, default=1)
        group.add_argument('--expert-model-parallel-size', type=int, default=1)
        group.add_argument('--expert-tensor-parallel-size', type=int, default=None)
        group.add_argument('--num-experts', type=int, default=None)
        group.add_argument('--micro-batch-size', type=int, default=None)
        group.add_argument('--global-batch-size', type=int, default=None)
        group.add_argument('--lr', type=float, default=None)
        group.add_argument('--save-interval', '--persistent-save-interval', type=int, default=None)
        group.add_argument('--bf16', action='store_true')
        group.add_argument('--overlap-grad-reduce', action=argparse.BooleanOptionalAction, default=False)
        group.add_argument('--fp8-format', default=None, choices=['e4m3', 'hybrid'], dest='fp8')
        group.add_argument('--attention-backend', type=lambda b: AttnBackend[b], default=AttnBackend.auto,
                           choices=list(AttnBackend))
        group.add_argument('--recompute-modules', nargs='*', type=str, default=None)
        group.add_argument('--rampup-batch-size', nargs=3, type=int, default=None)
        group.add_argument('--onnx-safe', type=bool, required=False)
        group.add_argument('--use-mcore-models', action='store_true', dest='deprecated_use_mcore_models',
                           help='DEPRECATED. Use the implementation from megatron core. Now ignored.')
        group.add_argument('--moe-extended-tp', action='store_true',
                           help='Deprecated. Use --expert-tensor-parallel-size instead.')
        group.add_argument('--data-path', nargs='*', default=None)
        if HAVE_KITCHEN:
            group.add_argument('--kitchen-recipe-number', type=int, default=None)
        return parser.parse_args()
"""

ENUMS = """\
    import enum

    class AttnBackend(enum.Enum):
        flash = 1
        fused = 2
        unfused = 3
        local = 4
        auto = 5
"""


@pytest.fixture
def megatron(tmp_path: Path) -> Path:
    root = tmp_path / "megatron-lm"
    for rel, text in {"megatron/training/arguments.py": ARGUMENTS,
                      "megatron/core/transformer/enums.py": ENUMS}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def manifest(args: str, *, gpus: int = 8, profiles: str = "", extra: str = "") -> Manifest:
    """A manifest whose entrypoint holds ``args`` (YAML list items, indented by four spaces)."""
    text = textwrap.dedent("""\
        stack: t
        base: {alias: demo-base}
        variants:
          v: {image: "127.0.0.1:5000/demo:1", platform: linux/amd64, cuda: "13"}
        entrypoint:
          workdir: /opt/megatron-lm
          command: [python, pretrain_gpt.py]
          gpus: GPUS
          paths:
            DATA_PATH: {default: /data/text_document}
          args:
        """).replace("GPUS", str(gpus)) + textwrap.indent(textwrap.dedent(args), "    ")
    if profiles:
        text += "  profiles:\n" + textwrap.indent(textwrap.dedent(profiles), "    ")
    return pins.load_text(text + extra, "pins/t.yaml")


def run(m: Manifest, root: Path | None, profile: str | None = None) -> LintReport:
    return lint(m, m.default_variant, root, profile)


def only(report: LintReport, check: str) -> list[tuple[str, str, int]]:
    return [(f.severity, f.flag, f.at.line) for f in report.findings if f.check == check]


# ------------------------------------------------------------------------------- flag checks


def test_clean_arguments_give_a_clean_report(megatron: Path) -> None:
    r = run(manifest("""\
        - --num-layers: 4
        - --lr: "3.9e-6"
        - --attention-backend: auto
        - --fp8-format: e4m3
        - --bf16
        - --recompute-modules: [moe_act, mlp]
        - --data-path: ${DATA_PATH}
        """), megatron)
    assert r.ran and r.ok and not r.findings, [str(f) for f in r.findings]
    assert r.args_checked == 7
    assert r.megatron_root == str(megatron)


def test_unknown_flag_names_file_line_and_closest_flags(megatron: Path) -> None:
    r = run(manifest("""\
        - --num-layers: 4
        - --hiden-size: 1024
        """), megatron)
    (f,) = r.errors
    assert (f.check, f.flag, f.at.file, f.at.line) == ("unknown-flag", "--hiden-size", "pins/t.yaml", 13)
    assert f.suggestion == "did you mean --hidden-size?"
    assert str(f).startswith("pins/t.yaml:13:")
    assert "--hiden-size" in str(f) and "did you mean --hidden-size?" in str(f)


def test_values_outside_choices_including_enum_choices(megatron: Path) -> None:
    r = run(manifest("""\
        - --attention-backend: flsh
        - --fp8-format: e5m2
        """), megatron)
    assert only(r, "bad-choice") == [("error", "--attention-backend", 12), ("error", "--fp8-format", 13)]
    assert r.errors[0].suggestion == "did you mean 'flash'?"
    assert "flash, fused, unfused, local, auto" in r.errors[0].message


def test_wrong_value_types(megatron: Path) -> None:
    r = run(manifest("""\
        - --num-layers: "61.5"
        - --lr: fast
        - --onnx-safe: "False"
        """), megatron)
    assert only(r, "bad-type") == [("error", "--num-layers", 12), ("error", "--lr", 13),
                                   ("warning", "--onnx-safe", 14)]
    assert "not an integer" in r.errors[0].message


def test_wrong_value_counts(megatron: Path) -> None:
    r = run(manifest("""\
        - --bf16: true
        - --num-layers
        - --rampup-batch-size: [16, 8]
        - --hidden-size: [1, 2]
        """), megatron)
    assert only(r, "bad-count") == [("error", "--bf16", 12), ("error", "--num-layers", 13),
                                    ("error", "--rampup-batch-size", 14), ("error", "--hidden-size", 15)]


def test_a_flag_given_twice(megatron: Path) -> None:
    r = run(manifest("""\
        - --lr: "1e-4"
        - --bf16
        - --lr: "1e-4"
        - --bf16
        - --save-interval: 500
        - --persistent-save-interval: 1000
        - --overlap-grad-reduce
        - --no-overlap-grad-reduce
        """), megatron)
    assert only(r, "duplicate") == [
        ("warning", "--lr", 14), ("warning", "--bf16", 15),
        ("error", "--persistent-save-interval", 17),  # aliases share a dest
        ("error", "--no-overlap-grad-reduce", 19),  # BooleanOptionalAction: on, then off
    ]
    alias = next(f for f in r.errors if f.flag == "--persistent-save-interval")
    assert "pins/t.yaml:16" in alias.message and "pins/t.yaml:17" in alias.message


def test_deprecated_flags_as_megatron_marks_them(megatron: Path) -> None:
    r = run(manifest("""\
        - --use-mcore-models
        - --moe-extended-tp
        """), megatron)
    assert only(r, "deprecated") == [("warning", "--use-mcore-models", 12), ("warning", "--moe-extended-tp", 13)]
    assert r.ok
    assert r.warnings[0].suggestion == "remove it: Megatron ignores it"
    assert r.warnings[1].suggestion == "use --expert-tensor-parallel-size instead"


def test_conditional_flags_warn(megatron: Path) -> None:
    r = run(manifest("- --kitchen-recipe-number: 2\n"), megatron)
    (f,) = r.warnings
    assert f.check == "conditional" and "HAVE_KITCHEN" in f.message


def test_flag_with_inline_value(megatron: Path) -> None:
    r = run(manifest("- --attention-backend=fused\n- --num-layers=x\n"), megatron)
    assert only(r, "bad-type") == [("error", "--num-layers", 13)]


def test_profile_replaces_and_adds_arguments(megatron: Path) -> None:
    m = manifest("""\
        - --num-layers: 4
        - --lr: "1e-4"
        """, profiles="""\
        small:
          gpus: 8
          args:
            - --lr: slow
            - --bf16
        """)
    r = run(m, megatron, "small")
    assert r.profile == "small" and r.args_checked == 3
    (f,) = r.errors
    assert (f.flag, f.check, f.at.line) == ("--lr", "bad-type", 18)  # the profile's line, not the base's


def test_without_a_source_the_report_says_why_and_consistency_still_runs() -> None:
    m = manifest("""\
        - --nonsense-flag
        - --tensor-model-parallel-size: 8
        - --pipeline-model-parallel-size: 16
        """)
    r = lint(m, m.default_variant, None, missing_reason="not fetched yet")
    assert not r.ran and r.reason == "not fetched yet"
    assert [f.check for f in r.findings] == ["parallel-sizes"]
    assert "flags NOT checked against Megatron (not fetched yet)" in r.summary()
    located = lint_for_plan(m, m.default_variant, no_source_cache)
    assert not located.ran and "entrypoint.megatron" in located.reason


def test_not_a_megatron_tree_is_reported_not_raised(tmp_path: Path) -> None:
    r = run(manifest("- --bf16\n"), tmp_path)
    assert not r.ran and "not a Megatron-LM tree" in r.reason


def test_raise_for_errors(megatron: Path) -> None:
    r = run(manifest("- --hiden-size: 1\n"), megatron)
    with pytest.raises(ArgsLintFailed) as exc:
        r.raise_for_errors()
    assert exc.value.exit_code == 13
    assert "pins/t.yaml:12" in str(exc.value) and "--hiden-size" in str(exc.value)
    run(manifest("- --hidden-size: 1\n"), megatron).raise_for_errors()  # no errors: no raise


def test_report_json_is_complete(megatron: Path) -> None:
    data = run(manifest("- --hiden-size: 1\n"), megatron).to_json()
    assert data["ok"] is False and data["ran"] is True
    assert data["findings"][0] == {
        "severity": "error", "check": "unknown-flag", "flag": "--hiden-size",
        "message": "Megatron-LM (version unknown) has no such flag", "suggestion": "did you mean --hidden-size?",
        "file": "pins/t.yaml", "line": 12, "column": 7, "key": "entrypoint.args[0]",
        "rule": "unknown-flag", "value": "", "source": "", "fix": "did you mean --hidden-size?"}


# ------------------------------------------------------------------------------- consistency


def test_bert_example_as_shipped_is_impossible_on_8_gpus() -> None:
    m = pins.load(PROJECT / "pins" / "megatron-bert.yaml")
    r = lint(m, m.default_variant, None, "bert-340m")
    f, layers = r.errors  # the world size, and 24 layers over PP 16 (test_lintargs_rules has the detail)
    assert layers.check == "layers-pp"
    assert f.check == "parallel-sizes" and f.flag == "--pipeline-model-parallel-size"
    assert "TP 8 x PP 16 x CP 1 = 128" in f.message and "8 GPUs" in f.message
    assert f.at.file.endswith("pins/megatron-bert.yaml") and f.at.line > 0
    assert m.entrypoint is not None and m.entrypoint.profiles["bert-340m"].upstream_defect
    fine = lint(m, m.default_variant, None)  # the default: 340M on one 8-GPU node
    assert fine.profile == "bert-340m-8gpu" and fine.ok and fine.derived["data_parallel"] == 8
    for profile in ("bert-4b", "bert-20b", "base"):
        assert lint(m, m.default_variant, None, profile).ok, profile
    assert lint(m, m.default_variant, None, "bert-20b").gpus == 16


def test_deepseek_hopper_fits_hybridep_in_one_node() -> None:
    m = pins.load(PROJECT / "pins" / "deepseek-v3-gb200.yaml")
    r = lint(m, m.variant("hopper"), None)
    assert r.ok, [str(f) for f in r.errors]
    assert r.args_checked == 127  # --reuse-grad-buf-for-mxfp8-param-ag dropped
    assert r.gpus == 256 and r.derived["expert_data_parallel"] == 4  # EP 8: the 8 GPUs of one node


def test_deepseek_command_is_consistent() -> None:
    m = pins.load(PROJECT / "pins" / "deepseek-v3-gb200.yaml")
    r = lint(m, m.default_variant, None)
    assert r.ok, [str(f) for f in r.errors]
    assert r.args_checked == 128
    assert dict(r.derived) == {"data_parallel": 32, "expert_data_parallel": 1, "microbatches_per_step": 64,
                               "pipeline_stages": 32, "virtual_stages_per_rank": 4, "moe_layers": 58,
                               "hybridep_dispatch_group": 32, "nvlink_domain_size": 72}
    # The guide gives --sequence-parallel with TP 1: Megatron turns it off (a warning, as validate_args says).
    assert [(f.check, f.flag) for f in r.warnings] == [("duplicate", "--enable-experimental"),
                                                       ("sequence-parallel", "--sequence-parallel")]


def test_parse_layout() -> None:
    layout = parse_layout("Et|(tt|)*30L")
    assert len(layout.stages) == 32
    assert layout.stages[0] == "Et" and layout.stages[-1] == "L" and set(layout.stages[1:-1]) == {"tt"}
    assert layout.decoder_layers == 61
    assert parse_layout("Ettt|(tt|)*29,m|L").stages[-2:] == ("m", "L")
    assert parse_layout("E,t*3|L").stages == ("Ettt", "L")
    with pytest.raises(LayoutError, match="'x'"):
        parse_layout("Etx|L")


def test_layout_against_num_layers_and_stages() -> None:
    r = run(manifest("""\
        - --num-layers: 60
        - --pipeline-model-parallel-size: 3
        - --pipeline-model-parallel-layout: "Et|(tt|)*30L"
        """, gpus=24), None)
    assert [f.message for f in r.errors] == [
        "'Et|(tt|)*30L' holds 61 transformer layers (t), --num-layers is 60",
        "'Et|(tt|)*30L' has 32 stages, not a multiple of PP 3",
    ]
    assert {f.at.line for f in r.errors} == {14}


def test_layout_and_virtual_stage_flags_exclude_each_other() -> None:
    r = run(manifest("""\
        - --num-layers: 61
        - --pipeline-model-parallel-size: 8
        - --num-virtual-stages-per-pipeline-rank: 2
        - --pipeline-model-parallel-layout: "Et|(tt|)*30L"
        """, gpus=256), None)
    (f,) = r.errors
    assert f.flag == "--num-virtual-stages-per-pipeline-rank" and f.at.line == 14
    assert "32 stages / PP 8 = 4 virtual stages per rank" in f.message and "says 2" in f.message


def test_layout_embedding_loss_and_mtp() -> None:
    r = run(manifest("""\
        - --num-layers: 2
        - --pipeline-model-parallel-layout: "tE|tL|m"
        """), None)
    messages = " | ".join(f.message for f in r.errors)
    assert "start with the embedding E" in messages
    assert "end with the loss L" in messages
    assert "1 MTP layers (m), --mtp-num-layers is 0" in messages


def test_parallel_sizes_against_the_gpu_count() -> None:
    r = run(manifest("""\
        - --tensor-model-parallel-size: 2
        - --pipeline-model-parallel-size: 2
        - --num-attention-heads: 6
        - --num-experts: 6
        - --expert-model-parallel-size: 4
        - --global-batch-size: 32
        - --micro-batch-size: 2
        - --disable-bias-linear
        """, gpus=12), None)
    assert r.derived["data_parallel"] == 3  # 12 GPUs / (TP 2 x PP 2)
    assert sorted((f.check, f.flag, f.message) for f in r.errors) == [
        ("batch-size", "--global-batch-size",
         "global batch 32 is not divisible by micro batch 2 x data-parallel 3 (12 GPUs / 4)"),
        ("parallel-sizes", "--expert-model-parallel-size",
         "--num-experts 6 is not divisible by EP 4"),
        ("parallel-sizes", "--expert-model-parallel-size",
         "ETP 2 x EP 4 x PP 2 = 16 does not divide the 12 GPUs"),
    ]


def test_heads_not_divisible_by_tp() -> None:
    r = run(manifest("""\
        - --tensor-model-parallel-size: 4
        - --num-attention-heads: 6
        """), None)
    (f,) = r.errors
    assert f.message == "--num-attention-heads 6 is not divisible by TP 4"


def test_no_gpu_count_is_a_note_not_a_guess() -> None:
    bare = pins.load_text(textwrap.dedent("""\
        stack: t
        base: {alias: demo-base}
        variants:
          v: {image: "127.0.0.1:5000/demo:1", platform: linux/amd64, cuda: "13"}
        entrypoint:
          workdir: /w
          command: [python, x.py]
          args:
            - --tensor-model-parallel-size: 1024
        """), "pins/t.yaml")
    r = lint(bare, bare.default_variant, None)
    assert r.ok and r.gpus is None
    assert any("no GPU count is declared" in n for n in r.notes)


def test_moe_layer_freq() -> None:
    assert moe_layer_pattern("([0]*3+[1]*58)") == [0] * 3 + [1] * 58
    assert moe_layer_pattern("2") == 2
    # the seed's broken form (the '+' lost) is valid Python, but indexes the integer 3
    with pytest.raises(ValueError, match=r"'3\[1\]' is not a list of integers"):
        moe_layer_pattern("([0]*3[1]*58)")
    with pytest.raises(ValueError, match="neither an integer nor a list expression"):
        moe_layer_pattern("([0]*3+[1]*58")
    with pytest.raises(ValueError):
        moe_layer_pattern("__import__('os').system('true')")
    r = run(manifest("""\
        - --num-layers: 61
        - --moe-layer-freq: "([0]*3+[1]*57)"
        """), None)
    (f,) = r.errors
    assert f.message == "'([0]*3+[1]*57)' describes 60 layers, --num-layers is 61"
    broken = run(manifest("- --moe-layer-freq: \"([0]*3[1]*58)\"\n"), None)
    assert broken.errors[0].check == "moe-layer-freq"


def test_hybridep_needs_an_fp32_router() -> None:
    r = run(manifest("""\
        - --moe-token-dispatcher-type: flex
        - --moe-flex-dispatcher-backend: hybridep
        - --moe-router-dtype: fp16
        """), None)
    (f,) = r.errors
    assert (f.flag, f.at.line) == ("--moe-router-dtype", 14)
    assert "needs --moe-router-dtype fp32, it is fp16" in f.message
    missing = run(manifest("- --moe-flex-dispatcher-backend: hybridep\n"), None)
    assert [(x.severity, x.check) for x in missing.findings] == [("error", "hybridep"), ("warning", "hybridep")]
    assert "it is not set" in missing.errors[0].message
    ok = run(manifest("""\
        - --moe-token-dispatcher-type: flex
        - --moe-flex-dispatcher-backend: hybridep
        - --moe-router-dtype: fp32
        """), None)
    assert not ok.findings


def test_reuse_grad_buf_needs_fp8_param_gather() -> None:
    r = run(manifest("- --reuse-grad-buf-for-mxfp8-param-ag\n"), None)
    (f,) = r.errors
    assert f.flag == "--fp8-param-gather" and f.at.line == 12
    assert run(manifest("- --reuse-grad-buf-for-mxfp8-param-ag\n- --fp8-param-gather\n- --fp8-format: e4m3\n"
                        "- --use-distributed-optimizer\n"), None).ok


# ------------------------------------------------------------------------------------- CLI


def test_cli_lint_args_names_file_flag_and_suggestion(megatron: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    (project / "pins").mkdir(parents=True)
    source = textwrap.dedent("""\
        stack: t
        base: {alias: demo-base}
        variants:
          v: {image: "127.0.0.1:5000/demo:1", platform: linux/amd64, cuda: "13"}
        entrypoint:
          workdir: /opt/megatron-lm
          command: [python, pretrain_gpt.py]
          gpus: 8
          args:
            - --num-layers: 4
            - --hiden-size: 1024
        """)
    (project / "pins" / "t.yaml").write_text(source)
    code = cli.main(["--project", str(project), "lint-args", "t", "--megatron-src", str(megatron)])
    out, err = capsys.readouterr()
    assert code == 13
    assert f"{project}/pins/t.yaml:11:7: entrypoint.args[1]: error: --hiden-size:" in out
    assert "fix: did you mean --hidden-size?" in out
    assert "1 error(s) in the entrypoint arguments of t" in err

    assert cli.main(["--project", str(project), "lint-args", "t", "--json", "--megatron-src", str(megatron)]) == 13
    data = json.loads(capsys.readouterr().out)
    assert data["findings"][0]["flag"] == "--hiden-size" and data["findings"][0]["line"] == 11

    # no source at hand: the consistency checks pass, but the explicit lint fails and says why
    (project / "pins" / "t.yaml").write_text(source.replace("hiden", "hidden"))
    assert cli.main(["--project", str(project), "lint-args", "t"]) == 13
    assert "were not checked against Megatron-LM" in capsys.readouterr().err
    assert cli.main(["--project", str(project), "lint-args", "t", "--megatron-src", str(megatron)]) == 0
