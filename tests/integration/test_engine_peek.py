"""engine/peek.py, the no-op build's one question, against an HTTP server on a unix socket (a local process
stands in for the engine's API here; tests/engine/noopcheck.py asks the real engine)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildctl.engine import peek


class Server:
    """Answers each connection with the next canned answer; keeps the request lines it got."""

    def __init__(self, path: Path, answers: list[bytes]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.answers = answers
        self.requests: list[str] = []
        self.bodies: list[bytes] = []  # each request's body (by its Content-Length) and headers, lower-cased
        self.headers: list[dict[str, str]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for answer in self.answers:
            conn, _ = self.sock.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                while len(body) < int(headers.get("content-length", "0")):
                    body += conn.recv(65536)
                self.requests.append(lines[0])
                self.bodies.append(body)
                self.headers.append(headers)
                conn.sendall(answer)

    def close(self) -> None:
        self.thread.join(timeout=5)
        self.sock.close()


def _http(status: str, body: bytes, *, chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
        return f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + parts + b"0\r\n\r\n"
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[Path, list[Server]]]:
    servers: list[Server] = []
    yield tmp_path / "engine.sock", servers
    for s in servers:
        s.close()


IMAGE = json.dumps({"Id": "sha256:ab", "Config": {"Labels": {"io.buildctl.key": "k1"}}}).encode()


def test_labels_of_an_image_plain_and_chunked_and_a_missing_one(serve: tuple[Path, list[Server]]) -> None:
    path, servers = serve
    s = Server(path, [_http("200 OK", IMAGE), _http("200 OK", IMAGE, chunked=True), _http("404 Not Found", b"{}")])
    servers.append(s)
    ref = "127.0.0.1:5000/buildctl-test/x/entrypoint:k1"
    assert peek.image_labels(str(path), ref, timeout=5) == {"io.buildctl.key": "k1"}
    assert peek.image_labels(str(path), ref, timeout=5) == {"io.buildctl.key": "k1"}
    assert peek.image_labels(str(path), "a b", timeout=5) is None
    s.close()
    assert s.requests == [f"GET /images/{ref}/json HTTP/1.1", f"GET /images/{ref}/json HTTP/1.1",
                          "GET /images/a%20b/json HTTP/1.1"]


def test_what_it_cannot_be_sure_of_raises_unsure(serve: tuple[Path, list[Server]], tmp_path: Path) -> None:
    path, servers = serve
    digest = json.dumps({"Descriptor": {"digest": "sha256:" + "0" * 64}}).encode()
    servers.append(Server(path, [_http("500 Internal Server Error", b"{}"), b"SSH-2.0-x\r\n\r\n",
                                 _http("200 OK", b"not json"), _http("200 OK", IMAGE)[:-3],
                                 _http("200 OK", digest), _http("401 Unauthorized", b"{}")]))
    for _ in range(4):  # an error answer, not HTTP, not JSON, truncated
        with pytest.raises(peek.Unsure):
            peek.image_labels(str(path), "x:1", timeout=5)
    assert peek.in_registry(str(path), "r:5000/x:1", timeout=5) is True
    with pytest.raises(peek.Unsure):  # a registry that wants credentials: the full client asks with them
        peek.in_registry(str(path), "r:5000/x:1", timeout=5)
    with pytest.raises(peek.Unsure):
        peek.image_labels(str(tmp_path / "no-engine.sock"), "x:1", timeout=5)


def test_only_a_unix_socket_without_tls_settings_is_asked() -> None:
    assert peek.socket_path(None, {}) == "/var/run/docker.sock"
    assert peek.socket_path(None, {"DOCKER_HOST": "unix:///run/d.sock"}) == "/run/d.sock"
    assert peek.socket_path("unix:///x.sock", {"DOCKER_HOST": "tcp://h:2375"}) == "/x.sock"
    for url, env in ((None, {"DOCKER_HOST": "tcp://h:2375"}), ("ssh://h", {}),
                     (None, {"DOCKER_TLS_VERIFY": "1"}), (None, {"DOCKER_CERT_PATH": "/c"})):
        with pytest.raises(peek.Unsure):
            peek.socket_path(url, env)
