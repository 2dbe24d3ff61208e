"""Pure parts of the benchmark (bench/): reading BuildKit's output, naming growth."""

from __future__ import annotations

from typing import Any

import pytest

from bench import baselines, bigbase, figures, growth
from bench.common import BenchError
from bench.runner import parse_buildkit

PLAIN = f"""#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 1.2kB done
#4 [recipe 1/6] FROM 127.0.0.1:5000/buildctl/demo-base@sha256:abc
#5 [recipe 2/6] COPY rootfs/ /
#5 CACHED
#6 [recipe 3/6] RUN apt-get update && apt-get install -y jq
#6 CACHED
#7 [recipe 4/6] RUN printf '%s\\n' six==1.17.0 > /tmp/requirements.txt
#7 0.512 Processing six
#8 [recipe 5/6] RUN echo {baselines.COMPILE_MARK} fastmath && cd /src/fastmath
#8 0.201 {baselines.COMPILE_MARK} fastmath
#8 12.30 building 'fastmath._core' extension
#9 [recipe 6/6] WORKDIR /opt/demo-trainer
#10 exporting to image
"""


def test_parse_buildkit_counts_steps_that_ran_and_compiles() -> None:
    ran, total, compiles = parse_buildkit(PLAIN)
    assert (ran, total) == (2, 4)  # COPY, RUN x3; FROM, WORKDIR and internal steps are not counted
    assert compiles == ["fastmath"]  # the mark in the step's header is not a compile that ran


def test_parse_buildkit_all_cached() -> None:
    text = "#5 [a 2/3] RUN x\n#5 CACHED\n#6 [a 3/3] COPY y /\n#6 CACHED\n"
    assert parse_buildkit(text) == (0, 2, [])


def name_growth(sizes: list[int], runs: list[list[float]]) -> dict[str, Any]:
    """growth.name_growth, its values as Any: each test knows which is text and which a number."""
    return growth.name_growth(sizes, runs)


def test_name_growth() -> None:
    runs = lambda *ys: [[y - 0.01, y, y + 0.01] for y in ys]  # noqa: E731  (three repetitions, 0.02 s spread)
    lin = name_growth([10, 50, 200], runs(1.0, 1.4, 2.9))
    assert lin["growth"].startswith("linear: fit 10.00 ms per component"), lin
    assert abs(lin["per_component_ms"] - 10.0) < 0.01 and abs(lin["startup_s"] - 0.9) < 0.01
    assert name_growth([10, 50, 200], runs(1.0, 1.4, 9.0))["growth"].startswith("super-linear")
    assert name_growth([10, 50, 200], runs(1.0, 3.0, 3.5))["growth"].startswith("sub-linear")
    assert name_growth([10, 50, 200], runs(1.0, 1.0, 1.0))["growth"].startswith("flat")


def test_name_growth_calls_a_rise_within_the_noise_flat() -> None:
    """CPU seconds of two quiet runs here (20261202T043029Z's no-op build, 20261202T045219Z's plan): where what the
    components add is not above the spread of one size's repetitions, no growth is claimed."""
    noisy = name_growth([10, 50, 200], [[0.57, 0.46, 0.52], [0.51, 0.65, 0.64], [0.65, 0.65, 0.69]])
    assert noisy["growth"].startswith("flat: what the components add from 10 to 200 (0.13 s) is within the noise"
                                      " (0.14 s)"), noisy
    steady = name_growth([10, 50, 200], [[0.59, 0.51, 0.53], [0.6, 0.65, 0.67], [0.78, 0.81, 0.77]])
    assert steady["growth"].startswith("linear: fit 1.20 ms per component"), steady
    assert name_growth([10], [[1.0]])["growth"] == "n/a (one size)"


# ------------------------------------------------------------------ --big-base (bench/bigbase.py)

TORCH_BASE = {"kind": "torch", "name": "127.0.0.1:5000/buildctl/bench-bigbase:0123456789abcdef",
              "digest": "sha256:" + "ab" * 32, "size_bytes": 5_812_000_000, "layers": 2, "files": 26_105}


def test_bigbase_requirements_pin_torch_and_its_cuda_wheels_by_hash() -> None:
    got = bigbase.pins(bigbase.REQUIREMENTS.read_text())
    names = {n for n, _, _ in got}
    assert ("torch", "2.5.1") in {(n, v) for n, v, _ in got}
    assert {"nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12", "triton"} <= names
    assert all(len(h) == 64 for _, _, h in got)


@pytest.mark.parametrize("line", ["torch==2.5.1", "torch>=2.5 --hash=sha256:" + "a" * 64,
                                  "torch==2.5.1 --hash=sha256:" + "a" * 63, "--index-url http://x/ torch==2.5.1"])
def test_bigbase_pins_refuse_a_line_that_is_not_an_exact_hashed_pin(line: str) -> None:
    with pytest.raises(BenchError, match="line 2"):
        bigbase.pins("# comment\n" + line + "\n")


def test_bigbase_content_tag_follows_the_pins_and_the_parent() -> None:
    req = "torch==2.5.1 --hash=sha256:" + "a" * 64 + "\n"
    parent = "127.0.0.1:5000/buildctl/demo-base@sha256:" + "1" * 64
    tag = bigbase.content_tag(req, parent)
    assert tag == bigbase.content_tag(req, parent) and len(tag) == 16
    assert tag != bigbase.content_tag(req.replace("a" * 64, "b" * 64), parent)
    assert tag != bigbase.content_tag(req, parent.replace("1" * 64, "2" * 64))


