#!/usr/bin/env bash
# The test environment that sets itself up (issue 2, part 2).
#
#   scripts/testenv.sh run -- CMD...   set up, run CMD with the variables below, stop what was started
#   scripts/testenv.sh up-demo         engine + demo base + the persistent demo registry on 127.0.0.1:5000
#                                      and the demo compiler cache server (redis) on 127.0.0.1:6390
#   scripts/testenv.sh down-demo       stop what up-demo started
#   scripts/testenv.sh status          what is there (nothing is changed)
#
# `run` works on a fresh Debian 12 machine with nothing installed and no engine running, and equally
# when run twice in a row or with an engine already up:
#   1. apt: docker.io, docker-registry, debootstrap, apache2-utils, redis-server when missing (cached .debs
#      reused);
#   2. pip install -e '.[dev]' (skipped when this checkout is installed and pyproject.toml is unchanged);
#   3. dockerd, only when no engine answers, and then it is stopped again at the end; an engine this
#      script did not start is never stopped, restarted or reconfigured;
#   4. the demo base image (scripts/make-demo-base.sh; reused when its tag exists);
#   5. a registry on 127.0.0.1:<free port> with its storage in a temporary folder, removed at the end;
#   6. a compiler cache server (redis-server, nothing kept on disk) on 127.0.0.1:<free port>, stopped at the end;
# then CMD runs with BUILDCTL_TEST_REGISTRY, BUILDCTL_TEST_CACHE_SERVER (redis://127.0.0.1:PORT),
# BUILDCTL_TEST_BASE and BUILDCTL_REQUIRE_ENGINE=1 (engine
# tests fail instead of skipping). Its exit status is the script's; pytest's 5 (no tests collected)
# stays a failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
PYTHON=${PYTHON:-python3}
BASE_TAG=buildctl-demo-base:bookworm
CACHE=${BUILDCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buildctl}
DEMO_STATE=$CACHE/demo-env
DEMO_REGISTRY=127.0.0.1:5000
DEMO_BASE_REF=$DEMO_REGISTRY/buildctl/demo-base:bookworm
DEMO_CACHE_SERVER=127.0.0.1:6390  # compile_cache = "redis://127.0.0.1:6390" (make bench, make demo)
DEFAULT_SOCKET=unix:///var/run/docker.sock

say() { printf 'testenv: %s\n' "$*" >&2; }
die() { printf 'testenv: error: %s\n' "$*" >&2; exit 1; }

# detached CMD...: exec CMD (meant to run in the background) without the descriptors this script inherited
# beyond 0-2. A daemon started under `flock LOCK make demo-up` would otherwise hold LOCK open, and so the lock
# itself, for as long as it runs (a demo registry kept everybody's `flock` waiting).
detached() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    [[ $fd =~ ^[0-9]+$ && $fd -gt 2 ]] && eval "exec $fd>&-"
  done
  exec "$@"
}

