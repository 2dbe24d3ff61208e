"""The benchmark's quick mode runs in CI (issue 14), so that `make bench` cannot rot unseen.

The same code path as `make bench` (bench/bench_rebuild.py) with one repetition, no generated C file, growth
stacks of 2 and 4 components, a bisect of 2 commits, the demo without apt packages, against the test registry and the real
engine (a second engine, for all of (d), is started and stopped by the bench itself). No timing is asserted: figures are checked for being there, and
the counts that follow from the scenario (what buildctl rebuilds, how many compiles each way ran) are.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.engine.conftest import docker_cli

PROJECT = Path(__file__).resolve().parents[2]
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def bench(*args: str, tmp: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """The bench as `make bench` runs it; past ``timeout`` it gets SIGINT, so that it removes what it made."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "BUILDCTL_CONFIG": str(tmp / "no-config.toml")}
    env.pop("BUILDCTL_CACHE", None)
    if HOST_CA.is_file():
        env["BUILDCTL_CA_BUNDLE"] = str(HOST_CA)
    proc = subprocess.Popen([sys.executable, str(PROJECT / "bench" / "bench_rebuild.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)
        pytest.fail(f"the bench ran past {timeout:.0f} s (stopped with SIGINT):\n{err[-4000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_bench_quick_mode(registry: str, registry_base: str, demo_base: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = bench("--quick", "--registry", registry, "--base-image", demo_base, "--out", str(out), tmp=tmp_path,
                 timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Traceback" not in done.stderr
    [result] = list(out.glob("*-quick.json"))
    res = json.loads(result.read_text())
    assert res["machine"]["cores"] and res["machine"]["engine"] and res["load_before"] and res["load_after"]
    # which base every row used: the demo base (no --big-base), described from the engine
    assert res["base"]["kind"] == "demo" and res["base"]["digest"].startswith("sha256:")
    assert res["base"]["size_bytes"] > 0 and res["base"]["files"] > 0 and "base: the demo base" in done.stdout
    s = res["summary"]
    # (a) nothing changed: buildctl rebuilds nothing, the Dockerfiles run no step and no compile
    assert s["a"]["buildctl"]["rebuilt"] == [0] and s["a"]["buildctl"]["compiles"] == [0]
    for kind in ("multistage", "recipe"):
        assert s["a"][kind]["rebuilt"] == [0] and s["a"][kind]["compiles"] == [0], kind
    # (b) a runtime pip pin: buildctl and the multi-stage file recompile nothing; the recipe recompiles
    assert sorted(res["runs"]["b"]["buildctl"][0]["detail"]) == ["assemble", "entrypoint", "python"]
    assert s["b"]["multistage"]["compiles"] == [0] and s["b"]["recipe"]["compiles"] == [1]
    # ... and the multi-stage file that installs with uv instead of pip neither
    assert s["b"]["multistage-uv"]["compiles"] == [0] and s["b"]["multistage-uv"]["rebuilt"][0] > 0
    # (c) fastmath's PR list: one compile each way (the cache-mount file's compile runs too: its cache only
    # makes it cheaper)
    assert "wheel:fastmath" in res["runs"]["c"]["buildctl"][0]["detail"]
    assert s["c"]["buildctl"]["compiles"] == s["c"]["multistage"]["compiles"] == s["c"]["recipe"]["compiles"] == [1]
    assert s["c"]["multistage-cm"]["compiles"] == [1]
    check_c2_and_the_cache_server(res)
    # the bisect: the good end (s0) built already, then the bad end and the one candidate, one compile each
    bis = res["bisect"]
    assert bis["commits"] == 2 and bis["culprit"] == 2
    assert [st["state"] for st in bis["steps"]] == ["s0", "bis2", "bis1"]
    assert bis["steps"][0]["rebuilt"] == 0 and [st["compiles"] for st in bis["steps"][1:]] == [1, 1]
    assert bis["compiles"] == 2 and bis["compile_s"] > 0 and bis["cold_compile_s"] > 0
    assert "Bisect of 2 commits inside fastmath" in done.stdout
    # (d) the second builder: nothing to build when nothing changed; the pin bump recompiles only in the recipe
    assert s["d1"]["buildctl"]["rebuilt"] == [0] and s["d1"]["recipe"]["compiles"] == [0]
    assert s["d2"]["buildctl"]["compiles"] == [0] and s["d2"]["recipe"]["compiles"] == [1]
    # (e) bytes of an unchanged push are counted (and far fewer than the first push's)
    for tool in ("buildctl", "multistage", "recipe"):
        e = res["push"][tool]
        assert e["first"] > 0 and len(e["again"]) == 1 and e["again"][0] < e["first"], (tool, e)
    check_the_buildkit_column(res)
    assert [g["components"] for g in res["growth"]["sizes"]] == [2, 4]
    assert "growth of plan (CPU time):" in done.stdout and "(a) nothing changed" in done.stdout
    # nothing of the run is left: images, containers, the second engine's bridge
    run = res["run_id"]
    assert f"bench-{run}" not in docker_cli("images", "--format", "{{.Repository}}:{{.Tag}}")
    assert not docker_cli("images", "-aq", "--filter", f"label=io.buildctl.bench={run}").split()
    assert not docker_cli("ps", "-aq", "--filter", f"label=io.buildctl.bench={run}").split()
    mounts = json.loads(docker_cli("system", "df", "-v", "--format", "{{json .BuildCache}}") or "null") or []
    assert not [m for m in mounts if m.get("CacheType") == "exec.cachemount"
                and f"buildctl-bench-{run}-ccache" in m.get("Description", "")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert len(res["second_engine_bridges"]) == 1  # --quick: all of (d) on one second engine
    assert not [b for b in res["second_engine_bridges"] if f" {b}:" in links or f" {b}@" in links]


def check_c2_and_the_cache_server(res: dict[str, Any]) -> None:
    """(c2): another PR on the second engine, buildctl sharing the registry and the bench's own redis-server with
    the first builder, against the cache-mount file there: one compile each. Left out only where redis-server is
    not installed; the server is stopped after the run."""
    s, server = res["summary"], res["cache_server"]
    if not server["ran"]:
        assert shutil.which("redis-server") is None and "redis-server" in server["why"] and "c2" not in s
        return
    assert "wheel:fastmath" in res["runs"]["c2"]["buildctl"][0]["detail"]
    assert s["c2"]["buildctl"]["compiles"] == [1] and s["c2"]["multistage-cm"]["compiles"] == [1]
    # the second engine had no compile environment: buildctl pulled it there, and the bench read how long it took
    pulls = [r["pull_s"] for r in res["runs"]["c2"]["buildctl"]]
    assert pulls and all(p is not None and 0 < p < r["seconds"] for p, r in zip(pulls, res["runs"]["c2"]["buildctl"],
                                                                                strict=True)), pulls
    host, port = server["url"].removeprefix("redis://").split(":")
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass


def check_the_buildkit_column(res: dict[str, Any]) -> None:
    """buildctl with --backend buildkit, its own column: the same counts as the classic backend's ((d) is not
    run with it in --quick). Left out only where `buildctl build` has no such backend."""
    s, bk = res["summary"], "buildctl-buildkit"
    if not res["buildkit_backend"]["ran"]:
        helptext = subprocess.run([sys.executable, "-m", "buildctl", "build", "--help"], capture_output=True, text=True,
                                  check=True, env={**os.environ, "PYTHONPATH": str(PROJECT)}).stdout
        assert "--backend" not in helptext and "has no --backend buildkit" in res["buildkit_backend"]["why"]
        assert not any(bk in v for v in s.values())
        return
    assert s["a"][bk]["rebuilt"] == [0] and s["a"][bk]["compiles"] == [0]
    assert sorted(res["runs"]["b"][bk][0]["detail"]) == ["assemble", "entrypoint", "python"]
    assert s["b"][bk]["compiles"] == [0]
    assert "wheel:fastmath" in res["runs"]["c"][bk][0]["detail"] and s["c"][bk]["compiles"] == [1]
    assert bk not in s["d1"] and bk not in s["d2"]


def test_bench_fails_without_a_traceback(tmp_path: Path) -> None:
    done = bench("--quick", "--registry", "127.0.0.1:9", "--out", str(tmp_path / "r"), tmp=tmp_path, timeout=120)
    assert done.returncode == 1
    assert "bench: error:" in done.stderr and "127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "r").exists()
