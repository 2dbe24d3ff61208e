"""``python3 -m smoke --expect expect.json [--tier build|gpu] [--junit out.xml]``.

Prints one JSON report on stdout. Exit status: 0 every required check of the tier passed (or is
unsupported by the hardware, or belongs to the other tier); 1 a required check did not; 2 the
suite could not run (expect.json unreadable or wrong), with the report's "error" saying why.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from smoke import runner
from smoke.driver import has_device, prepare
from smoke.expect import Expect, ExpectError, load
from smoke.prober import SubprocessProber, SystemTools
from smoke.report import TIERS, Report, junit_xml


def _write(path: str, text: str) -> None:
    if path == "-":
        sys.stderr.write(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m smoke", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--expect", required=True, help="expect.json (see smoke/README.md)")
    ap.add_argument("--tier", choices=TIERS, default="build", help="build (no GPU needed) or gpu")
    ap.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE ('-': stderr)")
    ap.add_argument("--python", default=sys.executable, help="interpreter the probes run with (default: this one)")
    args = ap.parse_args(argv)
    try:
        expect = load(args.expect)
    except ExpectError as exc:
        report = Report(tier=args.tier, stack="", variant="", checks=(), python={}, driver={},
                        started=runner.now_utc(), duration_s=0.0, error=f"expect.json: {exc}")
        sys.stdout.write(report.to_text())
        if args.junit:
            _write(args.junit, junit_xml(report))
        return 2
    tmp = tempfile.mkdtemp(prefix="smoke-")
    try:
        report = run(expect, args.tier, args.python, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write(report.to_text())
    if args.junit:
        _write(args.junit, junit_xml(report))
    return 0 if report.ok else 1


def run(expect: Expect, tier: str, python: str, tmp: str) -> Report:
    env = dict(os.environ)
    device = has_device()
    # The GPU tier asks the real driver; the stub is for the build tier's imports only.
    mode = expect.driver_stub if tier == "build" else "never"
    driver = prepare(mode, env, expect.stub_paths, device=device, tmp=tmp)
    prober = SubprocessProber(python=python, python_path=expect.python_path, driver=driver,
                              timeout=expect.probe_timeout_s, base_env=env, tmp=tmp)
    return runner.run(expect, "gpu" if tier == "gpu" else "build", prober=prober, tools=SystemTools(),
                      driver=driver, env=env)


if __name__ == "__main__":
    sys.exit(main())
