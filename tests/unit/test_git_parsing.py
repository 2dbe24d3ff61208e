"""Parsers of git's output (sources/gitrun.py) under generated input (issue 33, item 1): git separates records
by NUL (``-z``) or ends lines with LF only; a field may hold any other character. `str.splitlines` also
splits at CR, VT, FF, FS/GS/RS, NEL, U+2028 and U+2029: a subject holding one broke bisect's first-parent
walk, and a ref name holding one could stand for another ref. Pure (real git: tests/integration)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildctl.sources.gitrun import parse_ls_remote, parse_nul_records

SPLITLINES = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_field = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=30)
_sha = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(records=st.lists(st.tuples(_sha, _field, _field | st.sampled_from(list(SPLITLINES))), max_size=5))
def test_nul_records_read_back_whatever_a_subject_holds(records: list[tuple[str, str, str]]) -> None:
    # what `git show -s -z --format=%H%x00%cI%x00%s` prints: NUL after every field, NUL between commits
    text = "\0".join("\0".join(r) for r in records) + ("\0" if records else "")
    assert parse_nul_records(text, 3) == records


@pytest.mark.parametrize("text", ["a\0b\0", "a\0b\0c\0d\0"])
def test_output_that_is_not_whole_records_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not records of 3"):
        parse_nul_records(text, 3)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sep=st.sampled_from(list(SPLITLINES)), tail=st.text(alphabet="abc/", max_size=5))
def test_a_ref_name_holding_a_line_separator_never_stands_for_another_ref(sep: str, tail: str) -> None:
    real, spoof = "1" * 40, "2" * 40
    text = f"{real}\trefs/heads/main\n{spoof}\trefs/heads/main{sep}{tail}\n"
    refs = parse_ls_remote(text, pulls=False)
    assert refs["refs/heads/main"] == real
    assert refs[f"refs/heads/main{sep}{tail}"] == spoof
