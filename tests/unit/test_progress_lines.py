"""`--progress-lines` (tests/progress.py), in a pytest session of its own (pytester, in this process)."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)
INNER = ("-p", "tests.progress", "-p", "no:benchmark", "-p", "no:cacheprovider")  # benchmark would run git


def test_a_line_per_engine_test_and_per_unit_file_and_pytest_summary_kept(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**{
        "tests/unit/test_a.py": "def test_good():\n    pass\n\ndef test_bad():\n    assert False\n",
        "tests/engine/test_b.py": "def test_slow():\n    pass\n",
        "tests/integration/test_c.py": "import pytest\n\n@pytest.mark.skip(reason='no git')\ndef test_git():\n    pass\n",
    })
    result = pytester.runpytest(*INNER, "--progress-lines", "-ra")
    out = result.stdout.str()
    lines = [line.strip() for line in out.splitlines()]
    assert any(line.startswith("start") and line.endswith("tests/engine/test_b.py::test_slow") for line in lines)
    assert any(line.startswith("[") and " PASSED " in line and line.endswith("tests/engine/test_b.py::test_slow")
               for line in lines)
    assert any(" SKIPPED " in line and line.endswith("tests/integration/test_c.py::test_git") for line in lines)
    assert any(" FAILED " in line and line.endswith("tests/unit/test_a.py::test_bad") for line in lines)
    assert any(" FILE " in line and line.endswith("tests/unit/test_a.py: 1 failed, 1 passed") for line in lines)
    assert "FAILED tests/unit/test_a.py::test_bad - assert False" in out  # pytest's own short summary stays
    result.assert_outcomes(passed=2, failed=1, skipped=1)


def test_without_the_option_pytest_prints_as_usual(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**{"tests/unit/test_a.py": "def test_good():\n    pass\n"})
    out = pytester.runpytest(*INNER).stdout.str()
    assert "FILE" not in out and "tests/unit/test_a.py ." in out
