"""What each node was built from: one small record per node, so that a plan can say why a key moved.

Also the wheel cache as the plan asks it (``WheelFolder``). Layout: ``<cache>/state/<stack>/<variant>/<node>.json`` (schema 1, canonical JSON, written atomically
after the node's image was built and normalised, before it is tagged), plus ``keys/<node>/<key>``, one
empty file per key ever completed here: a local tag counts only when its key has one (``has``). A record holds the node's key, its parents' keys, its
template digest and its own inputs: the plan diffs the current inputs against it, input by input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl import untrusted
from buildctl.config import CacheLayout
from buildctl.safepath import write_atomic

if TYPE_CHECKING:  # types only: a no-op build (services.noop) asks RecordStore.has without the graph
    from buildctl.graph.graph import Graph, Node

SCHEMA = 1


def state_root(cache: CacheLayout) -> Path:
    """Where the records live: ``<cache>/state`` (beside logs, wheels and reports)."""
    return cache.root / "state"


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    node: str
    kind: str
    key: str
    parents: Mapping[str, str]  # parent name -> its key when this node was built
    template: str
    inputs: Mapping[str, Any]
    built_at: str = ""  # informational
    engine: str = ""  # informational: which engine built it
    backend: str = ""  # informational: how (classic or buildkit; "" for a pull, or a record from before backends)
    # informational, compiles only: the compiler calls served from the compiler cache and those it missed
    # (None: no cache, a pull, or a record from before the cache)
    cache_hits: int | None = None
    cache_misses: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "node": self.node, "kind": self.kind, "key": self.key,
                "parents": dict(self.parents), "template": self.template, "inputs": self.inputs,
                "built_at": self.built_at, "engine": self.engine, "backend": self.backend,
                **({} if self.cache_hits is None or self.cache_misses is None
                   else {"cache_hits": self.cache_hits, "cache_misses": self.cache_misses})}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> NodeRecord:
        return NodeRecord(node=data["node"], kind=data["kind"], key=data["key"], parents=dict(data["parents"]),
                          template=data["template"], inputs=data["inputs"], built_at=data.get("built_at", ""),
                          engine=data.get("engine", ""), backend=data.get("backend", ""),
                          cache_hits=untrusted.count(data.get("cache_hits")), cache_misses=untrusted.count(data.get("cache_misses")))

    @staticmethod
    def of(graph: Graph, node: Node, *, built_at: str = "", engine: str = "", backend: str = "",
           cache_hits: int | None = None, cache_misses: int | None = None) -> NodeRecord:
        return NodeRecord(node=node.name, kind=node.kind, key=node.key,
                          parents={p: graph.node(p).key for p in node.parents}, template=node.template,
                          inputs=node.inputs, built_at=built_at, engine=engine, backend=backend,
                          cache_hits=cache_hits, cache_misses=cache_misses)


RECORD_MAX = 16 << 20  # bytes of one record read at most (a node's inputs: a few KiB, a Dockerfile's text at most)


def _well_typed(data: Mapping[str, Any]) -> bool:
    """Whether a record's fields have the types NodeRecord and the plan's reasons take (strings, a map of parent
    names to keys, an object of inputs); the counts are checked by ``untrusted.count``."""
    texts = all(isinstance(data.get(k), str) for k in ("node", "kind", "key", "template")) and all(
        isinstance(data.get(k, ""), str) for k in ("built_at", "engine", "backend"))
    parents = data.get("parents")
    return (texts and isinstance(data.get("inputs"), dict) and isinstance(parents, dict)
            and all(isinstance(v, str) for v in parents.values()))


class RecordStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, stack: str, variant: str, node: str) -> Path:
        return self.root / stack / variant / f"{node.replace(':', '-')}.json"

    def load(self, stack: str, variant: str, node: str) -> NodeRecord | None:
        """The record, or None when there is none (or it cannot be read: it only explains, never decides).

        Read as untrusted (a hand-edited or damaged cache): a regular file of at most RECORD_MAX bytes, opened
        without blocking (a FIFO there made `plan` wait forever), JSON bounded in depth (100,000 '[' was
        json's RecursionError, a traceback), each field of its type (``"parents": {"a": 5}`` ended the plan's
        reasons in a TypeError)."""
        try:
            data = untrusted.loads(untrusted.read_regular(self.path(stack, variant, node), RECORD_MAX))
            if not isinstance(data, dict) or data.get("schema") != SCHEMA or not _well_typed(data):
                return None
            return NodeRecord.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def load_all(self, graph: Graph) -> dict[str, NodeRecord]:
        out = {}
        for n in graph.nodes:
            r = self.load(graph.stack, graph.variant, n.name)
            if r is not None:
                out[n.name] = r
        return out

    def _key_mark(self, stack: str, variant: str, node: str, key: str) -> Path:
        return self.root / stack / variant / "keys" / node.replace(":", "-") / key

    def has(self, stack: str, variant: str, node: str, key: str) -> bool:
        """Whether a build (or pull) of ``node`` with ``key`` completed here and was recorded."""
        if self._key_mark(stack, variant, node, key).is_file():
            return True
        record = self.load(stack, variant, node)
        return record is not None and record.key == key

    def save(self, stack: str, variant: str, record: NodeRecord) -> None:
        mark = self._key_mark(stack, variant, record.node, record.key)
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
        write_atomic(self.path(stack, variant, record.node),
                     json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")


class WheelFolder:
    """The wheel cache as the plan asks it (plan.WheelCache): ``<cache>/wheels/<component>/<key>/`` holds the
    one wheel compiled for that key (moved there whole by the build, or not at all)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find(self, node: Node) -> Path | None:
        if node.kind != "wheel" or not node.component:
            return None
        folder = self.root / node.component / node.key
        found = sorted(folder.glob("*.whl")) if folder.is_dir() else []
        return found[0] if len(found) == 1 else None
