"""Registry transfers: push and pull with stall detection and retries, and registry digest lookups."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from buildctl import retrying
from buildctl.engine import lazy
from buildctl.engine.client import _cut, _explanation
from buildctl.engine.images import Images
from buildctl.engine.values import ATTEMPT_AGAIN, TransferProgress, registry_host, split_ref
from buildctl.errors import (
    BuildctlError,
    Cancelled,
    EngineError,
    PullStalled,
    PushError,
    PushStalled,
    UnreachableError,
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

T = TypeVar("T")

# Statuses of a push or pull stream that say a layer is done (no more bytes to move for it).
_LAYER_DONE = ("pushed", "layer already exists", "mounted from", "pull complete", "already exists",
               "download complete", "verifying checksum")


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


class Transfers(Images):
    """Pushes and pulls of images between the engine and registries, and registry lookups."""

    def push(self, ref: str, *, on_progress: Callable[[TransferProgress], None] | None = None) -> str:
        """Push ``ref``; return its manifest digest, confirmed by asking the registry afterwards.

        An attempt during which no byte moves for ``stall_timeout`` seconds is abandoned and retried;
        after ``attempts`` stalled attempts the push fails naming the registry and the layer whose upload
        stalled. Credentials come from docker's own configuration (DOCKER_CONFIG, ~/.docker/config.json,
        credential helpers), read by docker-py; they are never printed or logged here.
        """
        host = registry_host(ref)
        digest = self._retried(f"push of {ref}", lambda: self._transfer(
            "push", ref, host, lambda: self._push_once(ref, host, on_progress), on_progress), on_progress, host=host)
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
                  on_progress: Callable[[TransferProgress], None] | None) -> str:
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
                    on_progress(TransferProgress(status=f"{verb} stalled ({what}, no bytes for {self.stall_timeout:g} s): "
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

    def _push_once(self, ref: str, host: str, on_progress: Callable[[TransferProgress], None] | None) -> str:
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

    def _retried(self, what: str, call: Callable[[], T], on_progress: Callable[[TransferProgress], None] | None, *,
                 host: str = "") -> T:
        """``call()`` under the one retry policy of every registry call (retrying.py): a transient failure (a 5xx
        or 429 the registry answered, a reset or cut connection, a timeout) is tried again with backoff, bounded
        in attempts and time; a stall was retried by ``_transfer`` already and is not retried again."""
        policy = self.retry

        def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            if on_progress is not None:
                on_progress(TransferProgress(status=f"{ATTEMPT_AGAIN} ({what}) in {wait:.3g} s: attempt {attempt} of "
                                            f"{policy.attempts} failed ({_error_text(exc)[:200]})"))

        def wait(seconds: float) -> None:
            if self._cancelled.wait(seconds):
                raise Cancelled(f"{what}: cancelled", why="the build was interrupted")

        transient = retrying.once_for_timeouts(_transient, lambda e: retrying.timeout_text(_error_text(e)))
        value, _n = retrying.retry(call, transient=transient, policy=policy, sleep=wait, on_retry=on_retry, host=host)
        return value

    def registry_digest(self, ref: str) -> str | None:
        """The registry's manifest digest for ``ref``; None when the tag (or repository) is missing.

        Bounded by ``network_timeout``: an unreachable registry raises UnreachableError quickly; a transient
        answer is retried (``_retried``).
        """
        return self._retried(f"looking up {ref}", lambda: self._registry_digest_once(ref), None,
                             host=registry_host(ref))

    def _registry_digest_once(self, ref: str) -> str | None:
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
                    cut = retrying.transient_text(text)  # a reset or cut connection is no registry that is down
                    raise UnreachableError(
                        f"registry {host} {'cut the connection' if cut else 'cannot be reached'} (looking up {ref})",
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
             on_progress: Callable[[TransferProgress], None] | None = None) -> str:
        """Pull ``ref`` (tag or digest); return the local image id. Stalls are retried as in push()."""
        host = registry_host(ref)
        self._retried(f"pull of {ref}", lambda: self._transfer(
            "pull", ref, host, lambda: self._pull_once(ref, host, platform), on_progress), on_progress, host=host)
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


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, BuildctlError):
        return f"{exc.what}: {exc.why}" if exc.why else exc.what
    return str(exc)


def _transient(exc: BaseException) -> float | None:
    """0.0 (the policy's own wait) for a failure that may pass, None for one that will not (retrying.retry)."""
    if isinstance(exc, PushStalled | PullStalled | Cancelled) or not isinstance(exc, BuildctlError):
        return None
    return 0.0 if retrying.transient_text(_error_text(exc)) else None


def _registry_fix(host: str, text: str) -> str:
    low = text.lower()
    if "does not exist locally" in low:
        return "build or tag the image in this engine first"
    if any(m in low for m in _AUTH_MARKERS):
        return f"log in to {host} with `docker login {host}` (buildctl uses docker's own credentials)"
    if "no space left" in low:
        return f"the registry {host} (or the engine) ran out of disk space: free some, then run again"
    if retrying.transient_text(text):
        return (f"the registry {host} failed on its side or the connection to it was cut (retried with backoff); "
                "check its log, its storage and what sits between it and the engine, then run again")
    if host.startswith(("127.", "localhost")) and not ("connection refused" in low or "dial tcp" in low):
        return f"check the registry at {host}: its log says why it answered so"
    if host.startswith(("127.", "localhost")):
        return f"start the registry at {host} (`make test` and `make demo` start one), or check the port"
    return (
        f"check that {host} is reachable from the engine's host and the name is right, or point "
        f"buildctl at a mirror (registry_mirrors in the configuration, e.g. "
        f"BUILDCTL_REGISTRY_MIRRORS={host}=mirror.example:5000)"
    )


def _progress(chunk: Mapping[str, Any]) -> TransferProgress:
    detail = chunk.get("progressDetail") or {}
    current = detail.get("current") if isinstance(detail, dict) else None
    total = detail.get("total") if isinstance(detail, dict) else None
    return TransferProgress(
        status=str(chunk.get("status", "")),
        layer=str(chunk.get("id", "")),
        current=int(current) if isinstance(current, int) else None,
        total=int(total) if isinstance(total, int) else None,
    )
