"""Pin manifests: YAML -> frozen dataclasses (buildctl.manifest.model), with errors that point at file:line:col.

The loader is driven by the dataclasses' own type annotations, so the schema is written once.
It reports every problem it can find in one pass (``ManifestErrors``), each naming file, line,
column and key path, what was expected, and the closest known key for a misspelt one.
No input, however malformed, makes it raise anything but ``ManifestError``/``ManifestErrors``.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import hashlib
import re
import types
import typing
import urllib.parse
from collections.abc import Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from buildctl import syntax
from buildctl.errors import Location, ManifestError, ManifestErrors, UsageError
from buildctl.graph.entrypoint import BASE_PROFILE, TORCHRUN_OWNED, arg_key, profile_start
from buildctl.manifest import model
from buildctl.manifest.model import (
    NOWHERE,
    SHA256_COMPUTE,
    SMOKE_CHECKS,
    AptPackage,
    Arg,
    GpuTier,
    InstallKind,
    Manifest,
    PipRequirement,
    PullRequest,
)

SHA_RE = syntax.SHA_RE
SHA256_RE = syntax.SHA256_RE
NAME_RE = syntax.NAME_RE
OPTION_RE = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$")  # an option as entrypoint.drop names it (no '=value')
PLATFORMS = ("linux/amd64", "linux/arm64")
MAX_DEPTH = 40
# YAML aliases let a small file stand for a huge document (a 10,000-item list aliased 10,000 times is
# 10^8 values in 114 KB); the loader counts the values a document expands to and refuses past this.
MAX_EXPANDED_NODES = 200_000
PR_NUMBER_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class FieldRule:
    """The syntax of one field: ``value`` for a string (or each string of a list / mapping), ``key`` for the
    keys of a mapping field."""

    value: syntax.Rule | None = None
    key: syntax.Rule | None = None


def _download_sha(v: str) -> str | None:
    return None if v == SHA256_COMPUTE else syntax.sha256_hex(v)


# (class name, field) -> rule. A string field not named here may still hold any one-line text (no control
# characters); each such field is quoted where it is used (buildctl/quoting.py).
FIELD_RULES: Mapping[tuple[str, str], FieldRule] = {
    ("Manifest", "stack"): FieldRule(value=syntax.name),
    ("Manifest", "description"): FieldRule(value=syntax.prose),
    ("Manifest", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("Manifest", "cleanup"): FieldRule(value=syntax.abs_glob),
    ("BaseSpec", "alias"): FieldRule(value=syntax.name),
    ("BaseSpec", "description"): FieldRule(value=syntax.prose),
    ("BaseContract", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("BaseContract", "env_prefix"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("BaseContract", "env_present"): FieldRule(value=syntax.env_name),
    ("BaseContract", "python"): FieldRule(value=syntax.version),
    ("BaseContract", "torch"): FieldRule(value=syntax.text),
    ("BaseContract", "torch_cuda"): FieldRule(value=syntax.version),
    ("BaseContract", "cudnn"): FieldRule(value=syntax.version),
    ("Variant", "description"): FieldRule(value=syntax.prose),
    ("Variant", "image"): FieldRule(value=syntax.image),
    ("Variant", "cuda"): FieldRule(value=syntax.version),
    ("Variant", "python"): FieldRule(value=syntax.version),
    ("Variant", "components"): FieldRule(key=syntax.name),
    ("ComponentOverride", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("AptRepo", "lines"): FieldRule(value=syntax.apt_line),
    ("AptRepo", "keyring"): FieldRule(value=syntax.name),
    ("AptPackage", "name"): FieldRule(value=syntax.apt_name),
    ("AptPackage", "version"): FieldRule(value=syntax.apt_version),
    ("Download", "dest"): FieldRule(value=syntax.abs_path),
    ("Download", "mode"): FieldRule(value=syntax.mode),
    ("PlatformUrl", "url"): FieldRule(value=syntax.download_url),
    ("PlatformUrl", "sha256"): FieldRule(value=_download_sha),
    ("RemoveSpec", "pip"): FieldRule(value=syntax.pip_name),
    ("RemoveSpec", "paths"): FieldRule(value=syntax.abs_glob),
    ("ProtectSpec", "packages"): FieldRule(value=syntax.pip_pattern),
    ("ProtectSpec", "replace"): FieldRule(value=syntax.pip_pattern),
    ("CudnnSpec", "package"): FieldRule(value=syntax.apt_name),
    ("CudnnSpec", "version"): FieldRule(value=syntax.version),
    ("CudnnSpec", "apt_version"): FieldRule(value=syntax.apt_version),
    ("CudnnSpec", "repo"): FieldRule(value=syntax.name),
    ("PullRequest", "head"): FieldRule(value=syntax.sha),
    ("PullRequest", "target"): FieldRule(value=syntax.git_ref),
    ("Change", "commit"): FieldRule(value=syntax.sha),
    ("Change", "head"): FieldRule(value=syntax.sha),
    ("Change", "target"): FieldRule(value=syntax.git_ref),
    ("Change", "patch"): FieldRule(value=syntax.rel_path),
    ("Change", "sha256"): FieldRule(value=syntax.sha256_hex),
    ("Patch", "file"): FieldRule(value=syntax.rel_path),
    ("Patch", "sha256"): FieldRule(value=syntax.sha256_hex),
    ("ComponentBuild", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("ComponentBuild", "parallel_env"): FieldRule(value=syntax.env_name),
    ("ComponentInstall", "path"): FieldRule(value=syntax.abs_path),
    ("ComponentInstall", "dist"): FieldRule(value=syntax.pip_name),
    ("ComponentInstall", "module"): FieldRule(value=syntax.module),
    ("ComponentInstall", "provided"): FieldRule(value=syntax.pip_name),
    ("Component", "repo"): FieldRule(value=syntax.repo_location),
    ("Component", "commit"): FieldRule(value=syntax.sha),
    ("Component", "branch"): FieldRule(value=syntax.git_ref),
    ("SitePath", "doc"): FieldRule(value=syntax.prose),
    ("Launcher", "wrapper"): FieldRule(value=syntax.name),
    ("Launcher", "args"): FieldRule(value=syntax.text),
    ("Profile", "description"): FieldRule(value=syntax.prose),
    ("Profile", "upstream_defect"): FieldRule(value=syntax.prose),
    ("Profile", "extends"): FieldRule(value=syntax.name),
    ("Profile", "drop"): FieldRule(value=syntax.regex(OPTION_RE, "an option such as '--fp8-recipe'")),
    ("Profile", "reasons"): FieldRule(value=syntax.prose, key=syntax.regex(OPTION_RE, "an option such as '--num-layers'")),
    ("EntrypointOverride", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("EntrypointOverride", "drop"): FieldRule(value=syntax.regex(OPTION_RE, "an option such as '--fp8-recipe'")),
    ("EntrypointOverride", "default_profile"): FieldRule(value=syntax.name),
    ("Entrypoint", "workdir"): FieldRule(value=syntax.abs_path),
    ("Entrypoint", "paths"): FieldRule(key=syntax.env_name),
    ("Entrypoint", "profiles"): FieldRule(key=syntax.name),
    ("Entrypoint", "default_profile"): FieldRule(value=syntax.name),
    ("Entrypoint", "megatron"): FieldRule(value=syntax.name),
    ("SmokeSpec", "python"): FieldRule(value=syntax.interpreter),
    ("SmokeSpec", "imports"): FieldRule(value=syntax.module),
    ("SmokeSpec", "gpu_waiver"): FieldRule(value=syntax.prose),
    ("TrainSpec", "profile"): FieldRule(value=syntax.name),
    ("PushSpec", "registry"): FieldRule(value=syntax.host_port),
    ("PushSpec", "repository"): FieldRule(value=syntax.repository),
}
# (class name, field) -> (lowest excluded, highest allowed) for numbers
NUMBER_RULES: Mapping[tuple[str, str], tuple[float, float]] = {
    ("ComponentBuild", "memory_per_job_gib"): (0.0, 4096.0),
    ("SmokeSpec", "timeout_s"): (0.0, 86_400.0),
    ("TrainSpec", "timeout_s"): (0.0, 86_400.0),
    ("TrainSpec", "min_steps"): (0.0, 1_000_000.0),
    ("Profile", "gpus"): (0.0, 1_000_000.0),
    ("Profile", "nodes"): (0.0, 100_000.0),
    ("Entrypoint", "gpus"): (0.0, 1_000_000.0),
    ("Entrypoint", "nodes"): (0.0, 100_000.0),
    ("EntrypointOverride", "gpus"): (0.0, 1_000_000.0),
    ("EntrypointOverride", "nodes"): (0.0, 100_000.0),
    ("Launcher", "master_port"): (0.0, 65535.0),
    ("Variant", "nvlink_domain"): (0.0, 1_000_000.0),
    ("PullRequest", "number"): (0.0, float(PR_NUMBER_MAX)),
    ("Change", "pr"): (0.0, float(PR_NUMBER_MAX)),
}


class _Invalid:
    """Marks a value that failed to convert (the error is already recorded)."""


INVALID: Any = _Invalid()


def _key_join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(model))
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is str:
        return "a string"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is float:
        return "a number"
    if _is_dataclass_type(tp):
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "a list"
    if origin in (Mapping, dict) or tp is Mapping:
        return "a mapping"
    return str(tp)


class _Loader:
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

    def convert(self, node: yaml.Node, tp: Any, key: str, depth: int = 0, name: str | None = None,
                field: tuple[str, str] | None = None) -> Any:
        """``field``: (class name, field name) of the dataclass field this value is for (its syntax rule)."""
        if depth > MAX_DEPTH:
            return self.error(node, key, "nested too deeply (a recursive YAML alias?)")
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)

        if origin in (typing.Union, types.UnionType):
            non_none = [a for a in args if a is not type(None)]
            if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                return None
            return self.convert(node, non_none[0], key, depth, name, field)

        if tp is PipRequirement:
            return self.requirement(node, key)
        if tp is AptPackage:
            return self.apt_package(node, key, depth)
        if tp is Arg:
            return self.arg(node, key)
        if tp is PullRequest and isinstance(node, yaml.ScalarNode):
            n = self.scalar(node, key)
            if isinstance(n, int) and not isinstance(n, bool):
                if not 0 < n <= PR_NUMBER_MAX:
                    return self.error(node, key, f"PR number {n} must be between 1 and {PR_NUMBER_MAX}")
                return PullRequest(number=n, at=self.loc(node, key))
            if n is INVALID:
                return INVALID
            return self.error(node, key, f"expected a PR number or {{number: N, head: SHA}}, got {n!r}")
        if _is_dataclass_type(tp):
            return self.dataclass(node, tp, key, depth, name)

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

        if origin in (Mapping, dict) or tp is Mapping:
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
            return self.error(node, key, f"expected {_type_name(tp)}, got {value!r}", fix=self._closest(value, args))
        if isinstance(tp, type) and issubclass(tp, Enum):
            values = [m.value for m in tp]
            if value in values:
                return tp(value)
            return self.error(node, key, f"expected {_type_name(tp)}, got {value!r}", fix=self._closest(value, values))
        if tp is bool:
            if isinstance(value, bool):
                return value
        elif tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return self.number(node, key, value, field)
        elif tp is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self.number(node, key, float(value), field)
        elif tp is str:
            if isinstance(value, int | float) and not isinstance(value, bool):
                # The text as written: YAML would read 9.10 as 9.1, 0755 as 493 and an all-digit SHA as a number.
                value = str(node.value)
            if isinstance(value, str):
                return self.string(node, key, value, field)
            if isinstance(value, bool):
                return self.error(node, key, f"expected a string, got the boolean {node.value!r}",
                                  fix=f"quote it (\"{node.value}\") if you mean the text")
        return self.error(node, key, f"expected {_type_name(tp)}, got {value!r}")

    def string(self, node: yaml.Node, key: str, value: str, field: tuple[str, str] | None) -> Any:
        rule = FIELD_RULES.get(field, FieldRule()).value if field else None
        if value == "":  # nothing to inject; a required field left empty is reported as such by the caller
            return value
        problem = (rule or syntax.text)(value)
        if problem:
            shown = value if len(value) <= 80 else value[:77] + "..."
            return self.error(node, key, f"{shown!r} {problem}")
        return value

    def number(self, node: yaml.Node, key: str, value: float, field: tuple[str, str] | None) -> Any:
        bounds = NUMBER_RULES.get(field) if field else None
        if isinstance(value, float) or bounds:
            low, high = bounds or (-1e18, 1e18)
            problem = syntax.finite(float(value), low=low, high=high)
            if problem:
                return self.error(node, key, problem)
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
        if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", name):
            return self.error(node, key, f"invalid apt package name {name!r}")
        if "=" in text and not re.match(r"^[A-Za-z0-9.+~:*-]+$", version):
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



# ------------------------------------------------------------------------------------ semantic checks


DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def wheel_of_url(url: str) -> tuple[str, str, str] | None:
    """(canonical name, version, file name) of the wheel a URL's last path component names, or None."""
    filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return str(name), str(version), filename


