"""`buildctl`'s way out (cli.exit_now): the process ends with main's code, without the interpreter's teardown,
and nothing it owes is lost. Real processes, no engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import atexit, sys, threading, time
from buildctl.cli import exit_now
out = sys.argv[1]
def late():
    time.sleep(0.3)
    open(out + ".thread", "w").write("done")
threading.Thread(target=late).start()
import concurrent.futures
pool = concurrent.futures.ThreadPoolExecutor(2)  # left open, its workers idle: threading's exit hook stops them
pool.submit(lambda: open(out + ".pool", "w").write("done")).result()
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
sys.stdout.write("x" * 300000)
sys.stderr.write("to the end")
exit_now(7)
"""


def test_exit_now_flushes_waits_for_threads_and_runs_atexit_handlers(tmp_path: Path) -> None:
    out = tmp_path / "mark"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 7
    assert done.stdout == "x" * 300000 and done.stderr == "to the end"
    assert (tmp_path / "mark.thread").read_text() == "done"  # a non-daemon thread is waited for
    assert (tmp_path / "mark.pool").read_text() == "done"  # and an idle executor did not hold the exit up
    assert (tmp_path / "mark.atexit").read_text() == "ran"


def test_the_command_exits_with_main_s_code_and_says_everything(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "BUILDCTL_CONFIG": str(tmp_path / "none.toml"),
           "BUILDCTL_CACHE": str(tmp_path / "cache")}
    ok = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(ROOT), "pins", "check", "demo", "--json"],
                        capture_output=True, text=True, check=False, timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.rstrip().endswith("}") and '"demo"' in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(ROOT), "pins", "show", "no-such-stack"],
                         capture_output=True, text=True, check=False, timeout=120, env=env)
    assert bad.returncode not in (0, 1) and "no-such-stack" in bad.stderr, (bad.returncode, bad.stderr)
