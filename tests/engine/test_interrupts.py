"""Issue 11, defects 5 and 8: Ctrl-C, SIGTERM and SIGKILL leave nothing half-done; one build at a time.

The demo stack is built on the second engine (its own dockerd: every container and image there is this
session's, so "0 containers" and "0 dangling images" can be checked exactly), with the smoke gate, by
`buildctl build` processes that are interrupted one after the other, each at a moment an observable event
marks (a progress line on stderr, an engine event from `docker events`), never after a sleep. Each run
resumes what the one before left; the eleventh finishes. After every interrupted run: exit 130 (SIGINT)
or 143 (SIGTERM) with a message that says what was removed, 0 containers, 0 temporary folders, 0 tags
without a record. One run is SIGKILLed while it compiles: the next run removes what it left (the compile
container, its temporary folder and tags) and says so. The whole sequence is one demo build plus about a
second per run (it replaces the earlier Ctrl-C test, which built the stack once more with a 25 s sleep).

The second engine's containers cannot reach the internet (no NAT: it must not touch the first engine's
rules), and system and compile-env install Debian packages; so the first engine builds the stack once and
pushes it, the registry then forgets python, the wheel, assemble and the entrypoint, and the second engine
pulls the base, system and compile-env and builds the rest (python and assemble through the wheelhouse on
the host's loopback, the compile without a network).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.graph.records import RecordStore, state_root
from buildctl.services import target
from tests.engine.conftest import docker_cli
from tests.engine.test_build import PROJECT, base_env, demo_lock, demo_lock_light, write_project
from tests.helpers import unique

BOUND = 600  # seconds one run may take before the test gives up on its event
__all__ = ["demo_lock", "demo_lock_light"]  # the session's locks of the demo stack (fixtures of test_build.py)


@dataclass
class Moment:
    name: str
    sig: signal.Signals
    line: Callable[[str], bool] | None = None  # a progress line on stderr
    event: Callable[[dict[str, Any]], bool] | None = None  # an engine event


def _state(word: str, node: str = "") -> Callable[[str], bool]:
    def match(line: str) -> bool:
        parts = line.split()
        return len(parts) >= 2 and parts[1] == word and (not node or parts[0] == node)
    return match


def _container_start(owned: bool) -> Callable[[dict[str, Any]], bool]:
    def match(ev: dict[str, Any]) -> bool:
        attrs = (ev.get("Actor") or {}).get("Attributes") or {}
        return ev.get("Type") == "container" and ev.get("Action") == "start" and (
            ("org.buildctl.owner" in attrs) == owned)
    return match


def _tagged(repository: str) -> Callable[[dict[str, Any]], bool]:
    def match(ev: dict[str, Any]) -> bool:
        name = str(((ev.get("Actor") or {}).get("Attributes") or {}).get("name", ""))
        return ev.get("Type") == "image" and ev.get("Action") == "tag" and f"/{repository}/" in name
    return match


def moments(repository: str) -> list[Moment]:
    # the pulls the plan asks for start first, beside the host's work (Steps.pull_early): a run interrupted while
    # it prepares sources may already have pulled (and recorded) them, so the pull's moment comes first
    return [
        Moment("pulling a node from the registry", signal.SIGINT, line=_state("pulling")),
        Moment("preparing sources", signal.SIGINT, line=_state("sources")),
        Moment("pip download on the host", signal.SIGTERM, line=_state("wheels")),
        Moment("first build container starts", signal.SIGTERM, event=_container_start(owned=False)),
        Moment("a content tag appears", signal.SIGINT, event=_tagged(repository)),
        Moment("compile container starts (killed)", signal.SIGKILL, event=_container_start(owned=True)),
        Moment("leftovers of the killed run removed", signal.SIGTERM, line=_state("removed", "leftovers")),
        Moment("a node is pushed", signal.SIGINT, line=_state("pushing")),
        Moment("the smoke gate starts", signal.SIGTERM, line=_state("smoke")),
        Moment("smoke container starts", signal.SIGINT, event=_container_start(owned=True)),
    ]


@dataclass
class Run:
    moment: str
    rc: int
    stderr: str
    containers_left: list[str] = field(default_factory=list)


class Events:
    """`docker events` of the second engine as JSON objects, on a queue."""

    def __init__(self, engine: Engine) -> None:
        cli = shutil.which("docker") or "/usr/bin/docker"
        self.proc = subprocess.Popen([cli, "events", "--format", "{{json .}}"], stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "DOCKER_HOST": engine.address})
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.queue.put(json.loads(line))
            except ValueError:
                continue

    def drain(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def run_until(argv: list[str], env: dict[str, str], m: Moment | None, events: Events) -> tuple[int, str]:
    """Start buildctl; send ``m.sig`` when ``m``'s event is seen; return (exit status, stderr)."""
    events.drain()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    fired = threading.Event()

    def fire() -> None:
        if not fired.is_set():
            fired.set()
            proc.send_signal(m.sig)  # type: ignore[union-attr]

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if m is not None and m.line is not None and m.line(line):
                fire()
    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    if m is not None and m.event is not None:
        while proc.poll() is None and not fired.is_set():
            try:
                ev = events.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if m.event(ev):
                fire()
    try:
        proc.wait(timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=30)
    if proc.stderr is not None:
        proc.stderr.close()
    return proc.returncode, "".join(lines)


