"""arch check (cuobjdump answers faked through the Tools seam), the report, JUnit, expect.json and the driver stub.

The extension files below are empty MIMIC shared objects in tmp folders: only their names and places
matter, cuobjdump's listing of them is the fake's.
"""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

import pytest

from smoke.driver import prepare
from smoke.expect import ExpectError, parse
from smoke.prober import ToolResult
from smoke.report import CheckResult, Report, junit_xml
from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite

# an extension module file name this interpreter would import (the suffix names its version)
HEP = "hybrid_ep_cpp" + importlib.machinery.EXTENSION_SUFFIXES[0]


def extension_tree(suite: Suite) -> None:
    mimic.write(suite.site, "transformer_engine/__init__.py", "")
    mimic.write(suite.site, "transformer_engine/libtransformer_engine.so", "")
    mimic.write(suite.site, "transformer_engine/wheel_lib/libhelper.so.1", "")
    mimic.write(suite.site, HEP, "")


def elf(names: str) -> ToolResult:
    return ToolResult(exit_code=0, stdout="\n".join(f"ELF file    {i + 1}: x.{i + 1}.{n}.cubin"
                                                      for i, n in enumerate(names.split())) + "\n", stderr="")


def ptx(names: str) -> ToolResult:
    return ToolResult(exit_code=0, stdout="\n".join(f"PTX file    {i + 1}: x.{i + 1}.{n}.ptx"
                                                      for i, n in enumerate(names.split())) + "\n", stderr="")


SECTION = {"archs": ["9.0"], "modules": ["transformer_engine", "hybrid_ep_cpp"]}


def test_arch_covered(suite: Suite) -> None:
    extension_tree(suite)
    suite.tools.outputs = {
        ("--list-elf", "libtransformer_engine.so"): elf("sm_80 sm_90a sm_100a"),
        ("--list-elf", HEP): elf("sm_90"),
    }
    r = suite.check("arch", SECTION)
    assert r.status == "pass", r.summary
    assert r.summary == "2 shared object(s) of transformer_engine, hybrid_ep_cpp carry SASS for sm_90"
    # the helper library without device code was listed and passed over
    assert any(c[2].endswith("libhelper.so.1") for c in suite.tools.calls)


def test_arch_blackwell_only_extension_on_a_hopper_variant(suite: Suite) -> None:
    extension_tree(suite)
    so = os.path.join(str(suite.site), HEP)
    suite.tools.outputs = {
        ("--list-elf", "libtransformer_engine.so"): elf("sm_90"),
        ("--list-elf", HEP): elf("sm_100a"),
        ("--list-ptx", HEP): ptx("sm_80"),
    }
    r = suite.check("arch", SECTION)
    assert r.status == "fail"
    assert r.summary == f"{so} has no code for 9.0 (sm_90); it has sm_100a"
    assert r.details["notes"] == [f"{so}: no sm_90 SASS, only PTX sm_80 (JIT-compiled at load)"]


def test_arch_module_without_gpu_code_or_missing(suite: Suite) -> None:
    extension_tree(suite)
    r = suite.check("arch", {"archs": ["10.0"], "modules": ["transformer_engine", "deep_ep_cpp"]})
    assert r.status == "fail"
    assert r.summary == ("deep_ep_cpp is not installed; "
                         f"transformer_engine ({suite.site}/transformer_engine) has no shared object with GPU code")


def test_arch_by_distribution_reads_its_record(suite: Suite) -> None:
    """DeepEP's wheel installs top-level extensions (deep_ep_cpp, hybrid_ep_cpp) beside the deep_ep package:
    the distribution's RECORD finds them where a module name would not."""
    mimic.deep_ep(suite.site, hybrid=True)
    mimic.write(suite.site, HEP, "")
    mimic.write(suite.site, "deep_ep_cpp.so", "")
    record = suite.site / "deep_ep-1.2.1+3f601f7.dist-info" / "RECORD"
    record.write_text(f"deep_ep/__init__.py,,\n{HEP},,\ndeep_ep_cpp.so,,\n")
    suite.tools.outputs = {("--list-elf", HEP): elf("sm_100a"), ("--list-elf", "deep_ep_cpp.so"): elf("sm_90 sm_100a")}
    r = suite.check("arch", {"archs": ["9.0"], "dists": ["deep-ep"]})
    assert r.status == "fail"
    assert r.summary == f"{os.path.realpath(suite.site / HEP)} has no code for 9.0 (sm_90); it has sm_100a"
    assert [row["of"] for row in r.details["files"]] == ["distribution deep-ep 1.2.1+3f601f7"] * 2
    missing = suite.check("arch", {"archs": ["9.0"], "dists": ["transformer-engine"]})
    assert missing.summary == "distribution transformer-engine is not installed"


