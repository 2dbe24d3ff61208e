"""``python3 -m smoke --expect expect.json [--tier build|gpu] [--junit out.xml] [--image-digest sha256:...]``.

Prints one JSON report on stdout. Exit status: 0 every required check of the tier passed (or is
unsupported by the hardware, or belongs to the other tier); 1 a required check did not; 2 the
suite could not run (expect.json unreadable or wrong, or the --junit file cannot be written), with
the report's "error" (and stderr) saying why.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import replace

from smoke import runner
from smoke.driver import has_device, prepare
from smoke.expect import Expect, ExpectError, load
from smoke.prober import SubprocessProber, SystemTools
from smoke.report import TIERS, Report, junit_xml
from smoke.suite import suite_hash

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class _Junit:
    """Where --junit goes. A temporary file beside it is made before anything runs, so that an
    unwritable path is refused at once (exit 2); the XML replaces the path only when complete."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.tmp: str | None = None
        if not path or path == "-":
            return
        if os.path.isdir(path):
            raise OSError(f"--junit {path}: is a folder, not a file")
        try:
            fd, self.tmp = tempfile.mkstemp(prefix=".junit-", suffix=".part",
                                            dir=os.path.dirname(os.path.abspath(path)))
            os.close(fd)
        except OSError as exc:
            raise OSError(f"--junit {path}: cannot write there: {exc.strerror or exc}") from exc

    def write(self, report: Report) -> None:
        if not self.path:
            return
        text = junit_xml(report)
        if self.tmp is None:
            sys.stderr.write(text)
            return
        try:
            with open(self.tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise OSError(f"--junit {self.path}: cannot write: {exc.strerror or exc}") from exc
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)

    def discard(self) -> None:
        if self.tmp and os.path.exists(self.tmp):
            os.unlink(self.tmp)


def _cannot_run(tier: str, error: str) -> Report:
    return Report(tier="gpu" if tier == "gpu" else "build", stack="", variant="", checks=(), python={},
                  driver={}, started=runner.now_utc(), duration_s=0.0, error=error, suite_hash=suite_hash())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m smoke", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--expect", required=True, help="expect.json (see smoke/README.md)")
    ap.add_argument("--tier", choices=TIERS, default="build", help="build (no GPU needed) or gpu")
    ap.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE ('-': stderr)")
    ap.add_argument("--python", default=sys.executable, help="interpreter the probes run with (default: this one)")
    ap.add_argument("--image-digest", default="", metavar="DIGEST",
                    help="the registry manifest digest of the image under test (sha256:<hex>), written into the "
                         "report as its subject: `buildctl evidence attach` checks it against the image")
    args = ap.parse_args(argv)
    if args.image_digest and not _DIGEST.match(args.image_digest):
        ap.error(f"--image-digest {args.image_digest!r}: expected sha256:<64 hex digits>")
    try:
        junit = _Junit(args.junit)
    except OSError as exc:
        sys.stderr.write(f"python3 -m smoke: {exc}\n")
        sys.stdout.write(_cannot_run(args.tier, str(exc)).to_text())
        return 2
    try:
        expect = load(args.expect)
    except ExpectError as exc:
        report = _cannot_run(args.tier, f"expect.json: {exc}")
        sys.stderr.write(f"python3 -m smoke: {report.error}\n")
        sys.stdout.write(report.to_text())
        return _finish(junit, report, 2)
    tmp = tempfile.mkdtemp(prefix="smoke-")
    try:
        report = replace(run(expect, args.tier, args.python, tmp), subject=args.image_digest)
    except BaseException:
        junit.discard()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write(report.to_text())
    return _finish(junit, report, 0 if report.ok else 1)


def _finish(junit: _Junit, report: Report, code: int) -> int:
    try:
        junit.write(report)
    except OSError as exc:
        sys.stderr.write(f"python3 -m smoke: {exc}\n")
        return 2
    return code


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
