"""`buildctl bump` and `buildctl bisect` on the demo stack, against the real engine and the test registry.

The project is a copy of pins/demo.yaml whose fastmath component follows ``main`` of a repository this module
makes in a temporary folder from the demo's fastmath bundle (nothing fetched, nothing committed): three good
commits on main first, then sixteen more, the eleventh of which makes ``import fastmath`` fail (the smoke
suite's ``imports`` check). The tests run in order and share the project, its cache and its images:

1. a bump to the three good commits passes: manifest and lock rewritten (only the commit line of the
   manifest differs, comments kept), pushed, ``latest`` moved, the lock archived and beside the image;
2. a bump to the new head fails at the smoke gate: nothing rewritten, ``latest`` where it was, the report
   names ``imports`` and the range old..new;
3. the nightly asked to bump the stack (`nightly --bump demo`) fails at its bump stage: nothing built, pushed
   or moved;
4. bisect between the image of 1 (its lock-hash label, through the archive) and the candidate lock of 2 (a
   hash from the archive) names the planted commit, building fastmath's wheel at most 5 times.

The project is the demo without its own apt packages (write_project(apt=False): the bumps are fastmath's), and
its lock the session's (tests.engine.test_build.demo_lock_light) with the fastmath repository changed, so nothing
is resolved inside the base again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.labels import LOCK_LABEL
from buildctl.lock import archive, lockfile
from buildctl.lock.archive import Ref
from buildctl.services import lockarchive
from tests.engine.conftest import docker_cli
from tests.engine.test_build import PROJECT, base_env, demo_lock, demo_lock_light, write_project
from tests.helpers import unique

__all__ = ["demo_lock", "demo_lock_light"]  # the session's locks of the demo stack (fixtures of test_build.py)

C3 = "2ce4723579053c914fae1dee4bc38f8fd4da5557"  # the demo manifest's fastmath commit (main of the bundle)
EPOCH = 1736154000
PLANTED = 11  # of the sixteen commits of the second batch


def git(*args: str, cwd: Path, hour: int = 0) -> str:
    stamp = f"@{EPOCH + (100 + hour) * 3600} +0000"
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "Bump Test", "GIT_AUTHOR_EMAIL": "bump@test.invalid", "GIT_AUTHOR_DATE": stamp,
           "GIT_COMMITTER_NAME": "Bump Test", "GIT_COMMITTER_EMAIL": "bump@test.invalid", "GIT_COMMITTER_DATE": stamp}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@dataclass
class Upstream:
    """fastmath's repository (bare, file://) and a work clone that commits to its main."""

    bare: Path
    work: Path
    hour: int = 0

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def commit(self, message: str, path: str, text: str) -> str:
        self.hour += 1
        (self.work / path).write_text(text)
        git("add", "--", path, cwd=self.work)
        git("commit", "-q", "-m", message, cwd=self.work, hour=self.hour)
        return git("rev-parse", "HEAD", cwd=self.work)

    def publish(self) -> None:
        git("push", "-q", "origin", "HEAD:refs/heads/main", cwd=self.work)


@dataclass
class State:
    root: Path
    repository: str
    registry: str
    upstream: Upstream
    notes: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    second: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def manifest(self) -> Path:
        return self.root / "pins" / "demo.yaml"

    @property
    def lock(self) -> Path:
        return self.root / "pins" / "demo.lock.json"

    @property
    def public(self) -> str:
        return f"{self.registry}/{self.repository}"

    def bump(self, *args: str) -> tuple[int, dict[str, Any]]:
        out = self.root / f"bump-{unique('r')}.json"
        code = _main_json(["--project", str(self.root), "-q", "bump", "demo", *args, "--json"], out)
        return code, json.loads(out.read_text())


