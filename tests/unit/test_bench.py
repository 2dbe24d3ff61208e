"""Pure parts of the benchmark (bench/): reading BuildKit's output, naming growth."""

from __future__ import annotations

from typing import Any

from bench import baselines, growth
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
