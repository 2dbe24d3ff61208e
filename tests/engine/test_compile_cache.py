"""The compiler cache of compile nodes (builder/compilecache.py, images/wheel.sh.in) against the real engine.

The project is the light demo (test_build.py's ``light_demo``) whose fastmath component comes from a copy of its
repository made here: main gains a few small C files compiled into the extension, so that a change to one
source file shows as one miss among hits. Every image is removed by name at the end (image_cleanup).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.builder import pipeline
from buildctl.engine.engine import Engine
from buildctl.graph.records import RecordStore, state_root
from buildctl.services import build as svc_build
from buildctl.sources.sources import Sources
from tests.engine.test_build import (
    PROJECT,
    Demo,
    Recorder,
    base_env,
    demo_lock,
    demo_lock_light,
    light_demo,
    outcomes,
)
from tests.helpers import unique

__all__ = ["demo_lock", "demo_lock_light", "light_demo"]  # fixtures of test_build.py

FASTMATH_COMMIT = "2ce4723579053c914fae1dee4bc38f8fd4da5557"  # pins/demo.yaml's fastmath commit
PR7 = "    prs:\n      - {number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}   # adds clamp()\n"
EXTRA = 3  # C files beside fastmath/_core.c: 1 + EXTRA compiled objects
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
       "-c", "commit.gpgsign=false"]


RUN = unique("r")  # in every extra source: a cache server that outlives one run holds no object of this one


def extra_source(i: int, version: int = 0) -> str:
    return (f"/* fastmath extra {i}, version {version} */\n"
            f'const char *fastmath_extra{i}_run = "{RUN}";\n'
            f"double fastmath_extra{i}(double x) {{ return x * {i + 1}.0 + {version}.0; }}\n")


@dataclass
class Repo:
    bare: Path
    work: Path

    def git(self, *args: str) -> str:
        done = subprocess.run([*GIT, "-C", str(self.work), *args], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str) -> str:
        for path, text in files.items():
            (self.work / path).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        self.git("push", "-q", "origin", "HEAD:refs/heads/main")
        return self.git("rev-parse", "HEAD")


def fastmath_repo(tmp: Path) -> tuple[Repo, str]:
    """A bare copy of fastmath's repository whose main adds EXTRA C files to the extension; (repo, main's SHA)."""
    bare, work = tmp / "fastmath.git", tmp / "fastmath-work"
    subprocess.run([*GIT, "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run([*GIT, "-C", str(bare), "fetch", "-q", str(PROJECT / "demo/sources/fastmath.bundle"),
                    "refs/heads/*:refs/heads/*"], check=True)
    subprocess.run([*GIT, "clone", "-q", str(bare), str(work)], check=True)
    repo = Repo(bare=bare, work=work)
    repo.git("checkout", "-q", "-B", "main", FASTMATH_COMMIT)
    setup = (work / "setup.py").read_text()
    old = '["fastmath/_core.c"]'
    assert old in setup, "demo/sources/fastmath.bundle: setup.py no longer lists fastmath/_core.c alone"
    names = [f"fastmath/_extra{i}.c" for i in range(EXTRA)]
    files = {name: extra_source(i) for i, name in enumerate(names)}
    files["setup.py"] = setup.replace(old, json.dumps(["fastmath/_core.c", *names]))
    return repo, repo.commit(files, "fastmath: extra C files")


def use_commit(demo: Demo, repo: Repo, sha: str, *, first: bool) -> None:
    """Point the demo's fastmath at ``sha`` of ``repo`` (without PR 7), in the manifest and the lock."""
    if first:
        demo.edit_manifest(PR7, "")
        demo.edit_manifest("repo: ../demo/sources/fastmath.bundle", f"repo: file://{repo.bare}")
        demo.edit_manifest(f"commit: {FASTMATH_COMMIT}", f"commit: {sha}")
    else:
        old = json.loads(demo.lock.read_text())["variants"]["default"]["components"]["fastmath"]["base"]
        demo.edit_manifest(f"commit: {old}", f"commit: {sha}")

    def change(v: dict[str, Any]) -> None:
        c = v["components"]["fastmath"]
        c["repo"] = f"file://{repo.bare}"
        c["base"] = c["tree"] = sha
        c["changes"] = []
    demo.edit_lock(change)