def _pip_download(d: model.Download, err: Any) -> None:
    """install: pip: every URL names a wheel file, all of one distribution; nothing is placed at a dest."""
    if d.dest:
        err(d.at, f"download {d.name}: install: pip takes no dest (pip installs the wheel)",
            fix="remove dest; the wheel's file name is the last part of its URL")
    names = set()
    for u in d.urls.values():
        w = wheel_of_url(u.url)
        if w is None:
            err(u.at, f"download {d.name}: install: pip needs a wheel URL, and {u.url!r} does not end in a wheel "
                      "file name (name-version-python-abi-platform.whl)",
                fix="point the URL at the .whl file itself, or use install: file")
            continue
        if not re.match(r"^[A-Za-z0-9._+-]+\.whl$", w[2]):
            err(u.at, f"download {d.name}: wheel file name {w[2]!r} holds characters pip would not write")
        names.add(w[0])
    if len(names) > 1:
        err(d.at, f"download {d.name}: the platforms' wheels are of different distributions ({', '.join(sorted(names))})")



def _semantic(m: Manifest, ld: _Loader, base_dir: Path) -> None:
    """Checks across fields (syntax is checked per field while loading). Each error points at the key
    that holds the offending value (``ld.at``), not at the mapping around it."""
    def err(at: Location, what: str, fix: str = "") -> None:
        ld.errors.append(ManifestError(at, what, fix=fix))

    at = ld.at
    if m.schema != 1:
        err(at(m, "schema"), f"schema {m.schema} is not supported (this buildctl reads schema 1)")
    expected = Path(ld.filename).name.removesuffix(".yaml").removesuffix(".yml")
    if m.stack != expected and not ld.filename.startswith("<"):
        err(at(m, "stack"), f"stack {m.stack!r} does not match its file name {expected!r}",
            fix=f"rename the file to {m.stack}.yaml or set stack: {expected}")

    download_names = {d.name for d in m.downloads}
    repo_names = {r.name for r in m.apt.repos}
    component_names = {c.name for c in m.components}

    for v in m.variants:
        for arch in v.gpu_archs:
            if not re.match(r"^\d+\.\d+a?$", arch):
                err(at(v, "gpu_archs"), f"variant {v.name}: gpu arch {arch!r} is not a compute capability like '10.0'")
        for cname in v.components:
            if cname not in component_names:
                err(v.components[cname].at, f"variant {v.name} overrides unknown component {cname!r}",
                    fix=_Loader._closest(cname, component_names))
        if v.cudnn and v.cudnn.repo and v.cudnn.repo not in repo_names:
            err(at(v.cudnn, "repo"), f"cudnn repo {v.cudnn.repo!r} is not in apt.repos",
                fix=_Loader._closest(v.cudnn.repo, repo_names))
    if m.cudnn and m.cudnn.repo and m.cudnn.repo not in repo_names:
        err(at(m.cudnn, "repo"), f"cudnn repo {m.cudnn.repo!r} is not in apt.repos",
            fix=_Loader._closest(m.cudnn.repo, repo_names))

    seen_apt: dict[str, Location] = {}
    for p in m.apt.packages:
        if p.name in seen_apt:
            err(p.at, f"apt package {p.name!r} is listed twice (first at line {seen_apt[p.name].line})")
        seen_apt[p.name] = p.at
    for repo in m.apt.repos:
        for plat in repo.lines:
            if plat not in (*PLATFORMS, "any"):
                err(at(repo, "lines"), f"apt repo {repo.name}: unknown platform {plat!r}",
                    fix=_Loader._closest(plat, PLATFORMS))
        if repo.keyring and repo.keyring not in download_names:
            err(at(repo, "keyring"), f"apt repo {repo.name}: keyring {repo.keyring!r} is not a download",
                fix=_Loader._closest(repo.keyring, download_names))

    for d in m.downloads:
        if d.install == "file" and not d.dest:
            err(d.at, f"download {d.name}: install: file needs dest (an absolute path in the image)")
        if d.install == "pip":
            _pip_download(d, err)
        for plat, u in d.urls.items():
            if plat not in (*PLATFORMS, "any"):
                err(u.at, f"download {d.name}: unknown platform {plat!r}",
                    fix=_Loader._closest(plat, (*PLATFORMS, "any")))

    seen_pip: dict[str, Location] = {}
    for req in m.pip.requirements:
        if req.name in seen_pip:
            err(req.at, f"pip package {req.name!r} is listed twice (first at line {seen_pip[req.name].line})")
        seen_pip[req.name] = req.at

    for c in m.components:
        numbers = [pr.number for pr in c.prs]
        if len(set(numbers)) != len(numbers):
            twice = next(pr for i, pr in enumerate(c.prs) if pr.number in numbers[:i])
            err(twice.at, f"component {c.name}: PR {twice.number} is listed twice in {numbers}")
        picks = [ch.commit for ch in c.changes if ch.commit is not None]
        if len(set(picks)) != len(picks):
            err(c.at, f"component {c.name}: a commit is cherry-picked twice")
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", "".join(pr.target for pr in c.prs) or "x") or any(
                pr.target.startswith(("-", "/")) or ".." in pr.target for pr in c.prs):
            err(c.at, f"component {c.name}: a PR target is not a plain branch name")
        for pr in c.prs:
            if pr.number <= 0:
                err(at(pr, "number") if pr.at is not NOWHERE else c.at,
                    f"component {c.name}: PR number {pr.number} must be positive")
        for patch in c.patches:
            if not ld.filename.startswith("<"):
                f = base_dir / patch.file
                if not f.is_file():
                    err(at(patch, "file"), f"component {c.name}: patch file {patch.file} does not exist")
                elif hashlib.sha256(f.read_bytes()).hexdigest() != patch.sha256:
                    err(at(patch, "sha256"), f"component {c.name}: patch {patch.file} does not match its sha256",
                        fix="update the sha256 if the change to the patch was intended")
        seen_req: set[str] = set()
        for req in c.install.requires:
            if req.name in seen_req:
                err(req.at, f"component {c.name}: install.requires lists {req.name!r} twice")
            seen_req.add(req.name)
        for prov in c.install.provided:
            if not DIST_RE.match(prov):
                err(c.install.at, f"component {c.name}: install.provided {prov!r} is not a distribution name")
            elif canonicalize_name(prov) in seen_req:
                err(c.install.at, f"component {c.name}: {prov!r} is both in install.requires and install.provided")
        if (c.install.requires or c.install.provided) and c.install.kind is not InstallKind.WHEEL:
            err(c.install.at, f"component {c.name}: install.requires and install.provided belong to a wheel install")
        if c.install.kind is InstallKind.SOURCE_TREE and not c.install.path:
            err(at(c.install, "kind"), f"component {c.name}: a source-tree install needs install.path")

    s = m.smoke
    for check in s.required:
        if check not in SMOKE_CHECKS:  # pragma: no cover - Literal already checked
            err(at(s, "required"), f"unknown smoke check {check!r}")
    if s.gpu_tier is GpuTier.WAIVED and not s.gpu_waiver:
        err(at(s, "gpu_tier"), "smoke.gpu_tier is 'waived' but smoke.gpu_waiver does not say why")
    e = m.entrypoint
    if "train" in s.required and s.train is None:
        err(at(s, "required"), "smoke.required lists 'train' but smoke.train names no profile to train",
            fix="add `train: {profile: NAME}` under smoke (a launch profile that fits one GPU host)")
    if s.train is not None:
        if e is None:
            err(at(s, "train"), "smoke.train: the stack has no entrypoint to train with")
        elif s.train.profile != BASE_PROFILE and s.train.profile not in e.profiles:
            err(at(s.train, "profile"), f"smoke.train.profile {s.train.profile!r} is not a profile of the entrypoint",
                fix=_Loader._closest(s.train.profile, e.profiles) or "declare the profile under entrypoint.profiles")

    if e is not None:
        _check_entrypoint(m, e, err, at, download_names, component_names)
    else:
        for v in m.variants:
            if v.entrypoint != model.EntrypointOverride():
                err(at(v, "entrypoint"), f"variant {v.name} overrides the entrypoint, but the stack has none")

    for kind in m.repro.levels:
        if kind not in ("base", "system", "cudnn", "python", "assemble", "entrypoint", "compile"):
            err(at(m.repro, "levels"), f"repro.levels: unknown node kind {kind!r}",
                fix="node kinds: system, cudnn, python, assemble, entrypoint, compile")
    for replaced in m.protect.replace:
        if not any(fnmatch.fnmatch(replaced, pat) for pat in m.protect.packages):
            err(at(m.protect, "replace"), f"protect.replace names {replaced!r}, which no protect.packages pattern covers")


