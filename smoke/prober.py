"""How checks ask probes, and how they run external tools: small seams that tests replace."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from smoke import probes
from smoke.driver import Driver

SUITE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The child imports smoke.probes from the suite's folder, then takes that folder off sys.path so
# that nothing the probe imports can resolve to a file of the suite.
BOOT = (
    "import sys; sys.path.insert(0, {parent!r}); import smoke.probes as p; sys.path.pop(0); "
    "sys.modules.pop('smoke', None); p.child_main(sys.argv[1:])"
)


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    data: dict[str, Any]
    exit_code: int | None = 0
    timed_out: bool = False
    stderr_tail: list[str] = field(default_factory=list)
    how: str = "in-process"

    @property
    def ok(self) -> bool:
        return bool(self.data.get("ok"))

    @property
    def error(self) -> dict[str, Any] | None:
        e = self.data.get("error")
        return e if isinstance(e, dict) else None

    def error_text(self) -> str:
        e = self.error
        return str(e.get("text", "")) if e else ""

    def needs_device(self) -> bool:
        e = self.error
        return bool(e and e.get("needs_device"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"how": self.how}
        if self.exit_code:
            out["exit_code"] = self.exit_code
        if self.timed_out:
            out["timed_out"] = True
        if self.stderr_tail:
            out["stderr_tail"] = self.stderr_tail
        return out


class Prober(Protocol):
    def probe(self, name: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
              stub: bool = True) -> ProbeResult: ...

    def probe_ranks(self, name: str, args: Mapping[str, Any], *, ranks: int, timeout: float) -> list[ProbeResult]:
        """One probe in ``ranks`` processes at once, one GPU each, joined by torch.distributed on localhost."""
        ...


# NVLink multicast stays off in every rank (NCCL NVLS, PyTorch symmetric memory, NVSHMEM): on shared
# multi-GPU hosts a program that uses it can take the host's GPUs out of service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def rank_env(rank: int, ranks: int, port: int) -> dict[str, str]:
    """What torch.distributed's env:// rendezvous reads, one GPU per rank, and multicast off."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **NO_MULTICAST}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    exit_code: int
    stdout: str
    stderr: str


class Tools(Protocol):
    def which(self, name: str, extra_dirs: Sequence[str] = ()) -> str | None: ...

    def run(self, argv: Sequence[str], *, timeout: float) -> ToolResult: ...


class SystemTools:
    def which(self, name: str, extra_dirs: Sequence[str] = ()) -> str | None:
        for d in extra_dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        return shutil.which(name)

    def run(self, argv: Sequence[str], *, timeout: float) -> ToolResult:
        try:
            p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return ToolResult(exit_code=124, stdout="", stderr=f"timed out after {timeout:.0f} s")
        except OSError as exc:
            return ToolResult(exit_code=127, stdout="", stderr=str(exc))
        return ToolResult(exit_code=p.returncode, stdout=p.stdout, stderr=p.stderr)


def _tail(text: str, n: int = 30) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()][-n:]


