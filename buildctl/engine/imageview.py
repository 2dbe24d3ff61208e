"""The slices of buildctl.engine.engine that verify, push and bom use, as Protocols; ``at_hand`` over one.

Those modules take any object with these methods, so unit tests hand them small fakes made of data
(DESIGN rule 7) and engine tests hand them the real ``Engine``. The attribute Protocols are read-only
properties so that engine.py's frozen dataclasses satisfy them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from buildctl.errors import EngineError


class ImageView(Protocol):
    """What ``Engine.inspect_image`` returns (engine.ImageInfo)."""

    @property
    def id(self) -> str: ...
    @property
    def repo_tags(self) -> Sequence[str]: ...
    @property
    def repo_digests(self) -> Sequence[str]: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def platform(self) -> str: ...
    @property
    def layers(self) -> Sequence[str]: ...


class RunOutcome(Protocol):
    """What ``Engine.run`` returns (engine.RunResult)."""

    @property
    def exit_code(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def timed_out(self) -> bool: ...


class ProgressView(Protocol):
    """One push progress event (engine.TransferProgress): a layer's status, or an overall message."""

    @property
    def status(self) -> str: ...
    @property
    def layer(self) -> str: ...


class Puller(Protocol):
    """What ``at_hand`` needs of an engine."""

    def image_exists(self, ref: str) -> bool: ...
    def pull(self, ref: str, platform: str | None = None) -> str: ...


def at_hand(engine: Puller, image: str) -> None:
    """``image`` in ``engine``: pulled first when the engine does not have it (bom, provenance)."""
    if not engine.image_exists(image):
        try:
            engine.pull(image)
        except EngineError as exc:
            raise EngineError(f"no image {image} here, and pulling it failed: {exc.what}", why=exc.why,
                              fix="build it, or give a reference the registry has") from exc
