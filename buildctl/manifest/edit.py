"""Edits of a manifest's text that keep everything else as written: one scalar value replaced in place.

`buildctl bump` writes a component's new commit into pins/STACK.yaml. Re-dumping the YAML would lose the
comments, the key order, the flow mappings and the quoting a person chose; instead the value is located
in the text (the composed YAML node's start and end marks, as the loader reads them) and only its
characters are replaced, keeping its quoting style. Every other byte of the file stays, so the diff
shows exactly the lines whose values changed.

Refused (ManifestError naming file, line and key): a key that is not there, a value that is not a single
plain or quoted scalar (a block scalar, a list, a mapping), and a value shared through a YAML anchor
(editing the anchor would change every place that uses it). The new value must be a plain token (a SHA,
a version: letters, digits and ``. _ + - /``); it is quoted when YAML would read it as anything but that
string (an all-digit SHA), or when the old value was quoted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from buildctl.errors import Location, ManifestError

TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,199}")

KeyPath = Sequence[str]


@dataclass(frozen=True, kw_only=True)
class Span:
    """Where a scalar value sits in the text: [start, end) character offsets, its 1-based line and column,
    and how it is quoted (``""`` plain, ``"'"`` or ``'"'``)."""

    start: int
    end: int
    line: int
    column: int
    style: str


def _compose(text: str, filename: str) -> yaml.Node:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ManifestError(Location(file=filename), f"cannot read YAML to edit it: {exc}") from None
    if root is None:
        raise ManifestError(Location(file=filename), "the manifest is empty")
    return root


def _uses(root: yaml.Node, target: yaml.Node) -> int:
    """How many times ``target`` is reached from ``root`` (more than once: it is shared through an alias)."""
    count = 0
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is target:
            count += 1
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += list(node.value)
    return count


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    """The value under ``key`` of a mapping, or the item of a list of mappings whose ``name`` is ``key``."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                found: yaml.Node = v
                return found
        return None
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            name = _child(item, "name") if isinstance(item, yaml.MappingNode) else None
            if isinstance(name, yaml.ScalarNode) and name.value == key:
                hit: yaml.Node = item
                return hit
    return None


def locate(text: str, path: KeyPath, filename: str) -> Span:
    """The span of the scalar at ``path`` (keys from the top, e.g. components, fastmath, commit)."""
    root = _compose(text, filename)
    node = root
    dotted = ""
    for key in path:
        dotted = f"{dotted}.{key}" if dotted else key
        found = _child(node, key)
        if found is None:
            mark = node.start_mark
            raise ManifestError(Location(file=filename, line=mark.line + 1, column=mark.column + 1, key=dotted),
                                f"no key {key!r} here to edit")
        node = found
    mark = node.start_mark
    where = Location(file=filename, line=mark.line + 1, column=mark.column + 1, key=dotted)
    if not isinstance(node, yaml.ScalarNode):
        raise ManifestError(where, "expected a single value to edit, got a list or mapping")
    if node.style not in (None, "'", '"'):
        raise ManifestError(where, "the value is a block scalar (| or >): it cannot be edited in place",
                            fix="write it as a plain value on one line")
    if _uses(root, node) > 1:
        raise ManifestError(where, "the value is shared through a YAML anchor: editing it would change every "
                                   "place that uses it", fix="write the value out where it is used")
    if node.start_mark.line != node.end_mark.line:
        raise ManifestError(where, "the value spans more than one line: it cannot be edited in place")
    return Span(start=node.start_mark.index, end=node.end_mark.index, line=mark.line + 1, column=mark.column + 1,
                style=node.style or "")


def _reads_as_itself(value: str) -> bool:
    try:
        return bool(yaml.safe_load(value) == value)
    except yaml.YAMLError:
        return False


def render(value: str, style: str) -> str:
    """``value`` written in ``style`` (quoted when plain YAML would read it as a number, a boolean, ...)."""
    if not TOKEN.fullmatch(value):
        raise ValueError(f"refusing to write {value!r} into a manifest: only letters, digits and . _ + - / are "
                         "written by an edit")
    if style == "'":
        return f"'{value}'"
    if style == '"' or not _reads_as_itself(value):
        return f'"{value}"'
    return value


@dataclass(frozen=True, kw_only=True)
class Edit:
    path: tuple[str, ...]
    value: str


def apply(text: str, edits: Sequence[Edit], filename: str) -> str:
    """``text`` with each edit's scalar replaced (all located in the original text, then applied from the end),
    checked: the result reads back with the new values, and only the edited lines differ."""
    spans = [(locate(text, e.path, filename), e) for e in edits]
    starts = sorted(s.start for s, _ in spans)
    if len(set(starts)) != len(starts):
        raise ValueError("two edits of the same value")
    out = text
    for span, e in sorted(spans, key=lambda p: p[0].start, reverse=True):
        out = out[:span.start] + render(e.value, span.style) + out[span.end:]
    for e in edits:
        got = locate(out, e.path, filename)
        if yaml.safe_load(out[got.start:got.end]) != e.value:  # pragma: no cover - render guarantees it
            raise ValueError(f"{'.'.join(e.path)} does not read back as {e.value!r} after the edit")
    before, after = text.splitlines(keepends=True), out.splitlines(keepends=True)
    edited = {s.line - 1 for s, _ in spans}
    if len(before) != len(after) or any(a != b for i, (a, b) in enumerate(zip(before, after, strict=True))
                                        if i not in edited):  # pragma: no cover - a span is on one line
        raise ValueError("an edit changed lines other than its own")
    return out


def changed_lines(before: str, after: str) -> list[int]:
    """1-based numbers of the lines that differ (both texts with the same number of lines)."""
    a, b = before.splitlines(), after.splitlines()
    if len(a) != len(b):
        raise ValueError("the texts have different numbers of lines")
    return [i + 1 for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
