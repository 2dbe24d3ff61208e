"""The pure parts of buildctl.engine.engine: refs, the files tar, inspect data -> ImageInfo, messages."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import tarfile

import pytest

from buildctl.engine.engine import _tar
from buildctl.engine.images import _image_info
from buildctl.engine.transfer import _progress, _registry_fix
from buildctl.engine.values import HistoryEntry, TransferProgress, registry_host, split_ref


@pytest.mark.parametrize(
    ("ref", "repo", "tag", "host"),
    [
        ("127.0.0.1:5000/buildctl/demo-base:bookworm", "127.0.0.1:5000/buildctl/demo-base", "bookworm", "127.0.0.1:5000"),
        ("127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b", "latest", "127.0.0.1:5000"),
        ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io/nvidia/pytorch", "25.09-py3", "nvcr.io"),
        ("ubuntu:24.04", "ubuntu", "24.04", "docker.io"),
        ("r.example/x@sha256:" + "a" * 64, "r.example/x", "sha256:" + "a" * 64, "r.example"),
    ],
)
def test_split_ref_and_registry_host(ref: str, repo: str, tag: str, host: str) -> None:
    assert split_ref(ref) == (repo, tag)
    assert registry_host(ref) == host


def test_files_tar_is_rooted_and_keeps_scripts_executable() -> None:
    data = _tar({"/opt/smoke/run.py": b"#!/usr/bin/env python3\nprint(1)\n", "/etc/x.json": b"{}"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = {m.name: m for m in tf.getmembers()}
        assert sorted(members) == ["etc/x.json", "opt/smoke/run.py"]
        assert members["opt/smoke/run.py"].mode == 0o755
        assert members["etc/x.json"].mode == 0o644
        assert members["etc/x.json"].uid == 0
        f = tf.extractfile("etc/x.json")
        assert f is not None and f.read() == b"{}"


def test_files_tar_rejects_relative_paths() -> None:
    with pytest.raises(ValueError, match="absolute"):
        _tar({"relative.txt": b""})


def test_image_info_from_inspect_data() -> None:
    attrs = {
        "Id": "sha256:" + "1" * 64,
        "RepoTags": ["a:1", "b:2"],
        "RepoDigests": None,
        "Created": "2026-01-01T00:00:00Z",
        "Os": "linux",
        "Architecture": "arm64",
        "Variant": "v8",
        "Config": {
            "Env": ["PATH=/usr/bin", "EMPTY=", "EQ=a=b"],
            "Labels": {"org.opencontainers.image.revision": "abc"},
            "Entrypoint": ["bindpcie", "python"],
            "Cmd": None,
        },
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + "2" * 64, "sha256:" + "3" * 64]},
    }
    history = [
        {"Created": 5, "CreatedBy": "/bin/sh -c #(nop) LABEL x=y", "Size": 0, "Comment": "", "Tags": ["a:1"]},
        {"Created": 4, "CreatedBy": "", "Size": 100, "Comment": "Imported from -", "Tags": None},
    ]
    info = _image_info(attrs, history)
    assert info.id == "sha256:" + "1" * 64
    assert info.repo_tags == ("a:1", "b:2") and info.repo_digests == ()
    assert dict(info.env) == {"PATH": "/usr/bin", "EMPTY": "", "EQ": "a=b"}
    assert dict(info.labels) == {"org.opencontainers.image.revision": "abc"}
    assert info.entrypoint == ("bindpcie", "python") and info.cmd is None
    assert info.platform == "linux/arm64/v8"
    assert info.layers == ("sha256:" + "2" * 64, "sha256:" + "3" * 64)
    assert info.history == (
        HistoryEntry(created=5, created_by="/bin/sh -c #(nop) LABEL x=y", size=0, tags=("a:1",)),
        HistoryEntry(created=4, created_by="", size=100, comment="Imported from -"),
    )


def test_progress_events() -> None:
    p = _progress({"status": "Pushing", "id": "08383dd7d7fd", "progressDetail": {"current": 5, "total": 10}})
    assert p == TransferProgress(status="Pushing", layer="08383dd7d7fd", current=5, total=10)
    assert str(p) == "08383dd7d7fd: Pushing 5/10"
    assert str(_progress({"status": "Layer already exists", "id": "abc", "progressDetail": {}})) == (
        "abc: Layer already exists"
    )
    assert str(_progress({"status": "The push refers to repository [x]"})) == "The push refers to repository [x]"


def test_registry_fix_says_what_to_do() -> None:
    assert "docker login nvcr.io" in _registry_fix("nvcr.io", "unauthorized: authentication required")
    assert "mirror" in _registry_fix("nvcr.io", "dial tcp: lookup nvcr.io: no such host")
    assert "start the registry at 127.0.0.1:5000" in _registry_fix("127.0.0.1:5000", "connection refused")
    assert "tag" in _registry_fix("127.0.0.1:5000", "An image does not exist locally with the tag: x")


def test_unit_tests_cannot_start_processes_or_connect() -> None:
    # The autouse guard in tests/unit/conftest.py: this test fails if the guard stops working.
    with pytest.raises(AssertionError, match="unit tests may not start a process"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="unit tests may not start a process"):
        os.system("true")
    with pytest.raises(AssertionError, match="unit tests may not open a network connection"):
        socket.create_connection(("127.0.0.1", 9))
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(AssertionError, match="network connection"):
        s.connect("/var/run/docker.sock")
