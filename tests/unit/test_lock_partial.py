"""`buildctl lock --partial`, partial locks in plan, and what refuses them (fake resolvers, data only)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from buildctl.commands import lock as cmd_lock
from buildctl.errors import LockError, SourceError, UnreachableError
from buildctl.lock import lockfile
from buildctl.lock.lock import resolve
from buildctl.lock.lockfile import Lock, VariantLock
from buildctl.lock.resolvers import Resolvers
from buildctl.manifest import pins
from buildctl.ui import UI
from tests.unit.test_lock import (
    DIGEST_A,
    FakeFetch,
    FakeGit,
    FakeRegistry,
    config,
    now,
    resolvers,
    write_manifest,
)


def run_json(path: Path, r: Resolvers, **kw: object) -> tuple[int | None, dict[str, object], Exception | None]:
    out = io.StringIO()
    ui = UI(out=Console(file=out, width=200), err=Console(file=io.StringIO(), width=200))
    rc: int | None = None
    error: Exception | None = None
    try:
        rc = cmd_lock.run(path=path, manifest=pins.load(path), variants=["cuda13"], as_json=True, resolvers=r,
                          config=config(path.parent.parent), terminal=ui, project=path.parent.parent,
                          **kw)  # type: ignore[arg-type]
    except Exception as exc:
        error = exc
    return rc, json.loads(out.getvalue()), error


def test_partial_lock_records_what_it_could_not_reach_and_why(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    r = resolvers(registry=FakeRegistry({}, unreachable={"nvcr.io"}), fetch=FakeFetch(shas={}))
    with pytest.raises(UnreachableError):  # without --partial: nothing
        resolve(m, m.variant("cuda13"), r, config(tmp_path), now=now)
    v = resolve(m, m.variant("cuda13"), r, config(tmp_path), now=now, partial=True)
    assert v.partial and v.base is None
    assert set(v.missing) == {"base", "downloads.yq", "apt", "build_apt", "pip", "build_pip"}
    assert "nvcr.io cannot be reached" in v.missing["base"]
    assert v.missing["pip"].startswith("resolved inside the base image, which is not locked")
    assert "cannot reach https://example.invalid/yq_amd64" in v.missing["downloads.yq"]
    te = v.components["te"]  # git was reachable: locked in full
    assert te.tree and [c.label() for c in te.changes] == ["PR #2146", "PR #2150", "patch fix.patch"]
    # the schema round-trips a lock without a base
    data = json.loads(json.dumps(v.to_json()))
    assert "base" not in data and VariantLock.from_json(data) == v


def test_only_git_locks_the_git_sections_and_says_the_rest_was_not_asked(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    r = resolvers(registry=FakeRegistry({}, unreachable={"nvcr.io"}))
    v = resolve(m, m.variant("cuda13"), r, config(tmp_path), now=now, partial=True, only=["git"])
    assert r.registry.asked == []  # type: ignore[attr-defined]
    assert v.components["te"].tree and v.missing["base"] == "not asked (lock --only git)"
    assert v.missing["pip"] == "not asked (lock --only git)"


def test_a_git_error_that_is_not_reachability_still_fails_a_partial_lock(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    r = resolvers(git=FakeGit(shas={}))  # the short SHA is ambiguous: a real error, not a missing host
    with pytest.raises(SourceError, match="ambiguous"):
        resolve(m, m.variant("cuda13"), r, config(tmp_path), now=now, partial=True)


def test_lock_json_on_failure_and_partial_in_json(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    unreachable = resolvers(registry=FakeRegistry({}, unreachable={"nvcr.io"}))
    rc, data, error = run_json(path, unreachable, do_check=False)
    assert isinstance(error, UnreachableError) and rc is None
    assert data["ok"] is False and data["error"]["type"] == "UnreachableError"  # type: ignore[index]
    assert data["error"]["exit_code"] == 6  # type: ignore[index]
    assert not (tmp_path / "pins" / "demo.lock.json").exists()
    # --check on a stack without a lock: a failure, in JSON
    rc, data, error = run_json(path, resolvers(), do_check=True)
    assert isinstance(error, LockError) and data["ok"] is False and data["check"] is True
    assert "has no lock to check" in data["error"]["what"]  # type: ignore[index]
    # --partial writes, and says what is missing
    rc, data, error = run_json(path, unreachable, do_check=False, partial=True)
    assert rc == 0 and error is None and data["ok"] is True
    assert set(data["partial"]["cuda13"]) >= {"base", "pip", "apt"}  # type: ignore[index]
    lock = lockfile.read(tmp_path / "pins" / "demo.lock.json")
    assert lock is not None and "nvcr.io cannot be reached" in lock.partial["cuda13"]["base"]


def test_build_push_and_nightly_refuse_a_partial_lock_with_exit_4() -> None:
    full = VariantLock(base=lockfile.LockedBase(ref="r", digest=DIGEST_A, platform="linux/amd64"))
    part = VariantLock(base=None, missing={"base": "registry nvcr.io cannot be reached", "pip": "needs the base"})
    lock = Lock(stack="s", manifest_sha256="0" * 64, variants={"a": full, "b": part})
    lockfile.refuse_partial(lock, "a", action="build", lock_file="pins/s.lock.json")
    lockfile.refuse_partial(None, "a", action="build", lock_file="pins/s.lock.json")
    with pytest.raises(LockError) as exc:
        lockfile.refuse_partial(lock, "b", action="push", lock_file="pins/s.lock.json")
    assert exc.value.exit_code == 4
    assert "cannot push s/b: pins/s.lock.json is a partial lock (missing: base, pip)" in exc.value.what
    assert "base: registry nvcr.io cannot be reached" in exc.value.why
    assert "without --partial" in exc.value.fix