def split_te(suite: Suite, *, torch_part: bool = True) -> str:
    """A MIMIC of how PyPI ships TE 2.10 (layout read off transformer_engine-2.10.0's wheel and the
    H200 run): the transformer_engine wheel has Python code only and requires its parts under
    extras; transformer_engine_cu13 puts the core library into transformer_engine/wheel_lib/;
    transformer_engine_torch installs a top-level extension module. Returns the extension's name."""
    ext = "transformer_engine_torch" + importlib.machinery.EXTENSION_SUFFIXES[0]
    parts = {"transformer_engine": ("transformer_engine/__init__.py,,\n",
                                    'Requires-Dist: transformer_engine_cu13==2.10.0; extra == "core-cu13"\n'
                                    'Requires-Dist: transformer_engine_torch==2.10.0; extra == "pytorch"\n'
                                    'Requires-Dist: transformer_engine_jax==2.10.0; extra == "jax"\n'),
             "transformer_engine_cu13": ("transformer_engine/wheel_lib/libtransformer_engine.so,,\n", "")}
    if torch_part:
        parts["transformer_engine_torch"] = (f"{ext},,\n", "")
    for dist, (record, requires) in parts.items():
        info = suite.site / f"{dist}-2.10.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 2.10.0\n{requires}")
        (info / "RECORD").write_text(record)
        for line in record.splitlines():
            mimic.write(suite.site, line.split(",")[0], "")
    return ext


def test_arch_follows_a_distribution_split_into_parts(suite: Suite) -> None:
    """PyPI's TE: the named distribution has no shared object; its cu13 and torch parts have them."""
    ext = split_te(suite)
    suite.tools.outputs = {("--list-elf", "libtransformer_engine.so"): elf("sm_80 sm_90 sm_100"),
                           ("--list-elf", ext): elf("sm_90")}
    r = suite.check("arch", {"archs": ["9.0"], "dists": ["transformer_engine"]})
    assert r.status == "pass", r.summary
    label = ("distribution transformer_engine 2.10.0 with transformer_engine_cu13 2.10.0, "
             "transformer_engine_torch 2.10.0")
    assert [(row["of"], os.path.basename(row["file"])) for row in r.details["files"]] == [
        (label, "libtransformer_engine.so"), (label, ext)]
    # the torch part built for Blackwell only fails the Hopper variant, naming the file
    suite.tools.outputs[("--list-elf", ext)] = elf("sm_100a")
    r = suite.check("arch", {"archs": ["9.0"], "dists": ["transformer_engine"]})
    assert r.status == "fail"
    assert r.summary == f"{os.path.realpath(suite.site / ext)} has no code for 9.0 (sm_90); it has sm_100a"


def test_arch_parts_found_by_shared_package_folder(suite: Suite) -> None:
    """A part that the named distribution does not require is still followed when it installs into its package."""
    split_te(suite, torch_part=False)
    meta = suite.site / "transformer_engine-2.10.0.dist-info" / "METADATA"
    meta.write_text("Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.10.0\n")  # no Requires-Dist
    suite.tools.outputs = {("--list-elf", "libtransformer_engine.so"): elf("sm_90")}
    r = suite.check("arch", {"archs": ["9.0"], "dists": ["transformer-engine"]})
    assert r.status == "pass", r.summary
    assert r.details["files"][0]["of"] == "distribution transformer-engine 2.10.0 with transformer_engine_cu13 2.10.0"


def test_arch_without_cuobjdump_is_skipped_and_fails_the_tier(suite: Suite) -> None:
    suite.tools.path = None
    report = suite.run({"required": ["arch"], "checks": {"arch": SECTION}})
    (r,) = report.checks
    assert (r.status, r.deferred) == ("skipped", None)
    assert r.summary.startswith("the image has no cuobjdump")
    assert report.failed == ["arch"]
    assert not report.ok


# --------------------------------------------------------------------------------------------- report


def result(name: str, status: str, *, required: bool = True, deferred: str | None = None) -> CheckResult:
    return CheckResult(name=name, status=status, summary=f"{name} {status}", required=required,  # type: ignore[arg-type]
                       deferred=deferred, duration_s=0.5)  # type: ignore[arg-type]


def report(*checks: CheckResult, error: str = "") -> Report:
    return Report(tier="build", stack="demo", variant="default", checks=checks, python={"version": "3.11.2"},
                  driver={}, started="2026-01-01T00:00:00Z", duration_s=1.25, error=error)


