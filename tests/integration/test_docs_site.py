"""The docs site builds in strict mode (what `make docs` runs): a broken link or anchor, a page missing from
mkdocs.yml's nav, or any other warning fails the build, and so this test, in `make test` and CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    done = build(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {str(p.relative_to(tmp_path / "site")) for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "reference/cli/index.html", "reference/manifest/components/index.html",
            "benchmarks/index.html"} <= pages


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](gone.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().split("\nnav:")[0].replace("docs_dir: docs",
                                                                                   f"docs_dir: {docs}") + "\n")
    done = build(tmp_path / "site", config)
    assert done.returncode != 0 and "gone.md" in done.stdout + done.stderr
