"""manifest/edit.py: a scalar replaced in the text, comments, layout and quoting kept (pure)."""

from __future__ import annotations

import pytest

from buildctl.errors import ManifestError
from buildctl.manifest import edit, pins
from buildctl.manifest.edit import Edit

OLD = "2ce4723579053c914fae1dee4bc38f8fd4da5557"
NEW = "0123456789abcdef0123456789abcdef01234567"
DOC = f"""\
# a comment before
components:
  fastmath:   # the compiled one
    repo: ../demo/sources/fastmath.bundle
    commit: {OLD}   # bumped by buildctl bump
    branch: main
    prs:
      - {{number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}}   # adds clamp()
  other: {{repo: x, commit: '{OLD}', branch: main}}
"""


def test_a_block_value_is_replaced_and_nothing_else_changes() -> None:
    out = edit.apply(DOC, [Edit(path=("components", "fastmath", "commit"), value=NEW)], "m.yaml")
    assert edit.changed_lines(DOC, out) == [5]
    assert out.splitlines()[4] == f"    commit: {NEW}   # bumped by buildctl bump"
    assert out.replace(NEW, OLD) == DOC


def test_flow_mappings_and_quotes_keep_their_style() -> None:
    out = edit.apply(DOC, [Edit(path=("components", "other", "commit"), value=NEW)], "m.yaml")
    assert out.splitlines()[8] == f"  other: {{repo: x, commit: '{NEW}', branch: main}}"
    assert edit.changed_lines(DOC, out) == [9]


def test_a_flow_item_of_a_list_is_reached_by_name_or_fails_clearly() -> None:
    text = "components:\n  - {name: a, commit: abc1234}   # first\n  - name: b\n    commit: \"def5678\"\n"
    out = edit.apply(text, [Edit(path=("components", "a", "commit"), value="1111111abc"),
                            Edit(path=("components", "b", "commit"), value="2222222abc")], "m.yaml")
    assert out == "components:\n  - {name: a, commit: 1111111abc}   # first\n  - name: b\n    commit: \"2222222abc\"\n"


def test_an_all_digit_sha_is_quoted_so_that_yaml_reads_a_string() -> None:
    digits = "1234567890" * 4
    out = edit.apply(DOC, [Edit(path=("components", "fastmath", "commit"), value=digits)], "m.yaml")
    assert f'commit: "{digits}"   # bumped' in out
    for token in ("1.5", "true", "null", "0x1f", "0755"):
        assert edit.render(token, "") == f'"{token}"'


def test_two_edits_on_one_line_of_flow_style() -> None:
    text = "c: {a: 1111111, b: '2222222'}  # note\n"
    out = edit.apply(text, [Edit(path=("c", "a"), value="aaaaaaa"), Edit(path=("c", "b"), value="bbbbbbb")], "m")
    assert out == "c: {a: aaaaaaa, b: 'bbbbbbb'}  # note\n"


def test_crlf_line_endings_are_kept() -> None:
    text = "a:\r\n  commit: abcdef1  # x\r\n  b: 2\r\n"
    out = edit.apply(text, [Edit(path=("a", "commit"), value="1234abc")], "m")
    assert out == "a:\r\n  commit: 1234abc  # x\r\n  b: 2\r\n"


@pytest.mark.parametrize(("text", "path", "message"), [
    ("a:\n  b: 1\n", ("a", "c"), "no key 'c'"),
    ("a:\n  b: [1, 2]\n", ("a", "b"), "a list or mapping"),
    ("a:\n  b: |\n    text\n", ("a", "b"), "block scalar"),
    ("x: &sha abcdef1\na:\n  b: *sha\n", ("a", "b"), "anchor"),
    ("a:\n  b: \"abc\n    def\"\n", ("a", "b"), "more than one line"),
])
def test_what_cannot_be_edited_in_place_is_refused_naming_file_line_and_key(
        text: str, path: tuple[str, ...], message: str) -> None:
    with pytest.raises(ManifestError) as err:
        edit.apply(text, [Edit(path=path, value="abcdef9")], "pins/x.yaml")
    assert message in str(err.value) and "pins/x.yaml:" in str(err.value)
    assert err.value.location.key.startswith("a")


@pytest.mark.parametrize("value", ["", "a b", "a\nb", "x: y", "#c", "'q'", "\"q\"", "-rf", "a" * 300, "é"])
def test_a_value_that_is_no_plain_token_is_never_written(value: str) -> None:
    with pytest.raises(ValueError):
        edit.apply(DOC, [Edit(path=("components", "fastmath", "commit"), value=value)], "m.yaml")


def test_the_demo_manifest_edited_still_loads_with_the_new_commit(project_root: object) -> None:
    from pathlib import Path

    path = Path(str(project_root)) / "pins" / "demo.yaml"
    text = path.read_text()
    out = edit.apply(text, [Edit(path=("components", "fastmath", "commit"), value=NEW)], str(path))
    assert edit.changed_lines(text, out) == [text.splitlines().index(f"    commit: {OLD}") + 1]
    m = pins.load_text(out, str(path), path.parent)
    assert m.component("fastmath").commit == NEW
    assert m.component("fastmath").prs[0].head == "639a2e3db57db370ff716cec8923ea5bea2e9003"
