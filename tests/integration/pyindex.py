"""Tiny wheels and a PEP 503 simple index served from a folder on 127.0.0.1 (test support).

Used by the integration and engine tests of `buildctl lock` (`from tests.integration import pyindex`).
Everything is made by the test: no real package, no network beyond 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import http.server
import re
import threading
import zipfile
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from bench.socketset import SocketSet

FIXED_DATE = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, *, requires: Sequence[str] = (),
               tag: str = "py3-none-any") -> Path:
    """A minimal, valid wheel (same bytes every time) with one module and Requires-Dist lines."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + \
        "".join(f"Requires-Dist: {r}\n" for r in requires)
    py, abi, plat = tag.split("-")
    files = {
        f"{dist.lower()}_mod/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{info}/METADATA": meta.encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: buildctl-tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{py}-{abi}-{plat}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in files.items():
            zf.writestr(zipfile.ZipInfo(p, date_time=FIXED_DATE), d)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_index(root: Path, files: Sequence[Path], *, with_hashes: bool = True) -> Path:
    """root/simple/<project>/index.html (PEP 503) linking to root/files/<file>; returns root."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = {}
    for f in files:
        target = root / "files" / f.name
        target.write_bytes(f.read_bytes())
        project = re.sub(r"[-_.]+", "-", f.name.split("-")[0]).lower()
        projects.setdefault(project, []).append(target)
    (root / "simple").mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
    (root / "simple" / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    for project, paths in projects.items():
        anchors = "".join(
            f'<a href="../../files/{html.escape(p.name)}'
            + (f"#sha256={sha256(p)}" if with_hashes else "") + f'">{html.escape(p.name)}</a>\n'
            for p in sorted(paths))
        d = root / "simple" / project
        d.mkdir(exist_ok=True)
        (d / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n")
    return root


class ClosingHTTPServer(http.server.ThreadingHTTPServer):
    """The tests' HTTP server on 127.0.0.1: server_close() cuts the connections still open (a client that
    went silent included) and waits for every request thread, so no socket outlives the server."""

    daemon_threads = False
    block_on_close = True
    connection_timeout = 10.0  # a silent client is given up on even while the server runs

    def server_activate(self) -> None:
        self.connections = SocketSet()
        super().server_activate()

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.settimeout(self.connection_timeout)
        self.connections.add(sock)
        return sock, addr

    def server_close(self) -> None:
        self.connections.close()
        super().server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port); yield the base URL."""
    server = ClosingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers (a stuck proxy)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
