"""expect.json (schema 1): what the image must show. README.md beside this file is the reference.

Only the top level is validated here; each check validates its own section and turns a problem in it
into a failed result that names the key, so that one bad section cannot hide the other checks.
"""

from __future__ import annotations

import json
import math
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
    "fp8",
    "attention",
    "hybridep",
    "arch",
    "megatron-args",
    "requirements",
    "train",
)
StubMode = Literal["auto", "always", "never"]
STUB_MODES: tuple[StubMode, ...] = ("auto", "always", "never")
DEFAULT_PROBE_TIMEOUT_S = 180.0
MAX_PROBE_TIMEOUT_S = 86400.0  # a day: beyond that a value is a typo (or 1e999), not a limit


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


def _str(data: Mapping[str, Any], key: str) -> str:
    v = data.get(key, "")
    if not isinstance(v, str):
        raise ExpectError(f"{key}: expected a string, got {v!r}")
    return v


def probe_timeout(value: Any, key: str = "probe_timeout_s") -> float:
    """A positive, finite number of seconds of at most a day (1e999 reads as infinity, NaN is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpectError(f"{key}: expected a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an integer too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_PROBE_TIMEOUT_S:
        raise ExpectError(f"{key}: expected a number of seconds above 0 and at most {MAX_PROBE_TIMEOUT_S:.0f}, "
                          f"got {value!r}")
    return seconds


def parse(data: Any) -> Expect:
    if not isinstance(data, dict):
        raise ExpectError(f"the top level must be an object, got {type(data).__name__}")
    schema = data.get("schema")
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != EXPECT_SCHEMA:
        raise ExpectError(
            f"schema {schema!r} is not supported by this smoke suite (it reads schema {EXPECT_SCHEMA}); "
            "regenerate expect.json with the buildctl that copied this suite"
        )
    known = {"schema", "stack", "variant", "required", "gpu_tier", "gpu_waiver", "python_path",
             "driver_stub", "stub_paths", "probe_timeout_s", "checks", "comment", "runner"}
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
    timeout = probe_timeout(data.get("probe_timeout_s", DEFAULT_PROBE_TIMEOUT_S))
    return Expect(
        stack=_str(data, "stack"),
        variant=_str(data, "variant"),
        required=required,
        gpu_tier=gpu_tier,
        gpu_waiver=_str(data, "gpu_waiver"),
        python_path=_strs(data.get("python_path", []), "python_path"),
        driver_stub=stub,
        stub_paths=_strs(data.get("stub_paths", []), "stub_paths"),
        probe_timeout_s=timeout,
        checks=checks,
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load(path: str) -> Expect:
    """Read and check expect.json; every problem with the file is an ExpectError naming it."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ExpectError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ExpectError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from exc
    try:
        # NaN, Infinity and -Infinity are Python's extensions to JSON: refused like any other non-JSON
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ExpectError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from exc
    except ValueError as exc:
        raise ExpectError(f"{path}: not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ExpectError(f"{path}: not valid JSON: nested too deeply") from exc
    try:
        return parse(data)
    except ExpectError as exc:
        raise ExpectError(f"{path}: {exc}") from exc


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

    def number(self, key: str, default: float, *, low: float = 0.0, high: float = MAX_PROBE_TIMEOUT_S) -> float:
        """A finite number with low < value <= high (booleans are not numbers here)."""
        v = self.data.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low < v <= high:
            raise SectionError(f"{self._key(key)}: expected a number above {low:g} and at most {high:g}, got {v!r}")
        return float(v)

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
