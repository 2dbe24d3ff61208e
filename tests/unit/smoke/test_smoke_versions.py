"""versions, cudnn and protected checks against distributions and files these tests create.

The Transformer Engine and DeepEP distributions here are MIMICS (a .dist-info with a name and a
version, plus for the GPU tier a module tree, see smoke_mimic.py), written into tmp folders.
"""

from __future__ import annotations

import pytest

from smoke.checks import sha_of_local, split_version
from tests.unit.smoke import smoke_mimic as mimic
from tests.unit.smoke.smoke_harness import Suite

TE_SHA = "d2945c6a571e3978677614d1fe08779966a5a4ef"
DEEPEP_SHA = "3f601f7ac1c062c46502646ff04c535013bfca00"
MEGATRON_SHA = "effebd81f410bc6566fffee6c320b6f8f762e06d"


@pytest.mark.parametrize(("version", "base", "sha"), [
    ("2.10.0.dev0+d2945c6", "2.10.0.dev0", "d2945c6"),
    ("2.10.0", "2.10.0", None),
    ("1.2.1+3f601f7", "1.2.1", "3f601f7"),
    ("0.1.0+gd2945c6a.d20250101", "0.1.0", "d2945c6a"),
    ("2.8.0+cu13.20250101", "2.8.0", None),
])
def test_version_strings(version: str, base: str, sha: str | None) -> None:
    b, local = split_version(version)
    assert b == base
    assert sha_of_local(local) == sha


def te_component(**kw: str) -> dict[str, str]:
    return {"name": "transformer-engine", "dist": "transformer_engine", **kw}


def test_git_build_of_the_locked_commit_passes(suite: Suite) -> None:
    mimic.dist_info(suite.site, "transformer_engine", "2.10.0.dev0+d2945c6")
    r = suite.check("versions", {"components": [te_component(version="2.10.0.dev0", sha=TE_SHA)]})
    assert r.status == "pass", r.summary
    row = r.details["components"][0]
    assert (row["seen_base"], row["seen_sha"]) == ("2.10.0.dev0", "d2945c6")


def test_git_build_of_another_commit_fails_naming_both(suite: Suite) -> None:
    mimic.dist_info(suite.site, "transformer_engine", "2.10.0.dev0+7dd3914")
    r = suite.check("versions", {"components": [te_component(version="2.10.0.dev0", sha=TE_SHA)]})
    assert r.status == "fail"
    assert "built from 7dd3914, expected d2945c6a571e" in r.summary


def test_release_build_when_a_commit_is_locked_fails(suite: Suite) -> None:
    mimic.dist_info(suite.site, "transformer_engine", "2.10.0")
    r = suite.check("versions", {"components": [te_component(sha=TE_SHA)]})
    assert r.status == "fail"
    assert "version 2.10.0 carries no +<git sha> (a release build?)" in r.summary


def test_release_build_with_release_expectation_passes(suite: Suite) -> None:
    mimic.dist_info(suite.site, "transformer_engine", "2.10.0")
    r = suite.check("versions", {"components": [te_component(version="2.10")]})
    assert r.status == "pass", r.summary


def test_wrong_base_version_fails(suite: Suite) -> None:
    mimic.dist_info(suite.site, "transformer_engine", "2.9.0+d2945c6")
    r = suite.check("versions", {"components": [te_component(version="2.10.0.dev0", sha=TE_SHA)]})
    assert r.status == "fail"
    assert "base version 2.9.0, expected 2.10.0.dev0" in r.summary


def test_deepep_sha_and_missing_distribution(suite: Suite) -> None:
    mimic.dist_info(suite.site, "deep_ep", "1.2.1+3f601f7")
    ok = suite.check("versions", {"components": [{"name": "deepep", "dist": "deep-ep", "sha": DEEPEP_SHA}]})
    assert ok.status == "pass", ok.summary
    missing = suite.check("versions", {"components": [{"name": "te", "dist": "transformer-engine-cu13"}]})
    assert missing.status == "fail"
    assert "distribution 'transformer-engine-cu13' is not installed" in missing.summary


def test_pip_pins(suite: Suite) -> None:
    mimic.dist_info(suite.site, "PyYAML", "6.0")
    assert suite.check("versions", {"distributions": [{"name": "pyyaml", "version": "6.0"}]}).status == "pass"
    r = suite.check("versions", {"distributions": [{"name": "PyYAML", "version": "6.0.1"}]})
    assert r.status == "fail"
    assert r.summary == "PyYAML 6.0 installed, expected 6.0.1"


