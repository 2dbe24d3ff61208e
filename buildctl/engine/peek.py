"""The engine's HTTP API over its unix socket, with the standard library only.

Two users. The no-op path of `buildctl build` needs one answer (is the final image tagged in the engine,
with the labels it was built with; with a registry, is it there too): ``image_labels`` and ``in_registry``
answer only what they are sure of, and raise ``Unsure`` otherwise, so that the caller goes the full way.
The engine client (client.py) asks its short questions (inspect, tag, remove, list, version, and the load of a
small archive) through ``request`` when the engine is a plain local unix socket: docker-py (with requests and
urllib3) costs more to import than a whole no-op or the bookkeeping of a BuildKit build, and is loaded only for
what needs it (streams, containers, the classic builder, other kinds of address). Any other address (tcp://, ssh://,
TLS settings, a docker context) is ``Unsure`` here: docker-py speaks to it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from urllib.parse import quote

DEFAULT_ADDRESS = "unix:///var/run/docker.sock"


class Unsure(Exception):
    """This module cannot answer for sure; the full engine client must be asked."""


class NoAnswer(Unsure):
    """The engine's socket could not be reached, or it did not answer in time (``timed_out``)."""

    def __init__(self, text: str, *, timed_out: bool) -> None:
        super().__init__(text)
        self.timed_out = timed_out


def address(url: str | None, env: Mapping[str, str]) -> str:
    """The engine's address as the full client resolves it: ``url``, else DOCKER_HOST, else the local socket."""
    return url or env.get("DOCKER_HOST") or DEFAULT_ADDRESS


def socket_path(url: str | None, env: Mapping[str, str]) -> str:
    """The unix socket of the engine at ``url`` (DOCKER_HOST's rules); Unsure for any other kind of address."""
    if url is None and any(env.get(k) for k in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")):
        raise Unsure("TLS or context settings in the environment")
    addr = address(url, env)
    if not addr.startswith("unix://"):
        raise Unsure(f"not a unix socket: {addr}")
    return addr.removeprefix("unix://")


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            raise Unsure("truncated chunked answer")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        body = rest[size + 2:]


def get(path: str, url: str, *, timeout: float) -> tuple[int, bytes]:
    """GET ``url`` (an API path) from the engine at the unix socket ``path``: (status, body)."""
    return request(path, "GET", url, timeout=timeout)


def request(path: str, method: str, url: str, *, timeout: float, body: bytes = b"",
            content_type: str = "") -> tuple[int, bytes]:
    """``method`` ``url`` (an API path with its query, already quoted) on the engine at the unix socket ``path``,
    with ``body`` (none by default): (status, body). NoAnswer when the socket cannot be reached or the engine
    does not answer within ``timeout``; Unsure for an answer that is not HTTP."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            kind = f"Content-Type: {content_type}\r\n" if content_type else ""
            s.sendall(f"{method} {url} HTTP/1.1\r\nHost: docker\r\nUser-Agent: buildctl\r\n{kind}"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii") + body)
            chunks = []
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                chunks.append(b)
    except TimeoutError as exc:
        raise NoAnswer(f"engine at {path}: no answer in {timeout:g} s ({exc})", timed_out=True) from None
    except (OSError, UnicodeError) as exc:
        raise NoAnswer(f"engine at {path}: {exc}", timed_out=False) from None
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Unsure(f"engine at {path}: not an HTTP answer")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        try:
            body = _dechunk(body)
        except ValueError:
            raise Unsure(f"engine at {path}: a chunked answer that does not parse") from None
    elif "content-length" in headers:
        n = int(headers["content-length"]) if headers["content-length"].isdigit() else -1
        if n < 0 or len(body) < n:
            raise Unsure(f"engine at {path}: a truncated answer")
        body = body[:n]
    return int(parts[1]), body


def _json(status: int, body: bytes, what: str) -> dict[str, object]:
    try:
        data = json.loads(body)
    except ValueError:
        raise Unsure(f"{what}: the engine's answer ({status}) is not JSON") from None
    if not isinstance(data, dict):
        raise Unsure(f"{what}: unexpected answer")
    return data


def image_labels(path: str, ref: str, *, timeout: float) -> dict[str, str] | None:
    """The labels of the image tagged ``ref`` in the engine (None: no such image)."""
    status, body = get(path, f"/images/{quote(ref, safe='/:@')}/json", timeout=timeout)
    if status == 404:
        return None
    if status != 200:
        raise Unsure(f"inspect {ref}: the engine answered {status}")
    data = _json(status, body, f"inspect {ref}")
    config = data.get("Config")
    labels = config.get("Labels") if isinstance(config, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def in_registry(path: str, ref: str, *, timeout: float) -> bool:
    """Whether the registry has ``ref``, asked through the engine (as Engine.registry_digest does) without
    credentials. True only when it says so; anything else (missing, needs credentials, unreachable): Unsure."""
    status, body = get(path, f"/distribution/{quote(ref, safe='/:@')}/json", timeout=timeout)
    if status != 200:
        raise Unsure(f"looking up {ref}: the engine answered {status}")
    descriptor = _json(status, body, f"looking up {ref}").get("Descriptor")
    if not isinstance(descriptor, dict) or not str(descriptor.get("digest", "")).startswith("sha256:"):
        raise Unsure(f"looking up {ref}: no digest in the answer")
    return True


__all__ = ["DEFAULT_ADDRESS", "NoAnswer", "Unsure", "address", "get", "image_labels", "in_registry", "request",
           "socket_path"]
