"""Issue 33 item 17: a classic build whose client was SIGKILLed midway goes on in the engine; when a later step
fails there, the step images it committed stay, untagged, with nothing that names them. The journal in the
killed run's scratch folder lets a later run remove them (builder/schedule.remove_leftovers does it for every
dead run). The build runs in a child process, killed once its first step image is listed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from buildctl import runs
from buildctl.engine.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys
from pathlib import Path
from buildctl import runs
from buildctl.engine.engine import Engine
tmp, ctx, base = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
e = Engine(name="killed-build")
e.intermediates = runs.scratch(tmp) / runs.journal_name(e.address)
print(e.intermediates, flush=True)
e.build(context_dir=ctx, dockerfile="Dockerfile", tag="buildctl-killtest/never:t", labels={})
"""


def test_the_step_images_of_a_killed_classic_build_are_removed_by_a_later_run(
        engine: Engine, demo_base: str, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {demo_base}\nRUN echo {uuid.uuid4().hex} > /one\nRUN sleep 3 && false\n")
    tmp = tmp_path / "tmp"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp), str(ctx), demo_base],
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        journal = Path(child.stdout.readline().strip())
        deadline = time.monotonic() + 120
        while not (journal.is_file() and journal.read_text().split()):
            assert child.poll() is None and time.monotonic() < deadline, "the build ended before its first step image"
            time.sleep(0.2)
        [image] = journal.read_text().split()  # the RUN echo step's image; the failing step is running
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    assert engine.image_exists(image)
    dead = runs.dead_scratch(tmp)
    assert dead == [journal.parent]
    deadline = time.monotonic() + 60
    removed: list[str] = []
    while not removed:  # once the failed step's container is gone (forcerm), nothing holds the image
        removed = engine.remove_intermediates((dead[0] / runs.journal_name(engine.address)).read_text().split())
        assert removed or time.monotonic() < deadline, "the step image was never removed"
        time.sleep(0.5)
    assert removed == [image] and not engine.image_exists(image)
