"""The CUDA driver as the probes will see it: a real device, or the toolkit's stub standing in.

CUDA toolkits ship ``lib64/stubs/libcuda.so``: a library with every driver entry point that fails
each call with CUDA_ERROR_STUB_LIBRARY. Extensions that link libcuda (TE's core library, DeepEP's
hybrid_ep_cpp) then load on a build host, so their import paths can be checked there. The loader asks
for ``libcuda.so.1``, so the stub is linked under that name into a private folder that is put first on
LD_LIBRARY_PATH of the probe processes only: never into the image, never for the suite itself.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smoke.expect import StubMode

DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0")


@dataclass(frozen=True, kw_only=True)
class Driver:
    device: bool  # a GPU device node is present (docker run --gpus)
    stub: str | None  # the stub library chosen, when it is in use
    stub_dir: str | None  # the private folder holding libcuda.so.1 -> stub
    mode: StubMode
    note: str

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """Environment for a probe process: the stub folder first on LD_LIBRARY_PATH when in use."""
        env = dict(base)
        if self.stub_dir:
            old = env.get("LD_LIBRARY_PATH", "")
            env["LD_LIBRARY_PATH"] = self.stub_dir + (os.pathsep + old if old else "")
        return env

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "stub": self.stub, "stub_dir": self.stub_dir, "mode": self.mode,
                "note": self.note}


def _at(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def stub_candidates(env: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """Where a CUDA toolkit keeps the driver stub, most specific first (paths inside the image)."""
    out = [*extra]
    for home in filter(None, (env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), "/usr/local/cuda")):
        out.append(os.path.join(home, "lib64", "stubs", "libcuda.so"))
        for target in ("x86_64-linux", "sbsa-linux", "aarch64-linux"):
            out.append(os.path.join(home, "targets", target, "lib", "stubs", "libcuda.so"))
    return list(dict.fromkeys(out))


def find_stub(env: Mapping[str, str], extra: Sequence[str], root: str = "/") -> str | None:
    for path in stub_candidates(env, extra):
        if os.path.isfile(_at(root, path)):
            return _at(root, path)
    return None


def has_device(root: str = "/") -> bool:
    return any(os.path.exists(_at(root, p)) for p in DEVICE_NODES)


def prepare(mode: StubMode, env: Mapping[str, str], extra: Sequence[str], *, device: bool,
            tmp: str | None = None, root: str = "/") -> Driver:
    """Decide whether the probes get the stub, and link it when they do."""
    if mode == "never":
        return Driver(device=device, stub=None, stub_dir=None, mode=mode, note="driver_stub is 'never'")
    if mode == "auto" and device:
        return Driver(device=device, stub=None, stub_dir=None, mode=mode,
                      note="a GPU device is present: probes use the real driver")
    stub = find_stub(env, extra, root)
    if stub is None:
        looked = ", ".join(stub_candidates(env, extra))
        return Driver(device=device, stub=None, stub_dir=None, mode=mode,
                      note=f"no CUDA driver stub found (looked at {looked}): probes run without libcuda")
    stub_dir = tempfile.mkdtemp(prefix="smoke-driver-stub-", dir=tmp)
    Path(stub_dir, "libcuda.so.1").symlink_to(stub)
    return Driver(device=device, stub=stub, stub_dir=stub_dir, mode=mode,
                  note=f"probes load {stub} as libcuda.so.1 (LD_LIBRARY_PATH of the probes only)")
