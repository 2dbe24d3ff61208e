#!/bin/bash
# Device: wait for job.sh (started by start.sh) until it is done or WAIT_S (default 540) passed, printing
# progress, then put what it has so far under $OUT: results.jsonl (one line per finished run), job.log,
# tails.txt (the last lines of each run's log, its command and ccache stats), logs.tar.gz (all of it).
#   WAIT_S=540 bash .devcarry/gcache/poll.sh
set -u
W=/tmp/h200cache
mkdir -p "$OUT"
[ -d "$W" ] || { echo "no $W: run start.sh first (the machine was given back?)"; exit 3; }
t0=$(date +%s); last=0
while [ ! -e "$W/done" ] && [ $(( $(date +%s) - t0 )) -lt "${WAIT_S:-540}" ] && kill -0 "$(cat "$W/job.pid")" 2>/dev/null; do
  sleep 10
  if [ $(( $(date +%s) - last )) -ge 60 ]; then
    last=$(date +%s)
    cur=$(ls -t "$W"/*.log 2>/dev/null | grep -v job.log | head -1)
    echo "$(date -u +%T) $(tail -n 1 "$W/job.log" | cut -c1-120) | $(basename "${cur:-none}"): $(tail -n 1 "${cur:-/dev/null}" 2>/dev/null | cut -c1-140) | load $(cut -d' ' -f1 /proc/loadavg)"
  fi
done
[ -e "$W/done" ] && echo "job done" || echo "job not done (or not running: $(kill -0 "$(cat "$W/job.pid")" 2>/dev/null && echo running || echo NOT running))"
cp "$W/results.jsonl" "$OUT/" 2>/dev/null; cp "$W/job.log" "$OUT/"
{
  for f in $(ls -tr "$W"/*.cmd 2>/dev/null); do
    n=$(basename "$f" .cmd)
    echo "=== $n: command"; cat "$f"
    echo "=== $n: log, last 40 lines"; tail -n 40 "$W/$n.log" 2>/dev/null
    [ -f "$W/$n.ccache-stats.tsv" ] && { echo "=== $n: ccache --print-stats (zeroed before the run)"; cat "$W/$n.ccache-stats.tsv"; }
  done
} > "$OUT/tails.txt"
(cd "$W" && tar czf "$OUT/logs.tar.gz" --exclude='src-*' --exclude='out-*' --exclude='ccache' --exclude='sccache' \
  --exclude='tools' --exclude='notools' -- *.log *.cmd *.tsv trees.jsonl 2>/dev/null)
python3 - "$W/results.jsonl" <<'PY'
import json, sys
try:
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except FileNotFoundError:
    lines = []
for r in lines:
    if "run" not in r:
        print(r); continue
    s = r.get("ccache_print_stats") or {}
    hits = s.get("direct_cache_hit", 0) + s.get("preprocessed_cache_hit", 0)
    print(f"{r['run']}: tree {r['tree']} rc {r['rc']} {r['seconds']} s, wheel {r['wheel']}, ccache hits {hits} misses {s.get('cache_miss')}"
          + (f", sccache {json.dumps(r['sccache_stats'].get('stats', {}).get('cache_hits'))[:120]}" if "sccache_stats" in r else ""))
PY
ls -la "$OUT"
