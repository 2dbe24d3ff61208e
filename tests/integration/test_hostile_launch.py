"""The launch script run by bash with values a shell reads specially (issue 11, defect 3).

The demo stack's entrypoint is given a working directory, arguments, a launcher argument, a site-path
default and a profile whose text holds command substitutions that would create a marker file, backticks,
quotes, spaces, ``#`` and ``\\``; the script really runs (a fake ``torchrun`` on PATH records its argv and
working directory) and must hand over exactly the manifest's words, from exactly that folder, with no
marker file created. Every value passes its field's syntax rule (the profile name is a plain name: its rule).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from buildctl import syntax
from buildctl.graph.entrypoint import launch_argv
from buildctl.graph.launch_script import render_launch_script
from buildctl.manifest import pins
from buildctl.manifest.model import Arg, Launcher, Profile, SitePath

PROJECT = Path(__file__).resolve().parents[2]
FAKE = """#!{python}
import json, os, sys
with open(os.environ["ARGV_OUT"], "w") as f:
    json.dump({{"argv0": os.path.basename(sys.argv[0]), "args": sys.argv[1:], "cwd": os.getcwd()}}, f)
"""


def test_defect3_launch_script_runs_hostile_values_as_values(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    nasty = f"$(touch {marker}) `touch {marker}` 'q' \"d\" two  spaces #h \\b $HOME ; touch {marker}"
    workdir = tmp_path / "w d $(touch PWNED) `touch PWNED` 'q' #h \\b"  # relative: a name holds no '/'
    workdir.mkdir()
    assert syntax.abs_path(str(workdir)) is None and syntax.text(nasty) is None
    m = pins.load(PROJECT / "pins" / "demo.yaml")
    assert m.entrypoint is not None
    e = dataclasses.replace(
        m.entrypoint, workdir=str(workdir), launcher=Launcher(kind="torchrun", args=("--nproc=" + nasty,)),
        args=(*m.entrypoint.args, Arg(flag="--nasty", values=(nasty, "x" + nasty), bare=False),
              Arg(flag="--site", values=("${DATA_PATH}/" + nasty,), bare=False)),
        paths={**m.entrypoint.paths, "DATA_PATH": SitePath(default=f"/data/{nasty}", doc=nasty)},
        profiles={"p.1-x": Profile(gpus=1, args=(Arg(flag="--layers", values=(nasty,), bare=False),))},
        default_profile="p.1-x")
    m = dataclasses.replace(m, entrypoint=e)
    script = tmp_path / "buildctl-launch"
    script.write_text(render_launch_script(m, m.default_variant))
    script.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(FAKE.format(python=sys.executable))
    (bin_dir / "torchrun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "ARGV_OUT": str(tmp_path / "argv.json")}

    done = subprocess.run([str(script), "--user", nasty], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "argv.json").read_text())
    expected = launch_argv(m)
    assert seen["argv0"] == "torchrun" and seen["args"] == [*expected[1:], "--user", nasty]
    assert seen["cwd"] == str(workdir)
    assert f"/data/{nasty}/{nasty}" in seen["args"] and nasty in seen["args"]
    # --print-command and --help print, and run nothing
    printed = subprocess.run([str(script), "--print-command"], env=env, capture_output=True, text=True, timeout=60)
    helped = subprocess.run([str(script), "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and helped.returncode == 0, (printed.stderr, helped.stderr)
    assert f"working directory: {workdir}" in helped.stdout
    assert not marker.exists() and not (workdir / "PWNED").exists(), "a value was run as a command"
