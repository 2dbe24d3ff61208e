"""The manifest edit of `buildctl bump` (manifest/edit.py) under generated manifests (issue 33, "What to
build"): for any layout (block or flow, quoting, comments, CRLF or LF, values YAML would read as numbers), an
edit replaces exactly the one value: the text reads back with the new value and every other value as it was,
only the edited line differs, its line ends and comments stay, and a value that is no plain token is
never written."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from buildctl.manifest import edit
from buildctl.manifest.edit import Edit

_token = st.from_regex(edit.TOKEN, fullmatch=True)
_sha = st.text(alphabet="0123456789abcdef", min_size=7, max_size=40)
_name = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_style = st.sampled_from(["", "'", '"'])
_comment = st.sampled_from(["", "  # a comment", "   # bumped by buildctl bump [x] 'q' \"d\""])


def _value(v: str, style: str) -> str:
    return f"{style}{v}{style}" if style else (v if edit._reads_as_itself(v) else f'"{v}"')


@st.composite
def manifests(draw: Any) -> tuple[str, list[str], dict[str, str]]:
    names = draw(st.lists(_name, min_size=1, max_size=4, unique=True))
    commits = {n: draw(_sha) for n in names}
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    lines = ["# a manifest", "stack: t", "components:"]
    for n in names:
        style, comment = draw(_style), draw(_comment)
        if draw(st.booleans()):
            lines += [f"  {n}:{draw(_comment)}", f"    repo: ../sources/{n}.bundle",
                      f"    commit: {_value(commits[n], style)}{comment}", "    branch: main"]
        else:
            lines.append(f"  {n}: {{repo: x, commit: {_value(commits[n], style)}, branch: main}}{comment}")
    return eol.join(lines) + eol, names, commits


@settings(max_examples=80, deadline=None, derandomize=True)
@given(doc=manifests(), data=st.data())
def test_an_edit_changes_exactly_the_value_it_names(doc: tuple[str, list[str], dict[str, str]],
                                                    data: st.DataObject) -> None:
    text, names, commits = doc
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    new = {n: data.draw(st.one_of(_sha, _token)) for n in chosen}
    out = edit.apply(text, [Edit(path=("components", n, "commit"), value=v) for n, v in new.items()], "m.yaml")
    read = yaml.safe_load(out)["components"]
    assert {n: read[n]["commit"] for n in names} == {**{n: yaml.safe_load(_value(c, "")) for n, c in commits.items()},
                                                     **new}
    before, after = text.splitlines(keepends=True), out.splitlines(keepends=True)
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(changed) <= len(chosen)
    for i in changed:  # the same line end, the same comment, the same key: only the value differs
        a, b = before[i], after[i]
        assert a.endswith("\r\n") == b.endswith("\r\n") and a.split("#", 1)[1:] == b.split("#", 1)[1:]
        assert a.split("commit:", 1)[0] == b.split("commit:", 1)[0]
    assert out.count("\r\n") == text.count("\r\n")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(value=st.text(max_size=30).filter(lambda v: not edit.TOKEN.fullmatch(v)))
def test_a_value_that_is_no_plain_token_is_never_written(value: str) -> None:
    text = "components:\n  a:\n    commit: abcdef1\n"
    with pytest.raises(ValueError, match="only letters, digits"):
        edit.apply(text, [Edit(path=("components", "a", "commit"), value=value)], "m.yaml")
