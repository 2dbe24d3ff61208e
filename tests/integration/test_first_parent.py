"""Sources.first_parent, the history `buildctl bisect` walks inside a component (real git, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl.errors import SourceError
from buildctl.sources.sources import Sources
from tests.integration.test_sources import Repo


def test_the_first_parent_history_oldest_first_with_a_merged_branch_as_one_commit(tmp_path: Path) -> None:
    r = Repo(tmp_path / "up")
    base = r.commit({"a": "0\n"}, "base")
    m1 = r.commit({"a": "1\n"}, "main 1")
    r.checkout(m1, new="side")
    r.commit({"b": "side 1\n"}, "side 1")
    r.commit({"b": "side 2\n"}, "side 2")
    r.checkout("main")
    m2 = r.commit({"a": "2\n"}, "main 2")
    r.git("merge", "--quiet", "--no-ff", "-m", "merge side", "side")
    merge = r.git("rev-parse", "HEAD")
    m3 = r.commit({"a": "3\n"}, "main 3")
    s = Sources(cache=tmp_path / "cache")
    got = s.first_parent(str(r.path), base, m3)
    assert [c.sha for c in got] == [m1, m2, merge, m3]  # side 1 and side 2 come in with the merge, not alone
    assert [c.subject for c in got] == ["main 1", "main 2", "merge side", "main 3"]
    assert s.first_parent(str(r.path), m3, m3) == []


def test_diverged_commits_and_anything_but_full_shas_are_refused(tmp_path: Path) -> None:
    r = Repo(tmp_path / "up")
    base = r.commit({"a": "0\n"}, "base")
    main = r.commit({"a": "1\n"}, "main")
    r.checkout(base, new="other")
    other = r.commit({"b": "x\n"}, "other")
    s = Sources(cache=tmp_path / "cache")
    with pytest.raises(SourceError, match="is not an ancestor"):
        s.first_parent(str(r.path), main, other)
    for bad in (main[:12], "--all", "HEAD"):
        with pytest.raises(SourceError, match="not a full commit SHA"):
            s.first_parent(str(r.path), bad, other)