def _check_topology(err: Any, at: Location, what: str, gpus: int | None, nodes: int) -> None:
    if gpus is not None and gpus % nodes:
        err(at, f"{what}: {gpus} GPUs do not spread evenly over {nodes} nodes",
            fix="give a GPU count that is nodes x GPUs per node")


def _check_entrypoint(m: Manifest, e: model.Entrypoint, err: Any, at: Any, download_names: set[str],
                      component_names: set[str]) -> None:
    """The launch fields across each other: launcher, profiles' GPUs and nodes, the variants' overrides."""
    launcher = e.launcher
    if launcher.wrapper is not None and launcher.wrapper not in download_names:
        err(at(launcher, "wrapper"), f"launcher.wrapper {launcher.wrapper!r} is not a download",
            fix=_Loader._closest(launcher.wrapper, download_names) or "name the download that provides it")
    if launcher.args and launcher.kind != "torchrun":
        err(at(launcher, "args"), f"launcher.args are torchrun options; a {launcher.kind} launcher takes none",
            fix="the host's srun gets its own options" if launcher.kind == "srun" else "remove them")
    for word in launcher.args:
        if arg_key(word) in TORCHRUN_OWNED:
            err(at(launcher, "args"), f"launcher.args: {word} comes from the profile (gpus, nodes) or the "
                "environment (NODE_RANK, MASTER_ADDR, MASTER_PORT)",
                fix="remove it; set launcher.master_port for the default port")
    if launcher.kind != "none" and e.gpus is None and not e.profiles:
        err(at(e, "launcher"), f"a {launcher.kind} launcher needs entrypoint.gpus (or profiles) to know how many "
            "ranks to start")
    _check_topology(err, at(e, "nodes"), "entrypoint", e.gpus, e.nodes)
    if e.default_profile and e.default_profile not in e.profiles:
        err(at(e, "default_profile"), f"default_profile {e.default_profile!r} is not in profiles",
            fix=_Loader._closest(e.default_profile, e.profiles))
    if e.megatron and e.megatron not in component_names:
        err(at(e, "megatron"), f"entrypoint.megatron {e.megatron!r} is not a component",
            fix=_Loader._closest(e.megatron, component_names))
    for name, p in e.profiles.items():
        if name == BASE_PROFILE:
            err(p.at, f"invalid profile name {name!r}",
                fix=f"{BASE_PROFILE!r} names the arguments without a profile at run time; choose another name")
        _check_topology(err, at(p, "nodes"), f"profile {name}", p.gpus, p.nodes)
        _check_derived(err, at, e, name, p, tuple(a for v in m.variants for a in v.entrypoint.args))
    base_options = {arg_key(a.flag) for a in e.args}
    for v in m.variants:
        o = v.entrypoint
        for option in o.drop:
            if option not in base_options:
                err(at(o, "drop"), f"variant {v.name}: entrypoint.drop: {option} is not in entrypoint.args",
                    fix=_Loader._closest(option, base_options))
        if o.default_profile is not None and o.default_profile != BASE_PROFILE and o.default_profile not in e.profiles:
            err(at(o, "default_profile"), f"variant {v.name}: default_profile {o.default_profile!r} is not in profiles",
                fix=_Loader._closest(o.default_profile, e.profiles))
        if o.gpus is not None or o.nodes is not None:
            _check_topology(err, at(o, "gpus" if o.gpus is not None else "nodes"), f"variant {v.name} entrypoint",
                            o.gpus if o.gpus is not None else e.gpus, o.nodes if o.nodes is not None else e.nodes)


