"""imports, hybridep and megatron-args checks against module trees these tests create.

deep_ep and megatron here are MIMICS of DeepEP's and Megatron-LM's layouts (smoke_mimic.py), in tmp
folders: imports that succeed, that fail, and that miss an attribute.
"""

from __future__ import annotations

import os
import stat

import smoke_mimic as mimic
from smoke_harness import Suite


def test_imports_pass_fail_and_missing_attribute(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=False)
    mimic.write(suite.site, "demo_ext/__init__.py", "__version__ = '0.1.0'\n")
    r = suite.check("imports", {"modules": ["json", "demo_ext", "deep_ep:Buffer"]})
    assert r.status == "pass", r.summary
    assert [i["version"] for i in r.details["imports"]] == [r.details["imports"][0]["version"], "0.1.0", None]

    r = suite.check("imports", {"modules": ["demo_ext", "not_there", "deep_ep:HybridEPBuffer"]})
    assert r.status == "fail"
    assert r.summary == ("not_there: ModuleNotFoundError: No module named 'not_there'; "
                         "deep_ep:HybridEPBuffer: AttributeError: module 'deep_ep' has no attribute 'HybridEPBuffer'")


def test_import_raising_inside_the_package_reports_its_traceback(suite: Suite) -> None:
    mimic.write(suite.site, "broken/__init__.py", "from broken import inner\n")
    mimic.write(suite.site, "broken/inner.py", "raise RuntimeError('extension built for another torch ABI')\n")
    r = suite.check("imports", {"modules": ["broken"]})
    assert r.status == "fail"
    assert r.summary == "broken: RuntimeError: extension built for another torch ABI"
    tb = r.details["imports"][0]["traceback"]
    assert any("broken/inner.py" in line for line in tb)
    assert not any("<frozen importlib" in line for line in tb)


def test_import_that_needs_a_device_is_deferred_on_the_build_host_only(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=True,
                  broken_extension="libcuda.so.1: cannot open shared object file: No such file or directory")
    r = suite.check("imports", {"modules": ["deep_ep:HybridEPBuffer"]})
    assert r.status == "skipped"
    assert r.deferred == "gpu"
    assert "belongs to the GPU tier" in r.summary
    assert "ImportError: libcuda.so.1: cannot open shared object file" in r.summary
    # with a device present the same error is a plain failure
    assert suite.check("imports", {"modules": ["deep_ep"]}, device=True).status == "fail"


def test_mixed_device_and_real_failures_fail(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=True, broken_extension="CUDA driver version is insufficient")
    r = suite.check("imports", {"modules": ["deep_ep", "not_there"]})
    assert r.status == "fail"


# ------------------------------------------------------------------------------------------- hybridep


def cuda_home(suite: Suite) -> dict[str, str]:
    nvcc = suite.image / "usr/local/cuda/bin/nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return {"CUDA_HOME": "/usr/local/cuda"}


def test_hybridep_all_present(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=True)
    mimic.megatron(suite.site)
    r = suite.check("hybridep", {}, env=cuda_home(suite))
    assert r.status == "pass", r.summary
    assert r.details["jit_dir"]["path"] == os.path.join(str(suite.site), "deep_ep", "build", "jit")
    assert r.details["megatron.core.transformer.moe.fused_a2a HAVE_HYBRIDEP"]["HAVE_HYBRIDEP"] is True


def test_hybridep_main_branch_deepep(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=False)
    mimic.megatron(suite.site)
    r = suite.check("hybridep", {}, env=cuda_home(suite))
    assert r.status == "fail"
    assert r.summary == ("from deep_ep import HybridEPBuffer: AttributeError: module 'deep_ep' has no attribute "
                         "'HybridEPBuffer'; megatron.core.transformer.moe.fused_a2a HAVE_HYBRIDEP: HAVE_HYBRIDEP is "
                         "False (fused_a2a could not import HybridEPBuffer)")


def test_hybridep_nothing_installed(suite: Suite) -> None:
    r = suite.check("hybridep", {"megatron": False})
    assert r.status == "fail"
    assert r.summary == ("CUDA_HOME is not set (HybridEP compiles kernels with $CUDA_HOME/bin/nvcc at run time); "
                         "deep_ep is not installed, so there is no JIT cache folder to check; "
                         "from deep_ep import HybridEPBuffer: ModuleNotFoundError: No module named 'deep_ep'")


def test_hybridep_missing_nvcc_and_readonly_jit(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=True)
    ro = suite.image / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        r = suite.check("hybridep", {"megatron": False, "jit_dir": "/ro/jit"}, env={"CUDA_HOME": "/usr/local/cuda"})
    finally:
        ro.chmod(0o755)
    assert r.status == "fail"
    assert "/usr/local/cuda/bin/nvcc is missing or not executable" in r.summary
    if os.geteuid() != 0:  # root may write anywhere: only the missing nvcc is certain then
        assert "NOT writable" in r.summary


def test_hybridep_import_needing_a_device_is_deferred(suite: Suite) -> None:
    mimic.deep_ep(suite.site, hybrid=True, broken_extension="CUDA_ERROR_STUB_LIBRARY: stub library")
    r = suite.check("hybridep", {"megatron": False}, env=cuda_home(suite))
    assert r.status == "skipped"
    assert r.deferred == "gpu"
    assert r.summary.endswith("(nvcc and the JIT folder are fine)")


# -------------------------------------------------------------------------------------- megatron-args


def test_megatron_args_parse(suite: Suite) -> None:
    mimic.megatron(suite.site, flags=("--num-layers", "--attention-backend"))
    r = suite.check("megatron-args", {"args": ["--num-layers", "61", "--attention-backend", "fused"]})
    assert r.status == "pass", r.summary
    assert r.summary == "4 baked argument(s) parse with megatron.training.arguments.parse_args"
    assert r.details["attention_backend"] == "fused"


def test_megatron_args_rejected_with_argparse_message(suite: Suite) -> None:
    mimic.megatron(suite.site, flags=("--num-layers",))
    r = suite.check("megatron-args", {"args": ["--num-layers", "61", "--moe-router-dtpye", "fp32"]})
    assert r.status == "fail"
    assert r.summary == ("Megatron's parser rejects the baked arguments: "
                         "pretrain_gpt.py: error: unrecognized arguments: --moe-router-dtpye fp32")


def test_megatron_args_without_megatron(suite: Suite) -> None:
    r = suite.check("megatron-args", {"args": []})
    assert r.status == "fail"
    assert "ModuleNotFoundError: No module named 'megatron'" in r.summary


def test_megatron_source_tree_from_python_path(suite: Suite) -> None:
    tree = suite.image / "opt/megatron-lm"
    mimic.megatron(tree, flags=("--seq-length",))
    report = suite.run({"required": ["megatron-args"], "python_path": [str(tree)],
                        "checks": {"megatron-args": {"args": ["--seq-length", "4096"]}}})
    assert report.ok, report.to_text()
