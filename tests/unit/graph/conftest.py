"""The test stack (data/graphstack.yaml) and a complete lock for it, shared by the graph, render and
plan unit tests through the ``gs`` fixture (pytest runs with --import-mode=importlib: test modules
cannot import a helper module). Values are shaped like real ones and made up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from buildctl.graph import graph, specs
from buildctl.graph.graph import Extras, Graph
from buildctl.graph.launch_script import EntrypointFragment
from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedDownload, LockedPip, VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest
from tests.helpers import lchanges

DATA = Path(__file__).parent / "data"
TEMPLATES: dict[str, str] = {k: f"t-{k}" for k in specs.BUILT_KINDS}
SCRIPT = "#!/bin/bash\nexec python pretrain.py --bf16 --num-layers 61 \"$@\"\n"
# What launch_script.render_entrypoint_fragment hands the graph, made by hand so that tests stay exact.
ENTRY = EntrypointFragment(script_path="/usr/local/bin/buildctl-launch", context_name="buildctl-launch",
                           script=SCRIPT, script_mode=0o755, workdir="/opt/trainer",
                           entrypoint=("/usr/local/bin/buildctl-launch",), cmd=(),
                           labels={"buildctl.entrypoint.script": "/usr/local/bin/buildctl-launch"})


def load() -> Manifest:
    return pins.load(DATA / "graphstack.yaml")


def lock_for(m: Manifest, variant: str = "gpu13") -> VariantLock:
    """A complete lock for the test stack (values shaped like real ones, made up)."""
    v = m.variant(variant)
    h = lambda c: f"sha256:{c * 64}"  # noqa: E731
    return VariantLock(
        base=LockedBase(ref=v.image, digest=h("a"), platform=v.platform),
        apt={"gdb": "13.1-3", "tmux": "3.4-1", "curl": "8.5.0-2",
             "libcudnn9-cuda-13": "9.14.0.64-1", "libcudnn9-cuda-12": "9.14.0.64-1"},
        build_apt={"kernels": {"libibverbs-dev": "50.0-2"}},
        downloads={"yq": LockedDownload(name="yq", url="https://dl.example/yq_linux_amd64", sha256="3" * 64,
                                        computed=True)},
        pip=(LockedPip(name="black", version="24.4.2", hashes=(h("b"),)),
             LockedPip(name="click", version="8.1.7", hashes=(h("c"),)),
             LockedPip(name="einops", version="0.8.0", hashes=(h("d"),)),
             LockedPip(name="setuptools", version="69.5.1", in_base=True)),
        build_pip={"engine": (LockedPip(name="mathdx", version="25.1.1", hashes=(h("e"),)),)},
        components={
            "engine": LockedComponent(name="engine", repo="https://git.example/org/engine.git",
                                      commit="d2945c6" + "0" * 33, changes=lchanges(prs={"2146": "abf4722" + "0" * 33,
                                                                                         "2150": "7e48668" + "0" * 33}),
                                      tree="e" * 40),
            "kernels": LockedComponent(name="kernels", repo="https://git.example/org/kernels.git",
                                       commit="3f601f7" + "0" * 33, tree="3f601f7" + "0" * 33),
            "trainer": LockedComponent(name="trainer", repo="https://git.example/org/trainer.git",
                                       commit="effebd81f410bc6566fffee6c320b6f8f762e06d",
                                       tree="effebd81f410bc6566fffee6c320b6f8f762e06d"),
        },
        resolved_at="2025-01-01T00:00:00Z",
    )


def make(m: Manifest, lock: VariantLock | None, variant: str = "gpu13", **extras: object) -> Graph:
    return graph.build(m, lock, m.variant(variant), templates=TEMPLATES,
                       extras=Extras(entrypoint=ENTRY, **extras))  # type: ignore[arg-type]


@pytest.fixture
def gs() -> SimpleNamespace:
    return SimpleNamespace(load=load, lock_for=lock_for, make=make, SCRIPT=SCRIPT, ENTRY=ENTRY, TEMPLATES=TEMPLATES, DATA=DATA)
