"""The evidence report validator (ship/evidence.py) under generated input (issue 33, item 10 and the property
tests of "What to build"): any JSON value in any field of a real report is accepted or refused with
EvidenceRefused naming the file, never another exception; what is accepted reads back the same from its
payload; a field with a trailing newline (``$`` matched before a final "\\n": a GPU name "H200\\n" was
attached and printed over two lines) is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildctl.ship import evidence as ev
from tests.unit.test_evidence import SUBJECT, SUITE, accept, build_report, gpu_report

_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10)
_TOP = ["suite", "schema", "tier", "subject", "suite_hash", "stack", "variant", "started", "checks", "ok", "error",
        "driver"]
_GPU = ["name", "driver_version", "capability", "count"]


def _check(report: dict[str, Any]) -> None:
    try:
        e = accept(report)
    except ev.EvidenceRefused as exc:
        assert exc.what.startswith("r.json: ")
        return
    back = ev.from_payload(e.to_payload(), where="artifact", subject=SUBJECT)
    assert (back.tier, back.ok, back.gpu, back.failed, back.started) == (e.tier, e.ok, e.gpu, e.failed, e.started)
    assert back.suite_hash == SUITE


@settings(max_examples=200, deadline=None, derandomize=True)
@given(key=st.sampled_from(_TOP), value=_json, gpu=st.booleans())
def test_any_value_in_any_field_is_accepted_or_refused_by_name(key: str, value: Any, gpu: bool) -> None:
    report = gpu_report() if gpu else build_report()
    _check({**report, key: value})


@settings(max_examples=200, deadline=None, derandomize=True)
@given(key=st.sampled_from(_GPU), value=_json)
def test_any_value_in_the_gpu_fields_is_accepted_or_refused_by_name(key: str, value: Any) -> None:
    report = gpu_report()
    driver = report["driver"]
    _check({**report, "driver": {**driver, "gpu": {**driver["gpu"], key: value}}})


@settings(max_examples=150, deadline=None, derandomize=True)
@given(key=st.sampled_from(["name", "driver_version", "capability"]),
       tail=st.sampled_from(["\n", "\r\n", "\r", "\x1b[2J", "\u2028", " \n", "\x00"]))
def test_a_trailing_line_break_or_control_in_a_gpu_field_is_refused(key: str, tail: str) -> None:
    report = gpu_report()
    driver = report["driver"]
    value = driver["gpu"].get(key) or "9.0"
    with pytest.raises(ev.EvidenceRefused, match=f"driver.gpu.{key}"):
        accept({**report, "driver": {**driver, "gpu": {**driver["gpu"], key: value + tail}}})


@pytest.mark.parametrize("key, value", [("started", "2026-12-02T04:02:22Z\n"), ("subject", SUBJECT + "\n"),
                                        ("suite_hash", SUITE + "\n")])
def test_a_trailing_newline_in_a_top_level_field_is_refused(key: str, value: str) -> None:
    with pytest.raises(ev.EvidenceRefused):
        accept(gpu_report(**{key: value}))


def test_the_issues_gpu_name_with_a_trailing_newline() -> None:
    report = gpu_report()
    report["driver"]["gpu"]["name"] = "NVIDIA H200\n"
    with pytest.raises(ev.EvidenceRefused, match=r"driver.gpu.name: expected the GPU model"):
        accept(report)
    assert accept(gpu_report()).gpu is not None


def test_a_payload_with_a_trailing_newline_in_its_suite_hash_is_refused() -> None:
    doc = json.loads(accept(gpu_report()).to_payload())
    doc["suite_hash"] += "\n"
    with pytest.raises(ev.EvidenceRefused, match="attached_by / suite_hash"):
        ev.from_payload(json.dumps(doc).encode(), where="a", subject=SUBJECT)
