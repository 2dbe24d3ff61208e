"""How plan and no-op build cost grow with the number of components (item 5 of issue 14).

A generated stack with N source-tree components (no compiles: 200 compiles would take hours here), each
its own root commit of one generated repository (made with git fast-import, fixed identities and dates),
installed at /opt/gen/cNNN on the demo base. Per N: `buildctl plan` and a no-op `buildctl build` (after
one untimed build), each a process of its own whose wall time, CPU time (user + system, its children's
included: git and the engine client) and peak resident memory are measured. The growth is named from the
CPU time, the fastest of the repetitions per size: wall time on a shared 2-core machine moves with whatever
else runs (the 2026-12-01 run saw plan take 1.8, 4.3 and 3.0 s for 10, 50 and 200 components under load).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@buildctl.invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@buildctl.invalid"}


class GrowthError(Exception):
    pass


# The compiled components' "compile": a stdlib script in each tree that writes one tiny pure-Python wheel to /out
# (a compile container, a wheel image and an install each, as a real compile has, without the compiler's time).
MKWHEEL = """\
import base64, hashlib, sys, zipfile
name, out = sys.argv[1], sys.argv[2]
files = {f"{name}/__init__.py": f"NAME = {name!r}\\n",
         f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n",
         f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: bench\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
def rec(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()).rstrip(b"=").decode()
record = "".join(f"{p},{rec(d)},{len(d)}\\n" for p, d in files.items()) + f"{name}-1.0.dist-info/RECORD,,\\n"
files[f"{name}-1.0.dist-info/RECORD"] = record
with zipfile.ZipFile(f"{out}/{name}-1.0-py3-none-any.whl", "w") as z:
    for p, d in files.items():
        z.writestr(zipfile.ZipInfo(p, (1980, 1, 1, 0, 0, 0)), d)
"""


def make_repo(path: Path, n: int, compiled: bool = False) -> list[str]:
    """A bare repository with ``n`` root commits (refs/heads/cNNN); their SHAs in order. ``compiled``: each tree
    holds mkwheel.py (MKWHEEL) at its root."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    stream = []
    script = MKWHEEL.encode()
    for i in range(n):
        body = f"generated component {i}\n".encode()
        msg = f"component c{i:03d}\n".encode()
        stream += [f"commit refs/heads/c{i:03d}".encode(), f"mark :{i + 1}".encode(),
                   b"author bench <bench@buildctl.invalid> 1700000000 +0000",
                   b"committer bench <bench@buildctl.invalid> 1700000000 +0000",
                   f"data {len(msg)}".encode(), msg,
                   f"M 100644 inline c{i:03d}/README".encode(), f"data {len(body)}".encode(), body]
        if compiled:
            stream += [b"M 100644 inline mkwheel.py", f"data {len(script)}".encode(), script]
        stream.append(b"")
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=b"\n".join(stream) + b"\n",
                   check=True, env={**os.environ, **GIT_ENV})
    out = subprocess.run(["git", "-C", str(path), "for-each-ref", "--format=%(refname:short) %(objectname)",
                          "refs/heads/"], capture_output=True, text=True, check=True).stdout
    shas = dict(line.split() for line in out.splitlines())
    return [shas[f"c{i:03d}"] for i in range(n)]


