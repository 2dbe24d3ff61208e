"""A lock file is untrusted input: its schema, the syntax of each value, and a hash of its own content.

``validate(data)`` checks the JSON of a lock (schema 2, buildctl/lock/lockfile.py's docstring) against the
schema below and returns every problem as ``key.path: what``; nothing else in buildctl reads a lock that
has one. Values reach shell lines and Dockerfiles (pip pins with their hashes, apt versions, the base
digest, component repositories for git), so each has the syntax of its kind (buildctl/syntax.py).

``integrity(data)`` is the lock's hash of its own content, written into the file as ``"integrity":
{"sha256": <whole>, "entries": {<entry>: <12 hex>}}``: one hash per entry (a pip pin, an apt package, a
download, a component, the base, ...), so that a lock edited by hand is reported as such, naming the
entries that changed, rather than as "the manifest changed since locking". It detects edits, it does not
authenticate: whoever edits a lock can recompute it, which is what ``lockfile.edit`` (the one API that
edits locks: bench, test helpers) does.

Extending the schema: add the key to the spec of its object below (``_VARIANT``, ``_COMPONENT``, ...)
along with the field in lockfile.py; an unknown key is refused, so a lock cannot carry data buildctl
does not check.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from buildctl import syntax, untrusted

MAX_DEPTH = 12  # the deepest schema-2 lock nests 8 levels (variants.v.components.c.changes[i].merged_upstream.x)
MAX_PROBLEMS = 20

Check = Callable[[Any], "str | None"]


def _str(rule: syntax.Rule | None = None, *, empty: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"expected a string, got {_kind(value)}"
        if value == "" and empty:
            return None
        if value == "":
            return "is empty"
        problem = (rule or syntax.text)(value)
        return f"{_short(value)} {problem}" if problem else None
    return check


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {_kind(value)}"


def _int(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer, got {_kind(value)}"
        return None if low <= value <= high else f"must be between {low} and {high}, got {value}"
    return check


def _one_of(*values: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in values else f"expected one of {', '.join(map(repr, values))}, got {_short(value)}"
    return check


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, str):
        return f"the string {_short(value)}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
sha1 = _str(syntax.full_sha)
sha1_or_empty = _str(syntax.full_sha, empty=True)
hex64 = _str(syntax.sha256_hex)
digest = _str(syntax.regex(_DIGEST, "sha256:<64 hex digits>"))


def _pep440(value: str) -> str | None:
    try:
        Version(value)
    except InvalidVersion:
        return "is not a PEP 440 version"
    return syntax.control(value) or (None if " " not in value else "is not a PEP 440 version")


pip_version = _str(_pep440)
apt_exact = _str(syntax.regex(re.compile(r"^[A-Za-z0-9.+~:-]+\Z"), "an exact apt version (no '*')"))
text = _str()
text_or_empty = _str(empty=True)


# An object spec: key -> (required, check or nested spec). A nested spec is a dict (an object), a
# ("map", key rule, spec) triple (an object keyed by names) or a ("list", spec) pair.
Spec = Any

_PIP: Spec = {"name": (True, _str(syntax.pip_name)), "version": (True, pip_version),
              "hashes": (False, ("list", digest)), "in_base": (False, _bool), "sdist": (False, _bool)}
_PR: Spec = {"kind": (True, _one_of("pr")), "number": (True, _int(1, 2**31 - 1)), "head": (True, sha1),
             "mode": (False, _one_of("own-commits", "merge")), "target": (False, _str(syntax.git_ref)),
             "commits": (False, ("list", sha1)), "skipped_merges": (False, ("list", sha1)),
             "empty": (False, ("list", sha1)),
             "merged_upstream": (False, {"how": (True, _one_of("merge", "squash-or-rebase")),
                                         "commit": (False, sha1_or_empty)})}
_PICK: Spec = {"kind": (True, _one_of("commit")), "sha": (True, sha1)}
_PATCH: Spec = {"kind": (True, _one_of("patch")), "file": (True, _str(syntax.rel_path)), "sha256": (True, hex64)}
_CHANGE: Spec = ("kind", {"pr": _PR, "commit": _PICK, "patch": _PATCH})
_COMPONENT: Spec = {
    "repo": (True, _str(syntax.repo_location)), "base": (True, sha1),
    "changes": (False, ("list", _CHANGE)),
    "dragged": (False, ("list", {"sha": (True, sha1), "subject": (False, _str(syntax.prose, empty=True)),
                                 "by": (False, text_or_empty)})),
    "submodules": (False, ("map", _str(syntax.rel_path), sha1)),
    "tree": (False, sha1_or_empty), "branch_head": (False, sha1_or_empty)}
_VARIANT: Spec = {
    "base": (False, {"ref": (True, _str(syntax.image)), "digest": (True, digest),
                     "platform": (True, _one_of("linux/amd64", "linux/arm64"))}),
    "apt": (False, ("map", _str(syntax.apt_name), apt_exact)),
    "build_apt": (False, ("map", _str(syntax.name), ("map", _str(syntax.apt_name), apt_exact))),
    "downloads": (False, ("map", _str(syntax.name), {"url": (True, _str(syntax.download_url)), "sha256": (True, hex64),
                                                      "computed": (False, _bool)})),
    "pip": (False, ("list", _PIP)),
    "build_pip": (False, ("map", _str(syntax.name), ("list", _PIP))),
    "components": (False, ("map", _str(syntax.name), _COMPONENT)),
    "missing": (False, ("map", text, _str(syntax.prose))),
    "resolved_at": (False, text_or_empty)}
_INTEGRITY: Spec = {"sha256": (True, hex64),
                    "entries": (True, ("map", text, _str(syntax.regex(re.compile(r"^[0-9a-f]{12}\Z"), "12 hex digits"))))}
LOCK: Spec = {"schema": (True, _int(2, 2)), "stack": (True, _str(syntax.name)), "manifest_sha256": (True, hex64),
              "variants": (True, ("map", _str(syntax.name), _VARIANT)), "integrity": (False, _INTEGRITY)}


def _join(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)


def _walk(value: Any, spec: Spec, path: str, out: list[str]) -> None:
    if len(out) >= MAX_PROBLEMS:
        return
    if callable(spec):
        problem = spec(value)
        if problem:
            out.append(f"{path}: {problem}")
        return
    if isinstance(spec, tuple) and spec[0] == "list":
        if not isinstance(value, list):
            out.append(f"{path}: expected a list, got {_kind(value)}")
            return
        for i, item in enumerate(value):
            _walk(item, spec[1], _join(path, i), out)
        return
    if isinstance(spec, tuple) and spec[0] == "map":
        if not isinstance(value, dict):
            out.append(f"{path}: expected an object, got {_kind(value)}")
            return
        for k, item in value.items():
            problem = spec[1](k)
            if problem:
                out.append(f"{_join(path, str(k))}: the key {problem}")  # the rule names the key's text
                continue
            _walk(item, spec[2], _join(path, k), out)
        return
    if isinstance(spec, tuple):  # (discriminating key, {value: spec})
        key, specs = spec
        if not isinstance(value, dict):
            out.append(f"{path}: expected an object, got {_kind(value)}")
            return
        chosen = specs.get(value.get(key)) if isinstance(value.get(key), str) else None
        if chosen is None:
            out.append(f"{_join(path, key)}: expected one of {', '.join(map(repr, specs))}, got {_short(value.get(key))}")
            return
        _walk(value, chosen, path, out)
        return
    if not isinstance(value, dict):
        out.append(f"{path or 'the lock'}: expected an object, got {_kind(value)}")
        return
    for k in value:
        if k not in spec:
            out.append(f"{_join(path, k)}: unknown key (known: {', '.join(sorted(spec))})")
    for k, (required, sub) in spec.items():
        if k in value:
            _walk(value[k], sub, _join(path, k), out)
        elif required:
            out.append(f"{_join(path, k)}: missing")


def validate(data: Any) -> list[str]:
    """Every problem of a parsed lock, ``key.path: what`` (empty: the lock has the schema)."""
    out: list[str] = []
    _walk(data, LOCK, "", out)
    if isinstance(data, dict) and isinstance(data.get("variants"), dict):
        for name, v in data["variants"].items():
            missing = v.get("missing") if isinstance(v, dict) else None  # a map when valid (_walk says otherwise)
            if isinstance(v, dict) and "base" not in v and not (isinstance(missing, dict) and "base" in missing):
                out.append(f"variants.{name}.base: missing (and not listed in missing)")
            for section in ("pip",):
                names = [p.get("name") for p in v.get(section, []) if isinstance(p, dict)] if isinstance(v, dict) \
                    and isinstance(v.get(section), list) else []
                twice = sorted({n for n in names if names.count(n) > 1 and isinstance(n, str)})
                if twice:
                    out.append(f"variants.{name}.{section}: {', '.join(twice)} listed twice")
    return out[:MAX_PROBLEMS]


def loads(text: str) -> Any:
    """JSON without the extensions Python's json accepts (NaN, Infinity, duplicate keys), and bounded in depth
    (the one bounded reader, buildctl/untrusted.py)."""
    return untrusted.loads(text, max_depth=MAX_DEPTH, strict=True)


# -------------------------------------------------------------------------------------------- integrity


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def entries(data: Mapping[str, Any]) -> dict[str, Any]:
    """The lock's content cut into entries (entry name -> JSON value); together they hold all of it."""
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in ("variants", "integrity")}
    for vname, v in sorted(data.get("variants", {}).items()):
        for section, value in sorted(v.items()):
            where = f"variants.{vname}.{section}"
            if isinstance(value, dict) and section != "base":
                for k, x in sorted(value.items()):
                    out[f"{where}.{k}"] = x
                if not value:
                    out[where] = value
            elif isinstance(value, list):
                seen: dict[str, int] = {}
                for x in value:
                    n = str(x.get("name")) if isinstance(x, dict) else "?"
                    seen[n] = seen.get(n, 0) + 1
                    out[f"{where}.{n}" + (f"#{seen[n]}" if seen[n] > 1 else "")] = x
                if not value:
                    out[where] = value
            else:
                out[where] = value
    return out


def integrity(data: Mapping[str, Any]) -> dict[str, Any]:
    content = {k: v for k, v in data.items() if k != "integrity"}
    return {"sha256": hashlib.sha256(_canonical(content).encode()).hexdigest(),
            "entries": {k: hashlib.sha256(_canonical(x).encode()).hexdigest()[:12] for k, x in entries(content).items()}}


def edited_entries(data: Mapping[str, Any]) -> list[str] | None:
    """None when the lock's content matches its integrity hash; else what changed since it was written:
    ``changed X``, ``added X``, ``removed X`` (and the whole hash's mismatch when no single entry shows it)."""
    recorded = data.get("integrity")
    now = integrity(data)
    if not isinstance(recorded, dict):
        return ["the integrity hash itself (the lock carries none: written by hand or by an older buildctl)"]
    if recorded.get("sha256") == now["sha256"]:
        return None
    old = recorded.get("entries") or {}
    new = now["entries"]
    out = [f"changed {k}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]
    out += [f"added {k}" for k in sorted(set(new) - set(old))]
    out += [f"removed {k}" for k in sorted(set(old) - set(new))]
    return out or ["the integrity hash itself (its entries match the content, the whole does not)"]
