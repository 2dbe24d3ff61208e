"""builder/compose.py's pure parts: the layer it writes, what it reads of overlay2's folders (made here as the
driver lays them out: a whiteout is a character device 0:0, an opaque folder has trusted.overlay.opaque=y; this
needs root, as the engine tests do), which Dockerfiles it composes, and the config it gives."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from buildctl.builder import compose
from buildctl.builder.steps import label_instruction
from buildctl.engine.values import ImageInfo
from buildctl.graph import render

EPOCH = render.EPOCH


def _tree(root: Path) -> None:
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/launch").write_text("#!/bin/sh\n")
    os.chmod(root / "usr/local/bin/launch", 0o755)
    os.symlink("launch", root / "usr/local/bin/go")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.utime(Path(dirpath) / name, (EPOCH, EPOCH), follow_symlinks=False)


def test_the_layer_is_the_tree_sorted_with_fixed_fields(tmp_path: Path) -> None:
    _tree(tmp_path / "a")
    d1 = compose.write_layer(tmp_path / "a", tmp_path / "1.tar", extra_dirs=["srv/x"], epoch=EPOCH)
    d2 = compose.write_layer(tmp_path / "a", tmp_path / "2.tar", extra_dirs=["srv/x"], epoch=EPOCH)
    assert d1 == d2 == "sha256:" + hashlib.sha256((tmp_path / "1.tar").read_bytes()).hexdigest()
    with tarfile.open(tmp_path / "1.tar") as t:
        got = [(m.name, m.type, m.mode, m.uid, m.gid, m.uname, int(m.mtime), m.linkname) for m in t.getmembers()]
    assert got == [
        ("srv/x", tarfile.DIRTYPE, 0o755, 0, 0, "", EPOCH, ""),
        ("usr", tarfile.DIRTYPE, 0o755, 0, 0, "", EPOCH, ""),
        ("usr/local", tarfile.DIRTYPE, 0o755, 0, 0, "", EPOCH, ""),
        ("usr/local/bin", tarfile.DIRTYPE, 0o755, 0, 0, "", EPOCH, ""),
        ("usr/local/bin/go", tarfile.SYMTYPE, 0o777, 0, 0, "", EPOCH, "launch"),
        ("usr/local/bin/launch", tarfile.REGTYPE, 0o755, 0, 0, "", EPOCH, ""),
    ]


def test_a_fifo_in_the_copy_is_the_builders(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "pipe")
    with pytest.raises(compose.CannotTell):
        compose.write_layer(tmp_path / "a", tmp_path / "1.tar", epoch=EPOCH)


def _layers(tmp_path: Path) -> list[str]:
    """Three overlay2 diff folders, top first: lower has /opt/a/f, /etc/motd and /srv/keep; middle deletes
    /etc/motd (a whiteout) and makes /srv opaque; upper adds /opt/a/g and a symlink /opt/l."""
    upper, middle, lower = (tmp_path / n for n in ("upper", "middle", "lower"))
    for rel in ("opt/a/f", "etc/motd", "srv/keep"):
        (lower / rel).parent.mkdir(parents=True, exist_ok=True)
        (lower / rel).write_text("x")
    (middle / "etc").mkdir(parents=True)
    os.mknod(middle / "etc" / "motd", 0o600 | 0o020000, os.makedev(0, 0))  # overlay2's whiteout
    (middle / "srv").mkdir()
    os.setxattr(middle / "srv", "trusted.overlay.opaque", b"y")
    (upper / "opt" / "a").mkdir(parents=True)
    (upper / "opt" / "a" / "g").write_text("y")
    os.symlink("/opt/a", upper / "opt" / "l")
    return [str(upper), str(middle), str(lower)]


def test_lookup_reads_the_layers_as_overlay_merges_them(tmp_path: Path) -> None:
    dirs = _layers(tmp_path)
    assert compose.lookup(dirs, "opt/a/f") == "file"  # from the lowest layer
    assert compose.lookup(dirs, "opt/a/g") == "file"
    assert compose.lookup(dirs, "opt/a") == "dir"
    assert compose.lookup(dirs, "opt/l") == "link"
    assert compose.lookup(dirs, "opt/l/f") == "other"  # through a symlink: the builder's to resolve
    assert compose.lookup(dirs, "etc/motd") is None  # deleted by the middle layer's whiteout
    assert compose.lookup(dirs, "etc") == "dir"
    assert compose.lookup(dirs, "srv/keep") is None  # hidden by the opaque folder above it
    assert compose.lookup(dirs, "srv") == "dir"
    assert compose.lookup(dirs, "nowhere/at/all") is None


def test_a_copy_onto_a_symlink_or_another_kind_is_refused(tmp_path: Path) -> None:
    dirs = _layers(tmp_path)
    for rel in ("opt/l/x", "opt/a/f/x"):  # a folder where the parent has a symlink; where it has a file
        root = tmp_path / f"copy-{rel.replace('/', '-')}"
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text("z")
        with pytest.raises(compose.CannotTell):
            compose._check_copy(dirs, root)
    fine = tmp_path / "fine"
    (fine / "opt" / "a").mkdir(parents=True)
    (fine / "opt" / "a" / "f").write_text("replaced")
    compose._check_copy(dirs, fine)
    assert compose._missing_dirs(dirs, fine, "/opt/a/new/deeper") == ["opt/a/new", "opt/a/new/deeper"]
    with pytest.raises(compose.CannotTell):
        compose._missing_dirs(dirs, fine, "/opt/l")


ENTRY = compose.Changes(labels={"a": "b"}, workdir="/opt/demo trainer", entrypoint=["/usr/local/bin/buildctl-launch"],
                        cmd=[])


def _entrypoint_dockerfile(**edit: str) -> str:
    templates = render.load_templates(Path(render.__file__).resolve().parents[2] / "images")
    text = templates.text("entrypoint.Dockerfile.in")
    values = {"from": "parent:1", "copy": "COPY rootfs/ /", "workdir": '"/opt/demo trainer"',
              "entrypoint": '["/usr/local/bin/buildctl-launch"]', "cmd": "[]", **edit}
    for k, v in values.items():
        text = text.replace(f"@@{k}@@", v)
    return text


def test_only_a_dockerfile_of_copy_and_metadata_is_composed() -> None:
    assert compose.plain(_entrypoint_dockerfile(), ENTRY, scratch=False)
    assert not compose.plain(_entrypoint_dockerfile(), ENTRY, scratch=True)
    assert not compose.plain(_entrypoint_dockerfile(cmd='["--x"]'), ENTRY, scratch=False)
    assert not compose.plain(_entrypoint_dockerfile(copy="COPY rootfs/ /\nRUN rm -rf /tmp"), ENTRY, scratch=False)
    assert not compose.plain(_entrypoint_dockerfile() + "ENV A=1\n", ENTRY, scratch=False)
    assert compose.plain("# wheel\nFROM scratch\nCOPY rootfs/ /\n", compose.Changes(labels={}), scratch=True)
    assert label_instruction({}) == ""  # the pipeline's LABEL line is appended to the file, not to the text


def test_the_config_is_the_parents_with_the_changes() -> None:
    parent: dict[str, Any] = {"architecture": "arm64", "os": "linux", "variant": "v8", "container": "x", "container_config": {},
                              "config": {"Env": ["PATH=/bin"], "Cmd": ["bash"], "Labels": {"old": "1", "a": "0"}},
                              "rootfs": {"type": "layers", "diff_ids": ["sha256:1"]},
                              "history": [{"created_by": "base"}]}
    c = compose.new_config(parent, platform="ignored", parent_id="sha256:p", diff_id="sha256:2", changes=ENTRY,
                           created="T")
    assert c["rootfs"]["diff_ids"] == ["sha256:1", "sha256:2"] and c["architecture"] == "arm64"
    assert c["config"] == {"Env": ["PATH=/bin"], "Cmd": [], "Entrypoint": ["/usr/local/bin/buildctl-launch"],
                           "WorkingDir": "/opt/demo trainer", "Labels": {"old": "1", "a": "b"}, "Image": "sha256:p"}
    assert "container" not in c and "container_config" not in c
    assert [h.get("empty_layer", False) for h in c["history"]] == [False, False, True, True, True, True]
    assert parent["config"]["Labels"] == {"old": "1", "a": "0"}  # the parent's own dict is left alone
    scratch = compose.new_config(None, platform="linux/arm64/v8", parent_id="", diff_id="sha256:9",
                                 changes=compose.Changes(labels={"a": "b"}), created="T")
    assert (scratch["architecture"], scratch["os"], scratch["variant"]) == ("arm64", "linux", "v8")
    assert scratch["config"] == {"Env": [compose.SCRATCH_PATH], "Labels": {"a": "b"}}
    assert scratch["rootfs"]["diff_ids"] == ["sha256:9"]


def _info(tmp_path: Path, config: bytes, *, layers: tuple[str, ...] = ("sha256:1",)) -> ImageInfo:
    root = tmp_path / "docker"
    diff = root / "overlay2" / "abc" / "diff"
    diff.mkdir(parents=True)
    hexid = hashlib.sha256(config).hexdigest()
    store = root / "image" / "overlay2" / "imagedb" / "content" / "sha256"
    store.mkdir(parents=True)
    (store / hexid).write_bytes(config)
    return ImageInfo(id="sha256:" + hexid, repo_tags=(), repo_digests=(), labels={}, env={}, entrypoint=None, cmd=None,
                     platform="linux/amd64", created="", layers=layers, storage_driver="overlay2",
                     layer_dirs=(str(diff),))


def test_the_parents_config_is_read_only_where_it_checks_out(tmp_path: Path) -> None:
    good = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:1"]}}).encode()
    assert compose.parent_config(_info(tmp_path / "1", good))["rootfs"]["diff_ids"] == ["sha256:1"]
    with pytest.raises(compose.CannotTell, match="layers are not the image's"):
        compose.parent_config(_info(tmp_path / "2", good, layers=("sha256:other",)))
    info = _info(tmp_path / "3", good)
    store = Path(info.layer_dirs[0]).parents[2] / "image" / "overlay2" / "imagedb" / "content" / "sha256"
    (store / info.id.split(":")[1]).write_bytes(good + b" ")  # not what the id names
    with pytest.raises(compose.CannotTell, match="does not hash"):
        compose.parent_config(info)
