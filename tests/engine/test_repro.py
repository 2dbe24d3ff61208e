"""`buildctl repro` against the real engine: two builds of the demo stack, nothing shared, compared.

The projects are copies of pins/demo.yaml pointing at the test registry (the helpers and the session's
demo lock are test_build.py's). The floating-input test serves its own package index on 127.0.0.1 and
changes what it offers between the two builds. Every image the tests make is removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from buildctl import cli
from buildctl.builder import pipeline
from buildctl.commands.repro import _raise_failures
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.errors import ReproFailed
from buildctl.lock import lockfile
from buildctl.repro import repro as comparison
from buildctl.services import repro
from buildctl.services.wiring import resolvers as real_resolvers
from tests.engine.test_build import PROJECT, base_env, demo_lock, write_project
from tests.helpers import load_script

__all__ = ["demo_lock"]  # the session's lock of the demo stack (a fixture of test_build.py)

COMPILE = ("compile-env:fastmath", "wheel:fastmath")
CHAIN = ("system", "python", "assemble", "entrypoint")


def _pyindex() -> ModuleType:
    return load_script("repro_pyindex", PROJECT / "tests" / "integration" / "pyindex.py")


pyindex = _pyindex()


def demo_project(tmp_path: Path, registry: str, lock: str, monkeypatch: pytest.MonkeyPatch, *,
                 apt: bool = True) -> Path:
    root = write_project(tmp_path / "project", registry, "buildctl-test/repro", apt=apt)
    (root / "pins" / "demo.lock.json").write_text(lock)
    base_env(monkeypatch, tmp_path / "cache")
    return root


def repro_json(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    rc = cli.main(["--project", str(root), "-q", "repro", "demo", "--json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else {}


def nodes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in report["nodes"]}


def created_times(engine: Engine, ref: str, parent: str) -> set[int]:
    """When the engine made each of the node's own layers (a cached step would keep the first build's time)."""
    history = engine.inspect_image(ref).history  # newest first
    own = history[: len(history) - len(engine.inspect_image(parent).history)]
    return {h.created for h in own if h.size > 0}


def test_demo_layers_are_bit_identical_and_compiles_semantically(
        engine: Engine, registry: str, demo_lock: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], image_cleanup: Any) -> None:
    root = demo_project(tmp_path, registry, demo_lock, monkeypatch)
    rc, report = repro_json(root, capsys, "--keep")
    refs = {side: {n["node"]: n["refs"][i] for n in report.get("nodes", [])} for i, side in enumerate("ab")}
    for side in "ab":
        for ref in reversed(list(refs[side].values())):
            image_cleanup(ref)
    assert rc == 0, report
    assert report["ok"] and report["mode"] == "lock" and report["notes"] == []  # `lock --check` found no drift
    by = nodes(report)
    assert sorted(by) == sorted(CHAIN + COMPILE)
    for name in CHAIN:  # declared bit in pins/demo.yaml: identical layer diff IDs
        assert by[name]["verdict"] == "bit-identical", by[name]
        assert by[name]["level"] == "bit" and all(layer["same"] for layer in by[name]["layers"])
    for name in COMPILE:  # declared semantic: at least that (the demo's C compile is in fact deterministic)
        assert by[name]["level"] == "semantic" and by[name]["meets_level"], by[name]
        assert by[name]["verdict"] in ("bit-identical", "semantically identical")
    # the audit: the demo's floating manifest values are all pinned by its lock
    assert report["audit"] and all(f["status"] == "locked" for f in report["audit"])
    assert {"apt less (no version); the lock pins " + json.loads(demo_lock)["variants"]["default"]["apt"]["less"]} <= {
        f["what"] for f in report["audit"]}
    assert Path(report["report_file"]).is_file()

    # two builds that shared nothing: other names, every layer made anew, a compile each
    config = load_config()
    for name in by:
        a, b = refs["a"][name], refs["b"][name]
        assert a != b and engine.image_exists(a) and engine.image_exists(b)
    for name, parent in (("python", "system"), ("assemble", "python"), ("entrypoint", "assemble")):
        ta = created_times(engine, refs["a"][name], refs["a"][parent])
        tb = created_times(engine, refs["b"][name], refs["b"][parent])
        assert ta and tb and ta.isdisjoint(tb), name
    run_dir = next((config.cache.root / "repro" / "demo" / "default").iterdir())
    wheels = {side: list((run_dir / side / "wheels" / "fastmath").glob("*/*.whl")) for side in "ab"}
    assert wheels["a"] and wheels["b"]  # compiled in each build
    # a cold, b warm from the compiler cache a filled (fastmath with PR 7 is one C file): the wheel compiled from
    # cache hits is the cold compile's, bit for bit
    assert (run_dir / "a" / "ccache").is_dir() and not (run_dir / "b" / "ccache").exists()
    assert report["compiles"].startswith("build a compiled cold (an empty compiler cache), build b warm")
    assert report["compiles"].endswith("(b: wheel:fastmath: 1 of 1 objects from the cache)")
    assert [p.read_bytes() for p in wheels["a"]] == [p.read_bytes() for p in wheels["b"]]
    shutil.rmtree(run_dir)


def test_a_non_deterministic_compile_fails_its_declared_level(
        engine: Engine, registry: str, demo_lock: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], image_cleanup: Any) -> None:
    """A build command that writes the time into the package: the wheel and what installs it differ.

    The system node also removes a file of the base here: its whiteout gets a fixed time (normalise.py), so
    the node stays bit-identical. The compile is fastmath as a pure-Python wheel (its setup.py replaced by one
    without the C extension) in a compile environment without build apt packages: what this test is about is
    a compile that is not deterministic, not C; the two no-cache builds of a C toolchain (apt-get install of
    gcc, libc6-dev, python3-dev and git, about 12 s each here) are the first repro test's."""
    # no apt packages in the system node: its two no-cache builds are the base plus the downloads and the removal
    # (what this test is about), not two `apt-get update`s (the first repro test builds the demo whole)
    root = demo_project(tmp_path, registry, demo_lock, monkeypatch, apt=False)
    manifest = root / "pins" / "demo.yaml"
    text = manifest.read_text()
    old = "command: pip wheel --no-build-isolation --no-deps -w /out ."
    build_apt = "      apt: [gcc, libc6-dev, python3-dev, git]"
    assert old in text and "\nprotect:" in text and build_apt in text
    text = text.replace(old, "command: printf 'from setuptools import setup\\nsetup(version=\"0.2.0\")\\n' > setup.py && "
                             "echo \"BUILT_AT = '$(date +%s%N)'\" >> fastmath/__init__.py && "
                             "pip wheel --no-build-isolation --no-deps -w /out .")
    text = re.sub(rf"(?m)^{re.escape(build_apt)}.*\n", "", text)
    assert "\napt:" not in text and build_apt not in text
    manifest.write_text(text.replace("\nprotect:", "\nremove:\n  paths: [/etc/motd]\n\nprotect:"))
    lock = json.loads(demo_lock)
    lock["manifest_sha256"] = hashlib.sha256(manifest.read_bytes()).hexdigest()  # the lock is still current
    lock["variants"]["default"]["build_apt"] = {}  # as `lock` writes it for a compile without build apt
    lockfile.write_data(root / "pins" / "demo.lock.json", lock)

    rc, report = repro_json(root, capsys, "--no-lock-check", "--keep")
    for n in report.get("nodes", []):
        for ref in n["refs"]:
            image_cleanup(ref)
    assert rc == ReproFailed.exit_code
    by = nodes(report)
    wheel = by["wheel:fastmath"]
    assert wheel["verdict"] == "different" and not wheel["meets_level"]
    assert wheel["causes"] == ["non-deterministic compile"]
    [changed] = [f for f in wheel["files"] if f["path"].endswith(".whl")]
    assert {"name": "fastmath/__init__.py", "change": "changed"} in changed["members"]
    assembled = by["assemble"]
    assert assembled["verdict"] == "different" and assembled["causes"] == ["a node it builds on differs"]
    assert any(f["path"].endswith("/fastmath/__init__.py") for f in assembled["files"])
    for name in ("system", "python", "compile-env:fastmath"):  # what does not involve the compile stays identical
        assert by[name]["verdict"] == "bit-identical", name
    removed = engine.run(by["system"]["refs"][0], ["sh", "-c", "test ! -e /etc/motd && test -e /etc/hostname"],
                         entrypoint=[], timeout=60)
    assert removed.ok, removed.stderr
    shutil.rmtree(next((load_config().cache.root / "repro" / "demo" / "default").iterdir()))


