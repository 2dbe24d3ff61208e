"""The Docker engine, through docker-py: the ONLY module that imports docker.

Everything leaving this module is ours: frozen dataclasses (ImageInfo, RunResult, Mount, Progress)
and BuildctlError subclasses that say what failed, why, and what to do. No docker ``attrs`` dict and
no docker exception travels past it.

Facts this module relies on (measured, see shared/reference/ENGINE.md):

- docker-py's ``build()`` keeps the containers of failed steps unless rm=True and forcerm=True.
- Live build logs need the low-level ``APIClient.build(decode=True)`` generator; a failed step comes
  as an ``{'error': ...}`` chunk, not as an exception.
- ``push(stream=True)`` never raises on failure: the error is a chunk in the stream. So every chunk is
  decoded, and the pushed digest is confirmed against the registry afterwards.
- The engine bounds a registry lookup only by its own 25 s deadline (measured against a registry that
  accepts connections and never answers), so registry lookups go through a client with a short
  ``network_timeout``.

Every HTTP call to the engine is bounded: short calls by ``timeout``, registry lookups by
``network_timeout``, builds, saves and loads by ``stream_timeout`` of silence. Pushes and pulls by
``stall_timeout``: a registry that accepts the connection and then stops taking (or giving) bytes makes
the engine wait without a word (measured: no stream chunk at all, and no error of its own within 400 s),
so an attempt whose stream shows no change for that long is abandoned (its connection closed, which
makes the engine drop the transfer) and retried, ``attempts`` times in all.

``cancel()`` stops what this Engine object is doing, from another thread: running streams are cut (the
engine cancels a build whose client went away and removes its container: forcerm) and the containers
run() started are killed and removed; the calls blocked on them raise Cancelled.
"""

from __future__ import annotations

import io
import re
import socket
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions
import urllib3.exceptions
from docker.auth import resolve_repository_name
from docker.utils import kwargs_from_env, parse_repository_tag

from buildctl.errors import (
    BuildctlError,
    BuildFailed,
    Cancelled,
    EngineError,
    PullStalled,
    PushError,
    PushStalled,
    UnreachableError,
)
from buildctl.runs import OWNER_LABEL, dead_owner, owner

# The classic builder's words for a step's container: "---> Running in 3f2a..." and, once it is gone,
# "Removing intermediate container 3f2a..." (group 1 set).
_STEP_CONTAINER = re.compile(r"(?:Running in|(Removing intermediate container)) ([0-9a-f]{12,64})")

# Labels on every container run() creates, so that a leftover one (a killed test run) can be found:
# the engine's name, and the owner (host, pid, start time) of the process that made it.
RUN_LABEL = "org.buildctl.run"
# Local-only tags of node images between their build and their content tag (never pushed):
# ``buildctl-part/<owner>:<node>``.
PART_REPOSITORY = "buildctl-part"
# Statuses of a push or pull stream that say a layer is done (no more bytes to move for it).
_LAYER_DONE = ("pushed", "layer already exists", "mounted from", "pull complete", "already exists",
               "download complete", "verifying checksum")

_START_ENGINE_FIX = (
    "start an engine (Debian: `apt-get install docker.io && dockerd >/var/log/dockerd.log 2>&1 &`; "
    "`make test` does this for you), or point DOCKER_HOST at a running one "
    "(e.g. DOCKER_HOST=unix:///run/user/1000/docker.sock)"
)

# Substrings of the engine's 500 answers that mean "could not talk to the registry at all".
_UNREACHABLE_MARKERS = (
    "dial tcp",
    "no such host",
    "connection refused",
    "connection reset",
    "no route to host",
    "network is unreachable",
    "i/o timeout",
    "context deadline exceeded",
    "tls handshake timeout",
    "server gave http response to https client",
    "x509:",
    "eof",
)
_AUTH_MARKERS = ("unauthorized", "denied", "authentication required", "no basic auth credentials")


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A host path bind-mounted into a container run()."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True, kw_only=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One line of `docker history`, newest first as the engine reports it."""

    created: int
    created_by: str
    size: int
    comment: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    platform: str
    created: str
    layers: tuple[str, ...]  # diff IDs, base first
    history: tuple[HistoryEntry, ...] = field(default=())
    workdir: str = ""
    user: str = ""
    # The storage driver's own view: its name and, for overlay2, each layer's diff folder on the engine's
    # host, top layer first (UpperDir, then LowerDir's entries); () when the driver is another or says nothing.
    storage_driver: str = ""
    layer_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Progress:
    """One progress event of a push or pull (a layer's status, or an overall message)."""

    status: str
    layer: str = ""
    current: int | None = None
    total: int | None = None

    def __str__(self) -> str:
        text = f"{self.layer}: {self.status}" if self.layer else self.status
        if self.current is not None and self.total:
            text += f" {self.current}/{self.total}"
        return text


