"""All terminal output (the only module that imports rich).

Results go to stdout (tables, JSON); progress and diagnostics go to stderr, so that
`buildctl ... --json | jq` always sees clean JSON.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import unicodedata
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported when first used: a quiet no-op build prints without it
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table


def _escape_char(char: str) -> str:
    n = ord(char)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


# Cc: C0, DEL and C1 controls (ESC starts CSI/OSC sequences: colours, hyperlinks, OSC 52 clipboard writes; CR
# and backspace overwrite what is shown); Cf: bidi overrides and isolates, zero-width marks; Zl/Zp: U+2028 and
# U+2029; Cs: lone surrogates; Co/Cn: private use and unassigned.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def safe_text(text: object, *, one_line: bool = False) -> str:
    """Text from outside (commit subjects, registry values, file content, error messages quoting them) made
    harmless for a terminal: every control, format or separator character is shown as a Python-style escape
    (``\\x1b``, ``\\u202e``) instead of acting on the terminal. Newlines and tabs are kept, newlines not with
    ``one_line``. Markup is never interpreted: everything UI prints goes out with markup off (tables as Text).
    Every UI method that prints text passes it through here: the one path from outside text to the terminal."""
    s = text if isinstance(text, str) else str(text)
    if s.isascii() and s.isprintable():
        return s
    return "".join(_escape_char(c) if (c == "\n" and one_line) or (
        c not in "\n\t" and unicodedata.category(c) in _UNSAFE_CATEGORIES) else c for c in s)


def _json_safe(text: str) -> str:
    if text.isascii() and text.isprintable():
        return text
    out: list[str] = []
    for c in text:
        if c not in "\n\t" and unicodedata.category(c) in _UNSAFE_CATEGORIES:
            b = c.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(b[i:i + 2], 'big'):04x}" for i in range(0, len(b), 2))
        else:
            out.append(c)
    return "".join(out)


def _console(file: Any) -> Console:
    from rich.console import Console

    # Piped output gets a wide console: a 40-digit SHA folded over three lines cannot be copied.
    return Console(file=file, highlight=False, soft_wrap=True, width=None if file.isatty() else 220)


class UI:
    def __init__(self, *, out: Console | None = None, err: Console | None = None, quiet: bool = False) -> None:
        self._out = out
        self._err = err
        self.quiet = quiet

    @property
    def out(self) -> Console:
        if self._out is None:
            self._out = _console(sys.stdout)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = _console(sys.stderr)
        return self._err

    def line(self, text: str) -> None:
        """One line of plain text to stdout, as it is (no markup, no emoji codes, no wrapping)."""
        f = self._out.file if self._out is not None else sys.stdout
        f.write(safe_text(text) + "\n")
        f.flush()

    # -- results (stdout)

    def json(self, obj: Any) -> None:
        self.out.file.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
        self.out.file.flush()

    def document(self, text: str) -> None:
        """A document (JSON of a standard format) as given: no markup, emoji codes or wrapping; a control or
        format character in it (only possible inside a JSON string) as its JSON escape, same meaning."""
        text = _json_safe(text)
        self.out.file.write(text if text.endswith("\n") else text + "\n")
        self.out.file.flush()

    def print(self, text: str = "") -> None:
        self.out.print(safe_text(text), markup=False, emoji=False)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        from rich.table import Table
        from rich.text import Text

        # Text cells, never markup: a subject "Support [/dev/shm] paths" or "[link=...]" is shown as it is
        t = Table(title=Text(safe_text(title)), title_justify="left", show_lines=False)
        for c in columns:
            t.add_column(Text(safe_text(c)), overflow="fold")
        for r in rows:
            t.add_row(*(Text("" if v is None else safe_text(v)) for v in r))
        self.out.print(t)

    # -- diagnostics (stderr)

    def info(self, text: str) -> None:
        if not self.quiet:
            self.err.print(safe_text(text), markup=False, emoji=False)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {safe_text(text)}", style="yellow", markup=False, emoji=False)

    def error(self, text: str) -> None:
        self.err.print(f"error: {safe_text(text)}", style="red", markup=False, emoji=False)


class NodeProgress:
    """Build progress, one line per node: state, elapsed time, last log line (stderr).

    Thread-safe (nodes build in parallel). On a terminal the lines redraw in place; elsewhere (CI logs,
    pipes) each state change prints one line. Quiet: nothing.
    """

    FINAL = ("cached", "pulled", "built", "failed", "skipped")

    def __init__(self, terminal: UI, nodes: Sequence[str]) -> None:
        self.ui = terminal
        self._lock = threading.Lock()
        self._rows: dict[str, list[Any]] = {n: ["waiting", None, None, ""] for n in nodes}  # state, start, end, last
        self._live: Live | None = None

    def __enter__(self) -> NodeProgress:
        if not self.ui.quiet and self.ui.err.is_terminal:
            from rich.live import Live

            self._live = Live(self._render(), console=self.ui.err, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None, traceback: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(exc_type, exc_value, traceback)
            self._live = None

    def node(self, name: str, state: str, detail: str = "") -> None:
        with self._lock:
            row = self._rows.setdefault(name, ["waiting", None, None, ""])
            now = time.monotonic()
            if state not in self.FINAL and row[1] is None:
                row[1] = now
            if state in self.FINAL:
                row[2] = now
            if state != row[0] or detail:
                row[3] = detail  # a new state starts without the last one's detail
            row[0] = state
            line = self._line(name, row)
        if self._live is not None:
            self._live.update(self._render())
        elif not self.ui.quiet:
            self.ui.err.print(safe_text(line, one_line=True), markup=False, highlight=False, emoji=False)

    def log(self, name: str, line: str) -> None:
        line = line.strip()
        if not line:
            return
        with self._lock:
            if name in self._rows:
                self._rows[name][3] = line
        if self._live is not None:
            self._live.update(self._render())

    @staticmethod
    def _elapsed(row: list[Any]) -> str:
        if row[1] is None:
            return ""
        return f"{(row[2] or time.monotonic()) - row[1]:.1f}s"

    def _line(self, name: str, row: list[Any]) -> str:
        detail = f"  {row[3][:100]}" if row[3] else ""
        return f"{name:<32} {row[0]:<9} {self._elapsed(row):>8}{detail}"

    def _render(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        t = Table(show_header=False, box=None, pad_edge=False)
        for column in ("node", "state", "elapsed", "last"):
            t.add_column(column, overflow="ellipsis", no_wrap=True)
        styles = {"failed": "red", "built": "green", "cached": "dim", "pulled": "cyan", "building": "yellow"}
        with self._lock:
            for name, row in self._rows.items():
                # Text cells: log lines often hold [brackets] that rich would read as markup
                t.add_row(Text(safe_text(name)), Text(row[0], style=styles.get(row[0], "")),
                          Text(self._elapsed(row)), Text(safe_text((row[3] or "")[:100], one_line=True)))
        return t
