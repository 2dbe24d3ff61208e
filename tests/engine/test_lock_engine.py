"""`buildctl lock` against the real engine and the test registry: tag -> digest (and a re-pushed tag
reported by --check), pip and apt resolved inside the demo base, against an index on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.engine.engine import Engine
from tests.integration import pyindex


def lock_cmd(project: Path, *args: str) -> int:
    return cli.main(["--project", str(project), "lock", "demo", *args])


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project; buildctl's configuration comes from the environment only."""
    (tmp_path / "project" / "pins").mkdir(parents=True)
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_NETWORK_TIMEOUT", "10")
    for var in ("BUILDCTL_PIP_INDEX_URL", "BUILDCTL_PIP_EXTRA_INDEX_URLS", "BUILDCTL_REGISTRY_MIRRORS",
                "BUILDCTL_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "project"


def manifest(project: Path, image: str, body: str = "") -> Path:
    path = project / "pins" / "demo.yaml"
    path.write_text(f"""\
schema: 1
stack: demo
base: {{alias: demo-base}}
variants:
  default: {{image: "{image}", platform: linux/amd64, cuda: "13", python: "3.11"}}
{body}""")
    return path


def read_lock(project: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project / "pins" / "demo.lock.json").read_text())
    return data


def push_base(engine: Engine, registry: str, demo_base: str, image_cleanup: Any) -> tuple[str, str]:
    ref = image_cleanup(f"{registry}/buildctl-lock-test/base:{uuid.uuid4().hex[:12]}")
    engine.tag(demo_base, ref)
    return ref, engine.push(ref)


def test_check_reports_a_re_pushed_tag_with_both_digests(
        engine: Engine, registry: str, demo_base: str, image_cleanup: Any, project: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ref, first = push_base(engine, registry, demo_base, image_cleanup)
    manifest(project, ref)
    assert lock_cmd(project) == 0
    lock = read_lock(project)
    assert lock["variants"]["default"]["base"] == {"ref": ref, "digest": first, "platform": "linux/amd64"}
    assert lock_cmd(project, "--check") == 0

    # Someone pushes a different image under the same tag.
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    marker = uuid.uuid4().hex[:12]
    (ctx / "Dockerfile").write_text(f"FROM {demo_base}\nLABEL org.buildctl.test.lock={marker}\n")
    other = image_cleanup(f"buildctl-lock-test-other:{marker}")
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=other, labels={"org.buildctl.test.lock": marker})
    engine.tag(other, ref)
    second = engine.push(ref)
    assert second != first

    before = (project / "pins" / "demo.lock.json").read_bytes()
    capsys.readouterr()
    assert lock_cmd(project, "--check") == 5
    err = capsys.readouterr().err
    assert "pins/demo.lock.json is out of date (1 difference(s)):" in err
    assert f"default: base image {ref} moved: {first} -> {second}" in err
    assert (project / "pins" / "demo.lock.json").read_bytes() == before

    assert lock_cmd(project, "--check", "--json") == 5
    out = json.loads(capsys.readouterr().out)
    assert [(d["kind"], d["old"], d["new"]) for d in out["drift"]] == [("base", first, second)]