def _check_derived(err: Any, at: Any, e: model.Entrypoint, name: str, p: model.Profile,
                   variant_args: tuple[model.Arg, ...]) -> None:
    """A profile's ``extends``, ``drop`` and ``reasons`` against what it starts from."""
    chain = [name]
    parent = p.extends
    while parent is not None and parent != BASE_PROFILE:
        if parent not in e.profiles:
            err(at(p, "extends"), f"profile {name}: extends {parent!r}, which is not a profile",
                fix=_Loader._closest(parent, e.profiles) or f"name a profile or {BASE_PROFILE!r}")
            return
        if parent in chain:
            err(at(p, "extends"), f"profile {name}: extends forms a cycle ({' -> '.join([*chain, parent])})",
                fix="a profile derives from the entrypoint or from a profile that does not derive from it")
            return
        chain.append(parent)
        parent = e.profiles[parent].extends
    # what the profile starts from, with what any variant adds to the entrypoint's arguments
    start = {arg_key(a.flag) for a in profile_start(e, p)} | {arg_key(a.flag) for a in variant_args}
    for option in p.drop:
        if option not in start:
            err(at(p, "drop"), f"profile {name}: drop: {option} is not in the arguments it starts from",
                fix=_Loader._closest(option, start))
    changed = {*p.drop, *(arg_key(a.flag) for a in p.args)}
    for option in p.reasons:
        if option not in changed:
            err(at(p, "reasons"), f"profile {name}: reasons: {option} is neither set nor dropped by this profile",
                fix="give reasons only for the options the profile sets (args) or removes (drop)")
    if p.extends is not None:
        for option in sorted(changed - set(p.reasons)):
            err(at(p, "reasons"), f"profile {name} derives from {p.extends} and changes {option} without a reason",
                fix=f"add `{option}: <why this profile differs>` under reasons")


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


