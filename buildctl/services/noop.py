"""A `buildctl build` with nothing changed, at the cost of hashing its inputs and one question to the engine.

After every build that completed, ``remember`` writes what the build was decided from and what it ended
with: the bytes of every file the target was made from (manifest, lock, the images/ fragments, the
manifest's patches), buildctl's own code, the configuration and the command's options (together: the
request), the final image's reference and labels, and the warnings the build printed before building.
The next `buildctl build` with the same request first asks ``cached``: when every one of those files
hashes as it did, the final image is tagged in the engine with the same labels (its content key among
them), a completed build of that key is recorded here, and (with a registry) the registry has it, the
plan would say "have" for the final image and "skip" for every other node, so nothing else is asked,
loaded or started: no manifest parse, no graph, no docker-py, no thread, no process.

Anything else (a file that changed or is gone, another engine address kind, an image that is missing or
labelled otherwise, a registry that does not say yes) answers None, and the build goes the full way
(buildctl.services.build), which plans, says why and builds. The memo only ever skips work the plan
would skip; it never decides that something is to be built.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl import untrusted
from buildctl.config import Config
from buildctl.engine import peek
from buildctl.graph.records import RecordStore, state_root
from buildctl.labels import SMOKE_LABEL
from buildctl.safepath import write_atomic

if TYPE_CHECKING:
    from buildctl.builder.state import BuildReport
    from buildctl.services.target import Target

SCHEMA = 1
MEMO_MAX = 16 << 20  # bytes of a memo read at most (it names a stack's files and labels: a few KiB)
_PACKAGE = Path(__file__).resolve().parents[1]  # buildctl/


@dataclass(frozen=True, kw_only=True)
class Request:
    """What `buildctl build` was asked: its options (every one that can change the plan: all but --jobs and
    --quiet; an option added later counts without a change here) and the engine address they resolve to."""

    project: str
    options: tuple[tuple[str, str], ...]  # (name, repr of the value), sorted
    engine: str | None  # the first --engine as given (None: DOCKER_HOST or the local socket)
    address: str  # the address it resolves to: the engine the plan asks


@dataclass(frozen=True, kw_only=True)
class Cached:
    """The answer of a no-op: what `buildctl build` prints and reports, as the full path would."""

    stack: str
    variant: str
    final: str  # the final node's name
    ref: str  # its image reference
    names: tuple[str, ...]  # every node, in the graph's order
    smoke: str  # passed, skipped or not-run
    warnings: tuple[str, ...]  # what the full build warned before building, said again


# options that change no action of the plan (or are not the build's)
_NOT_DECIDING = frozenset({"func", "command", "jobs", "quiet", "project"})


def request(project: Path, options: Mapping[str, object], *, engine: str | None, env: Mapping[str, str]) -> Request:
    opts = tuple(sorted((k, repr(v)) for k, v in options.items() if k not in _NOT_DECIDING))
    return Request(project=str(project), options=opts, engine=engine, address=peek.address(engine, env))


def _code_digest() -> str:
    """sha256 over buildctl's own modules (names and bytes): a change to buildctl can change every key."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                p = os.path.join(root, name)
                with open(p, "rb") as f:
                    data = f.read()
                h.update(f"{os.path.relpath(p, _PACKAGE)}\0{len(data)}\0".encode())
                h.update(data)
    return h.hexdigest()


def _request_digest(req: Request, config: Config) -> str:
    data = {"schema": SCHEMA, "request": asdict(req), "config": repr(config), "code": _code_digest()}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def memo_path(config: Config, digest: str) -> Path:
    """``<cache>/state/noop/<request digest>.json`` (beside the node records; one file per request)."""
    return state_root(config.cache) / "noop" / f"{digest}.json"


def _file_digest(path: str) -> str | None:
    """sha256 of the regular file at ``path`` (None: gone, unreadable, or no regular file). It is opened without
    blocking and checked on what was opened: a manifest replaced by a FIFO (or a link to one, or to /dev/zero: a
    pull request can hold such a link) made a `build` with a memo wait in open forever, or read without end,
    before the manifest's own loader could refuse it."""
    h = hashlib.sha256()
    try:
        with untrusted.open_regular(path) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except (OSError, untrusted.Malformed):
        return None
    return h.hexdigest()


def input_files(project: Path, target: Target) -> list[Path]:
    """Every file the target is made from: its manifest, its lock, the images/ fragments, the patches."""
    from buildctl.lock import lockfile

    files = [target.manifest_path, lockfile.lock_path(target.manifest_path)]
    images = project / "images"  # as services.target.load reads them
    files += [images / name for name in sorted(target.templates.texts)]
    files += [target.manifest_path.parent / p.file for c in target.manifest.components for p in c.patches]
    return files


def remember(req: Request, config: Config, target: Target, report: BuildReport, *, engine: str,
             warnings: Sequence[str] = ()) -> None:
    """After a build that completed on one engine (at address ``engine``, the one its plan asked): what the next
    ``cached`` compares against (written atomically)."""
    from buildctl.graph.graph import shared_labels

    g = target.graph
    final = g.final
    files = {str(p): _file_digest(str(p)) for p in input_files(Path(req.project), target)}
    if any(v is None for v in files.values()):
        return  # a file the target was made from cannot be read again: no memo
    data: dict[str, Any] = {
        "schema": SCHEMA, "files": files, "stack": g.stack, "variant": g.variant, "final": final.name,
        "ref": report.final, "key": final.key, "labels": shared_labels(g, final), "gate": bool(g.gate),
        "names": list(g.names()), "registry": target.registry, "warnings": list(warnings), "engine": engine,
    }
    path = memo_path(config, _request_digest(req, config))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def cached(req: Request, config: Config, env: Mapping[str, str]) -> Cached | None:
    """The no-op answer when the memo of ``req`` holds and the engine confirms it; None: go the full way."""
    try:  # a cache file: a regular one of bounded size and depth (100,000 '[' was json's RecursionError), or none
        data = untrusted.loads(untrusted.read_regular(memo_path(config, _request_digest(req, config)), MEMO_MAX))
    except (OSError, ValueError):
        return None
    try:
        if data.get("schema") != SCHEMA:
            return None
        files: dict[str, str] = data["files"]
        if not files or any(_file_digest(p) != digest for p, digest in files.items()):
            return None
        stack, variant, final, ref, key = (str(data[k]) for k in ("stack", "variant", "final", "ref", "key"))
        if not RecordStore(state_root(config.cache)).has(stack, variant, final, key):
            return None
        path = peek.socket_path(str(data["engine"]), env)  # the engine the full way asked for this request
        labels = peek.image_labels(path, ref, timeout=config.network_timeout)
        want: dict[str, str] = data["labels"]
        if labels is None or any(labels.get(k) != v for k, v in want.items()):
            return None
        if data["registry"] is not None and not peek.in_registry(path, ref, timeout=config.network_timeout):
            return None
        smoke = "not-run"
        if data["gate"]:
            smoke = "skipped" if labels.get(SMOKE_LABEL) == "skipped" else "passed"
        return Cached(stack=stack, variant=variant, final=final, ref=ref, names=tuple(data["names"]), smoke=smoke,
                      warnings=tuple(str(w) for w in data["warnings"]))
    except (KeyError, TypeError, AttributeError, peek.Unsure):
        return None
