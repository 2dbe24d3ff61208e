#!/usr/bin/env python3
"""pip, images/install.py (before and with pypa/installer) and uv installing locked wheels, side by side
(docs/benchmarks/installers.md: why installer, not uv).

In containers of the demo base (python 3.11 of Debian 12), from a loopback wheelhouse as a build serves it,
each way installs one set of hashed wheels into the image's scheme, as the python node's install RUN does
(`--no-deps`, no index, hashes required, no bytecode), then settles mtimes where the RUN would:

- pip:           the RUN's pip route (images/install.py declined): `python3 -m pip install ...`, then the
                 settle scan (images/_settle.sh.in: `find / -xdev -newer STAMP -exec touch ...`);
- install.py:    images/install.py as at --before (its own unpacking and RECORD), no settle scan;
- installer:     images/install.py of this checkout (pypa/installer's wheel from the wheelhouse's tools/,
                 sha256-checked, imported from memory), no settle scan;
- uv-fetched:    uv as a classic-backend RUN could have it without leaving it in the layer: its wheel from the
                 wheelhouse, the binary unzipped to /tmp, `uv pip install --system ...`, the binary removed,
                 then the settle scan;
- uv-mounted:    uv's binary bind-mounted into the container (a BuildKit RUN's `--mount`: its best case), then
                 the settle scan.

The time is the install command's wall time measured inside the container (`date +%s%N` around it: no
container start), and its CPU time (user + system of the container's processes, the shell's `times`: the
figure a loaded machine disturbs least), each way --reps times in a fresh container, ways interleaved. Then, once per way, what it
left under /usr/local is listed (path, type, mode, mtime, content hash; RECORD without its INSTALLER row;
INSTALLER itself) and compared with pip's listing, the criteria of tests/engine/test_install_fragment_engine.py.

Wheel sets (made-up distributions written here, so nothing is fetched but the tools):
  small: --small wheels of 12 small modules, a console script and a data file each (the python node of a
         stack with many pins);
  large: one wheel of --large-files modules, about --large-mb MB of incompressible content (a large runtime
         wheel, the compiled one of a component).

Usage: python3 bench/installers.py [--reps 5] [--small 40] [--large-files 2000] [--large-mb 24] [--base IMAGE]
                                   [--before COMMIT] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import statistics
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
from buildctl.builder import compilecache, wheelhouse  # noqa: E402
from buildctl.config import load_config  # noqa: E402
from buildctl.engine.engine import Engine  # noqa: E402
from buildctl.engine.values import Mount  # noqa: E402
from buildctl.graph import render  # noqa: E402
from buildctl.graph.specs import PipPin  # noqa: E402
from buildctl.sources.index import HttpFetcher  # noqa: E402

UV_VERSION = "0.13.9"  # bench/runner.py's TOOL_WHEELS (the multi-stage file's uv column)
WAYS = ("pip", "install.py", "installer", "uv-fetched", "uv-mounted")
PIP_OPTS = "--no-index --find-links \"$URL\" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes"
UV_OPTS = "--no-index --find-links \"$URL\" --no-deps --require-hashes --no-cache"
SCRIPT = r"""
set -eu
way=$1; URL=$2; TOOL=$3; shift 3
printf '%s\n' "$@" > /tmp/r.txt
export PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONDONTWRITEBYTECODE=1
touch /tmp/.buildctl-stamp; sleep 1
t0=$(date +%s%N)
case "$way" in
  pip) python3 -m pip install -q --root-user-action=ignore PIP_OPTS -r /tmp/r.txt; SETTLE ;;
  install.py) python3 -B /inst-before.py --epoch 315532800 --find-links "$URL" -- "$@" >/dev/null ;;
  installer) python3 -B /inst.py --epoch 315532800 --installer "$TOOL" --find-links "$URL" -- "$@" >/dev/null ;;
  uv-fetched)
    python3 -c 'import io, sys, urllib.request, zipfile
z = zipfile.ZipFile(io.BytesIO(urllib.request.urlopen(sys.argv[1]).read()))
open("/tmp/uv", "wb").write(z.read("uv-UVV.data/scripts/uv"))' "${URL}tools/UVWHEEL"
    chmod 755 /tmp/uv
    /tmp/uv pip install -q --system --break-system-packages --python python3 UV_OPTS -r /tmp/r.txt
    rm -f /tmp/uv; SETTLE ;;
  uv-mounted) /uvbin/uv pip install -q --system --break-system-packages --python python3 UV_OPTS -r /tmp/r.txt; SETTLE ;;