# -------------------------------------------------------------------------------------------- public


def _normalise_changes(m: Manifest, ld: _Loader) -> Manifest:
    """One ordered ``changes`` list per component, and prs/patches that agree with it."""
    comps = []
    for c in m.components:
        if c.changes and (c.prs or c.patches):
            ld.errors.append(ManifestError(c.at, f"component {c.name}: give either changes: or prs:/patches:, not both",
                                           fix="move the PRs and patches into changes:, in the order they apply"))
            comps.append(c)
            continue
        if not c.changes:
            comps.append(c)  # Component.steps derives the ordered changes from prs + patches
            continue
        bad = False
        for ch in c.changes:
            given = [k for k in ("commit", "pr", "patch") if getattr(ch, k) is not None]
            if len(given) != 1:
                ld.errors.append(ManifestError(ch.at, f"component {c.name}: a change needs exactly one of commit, pr "
                                                      f"or patch (got {', '.join(given) or 'none'})"))
                bad = True
                continue
            if ch.pr is None and (ch.head is not None or ch.apply != "own-commits" or ch.target != "main"):
                ld.errors.append(ManifestError(ch.at, f"component {c.name}: head, apply and target belong to a pr change"))
                bad = True
            if (ch.patch is None) != (ch.sha256 is None):
                ld.errors.append(ManifestError(ch.at, f"component {c.name}: a patch change needs patch and sha256 "
                                                      "together (and only a patch change has sha256)"))
                bad = True
            if ch.commit is not None and not re.fullmatch(r"[0-9a-f]{40}", ch.commit):
                ld.errors.append(ManifestError(ch.at, f"component {c.name}: commit {ch.commit!r} to cherry-pick "
                                                      "must be a full 40-digit lower-case SHA",
                                               fix="write the full SHA: a change is applied exactly as named"))
                bad = True
        if bad:
            comps.append(c)
            continue
        prs = tuple(PullRequest(number=ch.pr, head=ch.head, apply=ch.apply, target=ch.target, at=ch.at)
                    for ch in c.changes if ch.pr is not None)
        patches = tuple(model.Patch(file=ch.patch, sha256=ch.sha256, at=ch.at)
                        for ch in c.changes if ch.patch is not None and ch.sha256 is not None)
        comps.append(dataclasses.replace(c, prs=prs, patches=patches))
    return dataclasses.replace(m, components=tuple(comps))


