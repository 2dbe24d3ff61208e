"""The scheduled workflow parses and names only commands and make targets that exist."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from buildctl.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def _run_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for job in doc["jobs"].values():
        for step in job["steps"]:
            lines += [ln.strip() for ln in str(step.get("run", "")).splitlines() if ln.strip()]
    return lines


def _subcommands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _make_targets() -> set[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_ -]+):(?!=)", line)
        if m:
            targets.update(m.group(1).split())
    return targets


def test_workflow_is_scheduled_and_names_existing_commands() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers["schedule"][0]["cron"]
    commands = _subcommands()
    targets = _make_targets()
    used_buildctl, used_make = set(), set()
    for line in _run_lines(doc):
        words = shlex.split(line.split("||")[0].replace("$(", "").replace(")", ""))
        if words and words[0] == "buildctl":
            assert words[1] in commands, f"workflow runs `buildctl {words[1]}`, which does not exist"
            used_buildctl.add(words[1])
        if words and words[0] == "make":
            assert words[1] in targets, f"workflow runs `make {words[1]}`, which the Makefile lacks"
            used_make.add(words[1])
    assert {"pins", "smoke", "evidence"} <= used_buildctl
    assert {"install", "nightly"} <= used_make
    # and the make target really runs the nightly command
    assert re.search(r"^nightly:\n\t\$\(BUILDCTL\) nightly", (ROOT / "Makefile").read_text(), re.M)
