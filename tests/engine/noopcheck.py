"""The no-op `buildctl build` (services/noop.py) against the real engine and registry, called from
test_build.py's test_build_every_node_then_nothing once everything is built (no build of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.engine.engine import Engine
from buildctl.services.noop import memo_path

PROJECT = Path(__file__).resolve().parents[2]
HEAVY = ("docker", "yaml", "rich", "requests")

# `buildctl build` as a user runs it, in a process of its own; prints the heavy packages it imported
_PROBE = ("import sys; from buildctl import cli; rc = cli.main(sys.argv[1:]); "
          f"print('imported:', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))); sys.exit(rc)")


def cli_build(root: Path, *args: str) -> tuple[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, "--project", str(root), "-q", "build", "demo", *args],
                          env={**os.environ, "PYTHONPATH": str(PROJECT)}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out, _, imported = done.stdout.rpartition("imported: ")
    return out, json.loads(imported.replace("'", '"'))


def check_the_noop(root: Path, engine: Engine, refs: Mapping[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """After a `buildctl build demo --skip-smoke` that completed: the same command again answers from the memo
    (the engine and the registry asked about the final image, nothing imported that it does not need) with what
    the full way prints; a changed input file goes the full way (and keeps nothing stale)."""
    final = refs["entrypoint"]
    config = load_config(os.environ)
    memos = list(memo_path(config, "x").parent.glob("*.json"))
    assert len(memos) == 1, memos
    out, imported = cli_build(root, "--skip-smoke")
    assert imported == [] and f"demo/default: {final}\n  built 0 node(s), smoke skipped" in out
    # the progress lines are the full way's: the final image cached, every other node skipped
    capsys.readouterr()
    assert cli.main(["--project", str(root), "build", "demo", "--skip-smoke"]) == 0
    lines = [line.split() for line in capsys.readouterr().err.splitlines()]
    assert ["entrypoint", "cached"] in [ln[:2] for ln in lines]
    assert sorted(ln[0] for ln in lines if ln[1:2] == ["skipped"]) == sorted(
        ["base", "system", "python", "compile-env:fastmath", "wheel:fastmath", "assemble"])
    _, imported = cli_build(root, "--skip-smoke", "--jobs", "1")  # --jobs decides nothing: the same memo
    assert imported == []
    # the final reference on another image (labels of another node): the full way
    original = engine.image_id(final)
    assert original is not None
    engine.tag(refs["assemble"], final)
    try:
        assert "docker" in cli_build(root, "--skip-smoke")[1]
    finally:
        engine.tag(original, final)
    assert cli_build(root, "--skip-smoke")[1] == []
    # an input that changed (a comment in the manifest: the same keys) goes the full way, which writes the memo
    # again; the next build answers from it
    manifest = root / "pins" / "demo.yaml"
    text = manifest.read_text()
    manifest.write_text(text + "# touched\n")
    try:
        out, imported = cli_build(root, "--skip-smoke")
        assert "docker" in imported and "built 0 node(s)" in out
        assert cli_build(root, "--skip-smoke")[1] == []
    finally:
        manifest.write_text(text)
