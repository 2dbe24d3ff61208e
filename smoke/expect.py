"""expect.json (schema 1): what the image must show. README.md beside this file is the reference.

Only the top level is validated here; each check validates its own section and turns a problem in it
into a failed result that names the key, so that one bad section cannot hide the other checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from smoke import EXPECT_SCHEMA

CHECK_NAMES: tuple[str, ...] = (
    "versions",
    "cudnn",
    "protected",
    "imports",
    "mxfp8",
    "attention",
    "hybridep",
    "arch",
    "megatron-args",
)
StubMode = Literal["auto", "always", "never"]
STUB_MODES: tuple[StubMode, ...] = ("auto", "always", "never")
DEFAULT_PROBE_TIMEOUT_S = 180.0


class ExpectError(ValueError):
    """expect.json is unreadable or its top level is wrong; nothing can be checked."""


@dataclass(frozen=True, kw_only=True)
class Expect:
    stack: str = ""
    variant: str = ""
    required: tuple[str, ...] = ()
    gpu_tier: str = "required"  # or "waived" (then gpu_waiver says why)
    gpu_waiver: str = ""
    python_path: tuple[str, ...] = ()  # prepended to PYTHONPATH of every probe (source-tree components)
    driver_stub: StubMode = "auto"
    stub_paths: tuple[str, ...] = ()  # extra places to look for libcuda.so (the CUDA driver stub)
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    checks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def section(self, name: str) -> Mapping[str, Any] | None:
        return self.checks.get(name)

    @property
    def selected(self) -> tuple[str, ...]:
        """Checks to run, in the fixed order: the required ones and every one with a section."""
        return tuple(n for n in CHECK_NAMES if n in self.required or n in self.checks)


def _strs(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ExpectError(f"{key}: expected a list of strings, got {value!r}")
    return tuple(value)


def parse(data: Any) -> Expect:
    if not isinstance(data, dict):
        raise ExpectError(f"the top level must be an object, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != EXPECT_SCHEMA:
        raise ExpectError(
            f"schema {schema!r} is not supported by this smoke suite (it reads schema {EXPECT_SCHEMA}); "
            "regenerate expect.json with the buildctl that copied this suite"
        )
    known = {"schema", "stack", "variant", "required", "gpu_tier", "gpu_waiver", "python_path",
             "driver_stub", "stub_paths", "probe_timeout_s", "checks", "comment"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ExpectError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    required = _strs(data.get("required", []), "required")
    for name in required:
        if name not in CHECK_NAMES:
            raise ExpectError(f"required: unknown check {name!r} (known: {', '.join(CHECK_NAMES)})")
    checks = data.get("checks", {})
    if not isinstance(checks, dict):
        raise ExpectError(f"checks: expected an object, got {checks!r}")
    for name, section in checks.items():
        if name not in CHECK_NAMES:
            raise ExpectError(f"checks: unknown check {name!r} (known: {', '.join(CHECK_NAMES)})")
        if not isinstance(section, dict):
            raise ExpectError(f"checks.{name}: expected an object, got {section!r}")
    stub = data.get("driver_stub", "auto")
    if stub not in STUB_MODES:
        raise ExpectError(f"driver_stub: expected one of {', '.join(STUB_MODES)}, got {stub!r}")
    gpu_tier = data.get("gpu_tier", "required")
    if gpu_tier not in ("required", "waived"):
        raise ExpectError(f"gpu_tier: expected 'required' or 'waived', got {gpu_tier!r}")
    timeout = data.get("probe_timeout_s", DEFAULT_PROBE_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ExpectError(f"probe_timeout_s: expected a positive number, got {timeout!r}")
    return Expect(
        stack=str(data.get("stack", "")),
        variant=str(data.get("variant", "")),
        required=required,
        gpu_tier=gpu_tier,
        gpu_waiver=str(data.get("gpu_waiver", "")),
        python_path=_strs(data.get("python_path", []), "python_path"),
        driver_stub=stub,
        stub_paths=_strs(data.get("stub_paths", []), "stub_paths"),
        probe_timeout_s=float(timeout),
        checks=checks,
    )


def load(path: str) -> Expect:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ExpectError(f"cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ExpectError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from exc
    return parse(data)


class Section:
    """Typed reads of one check's section; a wrong value raises SectionError naming the key."""

    def __init__(self, check: str, data: Mapping[str, Any] | None) -> None:
        self.check = check
        self.data: Mapping[str, Any] = data or {}

    def _key(self, key: str) -> str:
        return f"checks.{self.check}.{key}"

    def str_opt(self, key: str) -> str | None:
        v = self.data.get(key)
        if v is None or isinstance(v, str):
            return v
        raise SectionError(f"{self._key(key)}: expected a string, got {v!r}")

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.data.get(key, default)
        if isinstance(v, bool):
            return v
        raise SectionError(f"{self._key(key)}: expected true or false, got {v!r}")

    def strs(self, key: str) -> tuple[str, ...]:
        v = self.data.get(key, [])
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return tuple(v)
        raise SectionError(f"{self._key(key)}: expected a list of strings, got {v!r}")

    def objects(self, key: str) -> tuple[Mapping[str, Any], ...]:
        v = self.data.get(key, [])
        if isinstance(v, list) and all(isinstance(x, dict) for x in v):
            return tuple(v)
        raise SectionError(f"{self._key(key)}: expected a list of objects, got {v!r}")

    def mapping(self, key: str) -> Mapping[str, str] | None:
        v = self.data.get(key)
        if v is None:
            return None
        if isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            return v
        raise SectionError(f"{self._key(key)}: expected an object of strings, got {v!r}")


class SectionError(ValueError):
    """One check's section of expect.json is wrong: that check fails, the others run."""