as_root() {
  if [[ $EUID -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root for: $* (run as root or install sudo)"
  fi
}

# -- 1. packages

# package:command pairs; a package counts as present when its command is.
PACKAGES=(docker.io:dockerd docker-registry:docker-registry debootstrap:debootstrap apache2-utils:htpasswd
          redis-server:redis-server qemu-user-static:qemu-aarch64-static)

ensure_packages() {
  local missing=() pc
  for pc in "${PACKAGES[@]}"; do
    command -v "${pc#*:}" >/dev/null 2>&1 || [[ -x /usr/sbin/${pc#*:} ]] || missing+=("${pc%%:*}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  # With recommends, as measured in docs/reference/engine-facts.md (cgroupfs-mount, pigz, xz-utils come with docker.io).
  say "installing ${missing[*]} (apt; cached .debs in /var/cache/apt/archives are reused)"
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0)
  # Package lists are needed only when there are none, or when they are too old to install from.
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    as_root "${apt[@]}" update >/dev/null
  fi
  if ! as_root "${apt[@]}" install "${missing[@]}" >/tmp/buildctl-apt.log 2>&1; then
    say "apt-get install failed with the current package lists; updating them and retrying"
    as_root "${apt[@]}" update >/dev/null
    as_root "${apt[@]}" install "${missing[@]}" >/tmp/buildctl-apt.log 2>&1 \
      || { tail -20 /tmp/buildctl-apt.log >&2; die "apt-get install ${missing[*]} failed (log: /tmp/buildctl-apt.log)"; }
  fi
}

# -- 2. python packages

ensure_python() {
  mkdir -p .testenv
  local stamp=.testenv/pip.stamp want
  want="$(sha256sum pyproject.toml | cut -c1-64) $($PYTHON -c 'import sys; print(sys.executable)') $root"
  # -I: without the checkout on sys.path, which would find its own buildctl.egg-info instead
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]] && $PYTHON -I - "$root" <<'EOF' 2>/dev/null
import importlib.metadata as md, json, sys, pathlib
d = md.distribution("buildctl")
url = json.loads(d.read_text("direct_url.json") or "{}").get("url", "")
sys.exit(0 if url == pathlib.Path(sys.argv[1]).as_uri() else 1)
EOF
  then
    say "python: buildctl is installed from this checkout (pip skipped; pyproject.toml unchanged)"
    return 0
  fi
  say "pip install -e '.[dev]' (log: .testenv/pip.log)"
  if ! $PYTHON -m pip install -q --disable-pip-version-check -e '.[dev]' >.testenv/pip.log 2>&1; then
    tail -20 .testenv/pip.log >&2
    die "pip install -e '.[dev]' failed (the host's pip configuration applies: index, CA, proxy)"
  fi
  echo "$want" >"$stamp"
}

# -- 3. engine

engine_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

STARTED_DOCKERD=""

# ensure_engine LOGFILE PIDFILE: start dockerd only when nothing answers; sets STARTED_DOCKERD.
ensure_engine() {
  local log=$1 pidfile=${2:-}
  if engine_answers; then
    say "engine: already running at ${DOCKER_HOST:-$DEFAULT_SOCKET} (left as it is)"
    return 0
  fi
  if [[ -n ${DOCKER_HOST:-} && ${DOCKER_HOST} != "$DEFAULT_SOCKET" ]]; then
    die "no engine answers at DOCKER_HOST=$DOCKER_HOST; start it, or unset DOCKER_HOST to let testenv start a local one"
  fi
  # A dockerd that is still starting (or wedged) owns /var/run/docker.pid: wait for it, never start a second.
  local other
  other=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [[ -n $other && -d /proc/$other ]] && grep -q dockerd "/proc/$other/comm" 2>/dev/null; then
    say "engine: dockerd (pid $other) is running but not answering yet; waiting up to 30 s"
    for _ in $(seq 60); do engine_answers && return 0; sleep 0.5; done
    die "dockerd (pid $other) does not answer on $DEFAULT_SOCKET; testenv does not touch an engine it did not start"
  fi
  say "engine: none answers; starting dockerd (log: $log)"
  mkdir -p "$(dirname "$log")"
  # setsid: a Ctrl-C in the terminal reaches this script, whose trap stops dockerd in order. (Not
  # through as_root: a function in the background is a subshell, and $! would be its pid.)
  if [[ $EUID -eq 0 ]]; then
    (detached setsid dockerd) >"$log" 2>&1 </dev/null &
  else
    (detached sudo setsid dockerd) >"$log" 2>&1 </dev/null &
  fi
  STARTED_DOCKERD=$!
  [[ -n $pidfile ]] && echo "$STARTED_DOCKERD" >"$pidfile"
  for _ in $(seq 120); do
    engine_answers && { say "engine: dockerd (pid $STARTED_DOCKERD) is up"; return 0; }
    kill -0 "$STARTED_DOCKERD" 2>/dev/null || break
    sleep 0.5
  done
  tail -20 "$log" >&2
  STARTED_DOCKERD=""
  die "dockerd did not come up (log: $log)"
}

stop_pid() {  # stop_pid PID NAME: TERM, wait up to 30 s, then KILL
  local pid=$1 name=$2
  kill -0 "$pid" 2>/dev/null || return 0
  say "stopping $name (pid $pid)"
  as_root kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  say "$name (pid $pid) did not stop in 30 s; killing it"
  as_root kill -KILL "$pid" 2>/dev/null || true
}

# -- 4. base image

ensure_base() {
  bash scripts/make-demo-base.sh "$BASE_TAG" | sed 's/^/testenv: /' >&2
}

# -- 5. registry

free_port() { $PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

registry_answers() {  # registry_answers HOST:PORT
  $PYTHON - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(f"http://{sys.argv[1]}/v2/", timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
EOF
}

REGISTRY_PID=""

# start_registry ADDR STORAGE DIR: a registry from a ten-line config (the packaged one listens on every
# interface and turns on htpasswd auth); sets REGISTRY_PID.
start_registry() {
  local addr=$1 storage=$2 dir=$3
  mkdir -p "$storage" "$dir"
  cat >"$dir/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $storage
  delete:
    enabled: true
http:
  addr: $addr
  secret: buildctl-test-only
EOF
  (detached ${SETSID:-} docker-registry serve "$dir/registry.yml") >"$dir/registry.log" 2>&1 </dev/null &
  REGISTRY_PID=$!
  for _ in $(seq 100); do
    registry_answers "$addr" && return 0
    kill -0 "$REGISTRY_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -5 "$dir/registry.log" >&2
  REGISTRY_PID=""
  return 1
}

# -- 6. compiler cache server

cache_server_answers() {  # cache_server_answers HOST:PORT: a redis server answers PING
  $PYTHON - "$1" <<'EOF' 2>/dev/null
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=2) as s:
    s.sendall(b"PING\r\n")
    sys.exit(0 if s.recv(64).startswith(b"+PONG") else 1)
EOF
}

CACHE_SERVER_PID=""

# start_cache_server ADDR DIR [SAVE]: redis-server on ADDR only (protected mode, a memory bound with LRU eviction,
# as ccache's remote storage expects), its log in DIR; SAVE "yes" keeps a snapshot in DIR (the demo's, which
# outlives a restart), else nothing touches the disk. Sets CACHE_SERVER_PID.
start_cache_server() {
  local addr=$1 dir=$2 save=()
  mkdir -p "$dir"
  if [[ ${3:-} == yes ]]; then save=(--save "300 1"); else save=(--save ""); fi
  (detached ${SETSID:-} redis-server --bind "${addr%:*}" --port "${addr##*:}" --protected-mode yes \
    --daemonize no --appendonly no "${save[@]}" --dir "$dir" --maxmemory 1gb --maxmemory-policy allkeys-lru \
    --logfile "$dir/cache-server.log") >/dev/null 2>&1 </dev/null &
  CACHE_SERVER_PID=$!
  for _ in $(seq 100); do
    cache_server_answers "$addr" && return 0
    kill -0 "$CACHE_SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -5 "$dir/cache-server.log" >&2 2>/dev/null || true
  CACHE_SERVER_PID=""
  return 1
}

# -- commands

cmd_run() {
  [[ ${1:-} == "--" ]] && shift
  [[ $# -gt 0 ]] || die "usage: testenv.sh run -- CMD..."
  local tmp
  tmp=$(mktemp -d /tmp/buildctl-testenv.XXXXXX)
  # shellcheck disable=SC2064
  trap "cleanup_run '$tmp'" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  ensure_packages
  ensure_python
  ensure_engine "$CACHE/testenv/dockerd.log"
  ensure_base
  local addr="" tries
  for tries in 1 2 3; do
    addr=127.0.0.1:$(free_port)
    start_registry "$addr" "$tmp/storage" "$tmp" && break
    say "registry did not start on $addr (attempt $tries)"
    addr=""
  done
  [[ -n $addr ]] || die "could not start docker-registry on 127.0.0.1 (log: $tmp/registry.log)"
  say "registry: $addr (pid $REGISTRY_PID, storage in $tmp/storage)"
  RUN_REGISTRY=$addr
  local server=""
  for tries in 1 2 3; do
    server=127.0.0.1:$(free_port)
    start_cache_server "$server" "$tmp/cache-server" && break
    say "compiler cache server did not start on $server (attempt $tries)"
    server=""
  done
  [[ -n $server ]] || die "could not start redis-server on 127.0.0.1 (log: $tmp/cache-server/cache-server.log)"
  say "compiler cache server: redis://$server (pid $CACHE_SERVER_PID)"

  export BUILDCTL_TEST_REGISTRY=$addr BUILDCTL_TEST_BASE=$BASE_TAG BUILDCTL_REQUIRE_ENGINE=1
  export BUILDCTL_TEST_CACHE_SERVER=redis://$server
  say "running: $*"
  local rc=0
  "$@" || rc=$?
  if [[ $rc -eq 5 ]]; then
    say "the command collected no tests (pytest exit 5): that is a failure"
  fi
  say "exit status $rc"
  return "$rc"
}

# The engine's names for images of the run's registry (tags, and digest references without a tag), which
# nothing can pull again once the registry is gone: the tests remove what they make, but the demo base tag they
# all share stays until here (tests/engine/conftest.py's registry_base).
remove_registry_refs() {
  local addr=$1 refs
  engine_answers || return 0
  refs=$(docker images --no-trunc --format '{{.Repository}} {{.Tag}} {{.Digest}}' 2>/dev/null \
    | awk -v p="$addr/" 'index($1, p) == 1 { if ($2 != "<none>") print $1 ":" $2; else if ($3 != "<none>") print $1 "@" $3 }')
  [[ -n $refs ]] || return 0
  # shellcheck disable=SC2086
  docker rmi $refs >/dev/null 2>&1 || say "could not remove every image name of $addr (docker rmi)"
}

RUN_REGISTRY=""

cleanup_run() {
  local tmp=$1
  trap - EXIT INT TERM
  [[ -n $RUN_REGISTRY ]] && remove_registry_refs "$RUN_REGISTRY"
  [[ -n $REGISTRY_PID ]] && stop_pid "$REGISTRY_PID" registry
  [[ -n $CACHE_SERVER_PID ]] && stop_pid "$CACHE_SERVER_PID" "compiler cache server"
  [[ -n $STARTED_DOCKERD ]] && stop_pid "$STARTED_DOCKERD" "dockerd (started by testenv)"
  rm -rf "$tmp"
}

cmd_up_demo() {
  mkdir -p "$DEMO_STATE"
  ensure_packages
  ensure_python
  if [[ -f $DEMO_STATE/dockerd.pid ]] && ! kill -0 "$(cat "$DEMO_STATE/dockerd.pid")" 2>/dev/null; then
    rm -f "$DEMO_STATE/dockerd.pid"
  fi
  ensure_engine "$DEMO_STATE/dockerd.log" "$DEMO_STATE/dockerd.pid"
  ensure_base
  if registry_answers "$DEMO_REGISTRY"; then
    say "demo registry: $DEMO_REGISTRY already answers (left as it is)"
  else
    SETSID=setsid start_registry "$DEMO_REGISTRY" "$CACHE/registry" "$DEMO_STATE" \
      || die "could not start the demo registry on $DEMO_REGISTRY (log: $DEMO_STATE/registry.log; is the port taken?)"
    echo "$REGISTRY_PID" >"$DEMO_STATE/registry.pid"
    say "demo registry: $DEMO_REGISTRY (pid $REGISTRY_PID, storage in $CACHE/registry)"
  fi
  if cache_server_answers "$DEMO_CACHE_SERVER"; then
    say "demo compiler cache server: redis://$DEMO_CACHE_SERVER already answers (left as it is)"
  else
    SETSID=setsid start_cache_server "$DEMO_CACHE_SERVER" "$CACHE/cache-server" yes \
      || die "could not start the demo compiler cache server on $DEMO_CACHE_SERVER (log: $CACHE/cache-server/cache-server.log; is the port taken?)"
    echo "$CACHE_SERVER_PID" >"$DEMO_STATE/cache-server.pid"
    say "demo compiler cache server: redis://$DEMO_CACHE_SERVER (pid $CACHE_SERVER_PID, snapshot in $CACHE/cache-server)"
  fi
  docker tag "$BASE_TAG" "$DEMO_BASE_REF"
  docker push -q "$DEMO_BASE_REF" >/dev/null || die "docker push $DEMO_BASE_REF failed"
  say "demo base pushed: $(docker inspect --format '{{index .RepoDigests 0}}' "$DEMO_BASE_REF")"
}

cmd_down_demo() {
  local f pid name
  for f in registry cache-server dockerd; do
    [[ -f $DEMO_STATE/$f.pid ]] || continue
    pid=$(cat "$DEMO_STATE/$f.pid")
    name=$f; [[ $f == registry ]] && name=docker-registry; [[ $f == cache-server ]] && name=redis-server
    # Only a process that is still the one up-demo started (same program) is stopped.
    if [[ -d /proc/$pid ]] && grep -qx "$name" "/proc/$pid/comm" 2>/dev/null; then
      stop_pid "$pid" "demo $f"
    fi
    rm -f "$DEMO_STATE/$f.pid"
  done
  say "demo environment down (registry storage kept in $CACHE/registry, the compiler cache's in $CACHE/cache-server)"
}

cmd_status() {
  engine_answers && say "engine: answers at ${DOCKER_HOST:-$DEFAULT_SOCKET}" || say "engine: none answers"
  docker image inspect "$BASE_TAG" >/dev/null 2>&1 && say "base: $BASE_TAG present" || say "base: $BASE_TAG missing"
  registry_answers "$DEMO_REGISTRY" && say "demo registry: $DEMO_REGISTRY answers" || say "demo registry: down"
  cache_server_answers "$DEMO_CACHE_SERVER" && say "demo compiler cache server: redis://$DEMO_CACHE_SERVER answers" \
    || say "demo compiler cache server: down"
}

case ${1:-} in
  run) shift; cmd_run "$@" ;;
  up-demo) cmd_up_demo ;;
  down-demo) cmd_down_demo ;;
  status) cmd_status ;;
  *) echo "usage: $0 run -- CMD... | up-demo | down-demo | status" >&2; exit 2 ;;
esac
