"""images/install.py against pip, in containers of the demo base (the real engine, its real pip).

The same hashed wheels (made-up distributions that tests/unit/test_install_fragment.py writes: a pure one
with a console script, a data script and data; one rooted in platlib) are installed once by
`pip install --no-deps --require-hashes` from the loopback wheelhouse, as the RUNs did before install.py,
and once by install.py. Every path under /usr/local, its type, mode and content, must be the same, and
RECORD too (without its INSTALLER row); INSTALLER itself says who installed. install.py leaves nothing newer
than the RUN's start (it gives what it writes the mtime EPOCH, which the settle scan would), pip does; and
what install.py installed imports and runs. A requirement that names an installed distribution is left
to pip (exit 3) with nothing written. install.py unpacks and writes RECORD with pypa/installer, whose pinned
wheel (graph/render.py's INSTALLER, fetched and verified as a build fetches it) the wheelhouse serves at
tools/, as a build's does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from buildctl.builder import compilecache, wheelhouse
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.graph import render
from buildctl.sources.index import HttpFetcher
from tests.unit.test_install_fragment import make_wheel

IMAGES = Path(__file__).resolve().parents[2] / "images"
LIST = r"""
set -eu
mode=$1; url=$2; tool=$3; shift 3
touch /tmp/stamp; sleep 1
if [ "$mode" = pip ]; then
  printf '%s\n' "$@" > /tmp/r.txt
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore --no-index --find-links "$url" \
    --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes -r /tmp/r.txt
  rm /tmp/r.txt
else
  rc=0; PIP_BREAK_SYSTEM_PACKAGES=1 python3 -B /inst.py --epoch 315532800 --installer "$tool" --find-links "$url" -- \
    "$@" || rc=$?
  echo "RC $rc"
fi
echo "NEWER $(find /usr/local -newer /tmp/stamp | wc -l)"
find /usr/local ! -name INSTALLER ! -name RECORD -printf '%p %m %y\n' | sort | while read -r p m y; do
  if [ "$y" = f ]; then echo "$p $m $(sha256sum < "$p" | cut -c1-16)"; else echo "$p $m $y"; fi
