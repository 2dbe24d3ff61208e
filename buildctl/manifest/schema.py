"""The manifest reference, read from the model: every key a manifest may hold, its type, default and doc.

``fields()`` walks ``model.Manifest`` as the loader reads it (a list of named values is written as a mapping
keyed by name; a requirement, an apt package and a launch argument have short forms of their own), so that
`buildctl pins schema` and the pages under docs/reference/manifest/ (scripts/gendocs.py) say what the loader
takes and cannot drift from it. The docs are the ``doc`` metadata of the model's fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Any

from buildctl.manifest import model

# Top-level keys by the page of the reference they are listed on (docs/reference/manifest/<group>.md).
GROUPS: Mapping[str, tuple[str, ...]] = {
    "stack": ("schema", "stack", "description", "base", "env", "cleanup"),
    "variants": ("variants",),
    "system": ("apt", "downloads", "pip", "remove", "protect", "cudnn"),
    "components": ("components",),
    "entrypoint": ("entrypoint",),
    "smoke-and-push": ("smoke", "push", "budget", "repro"),
}

# Values with a short form of their own (the loader's special forms): listed as one key, not walked into.
SHORT_FORMS: Mapping[type, str] = {
    model.PipRequirement: "a PEP 508 requirement, e.g. 'six==1.16.0' (no URL, no marker)",
    model.Arg: "'--flag', '--flag: value' or '--flag: [v1, v2]', the text kept exactly as written",
    model.AptPackage: "'name' or 'name=version' (an exact version, or a pattern with * the lock resolves)",
}
DEPTH = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldDoc:
    """One key of a manifest: its dotted path (``<name>`` where a mapping is keyed by a name the author picks,
    ``<key>`` by a key such as a platform, ``[]`` for a list item), its type in words, its default (""
    when required) and what it means."""

    path: str
    kind: str
    default: str
    doc: str


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0], len(rest) < len(typing.get_args(hint))
    return hint, False


def _named(item: Any) -> bool:
    return dataclasses.is_dataclass(item) and item not in SHORT_FORMS and "name" in _hints(item)


def type_name(hint: Any) -> str:
    """A type as a manifest's author reads it ("a list of strings", "one of 'keep', 'unset'", ...)."""
    inner, optional = _optional(hint)
    if optional:
        return f"{type_name(inner)}, or null"
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    words = {str: "a string", int: "an integer", bool: "true or false", float: "a number"}
    if inner in words:
        return words[inner]
    if inner in SHORT_FORMS:
        return "a string or a mapping" if inner is model.AptPackage else "a string"
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return "a mapping"
    if isinstance(inner, type) and issubclass(inner, Enum):
        return "one of " + ", ".join(repr(m.value) for m in inner)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        if _named(args[0]):
            return "a mapping of name -> mapping"
        return "a list of " + _plural(args[0])
    if origin in (Mapping, dict):
        return "a mapping of key -> " + type_name(args[1]).removeprefix("a ").removeprefix("an ")
    return str(inner)


def _plural(item: Any) -> str:
    if item is model.AptPackage:
        return "strings or mappings"
    one = type_name(item)
    if one.startswith("one of "):
        return "values, each " + one
    return one.removeprefix("a ").removeprefix("an ") + "s"


def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(model))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return repr(value.value)
    if dataclasses.is_dataclass(value):
        return "(each key's default)"
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value)


def _class_doc(cls: Any) -> str:
    """The first paragraph of a class's own docstring (a dataclass without one has its signature there)."""
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def _child(path: str, hint: Any) -> tuple[Any, str] | None:
    """The dataclass a key's value is made of, and the path of its keys (None: a value with no keys)."""
    inner, _ = _optional(hint)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if dataclasses.is_dataclass(inner) and inner not in SHORT_FORMS:
        return inner, path
    if origin is tuple and args and dataclasses.is_dataclass(args[0]) and args[0] not in SHORT_FORMS:
        return args[0], f"{path}.<name>" if _named(args[0]) else f"{path}[]"
    if origin in (Mapping, dict) and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1], f"{path}.<key>"
    return None


def _doc(f: dataclasses.Field[Any], hint: Any) -> str:
    doc = str(f.metadata.get("doc", ""))
    if doc:
        return doc
    inner, _ = _optional(hint)
    args = typing.get_args(inner)
    item = args[0] if typing.get_origin(inner) is tuple and args else inner
    if item in SHORT_FORMS:
        return SHORT_FORMS[item]
    child = _child("", hint)
    if child is not None:
        return _class_doc(child[0])
    return _class_doc(inner) if isinstance(inner, type) and issubclass(inner, Enum) else ""


def fields(cls: Any = model.Manifest, prefix: str = "", depth: int = 0) -> Iterator[FieldDoc]:
    """Every key of ``cls`` as a manifest writes it, depth first, in the model's order."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "at" or (f.name == "path" and cls is model.Manifest) or (
                f.name == "name" and prefix.endswith(".<name>")):
            continue  # the loader sets these (as it does: loader.Loader.dataclass); a named value's name is its key
        path = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        yield FieldDoc(path=path, kind=type_name(hint), default=_default(f), doc=_doc(f, hint))
        child = _child(path, hint)
        if child is not None and depth < DEPTH:
            yield from fields(child[0], child[1], depth + 1)


def group_of(path: str) -> str:
    """The reference page a key is listed on."""
    top = path.split(".")[0].split("[")[0]
    return next(g for g, keys in GROUPS.items() if top in keys)


def text() -> str:
    """`buildctl pins schema`: one key a line with its type and default, then what it means."""
    lines = []
    for d in fields():
        default = f", default {d.default}" if d.default else ", required"
        lines.append(f"{d.path}: {d.kind}{default}" + (f"\n    {d.doc}" if d.doc else ""))
    return "\n".join(lines) + "\n"