def load_text(text: str, filename: str = "<string>", base_dir: Path | None = None) -> Manifest:
    """Parse one manifest. Raises ManifestErrors (one or more ManifestError) for bad input."""
    ld = _Loader(filename)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ManifestErrors([ManifestError(
            Location(file=filename, line=line, column=col),
            f"YAML syntax error: {exc.problem or exc.context}",
            fix="check indentation and quoting near this position")]) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise ManifestErrors([ManifestError(Location(file=filename), f"cannot read YAML: {exc}")]) from None
    if root is None:
        raise ManifestErrors([ManifestError(Location(file=filename), "the manifest is empty",
                                            fix="start from pins/demo.yaml")])
    problem = expansion_problem(root, filename)
    if problem is not None:
        raise ManifestErrors([problem])
    try:
        result = ld.convert(root, Manifest, "")
    except RecursionError:
        raise ManifestErrors([ManifestError(Location(file=filename), "the document nests too deeply")]) from None
    if result is not INVALID:
        result = dataclasses.replace(result, path=filename)
        result = _normalise_changes(result, ld)
        _semantic(result, ld, base_dir or Path(filename).parent)
        if not result.variants and not ld.errors:
            ld.error(root, "variants", "at least one variant is required")
    if ld.errors:
        raise ManifestErrors(ld.errors)
    assert isinstance(result, Manifest)
    return result