def build(demo: Demo, engines: list[Engine]) -> tuple[pipeline.BuildReport, Recorder]:
    """Demo.build, keeping the progress events (the line each node ends with)."""
    t = demo.target()
    demo.register(t, engines)
    config = demo.config()
    events = Recorder()
    report = svc_build.build_target(t, engines=engines, config=config,
                                    sources=Sources.from_config(config, base_dir=demo.root / "pins"), progress=events,
                                    project=demo.root, options=pipeline.BuildOptions(jobs=2, skip_smoke=True))
    return report, events


def compile_counts(report: pipeline.BuildReport) -> tuple[int | None, int | None]:
    [n] = [n for n in report.nodes if n.name == "wheel:fastmath"]
    assert n.outcome == "built"
    return n.cache_hits, n.cache_misses


def test_changed_sources_recompile_alone_on_this_builder_and_a_second_one(
        light_demo: Demo, engine: Engine, second_engine: Engine, cache_server: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Builder one (the session's engine) with a cache server; builder two shares only the registry and that
    server with it (its own engine, its own cache root: wheels, records, local compiler cache). The default
    setting, the local folder alone, is what the repro tests build with (test_repro.py)."""
    demo = light_demo
    demo.monkeypatch.setenv("BUILDCTL_COMPILE_CACHE", cache_server)
    repo, first = fastmath_repo(tmp_path)
    use_commit(demo, repo, first, first=True)
    cold = demo.build([engine])
    assert compile_counts(cold) == (0, 1 + EXTRA)  # an empty cache: every object a miss
    config = demo.config()
    tool = config.cache.root / "tools" / "ccache-4.14.2-x86_64" / "ccache"
    assert tool.is_file() and config.cache.ccache.is_dir()
    record = RecordStore(state_root(config.cache)).load("demo", "default", "wheel:fastmath")
    assert record is not None and (record.cache_hits, record.cache_misses) == (0, 1 + EXTRA)

    # one source file changes: the other objects come from the cache. _core.c is compiled again too: its command
    # line carries the version, which ends in the commit's short SHA (-DFASTMATH_VERSION="0.2.0+<sha>")
    before = demo.target().graph.node("wheel:fastmath").key
    second = repo.commit({"fastmath/_extra1.c": extra_source(1, version=1)}, "fastmath: extra 1, version 1")
    use_commit(demo, repo, second, first=False)
    warm, events = build(demo, [engine])
    assert sorted(warm.built) == ["assemble", "entrypoint", "wheel:fastmath"]
    assert compile_counts(warm) == (EXTRA - 1, 2)
    [(_, _, line)] = [e for e in events.events if e[:2] == ("wheel:fastmath", "built")]
    assert line.endswith(f"; compiled: {EXTRA - 1} of {EXTRA + 1} objects from the cache"), line
    capsys.readouterr()
    assert cli.main(["--project", str(demo.root), "plan", "demo", "--json"]) == 0
    plan = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert plan["wheel:fastmath"]["compile_cache"] == {"hits": EXTRA - 1, "misses": 2}
    assert plan["wheel:fastmath"]["key"] != before

    # the second builder, another change: what the first compiled comes from the server
    base_env(demo.monkeypatch, tmp_path / "cache-second")
    demo.monkeypatch.setenv("BUILDCTL_COMPILE_CACHE", cache_server)
    third = repo.commit({"fastmath/_extra2.c": extra_source(2, version=1)}, "fastmath: extra 2, version 1")
    use_commit(demo, repo, third, first=False)
    report = demo.build([second_engine])
    assert outcomes(report)["compile-env:fastmath"] == "pulled"  # what it shares with the first: the registry
    assert compile_counts(report) == (EXTRA - 1, 2)  # misses: _extra2.c, and _core.c (its version macro)
    out = second_engine.run(report.final, ["python3", "-c", "import fastmath._core as c; print(c.add(2, 3))"],
                            entrypoint=[], timeout=60)
    assert out.ok and float(out.stdout) == 5.0, out.stderr
