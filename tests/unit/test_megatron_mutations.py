"""lint-args against the real Megatron-LM's verdicts on launches mutated from the shipped ones.

tests/data/megatron-mutations.yaml holds the mutations (an edit of a shipped launch, laid over it as a
profile); tests/data/megatron-mutations.results.json the verdicts the REAL validate_args and
TransformerConfig (Megatron-LM effebd81) gave on them, recorded by
`scripts/megatron-validate.py MEGATRON_SRC --mutations ... --write-results ...`. Here lint-args runs on
each mutation itself (no Megatron tree at hand: the consistency rules alone) and must refuse every launch
the real code refused and pass every launch it passed (the hardware checks aside: validate_args does not
see them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from buildctl.errors import ManifestErrors
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from buildctl.megatron import lintargs, mutations
from buildctl.megatron.lintargs import lint

PROJECT = Path(__file__).resolve().parents[2]
DATA = PROJECT / "tests" / "data"


def load(path: Path) -> tuple[mutations.Mutation, ...]:
    return mutations.parse(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


MUTATIONS = load(DATA / "megatron-mutations.yaml")
RESULTS = json.loads((DATA / "megatron-mutations.results.json").read_text(encoding="utf-8"))
REAL = {r["id"]: r for r in RESULTS["results"]}
_MANIFESTS: dict[str, Manifest] = {}


def lint_mutation(m: mutations.Mutation) -> list[lintargs.LintFinding]:
    if m.stack not in _MANIFESTS:
        _MANIFESTS[m.stack] = pins.load(PROJECT / "pins" / f"{m.stack}.yaml")
    manifest = mutations.apply(_MANIFESTS[m.stack], m)
    variant = next(v for v in manifest.variants if v.name == m.variant)
    report = lint(manifest, variant, None, mutations.MUTATION)
    return [f for f in report.errors if f.check not in lintargs.HARDWARE_CHECKS]


def test_the_set_and_the_recorded_run_match() -> None:
    assert len(MUTATIONS) >= 36
    assert RESULTS["megatron_commit"] == "effebd81f410bc6566fffee6c320b6f8f762e06d"
    assert sorted(REAL) == sorted(m.id for m in MUTATIONS), "rerun scripts/megatron-validate.py --mutations"
    # The set is built from reading the source: each expectation held against the real code.
    assert {m.id: m.expect for m in MUTATIONS} == {i: r["real"] for i, r in REAL.items()}
    refused = [m for m in MUTATIONS if REAL[m.id]["real"] == "refuse"]
    assert len(refused) >= 30 and len(MUTATIONS) - len(refused) >= 5


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.id for m in MUTATIONS])
def test_lint_args_agrees_with_the_real_validate_args(m: mutations.Mutation) -> None:
    found = lint_mutation(m)
    if REAL[m.id]["real"] == "refuse":
        assert found, f"{m.id}: Megatron refuses ({REAL[m.id]['message']}), lint-args passes"
        if m.cite:
            sources = [f.source for f in found]
            assert any(s.endswith(m.cite) for s in sources), (m.cite, sources)
    else:
        assert not found, [str(f) for f in found]


def test_the_issue_cases_are_in_the_set() -> None:
    cites = {m.cite for m in MUTATIONS if REAL[m.id]["real"] == "refuse"}
    for line in ("megatron/training/arguments.py:750", "megatron/training/arguments.py:652",
                 "megatron/training/arguments.py:811", "megatron/training/arguments.py:1093",
                 "megatron/training/arguments.py:1192", "megatron/core/transformer/transformer_config.py:1521"):
        assert line in cites


def test_a_mutation_is_a_profile_over_its_launch() -> None:
    m = next(x for x in MUTATIONS if x.id == "cpu-offload-without-precision-aware")
    manifest = mutations.apply(pins.load(PROJECT / "pins" / "deepseek-v3-gb200.yaml"), m)
    assert manifest.entrypoint is not None
    p = manifest.entrypoint.profiles[mutations.MUTATION]
    assert p.extends == "dsv3-proxy-1gpu" and p.gpus == 1 and p.drop == ("--use-precision-aware-optimizer",)
    assert [a.flag for a in p.args] == ["--optimizer-cpu-offload"]


@pytest.mark.parametrize("text, error", [
    ("mutations: {}\n", "expected a list under 'mutations'"),
    ("mutations: [{id: a, stack: s, variant: v, profile: p, edit: e, expect: maybe}]\n", "is not one of"),
    ("mutations: [{id: a, stack: s, variant: v, profile: p, edit: e, expect: refuse, run: x}]\n", "unknown keys: run"),
    ("mutations: [{id: a, stack: s, variant: v, profile: p, edit: e, expect: refuse, args: [[1]]}]\n", "is not '--flag'"),
    ("mutations: [{id: a, stack: s, variant: v, profile: p, edit: e, expect: refuse, gpus: 0}]\n", "positive integer"),
])
def test_a_bad_mutation_set_is_refused_by_name(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ManifestErrors) as exc:
        load(path)
    assert error in str(exc.value) and str(path) in str(exc.value)