done
for f in /usr/local/lib/python3*/dist-packages/*.dist-info/RECORD; do
  echo "RECORD $f $(grep -v '/INSTALLER,' "$f" | sha256sum | cut -c1-16)"
done
"""


@pytest.fixture(scope="module")
def installer_wheel() -> Path:
    """The pinned pypa/installer wheel, fetched and verified as `buildctl build` does (builder/prepare.py)."""
    config = load_config(os.environ)
    return compilecache.fetch_wheel(config.cache, compilecache.ToolWheel.of(render.INSTALLER),
                                    HttpFetcher.from_config(config), what="pypa/installer's wheel", fix="")


def house_with_tool(tmp_path: Path, wheel: Path) -> Path:
    """A wheelhouse folder with the installer at tools/, as a build's."""
    house = tmp_path / "house"
    (house / "tools").mkdir(parents=True)
    shutil.copy(wheel, house / render.INSTALLER_DIR / render.INSTALLER_WHEEL)
    return house


def tool_arg(url: str) -> str:
    return f"{url}{render.INSTALLER_DIR}{render.INSTALLER_WHEEL}#{render.INSTALLER.hashes[0].replace(':', '=')}"


def test_install_py_writes_what_pip_writes(engine: Engine, demo_base: str, tmp_path: Path,
                                           installer_wheel: Path) -> None:
    house = house_with_tool(tmp_path, installer_wheel)
    pure = make_wheel(house, "demo_pure", "1.0", requires_python=">=3.8", extra={
        "demo_pure/tool.sh": (b"#!/bin/sh\necho tool\n", 0o755),
        "demo_pure/cli.py": (b"def main():\n    print('demo-pure runs')\n", 0o644),
        "demo_pure-1.0.data/scripts/demo-run": (b"#!python\nimport demo_pure\nprint('run', demo_pure.VALUE)\n", 0o755),
        "demo_pure-1.0.data/data/share/demo/x.txt": (b"x\n", 0o644)},
        entry_points="[console_scripts]\ndemo-pure = demo_pure.cli:main\n")
    plat = make_wheel(house, "demo_plat", "2.0", purelib=False)
    reqs = [f"demo_pure==1.0 --hash=sha256:{wheelhouse.sha256_file(pure)}",
            f"demo-plat==2.0 --hash=sha256:{wheelhouse.sha256_file(plat)}"]
    files = {"/list.sh": LIST.encode(), "/inst.py": (IMAGES / "install.py").read_bytes()}
    out = {}
    with wheelhouse.serve(house, port=0) as url:
        for mode in ("pip", "install"):
            res = engine.run(demo_base, ["sh", "/list.sh", mode, url, tool_arg(url), *reqs], files=files,
                             network_mode="host",
                             timeout=120)
            assert res.ok, res.stdout + res.stderr
            out[mode] = res.stdout.splitlines()
        # a distribution the base has: install.py leaves the whole install to pip, having written nothing
        have = engine.run(demo_base, ["python3", "-c", "import importlib.metadata as m; print(sorted("
                                      "d.metadata['Name'] for d in m.distributions() if d.metadata['Name'] not in "
                                      "('pip', 'setuptools'))[0])"], timeout=60).stdout.strip()
        declined = engine.run(demo_base, ["sh", "/list.sh", "install", url, tool_arg(url),
                                          f"{have}==0.0.1 --hash=sha256:{'a' * 64}",
                                          *reqs], files=files, network_mode="host", timeout=120)
    assert declined.ok, declined.stdout + declined.stderr
    assert f"buildctl-install: pip installs these instead: {have} " in declined.stdout
    assert "RC 3" in declined.stdout and "NEWER 0" in declined.stdout
    assert not [line for line in declined.stdout.splitlines() if "demo_p" in line]

    pip, mine = out["pip"], out["install"]
    assert mine[0] == "buildctl-install: installed demo_pure 1.0, demo-plat 2.0 (without pip)" and mine[1] == "RC 0"
    assert mine[2] == "NEWER 0" and pip[0] != "NEWER 0"  # pip leaves build-time mtimes (the settle scan's job)
    assert [line for line in pip[1:] if "demo" in line or "RECORD" in line] == \
        [line for line in mine[3:] if "demo" in line or "RECORD" in line]
    assert pip[1:] == mine[3:]
    assert any(line.startswith("/usr/local/bin/demo-pure 755") for line in mine)
    assert any(line.startswith("/usr/local/bin/demo-run 755") for line in mine)
    assert len([line for line in mine if line.startswith("RECORD ")]) == 2


def test_what_install_py_installed_runs(engine: Engine, demo_base: str, tmp_path: Path, installer_wheel: Path) -> None:
    house = house_with_tool(tmp_path, installer_wheel)
    pure = make_wheel(house, "demo_pure", "1.0", extra={
        "demo_pure/cli.py": (b"def main():\n    print('demo-pure runs')\n", 0o644)},
        entry_points="[console_scripts]\ndemo-pure = demo_pure.cli:main\n")
    script = ('set -eu; PIP_BREAK_SYSTEM_PACKAGES=1 python3 -B /inst.py --epoch 315532800 --installer "$2" '
              '--find-links "$0" -- "$1"; '
              'demo-pure; python3 -m pip show -f demo_pure | grep -E "^(Name|Version|Location):"; '
              'python3 -m pip uninstall -y -q --break-system-packages demo_pure 2>&1 | grep -v WARNING || true; '
              'test ! -e /usr/local/bin/demo-pure && echo uninstalled')
    with wheelhouse.serve(house, port=0) as url:
        req = f"demo_pure==1.0 --hash=sha256:{wheelhouse.sha256_file(pure)}"
        res = engine.run(demo_base, ["sh", "-c", script, url, req, tool_arg(url)],
                         files={"/inst.py": (IMAGES / "install.py").read_bytes()}, network_mode="host", timeout=120)
    assert res.ok, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == "demo-pure runs"
    assert lines[2:4] == ["Name: demo_pure", "Version: 1.0"]
    assert lines[4].startswith("Location: /usr/local/lib/python3.") and lines[4].endswith("/dist-packages")
    assert lines[-1] == "uninstalled"