def test_source_tree_commit_from_record_file_and_git(suite: Suite) -> None:
    tree = suite.image / "opt/megatron-lm"
    tree.mkdir(parents=True)
    (tree / ".buildctl-commit").write_text(MEGATRON_SHA + "\n")
    entry = {"name": "megatron-lm", "path": "/opt/megatron-lm", "sha": MEGATRON_SHA[:8]}
    r = suite.check("versions", {"components": [entry]})
    assert r.status == "pass", r.summary
    assert r.details["components"][0]["read_from"] == "/opt/megatron-lm/.buildctl-commit"

    (tree / ".buildctl-commit").unlink()
    (tree / ".git").mkdir()
    (tree / ".git/HEAD").write_text("ref: refs/heads/dev\n")
    (tree / ".git/packed-refs").write_text(f"# pack-refs with: peeled\n{'1' * 40} refs/heads/dev\n")
    r = suite.check("versions", {"components": [entry]})
    assert r.status == "fail"
    assert r.summary == "megatron-lm at /opt/megatron-lm is 111111111111, expected effebd81"


def test_source_tree_without_record(suite: Suite) -> None:
    (suite.image / "opt/megatron-lm").mkdir(parents=True)
    r = suite.check("versions", {"components": [{"name": "megatron-lm", "path": "/opt/megatron-lm", "sha": MEGATRON_SHA}]})
    assert r.status == "fail"
    assert "no commit recorded for megatron-lm" in r.summary


UNLOCKED = "the manifest pins d2945c6a571e with PR #2146, PR #2150 on top; the commit is known once locked"


def test_source_tree_before_locking_is_not_a_pass(suite: Suite) -> None:
    entry = {"name": "megatron-lm", "path": "/opt/megatron-lm", "unlocked": UNLOCKED}
    assert suite.check("versions", {"components": [entry]}).summary.startswith(
        "/opt/megatron-lm does not exist in the image")
    tree = suite.image / "opt/megatron-lm"
    tree.mkdir(parents=True)
    (tree / ".buildctl-commit").write_text(MEGATRON_SHA + "\n")
    r = suite.check("versions", {"components": [entry]})
    assert (r.status, r.deferred) == ("skipped", None)  # not satisfied: the tier does not pass on it
    assert r.summary.startswith("the expectation is unlocked, so what was built cannot be checked against a commit: "
                                f"megatron-lm: {UNLOCKED}")
    # an entry with neither a commit nor a reason is not passed either
    bare = suite.check("versions", {"components": [{"name": "megatron-lm", "path": "/opt/megatron-lm"}]})
    assert bare.status == "skipped" and "megatron-lm: the expectation names no commit for it" in bare.summary


def test_unlocked_wheel_is_not_a_pass_at_either_tier(suite: Suite) -> None:
    """Unlocked, TE used to pass as '2.10.0 as imported': now it is reported as not checked."""
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0")
    entry = te_component(module="transformer_engine", unlocked=UNLOCKED)
    for tier in ("build", "gpu"):
        r = suite.check("versions", {"components": [entry]}, tier=tier, device=True)
        assert (r.status, r.deferred) == ("skipped", None), (tier, r.summary)
        assert f"transformer-engine: {UNLOCKED}" in r.summary
        assert "as imported" not in r.summary
    # beside a real mismatch the check fails, and still names what it could not check
    mimic.dist_info(suite.site, "deep_ep", "1.2.1+1234abc")
    r = suite.check("versions", {"components": [entry, {"name": "deepep", "dist": "deep_ep", "sha": DEEPEP_SHA}]})
    assert r.status == "fail"
    assert r.summary == f"built from 1234abc, expected 3f601f7ac1c0; not checked, unlocked: transformer-engine: {UNLOCKED}"


