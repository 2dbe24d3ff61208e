"""The one bounded reader for untrusted files and blobs, buildctl/untrusted.py (issue 33, items 4 and 6).

`evidence attach IMAGE deep.json` with a report of 100,000 nested ``[`` (under the 4 MB cap) ended in
RecursionError instead of exit 15; `bisect --good file:/dev/zero` read without bound (reports were capped at
4 MB, REF files were not). Both now go through ``read_capped`` (size) and ``loads`` (nesting depth)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildctl import cli, untrusted
from buildctl.lock import lockfile
from buildctl.ship import evidence as ev

IMAGE = "127.0.0.1:9/demo/never-asked:v1"  # nothing listens there: a refused report never reaches it


def test_a_report_of_100000_nested_brackets_is_refused_with_exit_15(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    assert deep.stat().st_size < ev.MAX_REPORT
    assert cli.main(["--project", str(tmp_path), "evidence", "attach", IMAGE, str(deep)]) == 15
    err = capsys.readouterr().err
    assert f"{deep}: nested more than {ev.MAX_DEPTH} levels deep" in err and "Traceback" not in err


@pytest.mark.parametrize("content, said", [
    (b"[" * 100_000 + b"]" * 100_000, "nested more than"),  # valid JSON, still too deep
    (b'{"a": ' * 5000 + b"1" + b"}" * 5000, "nested more than"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{'a': 1}", "not JSON"),
])
def test_reports_that_are_not_json_reports_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               content: bytes, said: str) -> None:
    f = tmp_path / "r.json"
    f.write_bytes(content)
    assert cli.main(["--project", str(tmp_path), "evidence", "attach", IMAGE, str(f)]) == 15
    err = capsys.readouterr().err
    assert str(f) in err and said in err


def test_a_report_from_a_device_that_never_ends_is_read_to_the_cap_only(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--project", str(tmp_path), "evidence", "attach", IMAGE, "/dev/zero"]) == 15
    assert f"/dev/zero: larger than {ev.MAX_REPORT} bytes" in capsys.readouterr().err


def test_bisect_ref_file_dev_zero_is_capped_like_a_report(project_root: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    code = cli.main(["--project", str(project_root), "bisect", "demo", "--good", "file:/dev/zero",
                     "--bad", "file:/dev/zero", "--check", "versions"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"file:/dev/zero: larger than {lockfile.MAX_BYTES} bytes: not a lock file" in err


def test_read_capped_reads_one_byte_past_the_cap_at_most(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert untrusted.read_capped(f, 10) == b"x" * 10
    with pytest.raises(untrusted.Malformed, match="larger than 9 bytes"):
        untrusted.read_capped(f, 9)


def _depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:\n'),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.text(alphabet='[]{}"\\a', max_size=4), inner, max_size=3), max_leaves=20)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json)
def test_the_depth_counted_before_parsing_is_the_depth_of_the_document(doc: Any) -> None:
    text = json.dumps(doc)
    assert untrusted.depth(text) == _depth(doc)  # brackets and escaped quotes inside strings do not count
    assert untrusted.loads(text, max_depth=_depth(doc), strict=True) == doc
    if _depth(doc):
        with pytest.raises(untrusted.Malformed, match="nested more than"):
            untrusted.loads(text, max_depth=_depth(doc) - 1)


@pytest.mark.parametrize("text, said", [('{"a": 1, "a": 2}', "duplicate key 'a'"), ("[NaN]", "NaN is not JSON"),
                                        ("[1e999]", "inf is not a finite number")])
def test_strict_refuses_what_python_json_accepts(text: str, said: str) -> None:
    assert untrusted.loads(text) is not None
    with pytest.raises(ValueError, match=said):
        untrusted.loads(text, strict=True)


# what a process in an image prints, and its labels, are outside content too: the same bounded reader


@pytest.mark.parametrize("answer", ["[" * 100_000, "[1, 2]", '{"build_pip": "x"}', '{"pip": 5}',
                                    '{"apt": {"offered": ["x"]}}', "{'not': 'json'}"])
def test_the_lock_probes_answer_from_a_base_image_is_checked(answer: str) -> None:
    from buildctl.config import load_config
    from buildctl.engine.values import RunResult
    from buildctl.errors import LockError
    from buildctl.lock import inbase

    run = RunResult(exit_code=0, stdout=f"noise\n{inbase.MARK}{answer}\n", stderr="")
    with pytest.raises(LockError, match="the lock probe inside img:1 answered something that is not its answer"):
        inbase.parse_output(run, "img:1", load_config({}))


def test_a_smoke_report_and_an_expectation_label_of_100000_brackets_are_refused() -> None:
    from buildctl.builder import smoke
    from buildctl.errors import SmokeFailed, UsageError
    from buildctl.graph import smoke_expect

    with pytest.raises(SmokeFailed, match="not JSON") as caught:
        smoke.parse_report("[" * 100_000, image="img:1", image_id="sha256:" + "1" * 64, exit_code=0)
    assert "nested more than" in str(caught.value)
    with pytest.raises(UsageError, match="nested more than"):
        smoke_expect.decode_label("{" + "[" * 100_000)
