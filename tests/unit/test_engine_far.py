"""An engine on another host (tcp://, ssh://) gets copies, not bind mounts: Engine.far, _copy_in and _copy_out with a
fake API (the real round trip: tests/engine/test_far_builder.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from buildctl.engine.engine import Engine
from buildctl.engine.values import Mount


@pytest.mark.parametrize(("address", "far"), [
    ("tcp://10.231.7.2:2375", True), ("ssh://ci@gpu-2", True), ("tcp://127.0.0.1:2375", True),
    ("unix:///var/run/docker.sock", False), ("unix:///tmp/buildctl-e2-x/docker.sock", False),
])
def test_an_engine_reached_over_the_network_is_on_another_host(address: str, far: bool) -> None:
    assert Engine(address).far is far


class FakeApi:
    def __init__(self, archive: bytes = b"", info: dict[str, Any] | None = None) -> None:
        self.archive = archive
        self.put: list[tuple[str, str, bytes]] = []
        self._info = info or {}

    def info(self) -> dict[str, Any]:
        return self._info

    def put_archive(self, cid: str, path: str, data: Any) -> None:
        self.put.append((cid, path, data.read()))

    def get_archive(self, cid: str, path: str) -> tuple[Any, dict[str, Any]]:
        return iter([self.archive[:100], self.archive[100:]]), {}


def _engine(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> Engine:
    e = Engine("tcp://10.231.7.2:2375")
    monkeypatch.setattr(e, "_api", lambda timeout=None: api)
    return e


def test_a_folder_is_copied_in_under_its_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "tree"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "setup.py").write_text("x")
    (src / "link").symlink_to("pkg/setup.py")
    api = FakeApi()
    _engine(api, monkeypatch)._copy_in("c1", Mount(source=src, target="/src", read_only=True))
    [(cid, path, data)] = api.put
    assert (cid, path) == ("c1", "/")
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = {m.name: m for m in tf.getmembers()}
    assert sorted(members) == ["src", "src/link", "src/pkg", "src/pkg/setup.py"]
    assert members["src/link"].issym() and members["src/link"].linkname == "pkg/setup.py"  # a link stays a link


def _archive(entries: list[tuple[str, bytes | None, str]]) -> bytes:
    """A tar as the engine's archive API gives a folder: (name, content or None for a folder, link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, content, link in entries:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tf.addfile(info)
            elif content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(content), 0o600
                tf.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def test_only_folders_and_plain_files_come_back_and_only_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    outside = tmp_path / "outside"
    api = FakeApi(_archive([
        ("out", None, ""), ("out/fastmath-0.2-cp311-linux_x86_64.whl", b"wheel", ""), ("out/sub", None, ""),
        ("out/sub/stats.json", b"{}", ""),
        ("out/../outside", b"escape", ""), ("other/x", b"not the folder asked for", ""),
        ("out/link", None, str(outside)), ("out/sub/../../outside", b"escape", ""),
    ]))
    _engine(api, monkeypatch)._copy_out("c1", Mount(source=dest, target="/out", read_only=False))
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert got == ["fastmath-0.2-cp311-linux_x86_64.whl", "sub", "sub/stats.json"]
    assert (dest / "fastmath-0.2-cp311-linux_x86_64.whl").read_bytes() == b"wheel"
    assert (dest / "sub" / "stats.json").stat().st_mode & 0o777 == 0o644
    assert not outside.exists()


def test_a_far_compile_is_sized_by_what_its_engine_says_of_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from buildctl.errors import EngineError

    assert _engine(FakeApi(info={"NCPU": 64, "MemTotal": 512 << 30}), monkeypatch).capacity() == (64, 512.0)
    for bad in ({}, {"NCPU": 0, "MemTotal": 1 << 30}, {"NCPU": "64", "MemTotal": 1 << 30},
                {"NCPU": True, "MemTotal": 1 << 30}, {"NCPU": 8, "MemTotal": -1}):
        with pytest.raises(EngineError, match="did not say how many CPUs"):
            _engine(FakeApi(info=bad), monkeypatch).capacity()
