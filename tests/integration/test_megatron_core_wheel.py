"""The lint against real Megatron sources: the megatron-core wheels from PyPI (0.17.0 and 0.19.2).

From 0.17.0 on, the megatron-core wheel ships megatron/training/arguments.py (and argument_utils.py with
ArgumentGroupFactory). The test downloads the wheels into the buildctl cache (test-downloads/, nothing of
it is committed), unpacks megatron/ into a temporary folder and lints the full DeepSeek-V3 and BERT commands
(pins/deepseek-v3-gb200.yaml, pins/megatron-bert.yaml) against it.

The pinned Megatron is effebd81 (a dev-branch commit, not on PyPI, and GitHub is out of reach here), so
these versions are not the pinned one: the assertions state what differs from effebd81's flag set, whose
facts come from UPSTREAM.md ("Megatron-LM at effebd81": every flag a literal add_argument call, and the
choices listed there). What was seen, by inspecting the wheels:

- 0.17.0 accepts all 127 distinct flags of the DeepSeek command and all of BERT's, but 75 of DeepSeek's
  and 20 of BERT's are generated from config dataclasses (ArgumentGroupFactory), among them --fp8-recipe,
  --attention-backend and --moe-flex-dispatcher-backend: a literal add_argument scan would call them
  unknown. --fp8-recipe gained the choice 'custom'. --use-mcore-models stays, deprecated and ignored.
- 0.19.2 (the newest on PyPI when this was written) still accepts them all, but hides --cuda-graph-scope
  (use --cuda-graph-modules) and deprecates --moe-hybridep-num-sms (use --moe-flex-dispatcher-num-sms);
  --moe-flex-dispatcher-backend gained 'ncclep' and --cuda-graph-impl 'full_iteration'.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.megatron.flags import FlagTable
from buildctl.megatron.lintargs import LintReport, lint
from buildctl.megatron.scan import scan

PROJECT = Path(__file__).resolve().parents[2]
VERSIONS = ("0.17.0", "0.19.2")

# UPSTREAM.md, "Megatron-LM at effebd81": flags from the guide that exist there, with their choices.
EFFEBD81_CHOICES = {
    "--moe-flex-dispatcher-backend": {"deepep", "hybridep"},
    "--cuda-graph-impl": {"none", "local", "transformer_engine"},
    "--fp8-recipe": {"tensorwise", "delayed", "mxfp8", "blockwise"},
    "--fp8-format": {"e4m3", "hybrid"},
    "--exp-avg-dtype": {"fp32", "fp16", "bf16", "fp8"},
    "--exp-avg-sq-dtype": {"fp32", "fp16", "bf16", "fp8"},
    "--cross-entropy-fusion-impl": {"native", "te"},
    "--attention-backend": {"flash", "fused", "unfused", "local", "auto"},
}


def download(version: str) -> Path:
    """The megatron-core wheel for Python 3.12, from the cache or from PyPI (host pip, its own settings)."""
    cache = load_config(os.environ).cache.root / "test-downloads" / "megatron-core"
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"megatron_core-{version}-*.whl"))
    if not found:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
             f"megatron-core=={version}", "-d", str(cache)],
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"pip download megatron-core=={version} failed:\n{done.stderr[-2000:]}"
        found = sorted(cache.glob(f"megatron_core-{version}-*.whl"))
    assert found, f"no megatron-core {version} wheel in {cache}"
    return found[0]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for version in VERSIONS:
        root = tmp_path_factory.mktemp(f"megatron-core-{version}")
        with zipfile.ZipFile(download(version)) as wheel:
            wheel.extractall(root, members=[n for n in wheel.namelist() if n.startswith("megatron/")])
        assert (root / "megatron/training/arguments.py").is_file()
        assert (root / "megatron/training/argument_utils.py").is_file()
        out[version] = root
    return out


@pytest.fixture(scope="module")
def tables(trees: dict[str, Path]) -> dict[str, FlagTable]:
    return {v: scan(root) for v, root in trees.items()}


def load(stack: str) -> Manifest:
    return pins.load(PROJECT / "pins" / f"{stack}.yaml")


def command_flags(m: Manifest) -> list[str]:
    assert m.entrypoint is not None
    return list(dict.fromkeys(a.flag for a in m.entrypoint.args))


def kinds(report: LintReport) -> list[tuple[str, str, str]]:
    return [(f.severity, f.check, f.flag) for f in report.findings]


def test_the_wheels_are_the_versions_asked_for(tables: dict[str, FlagTable]) -> None:
    for version, table in tables.items():
        assert table.version == version
        assert table.generated, "ArgumentGroupFactory is in use from 72230d25 on"
        assert not table.allow_abbrev


def test_deepseek_against_0_17_0(trees: dict[str, Path], tables: dict[str, FlagTable]) -> None:
    m = load("deepseek-v3-gb200")
    r = lint(m, m.default_variant, trees["0.17.0"])
    assert r.ran and r.megatron_version == "0.17.0" and r.args_checked == 128
    assert kinds(r) == [("warning", "deprecated", "--use-mcore-models"),
                        ("warning", "duplicate", "--enable-experimental"),
                        ("warning", "sequence-parallel", "--sequence-parallel")], [str(f) for f in r.findings]
    t = tables["0.17.0"]
    flags = command_flags(m)
    assert len(flags) == 127 and all(f in t.flags for f in flags)
    generated = [f for f in flags if t.flags[f].origin == "dataclass"]
    assert len(generated) == 75
    # the flags UPSTREAM.md says a literal scan of a newer arguments.py misses
    for flag in ("--fp8-recipe", "--moe-flex-dispatcher-backend", "--cuda-graph-impl", "--fp8-format",
                 "--moe-hybridep-num-sms", "--recompute-modules", "--tensor-model-parallel-size"):
        assert flag in generated, flag
    literal_only = {o for o, s in t.flags.items() if s.origin == "add_argument"}
    assert "--fp8-recipe" not in literal_only and "--moe-flex-dispatcher-backend" not in literal_only


def test_choices_that_changed_since_effebd81(tables: dict[str, FlagTable]) -> None:
    added = {
        version: {flag: set(map(str, tables[version].flags[flag].choices or ())) - old
                  for flag, old in EFFEBD81_CHOICES.items()}
        for version in VERSIONS
    }
    for version in VERSIONS:  # nothing the guide relies on was removed
        for flag, old in EFFEBD81_CHOICES.items():
            assert old <= set(map(str, tables[version].flags[flag].choices or ())), (version, flag)
    assert {f: a for f, a in added["0.17.0"].items() if a} == {"--fp8-recipe": {"custom"}}
    assert {f: a for f, a in added["0.19.2"].items() if a} == {
        "--fp8-recipe": {"custom"},
        "--moe-flex-dispatcher-backend": {"ncclep"},
        "--cuda-graph-impl": {"full_iteration"},
    }
    # --attention-backend: an enum-typed dataclass field now, its choices read from enums.py
    spec = tables["0.17.0"].flags["--attention-backend"]
    assert spec.origin == "dataclass" and spec.choices == ("flash", "fused", "unfused", "local", "auto")


def test_deepseek_against_0_19_2_reports_the_renames(trees: dict[str, Path]) -> None:
    m = load("deepseek-v3-gb200")
    r = lint(m, m.default_variant, trees["0.19.2"])
    assert r.ran and r.ok
    assert kinds(r) == [("warning", "deprecated", "--use-mcore-models"),
                        ("warning", "deprecated", "--cuda-graph-scope"),
                        ("warning", "deprecated", "--moe-hybridep-num-sms"),
                        ("warning", "duplicate", "--enable-experimental"),
                        ("warning", "sequence-parallel", "--sequence-parallel")]
    fixes = {f.flag: f.suggestion for f in r.findings}
    assert fixes["--cuda-graph-scope"] == "use --cuda-graph-modules instead"
    assert fixes["--moe-hybridep-num-sms"] == "use --moe-flex-dispatcher-num-sms instead"
    assert fixes["--use-mcore-models"] == "remove it: Megatron ignores it"


def test_bert_against_both(trees: dict[str, Path], tables: dict[str, FlagTable]) -> None:
    m = load("megatron-bert")
    for version in VERSIONS:
        shipped = lint(m, m.default_variant, trees[version], "bert-340m")
        assert kinds(shipped) == [("warning", "duplicate", "--weight-decay"),
                                  ("warning", "duplicate", "--clip-grad"),
                                  ("error", "parallel-sizes", "--pipeline-model-parallel-size"),
                                  ("error", "layers-pp", "--pipeline-model-parallel-size")], version
        for profile in ("bert-340m-8gpu", "bert-4b", "bert-20b"):
            assert lint(m, m.default_variant, trees[version], profile).ok, (version, profile)
    generated = [f for f in command_flags(m) if tables["0.17.0"].flags[f].origin == "dataclass"]
    assert len(generated) == 20 and "--attention-backend" in generated


def test_a_misspelt_flag_and_value_in_the_real_manifest(trees: dict[str, Path], tmp_path: Path) -> None:
    text = (PROJECT / "pins" / "deepseek-v3-gb200.yaml").read_text()
    text = text.replace("- --moe-router-topk-scaling-factor:", "- --moe-router-topk-scaling-factr:")
    text = text.replace("- --fp8-recipe: mxfp8", "- --fp8-recipe: mxfp9")
    path = tmp_path / "pins" / "deepseek-v3-gb200.yaml"
    path.parent.mkdir()
    path.write_text(text)
    m = pins.load(path)
    r = lint(m, m.default_variant, trees["0.17.0"])
    errors = {f.flag: f for f in r.errors}
    assert set(errors) == {"--moe-router-topk-scaling-factr", "--fp8-recipe"}
    typo = errors["--moe-router-topk-scaling-factr"]
    line = text.splitlines().index("    - --moe-router-topk-scaling-factr: \"2.5\"") + 1
    assert (typo.at.file, typo.at.line) == (str(path), line)
    assert typo.suggestion.startswith("did you mean --moe-router-topk-scaling-factor")
    assert errors["--fp8-recipe"].suggestion == "did you mean 'mxfp8'?"


def test_cli_lint_args_against_the_wheel(trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--project", str(PROJECT), "lint-args"]
    assert cli.main([*base, "deepseek-v3-gb200", "--megatron-src", str(trees["0.17.0"])]) == 0
    out = capsys.readouterr().out
    assert "128 arguments checked against Megatron-LM 0.17.0" in out and "0 error(s), 3 warning(s)" in out
    # the example as shipped: TP 8 x PP 16 on 8 GPUs; the manifest's default profile gives it its 128 GPUs
    assert cli.main([*base, "megatron-bert", "--megatron-src", str(trees["0.17.0"])]) == 0
    capsys.readouterr()
    assert cli.main([*base, "megatron-bert", "--profile", "bert-340m", "--megatron-src", str(trees["0.17.0"])]) == 13
    captured = capsys.readouterr()
    assert "TP 8 x PP 16 x CP 1 = 128" in captured.out and "megatron-bert.yaml:" in captured.out
    assert cli.main([*base, "megatron-bert", "--profile", "bert-4b", "--megatron-src", str(trees["0.19.2"])]) == 0
