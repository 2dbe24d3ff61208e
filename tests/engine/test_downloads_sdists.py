"""The demo stack with a downloaded wheel (install: pip) and a requirement PyPI-style indexes have only as an
sdist, both from a local index this test starts: locked, built, smoke-gated and run with the real engine.

The download's own requirement (sdistonly==1.0) is resolved by the lock with the rest of pip; only a
source distribution of it exists, so the lock records the sdist's hash and the build host turns it into a
wheel in a container of the base with no network. The `requirements` smoke check (pip check in the image
against the base's own run) passes, and fails when the lock leaves the requirement out. The demo's
compiled component and apt packages are left out of this copy: tests/engine/test_build.py exercises them.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.builder import smoke
from buildctl.engine.engine import Engine
from buildctl.errors import BuildFailed, SmokeFailed
from tests.engine.test_build import Demo, base_env, write_project
from tests.helpers import unique
from tests.integration import pyindex

SETUP = 'from setuptools import setup\nsetup(name="sdistonly", version="1.0", packages=["sdistonly"])\n'


def make_sdist(folder: Path, *, setup: str = SETUP) -> Path:
    """sdistonly-1.0.tar.gz (setup.py + one package), the same bytes every time."""
    files = {
        "sdistonly-1.0/setup.py": setup.encode(),
        "sdistonly-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: sdistonly\nVersion: 1.0\n",
        "sdistonly-1.0/sdistonly/__init__.py": b"VALUE = 42\n",
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            tf.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sdistonly-1.0.tar.gz"
    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return path


def project(root: Path, registry: str, url: str) -> Path:
    """The demo project without its compiled component, plus a downloaded wheel that needs sdistonly."""
    write_project(root, registry, f"buildctl-test/{unique('sd')}", apt=False)  # apt is test_build's: here only cost
    m = root / "pins" / "demo.yaml"
    text = m.read_text()
    text = re.sub(r"(?ms)^  fastmath:\n.*?(?=^  demo-trainer:)", "", text)
    text = text.replace("imports: [fastmath, six, tomli, yaml]", "imports: [six, tomli, yaml, dlwheel_mod, sdistonly]")
    text = text.replace("downloads:\n", "downloads:\n  dlwheel:\n    install: pip\n    urls:\n"
                        f"      any: {{url: \"{url}/dl/dlwheel-1.0-py3-none-any.whl\", sha256: compute}}\n", 1)
    m.write_text(text)
    return root


@pytest.fixture
def index(tmp_path: Path) -> Any:
    root = tmp_path / "index"
    sdist = make_sdist(tmp_path / "made")
    pyindex.make_index(root, [sdist])  # the index has the sdist only
    wheel = pyindex.make_wheel(root / "dl", "dlwheel", "1.0", requires=["sdistonly==1.0"])  # a plain download
    with pyindex.serve(root) as url:
        yield {"url": url, "sdist": sdist, "wheel": wheel, "root": root}


def test_a_downloaded_wheel_and_an_sdist_only_requirement(
        registry_base: str, engine: Engine, registry: str, index: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, image_cleanup: Any) -> None:
    root = project(tmp_path / "project", registry, index["url"])
    base_env(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("BUILDCTL_PIP_EXTRA_INDEX_URLS", f"{index['url']}/simple/")
    assert cli.main(["--project", str(root), "-q", "lock", "demo"]) == 0
    pip = {p["name"]: p for p in json.loads((root / "pins" / "demo.lock.json").read_text())
           ["variants"]["default"]["pip"]}
    assert pip["dlwheel"]["hashes"] == [f"sha256:{pyindex.sha256(index['wheel'])}"]  # the download's checksum
    assert pip["sdistonly"] == {"name": "sdistonly", "version": "1.0", "in_base": False, "sdist": True,
                                "hashes": [f"sha256:{pyindex.sha256(index['sdist'])}"]}
    assert "sdist" not in pip["six"]

    demo = Demo(root=root, repository="", monkeypatch=monkeypatch, cleanup=image_cleanup)
    reports = demo.config().cache.reports / "smoke"
    report = demo.build([engine], skip_smoke=False, gate=smoke.BuildGate(report_dir=reports))
    assert report.smoke == "passed"
    checks = {c["name"]: c for c in json.loads(next(reports.glob("*.build.json")).read_text())["report"]["checks"]}
    assert checks["requirements"]["status"] == "pass", checks["requirements"]
    assert checks["imports"]["status"] == "pass"
    out = engine.run(report.final, ["python3", "-c", "import sdistonly, dlwheel_mod, importlib.metadata as m;"
                                    "print(sdistonly.VALUE, m.version('dlwheel'), m.version('sdistonly'))"],
                     entrypoint=[], timeout=60)
    assert out.ok and out.stdout.split() == ["42", "1.0", "1.0"], out.stderr
    built = list((demo.config().cache.downloads / "pip" / "built").rglob("*.whl"))
    assert [p.name for p in built] == ["sdistonly-1.0-py3-none-any.whl"]  # built on the host side, kept

    # the lock leaves the download's requirement out: pip check in the image says so, the gate stops
    def drop(v: dict[str, Any]) -> None:
        v["pip"] = [p for p in v["pip"] if p["name"] != "sdistonly"]
    demo.edit_lock(drop)
    with pytest.raises(SmokeFailed) as exc:
        demo.build([engine], skip_smoke=False, gate=smoke.BuildGate(report_dir=tmp_path / "reports2"))
    assert "dlwheel 1.0 requires sdistonly, which is not installed" in str(exc.value) + str(exc.value.why)

    # an sdist that does not build: the build stops on the host, before any node, naming the requirement
    bad = make_sdist(tmp_path / "bad", setup="raise SystemExit('this sdist needs a compiler it cannot have')\n")
    pyindex.make_index(index["root"], [bad])

    def relock(v: dict[str, Any]) -> None:
        v["pip"].append({"name": "sdistonly", "version": "1.0", "in_base": False, "sdist": True,
                         "hashes": [f"sha256:{pyindex.sha256(bad)}"]})
    demo.edit_lock(relock)
    with pytest.raises(BuildFailed) as failed:
        demo.build([engine])
    assert "pip requirement sdistonly==1.0 exists only as a source distribution" in failed.value.what
    assert "needs a compiler it cannot have" in failed.value.why