def _main_json(argv: list[str], out: Path) -> int:
    """cli.main with its stdout (one JSON document) written to ``out``."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(argv)
    out.write_text(buf.getvalue())
    return code


@pytest.fixture(scope="module")
def state(engine: Engine, registry: str, demo_lock_light: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[State]:
    tmp = tmp_path_factory.mktemp("bump")
    bare, work = tmp / "fastmath.git", tmp / "fastmath-work"
    git("clone", "-q", "--mirror", str(PROJECT / "demo" / "sources" / "fastmath.bundle"), str(bare), cwd=tmp)
    git("clone", "-q", str(bare), str(work), cwd=tmp)
    upstream = Upstream(bare=bare, work=work)
    repository = f"buildctl-test/{unique('b')}"
    root = write_project(tmp / "project", registry, repository, apt=False)  # the bumps are fastmath's
    manifest = root / "pins" / "demo.yaml"
    text = manifest.read_text()
    assert "repo: ../demo/sources/fastmath.bundle" in text
    manifest.write_text(text.replace("repo: ../demo/sources/fastmath.bundle", f"repo: {upstream.url}"))
    lock = root / "pins" / "demo.lock.json"
    lock.write_text(demo_lock_light)
    sha = hashlib.sha256(manifest.read_bytes()).hexdigest()

    def repoint(data: dict[str, Any]) -> None:
        data["manifest_sha256"] = sha
        for v in data["variants"].values():
            v["components"]["fastmath"]["repo"] = upstream.url
    lockfile.edit(lock, repoint)
    mp = pytest.MonkeyPatch()
    base_env(mp, tmp / "cache")
    st = State(root=root, repository=repository, registry=registry, upstream=upstream)
    try:
        yield st
    finally:
        mp.undo()
        listed = docker_cli("images", "--format", "{{.Repository}}:{{.Tag}}", engine=engine).split()
        for ref in listed:
            if ref.startswith(f"{registry}/{repository}"):
                engine.remove_image(ref)


def test_a_bump_that_passes_rewrites_only_the_commit_line_pushes_and_moves_latest(state: State, engine: Engine) -> None:
    up = state.upstream
    state.good = [up.commit(f"fastmath: note {i}", "fastmath/NOTES.txt", f"note {i}\n") for i in range(1, 4)]
    up.publish()
    before = state.manifest.read_text()
    code, report = state.bump()
    assert code == 0, json.dumps(report, indent=1)
    assert report["moved"] == [{"component": "fastmath", "branch": "main", "old": C3, "new": state.good[-1],
                                "range": f"{C3}..{state.good[-1]}"}]
    after = state.manifest.read_text()
    # the diff is the one commit line; every comment and the layout are as they were
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [(f"    commit: {C3}", f"    commit: {state.good[-1]}")]
    assert after.replace(state.good[-1], C3) == before
    lock = lockfile.read(state.lock)  # a lock buildctl wrote (its integrity hash holds)
    assert lock is not None and lock.manifest_sha256 == hashlib.sha256(after.encode()).hexdigest()
    v = lock.variants["default"]
    assert v.components["fastmath"].commit == state.good[-1]
    lock_hash = v.digest()
    # pushed under the lock-hash tag; `latest` moved to exactly that image
    immutable = f"{state.public}:demo-default-{lock_hash[:16]}"
    assert report["pushed"][immutable] == engine.registry_digest(immutable)
    assert engine.registry_digest(f"{state.public}:latest") == report["pushed"][immutable]
    assert f"{state.public}:latest" in report["promoted"]
    assert engine.inspect_image(immutable).labels[LOCK_LABEL] == lock_hash
    # the lock is archived by its hash, and beside the image in the registry: a fresh cache finds it there
    config = load_config()
    assert (config.cache.reports / "locks" / "demo" / f"{lock_hash}.lock.json").is_file()
    fresh = load_config({**os.environ, "BUILDCTL_CACHE": str(state.root / "fresh-cache")})
    found = lockarchive.resolve(fresh, "demo", "default", Ref(kind="image", value=immutable), cwd=state.root)
    assert found.lock_hash == lock_hash and found.source.endswith("registry artifact")
    assert found.lock.variants["default"].components["fastmath"].commit == state.good[-1]
    state.results["image"] = immutable


def test_a_bump_that_fails_the_smoke_gate_changes_nothing_and_names_check_and_range(state: State,
                                                                                    engine: Engine) -> None:
    up = state.upstream
    init = (PROJECT / "demo" / "make_sources.py").read_text()  # only to be sure the planted text is not upstream's
    for i in range(1, 17):
        if i == PLANTED:
            text = (up.work / "fastmath" / "__init__.py").read_text()
            assert "planted" not in init
            state.second.append(up.commit("fastmath: tidy the package init", "fastmath/__init__.py",
                                          text + 'raise ImportError("planted regression")\n'))
        else:
            state.second.append(up.commit(f"fastmath: more notes {i}", "fastmath/NOTES.txt", f"more {i}\n"))
    up.publish()
    manifest, lock = state.manifest.read_bytes(), state.lock.read_bytes()
    latest = engine.registry_digest(f"{state.public}:latest")
    old = lockfile.read(state.lock)
    assert old is not None
    start = old.variants["default"].components["fastmath"].commit
    code, report = state.bump("fastmath")
    assert code == 10, json.dumps(report, indent=1)  # SmokeFailed's exit code
    assert report["ok"] is False and report["written"] is False
    assert report["failed"]["stage"] == "smoke" and report["failed"]["checks"] == ["imports"]
    assert report["moved"][0]["range"] == f"{start}..{state.second[-1]}"
    assert f"{start[:12]}..{state.second[-1][:12]}" in report["summary"] and "nothing was changed" in report["summary"]
    assert state.manifest.read_bytes() == manifest and state.lock.read_bytes() == lock
    assert engine.registry_digest(f"{state.public}:latest") == latest
    assert report["pushed"] == {}
    bad_hash = report["lock_hashes"]["default"]
    assert engine.registry_digest(f"{state.public}:demo-default-{bad_hash[:16]}") is None  # nothing pushed either
    state.results["bad_hash"] = bad_hash


def test_a_nightly_that_bumps_to_the_red_head_is_a_red_day_and_moves_no_tag(state: State, engine: Engine) -> None:
    assert state.second, "the failed bump before this one did not run"
    manifest, lock = state.manifest.read_bytes(), state.lock.read_bytes()
    reports = state.root / "nightly"
    code = cli.main(["--project", str(state.root), "-q", "nightly", "demo", "--bump", "demo",
                     "--report-dir", str(reports)])
    run = json.loads((reports / "latest.json").read_text())["runs"][0]
    assert code == 1
    assert [(s["stage"], s["status"]) for s in run["stages"]] == [
        ("bump", "failed"), ("lock", "skipped"), ("build", "skipped"), ("push", "skipped"), ("promote", "skipped")]
    assert "check imports" in run["stages"][0]["summary"] and state.second[-1][:12] in run["stages"][0]["summary"]
    assert state.manifest.read_bytes() == manifest and state.lock.read_bytes() == lock
    assert engine.registry_digest(f"{state.public}:nightly") is None
    assert "**bump failed**" in (reports / "latest.md").read_text()


def test_bisect_names_the_planted_commit_within_five_builds_of_the_component(state: State) -> None:
    image, bad = state.results.get("image"), state.results.get("bad_hash")
    assert image and bad, "the bump tests before this one did not leave their image and candidate lock"
    assert archive.HASH.fullmatch(bad)
    out = state.root / "bisect.json"
    code = _main_json(["--project", str(state.root), "-q", "bisect", "demo", "--good", image, "--bad", f"lock:{bad[:20]}",
                       "--check", "imports", "--json"], out)
    report = json.loads(out.read_text())
    assert code == 0, json.dumps(report, indent=1)
    assert [c["label"] for c in report["changes"]] == [f"component fastmath: {state.good[-1]} -> {state.second[-1]}"]
    assert report["culprit"]["name"] == "fastmath"
    assert report["commits"] == 16
    assert report["commit"] == state.second[PLANTED - 1] and report["subject"] == "fastmath: tidy the package init"
    wheel_builds = sum(1 for s in report["steps"] if "wheel:fastmath" in s["built"])
    assert wheel_builds <= 5, json.dumps(report["steps"], indent=1)
    assert [s["bad"] for s in report["steps"][:2]] == [False, True]  # the good and the bad end, judged first
