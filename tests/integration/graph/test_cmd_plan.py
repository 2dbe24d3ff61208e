"""`buildctl plan` on a seed stack that cannot be locked here: keys listed with no network and no engine
(a loopback port nothing listens on stands in for the engine)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli

PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # no engine at all (a loopback port nothing listens on; docker-py leaks its socket when a unix socket
    # path is missing, a refused TCP connect it closes), a configuration and cache of the test's own
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BUILDCTL_REGISTRY", raising=False)


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert cli.main(["--project", str(PROJECT), "plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_deepseek_cuda13_plan_from_the_committed_partial_lock_without_network(
        offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    """pins/deepseek-v3-gb200.lock.json holds the git sections only (scripts/check-upstream.sh against the
    real repositories): the compile nodes' sources are locked, their keys wait for the base digest and the
    apt versions."""
    d = plan_json(capsys, "deepseek-v3-gb200", "--variant", "cuda13")
    names = [n["name"] for n in d["nodes"]]
    assert names == ["base", "cudnn", "system", "python", "compile-env:transformer-engine",
                     "wheel:transformer-engine", "compile-env:deepep-hybridep", "wheel:deepep-hybridep",
                     "assemble", "entrypoint"]
    assert all(len(n["key"]) == 64 and n["provisional"] for n in d["nodes"])
    assert {n["state"] for n in d["nodes"]} == {"unknown"}
    assert d["locked"] is True and d["platform"] == "linux/arm64"
    for name in ("wheel:transformer-engine", "wheel:deepep-hybridep"):
        wheel = next(n for n in d["nodes"] if n["name"] == name)
        assert wheel["unlocked"] == [] and wheel["own_inputs_locked"] is True  # the source tree is locked
        assert "base: base nvcr.io/nvidia/pytorch:25.09-py3 digest" in wheel["waits_for"]
    te_env = next(n for n in d["nodes"] if n["name"] == "compile-env:transformer-engine")
    assert "cudnn: apt libcudnn9-cuda-13=9.14.0.64-*" in te_env["waits_for"]
    assert any("is partial (not locked: apt, base" in n for n in d["notes"])
    assert next(n for n in d["nodes"] if n["name"] == "compile-env:transformer-engine")["parents"] == ["cudnn"]
    assert any("engine not reachable" in n for n in d["notes"])
    # the same plan twice: the same keys
    again = plan_json(capsys, "deepseek-v3-gb200", "--variant", "cuda13")
    assert [n["key"] for n in again["nodes"]] == [n["key"] for n in d["nodes"]]


def test_variants_share_what_they_share(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    """cuda13 and hopper use one base tag, so their unlocked base keys agree; their compiles do not."""
    a = {n["name"]: n["key"] for n in plan_json(capsys, "deepseek-v3-gb200", "--variant", "cuda13")["nodes"]}
    b = {n["name"]: n["key"] for n in plan_json(capsys, "deepseek-v3-gb200", "--variant", "hopper")["nodes"]}
    assert a["wheel:transformer-engine"] != b["wheel:transformer-engine"]  # NVTE_CUDA_ARCHS 100 vs 90
    assert a["base"] != b["base"]  # same tag, other platform


def test_table_output(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--project", str(PROJECT), "plan", "megatron-bert"]) == 0
    out = capsys.readouterr().out
    assert "megatron-bert" in out and "provisional key" in out and "entrypoint" in out
