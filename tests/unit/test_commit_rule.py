"""The commit message rule (scripts/commitmsg.py), message by message."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import load_script

commitmsg = load_script("commitmsg", Path(__file__).resolve().parents[2] / "scripts" / "commitmsg.py")


def test_a_message_that_follows_the_rule_has_no_problem() -> None:
    assert commitmsg.problems("docs: the README as a front door") == []
    assert commitmsg.problems("docs: x\n\n" + "w " * 36 + "\n\nmore\n") == []


def test_the_subject_is_at_most_72_characters() -> None:
    assert commitmsg.problems("a" * 72) == []
    assert commitmsg.problems("a" * 73) == ["the subject is 73 characters; at most 72 "
                                            "(`area: what changed`; the why goes in the body)"]
    assert commitmsg.problems("\n\nbody") == ["the subject (the first line) is empty"]


def test_a_blank_line_follows_the_subject() -> None:
    assert commitmsg.problems("docs: x\nbody right after it") == [
        "the second line is not blank: one blank line goes between the subject and the body"]


def test_the_body_is_wrapped_at_72_but_for_one_word_or_an_indented_quote() -> None:
    long_line = "word " * 15
    assert commitmsg.problems(f"docs: x\n\n{long_line}") == ["line 3 is 75 characters; wrap the body at 72"]
    url = "https://example.invalid/" + "a" * 80
    assert commitmsg.problems(f"docs: x\n\n{url}\n    $ a command quoted as it ran, longer than 72 characters ......") == []


def test_comment_lines_are_not_part_of_the_message() -> None:
    text = "docs: x\n\nbody\n# Please enter the commit message" + "." * 80 + "\n# ------------------------ >8 ------------------------\ndiff"
    assert commitmsg.strip_comments(text) == "docs: x\n\nbody"
