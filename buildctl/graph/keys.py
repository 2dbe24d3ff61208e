"""Content keys: the JSON form of a node spec's key inputs, and a node's sha256 key."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from buildctl.lock.lockfile import canonical
from buildctl.manifest.model import (
    PipConstraintPolicy,
)


def key_inputs(spec: Any) -> Any:
    """The JSON form of a spec's key inputs: non-key fields dropped, named items keyed by name.

    Keying lists of named things by name makes the "why" of a rebuild a readable path
    (``apt.gdb``) and makes the order they were written in irrelevant to the key.
    """
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return {f.name: key_inputs(getattr(spec, f.name)) for f in dataclasses.fields(spec)
                if f.metadata.get("key", True)}
    if isinstance(spec, tuple | list):
        if spec and all(dataclasses.is_dataclass(x) and hasattr(x, "name") for x in spec):
            return {x.name: _without_name(key_inputs(x)) for x in spec}
        return [key_inputs(x) for x in spec]
    if isinstance(spec, Mapping):
        return {str(k): key_inputs(v) for k, v in sorted(spec.items())}
    if isinstance(spec, PipConstraintPolicy):
        return spec.value
    return spec


def _without_name(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if k != "name"}
    return data

def node_key(kind: str, parent_keys: Iterable[str], inputs: Any, template: str) -> str:
    data = {"kind": kind, "parents": list(parent_keys), "inputs": inputs, "template": template}
    return hashlib.sha256(canonical(data).encode()).hexdigest()
