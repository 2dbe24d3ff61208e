"""`buildctl pins schema`: every key of a manifest from the model, each with its type, default and doc."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from buildctl.cli import main
from buildctl.manifest import schema

ROOT = Path(__file__).resolve().parents[2]
KEYS = {d.path: d for d in schema.fields()}


def schema_paths(value: Any, path: str, found: list[str]) -> None:
    """The schema path of every key ``value`` holds under ``path``, as the reference writes it."""
    if isinstance(value, dict):
        for key, item in value.items():
            named = [f"{path}.{w}" for w in ("<name>", "<key>") if any(k.startswith(f"{path}.{w}.") for k in KEYS)]
            exact = f"{path}.{key}" if path else str(key)
            if exact in KEYS:
                found.append(exact)
                if KEYS[exact].kind.removesuffix(", or null").endswith(("mapping", "mappings")):
                    schema_paths(item, exact, found)
            elif named:
                schema_paths(item, named[0], found)
            else:
                found.append(f"{exact} (unknown)")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and any(k.startswith(f"{path}[].") for k in KEYS):
                schema_paths(item, f"{path}[]", found)


@pytest.mark.parametrize("stack", sorted(p.stem for p in (ROOT / "pins").glob("*.yaml")))
def test_every_key_of_the_seed_manifests_is_in_the_schema(stack: str) -> None:
    found: list[str] = []
    schema_paths(yaml.safe_load((ROOT / "pins" / f"{stack}.yaml").read_text()), "", found)
    assert len(found) > 40
    assert not [p for p in found if p.endswith("(unknown)")]


def test_every_key_below_the_top_has_a_doc() -> None:
    assert not [d.path for d in schema.fields() if not d.doc and "." in d.path]


def test_pins_schema_prints_each_key_with_its_type_default_and_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(ROOT), "pins", "schema"]) == 0
    out = capsys.readouterr().out
    assert "components.<name>.changes[].pr: an integer, or null, default null\n    PR number (refs/pull/N/head)" in out
    assert "variants.<name>.platform: one of 'linux/amd64', 'linux/arm64', required" in out
    assert "downloads.<name>.urls.<key>.sha256: a string, required" in out


def test_a_key_the_schema_lacks_is_found() -> None:
    found: list[str] = []
    schema_paths({"variants": {"x": {"imag": "y", "cuda": "13"}}, "env": {"A": "1"}}, "", found)
    assert found == ["variants", "variants.<name>.imag (unknown)", "variants.<name>.cuda", "env"]
