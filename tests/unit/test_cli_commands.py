"""cli.COMMANDS (which module a subcommand word imports) says what the command modules register."""

from __future__ import annotations

import argparse
import importlib

import pytest

from buildctl import cli


def _registered(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def test_the_table_names_every_subcommand_of_every_module() -> None:
    want = {word: module for module in cli.COMMAND_MODULES for word in _registered(module)}
    assert want == cli.COMMANDS


@pytest.mark.parametrize(("argv", "word"), [
    (["build", "demo"], "build"), (["-q", "build", "demo"], "build"), (["--project", "/x", "-q", "plan", "demo"], "plan"),
    (["--project=/x", "push", "demo"], "push"), (["--help"], None), (["--version"], None), ([], None),
    (["-q", "--project"], None), (["nosuch"], "nosuch"),
])
def test_the_command_word_is_found_past_the_global_options(argv: list[str], word: str | None) -> None:
    assert cli._command_word(argv) == word


def test_a_subcommand_parses_the_same_with_only_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-q", "build", "demo", "--local", "--engine", "unix:///x.sock"]
    one, full = cli.build_parser(argv).parse_args(argv), cli.build_parser().parse_args(argv)
    assert vars(one) == vars(full)
    # the help of the subcommand and the refusal of an unknown one are the full parser's
    for parser in (cli.build_parser(["build", "--help"]), cli.build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(["build", "--help"])
    first, second = capsys.readouterr().out.split("usage: buildctl build", 2)[1:]
    assert first == second
    with pytest.raises(SystemExit):
        cli.build_parser(["nosuch"]).parse_args(["nosuch"])
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
