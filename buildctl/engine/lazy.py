"""docker-py, requests and urllib3, imported on first use.

Importing them costs about 0.1 s (requests and urllib3 with it), more than a no-op build or the bookkeeping
of a BuildKit build: a command that only asks the local engine short questions (peek.py) never loads them.
The modules of this package bind ``docker``, ``requests`` and ``urllib3`` to a ``Module`` at run time (and to
the real modules for the type checker); the first attribute read imports the real module through
importlib, whose module locks make that safe from several threads at once.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class Module:
    """Stands for the module ``name`` until an attribute is read; then reads it from the real module (a
    submodule that the package did not import itself, such as ``docker.errors``, is imported as well)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        try:
            return getattr(module, attr)
        except AttributeError:
            return importlib.import_module(f"{self._name}.{attr}")

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"
