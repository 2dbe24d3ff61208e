"""The requirements check: pip check in the image against the base's run (answers given as data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from smoke import runner
from smoke.checks.requirements import problems
from smoke.expect import parse
from smoke.prober import ProbeResult
from tests.unit.smoke.smoke_harness import FakeTools, driver

BASE = """\
torch-tensorrt 2.5.0a0 has requirement torch<2.6,>=2.5.0.dev, but you have torch 2.6.0.
opencv 4.7.0 requires numpy, which is not installed.
"""


@dataclass
class PipCheckProber:
    output: str
    baseline: str | None
    returncode: int = 1

    def probe(self, name: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
              stub: bool = True) -> ProbeResult:
        assert name == "pip_check" and args["baseline"].endswith("/usr/local/lib/buildctl-pip-check-base.txt")
        return ProbeResult(data={"ok": True, "output": self.output, "baseline": self.baseline,
                                 "returncode": self.returncode})


def check(output: str, baseline: str | None, returncode: int = 1) -> Any:
    exp = parse({"schema": 1, "stack": "t", "variant": "v", "required": ["requirements"],
                 "checks": {"requirements": {"baseline": "/usr/local/lib/buildctl-pip-check-base.txt"}}})
    report = runner.run(exp, "build", prober=PipCheckProber(output, baseline, returncode),  # type: ignore[arg-type]
                        tools=FakeTools(), driver=driver(), env={}, root="/img")
    (result,) = report.checks
    return result


def test_problems_are_keyed_by_distribution_and_requirement_not_versions() -> None:
    assert set(problems(BASE)) == {("torch-tensorrt", "torch"), ("opencv", "numpy")}
    moved = "torch-tensorrt 2.5.0a0 has requirement torch<2.6,>=2.5.0.dev, but you have torch 2.6.1."
    assert set(problems(moved)) == {("torch-tensorrt", "torch")}


def test_what_the_base_already_had_passes_and_is_reported() -> None:
    now = BASE.splitlines()[0].replace("2.6.0", "2.6.1") + "\n"
    r = check(now, BASE)
    assert r.status == "pass", r.summary
    assert "1 inherited from the base" in r.summary
    assert r.details["fixed"] == ["opencv 4.7.0 requires numpy, which is not installed."]


def test_a_requirement_our_layers_broke_fails_naming_it() -> None:
    now = BASE + "demo-dl 1.0 requires demo-sdist, which is not installed.\n"
    r = check(now, BASE)
    assert r.status == "fail"
    assert "demo-dl 1.0 requires demo-sdist, which is not installed." in r.summary
    assert r.details["broken_by_our_layers"] == ["demo-dl 1.0 requires demo-sdist, which is not installed."]


def test_clean_image_and_missing_record() -> None:
    assert check("No broken requirements found.\n", "No broken requirements found.\n", 0).status == "pass"
    r = check("No broken requirements found.\n", None, 0)
    assert r.status == "fail" and "is not in the image" in r.summary
    r = check("/usr/bin/python3: No module named pip\n", "", 1)
    assert r.status == "fail" and "No module named pip" in r.summary
