"""Test tools for push/verify engine tests: a registry of our own (optionally behind htpasswd auth),
and a TCP relay that can cut a connection at a chosen byte of a chosen request, deterministically.

The relay sits between the engine and a registry on 127.0.0.1. It forwards bytes both ways, records
the HTTP request lines it sees going to the registry (so a test can count blob uploads), and, when a
cut rule is armed, closes both sides once ``offset`` bytes of the first request matching ``pattern``
have passed. ``times`` limits how many connections are cut (None: every one).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.socketset import SocketSet

_REQUEST_LINE = re.compile(rb"(GET|HEAD|POST|PUT|PATCH|DELETE) (/v2/\S*) HTTP/1\.[01]\r\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RegistryProcess:
    """Debian's docker-registry on 127.0.0.1:<free port>, storage in a temporary folder."""

    def __init__(self, *, htpasswd: Path | None = None) -> None:
        exe = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        self.dir = Path(tempfile.mkdtemp(prefix="bc-ship-reg-"))
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        auth = ""
        if htpasswd is not None:
            auth = f"auth:\n  htpasswd:\n    realm: buildctl-test\n    path: {htpasswd}\n"
        (self.dir / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: info\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.dir / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.addr}\n  secret: buildctl-test\n{auth}")
        self.log = self.dir / "registry.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([exe, "serve", str(self.dir / "config.yml")], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"docker-registry did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.addr}/v2/", timeout=1):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # up, and asking for credentials
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def manifest_digest(addr: str, repository: str, tag: str, auth: tuple[str, str] | None = None) -> str | None:
    """The registry's own answer, over plain HTTP, without the engine: Docker-Content-Digest of a tag."""
    req = urllib.request.Request(f"http://{addr}/v2/{repository}/manifests/{tag}", method="HEAD", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                  "application/vnd.oci.image.manifest.v1+json"})
    if auth is not None:
        import base64

        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            digest: str | None = r.headers.get("Docker-Content-Digest")
            return digest
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@dataclass
class CutRule:
    pattern: bytes  # a regular expression over the client->registry bytes
    offset: int  # bytes of the matching request (from its first byte) let through before the cut
    times: int | None = 1  # connections to cut; None: every one
    # instead of a cut: this whole HTTP answer (b"HTTP/1.1 503 ...") is given to the matching request, which never
    # reaches the registry, and the connection is closed; b"" closes it with a reset (no answer at all)
    answer: bytes | None = None
    delay: float = 0.0  # instead of a cut: the matching request is held this long, then relayed (a slow answer)


def http_answer(status: int, reason: str, headers: dict[str, str] | None = None) -> bytes:
    """A complete HTTP answer with an empty body, for CutRule.answer."""
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Length: 0", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Relay:
    """127.0.0.1:<port> -> upstream, with request recording and an optional cut rule."""

    upstream: str
    rule: CutRule | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    cuts: int = 0

    def __post_init__(self) -> None:
        self._socks = SocketSet()  # every socket of the relay, closed by close()
        self._server = socket.socket()
        self._socks.add(self._server)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.addr = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while not self._closing:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._socks.add(client):
                return
            host, port = self.upstream.rsplit(":", 1)
            try:
                server = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                client.close()
                continue
            if not self._socks.add(server):
                return
            server.settimeout(None)
            for target in (self._client_to_server, self._server_to_client):
                t = threading.Thread(target=target, args=(client, server), daemon=True)
                t.start()
                self._threads.append(t)

    def _armed(self) -> CutRule | None:
        with self._lock:
            rule = self.rule
            if rule is None or (rule.times is not None and self.cuts >= rule.times):
                return None
            return rule

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        window = b""  # the tail of what came before, so a request line split across reads is still seen
        seen_upto = 0  # absolute offset up to which request lines were recorded
        total = 0
        match_at: int | None = None  # absolute offset where the cut request began
        try:
            while True:
                chunk = client.recv(65536)
                if not chunk:
                    break
                start = total - len(window)
                window += chunk
                for m in _REQUEST_LINE.finditer(window):
                    if start + m.end() > seen_upto:
                        with self._lock:
                            self.requests.append((m.group(1).decode(), m.group(2).decode()))
                        seen_upto = start + m.end()
                rule = self._armed()
                if rule is not None and match_at is None:
                    found = re.search(rule.pattern, window)
                    if found is not None:
                        match_at = start + found.start()
                before = total
                total += len(chunk)
                if rule is not None and match_at is not None and rule.delay:
                    with self._lock:
                        self.cuts += 1
                    match_at = None
                    time.sleep(rule.delay)
                    window = b""  # the held request is not matched again
                elif rule is not None and match_at is not None and rule.answer is not None:
                    keep = match_at - before
                    if keep > 0:
                        server.sendall(chunk[:keep])
                    with self._lock:
                        self.cuts += 1
                    if rule.answer:
                        client.sendall(rule.answer)
                    else:  # a reset: no answer, RST instead of FIN
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
                elif rule is not None and match_at is not None and total >= match_at + rule.offset:
                    keep = match_at + rule.offset - (total - len(chunk))
                    if keep > 0:
                        server.sendall(chunk[:keep])
                    with self._lock:
                        self.cuts += 1
                    break
                server.sendall(chunk)
                window = window[-512:]
        except OSError:
            pass
        finally:
            _close(client, server)

    def _server_to_client(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                chunk = server.recv(65536)
                if not chunk:
                    break
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(client, server)

    def count(self, method: str, path_pattern: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and re.search(path_pattern, p))

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    def close(self) -> None:
        """Close every socket of the relay (open connections are cut) and wait for its threads."""
        self._closing = True
        self._socks.close()
        self._accept.join(timeout=5)
        for t in self._threads:
            t.join(timeout=5)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


DEMO_BASE_REF = "127.0.0.1:5000/buildctl/demo-base:bookworm"  # what pins/demo.yaml names


def demo_project(tmp_path: Path, project_root: Path, base_ref: str) -> Path:
    """A project holding a copy of pins/demo.yaml whose base points at ``base_ref`` (images/ shared)."""
    root = tmp_path / "project"
    (root / "pins").mkdir(parents=True)
    text = (project_root / "pins" / "demo.yaml").read_text()
    assert DEMO_BASE_REF in text
    (root / "pins" / "demo.yaml").write_text(text.replace(DEMO_BASE_REF, base_ref))
    (root / "images").symlink_to(project_root / "images")
    return root


def htpasswd(folder: Path, user: str, password: str) -> Path:
    """A bcrypt htpasswd file written by apache2-utils' htpasswd (-B), as the registry requires."""
    path = folder / "htpasswd"
    exe = shutil.which("htpasswd") or "/usr/bin/htpasswd"
    done = subprocess.run([exe, "-Bbn", user, password], capture_output=True, text=True, timeout=30, check=True)
    path.write_text(done.stdout)
    return path
