"""smoke/ runs inside the images, on their Python: the oldest is 3.10 (NGC 24.01). Nothing in it may need more.

Two checks, both pure: every file parses with Python 3.10's grammar (ast's feature_version), and vermin
(a dev dependency; `make lint` runs it over smoke/ too) finds no module, member or syntax newer than 3.10.
smoke/ruff.toml also lints the folder with target-version py310.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import vermin

OLDEST = (3, 10)
SMOKE = Path(__file__).resolve().parents[2] / "smoke"
FILES = sorted(SMOKE.rglob("*.py"))


def test_smoke_has_files() -> None:
    assert len(FILES) >= 10 and SMOKE / "runner.py" in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SMOKE)))
def test_smoke_parses_with_the_grammar_of_python_3_10(path: Path) -> None:
    ast.parse(path.read_text(), filename=str(path), feature_version=OLDEST)


def test_smoke_needs_nothing_newer_than_python_3_10() -> None:
    config = vermin.Config()
    newer: dict[str, str] = {}
    for path in FILES:
        found = vermin.visit(path.read_text(), config, str(path))
        py3 = found.minimum_versions()[1]
        if py3 is not None and py3 > OLDEST:
            newer[str(path.relative_to(SMOKE))] = found.output_text()
    assert not newer, "smoke/ needs a Python newer than 3.10:\n" + "\n".join(f"{p}:\n{t}" for p, t in newer.items())


def test_the_check_sees_what_3_10_lacks() -> None:
    found = vermin.visit("import tomllib\nfrom datetime import UTC\n", vermin.Config())
    assert found.minimum_versions()[1] == (3, 11)
    with pytest.raises(SyntaxError):
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=OLDEST)


# images/protect.py and images/install.py run in the images too, with the image's own Python: they say 3.8 and
# later (install.py declines below 3.10, so it must still run there to say so)
IMAGE_SCRIPTS = [SMOKE.parent / "images" / "protect.py", SMOKE.parent / "images" / "install.py"]


@pytest.mark.parametrize("path", IMAGE_SCRIPTS, ids=lambda p: p.name)
def test_image_scripts_run_on_python_3_8(path: Path) -> None:
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))
    found = vermin.visit(path.read_text(), vermin.Config(), str(path))
    py3 = found.minimum_versions()[1]
    assert py3 is None or py3 <= (3, 8), found.output_text()
