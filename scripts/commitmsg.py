"""The commit message rule, for the commit-msg hook and for CI.

    python3 scripts/commitmsg.py FILE     the hook (.githooks/commit-msg): check the message git is about to record
    python3 scripts/commitmsg.py --range  CI (tests/integration/test_commit_messages.py): every commit since the base

The rule: a subject of at most 72 characters (`area: what changed`), then, when there is a body, one blank line
and the body wrapped at 72 characters, with the why and the figures. A body line may run longer only when it is
one word that cannot be broken: a URL, a path or a hash (breaking it would make it useless); a line indented by
four spaces or more (a command or a table quoted as it ran) may too.

The commits checked in CI: those since the merge base with origin/main, or, where there is none (a fresh clone of
main, whose merge base is itself), since FLOOR, the first commit of the rule (issue 42): history is not rewritten,
so older commits are not held to it. A commit that slipped through can be listed in .githooks/exempt (its full
SHA and why, one a line) rather than rewritten.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 72
FLOOR = "e50916a"  # house: one name per part (the naming pass, the first commit of issue 42)
EXEMPT = ROOT / ".githooks" / "exempt"
UNBREAKABLE = re.compile(r"^\S+$")  # one word: a URL, a path, a hash


def problems(message: str) -> list[str]:
    """What breaks the rule in ``message`` (git's own text: comment lines already stripped), or nothing."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if not subject.strip():
        found.append("the subject (the first line) is empty")
    if len(subject) > LIMIT:
        found.append(f"the subject is {len(subject)} characters; at most {LIMIT} "
                     "(`area: what changed`; the why goes in the body)")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank: one blank line goes between the subject and the body")
    for number, line in enumerate(lines[2:], start=3):
        if len(line) <= LIMIT or UNBREAKABLE.match(line.strip()) or line.startswith("    "):
            continue
        found.append(f"line {number} is {len(line)} characters; wrap the body at {LIMIT}")
    return found


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _ok(*args: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False).returncode == 0


def base() -> str:
    """Where the checked range starts: the merge base with origin/main, unless that is HEAD itself or older
    than FLOOR; else FLOOR."""
    floor = _git("rev-parse", "--verify", f"{FLOOR}^{{commit}}").strip()
    if _ok("rev-parse", "--verify", "--quiet", "origin/main"):
        merge_base = _git("merge-base", "HEAD", "origin/main").strip()
        head = _git("rev-parse", "HEAD").strip()
        if merge_base != head and _ok("merge-base", "--is-ancestor", floor, merge_base):
            return merge_base
    return floor


def exempt() -> set[str]:
    if not EXEMPT.is_file():
        return set()
    return {line.split()[0] for line in EXEMPT.read_text().splitlines() if line.strip() and not line.startswith("#")}


def check_range(start: str) -> list[str]:
    """``SHA subject: problem`` for every commit after ``start`` up to HEAD that breaks the rule."""
    out = _git("log", "--format=%H%x00%B%x00", f"{start}..HEAD")
    fields = out.split("\0")
    skip = exempt()
    found = []
    for sha, message in zip(fields[0::2], fields[1::2], strict=False):
        sha = sha.strip()
        if not sha or sha in skip:
            continue
        for problem in problems(message.strip("\n")):
            found.append(f"{sha[:12]} {message.splitlines()[0][:50]!r}: {problem}")
    return found


def strip_comments(text: str) -> str:
    """The message as git records it with the default cleanup: comment lines and the scissors' tail removed."""
    kept = []
    for line in text.split("\n"):
        if line.startswith("# ------------------------ >8 ------------------------"):
            break
        if not line.startswith("#"):
            kept.append(line.rstrip())
    return "\n".join(kept).strip("\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="check commit messages against the rule (subject <= 72, ...)")
    parser.add_argument("file", nargs="?", type=Path, help="a message file (the commit-msg hook's argument)")
    parser.add_argument("--range", action="store_true", help="every commit since the base (CI)")
    args = parser.parse_args(argv)
    if args.range:
        start = base()
        found = check_range(start)
        count = len(_git("rev-list", f"{start}..HEAD").split())
        if found:
            print(f"{len(found)} problem(s) in the {count} commit(s) since {start[:12]}:", *found, sep="\n  ",
                  file=sys.stderr)
            return 1
        print(f"commit messages: {count} commit(s) since {start[:12]} follow the rule")
        return 0
    if args.file is None:
        parser.error("give a message file, or --range")
    found = problems(strip_comments(args.file.read_text()))
    if found:
        print("commit message refused (scripts/commitmsg.py):", *found, sep="\n  ", file=sys.stderr)
        print("  the message is kept in .git/COMMIT_EDITMSG; `git commit -F FILE` takes it from a file",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
