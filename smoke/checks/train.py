"""train (GPU tier only): the image's own launch script trains a few steps of the profile named for it.

The section names a launch profile (a scaled-down proxy of the stack's run, declared in the manifest) and
the launch script the entrypoint baked (``/usr/local/bin/buildctl-launch``). The check starts that script
with ``BUILDCTL_PROFILE`` set, as one rank where the launcher is srun (``RANK=0 WORLD_SIZE=1
LOCAL_RANK=0``) or as the script's own torchrun where it is torchrun, keeps its whole output in a log,
and reads Megatron's training log back (smoke.trainlog): it fails when the run exits non-zero, logs
fewer steps than ``min_steps``, shows a NaN or non-finite loss, or the loss does not fall. The report
keeps every step's loss, step times, Megatron's memory report and the GPU memory nvidia-smi saw.

There is nothing to train on the build host (and the gate runs before the script is baked in), so the
check has no build-tier part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from smoke import trainlog
from smoke.checks import Context, no_gpu
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed

NAME = "train"
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MIN_STEPS = 20
LOG_TAIL = 40


def launch_env(base: Mapping[str, str], profile: str, launcher: str, port: int) -> dict[str, str]:
    """The environment the launch script runs with: the image's, the profile, and one rank where srun
    would have started it (srun sets SLURM_* itself; the script accepts RANK/WORLD_SIZE/LOCAL_RANK)."""
    env = dict(base)
    env["BUILDCTL_PROFILE"] = profile
    env.setdefault("PYTHONUNBUFFERED", "1")
    if launcher in ("srun", "none"):
        for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
            env.pop(k, None)
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(port))
    return env


class _GpuMemory:
    """The most GPU memory nvidia-smi reports in use while the run lasts (sampled once a second)."""

    def __init__(self, nvidia_smi: str | None) -> None:
        self.tool = nvidia_smi
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        assert self.tool is not None
        while not self._stop.is_set():
            try:
                out = subprocess.run([self.tool, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10, check=False).stdout
                used = max(float(x) for x in out.split() if x.replace(".", "", 1).isdigit())
                self.peak_mib = used if self.peak_mib is None else max(self.peak_mib, used)
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            self._stop.wait(1.0)

    def __enter__(self) -> _GpuMemory:
        if self.tool:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)


def run_launch(argv: list[str], env: Mapping[str, str], *, timeout: float, log_path: str) -> tuple[int, float, str]:
    """Run the launch script with its output to ``log_path``; (exit status, seconds, how it ended).
    On a timeout the whole process group (torchrun and its ranks) is stopped."""
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=dict(env), start_new_session=True)
        except OSError as exc:
            return 127, 0.0, f"could not start {argv[0]}: {exc}"
        try:
            rc = p.wait(timeout=timeout)
            return rc, time.monotonic() - t0, f"exit status {rc}"
        except subprocess.TimeoutExpired:
            for sig, wait in ((15, 20.0), (9, 10.0)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return 124, time.monotonic() - t0, f"timed out after {timeout:.0f} s (stopped)"


def _tail(path: str, n: int = LOG_TAIL) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip("\n") for ln in f]
    except OSError:
        return []
    return [ln for ln in lines if ln.strip()][-n:]


def gpu(ctx: Context, sec: Section) -> CheckResult:
    if ctx.gpu is None or not ctx.gpu.available:
        return no_gpu(NAME, ctx)
    profile = sec.str_opt("profile")
    script = sec.str_opt("script")
    if not profile or not script:
        raise SectionError("checks.train: needs 'profile' and 'script'")
    launcher = sec.str_opt("launcher") or "none"
    if launcher not in ("srun", "torchrun", "none"):
        raise SectionError(f"checks.train.launcher: expected srun, torchrun or none, got {launcher!r}")
    timeout = sec.number("timeout_s", DEFAULT_TIMEOUT_S)
    min_steps = int(sec.number("min_steps", DEFAULT_MIN_STEPS, high=1_000_000))
    path = ctx.path(script)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return failed(NAME, f"the launch script {script} is missing or not executable in this image",
                      profile=profile)
    log_dir = sec.str_opt("log_dir") or tempfile.mkdtemp(prefix="buildctl-train-")
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"train-{profile}.log")
    env = launch_env(ctx.env, profile, launcher, int(sec.number("master_port", 29500, high=65535)))
    with _GpuMemory(shutil.which("nvidia-smi", path=env.get("PATH"))) as mem:
        rc, seconds, how = run_launch([path], env, timeout=timeout, log_path=log_path)
    with open(log_path, errors="replace") as f:
        log = trainlog.parse(f.read())
    verdict = trainlog.judge(log, min_steps=min_steps)
    details: dict[str, Any] = {"profile": profile, "script": script, "launcher": launcher, "exit_code": rc,
                               "seconds": round(seconds, 1), "log": log_path, "gpu_memory_used_peak_mib": mem.peak_mib,
                               **verdict.details}
    if rc != 0:
        return failed(NAME, f"profile {profile}: {script} {how} after {seconds:.0f} s"
                      + (f" ({verdict.summary})" if log.steps else ", before any step was logged"),
                      log_tail=_tail(log_path), **details)
    if not verdict.ok:
        return failed(NAME, f"profile {profile}: {verdict.summary}", log_tail=_tail(log_path), **details)
    return passed(NAME, f"profile {profile}: {verdict.summary}, {seconds:.0f} s in all", **details)
