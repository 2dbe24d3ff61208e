"""Commit subjects with any character: git's NUL-separated output is read by NUL, never by `str.splitlines`
(issue 33, item 1). `bisect` walks the first-parent history through `Sources.first_parent`; a subject holding
CR, FF, VT, FS/GS/RS, NEL, U+2028 or U+2029 (U+2028 arrives with copy-paste from web pages) made it raise
ValueError. Real git, repositories made here."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildctl.sources.sources import Sources
from tests.integration.test_sources import Repo

ODD = ["\r", "\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x1b]52;c;aGk=\x07", "\u202e"]


def _commit_raw(r: Repo, parent: str, message: bytes) -> str:
    """A commit whose message is exactly ``message`` (commit-tree keeps it as given)."""
    tree = r.git("rev-parse", f"{parent}^{{tree}}")
    sha = r.git("commit-tree", tree, "-p", parent, stdin=message)
    r.git("update-ref", "refs/heads/main", sha)
    return sha


def test_the_issue_repository_subject_with_a_line_separator_is_walked(tmp_path: Path) -> None:
    r = Repo(tmp_path / "up")
    first = r.commit({"a": "0\n"}, "first")
    second = r.commit({"a": "1\n"}, "subject with\u2028a separator")
    third = r.commit({"a": "2\n"}, "third")
    got = Sources(cache=tmp_path / "cache").first_parent(str(r.path), first, third)
    assert [(c.sha, c.subject) for c in got] == [(second, "subject with\u2028a separator"), (third, "third")]


def test_every_odd_character_and_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    r = Repo(tmp_path / "up")
    base = r.commit({"a": "0\n"}, "base")
    shas, subjects, parent = [], [], base
    for ch in ODD:
        subject = f"before{ch}after [/dev/shm] [link=https://x.invalid]y[/link]"
        parent = _commit_raw(r, parent, subject.encode())
        shas.append(parent)
        subjects.append(subject)
    parent = _commit_raw(r, parent, b"latin-1 \xff\xfe\r bytes")
    shas.append(parent)
    got = Sources(cache=tmp_path / "cache").first_parent(str(r.path), base, parent)
    assert [c.sha for c in got] == shas
    assert [c.subject for c in got[:-1]] == subjects
    assert got[-1].subject.startswith("latin-1 ") and got[-1].subject.endswith("\r bytes")


# any character but NUL (git cannot store it) and LF (it ends the subject line): surrogates cannot be encoded
_subject = st.text(st.characters(blacklist_characters="\x00\n", blacklist_categories=["Cs"]), min_size=1,
                   max_size=40)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(subjects=st.lists(_subject, min_size=1, max_size=3))
def test_any_subject_is_read_back_as_written(subjects: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        r = Repo(Path(d) / "up")
        base = r.commit({"a": "0\n"}, "base")
        parent, shas = base, []
        for s in subjects:
            parent = _commit_raw(r, parent, s.encode())
            shas.append(parent)
        got = Sources(cache=Path(d) / "cache").first_parent(str(r.path), base, parent)
        assert [c.sha for c in got] == shas
        assert [c.subject for c in got] == [_as_git_shows(r, s) for s in shas]


def _as_git_shows(r: Repo, sha: str) -> str:
    out = subprocess.run(["git", "show", "-s", "--format=%s", sha], cwd=r.path, capture_output=True, check=True)
    return out.stdout.decode("utf-8", "replace").removesuffix("\n")