def load(path: Path) -> Manifest:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestErrors([ManifestError(Location(file=str(path)), "no such manifest")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestErrors([ManifestError(Location(file=str(path)), f"cannot read: {exc}")]) from None
    return load_text(text, str(path), path.parent)


def manifest_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stacks(pins_dir: Path) -> dict[str, Path]:
    """Stack name -> manifest path for every pins/*.yaml."""
    return {p.name.removesuffix(".yaml"): p for p in sorted(pins_dir.glob("*.yaml"))}


def find(pins_dir: Path, stack: str) -> Path:
    known = stacks(pins_dir)
    if stack in known:
        return known[stack]
    match = difflib.get_close_matches(stack, list(known), n=1)
    raise UsageError(
        f"unknown stack {stack!r}",
        why=f"there is no {pins_dir / (stack + '.yaml')}",
        fix=(f"did you mean {match[0]!r}? " if match else "") + f"known stacks: {', '.join(known) or 'none'}",
    )


def select_variant(m: Manifest, name: str | None) -> model.Variant:
    try:
        return m.variant(name)
    except KeyError:
        names = [v.name for v in m.variants]
        match = difflib.get_close_matches(name or "", names, n=1)
        raise UsageError(
            f"stack {m.stack} has no variant {name!r}",
            fix=(f"did you mean {match[0]!r}? " if match else "") + f"variants: {', '.join(names)}",
        ) from None
