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
``network_timeout``, streams (build, push, pull, save, load) by ``stream_timeout`` of silence.
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
from docker.auth import resolve_repository_name
from docker.utils import kwargs_from_env, parse_repository_tag

from buildctl.errors import BuildctlError, BuildFailed, EngineError, PushError, UnreachableError

# Labels on every container run() creates, so that a leftover one (a killed test run) can be found.
RUN_LABEL = "org.buildctl.run"

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
    ) -> None:
        self.name = name
        self._base_url = base_url
        self.timeout = timeout
        self.network_timeout = network_timeout
        self.stream_timeout = stream_timeout
        self._clients: dict[float, docker.APIClient] = {}
        self._version: str | None = None
        self._platform: str | None = None
        self._lock = threading.Lock()

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
            self._clients[t] = client
            return client

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
            yield
        except BuildctlError:
            raise
        except requests.exceptions.Timeout as exc:
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
            with self._errors(f"build of {tag}", fix=f"check the Dockerfile {context_dir / dockerfile}"):
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
                        emit(str(chunk["stream"]))
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
        the container is killed and the result says timed_out. The container is always removed.
        """
        archive = _tar(files) if files else None
        gpu_fix = "GPU runs need a GPU host with the NVIDIA Container Toolkit (nvidia-container-toolkit)"
        with self._errors(f"run in {image}", fix=gpu_fix if gpus else ""):
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
                    labels={RUN_LABEL: self.name},
                    host_config=host_config,
                )
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"cannot run {image}: no such image in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build it, or pull it first",
                ) from exc
            cid = str(created["Id"])
            try:
                if archive is not None:
                    api.put_archive(cid, "/", archive)
                api.start(cid)
                timed_out = False
                try:
                    # The wait request's read timeout is the run's time limit.
                    status = api.wait(cid, timeout=timeout)
                except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                    timed_out = True
                    # A 409 here means it exited between the timeout and the kill.
                    with suppress(docker.errors.APIError):
                        api.kill(cid)
                    status = api.wait(cid, timeout=self.timeout)
                stdout = api.logs(cid, stdout=True, stderr=False)
                stderr = api.logs(cid, stdout=False, stderr=True)
            finally:
                with suppress(docker.errors.NotFound):
                    api.remove_container(cid, force=True, v=True)
        return RunResult(
            exit_code=int(status.get("StatusCode", -1)),
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            timed_out=timed_out,
        )

    # -- registries

    def push(self, ref: str, *, on_progress: Callable[[Progress], None] | None = None) -> str:
        """Push ``ref``; return its manifest digest, confirmed by asking the registry afterwards.

        Credentials come from docker's own configuration (DOCKER_CONFIG, ~/.docker/config.json,
        credential helpers), read by docker-py; they are never printed or logged here.
        """
        repo, tag = split_ref(ref)
        host = registry_host(ref)
        digest = ""
        with self._errors(f"push of {ref}"):
            try:
                stream = self._api(self.stream_timeout).push(repo, tag=tag, stream=True, decode=True)
                error = ""
                # Read to the end even after an error: the engine closes the stream itself, and an
                # abandoned stream would keep its connection open.
                for chunk in stream:
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

    def pull(self, ref: str, platform: str | None = None) -> str:
        """Pull ``ref`` (tag or digest); return the local image id."""
        repo, tag = split_ref(ref)
        host = registry_host(ref)
        with self._errors(f"pull of {ref}"):
            try:
                stream = self._api(self.stream_timeout).pull(
                    repo, tag=tag, stream=True, decode=True, platform=platform
                )
                error = ""
                for chunk in stream:  # to the end, as in push
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
        image_id = self.image_id(ref)
        if image_id is None:
            raise EngineError(f"pull of {ref} finished but the engine has no such image")
        return image_id

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
