"""Nodes composed on the host (builder/compose.py) against the classic builder, on the real engine.

The same copy and metadata, once through the builder (a Dockerfile) and once composed: the config the image
runs with is the same, and the layer holds the same entries with the same modes, owners, times and bytes. A
parent with a symlink where the copy puts a folder is left to the builder (compose says None)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from pathlib import Path
from typing import Any

from buildctl.builder import compose
from buildctl.engine.engine import Engine
from buildctl.graph import render

EPOCH = render.EPOCH
LABELS = {"org.example.a": "b", "org.example.c": "d d"}


def _build(engine: Engine, ctx: Path, text: str, image_cleanup: Any) -> str:
    (ctx / "Dockerfile").write_text(text)
    tag = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels={})
    return tag


def _parent(engine: Engine, base: str, tmp: Path, image_cleanup: Any) -> str:
    ctx = tmp / "parent"
    ctx.mkdir()
    # a whiteout (the deleted docs), a symlink (/opt/link) and a folder the copy writes into (/opt/app)
    return _build(engine, ctx, f"FROM {base}\nRUN mkdir -p /opt/app && echo old > /opt/app/old && "
                              "ln -s /opt/app /opt/link && rm -rf /usr/share/doc/bash\n", image_cleanup)


def _tree(root: Path, extra: dict[str, str] | None = None) -> None:
    files = {"usr/local/bin/launch": "#!/bin/sh\necho launch\n", "opt/app/new": "new\n", **(extra or {})}
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.chmod(p, 0o755 if text.startswith("#!") else 0o644)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in (*dirnames, *filenames):
            os.utime(Path(dirpath) / name, (EPOCH, EPOCH), follow_symlinks=False)
    os.utime(root, (EPOCH, EPOCH))


def _last_layer(engine: Engine, ref: str, tmp: Path) -> dict[str, tuple[Any, ...]]:
    out = tmp / f"{uuid.uuid4().hex[:8]}.tar"
    engine.save(ref, out)
    with tarfile.open(out) as t:
        f = t.extractfile(json.load(t.extractfile("manifest.json"))[0]["Layers"][-1])  # type: ignore[arg-type]
        assert f is not None
        entries = {}
        with tarfile.open(fileobj=io.BytesIO(f.read())) as layer:
            for m in layer.getmembers():
                data = layer.extractfile(m).read() if m.isfile() else b""  # type: ignore[union-attr]
                entries[m.name.rstrip("/")] = (m.type, m.mode & 0o7777, m.uid, m.gid, int(m.mtime), m.linkname, data)
    return entries


def _config(engine: Engine, ref: str) -> dict[str, Any]:
    info = engine.inspect_image(ref)
    return {"env": dict(info.env), "entrypoint": info.entrypoint, "cmd": info.cmd, "workdir": info.workdir,
            "user": info.user, "labels": dict(info.labels), "platform": info.platform, "layers": len(info.layers)}


def _dockerfile(parent: str, workdir: str) -> str:
    labels = " ".join(f'{k}="{v}"' for k, v in LABELS.items())
    return (f"FROM {parent}\nCOPY rootfs/ /\nWORKDIR {workdir}\nENTRYPOINT [\"/usr/local/bin/launch\"]\nCMD []\n"
            f"LABEL {labels}\n")


def _changes(workdir: str) -> compose.Changes:
    return compose.Changes(labels=LABELS, workdir=workdir, entrypoint=["/usr/local/bin/launch"], cmd=[])


def test_composed_entrypoint_is_what_the_builder_gives(engine: Engine, demo_base: str, tmp_path: Path,
                                                       image_cleanup: Any) -> None:
    parent = _parent(engine, demo_base, tmp_path, image_cleanup)
    ctx = tmp_path / "ctx"
    _tree(ctx / "rootfs")
    built = _build(engine, ctx, _dockerfile(parent, "/opt/app"), image_cleanup)
    tag = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    made = compose.compose(engine, parent_ref=parent, platform="linux/amd64", root=ctx / "rootfs",
                           changes=_changes("/opt/app"), tag=tag, scratch=tmp_path, epoch=EPOCH)
    assert made is not None and made == engine.image_id(tag)
    assert _config(engine, tag) == _config(engine, built)
    assert _last_layer(engine, tag, tmp_path) == _last_layer(engine, built, tmp_path)
    # what the image holds below the copy is the parent's: its whiteout still hides the deleted docs
    assert engine.inspect_image(tag).layers[:-1] == engine.inspect_image(parent).layers
    # composed again: the same layer, byte for byte
    again = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(again)
    assert compose.compose(engine, parent_ref=parent, platform="linux/amd64", root=ctx / "rootfs",
                           changes=_changes("/opt/app"), tag=again, scratch=tmp_path, epoch=EPOCH)
    assert engine.inspect_image(again).layers == engine.inspect_image(tag).layers


def test_a_missing_workdir_is_made_with_the_fixed_time(engine: Engine, demo_base: str, tmp_path: Path,
                                                       image_cleanup: Any) -> None:
    parent = _parent(engine, demo_base, tmp_path, image_cleanup)
    ctx = tmp_path / "ctx"
    _tree(ctx / "rootfs")
    tag = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    assert compose.compose(engine, parent_ref=parent, platform="linux/amd64", root=ctx / "rootfs",
                           changes=_changes("/srv/new/deep"), tag=tag, scratch=tmp_path, epoch=EPOCH)
    layer = _last_layer(engine, tag, tmp_path)
    # /srv is the base's own: left as it is; the two folders below it are made, 0755, root, EPOCH
    assert "srv" not in layer
    for rel in ("srv/new", "srv/new/deep"):
        assert layer[rel][:5] == (tarfile.DIRTYPE, 0o755, 0, 0, EPOCH)
    assert engine.inspect_image(tag).workdir == "/srv/new/deep"
    # the builder makes the same folders (with the time of the build) and runs with the same config
    built = _build(engine, ctx, _dockerfile(parent, "/srv/new/deep"), image_cleanup)
    mine, theirs = _config(engine, tag), _config(engine, built)
    assert theirs.pop("layers") == mine.pop("layers") + 1  # the builder's WORKDIR is a layer of its own
    assert mine == theirs


def test_a_symlink_under_the_copy_is_left_to_the_builder(engine: Engine, demo_base: str, tmp_path: Path,
                                                         image_cleanup: Any) -> None:
    parent = _parent(engine, demo_base, tmp_path, image_cleanup)
    root = tmp_path / "rootfs"
    _tree(root, {"opt/link/through": "x\n"})
    tag = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    assert compose.compose(engine, parent_ref=parent, platform="linux/amd64", root=root,
                           changes=_changes("/opt/app"), tag=tag, scratch=tmp_path, epoch=EPOCH) is None
    assert engine.image_id(tag) is None


def test_a_one_file_image_from_scratch(engine: Engine, tmp_path: Path, image_cleanup: Any) -> None:
    root = tmp_path / "rootfs"
    (root / "wheel").mkdir(parents=True)
    (root / "wheel" / "x-1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + bytes(18))
    os.chmod(root / "wheel" / "x-1.0-py3-none-any.whl", 0o644)
    for p in (root / "wheel" / "x-1.0-py3-none-any.whl", root / "wheel", root):
        os.utime(p, (EPOCH, EPOCH))
    ctx = tmp_path
    built = _build(engine, ctx, 'FROM scratch\nCOPY rootfs/ /\nLABEL org.example.a="b" org.example.c="d d"\n',
                   image_cleanup)
    tag = f"buildctl-test-compose:{uuid.uuid4().hex[:12]}"
    image_cleanup(tag)
    platform = engine.inspect_image(built).platform
    assert compose.compose(engine, parent_ref=None, platform=platform, root=root,
                           changes=compose.Changes(labels=LABELS), tag=tag, scratch=tmp_path, epoch=EPOCH)
    assert _config(engine, tag) == _config(engine, built)
    assert _last_layer(engine, tag, tmp_path) == _last_layer(engine, built, tmp_path)
