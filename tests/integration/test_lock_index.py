"""Package index and downloads as the lock sees them from the host, against a local index on 127.0.0.1."""

from __future__ import annotations

import io
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from debian.debian_support import Version as DebianVersion

from buildctl.errors import LockError, UnreachableError
from buildctl.lock.resolve import resolve_downloads
from buildctl.manifest import pins
from buildctl.sources.index import HttpFetcher, SimpleIndex
from tests.integration.pyindex import make_index, make_wheel, serve, sha256, silent_server

TAGS = ["cp311-cp311-manylinux_2_36_x86_64", "cp311-cp311-manylinux_2_17_x86_64", "cp311-abi3-linux_x86_64",
        "py3-none-any"]


def sdist(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        data = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        info = tarfile.TarInfo(f"{name}-{version}/PKG-INFO")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def wheels(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "dist"
    return {
        "a10": make_wheel(d, "demo-a", "1.0", requires=["demo-b>=1.0"]),
        "b10": make_wheel(d, "demo-b", "1.0"),
        "b11": make_wheel(d, "demo-b", "1.1"),
        "b11-cp311": make_wheel(d, "demo-b", "1.1", tag="cp311-cp311-manylinux_2_17_x86_64"),
        "b11-cp312": make_wheel(d, "demo-b", "1.1", tag="cp312-cp312-manylinux_2_17_x86_64"),
        "b11-arm": make_wheel(d, "demo-b", "1.1", tag="cp311-cp311-manylinux_2_17_aarch64"),
        "b11-sdist": sdist(d, "demo_b", "1.1"),
        "c20-sdist": sdist(d, "demo_c", "2.0"),
    }


def test_hashes_of_the_files_that_fit_the_platform(tmp_path: Path, wheels: dict[str, Path]) -> None:
    root = make_index(tmp_path / "index", list(wheels.values()))
    with serve(root) as url:
        index = SimpleIndex([f"{url}/simple"], HttpFetcher(timeout=5))
        got = index.file_hashes("Demo_B", "1.1", TAGS)
        assert got == tuple(sorted(f"sha256:{sha256(wheels[k])}" for k in ("b11", "b11-cp311")))
        # an sdist-only release: the sdist is what pip would build and install
        assert index.file_hashes("demo-c", "2.0", TAGS) == (f"sha256:{sha256(wheels['c20-sdist'])}",)
        # a project the index does not have: no files (the caller reports it)
        assert index.file_hashes("not-there", "1.0", TAGS) == ()


def test_hashes_are_computed_when_the_index_gives_none(tmp_path: Path, wheels: dict[str, Path]) -> None:
    root = make_index(tmp_path / "index", [wheels["a10"]], with_hashes=False)
    with serve(root) as url:
        index = SimpleIndex([f"{url}/simple/"], HttpFetcher(timeout=5))
        assert index.file_hashes("demo-a", "1.0", TAGS) == (f"sha256:{sha256(wheels['a10'])}",)


def test_extra_index_is_consulted_too(tmp_path: Path, wheels: dict[str, Path]) -> None:
    first = make_index(tmp_path / "one", [wheels["a10"]])
    second = make_index(tmp_path / "two", [wheels["b10"]])
    with serve(first) as u1, serve(second) as u2:
        index = SimpleIndex([f"{u1}/simple", f"{u2}/simple"], HttpFetcher(timeout=5))
        assert index.file_hashes("demo-b", "1.0", TAGS) == (f"sha256:{sha256(wheels['b10'])}",)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_unreachable_index_fails_fast_naming_the_host() -> None:
    port = closed_port()
    index = SimpleIndex([f"http://127.0.0.1:{port}/simple"], HttpFetcher(timeout=5))
    with pytest.raises(UnreachableError, match=rf"cannot reach 127.0.0.1:{port}") as exc:
        index.file_hashes("demo-a", "1.0", TAGS)
    assert "refused" in str(exc.value)


def test_a_server_that_never_answers_is_bounded_by_the_timeout() -> None:
    with silent_server() as url:
        fetcher = HttpFetcher(timeout=0.5)
        start = time.monotonic()
        with pytest.raises(UnreachableError, match=r"timeout 0.5 s"):
            fetcher.sha256(f"{url}/file")
        # bounded: well under any hang, measured loosely so that a loaded machine does not fail it
        assert time.monotonic() - start < 30


def test_download_sha256_compute_and_keyring_check(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    tool = tmp_path / "srv" / "tool"
    tool.write_bytes(b"#!/bin/sh\necho tool\n")
    key = tmp_path / "srv" / "key.gpg"
    key.write_bytes(b"not really a key")
    with serve(tmp_path / "srv") as url:
        text = f"""\
schema: 1
stack: demo
base: {{alias: demo-base}}
variants:
  default: {{image: "127.0.0.1:5000/x:1", platform: linux/amd64, cuda: "13", python: "3.11"}}
apt:
  repos:
    extra:
      lines: {{any: "deb [signed-by=/usr/share/keyrings/extra.gpg] http://127.0.0.1/ stable main"}}
      keyring: key
downloads:
  tool:
    dest: /usr/local/bin/tool
    urls:
      linux/amd64: {{url: "{url}/tool", sha256: compute}}
      linux/arm64: {{url: "{url}/tool-arm64", sha256: compute}}
  key:
    dest: /usr/share/keyrings/extra.gpg
    urls:
      any: {{url: "{url}/key.gpg", sha256: {sha256(key)}}}
"""
        m = pins.load_text(text, "demo.yaml")
        fetch = HttpFetcher(timeout=5)
        locked, keyrings = resolve_downloads(m, m.variant(None), fetch)
        assert locked["tool"].sha256 == sha256(tool) and locked["tool"].computed
        assert locked["tool"].url == f"{url}/tool"  # the variant's platform only
        assert locked["key"].sha256 == sha256(key) and not locked["key"].computed
        assert keyrings == {"key": key.read_bytes()}
        key.write_bytes(b"a different key")
        with pytest.raises(LockError, match=r"download key: .* has sha256 .*, the manifest says"):
            resolve_downloads(m, m.variant(None), fetch)
        tool.unlink()
        with pytest.raises(LockError, match=r"answered HTTP 404"):
            resolve_downloads(m, m.variant(None), fetch)


@pytest.mark.parametrize(("a", "b"), [
    ("1.6-2.1", "1.6-2.1+deb12u1"), ("1.0~rc1", "1.0"), ("1:0.9", "2.0"), ("7.88.1-10+deb12u5", "7.88.1-10+deb12u12"),
    ("1.0a", "1.0+"), ("1.0-0", "1.0"), ("2.36-9+deb12u4", "2.36-9+deb12u10"), ("9.14.0.64-1", "9.13.0.50-1"),
    ("1.2.3~~", "1.2.3~"), ("0.9.9-1ubuntu2", "0.9.9-1"), ("3.0", "3.0.0"), ("1.0.0-1", "1.0.0-1.1"),
])
def test_version_order_agrees_with_dpkg(a: str, b: str) -> None:
    for x, y in ((a, b), (b, a), (a, a)):
        vx, vy = DebianVersion(x), DebianVersion(y)  # the order the lock picks by (python-debian)
        for op, want in (("lt", vx < vy), ("eq", vx == vy), ("gt", vx > vy)):
            rc = subprocess.run(["dpkg", "--compare-versions", x, op, y], check=False).returncode
            assert (rc == 0) == want, f"{x} {op} {y}: dpkg says {rc == 0}, we say {want}"
