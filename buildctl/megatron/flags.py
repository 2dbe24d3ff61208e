"""The flags a Megatron-LM tree accepts, as data (FlagSpec, FlagTable), and how deprecations are read from help text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

ValueType = Literal["int", "float", "str", "bool", "other"]
Action = Literal["store", "store_true", "store_false", "store_const", "boolean_optional", "append", "extend",
                 "count", "other"]
Origin = Literal["add_argument", "dataclass"]
Choice = str | int | float


# "--enable-cuda-graph is deprecated", "--tokenizer-hf-use-fast argument is deprecated"; not "--x=full is ..."
_DEPRECATED_MENTION = re.compile(r"(--[A-Za-z0-9][\w-]*)(?:\s+(?:argument|flag|option))?\s+(?:is|are)\s+deprecated",
                                 re.IGNORECASE)
_DEPRECATED_WORD = re.compile(r"\b(?:DEPRECATED|Deprecated)\b|\b(?:flag|argument|option) is deprecated\b")
# "use --x instead", 'Use "--x ..."', "see --x", "replaced by cuda_graph_impl" (a dest: the caller maps it)
_REPLACEMENT = re.compile(
    r"\b(?:use|see|replaced by|in favou?r of)\s+[\"'`]?(--[A-Za-z0-9][\w-]*|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b",
    re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class FlagSpec:
    """One declaration: every option string it accepts and how argparse treats a value."""

    options: tuple[str, ...]
    dest: str
    action: Action
    nargs: str | int | None = None
    value_type: ValueType = "str"
    choices: tuple[Choice, ...] | None = None  # values accepted after type conversion; None: any
    negated: tuple[str, ...] = ()  # options that store False (BooleanOptionalAction's --no-X)
    deprecated: str | None = None  # Megatron's own words, when it marks the flag deprecated
    condition: str | None = None  # the flag exists only when this holds (an optional module, ...)
    origin: Origin = "add_argument"
    source: str = ""  # "megatron/training/arguments.py:1607" or "...transformer_config.py:125 (TransformerConfig.x)"

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append", "extend") and self.nargs != 0

    def value_for(self, option: str) -> bool | None:
        """The constant a value-less option stores (True/False), None for anything else."""
        if self.action == "store_true":
            return True
        if self.action == "store_false":
            return False
        if self.action == "boolean_optional":
            return option not in self.negated
        return None


@dataclass(frozen=True, kw_only=True)
class FlagTable:
    root: str
    version: str | None  # megatron/core/package_info.py, when present
    flags: Mapping[str, FlagSpec]  # option string -> its declaration
    allow_abbrev: bool  # argparse's prefix matching (Megatron turns it off)
    generated: bool  # some flags come from ArgumentGroupFactory dataclasses
    notes: tuple[str, ...] = ()

    def get(self, option: str) -> FlagSpec | None:
        return self.flags.get(option)

    def __len__(self) -> int:
        return len(self.flags)


class NotMegatronSource(Exception):
    """The folder is not a Megatron-LM tree (no megatron/training/arguments.py)."""


def _deprecation(help_text: str, dest: str, comment: str = "") -> str | None:
    """Megatron's own deprecation mark on a declaration: its help text, or a *_deprecated dest.

    Only the capitalised word (a sentence of its own: "Deprecated: use --x", "DEPRECATED. ...") or "this
    flag is deprecated" counts: lower-case mentions are about values or formats ('"full" is deprecated').
    """
    text = " ".join(help_text.split())
    if _DEPRECATED_WORD.search(text):
        return text
    if "deprecated" in dest:
        return " ".join(p for p in (text, comment) if p) or f"its dest {dest} marks it deprecated"
    return None


def replacement_in(text: str) -> str | None:
    """The flag (or dest) a deprecation message points to ("use --x instead"), if it names one."""
    m = _REPLACEMENT.search(text)
    return m.group(1) if m else None
