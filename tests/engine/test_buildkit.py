"""The BuildKit backend against the real engine, the test registry and a second engine reached over TCP.

The demo project, its lock and the build helper are test_build.py's (each test a repository and a cache of
its own). The BuildKit engine is the shared engine driven by a docker CLI (buildctl/engine/buildkit.py); the
remote builder is the session's second dockerd (conftest ``second_builder``: ``tcp://127.0.0.1:PORT``), which
shares nothing with the first but the registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.builder import smoke
from buildctl.engine.engine import Engine
from buildctl.errors import Cancelled
from buildctl.graph.graph import shared_labels
from buildctl.graph.records import RecordStore, state_root
from buildctl.services import build, target, wiring
from buildctl.sources.sources import Sources
from tests.engine.test_build import (
    ALL,
    Demo,
    Recorder,
    base_env,
    demo,
    demo_lock,
    demo_lock_light,
    light_demo,
    outcomes,
)
from tests.helpers import unique

__all__ = ["demo", "demo_lock", "demo_lock_light", "light_demo"]  # fixtures of test_build.py


def plan_json(demo: Demo, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["--project", str(demo.root), "plan", "demo", "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_buildkit_builds_the_demo_with_the_plans_keys_labels_and_records(
        demo: Demo, engine: Engine, registry: str, capsys: pytest.CaptureFixture[str]) -> None:
    # the plan says the backend; its nodes, keys and actions are the same with either
    classic = plan_json(demo, capsys, "--backend", "classic")
    shown = plan_json(demo, capsys, "--backend", "buildkit")
    assert (classic["backend"], shown["backend"]) == ("classic", "buildkit") and shown["builders"] == ["local"]
    assert [(n["name"], n["key"], n["action"]) for n in shown["nodes"]] == [
        (n["name"], n["key"], n["action"]) for n in classic["nodes"]]

    bk = Engine(name=engine.name, backend="buildkit")  # the shared engine's own BuildKit (the same run label)
    reports = demo.config().cache.reports / "smoke"
    report = demo.build([bk], skip_smoke=False, gate=smoke.BuildGate(report_dir=reports))  # the real gate
    assert report.backend == "buildkit" and sorted(report.built) == sorted(ALL) and report.smoke == "passed"
    assert {n.name: n.backend for n in report.nodes if n.outcome == "built"} == dict.fromkeys(ALL, "buildkit")
    t = demo.target(skip_smoke=False)
    records = RecordStore(state_root(demo.config().cache)).load_all(t.graph)
    assert {n: records[n].backend for n in ALL} == dict.fromkeys(ALL, "buildkit")
    for name in ALL:
        node = t.graph.node(name)
        assert engine.registry_digest(t.refs[name]) is not None, name  # pushed for other builders
        labels = engine.inspect_image(t.refs[name]).labels
        for k, v in shared_labels(t.graph, node).items():  # the classic path's labels, from the same code
            assert labels.get(k) == v, (name, k)
        assert labels["io.buildctl.key"] == node.key and labels["io.buildctl.node"] == name
    final = engine.inspect_image(report.final)
    assert final.labels["io.buildctl.smoke"] == "passed" and final.labels["io.buildctl.lock-hash"] == t.graph.lock_digest
    lock = json.loads(demo.lock.read_text())["variants"]["default"]
    out = engine.run(report.final, ["python3", "-c", "import fastmath, six, importlib.metadata as m;"
                                    "print(fastmath.clamp(5, 0, 3), m.version('fastmath'), six.__version__)"],
                     entrypoint=[], timeout=60)
    assert out.ok, out.stderr
    clamp, version, six = out.stdout.split()
    assert float(clamp) == 3.0 and six == "1.16.0"
    assert version.endswith("+" + lock["components"]["fastmath"]["tree"][:7])
    printed = engine.run(report.final, ["--print-command"], timeout=60)
    assert printed.ok and "--recompute-granularity selective" in printed.stdout

    # nothing changed: nothing built, one image looked at (the classic builder's nodes and BuildKit's are one cache)
    again = demo.build([engine], skip_smoke=False, gate=smoke.BuildGate(report_dir=reports))
    assert again.built == [] and outcomes(again) == {"entrypoint": "cached"}

    # `buildctl build --backend buildkit --local`, as a user runs it, once every node is in the engine: after a
    # change of the runtime environment (assemble and the entrypoint again) it asks the engine its short
    # questions itself (engine/peek.py) and never loads docker-py (nor requests, urllib3): -X importtime lists
    # every module the command imported. (The first --local build loads it: the system node's whiteouts are
    # settled through `docker save` / `docker load`.)
    local = ["--project", str(demo.root), "-q", "build", "demo", "--backend", "buildkit", "--local", "--skip-smoke"]
    demo.register(target.load(demo.root, demo.config(), "demo", None, skip_smoke=True, local_only=True), [engine])
    assert cli.main(local) == 0
    demo.edit_manifest('  PYTHONDONTWRITEBYTECODE: "1"\n', '  PYTHONDONTWRITEBYTECODE: "1"\n  DEMO_CHANGED: "1"\n')
    demo.register(target.load(demo.root, demo.config(), "demo", None, skip_smoke=True, local_only=True), [engine])
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "buildctl", *local], capture_output=True,
                          text=True, check=False, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[1])})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "built 2 node(s) (assemble, entrypoint) with the buildkit backend" in done.stdout, done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "buildctl.engine.engine" in imported and "buildctl.builder.pipeline" in imported
    assert not imported & {"docker", "requests", "urllib3"}, sorted(imported & {"docker", "requests", "urllib3"})


def test_a_remote_builder_builds_what_changed_and_compiles_nothing(
        light_demo: Demo, engine: Engine, second_engine: Engine, second_builder: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    demo = light_demo  # the demo's own apt packages are the first test's (the system node under BuildKit)
    first = demo.build([Engine(name=engine.name, backend="buildkit")])
    assert "wheel:fastmath" in first.built

    # the source-tree component changes; the build runs on the second engine's BuildKit over TCP, with an
    # empty cache: the compiled wheel comes from its image in the registry, the changed nodes are built there
    demo.drop_prs("demo-trainer",
                  "      - {number: 3, head: a0e8f9b0511cbd794f941565f63c65c62fd8f6ec}   # adds --recompute-granularity\n")
    demo.edit_manifest("    - --recompute-granularity: selective\n", "")  # the flag PR 3 adds
    base_env(demo.monkeypatch, demo.root.parent / "cache-remote")
    config = demo.config()
    chosen = wiring.choose_builders(config, builders=[second_builder])
    assert chosen.backend == "buildkit" and chosen.endpoints == (second_builder,)
    shown = plan_json(demo, capsys, "--builder", second_builder)
    assert shown["backend"] == "buildkit" and shown["builders"] == [second_builder]
    assert {n["name"]: n["action"] for n in shown["nodes"] if n["action"] != "skip"} == {
        "python": "pull", "wheel:fastmath": "pull", "assemble": "build", "entrypoint": "build"}
    [remote] = wiring.build_engines(config, chosen)
    t = demo.target()
    demo.register(t, [second_engine])
    try:
        report = build.build_target(t, engines=[remote], config=config, progress=Recorder(), project=demo.root,
                                    sources=Sources.from_config(config, base_dir=demo.root / "pins"))
    finally:
        remote.close()
    assert sorted(report.built) == ["assemble", "entrypoint"] and report.backend == "buildkit"
    assert outcomes(report)["wheel:fastmath"] == "pulled"  # 0 compiles
    assert "compile-env:fastmath" not in outcomes(report)  # not even its compile environment
    assert not (config.cache.logs / "demo" / "default" / "wheel-fastmath.log").exists()
    assert second_engine.image_exists(report.final) and not engine.image_exists(report.final)
    out = second_engine.run(report.final, ["python3", "-c", "import fastmath; print(fastmath.clamp(9, 0, 1))"],
                            entrypoint=[], timeout=60)
    assert float(out.stdout) == 1.0

    # a builder's run of what the registry already holds (--no-load): one question, nothing pulled or built
    second_engine.remove_image(report.final)
    base_env(demo.monkeypatch, demo.root.parent / "cache-remote-2")  # an empty cache too
    [remote] = wiring.build_engines(demo.config(), chosen)
    try:
        p = build.plan_for(t, remote, demo.config(), full=False, strict=True, load=False)
    finally:
        remote.close()
    assert {n.node.name: (n.action, n.remote) for n in p.nodes if n.action != "skip"} == {"entrypoint": ("have", True)}
    capsys.readouterr()
    assert cli.main(["--project", str(demo.root), "build", "demo", "--builder", second_builder, "--no-load",
                     "--skip-smoke"]) == 0
    said = capsys.readouterr()
    assert "in the registry: left there (--no-load)" in said.err and "built 0 node(s)" in said.out
    assert f"demo/default: {report.final}" in said.out
    assert not second_engine.image_exists(report.final)  # left in the registry
    assert cli.main(["--project", str(demo.root), "build", "demo", "--local", "--no-load", "--skip-smoke"]) == 2
    assert "--no-load leaves the final image in the registry" in capsys.readouterr().err


def test_a_cancelled_buildkit_build_stops_its_step_and_tags_nothing(engine: Engine, demo_base: str,
                                                                    tmp_path: Path) -> None:
    """Engine.cancel (what SIGINT/SIGTERM of a build calls) ends the docker CLI; the engine then cancels the solve,
    whose step is BuildKit's own process, not an engine container."""
    marker = unique("bk-cancel-")
    (tmp_path / "Dockerfile").write_text(f"FROM {demo_base}\nRUN echo {marker}; sleep 120\n")
    bk = Engine(name=engine.name, backend="buildkit")
    tag = f"buildctl-test/{marker}:1"
    timer = threading.Timer(2.0, bk.cancel)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(Cancelled):
            bk.build(context_dir=tmp_path, dockerfile="Dockerfile", tag=tag, labels={}, nocache=True)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 30
    assert not bk.image_exists(tag) and not bk._procs
    deadline = time.monotonic() + 15
    while marker_running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not marker_running(marker), "the build's step still runs"


def marker_running(marker: str) -> bool:
    """Whether a process whose command line holds ``marker`` runs (BuildKit's step runs on this host)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False