def test_bigbase_dockerfile_installs_offline_from_a_bind_mount() -> None:
    text = bigbase.dockerfile("reg/demo-base@sha256:" + "1" * 64)
    assert text.startswith("FROM reg/demo-base@sha256:")
    assert "--mount=type=bind" in text and "--no-index" in text and "--require-hashes" in text
    assert "COPY" not in text and "ADD" not in text and "cert" not in text.lower()  # no wheel, no CA in a layer


def test_bigbase_rebase_swaps_the_variant_image_only() -> None:
    text = "base:\n  alias: demo-base\nvariants:\n  default:\n    image: r:5000/buildctl/demo-base:bookworm\n"
    out = bigbase.rebase(text, "r:5000/buildctl/demo-base:bookworm", "r:5000/buildctl/bench-bigbase:t")
    assert "    image: r:5000/buildctl/bench-bigbase:t\n" in out and "demo-base:bookworm" not in out
    with pytest.raises(BenchError, match="no longer names its base"):
        bigbase.rebase(text, "elsewhere/base:x", "r:5000/b:t")


def _result(base: dict[str, Any] | None) -> dict[str, Any]:
    cell = {"seconds": {"median": 2.0, "min": 2.0, "max": 2.0}, "rebuilt": [3], "total": 6, "compiles": [0],
            "cache": []}
    res: dict[str, Any] = {"summary": {"b": {"buildctl": cell, "multistage": {**cell, "seconds": {
        "median": 4.0, "min": 4.0, "max": 4.0}}}}, "push": {"buildctl": {"first": 10, "again": [5]}}}
    if base is not None:
        res["base"] = base
    return res


def test_report_names_the_base_of_every_table() -> None:
    md = figures.markdown(_result(TORCH_BASE))
    assert md.splitlines()[0] == (
        "Every row below ran on the torch base (demo base + torch 2.5.1 and its CUDA wheels from PyPI): "
        "127.0.0.1:5000/buildctl/bench-bigbase:0123456789abcdef (sha256:abababababab...), 5.81 GB, 26,105 files, "
        "2 layer(s).")
    assert "| scenario, on the torch base |" in md
    assert "| (e) bytes sent to the registry, on the torch base |" in md
    assert "multi-stage / buildctl: 2.0x" in md
    assert figures.table(_result(TORCH_BASE)).startswith("base: the torch base")


def test_report_of_a_result_from_before_the_base_was_recorded_says_demo_base() -> None:
    md = figures.markdown(_result(None))
    assert "the demo base (buildctl/demo-base:bookworm" in md.splitlines()[0]
    assert "not recorded in this result file" in md.splitlines()[0]
    assert "| scenario, on the demo base |" in md


def test_the_c2_pull_is_read_from_the_progress_line_buildctl_prints() -> None:
    """The bench reads (c2)'s pull of the compile environment from the very line NodeProgress prints for it
    (non-terminal output: one line per state change); the other nodes' pulls are not the compile's."""
    import io

    from bench.runner import _PULLED
    from buildctl.ui import UI, NodeProgress, _console

    err = io.StringIO()
    ref = "127.0.0.1:5000/x/demo/compile-env-fastmath:" + "ab" * 32
    with NodeProgress(UI(err=_console(err)), ["python", "compile-env:fastmath", "wheel:fastmath"]) as table:
        for name, last in (("python", "127.0.0.1:5000/x/demo/python:" + "cd" * 32), ("compile-env:fastmath", ref)):
            table.node(name, "pulling", last)
            table.node(name, "pulled", last)
        table.node("wheel:fastmath", "building")
        table.node("wheel:fastmath", "built")
    found = [m.group(1) for m in _PULLED.finditer(err.getvalue())]
    assert found == ["compile-env:fastmath"], err.getvalue()


def test_report_gives_c2s_pull_against_what_5x_leaves() -> None:
    res = _result(None)
    res["summary"]["c2"] = {t: {"seconds": {"median": m, "min": m, "max": m}, "rebuilt": [n], "total": tot,
                                "compiles": [1], "cache": []}
                            for t, m, n, tot in (("buildctl", 11.7, 3, 6), ("multistage-cm", 48.5, 10, 14))}
    res["runs"] = {"c2": {"buildctl": [{"seconds": 11.68, "pull_s": 7.6}, {"seconds": 14.52, "pull_s": 10.2}]}}
    line = ("(c2) the fresh builder's pull of the compile environment (before its compile can start), per "
            "repetition: 7.6 of 11.7 s, 10.2 of 14.5 s; 5x the cache-mount file's median (48.50 s) leaves 9.70 s.")
    assert line in figures.markdown(res).splitlines()
    assert line in figures.table(res).splitlines()
    del res["runs"]["c2"]["buildctl"][0]["pull_s"], res["runs"]["c2"]["buildctl"][1]["pull_s"]
    assert "compile environment" not in figures.markdown(res)  # a result file from before the figure was read


@pytest.mark.parametrize("ref", ["registry.example.com/a/b:1", "127.0.0.1:5000/a/b", "127.0.0.1:5000/a@sha256:" + "0" * 64,
                                 "10.0.0.1:5000/a:1"])
def test_pull_floor_takes_only_a_tagged_image_of_a_registry_on_this_machine(ref: str) -> None:
    from bench.pull_floor import FloorError, split_ref

    with pytest.raises(FloorError, match="not an image of a registry on this machine"):
        split_ref(ref)
    assert split_ref("127.0.0.1:5000/buildctl/demo/compile-env-fastmath:abc") == (
        "127.0.0.1:5000", "buildctl/demo/compile-env-fastmath", "abc")
