"""What pip said when a requirement cannot be had, read from its output (the build names it, not the index)."""

from __future__ import annotations

from buildctl.builder.wheelhouse import build_output, sdist_script, unavailable


def test_the_requirement_and_the_versions_pip_saw() -> None:
    out = ("ERROR: Could not find a version that satisfies the requirement antlr4-python3-runtime==4.9.3 "
           "(from versions: 4.9.3)\nERROR: No matching distribution found for antlr4-python3-runtime==4.9.3\n")
    assert unavailable(out) == ("antlr4-python3-runtime==4.9.3", "4.9.3")
    assert unavailable("ERROR: No matching distribution found for six==9.9\n") == ("six==9.9", "")
    assert unavailable("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n") is None


def test_the_sdist_build_runs_offline_with_the_base_tools_and_quotes_its_inputs() -> None:
    script = sdist_script("python3", "odd name; rm -rf x.tar.gz", 315532800)
    assert "--no-build-isolation --no-index" in script and "PIP_NO_INDEX=1" in script
    assert "SOURCE_DATE_EPOCH=315532800" in script
    assert "'/in/odd name; rm -rf x.tar.gz'" in script


def test_the_sdist_builds_own_words_are_kept() -> None:
    out = """Processing /in/sdistonly-1.0.tar.gz
  error: subprocess-exited-with-error

  x python setup.py egg_info did not run successfully.
  | exit code: 1
  +-> [1 lines of output]
      this sdist needs a compiler it cannot have
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
"""
    assert build_output(out) == "this sdist needs a compiler it cannot have"
    assert build_output("a\nb\nc", limit=2) == "b\nc"