def manifest(n: int, repo: Path, shas: list[str], base_image: str, repository: str, compiled: bool = False) -> str:
    """``compiled``: every component is compiled (a compile-env and a wheel node each: 4 + 2n nodes in all) by
    its tree's mkwheel.py, and installed as a wheel; otherwise a source tree (4 nodes in all)."""
    kind = "compiled" if compiled else "source-tree"
    lines = ["schema: 1", "stack: gen", f"description: generated stack with {n} {kind} components (bench)",
             "base:", "  alias: gen-base", "  description: the demo base", "  contract:", "    python: \"3.11\"",
             "    nvcc: false", "variants:", "  default:", f"    image: {base_image}", "    platform: linux/amd64",
             "    cuda: \"13\"", "    gpu_archs: [\"9.0\"]", "    python: \"3.11\"", "components:"]
    for i, sha in enumerate(shas):
        lines += [f"  c{i:03d}:", f"    repo: {repo.as_uri()}", f"    commit: {sha}", "    submodules: false"]
        if compiled:
            lines += ["    build:", f"      command: python3 mkwheel.py gen_c{i:03d} /out", "      memory_per_job_gib: 0.1",
                      "    install:", "      kind: wheel", f"      dist: gen_c{i:03d}", f"      module: gen_c{i:03d}"]
        else:
            lines += ["    install:", "      kind: source-tree", f"      path: /opt/gen/c{i:03d}"]
    lines += ["smoke:", "  required: [versions]", "  gpu_tier: waived", "  gpu_waiver: generated stack, no GPU code",
              "  python: python3", "push:", f"  registry: {base_image.split('/', 1)[0]}",
              f"  repository: {repository}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, kw_only=True)
class Measured:
    seconds: float
    cpu_s: float
    peak_mib: float


def measure(argv: list[str], env: dict[str, str], what: str) -> Measured:
    """Run ``argv`` as a child process; its wall time and peak RSS (from wait4's rusage)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n    ".join(output.decode(errors="replace").strip().splitlines()[-12:])
        raise GrowthError(f"{what} failed (exit {proc.returncode}):\n    {tail}")
    return Measured(seconds=seconds, cpu_s=usage.ru_utime + usage.ru_stime, peak_mib=usage.ru_maxrss / 1024)


def buildctl(project: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "buildctl", "--project", str(project), "-q", *args]


def name_growth(sizes: list[int], runs: list[list[float]]) -> dict[str, object]:
    """How a cost grows with the component count, from every repetition's figure (``runs[i]``: size i's).

    A least-squares line a + b*n through all points gives the per-component cost b and the start-up a. The
    growth is "flat" when what b adds over the sizes measured is within the noise (the widest spread of one
    size's repetitions); otherwise it is named from the fastest repetition of each size: "linear" when the
    marginal cost of the largest step is within a factor 2 of the first's, super- or sub-linear if not."""
    pts = [(float(n), y) for n, ys in zip(sizes, runs, strict=True) for y in ys]
    if len(sizes) < 2 or not pts:
        return {"growth": "n/a (one size)", "per_component_ms": None, "startup_s": None}
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    a = my - b * mx
    rise = b * (max(sizes) - min(sizes))
    noise = max(max(ys) - min(ys) for ys in runs)
    fastest = [min(ys) for ys in runs]
    marginal = [(fastest[i + 1] - fastest[i]) / (sizes[i + 1] - sizes[i]) for i in range(len(sizes) - 1)]
    fit = f"fit {b * 1000:.2f} ms per component on {a:.2f} s of start-up"
    if rise <= noise:
        name = (f"flat: what the components add from {min(sizes)} to {max(sizes)} ({rise:.2f} s) is within the "
                f"noise ({noise:.2f} s); {fit}")
    elif marginal[0] > 0 and marginal[-1] > 2 * marginal[0]:
        name = f"super-linear: the last step costs {marginal[-1] / marginal[0]:.1f}x per component what the first does; {fit}"
    elif marginal[0] > 0 and 0 < marginal[-1] < marginal[0] / 2:
        name = f"sub-linear: the last step costs {marginal[-1] / marginal[0]:.2f}x per component what the first does; {fit}"
    else:
        name = f"linear: {fit} ({rise:.2f} s more at {max(sizes)} than at {min(sizes)}, noise {noise:.2f} s)"
    return {"growth": name, "per_component_ms": b * 1000, "startup_s": a, "rise_s": rise, "noise_s": noise,
            "marginal_s_per_component": marginal}
