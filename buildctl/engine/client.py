"""The connection to one Docker engine: bounded clients, cancellable streams, docker-py's errors mapped to ours."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from urllib.parse import quote, urlencode

from buildctl import retrying
from buildctl.engine import lazy, peek
from buildctl.errors import (
    BuildctlError,
    Cancelled,
    EngineError,
)

if TYPE_CHECKING:  # the real modules for the type checker; at run time imported on first use (lazy.py)
    import docker
    import docker.errors
    import docker.types
    import requests.exceptions
    import urllib3.exceptions
else:
    docker = lazy.Module("docker")
    requests = lazy.Module("requests")
    urllib3 = lazy.Module("urllib3")

Backend = Literal["classic", "buildkit"]

_START_ENGINE_FIX = (
    "start an engine (Debian: `apt-get install docker.io && dockerd >/var/log/dockerd.log 2>&1 &`; "
    "`make test` does this for you), or point DOCKER_HOST at a running one "
    "(e.g. DOCKER_HOST=unix:///run/user/1000/docker.sock)"
)


def _explanation(exc: docker.errors.APIError) -> str:
    text = exc.explanation
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text or exc).strip()


class Client:
    """The connection to one Docker engine. ``base_url`` None means docker's own environment (DOCKER_HOST, TLS
    vars). Engine (engine.py) builds on it: Client -> Images -> Transfers -> Engine."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        name: str = "default",
        timeout: float = 60.0,
        network_timeout: float = 10.0,
        stream_timeout: float = 1800.0,
        stall_timeout: float = 60.0,
        attempts: int = 3,
        backend: Backend = "classic",
        docker_cli: Path | None = None,
        cli_memo: Path | None = None,
    ) -> None:
        self.name = name
        # how build() makes an image: the classic builder through docker-py, or the engine's own BuildKit
        # through a docker CLI (buildkit.py); everything else (run, push, pull, inspect) is docker-py either way
        self.backend: Backend = backend
        self.docker_cli = docker_cli
        self.cli_memo = cli_memo  # where the BuildKit backend keeps which docker CLI it found (buildkit.find_cli)
        self._base_url = base_url
        self.timeout = timeout
        self.network_timeout = network_timeout
        self.stream_timeout = stream_timeout
        self.stall_timeout = stall_timeout
        self.attempts = max(1, attempts)
        # transient registry answers during push, pull and look-ups: the one policy of retrying.py
        self.retry = retrying.policy_from_env()
        # where classic builds list the step images they commit (the run's scratch folder, set by the pipeline): a
        # build killed midway leaves them untagged, and a later run removes those of dead runs (remove_intermediates)
        self.intermediates: Path | None = None
        self._clients: dict[float, docker.APIClient] = {}
        self._wire_path: str | None = None  # the socket peek.request asks through ("": docker-py asks; None: not known)
        self._version: str | None = None
        self._platform: str | None = None
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._local = threading.local()
        self._sinks: dict[int, list[Any]] = {}  # id -> HTTP responses of a running stream
        self._containers: set[str] = set()  # containers run() started and has not removed yet
        # the classic builder's step containers ("---> Running in <id>") of builds still streaming: the
        # engine removes them itself once it sees the client gone (forcerm), a moment later; cancel() waits
        self._step_containers: set[str] = set()
        self._procs: set[Any] = set()  # the docker CLI processes of running BuildKit builds (cancel() ends them)

    def __repr__(self) -> str:
        return f"Engine(name={self.name!r}, at={self.address!r}, backend={self.backend!r})"

    @property
    def address(self) -> str:
        if self._base_url:
            return self._base_url
        path = self._wire()
        if path is not None:
            return f"unix://{path}"
        return str(docker.utils.kwargs_from_env().get("base_url") or "unix:///var/run/docker.sock")

    # -- short questions without docker-py (peek.py)

    def _wire(self) -> str | None:
        """The engine's unix socket, when short questions (inspect, tag, remove, list, version, a small load) go
        through peek.request; None when docker-py asks them too (tcp://, ssh://, TLS settings or a docker context)."""
        if self._wire_path is None:
            try:
                self._wire_path = peek.socket_path(self._base_url, os.environ)
            except peek.Unsure:
                self._wire_path = ""
        return self._wire_path or None

    def _call(self, method: str, path: str, what: str, query: Mapping[str, str] | None = None, *,
              timeout: float | None = None, body: bytes = b"", content_type: str = "") -> Answer:
        """One short call on the engine's API through its unix socket (``path`` quoted here, ``query`` encoded
        here), bounded by ``timeout`` (default: the client's); failures to reach the engine raise what the
        docker-py path raises for them (``_errors``)."""
        sock = self._wire()
        assert sock is not None, "_call needs a unix socket (_wire)"
        url = quote(path, safe="/:@") + (f"?{urlencode(dict(query))}" if query else "")
        try:
            status, body = peek.request(sock, method, url, timeout=self.timeout if timeout is None else timeout,
                                        body=body, content_type=content_type)
        except peek.NoAnswer as exc:
            if self._cancelled.is_set():
                raise Cancelled(f"{what}: cancelled", why="the build was interrupted") from exc
            raise (self._timed_out if exc.timed_out else self._no_engine)(what, str(exc)) from exc
        except peek.Unsure as exc:
            raise self._broke_off(what, str(exc)) from exc
        try:
            data = json.loads(body) if body.strip() else None
        except ValueError:
            data = None
        message = str(data.get("message", "")) if isinstance(data, dict) else ""
        return Answer(status=status, data=data,
                      message=message or body.decode("utf-8", "replace").strip() or f"HTTP status {status}", body=body)

    def _json(self, path: str, what: str, shape: type[dict[str, Any]] | type[list[Any]],
              query: Mapping[str, str] | None = None, *, missing: Callable[[str], EngineError] | None = None) -> Any:
        """GET ``path``: its JSON body, of ``shape``. When the engine says 404: ``missing`` (given the engine's
        message) is raised, or None is returned; any other answer is refused."""
        answer = self._call("GET", path, what, query)
        if answer.status == 404:
            if missing is not None:
                raise missing(answer.message)
            return None
        if answer.status != 200 or not isinstance(answer.data, shape):
            raise self._refused(what, answer.message)
        return answer.data

    # the words of an engine failure, the same whichever way the engine was asked (``_call`` or ``_errors``)

    def _timed_out(self, what: str, why: str) -> EngineError:
        return EngineError(f"{what}: engine {self.name!r} at {self.address} did not answer in time", why=why,
                           fix="check that the engine is healthy (`docker info`); " + _START_ENGINE_FIX)

    def _no_engine(self, what: str, why: str) -> EngineError:
        return EngineError(f"{what}: no Docker engine answers at {self.address} ({self.name})", why=why,
                           fix=_START_ENGINE_FIX)

    def _broke_off(self, what: str, why: str) -> EngineError:
        return EngineError(f"{what}: the connection to engine {self.name!r} at {self.address} broke off", why=why,
                           fix="check that the engine is healthy (`docker info`) and run the command again")

    def _refused(self, what: str, why: str, *, fix: str = "") -> EngineError:
        return EngineError(f"{what}: the engine refused", why=why, fix=fix)

    # -- clients

    def _api(self, timeout: float | None = None) -> docker.APIClient:
        """A client whose every request is bounded by ``timeout`` (one per timeout, created lazily).

        docker-py asks the engine for its API version when a client is made, so the first one is made
        on first use; that way an Engine can be constructed with no engine running, and ping() says so.
        """
        t = self.timeout if timeout is None else timeout
        with self._lock:
            client = self._clients.get(t)
            if client is not None:
                return client
            kwargs: dict[str, Any] = (
                {"base_url": self._base_url} if self._base_url else dict(docker.utils.kwargs_from_env())
            )
            if str(kwargs.get("base_url") or "").startswith("ssh://"):
                kwargs["use_ssh_client"] = True  # the ssh binary, as the docker CLI does (no paramiko)
            try:
                if self._version is None:
                    self._check_socket()
                    # A short bound for the version probe: an engine that does not answer it is not usable.
                    probe = docker.APIClient(version="auto", timeout=min(t, self.network_timeout), **kwargs)
                    self._version = str(probe.api_version)
                    probe.close()
                client = docker.APIClient(version=self._version, timeout=t, **kwargs)
            except ValueError as exc:  # urllib's parse of the address: a port past 65535, a bracket that is no IP
                raise EngineError(f"{self.address} is not a Docker engine address ({self.name})", why=str(exc),
                                  fix="give the engine as unix:///PATH, tcp://HOST:PORT or ssh://[USER@]HOST[:PORT] "
                                      "(--engine, or DOCKER_HOST)") from None
            # Streams register their HTTP response (before its body is read) so that cancel() can cut them.
            client.hooks["response"].append(self._capture)
            self._clients[t] = client
            return client

    def _capture(self, response: Any, *args: Any, **kwargs: Any) -> None:
        sink = getattr(self._local, "sink", None)
        if sink is not None:
            sink.append(response)

    @contextmanager
    def _stream(self) -> Iterator[list[Any]]:
        """Track the HTTP responses made inside (by this thread) as one running stream; close them at the end."""
        if self._cancelled.is_set():
            raise Cancelled("the build was interrupted", why="the engine's work was cancelled")
        sink: list[Any] = []
        previous = getattr(self._local, "sink", None)
        self._local.sink = sink
        with self._lock:
            self._sinks[id(sink)] = sink
        try:
            yield sink
        finally:
            self._local.sink = previous
            with self._lock:
                self._sinks.pop(id(sink), None)
            for r in sink:
                _cut(r)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> list[str]:
        """Stop this Engine's work from another thread; return the ids of the containers removed.

        Streams (build, push, pull) are cut; containers that run() started are killed and removed. Every
        call running on this Engine, and every later one, raises Cancelled."""
        self._cancelled.set()
        with self._lock:
            responses = [r for sink in self._sinks.values() for r in sink]
            cids = sorted(self._containers)
            steps = sorted(self._step_containers)
        for r in responses:
            _cut(r)
        with self._lock:
            procs = list(self._procs)
        for proc in procs:  # a BuildKit build's CLI: the engine cancels the solve once its session ends
            with suppress(OSError):
                proc.terminate()
        removed = []
        for cid in cids:
            if self._remove_container(cid):
                removed.append(cid)
        removed.extend(cid for cid in steps if self._step_container_gone(cid))
        return removed

    def _step_container_gone(self, cid: str, wait_s: float = 15.0) -> bool:
        """Wait for the engine to remove a cancelled build's step container, then remove it ourselves."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._api().inspect_container(cid)
            except docker.errors.NotFound:
                break
            except (docker.errors.APIError, requests.exceptions.RequestException):
                return False
            if time.monotonic() >= deadline:
                if not self._remove_container(cid):
                    return False
                break
            time.sleep(0.2)
        with self._lock:
            self._step_containers.discard(cid)
        return True

    def _remove_container(self, cid: str) -> bool:
        try:
            self._api().remove_container(cid, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return False
        with self._lock:
            self._containers.discard(cid)
        return True

    def resume(self) -> None:
        """Accept work again after cancel() (the Engine object stays usable in a longer-lived process)."""
        self._cancelled.clear()


    def _check_socket(self) -> None:
        """Connect to a unix socket ourselves first: docker-py's unix transport does not close its
        socket when the connect fails (a ResourceWarning per attempt while an engine is starting)."""
        if not self.address.startswith("unix://"):
            return
        path = self.address[len("unix://"):]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(self.network_timeout)
            try:
                s.connect(path)
            except OSError as exc:
                raise EngineError(
                    f"no Docker engine answers at {self.address} ({self.name})",
                    why=f"connecting to {path}: {exc.strerror or exc}",
                    fix=_START_ENGINE_FIX,
                ) from exc

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    @contextmanager
    def _errors(self, what: str, *, fix: str = "") -> Iterator[None]:
        """Turn whatever docker-py or requests raise into our errors, naming this engine."""
        try:
            try:
                yield
            except BuildctlError:
                raise
            except Exception as exc:
                if self._cancelled.is_set():  # cancel() cut the connection or removed the container
                    raise Cancelled(f"{what}: cancelled", why="the build was interrupted") from exc
                raise
        except BuildctlError:
            raise
        except (requests.exceptions.Timeout, urllib3.exceptions.ReadTimeoutError) as exc:
            raise self._timed_out(what, str(exc)) from exc
        except requests.exceptions.ConnectionError as exc:
            raise self._no_engine(what, str(exc)) from exc
        except docker.errors.APIError as exc:
            raise self._refused(what, _explanation(exc), fix=fix) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # a stream broken off half-way (docker-py reads it raw)
            raise self._broke_off(what, str(exc)) from exc
        except docker.errors.DockerException as exc:
            # Raised by docker-py itself, e.g. "Error while fetching server API version".
            text = str(exc)
            if "fetching server API version" in text or "Connection" in text:
                raise self._no_engine(what, text) from exc
            raise EngineError(f"{what}: docker-py failed", why=text, fix=fix) from exc

    # -- engine

    def ping(self) -> None:
        if self._wire() is not None:
            answer = self._call("GET", "/_ping", "engine check", timeout=self.network_timeout)
            if answer.status != 200:
                raise EngineError(
                    f"engine {self.name!r} at {self.address} answered the ping with an error",
                    why=answer.message, fix=_START_ENGINE_FIX,
                )
            return
        with self._errors("engine check"):
            if not self._api(self.network_timeout).ping():
                raise EngineError(
                    f"engine {self.name!r} at {self.address} answered the ping with an error",
                    fix=_START_ENGINE_FIX,
                )

    def platform(self) -> str:
        """The engine's native platform, e.g. ``linux/amd64``."""
        if self._platform is None:
            if self._wire() is not None:
                v = self._json("/version", "engine version", dict,
                               missing=lambda why: self._refused("engine version", why))
            else:
                with self._errors("engine version"):
                    v = self._api().version()
            self._platform = f"{v.get('Os', 'linux')}/{v.get('Arch', 'unknown')}"
        return self._platform


class Answer(NamedTuple):
    """An answer of the engine's API to a short call (Client._call)."""

    status: int
    data: Any  # the JSON body (None: empty or not JSON)
    message: str  # the engine's error message (its JSON "message", else the body)
    body: bytes = b""  # the answer as it came (a stream of JSON lines for /images/load)


def _cut(response: Any) -> None:
    """Shut the socket under an HTTP response down (from another thread: the reader's blocked recv ends)."""
    raw = getattr(response, "raw", None)
    for path in (("_fp", "fp", "raw", "_sock"), ("_connection", "sock")):
        obj: Any = raw
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, socket.socket):
            with suppress(OSError):
                obj.shutdown(socket.SHUT_RDWR)
            return
    with suppress(Exception):
        response.close()