esac
t1=$(date +%s%N)
echo "SECONDS $(( (t1 - t0) / 1000000 ))"
times > /tmp/times.txt; echo "CPU $(tail -1 /tmp/times.txt)"
if [ "${LIST:-}" = 1 ]; then
  echo "NEWER $(find /usr/local -newer /tmp/r.txt | wc -l)"
  find /usr/local ! -name INSTALLER ! -name RECORD -printf '%p %m %y %T@\n' | sort | while read -r p m y t; do
    if [ "$y" = f ]; then echo "$p $m $t $(sha256sum < "$p" | cut -c1-16)"; else echo "$p $m $y $t"; fi
  done
  for f in /usr/local/lib/python3*/dist-packages/*.dist-info/RECORD; do
    echo "RECORD $f $(grep -v '/INSTALLER,' "$f" | sha256sum | cut -c1-16)"
  done
  for f in /usr/local/lib/python3*/dist-packages/*.dist-info/INSTALLER; do echo "$(cat "$f")"; done | sort | uniq -c \
    | sed 's/^ */INSTALLER /'
  f=$(ls /usr/local/lib/python3*/dist-packages/*.dist-info/RECORD | head -1)
  echo "RECFORM $(grep -c "$(printf '\r')" "$f") of $(wc -l < "$f") lines end in CRLF"
  sed -n '1,8p' "$(ls /usr/local/bin/bench-* | head -1)" | sed 's/^/SCRIPT /'
fi
"""


def _settle() -> str:
    """images/_settle.sh.in as the RUNs render it, on one line."""
    lines = render._settle(render.load_templates(ROOT / "images"))
    return " ".join(line.rstrip(" \\").rstrip(";") + ";" for line in lines if line.strip()).rstrip(";")


def _seconds(v: str) -> float:
    """A time as the shell's `times` prints it (0m1.234s)."""
    m, _, sec = v.rstrip("s").partition("m")
    return int(m) * 60 + float(sec)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def make_wheel(folder: Path, name: str, files: dict[str, bytes], scripts: dict[str, str]) -> Path:
    info = f"{name}-1.0.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if scripts:
        files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in scripts.items())).encode()
    rows = [f"{m},{record_hash(b)},{len(b)}" for m, b in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*rows, f"{info}/RECORD,,", ""])).encode()
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, body in files.items():
            zi = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o100644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, body)
    return path


def small_set(folder: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        name = f"bench_small{i:03d}"
        files = {f"{name}/__init__.py": b"VALUE = 1\n"}
        files.update({f"{name}/mod{j}.py": (f"# module {j}\n" + "def f(x):\n    return x + 1\n" * 40).encode()
                      for j in range(12)})
        files[f"{name}-1.0.data/data/share/{name}/notes.txt"] = b"notes\n"
        out.append(make_wheel(folder, name, files, {f"bench-small{i:03d}": f"{name}.mod0:f"}))
    return out


def large_set(folder: Path, files: int, mb: int) -> list[Path]:
    rnd = random.Random(34)
    size = mb * 1024 * 1024 // files
    body = {f"bench_large/sub{i // 100}/m{i}.py": b"# " + base64.b64encode(rnd.randbytes(size))[:size] + b"\n"
            for i in range(files)}
    body.update({f"bench_large/sub{k}/__init__.py": b"" for k in range((files + 99) // 100)})
    body["bench_large/__init__.py"] = b""
    return [make_wheel(folder, "bench_large", body, {"bench-large": "bench_large:main"})]


def tool_wheels(config: Any) -> tuple[Path, Path]:
    """pypa/installer (as builds fetch it) and uv (as the bench's multi-stage file has it), verified."""
    got = compilecache.fetch_wheel(config.cache, compilecache.ToolWheel.of(render.INSTALLER),
                                   HttpFetcher.from_config(config), what="pypa/installer's wheel", fix="")
    uv = wheelhouse.download([PipPin(name="uv", version=UV_VERSION)], folder=config.cache.downloads / "pip",
                             python="3.11", platform="linux/amd64", config=config,
                             log_file=config.cache.root / "logs" / "bench-installers.log")
    return got, uv[f"uv=={UV_VERSION}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--small", type=int, default=40, help="wheels in the small set (default 40)")
    ap.add_argument("--large-files", type=int, default=2000)
    ap.add_argument("--large-mb", type=int, default=24)
    ap.add_argument("--base", default=LOCAL_BASE)
    ap.add_argument("--before", default="150e027", help="the commit whose images/install.py is the install.py row")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    config = load_config()
    engine = Engine(name=f"bench-installers-{os.getpid()}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="bench-installers-"))
    load_before = os.getloadavg()
    result: dict[str, Any] = {"base": args.base, "reps": args.reps, "before": args.before, "sets": {},
                              "installer": render.INSTALLER_WHEEL, "uv": UV_VERSION}
    try:
        installer, uv = tool_wheels(config)
        before = subprocess.run(["git", "show", f"{args.before}:images/install.py"], cwd=ROOT, check=True,
                                capture_output=True).stdout
        uvbin = work / "uvbin"
        uvbin.mkdir()
        with zipfile.ZipFile(uv) as z:
            (uvbin / "uv").write_bytes(z.read(f"uv-{UV_VERSION}.data/scripts/uv"))
        (uvbin / "uv").chmod(0o755)
        script = (SCRIPT.replace("PIP_OPTS", PIP_OPTS).replace("UV_OPTS", UV_OPTS).replace("SETTLE", _settle())
                  .replace("UVV", UV_VERSION).replace("UVWHEEL", uv.name))
        files = {"/bench.sh": script.encode(), "/inst.py": (ROOT / "images" / "install.py").read_bytes(),
                 "/inst-before.py": before}
        for set_name in ("small", "large"):
            house = work / set_name
            (house / "tools").mkdir(parents=True)
            shutil.copy(installer, house / "tools" / render.INSTALLER_WHEEL)
            shutil.copy(uv, house / "tools" / uv.name)
            wheels = small_set(house, args.small) if set_name == "small" else large_set(house, args.large_files,
                                                                                       args.large_mb)
            reqs = [f"{w.name.split('-')[0]}==1.0 --hash=sha256:{wheelhouse.sha256_file(w)}" for w in wheels]
            times: dict[str, list[float]] = {w: [] for w in WAYS}
            cpus: dict[str, list[float]] = {w: [] for w in WAYS}
            listing: dict[str, list[str]] = {}
            with wheelhouse.serve(house, port=0) as url:
                tool = f"{url}tools/{render.INSTALLER_WHEEL}#{render.INSTALLER.hashes[0].replace(':', '=')}"
                for rep in range(args.reps + 1):  # the last, untimed, lists what each way left
                    for way in WAYS:
                        res = engine.run(args.base, ["sh", "/bench.sh", way, url, tool, *reqs], files=files,
                                         network_mode="host", env={"LIST": "1"} if rep == args.reps else None,
                                         mounts=[Mount(source=uvbin, target="/uvbin")], timeout=600)
                        if not res.ok:
                            raise SystemExit(f"{set_name} {way}: {res.stdout[-2000:]}{res.stderr[-2000:]}")
                        lines = res.stdout.splitlines()
                        ms = next(int(x.split()[1]) for x in lines if x.startswith("SECONDS "))
                        cpu = sum(_seconds(v) for v in next(x for x in lines if x.startswith("CPU ")).split()[1:])
                        if rep == args.reps:
                            listing[way] = [x for x in lines if not x.startswith(("SECONDS ", "CPU "))]
                        else:
                            times[way].append(ms / 1000)
                            cpus[way].append(cpu)
                            print(f"{set_name} {way} {ms / 1000:.2f} s, CPU {cpu:.2f} s", file=sys.stderr)
            pip = listing["pip"]
            rows = {}
            for way in WAYS:
                mine = listing[way]
                extra = ("NEWER", "INSTALLER", "RECFORM", "SCRIPT")
                body = [x for x in mine if not x.startswith(extra)]
                pip_body = [x for x in pip if not x.startswith(extra)]
                rows[way] = {
                    "median_s": statistics.median(times[way]), "min_s": min(times[way]), "max_s": max(times[way]),
                    "times_s": times[way],
                    "ratio_to_pip": statistics.median(times["pip"]) / statistics.median(times[way]),
                    "cpu_median_s": statistics.median(cpus[way]), "cpu_s": cpus[way],
                    "cpu_ratio_to_pip": statistics.median(cpus["pip"]) / statistics.median(cpus[way]),
                    "lines_unlike_pip": len(set(body) ^ set(pip_body)),
                    "record_unlike_pip": len({x for x in body if x.startswith("RECORD")}
                                             ^ {x for x in pip_body if x.startswith("RECORD")}),
                    "installer_file": [x for x in mine if x.startswith("INSTALLER")],
                    "newer_than_stamp_before_settle": next((x for x in mine if x.startswith("NEWER")), ""),
                    "pyc": len([x for x in body if "__pycache__" in x or x.split()[0].endswith(".pyc")]),
                    "unlike_pip_sample": sorted(set(body) ^ set(pip_body))[:6],
                    "record_form": next((x for x in mine if x.startswith("RECFORM")), ""),
                    "first_script": [x[7:] for x in mine if x.startswith("SCRIPT ")],
                }
            result["sets"][set_name] = {"wheels": len(wheels), "bytes": sum(w.stat().st_size for w in wheels),
                                        "ways": rows}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_before"], result["load_after"] = load_before, os.getloadavg()
    result["cpus"] = os.cpu_count()
    out = args.out or ROOT / "bench" / "results" / f"installers-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for set_name, s in result["sets"].items():
        print(f"{set_name}: {s['wheels']} wheel(s), {s['bytes']:,} bytes")
        for way, r in s["ways"].items():
            print(f"  {way:11} {r['median_s']:6.2f} s ({r['min_s']:.2f}-{r['max_s']:.2f})  pip/this {r['ratio_to_pip']:.2f}x"
                  f"  CPU {r['cpu_median_s']:.2f} s, pip/this {r['cpu_ratio_to_pip']:.2f}x"
                  f"  paths unlike pip's: {r['lines_unlike_pip']}  RECORD unlike: {r['record_unlike_pip']}  "
                  f"INSTALLER: {' '.join(r['installer_file'])}")
    print(f"load {load_before[0]:.2f} before, {result['load_after'][0]:.2f} after; {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
