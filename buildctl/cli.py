"""The command line: argparse, and the one place that maps errors to exit codes.

Each feature module registers its own subcommands through ``register(sub)``; their handlers take
``(args, ctx)`` (buildctl/commands/context.py) and return an exit status. Library code raises; only
``main`` exits.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from buildctl import __version__, safepath
from buildctl.commands.context import Context, Handler
from buildctl.config import load_config
from buildctl.errors import BuildctlError, Interrupted, UsageError, disk_full
from buildctl.ui import UI

# Modules that add subcommands (each defines ``register(sub)``), in --help order.
COMMAND_MODULES = (
    "buildctl.commands.pins",
    "buildctl.commands.lock",
    "buildctl.commands.lintargs",
    "buildctl.commands.build",
    "buildctl.commands.smoke",
    "buildctl.commands.ship",
    "buildctl.commands.evidence",
    "buildctl.commands.nightly",
    "buildctl.commands.repro",
    "buildctl.commands.bump",
    "buildctl.commands.bisect",
)
# The subcommands each module adds: `buildctl build ...` imports only buildctl.commands.build (each module
# imports what its commands need). tests/unit/test_cli_commands.py holds this to what the modules register.
COMMANDS = {
    "pins": "buildctl.commands.pins",
    "lock": "buildctl.commands.lock",
    "lint-args": "buildctl.commands.lintargs",
    "plan": "buildctl.commands.build",
    "build": "buildctl.commands.build",
    "smoke": "buildctl.commands.smoke",
    "verify": "buildctl.commands.ship",
    "bom": "buildctl.commands.ship",
    "provenance": "buildctl.commands.ship",
    "diff": "buildctl.commands.ship",
    "push": "buildctl.commands.ship",
    "evidence": "buildctl.commands.evidence",
    "nightly": "buildctl.commands.nightly",
    "repro": "buildctl.commands.repro",
    "bump": "buildctl.commands.bump",
    "bisect": "buildctl.commands.bisect",
}


def find_project(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds pins/, else the checkout buildctl came from."""
    for d in (start, *start.parents):
        if (d / "pins").is_dir():
            return d
    here = Path(__file__).resolve().parent.parent
    if (here / "pins").is_dir():
        return here
    raise UsageError(
        f"no pins/ folder at or above {start}",
        fix="run buildctl inside a project checkout, or pass --project DIR",
    )


def project_folder(path: Path) -> Path:
    """``--project``, resolved: a folder that exists (a mistyped one would otherwise be a project with no stacks,
    where `pins check` passes; a symlink loop ended in RuntimeError)."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--project {path}: {why}", fix="give the project folder (the one holding pins/)") from None
    if not resolved.is_dir():
        raise UsageError(f"--project {path} is not a folder", fix="give the project folder (the one holding pins/)")
    return resolved


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, past the global options (None: none, or an option it does not know)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-q", "--quiet"):
            i += 1
        elif a == "--project":
            i += 2
        elif a.startswith("--project="):
            i += 1
        elif a.startswith("-"):
            return None  # --help, --version, a typo: the full parser answers
        else:
            return a
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv`` that names a known subcommand, with only that subcommand's module imported
    (its --help and errors are the same: each module registers its own subcommands)."""
    parser = argparse.ArgumentParser(
        prog="buildctl",
        description="Build GPU training images from version-pin manifests: lock, plan, build, smoke, push.",
    )
    parser.add_argument("--version", action="version", version=f"buildctl {__version__}")
    parser.add_argument("--project", type=Path, help="project folder holding pins/ and images/ (default: found from cwd)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    word = None if argv is None else _command_word(argv)
    for name in [COMMANDS[word]] if word in COMMANDS else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _stop_on_signals() -> Callable[[], None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread (once: a second signal while the run removes
    what it started is ignored, so that the cleanup finishes). Returns what puts the old handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    raised = False

    def handler(signum: int, _frame: object) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        raise Interrupted(signum, signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)
    return restore


def main(argv: Sequence[str] | None = None) -> int:
    ui = UI()
    restore = _stop_on_signals()
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        ui.quiet = args.quiet
        config = load_config(os.environ)
        project = project_folder(args.project) if args.project is not None else find_project(Path.cwd()).resolve()
        ctx = Context(project=project, config=config, ui=ui)
        _sweep_temps(ctx)
        handler: Handler = args.func
        return handler(args, ctx)
    except BuildctlError as exc:
        ui.error(str(exc))
        return exc.exit_code
    except OSError as exc:
        full = disk_full(exc.filename or "a file (the system did not say which)", exc)
        if full is None:
            raise
        ui.error(str(full))  # a full disk where no write path of buildctl named the file itself
        return full.exit_code
    except Interrupted as exc:
        ui.error(f"interrupted by {exc.name}: {exc.done or 'stopped; nothing half-done was tagged or written'}")
        return exc.exit_code
    except KeyboardInterrupt:
        ui.error("interrupted; nothing half-done was tagged or written")
        return 130
    finally:
        restore()


def _sweep_temps(ctx: Context) -> None:
    """The temporary files of writers that died (SIGKILL between a write and its rename: safepath.sweep_temps)
    in pins/ and the cache's state/ and reports/, removed at the start of every command, saying so."""
    removed = safepath.sweep_temps(ctx.pins_dir)
    for folder in (ctx.config.cache.root / "state", ctx.config.cache.reports):
        removed += safepath.sweep_temps(folder, recursive=True)
    if removed:
        ctx.ui.info(f"removed {len(removed)} temporary file(s) that runs which died left: "
                    + ", ".join(str(p) for p in removed[:5]) + (" ..." if len(removed) > 5 else ""))


def run() -> NoReturn:
    """The `buildctl` command: ``main``, then the process ends with its exit code (``exit_now``)."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once everything it owes is done, without the interpreter's teardown.

    Tearing down the modules a build imports costs about 0.07 s, a measurable part of a build that changed a
    pin (`make bench` (b)) and of every short command. Nothing is skipped that matters: the standard streams
    are flushed, threading's exit hooks run and the threads that are not daemons are waited for, and the atexit
    handlers run (logging's, tempfile's finalizers, anything a library registered), as at a normal exit;
    buildctl's own clean-up is in ``finally`` blocks, done before ``main`` returns. An exception escaping
    ``main`` never gets here."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    # what the interpreter does at exit, in its order: threading's own exit hooks (an executor's workers told to
    # stop), the threads that are not daemons joined, then the atexit handlers
    shutdown = getattr(threading, "_shutdown", None)
    if callable(shutdown):
        shutdown()
    else:  # pragma: no cover (CPython has it)
        for th in threading.enumerate():
            if th is not threading.main_thread() and not th.daemon:
                th.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
