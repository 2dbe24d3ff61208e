"""Lock entries for downloaded wheels (install: pip) and for requirements only an sdist fits."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from buildctl.errors import ManifestErrors
from buildctl.graph import graph, render, specs
from buildctl.lock.lockfile import LockedBase, LockedDownload, LockedPip, VariantLock
from buildctl.lock.resolve import download_wheels, pip_pins
from buildctl.lock.resolvers import PipInstall
from buildctl.manifest import pins

ROOT = Path(__file__).resolve().parents[2]
SDIST = "sha256:" + "a" * 64
WHEEL = "b" * 64


class Index:
    def file_hashes(self, name: str, version: str, tags: Sequence[str]) -> tuple[str, ...]:
        assert name != "dlwheel", "a downloaded wheel's hash is the download's: the index is not asked"
        return (SDIST,) if name == "sdistonly" else ("sha256:" + "c" * 64,)


MANIFEST = """\
schema: 1
stack: s
base: {alias: b}
variants:
  v: {image: "reg/base:1", platform: linux/amd64, cuda: "12", python: "3.11"}
downloads:
  dlwheel:
    install: pip
    urls:
      any: {url: "http://127.0.0.1:1/dl/dlwheel-1.0-py3-none-any.whl", sha256: compute}
pip:
  requirements: [six==1.16.0]
"""


def test_download_and_sdist_pins() -> None:
    m = pins.load_text(MANIFEST, "<s>")
    v = m.variant("v")
    downloads = {"dlwheel": LockedDownload(name="dlwheel", url="http://127.0.0.1:1/dl/dlwheel-1.0-py3-none-any.whl",
                                           sha256=WHEEL, computed=True)}
    wheels = download_wheels(m, v, downloads)
    assert wheels == {"dlwheel": (f"dlwheel @ http://127.0.0.1:1/dl/dlwheel-1.0-py3-none-any.whl#sha256={WHEEL}",
                                  WHEEL)}
    installs = [PipInstall(name="dlwheel", version="1.0", url="http://127.0.0.1:1/dl/dlwheel-1.0-py3-none-any.whl"),
                PipInstall(name="sdistonly", version="1.0", url="http://127.0.0.1:1/files/sdistonly-1.0.tar.gz"),
                PipInstall(name="six", version="1.16.0", url="https://x/six-1.16.0-py2.py3-none-any.whl")]
    locked = pip_pins(m.pip.requirements, installs, {}, (), Index(), where="base",
                      downloads={n: sha for n, (_, sha) in wheels.items()})
    assert locked == (
        LockedPip(name="dlwheel", version="1.0", hashes=(f"sha256:{WHEEL}",)),
        LockedPip(name="sdistonly", version="1.0", hashes=(SDIST,), sdist=True),
        LockedPip(name="six", version="1.16.0", hashes=("sha256:" + "c" * 64,)),
    )
    vl = VariantLock(base=LockedBase(ref="reg/base:1", digest="sha256:" + "d" * 64, platform="linux/amd64"),
                     downloads=downloads, pip=locked)
    js = vl.to_json()
    assert [("sdist" in p) for p in js["pip"]] == [False, True, False]  # written only when true
    assert VariantLock.from_json(js) == vl

    # the python node installs the download by name, version and the download's hash, served from the host
    g = graph.build(m, vl, v, templates={k: "t" for k in specs.BUILT_KINDS})
    py = g.node("python").spec
    assert isinstance(py, specs.PythonNodeSpec)
    by_name = {p.name: p for p in py.pins}
    assert by_name["dlwheel"].download == "dlwheel" and by_name["dlwheel"].hashes == (f"sha256:{WHEEL}",)
    assert by_name["dlwheel"].filename == "dlwheel-1.0-py3-none-any.whl"
    assert by_name["sdistonly"].sdist and not g.node("python").unlocked
    system = g.node("system").spec
    assert isinstance(system, specs.SystemNodeSpec) and system.files == ()  # not placed as a file

    # the sdist's line takes the hash of the wheel the host built from it; before that, a placeholder
    t = render.load_templates(ROOT / "images")
    before = render.render(g.node("python"), templates=t, parent_ref="p").dockerfile
    assert f"'sdistonly==1.0 --hash=sha256:<wheel built from the sdist {SDIST}>'" in before
    after = render.render(g.node("python"), templates=t, parent_ref="p", built={"sdistonly==1.0": "e" * 64}).dockerfile
    assert f"'sdistonly==1.0 --hash=sha256:{'e' * 64}'" in after
    assert f"'dlwheel==1.0 --hash=sha256:{WHEEL}'" in after and "--require-hashes" in after


def test_install_pip_needs_a_wheel_url_and_no_dest() -> None:
    bad = MANIFEST.replace("dlwheel-1.0-py3-none-any.whl", "dlwheel.tar.gz").replace(
        "    install: pip\n", "    install: pip\n    dest: /tmp/x.whl\n")
    try:
        pins.load_text(bad, "<s>")
    except ManifestErrors as exc:
        text = str(exc)
    else:
        raise AssertionError("loaded")
    assert "install: pip takes no dest" in text and "does not end in a wheel file name" in text
