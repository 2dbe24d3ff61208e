"""The one path from outside text to the terminal (issue 33, item 2): `ui.safe_text`, used by every UI method.

Commit subjects, registry values and file content reach the terminal in tables, result lines and messages. A
subject "Support [/dev/shm] paths" ended `buildctl lock` with rich's MarkupError after the lock was written;
`[link=...]` became a terminal hyperlink; raw ESC/OSC sequences (OSC 52 writes the reader's clipboard) went
out as they were through `bisect`'s "first bad commit" line and `pins show`'s "drags in" lines."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from buildctl import cli
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock, VariantLock
from buildctl.manifest import pins
from buildctl.ui import UI, NodeProgress, safe_text

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"
HOSTILE = [
    "Support [/dev/shm] paths", "[link=https://evil.invalid]click[/link]", "[bold]x[/]", "[/]", "a\\[b",
    f"fix {OSC52} clipboard", "\x1b[2J\x1b[H cleared", "bell\x07", "back\bspace", "cr\roverwrite", "\x9b31m C1",
    "rtl \u202egnp.exe", "isolate \u2066x\u2069", "sep\u2028line\u2029para\x85nel", "zero\u200bwidth",
]
_UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _ui() -> tuple[UI, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return UI(out=Console(file=out, width=400, force_terminal=True, color_system=None),
              err=Console(file=err, width=400, force_terminal=True, color_system=None)), out, err


def _no_unsafe(text: str) -> bool:
    return not any(unicodedata.category(c) in _UNSAFE for c in text if c not in "\n\t")


def test_every_output_method_shows_hostile_text_escaped_and_markup_as_text() -> None:
    ui, out, err = _ui()
    for s in HOSTILE:
        ui.line(f"first bad commit: {s}")
        ui.print(f"drags in {s}")
        ui.table(f"title {s}", [f"col {s}", "b"], [[s, None], ["x", s]])
        ui.info(s)
        ui.warn(s)
        ui.error(s)
    shown = out.getvalue() + err.getvalue()
    assert _no_unsafe(shown), [c for c in shown if unicodedata.category(c) in _UNSAFE]
    for s in ("Support [/dev/shm] paths", "[link=https://evil.invalid]click[/link]", "[bold]x[/]"):
        assert f"drags in {s}\n" in out.getvalue() and f"title {s}" in out.getvalue()
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in out.getvalue()
    assert "rtl \\u202egnp.exe" in err.getvalue()


def test_a_table_cell_with_brackets_is_printed_as_written_not_read_as_markup() -> None:
    ui, out, _ = _ui()
    ui.table("t", ["pin", "locked value"], [["drags in", "abc Support [/dev/shm] paths"],
                                             ["x", "[link=https://evil.invalid]y[/link]"]])
    assert "Support [/dev/shm] paths" in out.getvalue()
    assert "[link=https://evil.invalid]y[/link]" in out.getvalue()
    assert "\x1b]8;" not in out.getvalue()  # no terminal hyperlink


def test_progress_lines_escape_log_text() -> None:
    ui, _, err = _ui()
    err_console = Console(file=err, width=400, color_system=None)  # not a terminal: one line a state change
    ui = UI(out=ui.out, err=err_console)
    with NodeProgress(ui, ["n\x1b[31m"]) as p:
        p.node("n\x1b[31m", "building", f"make: {OSC52}")
    assert _no_unsafe(err.getvalue()) and "\\x1b]52" in err.getvalue()


def test_documents_keep_their_meaning_with_control_characters_as_json_escapes() -> None:
    ui, out, _ = _ui()
    data = {"name": f"x{OSC52}\u2028\x85\u202e\U000f0001y", "n": 1}
    ui.document(json.dumps(data, ensure_ascii=False))
    assert _no_unsafe(out.getvalue())
    assert json.loads(out.getvalue()) == data


def test_plain_text_is_unchanged() -> None:
    for s in ("plain ascii [x] $ `a`", "tabs\tand\nnewlines", "Grüße 日本語 😀 nbsp\u00a0"):
        assert safe_text(s) == s
    assert safe_text("a\nb", one_line=True) == "a\\x0ab"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text())
def test_safe_text_never_lets_a_control_format_or_separator_character_through(s: str) -> None:
    shown = safe_text(s)
    assert _no_unsafe(shown)
    assert "\n" not in safe_text(s, one_line=True)
    # nothing else changes: the safe characters of the input are all there
    assert all(c in shown for c in s if c == "\n" or unicodedata.category(c) not in _UNSAFE)


def test_pins_show_prints_a_dragged_subject_with_escapes_and_brackets_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`pins show`'s "drags in" line: a subject from the repository is outside text (issue 33 item 2)."""
    from tests.unit.test_provenance import LOCK

    (tmp_path / "pins").mkdir()
    manifest = tmp_path / "pins" / "demo.yaml"
    manifest.write_bytes((Path(__file__).resolve().parents[2] / "pins" / "demo.yaml").read_bytes())
    subject = f"Support [/dev/shm] paths [link=https://evil.invalid]x[/link] {OSC52}\u202eend"
    comps = dict(LOCK["components"])  # type: ignore[call-overload]
    comps["fastmath"] = {**comps["fastmath"], "dragged": [{"sha": "c" * 40, "subject": subject, "by": "PR #7"}]}
    lockfile.write(tmp_path / "pins" / "demo.lock.json",
                   Lock(stack="demo", manifest_sha256=pins.manifest_sha256(manifest),
                        variants={"default": VariantLock.from_json({**LOCK, "components": comps})}))
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    assert cli.main(["--project", str(tmp_path), "pins", "show", "demo"]) == 0
    out = capsys.readouterr().out
    assert _no_unsafe(out)
    assert ("fastmath: PR #7 drags in cccccccccccc Support [/dev/shm] paths [link=https://evil.invalid]x[/link] "
            "\\x1b]52;c;cm0gLXJmIH4K\\x07\\u202eend") in out


def test_emoji_codes_in_outside_text_are_shown_as_written() -> None:
    ui, out, err = _ui()
    ui.print("subject :thumbs_up: x")
    ui.error("fix :warning: y")
    ui.table("t", ["c"], [[":smile:"]])
    assert "subject :thumbs_up: x" in out.getvalue() and ":smile:" in out.getvalue()
    assert "error: fix :warning: y" in err.getvalue()
