"""Pin manifests: YAML -> frozen dataclasses (buildctl.model), with errors that point at file:line:col.

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

from buildctl import model
from buildctl.errors import Location, ManifestError, ManifestErrors, UsageError
from buildctl.model import (
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

SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
PLATFORMS = ("linux/amd64", "linux/arm64")
MAX_DEPTH = 40


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

    def convert(self, node: yaml.Node, tp: Any, key: str, depth: int = 0, name: str | None = None) -> Any:
        if depth > MAX_DEPTH:
            return self.error(node, key, "nested too deeply (a recursive YAML alias?)")
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)

        if origin in (typing.Union, types.UnionType):
            non_none = [a for a in args if a is not type(None)]
            if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                return None
            return self.convert(node, non_none[0], key, depth, name)

        if tp is PipRequirement:
            return self.requirement(node, key)
        if tp is AptPackage:
            return self.apt_package(node, key, depth)
        if tp is Arg:
            return self.arg(node, key)
        if tp is PullRequest and isinstance(node, yaml.ScalarNode):
            n = self.scalar(node, key)
            if isinstance(n, int) and not isinstance(n, bool):
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
            out = [self.convert(n, item, _key_join(key, i), depth + 1) for i, n in enumerate(node.value)]
            return INVALID if any(v is INVALID for v in out) else tuple(out)

        if origin in (Mapping, dict) or tp is Mapping:
            vtype = args[1] if args else str
            if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
                return {}
            if not isinstance(node, yaml.MappingNode):
                return self.error(node, key, f"expected a mapping, got {self._kind(node)}")
            result: dict[str, Any] = {}
            bad = False
            for k, _knode, vnode in self.pairs(node, key):
                v = self.convert(vnode, vtype, _key_join(key, k), depth + 1, name=k)
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
                return value
        elif tp is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        elif tp is str:
            if isinstance(value, str):
                return value
            if isinstance(value, int | float) and not isinstance(value, bool):
                # The text as written: YAML would read 9.10 as 9.1, 0755 as 493 and an all-digit SHA as a number.
                return str(node.value)
            if isinstance(value, bool):
                return self.error(node, key, f"expected a string, got the boolean {node.value!r}",
                                  fix=f"quote it (\"{node.value}\") if you mean the text")
        return self.error(node, key, f"expected {_type_name(tp)}, got {value!r}")

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
            v = self.convert(vnode, hints[k], _key_join(key, k), depth + 1)
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
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # pragma: no cover - guarded by the checks above
            return self.error(node, key, f"invalid entry: {exc}")

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
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            return self.error(node, key, f"invalid pip requirement {text!r}: {exc}",
                              fix="write it as PEP 508 demands, e.g. 'black==24.4.2' or 'numpy<2.0.0'")
        if req.url:
            return self.error(node, key, f"{text!r} is a direct URL requirement",
                              fix="declare it under downloads: with a sha256 and install the file")
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
    def err(at: Location, what: str, fix: str = "") -> None:
        ld.errors.append(ManifestError(at, what, fix=fix))

    if m.schema != 1:
        err(m.at, f"schema {m.schema} is not supported (this buildctl reads schema 1)")
    if not NAME_RE.match(m.stack):
        err(m.at, f"invalid stack name {m.stack!r}")
    expected = Path(ld.filename).name.removesuffix(".yaml").removesuffix(".yml")
    if m.stack != expected and not ld.filename.startswith("<"):
        err(m.at, f"stack {m.stack!r} does not match its file name {expected!r}",
            fix=f"rename the file to {m.stack}.yaml or set stack: {expected}")

    download_names = {d.name for d in m.downloads}
    repo_names = {r.name for r in m.apt.repos}
    component_names = {c.name for c in m.components}

    for v in m.variants:
        for arch in v.gpu_archs:
            if not re.match(r"^\d+\.\d+a?$", arch):
                err(v.at, f"variant {v.name}: gpu arch {arch!r} is not a compute capability like '10.0'")
        for cname in v.components:
            if cname not in component_names:
                err(v.components[cname].at, f"variant {v.name} overrides unknown component {cname!r}",
                    fix=_Loader._closest(cname, component_names))
        if v.cudnn and v.cudnn.repo and v.cudnn.repo not in repo_names:
            err(v.cudnn.at, f"cudnn repo {v.cudnn.repo!r} is not in apt.repos")
    if m.cudnn and m.cudnn.repo and m.cudnn.repo not in repo_names:
        err(m.cudnn.at, f"cudnn repo {m.cudnn.repo!r} is not in apt.repos",
            fix=_Loader._closest(m.cudnn.repo, repo_names))

    seen_apt: dict[str, Location] = {}
    for p in m.apt.packages:
        if p.name in seen_apt:
            err(p.at, f"apt package {p.name!r} is listed twice (first at line {seen_apt[p.name].line})")
        seen_apt[p.name] = p.at
    for repo in m.apt.repos:
        for plat in repo.lines:
            if plat not in (*PLATFORMS, "any"):
                err(repo.at, f"apt repo {repo.name}: unknown platform {plat!r}", fix=_Loader._closest(plat, PLATFORMS))
        if repo.keyring and repo.keyring not in download_names:
            err(repo.at, f"apt repo {repo.name}: keyring {repo.keyring!r} is not a download")

    for d in m.downloads:
        if d.install == "file" and not d.dest.startswith("/"):
            err(d.at, f"download {d.name}: dest {d.dest!r} must be an absolute path")
        if d.install == "pip":
            _pip_download(d, err)
        if not re.match(r"^0?[0-7]{3}$", d.mode):
            err(d.at, f"download {d.name}: mode {d.mode!r} is not an octal mode like '0755'")
        for plat, u in d.urls.items():
            if plat not in (*PLATFORMS, "any"):
                err(u.at, f"download {d.name}: unknown platform {plat!r}",
                    fix=_Loader._closest(plat, (*PLATFORMS, "any")))
            if u.sha256 != SHA256_COMPUTE and not SHA256_RE.match(u.sha256):
                err(u.at, f"download {d.name}: sha256 {u.sha256!r} is neither 64 hex digits nor 'compute'",
                    fix="give the file's sha256, or write sha256: compute to have `buildctl lock` record it")

    seen_pip: dict[str, Location] = {}
    for req in m.pip.requirements:
        if req.name in seen_pip:
            err(req.at, f"pip package {req.name!r} is listed twice (first at line {seen_pip[req.name].line})")
        seen_pip[req.name] = req.at

    for c in m.components:
        if not SHA_RE.match(c.commit):
            err(c.at, f"component {c.name}: commit {c.commit!r} is not a 7 to 40 digit lower-case hex SHA",
                fix="give the full 40-digit SHA, or at least 7 digits; `buildctl lock` resolves short ones")
        numbers = [pr.number for pr in c.prs]
        if len(set(numbers)) != len(numbers):
            err(c.at, f"component {c.name}: a PR is listed twice in {numbers}")
        picks = [ch.commit for ch in c.changes if ch.commit is not None]
        if len(set(picks)) != len(picks):
            err(c.at, f"component {c.name}: a commit is cherry-picked twice")
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", "".join(pr.target for pr in c.prs) or "x") or any(
                pr.target.startswith(("-", "/")) or ".." in pr.target for pr in c.prs):
            err(c.at, f"component {c.name}: a PR target is not a plain branch name")
        for pr in c.prs:
            if pr.number <= 0:
                err(pr.at, f"component {c.name}: PR number {pr.number} must be positive")
            if pr.head is not None and not SHA_RE.match(pr.head):
                err(pr.at, f"component {c.name}: PR {pr.number} head {pr.head!r} is not a 7 to 40 digit hex SHA")
        for patch in c.patches:
            if not SHA256_RE.match(patch.sha256):
                err(patch.at, f"component {c.name}: patch sha256 {patch.sha256!r} is not 64 hex digits")
            elif not ld.filename.startswith("<"):
                f = base_dir / patch.file
                if not f.is_file():
                    err(patch.at, f"component {c.name}: patch file {patch.file} does not exist")
                elif hashlib.sha256(f.read_bytes()).hexdigest() != patch.sha256:
                    err(patch.at, f"component {c.name}: patch {patch.file} does not match its sha256",
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
            err(c.install.at, f"component {c.name}: a source-tree install needs install.path")
        if c.install.path and not c.install.path.startswith("/"):
            err(c.install.at, f"component {c.name}: install.path must be absolute")

    s = m.smoke
    for check in s.required:
        if check not in SMOKE_CHECKS:  # pragma: no cover - Literal already checked
            err(s.at, f"unknown smoke check {check!r}")
    if s.gpu_tier is GpuTier.WAIVED and not s.gpu_waiver:
        err(s.at, "smoke.gpu_tier is 'waived' but smoke.gpu_waiver does not say why")

    e = m.entrypoint
    if e is not None:
        if e.launcher.kind == "bindpcie" and (not e.launcher.download or e.launcher.download not in download_names):
            err(e.launcher.at, "launcher bindpcie needs launcher.download naming a download that provides it",
                fix=_Loader._closest(e.launcher.download or "", download_names))
        if e.default_profile and e.default_profile not in e.profiles:
            err(e.at, f"default_profile {e.default_profile!r} is not in profiles",
                fix=_Loader._closest(e.default_profile, e.profiles))
        if e.megatron and e.megatron not in component_names:
            err(e.at, f"entrypoint.megatron {e.megatron!r} is not a component",
                fix=_Loader._closest(e.megatron, component_names))
        for pname in e.paths:
            if not re.match(r"^[A-Z_][A-Z0-9_]*$", pname):
                err(e.paths[pname].at, f"path variable {pname!r} must be an upper-case environment name")

    for k in m.env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            err(m.at, f"env: {k!r} is not a valid environment variable name")
    for kind in m.repro.levels:
        if kind not in ("base", "system", "cudnn", "python", "assemble", "entrypoint", "compile"):
            err(m.repro.at, f"repro.levels: unknown node kind {kind!r}",
                fix="node kinds: system, cudnn, python, assemble, entrypoint, compile")
    for replaced in m.protect.replace:
        if not any(fnmatch.fnmatch(replaced, pat) for pat in m.protect.packages):
            err(m.protect.at, f"protect.replace names {replaced!r}, which no protect.packages pattern covers")


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