@dataclass
class Signalled:
    root: Path
    cache: Path
    env: dict[str, str]
    argv: list[str]
    runs: list[Run]
    engine: Engine
    events: Events


def _temp_folders(cache: Path) -> list[Path]:
    found = [p for p in (cache / "tmp").iterdir()] if (cache / "tmp").is_dir() else []
    wheels = cache / "wheels"
    if wheels.is_dir():
        found += [p for d in wheels.iterdir() for p in d.iterdir() if p.name.startswith(("run-", "."))]
    return found


def _untracked_tags(s: Signalled) -> list[str]:
    """Content tags in the engine whose key has no record of a completed build."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s.env.items():
            mp.setenv(k, v)
        t = target.load(s.root, load_config(os.environ), "demo", None)
    store = RecordStore(state_root(load_config(s.env).cache))
    return [n.name for n in t.graph.nodes if n.kind != "base" and s.engine.image_exists(t.refs[n.name])
            and not store.has("demo", "default", n.name, n.key)]


def _forget(ref: str) -> None:
    """Delete a tag's manifest from the (test) registry."""
    host, _, rest = ref.partition("/")
    name, _, tag = rest.rpartition(":")
    accept = "application/vnd.docker.distribution.manifest.v2+json"
    head = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{tag}", method="HEAD", headers={"Accept": accept})
    with urllib.request.urlopen(head, timeout=30) as r:
        digest = r.headers["Docker-Content-Digest"]
    with urllib.request.urlopen(urllib.request.Request(f"http://{host}/v2/{name}/manifests/{digest}",
                                                       method="DELETE"), timeout=30) as r:
        assert r.status == 202, r.status


def _containers(engine: Engine) -> list[str]:
    return docker_cli("ps", "-aq", engine=engine).split()


def _containers_settled(engine: Engine, wait_s: float = 30.0) -> list[str]:
    """The containers still on the (dedicated) second engine once it has settled.

    A build cut by a signal leaves the classic builder's step container to the engine, which removes it
    itself (forcerm) when it sees the client gone, a moment after the process exited; buildctl waits for
    the step containers its build stream named, but one created in the instant before the signal may not
    be named yet. What counts is that nothing stays: this polls (bounded) for the engine to finish."""
    deadline = time.monotonic() + wait_s
    left = _containers(engine)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _containers(engine)
    return left


@pytest.fixture(scope="module")
def signalled(demo_lock_light: str, registry: str, engine: Engine, second_engine: Engine,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signalled]:
    tmp = tmp_path_factory.mktemp("signals")
    repository = f"buildctl-test/{unique('sig')}"
    root = write_project(tmp / "project", registry, repository, apt=False)  # the moments are not apt's
    (root / "pins" / "demo.lock.json").write_text(demo_lock_light)
    cache = tmp / "cache"
    with pytest.MonkeyPatch.context() as mp:
        base_env(mp, cache)
        env = {**os.environ, "PYTHONPATH": str(PROJECT), "DOCKER_HOST": second_engine.address}
        # the first engine builds and pushes everything; the registry then forgets what the second builds
        base_env(mp, tmp / "cache-first")
        assert cli.main(["--project", str(root), "-q", "build", "demo", "--skip-smoke"]) == 0
        first = target.load(root, load_config(os.environ), "demo", None, skip_smoke=True)
        for n in first.graph.nodes:
            if n.kind != "base":
                engine.remove_image(first.refs[n.name])
            if n.name in ("python", "wheel:fastmath", "assemble"):  # the gated entrypoint was never built
                _forget(first.refs[n.name])
    argv = [sys.executable, "-m", "buildctl", "--project", str(root), "build", "demo"]
    events = Events(second_engine)
    s = Signalled(root=root, cache=cache, env=env, argv=argv, runs=[], engine=second_engine, events=events)
    try:
        for m in moments(repository):
            rc, err = run_until(argv, env, m, events)
            run = Run(moment=m.name, rc=rc, stderr=err)
            s.runs.append(run)
            run.containers_left = (_containers(second_engine) if m.sig == signal.SIGKILL
                                   else _containers_settled(second_engine))
            assert rc in (-signal.SIGKILL, 128 + m.sig), f"{m.name}: exit {rc}\n{err}"
            if m.sig != signal.SIGKILL:
                assert not run.containers_left, f"{m.name}: containers left: {run.containers_left}\n{err}"
                assert not _temp_folders(cache), f"{m.name}: {_temp_folders(cache)}"
            assert not _untracked_tags(s), f"{m.name}: tags without records: {_untracked_tags(s)}"
        rc, err = run_until(argv, env, None, events)
        s.runs.append(Run(moment="rerun to the end", rc=rc, stderr=err))
        assert rc == 0, err
        yield s
    finally:
        events.close()
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            t = target.load(root, load_config(os.environ), "demo", None)
        for n in t.graph.nodes:
            if n.kind != "base":
                second_engine.remove_image(t.refs[n.name])


