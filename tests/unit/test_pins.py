"""The manifest loader: good input becomes typed values; bad input names file, line, column and key."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildctl.errors import ManifestErrors
from buildctl.manifest import pins
from buildctl.manifest.model import InstallKind, PipConstraintPolicy

PROJECT = Path(__file__).resolve().parents[2]

GOOD = """\
schema: 1
stack: t
description: a test stack
base:
  alias: demo-base
  contract:
    env: {DEMO: "1"}
variants:
  first:
    image: "127.0.0.1:5000/demo/base:1"
    platform: linux/amd64
    cuda: "13"
    gpu_archs: ["9.0"]
  second:
    image: "127.0.0.1:5000/demo/base:1"
    platform: linux/arm64
    cuda: "12"
apt:
  packages:
    - jq
    - curl=7.88.1-10+deb12u5
    - {name: git, version: "1:2.39*"}
downloads:
  tool:
    dest: /usr/bin/tool
    mode: "0755"
    urls:
      any: {url: "https://example.invalid/tool", sha256: compute}
pip:
  constraint: unset
  requirements:
    - six==1.16.0
    - tomli>=2
components:
  lib:
    repo: sources/lib.bundle
    commit: 0123456789abcdef0123456789abcdef01234567
    prs: [7, {number: 8, head: abcdef0}]
    build:
      env: {ARCHS: "90"}
      requires: ["setuptools==69.5.1"]
  tree:
    repo: sources/tree.bundle
    commit: abcdef1
    install: {kind: source-tree, path: /opt/tree}
entrypoint:
  workdir: /opt/tree
  command: [python, train.py]
  args:
    - --bare
    - --lr: 3.9e-6
    - --modules: [a, b]
    - --layout: "Et|(tt|)*30L"
  paths:
    DATA_PATH: {default: /data}
  profiles:
    small: {gpus: 8, args: [--layers: 2]}
  default_profile: small
smoke:
  required: [versions, imports]
  imports: [six]
