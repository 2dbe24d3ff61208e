"""A strict reader of the shell and Dockerfile text buildctl renders, for tests (pure).

It splits text into the words and operators a POSIX shell (or the Dockerfile builder) would see, and
says for each piece of a word whether it is literal text or something the shell would expand (``$x``,
``${x}``, ``$(...)``, backticks, an unquoted glob or ``~``). Tests render a node twice, once with
plain values and once with values a shell reads specially, and compare what this reader sees: the same
operators and expansions, and literal text that differs only by the values themselves.

It covers the shell the templates in images/ and the launch script use (no here-documents, no
``case`` patterns spanning words); anything it does not know is read as an expansion, so that an
unexpected construct makes a comparison fail rather than pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Seg = tuple[str, str]  # ("lit" | "exp" | "glob", text)


@dataclass(frozen=True)
class Token:
    kind: str  # "word" or "op"
    segs: tuple[Seg, ...]

    @property
    def literal(self) -> str | None:
        """The word's text when every piece is literal, else None."""
        if self.kind != "word" or any(k != "lit" for k, _ in self.segs):
            return None
        return "".join(t for _, t in self.segs)


def _merge(segs: list[Seg]) -> tuple[Seg, ...]:
    out: list[Seg] = []
    for kind, text in segs:
        if out and out[-1][0] == kind == "lit":
            out[-1] = ("lit", out[-1][1] + text)
        else:
            out.append((kind, text))
    return tuple(out)


_OPS = ("&&", "||", ";;", ">>", "<<", ">&", "<&", ";", "&", "|", "(", ")", "<", ">")


def _balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the ``close`` matching the ``open_`` at ``text[i]`` (quotes inside skipped)."""
    depth = 0
    j = i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            j = text.index("'", j + 1) + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError(f"unbalanced {open_} at {i}: {text[i:i + 40]!r}")


def _dollar(text: str, i: int, *, quoted: bool = False) -> tuple[list[Seg], int]:
    """The pieces starting with the ``$`` at ``text[i]``. ``${NAME:-WORD}`` outside double quotes gives the
    expansion around the pieces of WORD (read as a shell word: the default a launch script gives a variable)."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if nxt == "{":
        j = _balanced(text, i + 1, "{", "}")
        m = re.match(r"^\$\{([A-Za-z_][A-Za-z0-9_]*):-", text[i:j])
        if m and not quoted:
            inner = shell_tokens(text[i + m.end():j - 1])
            if len(inner) == 1 and inner[0].kind == "word":
                return [("exp", m.group()), *inner[0].segs, ("exp", "}")], j
        return [("exp", text[i:j])], j
    if nxt == "(":
        j = _balanced(text, i + 1, "(", ")")
        return [("exp", text[i:j])], j
    if nxt == "'":
        j = text.index("'", i + 2) + 1
        return [("exp", text[i:j])], j  # ANSI-C quoting: treated as special
    if nxt and (nxt.isalnum() or nxt == "_"):
        j = i + 1
        if nxt.isdigit():
            j += 1
        else:
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
        return [("exp", text[i:j])], j
    if nxt and nxt in "@*#?$!-":
        return [("exp", text[i:i + 2])], i + 2
    return [("lit", "$")], i + 1


def shell_tokens(text: str) -> list[Token]:
    """Words and operators of shell ``text``; newlines are ``;`` operators, comments are dropped."""
    out: list[Token] = []
    segs: list[Seg] = []
    in_word = False
    i = 0

    def end() -> None:
        nonlocal segs, in_word
        if in_word:
            out.append(Token("word", _merge(segs)))
        segs, in_word = [], False

    while i < len(text):
        c = text[i]
        if c == "\\" and text[i + 1:i + 2] == "\n":
            i += 2
            continue
        if c in " \t":
            end()
            i += 1
            continue
        if c == "\n":
            end()
            out.append(Token("op", (("lit", ";"),)))
            i += 1
            continue
        if c == "#" and not in_word:
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is not None:
            end()
            out.append(Token("op", (("lit", op),)))
            i += len(op)
            continue
        in_word = True
        if c == "\\":
            segs.append(("lit", text[i + 1]))
            i += 2
        elif c == "'":
            j = text.index("'", i + 1)
            segs.append(("lit", text[i + 1:j]))
            i = j + 1
        elif c == '"':
            i += 1
            while text[i] != '"':
                d = text[i]
                if d == "\\" and text[i + 1] in '$`"\\\n':
                    if text[i + 1] != "\n":
                        segs.append(("lit", text[i + 1]))
                    i += 2
                elif d == "$":
                    more, i = _dollar(text, i, quoted=True)
                    segs.extend(more)
                elif d == "`":
                    j = text.index("`", i + 1)
                    segs.append(("exp", text[i:j + 1]))
                    i = j + 1
                else:
                    segs.append(("lit", d))
                    i += 1
            i += 1
        elif c == "$":
            more, i = _dollar(text, i)
            segs.extend(more)
        elif c == "`":
            j = text.index("`", i + 1)
            segs.append(("exp", text[i:j + 1]))
            i = j + 1
        elif c in "*?[":
            segs.append(("glob", c))
            i += 1
        elif c == "~" and not segs:
            segs.append(("exp", c))
            i += 1
        else:
            segs.append(("lit", c))
            i += 1
    end()
    return out


def dockerfile_words(text: str) -> list[Token]:
    """Words of a Dockerfile instruction's arguments as the builder reads them (ENV, LABEL, WORKDIR):
    double and single quotes group, backslash escapes, ``$name`` / ``${name}`` are substituted."""
    out: list[Token] = []
    segs: list[Seg] = []
    in_word = False
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\n":
            if in_word:
                out.append(Token("word", _merge(segs)))
            segs, in_word = [], False
            i += 1
            continue
        in_word = True
        if c == "\\":
            segs.append(("lit", text[i + 1]))
            i += 2
        elif c == "'":
            j = text.index("'", i + 1)
            segs.append(("lit", text[i + 1:j]))
            i = j + 1
        elif c == '"':
            i += 1
            while text[i] != '"':
                if text[i] == "\\" and text[i + 1] in '"$\\':
                    segs.append(("lit", text[i + 1]))
                    i += 2
                elif text[i] == "$" and (text[i + 1:i + 2] == "{" or text[i + 1:i + 2].isalnum()
                                         or text[i + 1:i + 2] == "_"):
                    more, i = _dollar(text, i, quoted=True)
                    segs.extend(more)
                else:
                    segs.append(("lit", text[i]))
                    i += 1
            i += 1
        elif c == "$" and (text[i + 1:i + 2] == "{" or text[i + 1:i + 2].isalnum() or text[i + 1:i + 2] == "_"):
            more, i = _dollar(text, i, quoted=True)
            segs.extend(more)
        else:
            segs.append(("lit", c))
            i += 1
    if in_word:
        out.append(Token("word", _merge(segs)))
    return out


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: continuation lines joined, comment lines dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue  # a comment line inside a continued instruction
        if line.endswith("\\"):
            current += line + "\n"
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest))
        current = ""
    if current:
        raise ValueError(f"the text ends inside a continued instruction: {current[:80]!r}")
    return out
