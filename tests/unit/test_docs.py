"""The docs say what the code does: generated parts are current, named files exist, shown commands parse.

- README.md's commands and exit-code tables, docs/reference/cli.md and docs/reference/manifest/<group>.md are
  what scripts/gendocs.py makes from the parser, the error classes and the manifest model, to the byte;
- every file of the repository a page names in a code span (a run file under bench/results or tests/data, a
  module, a test) exists, so a figure keeps its source and a moved file is a failing test, not a dead name;
- every `buildctl ...` line of a page's ```sh block parses with the real parser, every `make TARGET` there is a
  Makefile target and every `python3 PATH` script exists (tests/integration/test_docs_site.py builds the site
  in strict mode; the engine tests run the commands themselves);
- the README stays a front door: under 250 lines, `make demo` and `make test` its first commands.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from buildctl.cli import build_parser
from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
gendocs = load_script("gendocs", ROOT / "scripts" / "gendocs.py")

# A code span that names a repository file: it starts with one of these folders and names no placeholder.
CITED = re.compile(r"`((?:bench|tests|buildctl|scripts|images|smoke|pins|demo|docs|\.githooks|\.ci)/[^`\s]*)`")
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.|/\.\.\./|STACK|NODE|\$")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", sorted(gendocs.generated()), ids=_name)
def test_generated_docs_are_current(path: Path) -> None:
    want = gendocs.generated()[path]
    assert path.is_file(), f"{_name(path)} is missing: run `python3 scripts/gendocs.py`"
    assert path.read_text() == want, f"{_name(path)} differs from the code: run `python3 scripts/gendocs.py`"


def test_every_manifest_key_is_documented() -> None:
    from buildctl.manifest import schema

    missing = [d.path for d in schema.fields() if not d.doc and "." in d.path]
    assert not missing, f"keys without a doc in buildctl/manifest/model.py (field metadata=_doc(...)): {missing}"


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move the detail into docs/"
    assert lines[:4] == ["# buildctl", "", "```sh", lines[3]] and lines[3].startswith("make demo ")
    assert lines[4].startswith("make test ")


def cited(page: Path) -> list[str]:
    text = page.read_text()
    return [m for m in CITED.findall(text) if not PLACEHOLDER.search(m)]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_file_a_page_names_exists(page: Path) -> None:
    missing = []
    for name in cited(page):
        name = name.split("::")[0].split("#")[0].rstrip(".,:;)")
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{_name(page)} names files that are not in the repository: {missing}"


def sh_lines(page: Path) -> list[str]:
    """The commands of a page's ```sh blocks, comments removed."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", page.read_text(), re.S | re.M):
        for line in block.splitlines():
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_a_page_shows_is_real(page: Path) -> None:
    targets = _make_targets()
    bad = []
    for line in sh_lines(page):
        words = shlex.split(line)
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]  # VAR=value before the command
        if not words:
            continue
        if words[0] == "buildctl":
            try:
                build_parser(words[1:]).parse_args(words[1:])
            except SystemExit:
                bad.append(f"{line}: the parser refuses it")
        elif words[0] == "make":
            unknown = [w for w in words[1:] if "=" not in w and w not in targets]
            bad += [f"{line}: no make target {w}" for w in unknown]
        elif words[0] in ("python3", "bash") and len(words) > 1 and not words[1].startswith("-") \
                and not (ROOT / words[1]).is_file():
            bad.append(f"{line}: no file {words[1]}")
    assert not bad, f"{_name(page)}:\n  " + "\n  ".join(bad)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`bench/results/nope.json`\n\n```sh\nbuildctl build --no-such-flag demo\nmake nope\n```\n")
    assert cited(page) == ["bench/results/nope.json"]
    assert sh_lines(page) == ["buildctl build --no-such-flag demo", "make nope"]
    with pytest.raises(SystemExit):
        build_parser(["build"]).parse_args(["build", "--no-such-flag", "demo"])
    assert "nope" not in _make_targets()