def split_ref(ref: str) -> tuple[str, str]:
    """``host:port/repo:tag`` -> (``host:port/repo``, ``tag``); a digest ref keeps its digest as the tag."""
    repo, tag = parse_repository_tag(ref)
    return repo, tag or "latest"


def registry_host(ref: str) -> str:
    repo, _ = parse_repository_tag(ref)
    host, _name = resolve_repository_name(repo)
    return str(host)


def _explanation(exc: docker.errors.APIError) -> str:
    text = exc.explanation
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text or exc).strip()


class Engine:
    """One Docker engine. ``base_url`` None means docker's own environment (DOCKER_HOST, TLS vars)."""

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
    ) -> None:
        self.name = name
        self._base_url = base_url
        self.timeout = timeout
        self.network_timeout = network_timeout
        self.stream_timeout = stream_timeout
        self.stall_timeout = stall_timeout
        self.attempts = max(1, attempts)
        self._clients: dict[float, docker.APIClient] = {}
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

    def __repr__(self) -> str:
        return f"Engine(name={self.name!r}, at={self.address!r})"

    @property
    def address(self) -> str:
        if self._base_url:
            return self._base_url
        return str(kwargs_from_env().get("base_url") or "unix:///var/run/docker.sock")

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
                {"base_url": self._base_url} if self._base_url else dict(kwargs_from_env())
            )
            if self._version is None:
                self._check_socket()
                # A short bound for the version probe: an engine that does not answer it is not usable.
                probe = docker.APIClient(version="auto", timeout=min(t, self.network_timeout), **kwargs)
                self._version = str(probe.api_version)
                probe.close()
            client = docker.APIClient(version=self._version, timeout=t, **kwargs)
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

    def remove_own_part_tags(self) -> int:
        """Remove this process's temporary ``buildctl-part`` tags; return how many there were."""
        removed = 0
        with self._errors("removing temporary tags"):
            api = self._api()
            for image in api.images(filters={"reference": f"{PART_REPOSITORY}/{owner()}"}):
                for t in image.get("RepoTags") or ():
                    with suppress(docker.errors.NotFound):
                        api.remove_image(str(t))
                    removed += 1
        return removed

    def remove_leftovers(self) -> tuple[list[str], list[str]]:
        """Remove what runs of buildctl that died left in this engine: containers labelled with an owner
        that is no longer alive (on this host), and their temporary ``buildctl-part`` tags. Returns
        (container ids, tags) removed."""
        containers: list[str] = []
        tags: list[str] = []
        with self._errors("looking for leftovers of earlier runs"):
            api = self._api()
            for c in api.containers(all=True, filters={"label": OWNER_LABEL}):
                token = str((c.get("Labels") or {}).get(OWNER_LABEL, ""))
                if dead_owner(token):
                    with suppress(docker.errors.NotFound):
                        api.remove_container(str(c["Id"]), force=True, v=True)
                    containers.append(str(c["Id"]))
            for image in api.images(filters={"reference": f"{PART_REPOSITORY}/*"}):
                for t in image.get("RepoTags") or ():
                    repo, _tag = split_ref(str(t))
                    if dead_owner(repo.split("/", 1)[-1]):
                        with suppress(docker.errors.NotFound):
                            api.remove_image(str(t))
                        tags.append(str(t))
        return containers, tags

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
            raise EngineError(
                f"{what}: engine {self.name!r} at {self.address} did not answer in time",
                why=str(exc),
                fix="check that the engine is healthy (`docker info`); " + _START_ENGINE_FIX,
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            raise EngineError(
                f"{what}: no Docker engine answers at {self.address} ({self.name})",
                why=str(exc),
                fix=_START_ENGINE_FIX,
            ) from exc
        except docker.errors.APIError as exc:
            raise EngineError(f"{what}: the engine refused", why=_explanation(exc), fix=fix) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # a stream broken off half-way (docker-py reads it raw)
            raise EngineError(
                f"{what}: the connection to engine {self.name!r} at {self.address} broke off",
                why=str(exc),
                fix="check that the engine is healthy (`docker info`) and run the command again",
            ) from exc
        except docker.errors.DockerException as exc:
            # Raised by docker-py itself, e.g. "Error while fetching server API version".
            text = str(exc)
            engine_down = "fetching server API version" in text or "Connection" in text
            raise EngineError(
                f"{what}: no Docker engine answers at {self.address} ({self.name})" if engine_down
                else f"{what}: docker-py failed",
                why=text,
                fix=_START_ENGINE_FIX if engine_down else fix,
            ) from exc

    # -- engine

    def ping(self) -> None:
        with self._errors("engine check"):
            if not self._api(self.network_timeout).ping():
                raise EngineError(
                    f"engine {self.name!r} at {self.address} answered the ping with an error",
                    fix=_START_ENGINE_FIX,
                )

    def platform(self) -> str:
        """The engine's native platform, e.g. ``linux/amd64``."""
        if self._platform is None:
            with self._errors("engine version"):
                v = self._api().version()
            self._platform = f"{v.get('Os', 'linux')}/{v.get('Arch', 'unknown')}"
        return self._platform

    # -- images

    def build(
        self,
        *,
        context_dir: Path,
        dockerfile: str,
        tag: str,
        labels: Mapping[str, str],
        buildargs: Mapping[str, str] | None = None,
        network_mode: str | None = None,
        on_log: Callable[[str], None] | None = None,
        log_file: Path | None = None,
        nocache: bool = False,
    ) -> str:
        """Build ``dockerfile`` (a path relative to ``context_dir``) into ``tag``; return the image id.

        Each log line goes to ``on_log`` as it arrives and to ``log_file``; when no log file is given
        a failed build still writes one (under the temporary folder) so that the error can name it.
        Build args are visible in `docker history`: never pass secrets through them. ``nocache`` runs
        every step afresh (the engine's step cache would otherwise hand a second build the first one's
        layers: `buildctl repro` needs two independent builds).
        """
        tail: deque[str] = deque(maxlen=15)
        lines: list[str] = []
        steps: set[str] = set()  # this build's step containers (cancel() waits for those still there)
        partial = ""
        image_id = ""
        error = ""
        out = None
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            out = log_file.open("w", encoding="utf-8")

        def emit(text: str) -> None:
            nonlocal partial
            if out is not None:
                out.write(text)
                out.flush()
            else:
                lines.append(text)
            partial += text
            *complete, partial = partial.split("\n")
            for line in complete:
                line = line.rstrip("\r")
                tail.append(line)
                if on_log is not None:
                    on_log(line)

        try:
            with self._errors(f"build of {tag}", fix=f"check the Dockerfile {context_dir / dockerfile}"), \
                    self._stream():
                stream = self._api().build(
                    path=str(context_dir),
                    dockerfile=dockerfile,
                    tag=tag,
                    labels=dict(labels),
                    buildargs=dict(buildargs) if buildargs else None,
                    network_mode=network_mode,
                    rm=True,
                    forcerm=True,
                    nocache=nocache,
                    decode=True,
                    timeout=self.stream_timeout,
                )
                for chunk in stream:
                    if "error" in chunk:
                        # Keep reading: the engine ends the stream itself after the error.
                        text = str(chunk.get("error") or chunk.get("errorDetail", {}).get("message", ""))
                        error = error or text
                        emit(text.rstrip("\n") + "\n")
                        continue
                    if "stream" in chunk:
                        text = str(chunk["stream"])
                        for m in _STEP_CONTAINER.finditer(text):
                            with self._lock:
                                (self._step_containers.discard if m.group(1) else self._step_containers.add)(
                                    m.group(2))
                            steps.add(m.group(2))
                        emit(text)
                    elif "status" in chunk and not (chunk.get("progressDetail") or {}).get("current"):
                        # A base pulled during the build: its state changes, not every progress tick.
                        emit(str(Progress(status=str(chunk["status"]), layer=str(chunk.get("id", "")))) + "\n")
                    aux = chunk.get("aux")
                    if isinstance(aux, dict) and "ID" in aux:
                        image_id = str(aux["ID"])
            if partial:
                emit("\n")
        except EngineError as exc:
            # The engine refused the build (missing Dockerfile, bad context): a failure of this node,
            # reported with its log like any other. An engine that is gone stays an EngineError.
            if not isinstance(exc.__cause__, docker.errors.APIError):
                raise
            error = f"{exc.what}: {exc.why}"
            emit(error + "\n")
        finally:
            if out is not None:
                out.close()
            if not self.cancelled:  # a cancelled build's steps stay listed for cancel() to wait on
                with self._lock:
                    self._step_containers.difference_update(steps)
        if error or not image_id:
            if log_file is None:
                fd, name = tempfile.mkstemp(prefix="buildctl-build-", suffix=".log")
                with open(fd, "w", encoding="utf-8") as f:
                    f.write("".join(lines))
                log_file = Path(name)
            last = "\n".join(f"    {line}" for line in tail)
            raise BuildFailed(
                f"build of {tag} failed; full log: {log_file}",
                why=(error or "the engine reported no image id") + (f"\n  last log lines:\n{last}" if last else ""),
                fix=f"read {log_file}, correct the step that failed, and build again",
            )
        return image_id

    def image_exists(self, ref: str) -> bool:
        return self.image_id(ref) is not None

    def image_id(self, ref: str) -> str | None:
        with self._errors(f"inspect {ref}"):
            try:
                return str(self._api().inspect_image(ref)["Id"])
            except docker.errors.NotFound:
                return None

    def inspect_image(self, ref: str) -> ImageInfo:
        with self._errors(f"inspect {ref}"):
            try:
                attrs = self._api().inspect_image(ref)
                history = self._api().history(ref)
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"image {ref} is not in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build it, or pull it first",
                ) from exc
        return _image_info(attrs, history)

    def tag(self, image: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        with self._errors(f"tag {image} as {ref}"):
            try:
                self._api().tag(image, repo, tag, force=True)
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"cannot tag {image} as {ref}: no such image", why=_explanation(exc)
                ) from exc

    def remove_image(self, ref: str, force: bool = False) -> None:
        """Remove a tag (or the image, once no tag is left); a missing one is already removed."""
        with self._errors(
            f"remove {ref}", fix="a container still uses it: remove that container, or pass force=True"
        ):
            try:
                self._api().remove_image(ref, force=force)
            except docker.errors.NotFound:
                return

    # -- containers

    def run(
        self,
        image: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        files: Mapping[str, bytes] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        network_mode: str | None = None,
        gpus: bool = False,
        timeout: float,
        entrypoint: Sequence[str] | None = None,
    ) -> RunResult:
        """Run ``command`` in a fresh container of ``image``, wait at most ``timeout`` seconds.

        ``files`` (absolute path -> content) are copied in before the container starts. On timeout
        the container is killed and the result says timed_out. The container is always removed: when
        this call returns or raises, and by cancel() from another thread (this call then raises Cancelled).
        It carries this process's owner label, so that a later run removes it if this one dies.
        """
        archive = _tar(files) if files else None
        gpu_fix = "GPU runs need a GPU host with the NVIDIA Container Toolkit (nvidia-container-toolkit)"
        with self._errors(f"run in {image}", fix=gpu_fix if gpus else ""):
            if self._cancelled.is_set():
                raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
            api = self._api()
            host_config = api.create_host_config(
                mounts=[
                    docker.types.Mount(
                        target=m.target, source=str(Path(m.source).resolve()), type="bind", read_only=m.read_only
                    )
                    for m in mounts
                ] or None,
                network_mode=network_mode,
                device_requests=(
                    [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None
                ),
            )
            try:
                created = api.create_container(
                    image,
                    command=list(command),
                    environment=dict(env) if env else None,
                    working_dir=workdir,
                    user=user,
                    entrypoint=list(entrypoint) if entrypoint is not None else None,
                    labels={RUN_LABEL: self.name, OWNER_LABEL: owner()},
                    host_config=host_config,
                )
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"cannot run {image}: no such image in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build it, or pull it first",
                ) from exc
            cid = str(created["Id"])
            with self._lock:
                self._containers.add(cid)
            try:
                if self._cancelled.is_set():  # cancel() ran between the create and the line above
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
                if archive is not None:
                    api.put_archive(cid, "/", archive)
                api.start(cid)
                timed_out = False
                try:
                    # The wait request's read timeout is the run's time limit.
                    status = api.wait(cid, timeout=timeout)
                except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                    if self._cancelled.is_set():
                        raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted") from None
                    timed_out = True
                    # A 409 here means it exited between the timeout and the kill.
                    with suppress(docker.errors.APIError):
                        api.kill(cid)
                    status = api.wait(cid, timeout=self.timeout)
                if self._cancelled.is_set():
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
                stdout = api.logs(cid, stdout=True, stderr=False)
                stderr = api.logs(cid, stdout=False, stderr=True)
            except docker.errors.APIError:
                if self._cancelled.is_set():  # cancel() removed it under our feet
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted") from None
                raise
            finally:
                self._remove_container(cid)
        return RunResult(
            exit_code=int(status.get("StatusCode", -1)),
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            timed_out=timed_out,
        )

    # -- registries

    def push(self, ref: str, *, on_progress: Callable[[Progress], None] | None = None) -> str:
        """Push ``ref``; return its manifest digest, confirmed by asking the registry afterwards.

        An attempt during which no byte moves for ``stall_timeout`` seconds is abandoned and retried;
        after ``attempts`` stalled attempts the push fails naming the registry and the layer whose upload
        stalled. Credentials come from docker's own configuration (DOCKER_CONFIG, ~/.docker/config.json,
        credential helpers), read by docker-py; they are never printed or logged here.
        """
        host = registry_host(ref)
        digest = self._transfer("push", ref, host, lambda: self._push_once(ref, host, on_progress), on_progress)
        if not digest:
            raise PushError(
                f"push of {ref} reported no manifest digest",
                why="the push stream ended without an error and without a digest",
                fix=f"check the registry at {host} and push again",
            )
        remote = self.registry_digest(ref)
        if remote != digest:
            raise PushError(
                f"push of {ref} could not be confirmed",
                why=f"the push reported {digest}, the registry has {remote or 'no such tag'}",
                fix=f"another push may have moved the tag; check the registry at {host} and push again",
            )
        return digest

    def _transfer(self, verb: str, ref: str, host: str, once: Callable[[], str],
                  on_progress: Callable[[Progress], None] | None) -> str:
        """``once()`` up to ``attempts`` times while it stalls; a stall after the last attempt is an error."""
        for attempt in range(1, self.attempts + 1):
            try:
                return once()
            except _Stalled as stall:
                what = stall.describe(verb, self._full_layer_ids(ref) if verb == "push" else None)
                if attempt == self.attempts:
                    cls = PushStalled if verb == "push" else PullStalled
                    raise cls(
                        f"{verb} of {ref} stalled: registry {host} took no bytes for {self.stall_timeout:g} s "
                        f"({what}), {self.attempts} attempt(s)" if verb == "push" else
                        f"{verb} of {ref} stalled: registry {host} sent no bytes for {self.stall_timeout:g} s "
                        f"({what}), {self.attempts} attempt(s)",
                        why=f"each attempt's connection stayed open while no data moved ({what})",
                        fix=f"check the registry at {host} and whatever sits between it and the engine (a proxy, "
                            "a full disk on the registry, a saturated link), then run the command again",
                    ) from None
                if on_progress is not None:
                    on_progress(Progress(status=f"{verb} stalled ({what}, no bytes for {self.stall_timeout:g} s): "
                                                f"attempt {attempt + 1} of {self.attempts}"))
                if self._cancelled.wait(min(2.0 ** attempt, 10.0)):
                    raise Cancelled(f"{verb} of {ref}: cancelled", why="the build was interrupted") from None
        raise AssertionError("unreachable")

    def _full_layer_ids(self, ref: str) -> dict[str, str]:
        """Short layer id (as a push stream names it) -> the layer's diff ID."""
        try:
            return {d.removeprefix("sha256:")[:12]: d for d in self.inspect_image(ref).layers}
        except BuildctlError:
            return {}

    def _watched(self, chunks: Iterator[Mapping[str, Any]], watch: _Watch,
                 sink: list[Any]) -> Iterator[Mapping[str, Any]]:
        """The stream's chunks; a stream that says nothing (or repeats itself) for ``stall_timeout`` raises
        _Stalled. A read timeout does not cover it: docker-py reads a pull's stream with no timeout at all,
        so a watchdog cuts the connection (which also makes the engine drop the transfer)."""
        done = threading.Event()

        def watchdog() -> None:
            while not done.wait(min(1.0, self.stall_timeout / 4)):
                if time.monotonic() - watch.last_chunk > self.stall_timeout:
                    watch.stalled = True
                    for r in list(sink):
                        _cut(r)
                    return
        threading.Thread(target=watchdog, name="buildctl-stall-watch", daemon=True).start()
        try:
            for chunk in chunks:
                watch.see(chunk)
                yield chunk
        except Exception as exc:
            if self._cancelled.is_set():
                raise
            timeout = isinstance(exc, TimeoutError | urllib3.exceptions.ReadTimeoutError | requests.exceptions.ReadTimeout)
            if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
                timeout = isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError)
            if watch.stalled or timeout:
                raise _Stalled(watch.active()) from exc
            raise
        finally:
            done.set()
        if watch.stalled:  # the cut ended the stream cleanly
            raise _Stalled(watch.active())

    def _push_once(self, ref: str, host: str, on_progress: Callable[[Progress], None] | None) -> str:
        repo, tag = split_ref(ref)
        digest = ""
        watch = _Watch(self.stall_timeout)
        with self._errors(f"push of {ref}"), self._stream() as sink:
            try:
                # The client's read timeout is the stall timeout: a stalled push sends nothing at all.
                stream = self._api(min(self.stall_timeout, self.stream_timeout)).push(
                    repo, tag=tag, stream=True, decode=True)
                error = ""
                # Read to the end even after an error: the engine closes the stream itself, and an
                # abandoned stream would keep its connection open.
                for chunk in self._watched(stream, watch, sink):
                    if "error" in chunk:
                        error = error or str(chunk["error"])
                        continue
                    aux = chunk.get("aux")
                    if isinstance(aux, dict) and aux.get("Digest"):
                        digest = str(aux["Digest"])
                    if "status" in chunk and on_progress is not None:
                        on_progress(_progress(chunk))
                if error:
                    raise PushError(f"push of {ref} failed", why=error, fix=_registry_fix(host, error))
            except docker.errors.NotFound as exc:
                raise PushError(
                    f"push of {ref} failed: no such image in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build or tag it first",
                ) from exc
        return digest

    def registry_digest(self, ref: str) -> str | None:
        """The registry's manifest digest for ``ref``; None when the tag (or repository) is missing.

        Bounded by ``network_timeout``: an unreachable registry raises UnreachableError quickly.
        """
        host = registry_host(ref)
        with self._errors(f"looking up {ref}"):
            api = self._api(self.network_timeout)  # an engine that does not answer is an EngineError
            try:
                attrs = api.inspect_distribution(ref)
            except docker.errors.NotFound:
                return None
            except requests.exceptions.ReadTimeout as exc:
                raise UnreachableError(
                    f"registry {host} did not answer within {self.network_timeout:g} s (looking up {ref})",
                    why=str(exc),
                    fix=_registry_fix(host, "timeout"),
                ) from exc
            except docker.errors.APIError as exc:
                text = _explanation(exc)
                low = text.lower()
                if any(m in low for m in _UNREACHABLE_MARKERS):
                    raise UnreachableError(
                        f"registry {host} cannot be reached (looking up {ref})",
                        why=text,
                        fix=_registry_fix(host, text),
                    ) from exc
                if "manifest unknown" in low or "not found" in low or "name unknown" in low:
                    return None
                raise EngineError(
                    f"looking up {ref} in registry {host} failed", why=text, fix=_registry_fix(host, text)
                ) from exc
        descriptor = attrs.get("Descriptor") or {}
        digest = descriptor.get("digest")
        return str(digest) if digest else None

    def pull(self, ref: str, platform: str | None = None, *,
             on_progress: Callable[[Progress], None] | None = None) -> str:
        """Pull ``ref`` (tag or digest); return the local image id. Stalls are retried as in push()."""
        host = registry_host(ref)
        self._transfer("pull", ref, host, lambda: self._pull_once(ref, host, platform), on_progress)
        image_id = self.image_id(ref)
        if image_id is None:
            raise EngineError(f"pull of {ref} finished but the engine has no such image")
        return image_id

    def _pull_once(self, ref: str, host: str, platform: str | None) -> str:
        repo, tag = split_ref(ref)
        watch = _Watch(self.stall_timeout)
        with self._errors(f"pull of {ref}"), self._stream() as sink:
            try:
                stream = self._api(min(self.stall_timeout, self.stream_timeout)).pull(
                    repo, tag=tag, stream=True, decode=True, platform=platform
                )
                error = ""
                for chunk in self._watched(stream, watch, sink):  # to the end, as in push
                    if "error" in chunk:
                        error = error or str(chunk["error"])
                if error:
                    cls = UnreachableError if any(m in error.lower() for m in _UNREACHABLE_MARKERS) else EngineError
                    raise cls(f"pull of {ref} failed", why=error, fix=_registry_fix(host, error))
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"pull of {ref} failed: the registry {host} has no such tag",
                    why=_explanation(exc),
                    fix="build and push it first, or check the name",
                ) from exc
            except docker.errors.APIError as exc:
                text = _explanation(exc)
                if any(m in text.lower() for m in _UNREACHABLE_MARKERS):
                    raise UnreachableError(
                        f"pull of {ref} failed: registry {host} cannot be reached",
                        why=text,
                        fix=_registry_fix(host, text),
                    ) from exc
                raise
        return ""

    # -- archives

    def save(self, ref: str, dest: Path) -> None:
        """`docker save` of ``ref`` into ``dest`` (written whole or not at all)."""
        part = dest.with_name(dest.name + ".part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._errors(f"save of {ref}"), part.open("wb") as f:
                try:
                    for chunk in self._api(self.stream_timeout).get_image(ref):
                        f.write(chunk)
                except docker.errors.NotFound as exc:
                    raise EngineError(f"cannot save {ref}: no such image", why=_explanation(exc)) from exc
            part.replace(dest)
        finally:
            part.unlink(missing_ok=True)

    def load(self, tar: Path) -> list[str]:
        """`docker load`; return what the engine loaded (tags, or image ids for untagged images)."""
        loaded: list[str] = []
        error = ""
        with self._errors(f"load of {tar}"), tar.open("rb") as f:
            for chunk in self._api(self.stream_timeout).load_image(f):
                if "error" in chunk:
                    error = error or str(chunk["error"])
                text = str(chunk.get("stream", ""))
                for line in text.splitlines():
                    m = re.match(r"Loaded image(?: ID)?: (\S+)", line.strip())
                    if m:
                        loaded.append(m.group(1))
        if error:
            raise EngineError(f"load of {tar} failed", why=error, fix="check that the file is a `docker save` archive")
        return loaded


class _Stalled(Exception):
    def __init__(self, layers: Sequence[tuple[str, str, int | None]]) -> None:
        super().__init__(", ".join(x[0] for x in layers))
        self.layers = tuple(layers)  # (layer id, last status, bytes moved)

    def describe(self, verb: str, full: Mapping[str, str] | None = None) -> str:
        if not self.layers:
            return "before any layer started"
        kind = "uploading layer" if verb == "push" else "downloading blob"
        names = [(full or {}).get(layer, layer) + (f" after {n} bytes" if n is not None else f" ({status.lower()})")
                 for layer, status, n in self.layers]
        return f"{kind}{'s' if len(names) > 1 else ''} " + ", ".join(names)


class _Watch:
    """The state of a push or pull stream: which layers are in flight, and when anything last changed."""

    def __init__(self, stall_timeout: float) -> None:
        self.stall_timeout = stall_timeout
        self.last_change = time.monotonic()
        self.last_chunk = self.last_change
        self.stalled = False
        self.layers: dict[str, tuple[str, int | None]] = {}  # layer id -> (status, bytes)

    def see(self, chunk: Mapping[str, Any]) -> None:
        now = time.monotonic()
        self.last_chunk = now
        layer = str(chunk.get("id") or "")
        status = str(chunk.get("status") or "")
        detail = chunk.get("progressDetail") or {}
        current = detail.get("current") if isinstance(detail, dict) else None
        state = (status, current if isinstance(current, int) else None)
        if not layer:
            self.last_change = now  # an overall message (a new phase, the digest, an error)
            return
        if self.layers.get(layer) != state:
            self.layers[layer] = state
            self.last_change = now
        elif now - self.last_change > self.stall_timeout:
            raise _Stalled(self.active())

    def active(self) -> list[tuple[str, str, int | None]]:
        return [(layer, status, n) for layer, (status, n) in self.layers.items()
                if not status.lower().startswith(_LAYER_DONE)]


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


def _registry_fix(host: str, text: str) -> str:
    low = text.lower()
    if "does not exist locally" in low:
        return "build or tag the image in this engine first"
    if any(m in low for m in _AUTH_MARKERS):
        return f"log in to {host} with `docker login {host}` (buildctl uses docker's own credentials)"
    if host.startswith(("127.", "localhost")):
        return f"start the registry at {host} (`make test` and `make demo` start one), or check the port"
    return (
        f"check that {host} is reachable from the engine's host and the name is right, or point "
        f"buildctl at a mirror (registry_mirrors in the configuration, e.g. "
        f"BUILDCTL_REGISTRY_MIRRORS={host}=mirror.example:5000)"
    )


def _progress(chunk: Mapping[str, Any]) -> Progress:
    detail = chunk.get("progressDetail") or {}
    current = detail.get("current") if isinstance(detail, dict) else None
    total = detail.get("total") if isinstance(detail, dict) else None
    return Progress(
        status=str(chunk.get("status", "")),
        layer=str(chunk.get("id", "")),
        current=int(current) if isinstance(current, int) else None,
        total=int(total) if isinstance(total, int) else None,
    )


def _tar(files: Mapping[str, bytes]) -> bytes:
    """A tar of ``files`` rooted at /; the engine creates missing parent folders (0755, root)."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path, content in files.items():
            if not path.startswith("/"):
                raise ValueError(f"files: path must be absolute, got {path!r}")
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mtime = now
            # Scripts with a shebang stay executable; everything else is plain data.
            info.mode = 0o755 if content.startswith(b"#!") else 0o644
            tf.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def _tuple(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return None


def _layer_dirs(driver: Mapping[str, Any]) -> tuple[str, ...]:
    """overlay2's diff folders of an image, top layer first; () for another driver or incomplete data."""
    data = driver.get("Data") or {}
    if driver.get("Name") != "overlay2" or not isinstance(data, Mapping) or not data.get("UpperDir"):
        return ()
    lower = str(data.get("LowerDir") or "")
    return (str(data["UpperDir"]), *(d for d in lower.split(":") if d))


def _image_info(attrs: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> ImageInfo:
    config = attrs.get("Config") or {}
    env: dict[str, str] = {}
    for item in config.get("Env") or ():
        k, _, v = str(item).partition("=")
        env[k] = v
    platform = f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', 'unknown')}"
    if attrs.get("Variant"):
        platform += f"/{attrs['Variant']}"
    return ImageInfo(
        id=str(attrs["Id"]),
        repo_tags=tuple(str(t) for t in attrs.get("RepoTags") or ()),
        repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or ()),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        env=env,
        entrypoint=_tuple(config.get("Entrypoint")),
        cmd=_tuple(config.get("Cmd")),
        platform=platform,
        created=str(attrs.get("Created", "")),
        layers=tuple(str(x) for x in (attrs.get("RootFS") or {}).get("Layers") or ()),
        workdir=str(config.get("WorkingDir") or ""),
        user=str(config.get("User") or ""),
        storage_driver=str((attrs.get("GraphDriver") or {}).get("Name") or ""),
        layer_dirs=_layer_dirs(attrs.get("GraphDriver") or {}),
        history=tuple(
            HistoryEntry(
                created=int(h.get("Created") or 0),
                created_by=str(h.get("CreatedBy") or ""),
                size=int(h.get("Size") or 0),
                comment=str(h.get("Comment") or ""),
                tags=tuple(str(t) for t in h.get("Tags") or ()),
            )
            for h in history
        ),
    )
