"""All terminal output (the only module that imports rich).

Results go to stdout (tables, JSON); progress and diagnostics go to stderr, so that
`buildctl ... --json | jq` always sees clean JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


class UI:
    def __init__(self, *, out: Console | None = None, err: Console | None = None, quiet: bool = False) -> None:
        # Piped output gets a wide console: a 40-digit SHA folded over three lines cannot be copied.
        self.out = out or Console(file=sys.stdout, highlight=False, soft_wrap=True,
                                  width=None if sys.stdout.isatty() else 220)
        self.err = err or Console(file=sys.stderr, highlight=False, soft_wrap=True,
                                  width=None if sys.stderr.isatty() else 220)
        self.quiet = quiet

    # -- results (stdout)

    def json(self, obj: Any) -> None:
        self.out.file.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
        self.out.file.flush()

    def print(self, text: str = "") -> None:
        self.out.print(text, markup=False)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        t = Table(title=title, title_justify="left", show_lines=False)
        for c in columns:
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(*("" if v is None else str(v) for v in r))
        self.out.print(t)

    # -- diagnostics (stderr)

    def info(self, text: str) -> None:
        if not self.quiet:
            self.err.print(text, markup=False)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {text}", style="yellow", markup=False)

    def error(self, text: str) -> None:
        self.err.print(f"error: {text}", style="red", markup=False)
