"""Whiteouts read where overlay2 keeps them (normalise.settle_whiteouts' first step), on the real engine.

A RUN that deletes nothing below it needs no `docker save` (1.6 s for the demo's 190 MB, minutes for a 20 GB
image); one that deletes a file or replaces a folder of its parent is seen in the layer's diff folder and goes
the save -> rewrite -> load way, after which every whiteout has the fixed time."""

from __future__ import annotations

import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from buildctl.builder import normalise
from buildctl.engine.engine import Engine
from buildctl.graph import render


def build(engine: Engine, base: str, run: str, tmp: Path, image_cleanup: Any) -> str:
    ctx = tmp / uuid.uuid4().hex[:8]
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {base}\nRUN {run}\n")
    tag = f"buildctl-test-whiteouts:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels={})
    return tag


def whiteout_times(engine: Engine, ref: str, parent_layers: int, tmp: Path) -> list[int]:
    saved = tmp / f"{uuid.uuid4().hex[:8]}.tar"
    engine.save(ref, saved)
    with tarfile.open(saved) as tar:
        s = normalise.read_saved(tar)
        times = []
        for member in s.layers[parent_layers:]:
            f = tar.extractfile(member)
            assert f is not None
            with tarfile.open(fileobj=f, mode="r|") as layer:
                times += [int(m.mtime) for m in layer if Path(m.name).name.startswith(".wh.")]
    return times


def test_a_run_that_deletes_nothing_is_not_saved(engine: Engine, demo_base: str, tmp_path: Path,
                                                 image_cleanup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = build(engine, demo_base, "mkdir -p /opt/new && echo hi > /opt/new/file && echo more >> /etc/motd",
                tmp_path, image_cleanup)
    info = engine.inspect_image(ref)
    below = len(engine.inspect_image(demo_base).layers)
    assert info.storage_driver == "overlay2" and len(info.layer_dirs) == len(info.layers)
    assert normalise.own_layers_have_whiteouts(info.layer_dirs, len(info.layers), below) is False
    saves: list[str] = []
    monkeypatch.setattr(Engine, "save", lambda self, r, dest: saves.append(r))
    before = engine.image_id(ref)
    assert normalise.settle_whiteouts(engine, ref, parent_layers=below, scratch=tmp_path, epoch=render.EPOCH) is False
    assert saves == [] and engine.image_id(ref) == before


@pytest.mark.parametrize("run", ["rm /etc/motd", "rm -rf /etc/apt && mkdir -p /etc/apt && echo x > /etc/apt/y"],
                         ids=["a deleted file", "a folder replaced (opaque)"])
def test_a_run_that_deletes_below_it_is_seen_and_settled(engine: Engine, demo_base: str, tmp_path: Path,
                                                         image_cleanup: Any, run: str) -> None:
    ref = build(engine, demo_base, run, tmp_path, image_cleanup)
    info = engine.inspect_image(ref)
    below = len(engine.inspect_image(demo_base).layers)
    assert normalise.own_layers_have_whiteouts(info.layer_dirs, len(info.layers), below) is True
    # the base's own layers are not this node's: asked about them alone, there is nothing of this RUN
    assert normalise.own_layers_have_whiteouts(info.layer_dirs, len(info.layers), len(info.layers)) is False
    times = whiteout_times(engine, ref, below, tmp_path)
    assert times and any(t != render.EPOCH for t in times)  # the engine gave them the time of the build
    assert normalise.settle_whiteouts(engine, ref, parent_layers=below, scratch=tmp_path, epoch=render.EPOCH) is True
    assert set(whiteout_times(engine, ref, below, tmp_path)) == {render.EPOCH}