def test_defect5_signals_at_ten_moments_leave_nothing_behind(signalled: Signalled) -> None:
    runs = signalled.runs
    assert len(runs) == 11 and len({r.moment for r in runs}) == 11
    for r in runs[:-1]:
        if r.rc == -signal.SIGKILL:
            continue
        name = "SIGINT" if r.rc == 130 else "SIGTERM"
        assert f"interrupted by {name}: stopped" in r.stderr, r.stderr
        assert "removed" in r.stderr and "temporary folder(s) of this run" in r.stderr, r.stderr
    killed = next(i for i, r in enumerate(runs) if r.rc == -signal.SIGKILL)
    assert runs[killed].containers_left  # the compile container the killed run left ...
    assert "left by runs that died: 1 container(s)" in runs[killed + 1].stderr  # ... and the next run removed
    assert {r.rc for r in runs[:-1]} == {130, 143, -signal.SIGKILL}
    assert not _containers(signalled.engine) and not _temp_folders(signalled.cache)
    assert not _untracked_tags(signalled)
    assert not docker_cli("images", "-q", "buildctl-part/*", engine=signalled.engine).split()
    for r in runs:
        print(f"{r.moment:<40} exit {r.rc}")


def test_defect8_a_second_build_waits_then_reuses_the_first(signalled: Signalled) -> None:
    """Two builds of one stack, variant and cache at once: the second waits for the first, then builds
    nothing; no dangling image is left (before, the two built everything side by side, the second could
    not bind the wheelhouse port, and the first's images lost their tags)."""
    s = signalled
    argv = s.argv
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s.env.items():
            mp.setenv(k, v)
        t = target.load(s.root, load_config(os.environ), "demo", None)
    for name in ("entrypoint", "assemble"):  # something left to build (python and below stay)
        s.engine.remove_image(t.refs[name])
        _forget(t.refs[name])
    dangling = set(docker_cli("images", "-q", "--filter", "dangling=true", engine=s.engine).split())
    first = subprocess.Popen(argv, env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stderr is not None
        for line in first.stderr:  # the first holds the lock before it decides what to build
            if _state("building")(line):
                break
        second = subprocess.run(argv, env=s.env, capture_output=True, text=True, timeout=BOUND)
        out, rest = first.communicate(timeout=BOUND)
        err = line + rest
        assert first.returncode == 0, err
        assert second.returncode == 0, second.stderr
        waited = [x for x in second.stderr.splitlines() if _state("waiting", "lock")(x)]
        assert waited and f"pid {first.pid} builds demo/default" in waited[0] and "reusing its work" in waited[0], (
            second.stderr)
        assert "built 2 node(s) (assemble, entrypoint)" in out and "built 0 node(s)" in second.stdout, (
            out, second.stdout)
        after = set(docker_cli("images", "-q", "--filter", "dangling=true", engine=s.engine).split())
        assert after <= dangling, f"dangling images left: {after - dangling}"
    finally:
        if first.poll() is None:
            first.kill()


def test_defect5_a_tag_without_a_record_is_not_trusted(signalled: Signalled) -> None:
    """A node tagged but never recorded (what an interrupted run of the old code left: the engine tagged
    before buildctl recorded and normalised) is missing for plan, with the reason, and is built again."""
    s = signalled
    store_root = state_root(load_config(s.env).cache) / "demo" / "default"
    (store_root / "python.json").unlink()
    shutil.rmtree(store_root / "keys" / "python")
    done = subprocess.run([*s.argv[:-2], "plan", "demo", "--json"], env=s.env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    plan = {n["name"]: n for n in json.loads(done.stdout)["nodes"]}
    assert plan["python"]["state"] in ("missing", "registry")
    assert "no record says a build of this key completed" in plan["python"]["why"][0]
    assert plan["system"]["state"] == "local"