def test_runtime_version_on_gpu_tier(suite: Suite) -> None:
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0.dev0+d2945c6")
    section = {"components": [te_component(module="transformer_engine", version="2.10.0.dev0", sha=TE_SHA)]}
    r = suite.check("versions", section, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.summary == "transformer_engine imports, transformer_engine 2.10.0.dev0+d2945c6 as locked (distribution metadata)"
    no_gpu = suite.check("versions", section, tier="gpu", device=False)
    assert no_gpu.status == "skipped"
    assert no_gpu.deferred is None
    assert no_gpu.summary.startswith("no GPU: no GPU device in this container")


def test_gpu_tier_reads_distribution_metadata_not_dunder_version(suite: Suite) -> None:
    """deep_ep has no __version__ (the H200 run: "deep_ep has no __version__"); its wheel's metadata has it."""
    mimic.torch(suite.site)
    mimic.deep_ep(suite.site, hybrid=True, version="1.2.1+3f601f7")
    entry = {"name": "deepep-hybridep", "dist": "deep_ep", "module": "deep_ep", "sha": DEEPEP_SHA}
    r = suite.check("versions", {"components": [entry]}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    (row,) = r.details["runtime"]
    assert (row["seen_version"], row["seen_sha"], row["module_version"]) == ("1.2.1+3f601f7", "3f601f7", None)
    # a __version__ that disagrees with the wheel does not decide it either
    (suite.site / "deep_ep" / "__init__.py").write_text("__version__ = '9.9.9+0000000'\nclass HybridEPBuffer: pass\n")
    r = suite.check("versions", {"components": [entry]}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.details["runtime"][0]["module_version"] == "9.9.9+0000000"


def test_gpu_tier_keeps_every_row_when_an_import_fails(suite: Suite) -> None:
    """With DeepEP missing, TE's mismatch against the pinned commit used to vanish from the report."""
    mimic.torch(suite.site)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0")
    section = {"components": [
        {"name": "deepep-hybridep", "dist": "deep_ep", "module": "deep_ep", "sha": DEEPEP_SHA},
        te_component(module="transformer_engine", sha=TE_SHA),
        {"name": "megatron-lm", "path": "/opt/megatron-lm", "sha": MEGATRON_SHA},  # no module: build tier's
    ]}
    r = suite.check("versions", section, tier="gpu", device=True)
    assert r.status == "fail"
    assert [row["component"] for row in r.details["runtime"]] == ["deepep-hybridep", "transformer-engine"]
    assert r.summary == ("import deep_ep failed: ModuleNotFoundError: No module named 'deep_ep'; "
                         "no installed distribution 'deep_ep' provides deep_ep; "
                         "transformer_engine version 2.10.0 carries no +<git sha> (a release build?), "
                         "expected a build of d2945c6a571e")


# --------------------------------------------------------------------------------------------- cudnn

DPKG = """Package: libcudnn9-cuda-13
Status: install ok installed
Version: {version}

Package: libc6
Status: install ok installed
Version: 2.39-0ubuntu8
"""


def dpkg(suite: Suite, version: str) -> None:
    p = suite.image / "var/lib/dpkg/status"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(DPKG.format(version=version))


def test_cudnn_apt_package_matches_pin(suite: Suite) -> None:
    dpkg(suite, "9.14.0.64-1")
    r = suite.check("cudnn", {"version": "9.14.0.64", "package": "libcudnn9-cuda-13", "apt_version": "9.14.0.64-1"},
                    env={"CUDNN_VERSION": "9.13.0.50"})
    assert r.status == "pass", r.summary
    assert r.summary == "cuDNN libcudnn9-cuda-13 9.14.0.64-1 matches the pin 9.14.0.64"
    assert r.details["seen"]["env_CUDNN_VERSION (base image)"] == "9.13.0.50"


def test_cudnn_older_package_fails(suite: Suite) -> None:
    dpkg(suite, "9.13.0.50-1")
    r = suite.check("cudnn", {"version": "9.14", "package": "libcudnn9-cuda-13"})
    assert r.status == "fail"
    assert r.summary == "libcudnn9-cuda-13 9.13.0.50-1 is cuDNN 9.13.0.50, expected 9.14"


def test_cudnn_package_missing_names_installed_ones(suite: Suite) -> None:
    dpkg(suite, "9.14.0.64-1")
    r = suite.check("cudnn", {"version": "9.14", "package": "libcudnn9-cuda-12"})
    assert r.status == "fail"
    assert r.summary == ("apt package libcudnn9-cuda-12 is not installed "
                         "(libcudnn packages installed: libcudnn9-cuda-13 9.14.0.64-1)")


def test_cudnn_from_header(suite: Suite) -> None:
    h = suite.image / "usr/include/cudnn_version.h"
    h.parent.mkdir(parents=True)
    h.write_text("#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 14\n#define CUDNN_PATCHLEVEL 0\n")
    assert suite.check("cudnn", {"version": "9.14"}).status == "pass"
    assert suite.check("cudnn", {"version": "9.10"}).summary == \
        "cuDNN 9.14.0 (/usr/include/cudnn_version.h), expected 9.10"


def test_cudnn_gpu_tier_reads_torch_and_te(suite: Suite) -> None:
    mimic.torch(suite.site, cudnn=91400)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0", cudnn=(9, 14, 0))
    r = suite.check("cudnn", {"version": "9.14.0.64"}, tier="gpu", device=True)
    assert r.status == "pass", r.summary
    assert r.details["seen"] == {"torch": "9.14.0", "transformer_engine": "9.14.0"}


def test_cudnn_gpu_tier_mismatch(suite: Suite) -> None:
    mimic.torch(suite.site, cudnn=91002)
    mimic.transformer_engine(suite.site, layout="new", version="2.10.0", cudnn=(9, 10, 2))
    r = suite.check("cudnn", {"version": "9.14.0.64"}, tier="gpu", device=True)
    assert r.status == "fail"
    assert r.summary == ("torch loaded cuDNN 9.10.2; transformer_engine loaded cuDNN 9.10.2, "
                         "expected 9.14.0.64")


# ------------------------------------------------------------------------------------------ protected


def test_protected_unchanged_changed_removed_replaced(suite: Suite) -> None:
    mimic.dist_info(suite.site, "torch", "2.9.0a0+50eac81")
    mimic.dist_info(suite.site, "nvidia-nccl-cu13", "2.28.3")
    base = {"torch": "2.9.0a0+50eac81", "nvidia_nccl_cu13": "2.27.7", "nvidia-cudnn-cu13": "9.13.0.50",
            "triton": "3.4.0", "numpy": "1.26.4"}
    r = suite.check("protected", {"patterns": ["torch", "nvidia-*"], "base": base})
    assert r.status == "fail"
    assert r.summary == ("protected base packages changed: nvidia-nccl-cu13 2.27.7 -> 2.28.3; "
                         "nvidia-cudnn-cu13 9.13.0.50 removed")
    assert r.details["unchanged"] == ["torch"]
    ok = suite.check("protected", {"patterns": ["torch", "NVIDIA_*"], "base": base,
                                   "replace": ["nvidia-nccl-cu13", "nvidia-cudnn-cu13"]})
    assert ok.status == "pass", ok.summary
    assert "replaced on purpose: nvidia-cudnn-cu13 9.13.0.50 -> (removed), nvidia-nccl-cu13 2.27.7 -> 2.28.3" in ok.summary


def test_protected_base_from_constraint_file(suite: Suite) -> None:
    mimic.dist_info(suite.site, "PyYAML", "6.0")
    c = suite.image / "etc/pip/constraint.txt"
    c.parent.mkdir(parents=True)
    c.write_text("# NGC-style constraint file\nPyYAML==6.0\n")
    r = suite.check("protected", {"patterns": ["pyyaml"]}, env={"PIP_CONSTRAINT": "/etc/pip/constraint.txt"})
    assert r.status == "pass", r.summary
    assert r.details["base_from"] == "the base's constraint file /etc/pip/constraint.txt"
    none = suite.check("protected", {"patterns": ["pyyaml"]})
    assert none.status == "fail"
    assert none.summary.startswith("no record of the base image's versions")


def test_cudnn_wheel_of_another_version_beside_the_pinned_package_fails(suite: Suite) -> None:
    """What the H200 run showed: apt libcudnn9-cuda-13 9.14 installed, but torch and TE loaded the 9.19 wheel."""
    dpkg(suite, "9.14.0.64-1")
    mimic.dist_info(suite.site, "nvidia-cudnn-cu13", "9.19.0.56")
    r = suite.check("cudnn", {"version": "9.14", "package": "libcudnn9-cuda-13"})
    assert r.status == "fail"
    assert r.summary == ("nvidia-cudnn-cu13 9.19.0.56 is installed besides libcudnn9-cuda-13 9.14.0.64-1: torch from "
                         "PyPI and Transformer Engine load the wheel's cuDNN first, not the pinned 9.14")
    # without a pinned package the wheel is the candidate
    r = suite.check("cudnn", {"version": "9.14"})
    assert r.summary == "cuDNN 9.19.0.56 (nvidia-cudnn-cu13), expected 9.14"
    assert suite.check("cudnn", {"version": "9.19"}).status == "pass"
