"""What every manifest value carries: where it came from (``at``), and the doc text of its fields."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from buildctl.errors import Location

NOWHERE = Location(file="<none>")


def doc(text: str) -> dict[str, str]:
    return {"doc": text}


def loc() -> Any:
    """Default for the ``at`` field of every manifest value."""
    return field(default=NOWHERE, compare=False, repr=False, metadata=doc("(set by the loader)"))
