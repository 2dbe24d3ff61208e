"""The in-image smoke suite: ``python3 -m smoke --expect expect.json [--tier build|gpu] [--junit out.xml]``.

It runs inside any of our images with only the standard library of the image's own Python (3.10 to
3.12), prints one JSON report on stdout and exits 0 only when every required check of the tier passed.
README.md beside this file defines expect.json and the report.

Nothing here imports CUDA code into the suite's own process: questions that need an import
(Transformer Engine, DeepEP, Megatron-LM, torch) are asked in child processes of the same
interpreter (``smoke.probes``), so that a crash or a missing driver in one of them becomes a
reported result instead of a dead suite.
"""

from __future__ import annotations

__version__ = "1"
REPORT_SCHEMA = 1
EXPECT_SCHEMA = 1
