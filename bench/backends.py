"""The two build backends side by side in one run: a cold demo build and a no-op, classic against buildkit.

    BUILDCTL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PYTHONPATH=. python3 bench/backends.py [--reps N]

Needs what `make demo-up` leaves (the engine, the registry with the demo base). One project (pins/demo.yaml,
locked once with `buildctl lock`), then per repetition and backend (the order alternates, so that neither
always goes first): a **cold** build, every node missing (a repository of its own, an empty cache root but for
the host's downloads, shared) and the engine's step cache off for both backends (``nocache``, as `buildctl
repro` builds), timed in this process; then **warm**: every node missing again (another repository and cache
root) with the step cache on, as after a change of registry or repository; then the **no-op** `buildctl build demo --local --backend B`, the
command a user runs (Python start-up included), twice: the first goes the full way (the plan asks the engine)
and leaves the no-op memo, the second answers from it (services/noop.py). Prints one Markdown table (median,
min-max), the machine's load before and after, and writes the figures as JSON with ``--json FILE``. Every
image it made is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import Quiet  # noqa: E402
from buildctl.builder import pipeline  # noqa: E402
from buildctl.config import load_config  # noqa: E402
from buildctl.errors import BuildctlError  # noqa: E402
from buildctl.services import build, target, wiring  # noqa: E402
from buildctl.sources.sources import Sources  # noqa: E402

BACKENDS = ("classic", "buildkit")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def project(work: Path, registry: str, repository: str) -> Path:
    root = work / repository.replace("/", "-")
    (root / "pins").mkdir(parents=True)
    (root / "images").symlink_to(ROOT / "images")
    (root / "demo").symlink_to(ROOT / "demo")
    text = (ROOT / "pins" / "demo.yaml").read_text().replace("127.0.0.1:5000", registry)
    (root / "pins" / "demo.yaml").write_text(re.sub(r"(?m)^  repository: .*$", f"  repository: {repository}", text))
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--registry", default="127.0.0.1:5000", help="the registry with buildctl/demo-base:bookworm")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="buildctl-backends-"))
    tag = uuid.uuid4().hex[:8]
    env = {**os.environ, "BUILDCTL_CONFIG": str(work / "no-config.toml"), "PYTHONPATH": str(ROOT)}
    for var in ("BUILDCTL_BACKEND", "BUILDCTL_BUILDERS", "BUILDCTL_REGISTRY"):
        env.pop(var, None)
    shared = work / "shared-downloads"
    shared.mkdir()
    made: list[str] = []
    figures: dict[str, dict[str, list[float]]] = {
        b: {"cold": [], "warm": [], "noop_full": [], "noop_memo": []} for b in BACKENDS}
    counts: dict[str, list[int]] = {b: [] for b in BACKENDS}
    before = load()
    started = time.monotonic()
    cleaner = wiring.engine(load_config(env))
    try:
        lock_root = project(work, args.registry, f"bench-backends-{tag}/lock")
        done = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(lock_root), "-q", "lock", "demo"],
                              env={**env, "BUILDCTL_CACHE": str(work / "lock-cache")}, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise SystemExit(f"buildctl lock demo failed:\n{done.stdout}{done.stderr}")
        lock = (lock_root / "pins" / "demo.lock.json").read_text()
        for rep in range(args.reps):
            for backend in (BACKENDS if rep % 2 == 0 else BACKENDS[::-1]):
                repository = f"bench-backends-{tag}/{backend}-{rep}"
                root = project(work, args.registry, repository)
                (root / "pins" / "demo.lock.json").write_text(lock)
                cache = work / f"cache-{backend}-{rep}"
                cache.mkdir()
                (cache / "downloads").symlink_to(shared)
                run_env = {**env, "BUILDCTL_CACHE": str(cache)}
                config = load_config(run_env)
                t = target.load(root, config, "demo", None, local_only=True, skip_smoke=True)
                made += [t.refs[n.name] for n in t.graph.nodes if n.kind != "base"]
                engine = wiring.engine(config, backend=backend)
                try:
                    t0 = time.monotonic()
                    report = build.build_target(t, engines=[engine], config=config, progress=Quiet(), project=root,
                                                sources=Sources.from_config(config, base_dir=root / "pins"),
                                                options=pipeline.BuildOptions(jobs=2, skip_smoke=True, nocache=True))
                    figures[backend]["cold"].append(time.monotonic() - t0)
                    # every node missing again (another repository, an empty cache root), the step cache on
                    warm_root = project(work, args.registry, repository + "-warm")
                    (warm_root / "pins" / "demo.lock.json").write_text(lock)
                    warm_cache = work / f"cache-{backend}-{rep}-warm"
                    warm_cache.mkdir()
                    (warm_cache / "downloads").symlink_to(shared)
                    warm_config = load_config({**env, "BUILDCTL_CACHE": str(warm_cache)})
                    tw = target.load(warm_root, warm_config, "demo", None, local_only=True, skip_smoke=True)
                    made += [tw.refs[n.name] for n in tw.graph.nodes if n.kind != "base"]
                    t0 = time.monotonic()
                    build.build_target(tw, engines=[engine], config=warm_config, progress=Quiet(), project=warm_root,
                                       sources=Sources.from_config(warm_config, base_dir=warm_root / "pins"),
                                       options=pipeline.BuildOptions(jobs=2, skip_smoke=True))
                    figures[backend]["warm"].append(time.monotonic() - t0)
                finally:
                    engine.close()
                counts[backend].append(len(report.built))
                for key in ("noop_full", "noop_memo"):
                    t0 = time.monotonic()
                    done = subprocess.run([sys.executable, "-m", "buildctl", "--project", str(root), "-q", "build",
                                           "demo", "--local", "--skip-smoke", "--backend", backend],
                                          env=run_env, capture_output=True, text=True, check=False)
                    figures[backend][key].append(time.monotonic() - t0)
                    if done.returncode != 0 or "built 0 node(s)" not in done.stdout:
                        raise SystemExit(f"the no-op build ({backend}) did not build nothing:\n{done.stdout}{done.stderr}")
                print(f"rep {rep} {backend}: cold {figures[backend]['cold'][-1]:.1f} s ({len(report.built)} nodes), "
                      f"warm {figures[backend]['warm'][-1]:.1f} s, "
                      f"no-op {figures[backend]['noop_full'][-1]:.2f} s / memo {figures[backend]['noop_memo'][-1]:.2f} s",
                      flush=True)
    finally:
        for ref in reversed(made):
            try:
                if cleaner.image_exists(ref):
                    cleaner.remove_image(ref)
            except BuildctlError as exc:
                print(f"could not remove {ref}: {exc}", file=sys.stderr)
        cleaner.close()
        shutil.rmtree(work, ignore_errors=True)
    after = load()

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"

    print(f"\n{args.reps} repetition(s), {time.monotonic() - started:.0f} s, load average {before} before, {after} after\n")
    print("| | classic | buildkit | classic / buildkit |")
    print("|---|---|---|---|")
    for key, what in (("cold", f"cold demo build ({counts['classic'][0]} nodes, no step cache)"),
                      ("warm", "every node missing again, the engine's step cache on"),
                      ("noop_full", "no-op `buildctl build` (the plan asks the engine)"),
                      ("noop_memo", "no-op `buildctl build` (from the memo)")):
        c, b = figures["classic"][key], figures["buildkit"][key]
        print(f"| {what} | {cell(c)} | {cell(b)} | {statistics.median(c) / statistics.median(b):.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"reps": args.reps, "load_before": before, "load_after": after,
                                         "figures": figures, "built": counts}, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