class SubprocessProber:
    """Each probe in a fresh process of ``python``, with the expectation's python_path and the driver."""

    def __init__(self, *, python: str, python_path: Sequence[str], driver: Driver, timeout: float,
                 base_env: Mapping[str, str] | None = None, tmp: str | None = None) -> None:
        self.python = python
        self.python_path = list(python_path)
        self.driver = driver
        self.timeout = timeout
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.tmp = tmp

    def env_for(self, extra: Mapping[str, str] | None, stub: bool) -> dict[str, str]:
        env = self.driver.env(self.base_env) if stub else dict(self.base_env)
        if self.python_path:
            old = env.get("PYTHONPATH", "")
            env["PYTHONPATH"] = os.pathsep.join([*self.python_path, *([old] if old else [])])
        env.update(extra or {})
        return env

    def probe(self, name: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
              stub: bool = True) -> ProbeResult:
        with tempfile.TemporaryDirectory(prefix="smoke-probe-", dir=self.tmp) as d:
            args_path, out_path = os.path.join(d, "args.json"), os.path.join(d, "out.json")
            with open(args_path, "w", encoding="utf-8") as f:
                json.dump(dict(args), f)
            argv = [self.python, "-c", BOOT.format(parent=SUITE_PARENT), name, args_path, out_path]
            how = f"{self.python} (probe {name}" + (", driver stub" if stub and self.driver.stub_dir else "") + ")"
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                   env=self.env_for(env, stub), check=False, cwd=d)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
                return ProbeResult(
                    data={"ok": False, "error": {"type": "Timeout", "message": f"probe {name} ran past {self.timeout:.0f} s",
                                                 "text": f"Timeout: probe {name} ran past {self.timeout:.0f} s",
                                                 "traceback": [], "needs_device": False}},
                    exit_code=None, timed_out=True, stderr_tail=_tail(err), how=how)
            except OSError as exc:
                return ProbeResult(data=probes.failure(exc, stage="start"), exit_code=127, how=how)
            return _answer(name, out_path, p.returncode, p.stderr, how)

    def probe_ranks(self, name: str, args: Mapping[str, Any], *, ranks: int, timeout: float) -> list[ProbeResult]:
        """``ranks`` processes of the probe at once (the real driver, no stub), env:// rendezvous on a free
        localhost port; all are ended when one outlives ``timeout``."""
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="smoke-ranks-", dir=self.tmp) as d:
            args_path = os.path.join(d, "args.json")
            with open(args_path, "w", encoding="utf-8") as f:
                json.dump(dict(args), f)
            procs: list[tuple[subprocess.Popen[str], str, str]] = []
            try:
                for rank in range(ranks):
                    out_path = os.path.join(d, f"out-{rank}.json")
                    err = open(os.path.join(d, f"err-{rank}.txt"), "w+", encoding="utf-8")  # noqa: SIM115
                    argv = [self.python, "-c", BOOT.format(parent=SUITE_PARENT), name, args_path, out_path]
                    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=d,
                                         env=self.env_for(rank_env(rank, ranks, port), stub=False),
                                         start_new_session=True)
                    err.close()
                    procs.append((p, out_path, os.path.join(d, f"err-{rank}.txt")))
            except OSError as exc:
                for p, _, _ in procs:
                    _end(p)
                return [ProbeResult(data=probes.failure(exc, stage="start"), exit_code=127, how="ranks")] * ranks
            deadline = time.monotonic() + timeout
            timed_out = False
            for p, _, _ in procs:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    break
            if timed_out:
                for p, _, _ in procs:
                    _end(p)
            results = []
            for rank, (p, out_path, err_path) in enumerate(procs):
                with open(err_path, encoding="utf-8", errors="replace") as f:
                    stderr = f.read()
                how = f"{self.python} (probe {name}, rank {rank} of {ranks}, MASTER_PORT {port})"
                if timed_out and not os.path.exists(out_path):
                    text = f"Timeout: rank {rank} of probe {name} had not answered after {timeout:.0f} s"
                    results.append(ProbeResult(
                        data={"ok": False, "error": {"type": "Timeout", "message": text, "text": text,
                                                     "traceback": [], "needs_device": False}},
                        exit_code=None, timed_out=True, stderr_tail=_tail(stderr), how=how))
                else:
                    results.append(_answer(name, out_path, p.returncode, stderr, how))
            return results


def _end(p: subprocess.Popen[str]) -> None:
    """End a rank and whatever it started (its own process session)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
    p.wait()


def _answer(name: str, out_path: str, code: int | None, stderr: str, how: str) -> ProbeResult:
    """The probe's answer file, or what its death says (a crash inside a native library, most often)."""
    if os.path.exists(out_path):
        with open(out_path, encoding="utf-8") as f:
            data = json.load(f)
        return ProbeResult(data=data, exit_code=code, stderr_tail=_tail(stderr), how=how)
    code = -1 if code is None else code
    what = (f"killed by signal {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
            else f"exit status {code}")
    lines = _tail(stderr)
    text = f"ProbeDied: probe {name} {what} before answering" + (f"; last output: {lines[-1]}" if lines else "")
    return ProbeResult(
        data={"ok": False, "error": {"type": "ProbeDied", "message": text, "text": text, "traceback": lines,
                                     "needs_device": probes.needs_device("\n".join(lines))}},
        exit_code=code, stderr_tail=lines, how=how)


class InProcessProber:
    """Probes in this interpreter (unit tests): sys.path, environment and new modules are restored after."""

    def __init__(self, *, python_path: Sequence[str] = ()) -> None:
        self.python_path = list(python_path)

    def probe_ranks(self, name: str, args: Mapping[str, Any], *, ranks: int, timeout: float) -> list[ProbeResult]:
        text = f"RuntimeError: the in-process prober cannot start {ranks} ranks of probe {name}"
        return [ProbeResult(data={"ok": False, "error": {"type": "RuntimeError", "message": text, "text": text,
                                                           "traceback": [], "needs_device": False}})] * ranks

    def probe(self, name: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
              stub: bool = True) -> ProbeResult:
        saved_path = list(sys.path)
        saved_modules = set(sys.modules)
        saved_env = {k: os.environ.get(k) for k in (env or {})}
        sys.path[:0] = self.python_path
        os.environ.update(env or {})
        importlib.invalidate_caches()
        try:
            data = probes.run(name, args)
            return ProbeResult(data=json.loads(json.dumps(data, default=str)), how="in-process")
        finally:
            sys.path[:] = saved_path
            for entry in self.python_path:
                sys.path_importer_cache.pop(entry, None)
            for mod in set(sys.modules) - saved_modules:
                del sys.modules[mod]
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
