"""Small data fakes of the engine slices verify, push and bom use (no mock.patch, no engine)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from buildctl.errors import PushError


@dataclass(frozen=True, kw_only=True)
class Image:
    id: str = "sha256:" + "1" * 64
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    platform: str = "linux/amd64"
    layers: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Run:
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


@dataclass(frozen=True, kw_only=True)
class Event:
    status: str
    layer: str = ""

    def __str__(self) -> str:
        return f"{self.layer}: {self.status}" if self.layer else self.status


class FakeEngine:
    """Images by ref, a registry as ref -> digest, and scripted push outcomes."""

    def __init__(self, *, images: Mapping[str, Image] | None = None, registry: Mapping[str, str] | None = None,
                 run_result: Run | None = None, host: str = "linux/amd64") -> None:
        self.images = dict(images or {})
        self.registry = dict(registry or {})
        self.run_result = run_result or Run()
        self.host = host
        self.calls: list[tuple[str, Any]] = []
        # each push pops one: an Exception to raise, or a (digest, events) pair
        self.push_script: list[Any] = []
        self.registry_error: Exception | None = None

    def platform(self) -> str:
        return self.host

    def registry_digest(self, ref: str) -> str | None:
        self.calls.append(("registry_digest", ref))
        if self.registry_error is not None:
            raise self.registry_error
        return self.registry.get(ref)

    def image_exists(self, ref: str) -> bool:
        return ref in self.images

    def inspect_image(self, ref: str) -> Image:
        self.calls.append(("inspect", ref))
        return self.images[ref]

    def pull(self, ref: str, platform: str | None = None) -> str:
        self.calls.append(("pull", ref))
        name = ref.partition("@")[0]
        self.images[ref] = self.images.get(name, Image(repo_digests=(ref,)))
        return self.images[ref].id

    def run(self, image: str, command: Sequence[str], *, network_mode: str | None = None, timeout: float,
            entrypoint: Sequence[str] | None = None) -> Run:
        self.calls.append(("run", (image, (*(entrypoint or ()), *command), network_mode)))
        return self.run_result

    def tag(self, image: str, ref: str) -> None:
        self.calls.append(("tag", (image, ref)))
        self.images[ref] = self.images[image]

    def push(self, ref: str, *, on_progress: Callable[[Any], None] | None = None) -> str:
        self.calls.append(("push", ref))
        step = self.push_script.pop(0)
        if isinstance(step, Exception):
            raise step
        digest, events = step
        for e in events:
            if on_progress is not None:
                on_progress(e)
        self.registry[ref] = digest
        return str(digest)


def stream_error(text: str) -> PushError:
    """What engine.push raises for an error chunk in the push stream."""
    return PushError("push of X failed", why=text)
