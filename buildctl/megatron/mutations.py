"""Launches mutated from the shipped ones, to hold lint-args against the real validate_args
(tests/data/megatron-mutations.yaml; scripts/megatron-validate.py --mutations runs them).

A mutation names a shipped launch (stack, variant, profile or ``base``) and edits it the way a profile
does: ``drop`` options, lay ``args`` over the rest, optionally another ``gpus``/``nodes``. ``apply`` returns
the manifest with that edit as one more profile (``MUTATION``) derived from the launch, so that lint-args
and the launch script see it exactly as they would see a profile written in the manifest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from buildctl.errors import Location, ManifestError, ManifestErrors
from buildctl.manifest.launch import Arg, Profile
from buildctl.manifest.model import Manifest
from buildctl.manifest.profiles import BASE_PROFILE

MUTATION = "mutation"
VERDICTS = ("refuse", "accept")


@dataclass(frozen=True, kw_only=True)
class Mutation:
    id: str
    stack: str
    variant: str
    profile: str  # a profile of the stack, or ``base``
    edit: str  # the edit in words
    drop: tuple[str, ...] = ()
    args: tuple[Arg, ...] = ()
    gpus: int | None = None
    nodes: int | None = None
    expect: str = "refuse"  # what reading the pinned source says the real validate_args does
    cite: str = ""  # file:line of the assertion that refuses it (refuse only)
    at: Location = dataclasses.field(default_factory=lambda: Location(file=""))


def parse(doc: Any, filename: str) -> tuple[Mutation, ...]:
    """The mutation set as YAML gave it (the caller reads the file: YAML is the manifest room's), checked:
    every entry names its launch, edit and expected verdict."""
    items = doc.get("mutations") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ManifestErrors([ManifestError(Location(file=filename, key="mutations"),
                                            "expected a list under 'mutations'")])
    out: list[Mutation] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = Location(file=filename, key=f"mutations[{i}]")
        if not isinstance(item, dict):
            raise ManifestErrors([ManifestError(at, "a mutation is a mapping")])
        m = _one(item, at)
        if m.id in seen:
            raise ManifestErrors([ManifestError(at, f"mutation id {m.id!r} given twice")])
        seen.add(m.id)
        out.append(m)
    return tuple(out)


def _one(item: Mapping[str, Any], location: Location) -> Mutation:
    def text(key: str, required: bool = True) -> str:
        v = item.get(key)
        if v is None and not required:
            return ""
        if not isinstance(v, str) or not v:
            raise ManifestErrors([ManifestError(dataclasses.replace(location, key=f"{location.key}.{key}"),
                                                f"{key}: expected a non-empty string")])
        return v

    unknown = sorted(set(item) - {"id", "stack", "variant", "profile", "edit", "drop", "args", "gpus", "nodes",
                                  "expect", "cite"})
    if unknown:
        raise ManifestErrors([ManifestError(location, f"unknown keys: {', '.join(unknown)}")])
    expect = text("expect")
    if expect not in VERDICTS:
        raise ManifestErrors([ManifestError(location, f"expect: {expect!r} is not one of {', '.join(VERDICTS)}")])
    drop = item.get("drop") or []
    if not isinstance(drop, list) or not all(isinstance(d, str) and d.startswith("--") for d in drop):
        raise ManifestErrors([ManifestError(location, "drop: expected a list of options")])
    gpus, nodes = item.get("gpus"), item.get("nodes")
    for key, v in (("gpus", gpus), ("nodes", nodes)):
        if v is not None and (type(v) is not int or v < 1):
            raise ManifestErrors([ManifestError(location, f"{key}: expected a positive integer")])
    return Mutation(id=text("id"), stack=text("stack"), variant=text("variant"), profile=text("profile"),
                    edit=text("edit"), drop=tuple(drop), args=_args(item.get("args") or [], location), gpus=gpus,
                    nodes=nodes, expect=expect, cite=text("cite", required=False), at=location)


def _args(items: Sequence[Any], location: Location) -> tuple[Arg, ...]:
    """Arguments in the manifest's form: ``--flag``, ``--flag: value`` or ``--flag: [v1, v2]``."""
    if not isinstance(items, list):
        raise ManifestErrors([ManifestError(location, "args: expected a list")])
    out = []
    for item in items:
        if isinstance(item, str) and item.startswith("--"):
            out.append(Arg(flag=item, at=location))
            continue
        if isinstance(item, dict) and len(item) == 1:
            ((flag, value),) = item.items()
            values = value if isinstance(value, list) else [value]
            if isinstance(flag, str) and flag.startswith("--") and all(
                    isinstance(v, str | int | float) and not isinstance(v, bool) for v in values):
                out.append(Arg(flag=flag, values=tuple(str(v) for v in values), bare=False, at=location))
                continue
        raise ManifestErrors([ManifestError(location, f"args: {item!r} is not '--flag', '--flag: value' or "
                                                "'--flag: [values]'")])
    return tuple(out)


def apply(manifest: Manifest, mutation: Mutation) -> Manifest:
    """``manifest`` with the mutation as profile ``MUTATION``, derived from the launch it edits."""
    e = manifest.entrypoint
    if e is None:
        raise ManifestErrors([ManifestError(mutation.at, f"stack {manifest.stack} has no entrypoint")])
    if mutation.profile != BASE_PROFILE and mutation.profile not in e.profiles:
        raise ManifestErrors([ManifestError(mutation.at, f"stack {manifest.stack} has no profile {mutation.profile!r}")])
    if mutation.variant not in {v.name for v in manifest.variants}:
        raise ManifestErrors([ManifestError(mutation.at, f"stack {manifest.stack} has no variant {mutation.variant!r}")])
    variant = next(v for v in manifest.variants if v.name == mutation.variant)
    parent = e.profiles.get(mutation.profile)
    gpus = mutation.gpus or (parent.gpus if parent is not None else (variant.entrypoint.gpus or e.gpus))
    nodes = mutation.nodes or (parent.nodes if parent is not None else (variant.entrypoint.nodes or e.nodes))
    if gpus is None:
        raise ManifestErrors([ManifestError(mutation.at, f"launch {mutation.profile} declares no GPUs: give gpus")])
    profile = Profile(description=mutation.edit, gpus=gpus, nodes=nodes, extends=mutation.profile, drop=mutation.drop, args=mutation.args,
                      at=mutation.at)
    entry = dataclasses.replace(e, profiles={**e.profiles, MUTATION: profile})
    return dataclasses.replace(manifest, entrypoint=entry)