def test_tier_passes_with_unsupported_and_deferred_only() -> None:
    r = report(result("versions", "pass"), result("mxfp8", "unsupported"),
               result("imports", "skipped", deferred="gpu"), result("arch", "fail", required=False))
    assert r.ok
    assert r.to_json()["deferred"] == ["imports"]
    assert r.to_json()["counts"] == {"pass": 1, "fail": 1, "unsupported": 1, "skipped": 1}


def test_tier_fails_on_required_fail_or_plain_skip() -> None:
    assert report(result("versions", "fail")).failed == ["versions"]
    assert report(result("mxfp8", "skipped")).failed == ["mxfp8"]
    assert not report(error="expect.json: bad").ok


def test_junit_exact_text() -> None:
    r = report(result("versions", "pass"), result("mxfp8", "unsupported"), result("imports", "fail"),
               result("arch", "skipped", required=False))
    assert junit_xml(r) == """<?xml version="1.0" encoding="utf-8"?>
<testsuite name="smoke.build" tests="4" failures="1" errors="0" skipped="2" time="1.250" timestamp="2026-01-01T00:00:00Z">
  <testcase classname="smoke.build" name="versions" time="0.500" />
  <testcase classname="smoke.build" name="mxfp8" time="0.500">
    <skipped message="unsupported: mxfp8 unsupported" />
    <system-out>{}</system-out>
  </testcase>
  <testcase classname="smoke.build" name="imports" time="0.500">
    <failure message="fail: imports fail">{}</failure>
  </testcase>
  <testcase classname="smoke.build" name="arch" time="0.500">
    <skipped message="skipped (not required): arch skipped" />
    <system-out>{}</system-out>
  </testcase>
</testsuite>
"""


def test_unknown_required_check_and_schema_are_refused() -> None:
    with pytest.raises(ExpectError, match="required: unknown check 'mxfp4'"):
        parse({"schema": 1, "required": ["mxfp4"]})
    with pytest.raises(ExpectError, match="schema 2 is not supported"):
        parse({"schema": 2})
    with pytest.raises(ExpectError, match="driver_stub: expected one of auto, always, never"):
        parse({"schema": 1, "driver_stub": "yes"})


def test_expect_section_error_fails_only_that_check(suite: Suite) -> None:
    mimic.dist_info(suite.site, "PyYAML", "6.0")
    rep = suite.run({"required": ["versions", "cudnn"],
                     "checks": {"versions": {"distributions": [{"name": "PyYAML", "version": "6.0"}]},
                                "cudnn": {"version": 9.14}}})
    by = {c.name: c for c in rep.checks}
    assert by["versions"].status == "pass"
    assert by["cudnn"].summary == "expect.json is wrong for this check: checks.cudnn.version: expected a string, got 9.14"


def test_gpu_tier_checks_without_gpu_part_defer_to_build(suite: Suite) -> None:
    mimic.torch(suite.site)
    rep = suite.run({"required": ["protected", "arch"], "checks": {}}, tier="gpu", device=True)
    assert [(c.name, c.status, c.deferred) for c in rep.checks] == [("protected", "skipped", "build"),
                                                                    ("arch", "skipped", "build")]
    assert rep.ok
    assert rep.driver["gpu"]["name"] == "NVIDIA H200"


# --------------------------------------------------------------------------------------------- driver


def test_driver_stub_linked_as_libcuda_so_1(tmp_path: Path) -> None:
    root = tmp_path / "img"
    stub = root / "usr/local/cuda-13.0/lib64/stubs/libcuda.so"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"\x7fELF")
    d = prepare("auto", {"CUDA_HOME": "/usr/local/cuda-13.0", "LD_LIBRARY_PATH": "/usr/lib"}, [], device=False,
                tmp=str(tmp_path), root=str(root))
    assert d.stub == str(stub)
    assert d.stub_dir is not None
    assert os.readlink(os.path.join(d.stub_dir, "libcuda.so.1")) == str(stub)
    assert d.env({"LD_LIBRARY_PATH": "/usr/lib"})["LD_LIBRARY_PATH"] == f"{d.stub_dir}:/usr/lib"
    assert prepare("auto", {"CUDA_HOME": "/usr/local/cuda-13.0"}, [], device=True, root=str(root)).stub is None
    assert prepare("never", {"CUDA_HOME": "/usr/local/cuda-13.0"}, [], device=False, root=str(root)).stub is None
    none = prepare("always", {}, [], device=False, root=str(tmp_path / "empty"))
    assert none.stub is None
    assert none.note.startswith("no CUDA driver stub found (looked at /usr/local/cuda/lib64/stubs/libcuda.so")