# ---------------------------------------------------------------------------------- a floating input


FLOATING = """\
schema: 1
stack: floating
description: one unpinned pip requirement, served by a test index whose offer changes between builds
base:
  alias: demo-base
  contract: {{python: "3.11"}}
variants:
  default:
    image: {registry}/buildctl/demo-base:bookworm
    platform: linux/amd64
    cuda: "13"
    python: "3.11"
pip:
  constraint: keep
  requirements: [floaty]
push: {{registry: "{registry}", repository: buildctl-test/floating}}
repro:
  levels: {{system: bit, python: bit, assemble: bit}}
"""


class Steps:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, text: str) -> None:
        self.lines.append(text)

    def build(self, side: str, names: Sequence[str]) -> AbstractContextManager[pipeline.BuildProgress]:
        return self._quiet()

    @contextmanager
    def _quiet(self) -> Iterator[pipeline.BuildProgress]:
        class Quiet:
            def node(self, name: str, state: str, detail: str = "") -> None:
                pass

            def log(self, name: str, line: str) -> None:
                pass
        yield Quiet()


def test_a_floating_pip_package_is_audited_and_named_as_the_difference(
        engine: Engine, registry: str, demo_base: str, demo_lock: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "project"
    (root / "pins").mkdir(parents=True)
    (root / "images").symlink_to(PROJECT / "images")
    (root / "pins" / "floating.yaml").write_text(FLOATING.format(registry=registry))  # demo_lock pushed the base
    base_env(monkeypatch, tmp_path / "cache")
    wheels = tmp_path / "wheels"
    v10 = pyindex.make_wheel(wheels, "floaty", "1.0")
    index_root = pyindex.make_index(tmp_path / "index", [v10])

    # the audit flags it before anything is built
    capsys.readouterr()
    assert cli.main(["--project", str(root), "repro", "floating", "--audit-only", "--json", "--no-lock-check"]) == 14
    audit = json.loads(capsys.readouterr().out)
    assert not audit["inputs_pinned"]
    [floaty] = [f for f in audit["findings"] if "floaty" in f["packages"]]
    assert floaty["status"] == "floating" and floaty["node"] == "python" and floaty["level"] == "bit"
    assert floaty["what"] == "pip floaty (not pinned to one version in the manifest)"

    def offer_a_newer_version() -> None:
        pyindex.make_index(index_root, [v10, pyindex.make_wheel(wheels, "floaty", "1.1")])

    with pyindex.serve(index_root) as url:
        monkeypatch.setenv("BUILDCTL_PIP_INDEX_URL", f"{url}/simple")
        config = load_config()
        outcome = repro.run(project=root, config=config, stack="floating", variant=None, engine=engine,
                            progress=Steps(), resolvers=real_resolvers,
                            options=repro.ReproOptions(mode="relock"), between=offer_a_newer_version)
    report = outcome.report
    python = comparison.find(report.nodes, "python")
    assert python.verdict is comparison.Verdict.DIFFERENT and not python.meets_level
    assert [p.line() for p in python.packages] == ["python floaty: 1.0 -> 1.1"]
    assert comparison.Cause.FLOATING_INPUT in python.causes
    assert "floating input: pip floaty (not pinned to one version in the manifest)" in python.notes
    added = {f.path for f in python.files if f.change == "added"}
    assert any(re.search(r"floaty-1\.1\.dist-info/METADATA$", p) for p in added)
    assert comparison.find(report.nodes, "system").verdict is comparison.Verdict.BIT  # nothing floats there
    assert "the two locks differ: default: pip floaty: 1.0 -> 1.1" in report.notes
    with pytest.raises(ReproFailed) as failed:
        _raise_failures(report)
    assert "python (different, declared bit)" in failed.value.what and "floating input" in failed.value.why
    saved = json.loads(outcome.report_file.read_text())
    assert saved["ok"] is False and saved["mode"] == "relock"
    for side in outcome.refs.values():
        for ref in side.values():
            assert not engine.image_exists(ref)
    assert not (root / "pins" / "floating.lock.json").exists()  # --relock leaves the project's lock alone
