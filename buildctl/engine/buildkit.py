"""The BuildKit backend: a node's image built by the engine's own BuildKit, driven by a docker CLI.

Why this driver (docs/guides/fleet.md, "Build backends"): docker-py speaks only the classic builder, and no package
registry this project reaches ships ``buildkitd`` or ``buildctl`` (Debian 12 has neither, nor buildx; PyPI and
npm have no such binaries). What every Docker engine of ours has is BuildKit built in (since 18.09), reached
by a docker CLI as ``DOCKER_BUILDKIT=1 docker build`` over the engine's own endpoint: the unix socket, or
``tcp://`` / ``ssh://`` for a builder on another machine. Debian's /usr/bin/docker (20.10) drives it with its
built-in client; a CLI of 23 or later needs the buildx plugin for that (without it, it refuses BuildKit).
There is no ``# syntax=`` line in our Dockerfiles: it would pull a frontend image, and none can be pulled
here; the engine's built-in Dockerfile frontend (1.2 in 20.10) reads them as they are.

A build here takes exactly what the classic one takes (the rendered Dockerfile, its context folder, the
wheelhouse build arg, host networking for the nodes that read the wheelhouse, no cache for `repro`) and
gives the same thing back: the image id of the tag. Nothing secret is in the command line: the only build
arg is the wheelhouse's URL on 127.0.0.1; registry credentials stay in docker's configuration, which the
CLI reads as docker-py does.

This module owns the CLI process: finding a CLI that can drive BuildKit, running one build with its log
streamed line by line, and stopping it (``Engine.cancel`` terminates the CLI; the engine then cancels the
solve, whose step containers are BuildKit's own, not the engine's).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from buildctl import untrusted
from buildctl.errors import EngineError

ENV_OFF = ("DOCKER_CONTEXT",)  # a context would override DOCKER_HOST: the endpoint is ours to name
_VERSION = re.compile(r"Docker version (\d+)\.(\d+)\.(\d+)")
_FOUND: dict[str, Cli] = {}
_FOUND_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class Cli:
    """A docker CLI that can drive the engine's BuildKit."""

    path: str
    version: str
    buildx: bool  # `docker build` is buildx (CLI 23+): the same flags, the docker driver

    def describe(self) -> str:
        how = "buildx, docker driver" if self.buildx else "its built-in BuildKit client"
        return f"{self.path} {self.version} ({how})"


def find_cli(configured: Path | None = None, *, memo: Path | None = None) -> Cli:
    """The docker CLI to drive BuildKit with: ``configured`` (config ``docker_cli``), else the first of
    PATH's ``docker`` and /usr/bin/docker that can (a client below 23, or one with buildx). Raises EngineError
    saying what was tried and how to get one. ``memo``: a file that keeps the answer for the same candidate
    files (path, inode, size, mtime), so that a build does not start two or three CLIs to ask again (0.1 s)."""
    candidates = [str(configured)] if configured else list(dict.fromkeys(
        p for p in (shutil.which("docker"), "/usr/bin/docker") if p and Path(p).is_file()))
    key = "\0".join(candidates)
    with _FOUND_LOCK:
        if key in _FOUND:
            return _FOUND[key]
    stamp = _stamp(candidates)
    remembered = _recall(memo, stamp)
    if remembered is not None:
        with _FOUND_LOCK:
            _FOUND[key] = remembered
        return remembered
    tried: list[str] = []
    for path in candidates:
        cli, why = _probe(path)
        if cli is not None:
            with _FOUND_LOCK:
                _FOUND[key] = cli
            _remember(memo, stamp, cli)
            return cli
        tried.append(f"{path}: {why}")
    raise EngineError(
        "no docker CLI here can drive BuildKit (the buildkit backend needs one)",
        why="; ".join(tried) if tried else "no docker CLI on PATH nor at /usr/bin/docker",
        fix="install Debian's docker.io (its /usr/bin/docker 20.10 drives the engine's BuildKit), or the docker "
            "buildx plugin for a newer CLI; or set docker_cli (BUILDCTL_DOCKER_CLI) to such a CLI; or build with "
            "--backend classic")


def _stamp(candidates: list[str]) -> list[list[object]]:
    out: list[list[object]] = []
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            return []
        out.append([path, st.st_ino, st.st_size, st.st_mtime_ns])
    return out


MEMO_MAX = 64 << 10  # bytes of the memo read at most (it holds a few paths)


def _recall(memo: Path | None, stamp: list[list[object]]) -> Cli | None:
    """The CLI the memo names for these candidates. The memo is a cache file, read as untrusted: a regular file
    (a FIFO made every buildkit build wait in open), bounded in size and depth (100,000 '[' was json's
    RecursionError), and its CLI one of the candidates (another path there was run as the docker CLI)."""
    if memo is None or not stamp:
        return None
    try:
        data = untrusted.loads(untrusted.read_regular(memo, MEMO_MAX))
        if not isinstance(data, dict) or data.get("candidates") != stamp:
            return None
        if data["path"] not in [c[0] for c in stamp]:
            return None
        return Cli(path=str(data["path"]), version=str(data["version"]), buildx=bool(data["buildx"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable or of another shape: ask again


def _remember(memo: Path | None, stamp: list[list[object]], cli: Cli) -> None:
    if memo is None or not stamp:
        return
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"candidates": stamp, "path": cli.path, "version": cli.version, "buildx": cli.buildx}))
        os.replace(tmp, memo)


