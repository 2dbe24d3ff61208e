"""`python3 -m smoke` refuses what it cannot run with exit 2 and a clear message, and its JUnit adds up.

main() runs in-process here: every case below is refused before a probe process would start.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from smoke.__main__ import main
from smoke.report import CheckResult, Report, junit_xml

GOOD = {"schema": 1, "required": ["imports"], "checks": {"imports": {"modules": ["json"]}}}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.parametrize(("content", "message"), [
    (b'{"schema": 1, "stack": "caf\xe9"}', ":1: not UTF-8 text (byte 0xe9 at offset 27)"),
    (b'{"schema": 1,\n "required": [}', ":2:15: not valid JSON: Expecting value"),
    (b'{"schema": 1, "probe_timeout_s": 1e999}', "probe_timeout_s: expected a number of seconds above 0 and at most 86400, got inf"),
    (b'{"schema": 1, "probe_timeout_s": NaN}', "not valid JSON: NaN is not a JSON number"),
    (b'{"schema": 1, "probe_timeout_s": -Infinity}', "not valid JSON: -Infinity is not a JSON number"),
    (b'{"schema": 1, "probe_timeout_s": "60"}', "probe_timeout_s: expected a number of seconds, got '60'"),
    (b'{"schema": 1, "probe_timeout_s": 1' + b"0" * 400 + b"}", "probe_timeout_s: expected a number of seconds above 0"),
    (b'{"schema": true}', "schema True is not supported"),
    (b'{"schema": 1, "stack": 5}', "stack: expected a string, got 5"),
    (b'{"schema": 1, "gpu_waiver": ["x"]}', "gpu_waiver: expected a string, got ['x']"),
    (b'{"schema": 1, "required": "versions"}', "required: expected a list of strings, got 'versions'"),
    (b'[' * 100000 + b']' * 100000, "not valid JSON: nested too deeply"),
    (b'[1, 2]', "the top level must be an object, got list"),
])
def test_bad_expect_json_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 content: bytes, message: str) -> None:
    exp = tmp_path / "expect.json"
    exp.write_bytes(content)
    code, report, err = run_main(capsys, "--expect", str(exp))
    assert code == 2
    assert report["ok"] is False and report["checks"] == []
    assert str(report["error"]).startswith(f"expect.json: {exp}")
    assert message in str(report["error"])
    assert f"python3 -m smoke: expect.json: {exp}" in err


def test_unreadable_expect_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, _ = run_main(capsys, "--expect", str(tmp_path))  # a folder
    assert code == 2
    assert str(report["error"]) == f"expect.json: cannot read {tmp_path}: Is a directory"


def test_bad_expect_still_writes_a_junit_that_adds_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exp, xml = tmp_path / "expect.json", tmp_path / "out.xml"
    exp.write_text('{"schema": 1, "required": ["mxfp4"]}')
    code, _, _ = run_main(capsys, "--expect", str(exp), "--junit", str(xml))
    assert code == 2
    suite = ET.parse(xml).getroot()
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures"), suite.get("skipped")) == ("1", "1", "0", "0")
    (case,) = suite
    assert case.get("name") == "expect" and case[0].tag == "error"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expect.json", "out.xml"]  # no temporary left


@pytest.mark.parametrize("where", ["missing-folder", "folder", "under-a-file"])
def test_unwritable_junit_path_exits_2_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      where: str) -> None:
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps(GOOD))
    if where == "missing-folder":
        target = tmp_path / "no" / "such" / "out.xml"
        why = "cannot write there: No such file or directory"
    elif where == "folder":
        target = tmp_path
        why = "is a folder, not a file"
    else:  # (a read-only folder would not do: root, as in CI containers, writes there anyway)
        target = exp / "out.xml"
        why = "cannot write there: Not a directory"
    code, report, err = run_main(capsys, "--expect", str(exp), "--junit", str(target))
    assert code == 2
    assert report["error"] == f"--junit {target}: {why}"
    assert err == f"python3 -m smoke: --junit {target}: {why}\n"
    assert report["checks"] == []  # refused before any check ran


def _result(name: str, status: str, required: bool, deferred: str | None = None) -> CheckResult:
    return CheckResult(name=name, status=status, summary=f"{name} {status}", required=required,  # type: ignore[arg-type]
                       deferred=deferred)  # type: ignore[arg-type]


def test_junit_counts_agree_with_the_testcases() -> None:
    checks = (
        _result("versions", "pass", True),
        _result("cudnn", "fail", True),
        _result("arch", "skipped", True),  # a plain skip of a required check: a failure
        _result("mxfp8", "unsupported", True),
        _result("protected", "skipped", True, deferred="build"),
        _result("imports", "fail", False),  # not required: reported as skipped
        _result("attention", "skipped", False),
    )
    r = Report(tier="gpu", stack="s", variant="v", checks=checks, python={}, driver={}, started="t", duration_s=1.0)
    suite = ET.fromstring(junit_xml(r))
    cases = list(suite)
    kinds = [next((el.tag for el in case if el.tag in ("failure", "error", "skipped")), "pass") for case in cases]
    assert kinds == ["pass", "failure", "failure", "skipped", "skipped", "skipped", "skipped"]
    assert suite.get("tests") == str(len(cases)) == "7"
    assert suite.get("failures") == str(kinds.count("failure")) == str(len(r.failed))
    assert suite.get("skipped") == str(kinds.count("skipped")) == "4"
    assert suite.get("errors") == "0"
