"""A Megatron-LM training log read into a JSON report, with the smoke suite's own reader (smoke.trainlog):
the same parse and verdict as the `train` check, for a log of a run made outside the check (train.sh's
TRAIN_VIA=direct, its retries).

    python3 report.py LOG [--profile NAME] [--min-steps N] [--rc RC] [--seconds S]

Prints the report and exits 0 when the run exited 0 and trained (smoke.trainlog.judge), else 1. Run it
from the checkout's root (or with it on PYTHONPATH) so that `smoke` imports.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from smoke import trainlog


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--profile", default="")
    ap.add_argument("--min-steps", type=int, default=20)
    ap.add_argument("--rc", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=None)
    a = ap.parse_args(argv)
    log = trainlog.parse(Path(a.log).read_text(errors="replace"))
    verdict = trainlog.judge(log, min_steps=a.min_steps)
    ok = a.rc == 0 and verdict.ok
    report = {"profile": a.profile, "ok": ok, "exit_code": a.rc, "seconds": a.seconds, "summary": verdict.summary,
              **verdict.details}
    print(json.dumps(report, indent=1, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