"""


def load(text: str, name: str = "t.yaml") -> object:
    return pins.load_text(text, name, base_dir=Path("/nonexistent"))


def errors_of(text: str, name: str = "t.yaml") -> list[str]:
    with pytest.raises(ManifestErrors) as info:
        load(text, name)
    return [str(e) for e in info.value.errors]


def test_good_manifest_loads_typed_values() -> None:
    m = pins.load_text(GOOD, "t.yaml", base_dir=Path("/nonexistent"))
    assert [v.name for v in m.variants] == ["first", "second"]
    assert m.default_variant.name == "first"
    assert m.variants[0].cuda == "13"
    assert [(p.name, p.version, p.exact) for p in m.apt.packages] == [
        ("jq", "*", False), ("curl", "7.88.1-10+deb12u5", True), ("git", "1:2.39*", False)]
    assert m.pip.constraint is PipConstraintPolicy.UNSET
    assert [(r.name, r.specifier, r.exact) for r in m.pip.requirements] == [
        ("six", "==1.16.0", True), ("tomli", ">=2", False)]
    lib = m.component("lib")
    assert [(p.number, p.head) for p in lib.prs] == [(7, None), (8, "abcdef0")]
    assert lib.build.requires[0].name == "setuptools"
    assert m.component("tree").install.kind is InstallKind.SOURCE_TREE
    assert m.entrypoint is not None
    # values keep the text exactly as written (YAML would print 3.9e-06)
    assert [a.argv() for a in m.entrypoint.args] == [
        ["--bare"], ["--lr", "3.9e-6"], ["--modules", "a", "b"], ["--layout", "Et|(tt|)*30L"]]
    assert m.entrypoint.args[1].at.line == 51
    assert m.downloads[0].for_platform("linux/arm64") is not None


def test_every_value_records_where_it_came_from() -> None:
    m = pins.load_text(GOOD, "t.yaml", base_dir=Path("/nonexistent"))
    assert (m.component("lib").at.line, m.component("lib").at.key) == (36, "components.lib")
    assert m.variants[1].at.line == 15


# Each case: (what is wrong, a replacement applied to GOOD, expected line, expected key, expected text).
BAD_CASES = [
    ("yaml syntax", ("description: a test stack", "description: [unclosed"), 4, "", "YAML syntax error"),
    ("unknown top-level key", ("description: a test stack", "descripton: a test stack"), 3, "descripton",
     "did you mean 'description'"),
    ("unknown nested key", ("    platform: linux/amd64", "    platfrom: linux/amd64"), 11, "variants.first.platfrom",
     "did you mean 'platform'"),
    ("wrong type: list for a string", ("description: a test stack", "description: [a, b]"), 3, "description",
     "expected a single value"),
    ("wrong type: string for a list", ('    gpu_archs: ["9.0"]', "    gpu_archs: 9"), 13, "variants.first.gpu_archs",
     "expected a list"),
    ("boolean for a string", ("    DATA_PATH: {default: /data}", "    DATA_PATH: {default: off}"), 55,
     "entrypoint.paths.DATA_PATH.default", "got the boolean 'off'"),
    ("unknown platform", ("    platform: linux/amd64", "    platform: linux/amd65"), 11, "variants.first.platform",
     "did you mean 'linux/amd64'"),
    ("malformed sha", ("    commit: abcdef1", "    commit: xyz123"), 44, "components.tree.commit", "not a 7 to 40 digit"),
    ("short sha too short", ("    commit: abcdef1", "    commit: abc12"), 44, "components.tree.commit",
     "not a 7 to 40 digit"),
    ("bad PR head", ("{number: 8, head: abcdef0}", "{number: 8, head: nothex!}"), 38, "components.lib.prs[1].head",
     "'nothex!' is not a 7 to 40 digit"),
    ("PR listed twice", ("prs: [7, {number: 8, head: abcdef0}]", "prs: [7, 7]"), 38, "components.lib.prs[1]",
     "PR 7 is listed twice"),
    ("invalid requirement", ("    - six==1.16.0", "    - six=1.16.0"), 32, "pip.requirements[0]", "invalid pip requirement"),
    ("invalid PEP 440 version", ("    - tomli>=2", "    - tomli>=2.0.0.banana"), 33, "pip.requirements[1]",
     "invalid pip requirement"),
    ("duplicate pip package", ("    - tomli>=2", "    - Six>=1"), 33, "pip.requirements[1]", "listed twice"),
    ("duplicate apt package", ("    - jq\n", "    - jq\n    - jq\n"), 21, "apt.packages[1]", "listed twice"),
    ("download without sha256", ('      any: {url: "https://example.invalid/tool", sha256: compute}',
                                 '      any: {url: "https://example.invalid/tool"}'), 28,
     "downloads.tool.urls.any.sha256", "missing required key 'sha256'"),
    ("download with a bad sha256", ("sha256: compute}", "sha256: 1234}"), 28, "downloads.tool.urls.any.sha256",
     "is not 64 lower-case hex digits"),
    ("duplicate key", ("  second:\n", "  first:\n"), 14, "variants.first", "duplicate key 'first'"),
    ("empty required field", ('    image: "127.0.0.1:5000/demo/base:1"\n    platform: linux/amd64',
                              '    image: ""\n    platform: linux/amd64'), 10, "variants.first.image", "is empty"),
    ("missing required field", ("    cuda: \"12\"\n", ""), 15, "variants.second.cuda", "missing required key 'cuda'"),
    ("unknown smoke check", ("  required: [versions, imports]", "  required: [versions, imprts]"), 60,
     "smoke.required[1]", "did you mean 'imports'"),
    ("unknown enum value", ("  constraint: unset", "  constraint: drop"), 30, "pip.constraint", "'keep', 'unset'"),
    ("bad apt version", ("    - curl=7.88.1-10+deb12u5", "    - curl=7.88 1"), 21, "apt.packages[1]",
     "invalid apt version"),
    ("flag without dash", ("    - --bare", "    - bare"), 50, "entrypoint.args[0]", "expected a flag"),
    ("flag with a space", ("    - --bare", "    - --bare 1"), 50, "entrypoint.args[0]", "holds a space"),
    ("default profile missing", ("  default_profile: small", "  default_profile: smal"), 58, "entrypoint.default_profile",
     "did you mean 'small'"),
    ("source tree without path", ("    install: {kind: source-tree, path: /opt/tree}",
                                  "    install: {kind: source-tree}"), 45, "components.tree.install.kind",
     "needs install.path"),
    ("variant override of unknown component", ("    cuda: \"12\"\n", "    cuda: \"12\"\n    components: {libb: {env: {A: \"1\"}}}\n"),
     18, "variants.second.components.libb", "did you mean 'lib'"),
    ("bad gpu arch", ('gpu_archs: ["9.0"]', 'gpu_archs: ["sm90"]'), 13, "variants.first.gpu_archs", "compute capability"),
    ("wrong schema", ("schema: 1", "schema: 2"), 1, "", "not supported"),
]


@pytest.mark.parametrize(("what", "edit", "line", "key", "text"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_names_file_line_and_key(what: str, edit: tuple[str, str], line: int, key: str, text: str) -> None:
    old, new = edit
    assert old in GOOD, f"test edit for {what!r} does not apply"
    messages = errors_of(GOOD.replace(old, new, 1), "pins/t.yaml")
    expected_prefix = f"pins/t.yaml:{line}:"
    hits = [m for m in messages if m.startswith(expected_prefix) and text in m and (not key or f": {key}:" in m)]
    assert hits, f"{what}: no message at {expected_prefix} key {key!r} containing {text!r} in {messages}"


def test_at_least_twenty_distinct_bad_inputs_are_covered() -> None:
    assert len({c[0] for c in BAD_CASES}) >= 20


def test_several_problems_are_reported_together() -> None:
    text = GOOD.replace("    platform: linux/amd64", "    platform: linux/x").replace("descripton", "x")
    text = text.replace("description: a test stack", "descripton: a test stack")
    messages = errors_of(text)
    assert len(messages) >= 2


def test_stack_must_match_file_name() -> None:
    messages = errors_of(GOOD, "pins/other.yaml")
    assert any("does not match its file name 'other'" in m for m in messages)


def test_empty_and_non_mapping_documents() -> None:
    assert "empty" in errors_of("")[0]
    assert "expected a mapping" in errors_of("- a\n- b\n")[0]
    assert "expected a mapping" in errors_of("just text\n")[0]


def test_unknown_yaml_tag_is_an_error_not_a_crash() -> None:
    messages = errors_of(GOOD.replace("description: a test stack", "description: !!python/object:os.system x"))
    assert any("description" in m for m in messages)


def test_recursive_alias_is_an_error_not_a_crash() -> None:
    messages = errors_of("&a {stack: t, base: *a}\n")
    assert messages


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestErrors) as info:
        pins.load(tmp_path / "nope.yaml")
    assert "no such manifest" in str(info.value)


def test_patch_file_is_checked_against_its_sha256(tmp_path: Path) -> None:
    (tmp_path / "fix.patch").write_text("--- a\n+++ b\n")
    text = GOOD.replace("      requires: [\"setuptools==69.5.1\"]",
                        "      requires: [\"setuptools==69.5.1\"]\n    patches:\n      - {file: fix.patch, sha256: "
                        + "0" * 64 + "}")
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ManifestErrors) as info:
        pins.load(path)
    assert "does not match its sha256" in str(info.value)


def test_seed_manifests_are_valid() -> None:
    found = pins.stacks(PROJECT / "pins")
    assert {"deepseek-v3-gb200", "megatron-bert", "verl-vllm"} <= set(found)
    for path in found.values():
        pins.load(path)


def test_deepseek_manifest_carries_the_guide_exactly() -> None:
    m = pins.load(PROJECT / "pins" / "deepseek-v3-gb200.yaml")
    assert [v.name for v in m.variants] == ["cuda13", "cuda12", "hopper"]
    assert m.entrypoint is not None
    flags = [a.flag for a in m.entrypoint.args]
    assert len(flags) == 128
    assert flags.count("--enable-experimental") == 2
    values = {a.flag: a.values for a in m.entrypoint.args}
    assert values["--moe-layer-freq"] == ("([0]*3+[1]*58)",)
    assert values["--pipeline-model-parallel-layout"] == ("Et|(tt|)*30L",)
    assert values["--cuda-graph-scope"] == ("attn", "moe_router", "moe_preprocess")
    te = m.component("transformer-engine")
    assert te.commit == "70f536662ae10a62a54f4ed1ba92e3314c5cfd69"  # tag v2.9, on release_v2.9 (issue 10)
    assert te.branch == "release_v2.9"
    # the guide's three, and TE #2286 (triton >= 3.5), which main had before d2945c6 and release_v2.9 lacks
    assert [c.label() for c in te.steps] == ["commit d2945c6a571e", "commit dd7ab715a55d", "PR #2146", "PR #2150"]
    assert te.steps[0].commit == "d2945c6a571e3978677614d1fe08779966a5a4ef"
    assert all(p.apply == "own-commits" and p.target == "main" for p in te.prs)
    assert [(p.number, p.head) for p in te.prs] == [
        (2146, "abf4722f06885c583199cd522f325f242df0f3b3"), (2150, "7e48668814ab7fa47c76e8d0d0bd37af35ed94c0")]
    assert m.component("deepep-hybridep").commit == "3f601f7ac1c062c46502646ff04c535013bfca00"
    assert m.component("megatron-lm").commit == "effebd81f410bc6566fffee6c320b6f8f762e06d"
    hopper = m.variant("hopper")
    assert m.component_env(te, hopper)["NVTE_CUDA_ARCHS"] == "90"
    assert m.component_env(te, m.variant("cuda13"))["NVTE_CUDA_ARCHS"] == "100"
    assert m.cudnn_for(m.variant("cuda12")).package == "libcudnn9-cuda-12"  # type: ignore[union-attr]


# ------------------------------------------------------------------ property: no input makes a traceback

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=12))
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=25,
)
manifest_like = st.fixed_dictionaries(
    {}, optional={k: yaml_values for k in ("schema", "stack", "base", "variants", "components", "pip", "apt",
                                           "entrypoint", "downloads", "smoke", "env", "bogus")})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(yaml_values, manifest_like))
def test_arbitrary_yaml_structures_never_raise_anything_else(doc: object) -> None:
    text = yaml.safe_dump(doc)
    try:
        pins.load_text(text, "fuzz.yaml")
    except ManifestErrors as exc:
        assert all(e.location.file == "fuzz.yaml" for e in exc.errors)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_anything_else(text: str) -> None:
    with contextlib.suppress(ManifestErrors):
        pins.load_text(text, "fuzz.yaml")


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=len(GOOD) - 1), st.sampled_from(["", ":", "-", "[", "{", "\t", "'", " "]))
def test_corrupted_good_manifest_never_raises_anything_else(pos: int, junk: str) -> None:
    with contextlib.suppress(ManifestErrors):
        pins.load_text(GOOD[:pos] + junk + GOOD[pos + 1:], "fuzz.yaml")