def _probe(path: str) -> tuple[Cli | None, str]:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False,
                              env=_env(None))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot run it ({exc})"
    m = _VERSION.search(done.stdout)
    if done.returncode != 0 or m is None:
        return None, f"`{path} --version` said {(done.stdout + done.stderr).strip()[:120]!r}"
    version = ".".join(m.groups())
    if int(m.group(1)) < 23:  # BuildKit's client is built in (18.09 to 20.10)
        return Cli(path=path, version=version, buildx=False), ""
    try:
        bx = subprocess.run([path, "buildx", "version"], capture_output=True, text=True, timeout=20, check=False,
                            env=_env(None))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"version {version} needs the buildx plugin for BuildKit, and asking for it failed ({exc})"
    if bx.returncode != 0:
        return None, f"version {version} needs the buildx plugin for BuildKit, and it has none"
    return Cli(path=path, version=version, buildx=True), ""


def _env(address: str | None) -> dict[str, str]:
    """The CLI's environment: ours (docker's config and TLS settings, credentials buildctl handed over
    through DOCKER_CONFIG), BuildKit on, plain progress, and DOCKER_HOST = the builder's endpoint."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_OFF}
    env["DOCKER_BUILDKIT"] = "1"
    env["BUILDKIT_PROGRESS"] = "plain"
    if address is not None:
        env["DOCKER_HOST"] = address
    return env


def command(cli: Cli, *, context_dir: Path, dockerfile: str, tag: str, iidfile: Path, labels: Mapping[str, str],
            buildargs: Mapping[str, str] | None, network_mode: str | None, nocache: bool) -> list[str]:
    """The `docker build` argv (pure). Every value is one argv word (no shell); the context is last, after
    `--`-free flags only: every flag takes its value joined (``--tag=...``), so a value can never be read as a flag."""
    argv = [cli.path, "build", "--progress=plain", f"--iidfile={iidfile}", f"--tag={tag}",
            f"--file={context_dir / dockerfile}"]
    for k, v in sorted(labels.items()):
        argv.append(f"--label={k}={v}")
    for k, v in sorted((buildargs or {}).items()):
        argv.append(f"--build-arg={k}={v}")
    if network_mode:
        argv.append(f"--network={network_mode}")
    if nocache:
        argv.append("--no-cache")
    argv.append(str(context_dir))
    return argv


def build(cli: Cli, *, address: str, context_dir: Path, dockerfile: str, tag: str, labels: Mapping[str, str],
          buildargs: Mapping[str, str] | None, network_mode: str | None, nocache: bool,
          emit: Callable[[str], None], started: Callable[[subprocess.Popen[bytes]], None],
          stopped: Callable[[subprocess.Popen[bytes]], None], silence_s: float) -> tuple[str, str]:
    """Run one BuildKit build; every output line goes to ``emit`` (with its newline). Returns (image id, error):
    an empty id and the error's text when the build failed. ``started``/``stopped`` register the CLI process
    (so that a cancel can terminate it); no output for ``silence_s`` ends it as failed."""
    with tempfile.TemporaryDirectory(prefix="buildctl-bk-") as tmp:
        iidfile = Path(tmp) / "iid"
        argv = command(cli, context_dir=context_dir, dockerfile=dockerfile, tag=tag, iidfile=iidfile, labels=labels,
                       buildargs=buildargs, network_mode=network_mode, nocache=nocache)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=_env(address))
        except OSError as exc:
            raise EngineError(f"build of {tag}: cannot start {cli.path}", why=str(exc),
                              fix="check the docker CLI (config docker_cli), or build with --backend classic") from exc
        started(proc)
        errors: list[str] = []
        try:
            silent = _stream(proc, emit, errors, silence_s)
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
            stopped(proc)
        if silent:
            return "", f"no output for {silence_s:.0f} s: the build was stopped"
        image_id = iidfile.read_text().strip() if iidfile.is_file() else ""
        if code != 0 or not image_id:
            why = errors[-1] if errors else f"{Path(cli.path).name} build exited with status {code}"
            return "", why
        return image_id, ""


def _stream(proc: subprocess.Popen[bytes], emit: Callable[[str], None], errors: list[str], silence_s: float) -> bool:
    """Hand the CLI's output on line by line until it ends; collect its error lines. True: it fell silent."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    partial = b""
    last = time.monotonic()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=min(5.0, silence_s)):
                if time.monotonic() - last > silence_s:
                    proc.kill()
                    return True
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            last = time.monotonic()
            partial += chunk
            *lines, partial = partial.split(b"\n")
            for raw in lines:
                _line(raw.decode("utf-8", "replace"), emit, errors)
    if partial:
        _line(partial.decode("utf-8", "replace"), emit, errors)
    return False


def _line(line: str, emit: Callable[[str], None], errors: list[str]) -> None:
    line = line.rstrip("\r")
    emit(line + "\n")
    # BuildKit's plain progress ends a failed build with "error: failed to solve: ..." (20.10) or
    # "ERROR: failed to solve: ..." (buildx); a failed step says "executor failed running [...]: exit code: N"
    text = line.split(" ", 1)[1] if line.startswith("#") and " " in line else line
    if text.lower().startswith(("error: ", "error ")) or "failed to solve" in text:
        errors.append(text.strip())
