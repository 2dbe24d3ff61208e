#!/bin/bash
# Device call 1 (nvidia-h200), carry [".devcarry/gcache"] (prepare_cache.py's DEST with this folder's scripts,
# the wheels and sccache.xz: README.md here): start job.sh under setsid (it outlives the call while the
# machine stays held), then poll.sh until WAIT_S. Later calls run poll.sh alone, back to back.
#   bash .devcarry/gcache/start.sh      (from the repository root on the device)
set -u
C=$(cd "$(dirname "$0")" && pwd)
W=/tmp/h200cache
if [ -e "$W/started" ]; then echo "job already started at $(cat "$W/started"): polling"; exec bash "$C/poll.sh"; fi
rm -rf "$W" /opt/h200cache; mkdir -p "$W"
date -u +%FT%TZ > "$W/started"
setsid bash "$C/job.sh" "$C" < /dev/null > "$W/job.log" 2>&1 &
echo $! > "$W/job.pid"
exec bash "$C/poll.sh"
