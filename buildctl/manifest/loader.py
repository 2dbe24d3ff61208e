"""The YAML -> dataclass loader: driven by the model's own annotations, every problem reported with file:line:col.

It reports every problem it can find in one pass (``ManifestErrors``), each naming file, line, column and
key path, what was expected, and the closest known key for a misspelt one; YAML aliases are bounded
(``expansion_problem``) before anything is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from buildctl import syntax
from buildctl.errors import Location, ManifestError
from buildctl.manifest import model
from buildctl.manifest.fields import (
    FIELD_RULES,
    MAX_DEPTH,
    MAX_EXPANDED_NODES,
    NAME_RE,
    NUMBER_RULES,
    PR_NUMBER_MAX,
    FieldRule,
)
from buildctl.manifest.model import (
    AptPackage,
    Arg,
    Manifest,
    PipRequirement,
    PullRequest,
)


class _Invalid:
    """Marks a value that failed to convert (the error is already recorded)."""


INVALID: Any = _Invalid()


def _key_join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(model))
    return _HINTS[cls]


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if hint is str:
        return "a string"
    if hint is int:
        return "an integer"
    if hint is bool:
        return "true or false"
    if hint is float:
        return "a number"
    if _is_dataclass_type(hint):
        return "a mapping"
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (tuple, list):
        return "a list"
    if origin in (Mapping, dict) or hint is Mapping:
        return "a mapping"
    return str(hint)


class Loader:
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.errors: list[ManifestError] = []
        self._scalar = yaml.SafeLoader("")
        self.field_at: dict[int, dict[str, Location]] = {}
        self.keep: list[object] = []  # the objects field_at is keyed by (ids stay unique while they live)

    def at(self, obj: Any, fname: str) -> Location:
        """The location of ``obj``'s key ``fname`` (the object's own location when the key was not written)."""
        found = self.field_at.get(id(obj), {}).get(fname)
        if found is not None:
            return found
        at = getattr(obj, "at", None)
        return at if isinstance(at, Location) else Location(file=self.filename)

    # -- reporting

    def loc(self, node: yaml.Node | None, key: str) -> Location:
        if node is None:
            return Location(file=self.filename, key=key)
        mark = node.start_mark
        return Location(file=self.filename, line=mark.line + 1, column=mark.column + 1, key=key)

    def error(self, node: yaml.Node | None, key: str, what: str, *, fix: str = "") -> Any:
        self.errors.append(ManifestError(self.loc(node, key), what, fix=fix))
        return INVALID

    # -- scalars

    def scalar(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            return self.error(node, key, f"expected a single value, got {kind}")
        try:
            return self._scalar.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            return self.error(node, key, f"cannot read this value: {getattr(exc, 'problem', exc)}")
        except ValueError as exc:  # an integer of more digits than int() converts (sys.get_int_max_str_digits)
            return self.error(node, key, f"cannot read this value: {exc}")

    def pairs(self, node: yaml.MappingNode, key: str) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
        """(key text, key node, value node) for each entry; reports non-string and duplicate keys."""
        seen: dict[str, yaml.Node] = {}
        for knode, vnode in node.value:
            k = self.scalar(knode, key)
            if k is INVALID:
                continue
            if isinstance(k, bool) or k is None or not isinstance(k, str | int | float):
                self.error(knode, key, f"keys must be strings, got {k!r}")
                continue
            text = str(k)
            if text in seen:
                first = seen[text].start_mark.line + 1
                self.error(knode, _key_join(key, text), f"duplicate key {text!r} (first given on line {first})")
                continue
            seen[text] = knode
            yield text, knode, vnode

    # -- the generic converter

    def convert(self, node: yaml.Node, wanted: Any, key: str, depth: int = 0, name: str | None = None,
                field: tuple[str, str] | None = None) -> Any:
        """``field``: (class name, field name) of the dataclass field this value is for (its syntax rule)."""
        if depth > MAX_DEPTH:
            return self.error(node, key, "nested too deeply (a recursive YAML alias?)")
        origin = typing.get_origin(wanted)
        args = typing.get_args(wanted)

        if origin in (typing.Union, types.UnionType):
            non_none = [a for a in args if a is not type(None)]
            if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                return None
            return self.convert(node, non_none[0], key, depth, name, field)

        if wanted is PipRequirement:
            return self.requirement(node, key)
        if wanted is AptPackage:
            return self.apt_package(node, key, depth)
        if wanted is Arg:
            return self.arg(node, key)
        if wanted is PullRequest and isinstance(node, yaml.ScalarNode):
            n = self.scalar(node, key)
            if isinstance(n, int) and not isinstance(n, bool):
                if not 0 < n <= PR_NUMBER_MAX:
                    return self.error(node, key, f"PR number {n} must be between 1 and {PR_NUMBER_MAX}")
                return PullRequest(number=n, at=self.loc(node, key))
            if n is INVALID:
                return INVALID
            return self.error(node, key, f"expected a PR number or {{number: N, head: SHA}}, got {n!r}")
        if _is_dataclass_type(wanted):
            return self.dataclass(node, wanted, key, depth, name)

        if origin is tuple:
            item = args[0]
            if isinstance(node, yaml.MappingNode) and _is_dataclass_type(item) and "name" in _hints(item):
                return self.named_mapping(node, item, key, depth)
            if not isinstance(node, yaml.SequenceNode):
                if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                    return ()
                hint = " keyed by name" if _is_dataclass_type(item) and "name" in _hints(item) else ""
                return self.error(node, key, f"expected a list{hint}, got {self._kind(node)}")
            out = [self.convert(n, item, _key_join(key, i), depth + 1, field=field) for i, n in enumerate(node.value)]
            return INVALID if any(v is INVALID for v in out) else tuple(out)

        if origin in (Mapping, dict) or wanted is Mapping:
            vtype = args[1] if args else str
            if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                return {}
            if not isinstance(node, yaml.MappingNode):
                return self.error(node, key, f"expected a mapping, got {self._kind(node)}")
            result: dict[str, Any] = {}
            bad = False
            key_rule = FIELD_RULES.get(field, FieldRule()).key if field else None
            for k, knode, vnode in self.pairs(node, key):
                problem = (key_rule or syntax.text)(k)
                if problem:
                    self.error(knode, _key_join(key, k), f"the key {k!r} {problem}")
                    bad = True
                    continue
                v = self.convert(vnode, vtype, _key_join(key, k), depth + 1, name=k, field=field)
                bad = bad or v is INVALID
                result[k] = v
            return INVALID if bad else result

        value = self.scalar(node, key)
        if value is INVALID:
            return INVALID
        if origin is typing.Literal:
            if value in args:
                return value
            return self.error(node, key, f"expected {_type_name(wanted)}, got {value!r}", fix=self._closest(value, args))
        if isinstance(wanted, type) and issubclass(wanted, Enum):
            values = [m.value for m in wanted]
            if value in values:
                return wanted(value)
            return self.error(node, key, f"expected {_type_name(wanted)}, got {value!r}", fix=self._closest(value, values))
        if wanted is bool:
            if isinstance(value, bool):
                return value
        elif wanted is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return self.number(node, key, value, field)
        elif wanted is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self.number(node, key, value, field, as_float=True)
        elif wanted is str:
            if isinstance(value, int | float) and not isinstance(value, bool):
                # The text as written: YAML would read 9.10 as 9.1, 0755 as 493 and an all-digit SHA as a number.
                value = str(node.value)
            if isinstance(value, str):
                return self.string(node, key, value, field)
            if isinstance(value, bool):
                return self.error(node, key, f"expected a string, got the boolean {node.value!r}",
                                  fix=f"quote it (\"{node.value}\") if you mean the text")
        return self.error(node, key, f"expected {_type_name(wanted)}, got {value!r}")

    def string(self, node: yaml.Node, key: str, value: str, field: tuple[str, str] | None) -> Any:
        rule = FIELD_RULES.get(field, FieldRule()).value if field else None
        if value == "":  # nothing to inject; a required field left empty is reported as such by the caller
            return value
        problem = (rule or syntax.text)(value)
        if problem:
            shown = value if len(value) <= 80 else value[:77] + "..."
            return self.error(node, key, f"{shown!r} {problem}")
        return value

    def number(self, node: yaml.Node, key: str, value: float, field: tuple[str, str] | None, *,
               as_float: bool = False) -> Any:
        bounds = NUMBER_RULES.get(field) if field else None
        if isinstance(value, float) or bounds or as_float:
            low, high = bounds or (-1e18, 1e18)
            try:
                as_number = float(value)
            except OverflowError:  # an integer past float's range (309 digits or more): float() cannot take it
                digits = len(str(abs(int(value))))
                return self.error(node, key, f"must be more than {low:g} and at most {high:g}, got a number of {digits} digits")
            problem = syntax.finite(as_number, low=low, high=high)
            if problem:
                return self.error(node, key, problem)
            return as_number if as_float else value
        return value

    @staticmethod
    def _kind(node: yaml.Node) -> str:
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        return f"the value {node.value!r}"

    @staticmethod
    def _closest(word: object, choices: Any) -> str:
        match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
        return f"did you mean {match[0]!r}?" if match else ""

    def dataclass(self, node: yaml.Node, cls: type, key: str, depth: int, name: str | None) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return self.error(node, key, f"expected a mapping, got {self._kind(node)}")
        hints = _hints(cls)
        loader_set = ("at", "path") if cls is Manifest else ("at",)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in loader_set}
        settable = set(fields) - ({"name"} if name is not None else set())
        kwargs: dict[str, Any] = {}
        vnodes: dict[str, yaml.Node] = {}
        bad = False
        for k, knode, vnode in self.pairs(node, key):
            if k not in settable:
                fix = self._closest(k, settable) or f"known keys: {', '.join(sorted(settable))}"
                self.error(knode, _key_join(key, k), f"unknown key {k!r}", fix=fix)
                bad = True
                continue
            v = self.convert(vnode, hints[k], _key_join(key, k), depth + 1, field=(cls.__name__, k))
            bad = bad or v is INVALID
            kwargs[k] = v
            vnodes[k] = vnode
        if name is not None and "name" in fields:
            kwargs["name"] = name
        for fname, f in fields.items():
            if fname in kwargs:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and (
                    kwargs[fname] in ("", (), {}, None)
                ):
                    self.error(vnodes.get(fname, node), _key_join(key, fname), f"required key {fname!r} is empty")
                    bad = True
                continue
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.error(node, _key_join(key, fname), f"missing required key {fname!r} ({_type_name(hints[fname])})")
                bad = True
        if bad:
            return INVALID
        kwargs["at"] = self.loc(node, key)
        try:
            obj = cls(**kwargs)
        except (TypeError, ValueError) as exc:  # pragma: no cover - guarded by the checks above
            return self.error(node, key, f"invalid entry: {exc}")
        # where each key of this mapping sits, so that semantic checks point at the key, not the mapping
        self.field_at[id(obj)] = {k: self.loc(vnodes[k], _key_join(key, k)) for k in vnodes}
        self.keep.append(obj)
        return obj

    def named_mapping(self, node: yaml.MappingNode, item: type, key: str, depth: int) -> Any:
        out = []
        for k, knode, vnode in self.pairs(node, key):
            if not NAME_RE.match(k):
                self.error(knode, _key_join(key, k), f"invalid name {k!r}",
                           fix="use lower-case letters, digits, '.', '_' and '-'")
                out.append(INVALID)
                continue
            out.append(self.convert(vnode, item, _key_join(key, k), depth + 1, name=k))
        return INVALID if any(v is INVALID for v in out) else tuple(out)

    # -- special forms

    def requirement(self, node: yaml.Node, key: str) -> Any:
        text = self.scalar(node, key)
        if text is INVALID:
            return INVALID
        if not isinstance(text, str) or not text.strip():
            return self.error(node, key, f"expected a requirement such as 'name==1.2.3', got {text!r}")
        problem = syntax.control(text)
        if problem:
            return self.error(node, key, f"{text!r} {problem}")
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            return self.error(node, key, f"invalid pip requirement {text!r}: {exc}",
                              fix="write it as PEP 508 demands, e.g. 'black==24.4.2' or 'numpy<2.0.0'")
        if req.url:
            return self.error(node, key, f"{text!r} is a direct URL requirement",
                              fix="declare it under downloads: with a sha256 and install the file")
        if req.marker is not None:
            # The lock resolves one set of pins per variant inside its base; a marker would be dropped there,
            # installing (or leaving out) the package on every platform whatever it says.
            return self.error(node, key, f"{text!r} has an environment marker ({req.marker}), which buildctl "
                              "does not evaluate", fix="remove the marker; a package only some variants need "
                              "belongs in those variants' own manifest entries")
        return PipRequirement(text=text, name=canonicalize_name(req.name), specifier=str(req.specifier),
                              at=self.loc(node, key))

    def apt_package(self, node: yaml.Node, key: str, depth: int) -> Any:
        if isinstance(node, yaml.MappingNode):
            return self.dataclass(node, AptPackage, key, depth, None)
        text = self.scalar(node, key)
        if text is INVALID:
            return INVALID
        if not isinstance(text, str) or not text.strip():
            return self.error(node, key, f"expected an apt package 'name' or 'name=version', got {text!r}")
        name, _, version = text.partition("=")
        if not re.match(r"^[a-z0-9][a-z0-9+.-]+\Z", name):
            return self.error(node, key, f"invalid apt package name {name!r}")
        if "=" in text and not re.match(r"^[A-Za-z0-9.+~:*-]+\Z", version):
            return self.error(node, key, f"invalid apt version {version!r} for {name}")
        return AptPackage(name=name, version=version or "*", at=self.loc(node, key))

    def arg(self, node: yaml.Node, key: str) -> Any:
        if isinstance(node, yaml.MappingNode):
            if len(node.value) != 1:
                return self.error(node, key, "expected one '--flag: value' entry per list item")
            knode, vnode = node.value[0]
            flag = self.scalar(knode, key)
            vnodes = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
            if flag is INVALID:
                return INVALID
            if not vnodes or any(not isinstance(v, yaml.ScalarNode) or v.tag == "tag:yaml.org,2002:null"
                                 for v in vnodes):
                return self.error(vnode, key, f"{flag}: expected a value or a list of values")
            # The text exactly as written: YAML would turn 3.9e-6 into 3.9e-06 and 1e-4 into a string anyway.
            text_vals = tuple(str(v.value) for v in vnodes)
            if not isinstance(flag, str) or not flag.startswith("-"):
                return self.error(knode, key, f"expected a flag starting with '-', got {flag!r}")
            problem = syntax.flag(flag)
            if problem:
                return self.error(knode, key, f"{flag!r} {problem}")
            for vn, tv in zip(vnodes, text_vals, strict=True):
                problem = syntax.text(tv)
                if problem:
                    return self.error(vn, key, f"{flag}: the value {tv!r} {problem}")
            return Arg(flag=flag, values=text_vals, bare=False, at=self.loc(node, key))
        flag = self.scalar(node, key)
        if flag is INVALID:
            return INVALID
        if not isinstance(flag, str) or not flag.startswith("-"):
            return self.error(node, key, f"expected a flag starting with '-', got {flag!r}",
                              fix="a flag with a value is written '- --flag: value'")
        if " " in flag.strip():
            return self.error(node, key, f"{flag!r} holds a space",
                              fix="write a flag with a value as '- --flag: value'")
        problem = syntax.flag(flag)
        if problem:
            return self.error(node, key, f"{flag!r} {problem}")
        return Arg(flag=flag, at=self.loc(node, key))




# -------------------------------------------------------------------------------------------- aliases


def expansion_problem(root: yaml.Node, filename: str, limit: int = MAX_EXPANDED_NODES) -> ManifestError | None:
    """An error when the document, with every alias expanded, holds more than ``limit`` values, or an alias
    refers to a node that contains it. Counted on the composed graph in time linear in its distinct nodes."""
    size: dict[int, int] = {}
    uses: dict[int, int] = {}
    nodes: dict[int, yaml.Node] = {}
    on_path: set[int] = set()
    # iterative post-order walk: a deep document must not exhaust Python's stack
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        i = id(node)
        if done:
            on_path.discard(i)
            children = _children(node)
            size[i] = min(limit + 1, 1 + sum(size[id(c)] for c in children))
            continue
        uses[i] = uses.get(i, 0) + 1
        if i in on_path:
            return ManifestError(Location(file=filename, line=node.start_mark.line + 1,
                                          column=node.start_mark.column + 1),
                                 "a YAML alias refers to a node that contains it (a recursive alias)")
        if i in size:
            continue
        nodes[i] = node
        on_path.add(i)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(_children(node)))
    total = size[id(root)]
    if total <= limit:
        return None
    # point at the anchored node that costs most (its expansion times its uses)
    shared = [(size[i] * uses[i], i) for i in size if uses[i] > 1]
    worst = nodes[max(shared)[1]] if shared else root
    mark = worst.start_mark
    return ManifestError(
        Location(file=filename, line=mark.line + 1, column=mark.column + 1),
        f"the document expands to more than {limit:,} values through YAML aliases",
        why="each use of an alias (*name) copies the anchored value; a few aliases of a large one make a huge "
            "document out of a small file", fix="write the values out, or use fewer aliases of large anchors")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


