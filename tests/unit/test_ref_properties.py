"""bisect's REF forms (lock/archive.py ``parse_ref``) under generated input (issue 33, "What to build"): any
text is a lock file, a lock hash or an image reference, or a UsageError; never another exception. Each form
read back from how it is shown names the same lock (a report's ``lock:HEX`` can be given again)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildctl import syntax
from buildctl.errors import UsageError
from buildctl.lock import archive

CWD = Path("/nonexistent-buildctl-test-dir")  # nothing exists there: a bare name is never an existing file

_ref_alphabet = st.sampled_from([*"abcdef0123456789:/@.-_+ json", "sha256:", "file:", "lock:", "image:",
                                 "127.0.0.1:5000/", "\n", "\x1b", "\u2028"])
_refs = st.one_of(st.text(max_size=80), st.lists(_ref_alphabet, max_size=20).map("".join))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_refs)
def test_any_text_is_one_of_the_three_forms_or_a_usage_error(text: str) -> None:
    try:
        ref = archive.parse_ref(text, cwd=CWD)
    except UsageError as exc:
        assert exc.exit_code == 2 and exc.what
        return
    assert ref.kind in ("file", "hash", "image")
    if ref.kind == "hash":
        assert archive.HASH.fullmatch(ref.value)
    elif ref.kind == "image":
        assert syntax.IMAGE_RE.fullmatch(ref.value) and not ref.value.startswith("-")
    else:
        assert text.startswith("file:") or text.endswith(".json")
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in ref.value)  # no control character gets through
    assert archive.parse_ref(str(ref), cwd=CWD) == ref  # shown as it is written: given again, the same lock


_hex = st.text(alphabet="0123456789abcdef", min_size=12, max_size=64)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(h=_hex)
def test_a_hash_is_a_hash_bare_or_with_lock_and_never_an_image(h: str) -> None:
    assert archive.parse_ref(h, cwd=CWD) == archive.Ref(kind="hash", value=h)
    assert archive.parse_ref(f"lock:{h}", cwd=CWD) == archive.Ref(kind="hash", value=h)
    assert str(archive.parse_ref(h, cwd=CWD)) == f"lock:{h}"


@pytest.mark.parametrize("text", ["", "-x", "--all", "a\nb", "image:", "image:-x", "lock:xyz", "lock:ABCDEF012345",
                                  "a" * 600, "image:a b"])
def test_what_is_none_of_the_forms_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        archive.parse_ref(text, cwd=CWD)
