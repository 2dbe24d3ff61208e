"""bom.py: reading the listing, diffing two BOMs, mapping changes to manifest lines (pure)."""

from __future__ import annotations

import json

import pytest

from buildctl.errors import EngineError
from buildctl.manifest import pins
from buildctl.ship import bom
from tests.unit.fakes_ship import FakeEngine, Image, Run

MANIFEST = """\
stack: demo
base:
  alias: demo-base
variants:
  v1:
    image: 127.0.0.1:5000/buildctl/demo-base:bookworm
    platform: linux/amd64
    cuda: "0"
apt:
  packages:
    - jq
pip:
  requirements:
    - six==1.16.0
    - PyYAML==6.0
env:
  A: "2"
"""


def listing(pip: dict[str, str], deb: dict[str, str] | None, python: str = "3.11.2") -> Run:
    return Run(stdout=json.dumps({"python": python, "pip": pip, "shadowed": {}, "deb": deb, "errors": {}}) + "\n")


def make(name: str, pip: dict[str, str], deb: dict[str, str], labels: dict[str, str] | None = None,
         env: dict[str, str] | None = None) -> bom.Bom:
    info = Image(id="sha256:" + "2" * 64, labels=labels or {}, env=env or {})
    return bom.from_image(info, name, listing(pip, deb))


def test_from_image_reads_packages_components_and_base() -> None:
    labels = {"io.buildctl.component.demo-ext": "a" * 40, "org.opencontainers.image.base.digest": "sha256:" + "9" * 64,
              "org.opencontainers.image.base.name": "127.0.0.1:5000/buildctl/demo-base:bookworm",
              "io.buildctl.stack": "demo"}
    b = make("img", {"PyYAML": "6.0", "pip": "23.0.1"}, {"python3-yaml": "6.0-3+b2"}, labels)
    assert b.pip == {"PyYAML": "6.0", "pip": "23.0.1"} and b.deb == {"python3-yaml": "6.0-3+b2"}
    assert b.components == {"demo-ext": "a" * 40}
    assert b.base == {"name": "127.0.0.1:5000/buildctl/demo-base:bookworm", "digest": "sha256:" + "9" * 64}
    assert b.stack == "demo" and b.errors == {}


def test_an_image_without_python_says_so_instead_of_failing() -> None:
    b = bom.from_image(Image(), "scratchy", Run(exit_code=127, stderr='exec: "python3": executable file not found'))
    assert b.pip == {} and b.deb is None
    assert b.errors["pip"].startswith("no python3 in the image")


def test_collect_pulls_an_image_the_engine_lacks_and_says_when_pulling_fails() -> None:
    engine = FakeEngine(run_result=listing({"six": "1.16.0"}, None))
    assert bom.collect(engine, "reg/x:1").pip == {"six": "1.16.0"}
    assert bom.collect(engine, "reg/x:1").pip == {"six": "1.16.0"}
    assert [c for c in engine.calls if c[0] == "pull"] == [("pull", "reg/x:1")]  # once: then it is at hand

    class Unreachable(FakeEngine):
        def pull(self, ref: str, platform: str | None = None) -> str:
            raise EngineError(f"pull of {ref} failed", why="no route", fix="check the network")

    with pytest.raises(EngineError) as err:
        bom.collect(Unreachable(), "reg/y:1")
    assert err.value.what == "no image reg/y:1 here, and pulling it failed: pull of reg/y:1 failed"
    assert err.value.why == "no route" and err.value.fix == "build it, or give a reference the registry has"


def test_diff_maps_changes_to_manifest_lines() -> None:
    m = pins.load_text(MANIFEST, "pins/demo.yaml")
    a = make("a", {"PyYAML": "6.0", "pip": "23.0.1"}, {"jq": "1.6-2.1", "bash": "5.2"},
             {"io.buildctl.component.demo-ext": "1" * 40, "io.buildctl.stack": "demo"}, {"A": "1"})
    b = make("b", {"pyyaml": "6.0.1", "pip": "23.0.1", "six": "1.16.0"}, {"bash": "5.2", "curl": "7.88"},
             {"io.buildctl.component.demo-ext": "2" * 40, "io.buildctl.stack": "demo"}, {"A": "2"})
    d = bom.diff(a, b, m)
    assert [(x.section, x.name, x.change, x.source) for x in d.deltas] == [
        ("pip", "pyyaml", "changed", "pins/demo.yaml:15: pip.requirements[1]"),
        ("pip", "six", "added", "pins/demo.yaml:14: pip.requirements[0]"),
        ("deb", "curl", "added", ""),
        ("deb", "jq", "removed", "pins/demo.yaml:11: apt.packages[0]"),
        ("component", "demo-ext", "changed", ""),
        ("env", "A", "changed", "pins/demo.yaml: env.A"),
    ]
    assert bom.render_diff(d) == (
        "diff a -> b\n"
        "  pip       ~ pyyaml 6.0 -> 6.0.1  [pins/demo.yaml:15: pip.requirements[1]]\n"
        "  pip       + six 1.16.0  [pins/demo.yaml:14: pip.requirements[0]]\n"
        "  deb       + curl 7.88\n"
        "  deb       - jq 1.6-2.1  [pins/demo.yaml:11: apt.packages[0]]\n"
        f"  component ~ demo-ext {'1' * 40} -> {'2' * 40}\n"
        "  env       ~ A 1 -> 2  [pins/demo.yaml: env.A]\n"
        "summary: pip 1 added, 1 changed; deb 1 added, 1 removed; component 1 changed; env 1 changed\n")


def test_identical_boms_have_no_differences() -> None:
    a = make("a", {"pip": "1"}, {"bash": "5"})
    assert bom.diff(a, a).deltas == () and "no differences" in bom.render_diff(bom.diff(a, a))


def test_render_bom_lists_packages() -> None:
    b = make("img", {"PyYAML": "6.0", "pip": "23.0.1"}, {"python3-yaml": "6.0-3+b2"})
    assert bom.render_bom(b) == (
        f"bom img ({'sha256:' + '2' * 12}, linux/amd64)\n"
        "  base: -\n"
        "  python: 3.11.2\n"
        "python packages (2):\n"
        "  pip==23.0.1\n"
        "  PyYAML==6.0\n"
        "debian packages (1):\n"
        "  python3-yaml 6.0-3+b2\n")