def test_unreachable_registry_fails_fast_and_writes_nothing(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    manifest(project, f"127.0.0.1:{port}/nothing/here:1")
    assert lock_cmd(project) == 6
    err = capsys.readouterr().err
    assert f"cannot lock demo/default here: the base image 127.0.0.1:{port}/nothing/here:1 cannot be reached" in err
    assert not (project / "pins" / "demo.lock.json").exists()


def git_component(tmp_path: Path) -> Path:
    repo = tmp_path / "tool"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@x"}
    (repo / "setup.py").write_text("from setuptools import setup\nsetup(name='tool')\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "tool"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    return repo


@pytest.fixture
def index(tmp_path: Path) -> dict[str, Any]:
    d = tmp_path / "dist"
    w = {
        "a10": pyindex.make_wheel(d, "demo-a", "1.0", requires=["demo-b>=1.0"]),
        "b10": pyindex.make_wheel(d, "demo-b", "1.0"),
        "b11": pyindex.make_wheel(d, "demo-b", "1.1"),
        "b11-cp311": pyindex.make_wheel(d, "demo-b", "1.1", tag="cp311-cp311-manylinux_2_17_x86_64"),
        "b11-cp312": pyindex.make_wheel(d, "demo-b", "1.1", tag="cp312-cp312-manylinux_2_17_x86_64"),
        "c20": pyindex.make_wheel(d, "demo-c", "2.0"),
        # stands in for a newer PyYAML than the base's 6.0 (never installed: pip only plans)
        "yaml602": pyindex.make_wheel(d, "PyYAML", "6.0.2"),
    }
    return {"files": w, "root": pyindex.make_index(tmp_path / "index", list(w.values()))}


def test_pip_and_apt_are_resolved_inside_the_base(
        engine: Engine, registry: str, demo_base: str, image_cleanup: Any, project: Path, tmp_path: Path,
        index: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = push_base(engine, registry, demo_base, image_cleanup)
    tool = git_component(tmp_path)
    manifest(project, ref, f"""\
apt:
  packages: ["jq=1.6*"]
cudnn: {{package: libjq1, version: "1.6"}}
pip:
  constraint: keep
  requirements: ["demo-a==1.0", "pyyaml"]
components:
  tool:
    repo: file://{tool}
    commit: "{subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=tool, capture_output=True, text=True).stdout[:10]}"
    build:
      requires: ["demo-c==2.0"]
      apt: [less]
""")
    files = index["files"]
    with pyindex.serve(index["root"]) as url:
        monkeypatch.setenv("BUILDCTL_PIP_INDEX_URL", f"{url}/simple")
        assert lock_cmd(project) == 0
    v = read_lock(project)["variants"]["default"]
    assert v["base"]["digest"] == digest
    pip = {p["name"]: p for p in v["pip"]}
    assert sorted(pip) == ["demo-a", "demo-b", "pyyaml"]
    assert pip["demo-a"] == {"name": "demo-a", "version": "1.0", "in_base": False,
                             "hashes": [f"sha256:{pyindex.sha256(files['a10'])}"]}
    # the dependency at its highest version, with every file that fits bookworm's CPython 3.11 on x86_64
    assert pip["demo-b"]["version"] == "1.1" and not pip["demo-b"]["in_base"]
    assert pip["demo-b"]["hashes"] == sorted(f"sha256:{pyindex.sha256(files[k])}" for k in ("b11", "b11-cp311"))
    # the base's own PyYAML (Debian's python3-yaml) satisfies the requirement: nothing to install
    assert pip["pyyaml"] == {"name": "pyyaml", "version": "6.0", "in_base": True, "hashes": []}
    assert v["build_pip"] == {"tool": [{"name": "demo-c", "version": "2.0", "in_base": False,
                                        "hashes": [f"sha256:{pyindex.sha256(files['c20'])}"]}]}
    # bookworm's jq is 1.6: the pattern and the cuDNN-style "<version>-*" default both find it
    assert v["apt"]["jq"].startswith("1.6-") and v["apt"]["libjq1"].startswith("1.6-")
    assert list(v["apt"]) == ["jq", "libjq1"]
    assert list(v["build_apt"]["tool"]) == ["less"] and v["build_apt"]["tool"]["less"]


def test_the_base_pip_constraint_counts_unless_unset(
        engine: Engine, registry: str, demo_base: str, image_cleanup: Any, project: Path,
        index: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ref, digest = push_base(engine, registry, demo_base, image_cleanup)
    # Drop the local tag, so that the lock has to pull the base, by digest, to look inside it.
    pinned = image_cleanup(f"{ref.rsplit(':', 1)[0]}@{digest}")
    engine.remove_image(ref)
    assert not engine.image_exists(pinned)
    with pyindex.serve(index["root"]) as url:
        monkeypatch.setenv("BUILDCTL_PIP_INDEX_URL", f"{url}/simple")
        # The demo base's /etc/pip/constraint.txt says PyYAML==6.0, as NGC's pins its own packages.
        path = manifest(project, ref, 'pip:\n  constraint: keep\n  requirements: ["pyyaml>=6.0.1"]\n')
        assert lock_cmd(project) == 4
        err = capsys.readouterr().err
        assert "pip cannot resolve the pip requirements inside" in err
        assert "ResolutionImpossible" in err
        assert "the base's PIP_CONSTRAINT pins: /etc/pip/constraint.txt: PyYAML==6.0" in err
        assert not (project / "pins" / "demo.lock.json").exists()
        assert engine.image_exists(pinned)  # pulled by digest, never by the moving tag

        path.write_text(path.read_text().replace("constraint: keep", "constraint: unset"))
        assert lock_cmd(project) == 0
    [yaml] = read_lock(project)["variants"]["default"]["pip"]
    assert yaml == {"name": "pyyaml", "version": "6.0.2", "in_base": False,
                    "hashes": [f"sha256:{pyindex.sha256(index['files']['yaml602'])}"]}


def test_failed_apt_resolution_leaves_the_lock_unchanged(
        engine: Engine, registry: str, demo_base: str, image_cleanup: Any, project: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ref, _ = push_base(engine, registry, demo_base, image_cleanup)
    path = manifest(project, ref)
    assert lock_cmd(project) == 0
    before = (project / "pins" / "demo.lock.json").read_bytes()
    path.write_text(path.read_text() + 'apt:\n  packages: ["jq=0.1-1"]\n')
    capsys.readouterr()
    assert lock_cmd(project) == 4
    err = capsys.readouterr().err
    assert "apt package jq=0.1-1 is not offered by" in err and "offered versions: 1.6-" in err
    assert (project / "pins" / "demo.lock.json").read_bytes() == before
