"""The slices of buildctl.engine.engine that verify, push and bom use, as Protocols.

Those modules take any object with these methods, so unit tests hand them small fakes made of data
(DESIGN rule 7) and engine tests hand them the real ``Engine``. The attribute Protocols are read-only
properties so that engine.py's frozen dataclasses satisfy them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


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
    """One push progress event (engine.Progress): a layer's status, or an overall message."""

    @property
    def status(self) -> str: ...
    @property
    def layer(self) -> str: ...
