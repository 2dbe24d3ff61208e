"""normalise: whiteouts get a fixed time, nothing else changes; the thin `docker load` archive."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import types
from pathlib import Path
from typing import Any

import pytest

from buildctl.builder import normalise

EPOCH = 315532800


def layer(whiteout_mtime: int, *, atime: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        d = tarfile.TarInfo("etc")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, EPOCH
        tf.addfile(d)
        w = tarfile.TarInfo("etc/.wh.motd")
        w.mtime, w.mode = whiteout_mtime, 0o600
        if atime:
            w.pax_headers = {"atime": atime}
        tf.addfile(w, io.BytesIO(b""))
        f = tarfile.TarInfo("etc/app.conf")
        f.mtime, f.size = 1700000000, 3  # a package's own mtime: left as it is
        tf.addfile(f, io.BytesIO(b"a=1"))
        h = tarfile.TarInfo("etc/app.link")
        h.type, h.linkname, h.mtime = tarfile.LNKTYPE, "etc/app.conf", 1700000000
        tf.addfile(h)
    return buf.getvalue()


def members(data: bytes) -> list[tuple[str, int, dict[str, str]]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return [(m.name, int(m.mtime), dict(m.pax_headers)) for m in tf.getmembers()]


def test_whiteouts_get_the_epoch_and_two_builds_agree() -> None:
    a, b = layer(1000, atime="1000.5"), layer(2000)
    assert a != b
    assert normalise.needs_settling(io.BytesIO(a), epoch=EPOCH) and normalise.needs_settling(io.BytesIO(b), epoch=EPOCH)
    out_a, out_b = io.BytesIO(), io.BytesIO()
    id_a = normalise.normalise_layer(io.BytesIO(a), out_a, epoch=EPOCH)
    id_b = normalise.normalise_layer(io.BytesIO(b), out_b, epoch=EPOCH)
    assert id_a == id_b and out_a.getvalue() == out_b.getvalue()
    assert id_a == "sha256:" + hashlib.sha256(out_a.getvalue()).hexdigest()
    assert [(n, t) for n, t, _ in members(out_a.getvalue())] == [
        ("etc", EPOCH), ("etc/.wh.motd", EPOCH), ("etc/app.conf", 1700000000), ("etc/app.link", 1700000000)]
    assert all("atime" not in pax for _, _, pax in members(out_a.getvalue()))
    with tarfile.open(fileobj=io.BytesIO(out_a.getvalue())) as tf:
        assert tf.getmember("etc/app.link").linkname == "etc/app.conf"
        assert tf.extractfile("etc/app.conf").read() == b"a=1"  # type: ignore[union-attr]
    assert not normalise.needs_settling(io.BytesIO(out_a.getvalue()), epoch=EPOCH)


def test_thin_archive_names_the_parent_layers_without_holding_them(tmp_path: Path) -> None:
    own = tmp_path / "own.tar"
    own.write_bytes(layer(EPOCH))
    config = {"architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:base", "sha256:old-own"]}}
    dest = tmp_path / "thin.tar"
    normalise.thin_archive(dest, config=config, tag="r/system:k", parent_layers=["abc/layer.tar"],
                           own=[("sha256:new-own", own)])
    with tarfile.open(dest) as tf:
        names = tf.getnames()
        manifest = json.loads(tf.extractfile("manifest.json").read())  # type: ignore[union-attr]
        saved = normalise.read_saved(tf)
    assert "abc/layer.tar" not in names and "own-0/layer.tar" in names
    assert manifest[0]["RepoTags"] == ["r/system:k"]
    assert manifest[0]["Layers"] == ["abc/layer.tar", "own-0/layer.tar"]
    assert saved.diff_ids == ("sha256:base", "sha256:new-own") and saved.config["config"] == {"Env": ["A=1"]}


# ------------------------------------------------------------------ overlay2's diff folders (the fast path)
# Folders written here as overlay2 writes a layer: a whiteout is a character device 0:0, an opaque folder
# carries trusted.overlay.opaque=y (user.overlay.opaque in userxattr mode). The real engine's folders are
# read in tests/engine/test_whiteout_fastpath.py.


def _layer(root: Path, name: str, *, whiteout: str = "", opaque: str = "", xattr: str = "trusted") -> str:
    d = root / name
    (d / "usr/lib").mkdir(parents=True)
    (d / "usr/lib/file").write_text("x")
    (d / "usr/lib/link").symlink_to("file")
    if whiteout:
        os.mknod(d / whiteout, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    if opaque:
        (d / opaque).mkdir(parents=True, exist_ok=True)
        os.setxattr(d / opaque, f"{xattr}.overlay.opaque", b"y")
    return str(d)


def test_diff_folders_without_whiteouts_say_no(tmp_path: Path) -> None:
    dirs = [_layer(tmp_path, "top"), _layer(tmp_path, "mid"), _layer(tmp_path, "base")]
    assert normalise.own_layers_have_whiteouts(dirs, 3, 1) is False


@pytest.mark.parametrize("kind", ["whiteout", "opaque", "user-opaque"])
def test_a_whiteout_or_opaque_folder_in_an_own_layer_is_seen(tmp_path: Path, kind: str) -> None:
    extra = ({"whiteout": "usr/lib/gone"} if kind == "whiteout" else
             {"opaque": "etc/apt", "xattr": "user" if kind == "user-opaque" else "trusted"})
    dirs = [_layer(tmp_path, "top"), _layer(tmp_path, "mid", **extra), _layer(tmp_path, "base")]
    assert normalise.own_layers_have_whiteouts(dirs, 3, 1) is True  # mid is the node's second layer
    assert normalise.own_layers_have_whiteouts(dirs, 3, 2) is False  # only top is the node's


def test_a_whiteout_of_the_parent_is_not_the_nodes(tmp_path: Path) -> None:
    dirs = [_layer(tmp_path, "top"), _layer(tmp_path, "base", whiteout="usr/gone")]
    assert normalise.own_layers_have_whiteouts(dirs, 2, 1) is False


def test_what_cannot_be_told_falls_back_to_the_save(tmp_path: Path) -> None:
    dirs = [_layer(tmp_path, "top"), _layer(tmp_path, "base")]
    assert normalise.own_layers_have_whiteouts(dirs, 3, 1) is None  # not one folder per layer
    assert normalise.own_layers_have_whiteouts([str(tmp_path / "absent"), dirs[1]], 2, 1) is None
    assert normalise.own_layers_have_whiteouts(dirs, 2, 3) is None  # more parent layers than layers
    assert normalise.own_layers_have_whiteouts((), 1, 0) is None  # another driver: no folders


class _NoSave:
    address = "unix:///var/run/docker.sock"

    def __init__(self, info: Any) -> None:
        self.info = info

    def inspect_image(self, ref: str) -> Any:
        return self.info

    def save(self, ref: str, dest: Path) -> None:
        raise AssertionError("saved although the diff folders show no whiteout")


def test_settle_skips_the_save_when_overlay2_shows_no_whiteout(tmp_path: Path) -> None:
    dirs = (_layer(tmp_path, "top"), _layer(tmp_path, "base"))
    info = types.SimpleNamespace(storage_driver="overlay2", layer_dirs=dirs, layers=("sha256:a", "sha256:b"))
    assert normalise.settle_whiteouts(_NoSave(info), "x:y", parent_layers=1, scratch=tmp_path, epoch=1) is False  # type: ignore[arg-type]
    info.storage_driver = "vfs"  # another driver: the save way, which this fake refuses
    with pytest.raises(AssertionError, match="saved although"):
        normalise.settle_whiteouts(_NoSave(info), "x:y", parent_layers=1, scratch=tmp_path, epoch=1)  # type: ignore[arg-type]
