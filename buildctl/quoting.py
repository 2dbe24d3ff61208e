"""The one place where a value becomes shell or Dockerfile text (pure).

Everything from a manifest, a lock or the configuration that reaches a shell line (RUN, wheel.sh, the
launch script) goes through ``sh``; everything that reaches a Dockerfile instruction's value (ENV,
LABEL, WORKDIR) through ``dockerfile``; comment text through ``comment``. The syntax rules
(buildctl/syntax.py) refuse control characters before a value gets here; these functions still refuse
NUL and fold newlines, so that a value that slipped through can break a build but never add a line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

# What a shell word may hold unquoted: the set shlex.quote leaves alone.
_SAFE = re.compile(r"^[A-Za-z0-9@%+=:,./_-]+\Z")


def _checked(value: str) -> str:
    if "\x00" in value or "\n" in value or "\r" in value:
        raise ValueError(f"refusing to quote a value holding a NUL or a line break: {value!r}")
    return value


def sh(value: str) -> str:
    """One POSIX shell word that reads back as exactly ``value`` (single quotes, ' as '"'"')."""
    return shlex.quote(_checked(value))


def sh_join(words: Iterable[str]) -> str:
    return " ".join(sh(w) for w in words)


def sh_plain(value: str) -> bool:
    """Whether ``value`` is a shell word as it stands (``sh`` would return it unchanged)."""
    return bool(_SAFE.match(value))


def dockerfile(value: str) -> str:
    """A Dockerfile instruction value (ENV v, LABEL k=v, WORKDIR p): double-quoted, with the three characters
    the builder reads inside double quotes (backslash, double quote, ``$`` of variable substitution) escaped.

    Checked against the classic builder: ``WORKDIR "/opt/a b\\$X \\"q\\" \\\\y"`` gives the working
    directory ``/opt/a b$X "q" \\y``.
    """
    escaped = _checked(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def dockerfile_word(value: str) -> str:
    """``value`` as it stands when it is a plain word (letters, digits, ``@%+=:,./_-``), else ``dockerfile``."""
    return _checked(value) if sh_plain(value) else dockerfile(value)


def comment(value: str) -> str:
    """Text for a one-line ``#`` comment: every run of whitespace (newlines included) becomes one space."""
    return " ".join(value.replace("\x00", " ").split())


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def env_name(name: str) -> str:
    """An environment variable name, checked: it stands unquoted before '=' in shell and ENV lines."""
    if not _ENV_NAME.match(name):
        raise ValueError(f"refusing {name!r} as an environment variable name")
    return name


def word(value: str, pattern: re.Pattern[str], what: str) -> str:
    """A value that must stand as it is (a name, an image reference): checked against ``pattern``, not quoted."""
    if not pattern.match(value) or "\n" in value:
        raise ValueError(f"refusing {value!r} as {what}")
    return value
