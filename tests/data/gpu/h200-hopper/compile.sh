#!/bin/bash
# Device call 1 (nvidia-h200): run buildctl's rendered compile scripts for the deepseek-v3-gb200 hopper
# wheel nodes, outside a container but as the node runs them: the compile-env node's pip install of the
# component's build requirements first (the rendered compile-env Dockerfile's command, the carried
# wheels as its wheelhouse), then wheel-<component>.sh with BUILDCTL_JOBS as buildctl computes it, each
# compile in its own mount namespace where /src (read-only), /out, /ccache and a private /tmp are what the
# node's container mounts. Both compiles start with setsid and outlive this call; progress in /tmp/b17.
# Run as: bash tests/data/gpu/h200-hopper/compile.sh   (from the repository root on the device; the carried
# .devcarry/c1 from prepare.py). Exit status: 0 both compiled, 1 one failed, 2 one still running.
set -u
export PYTHONUNBUFFERED=1
C=$PWD/.devcarry/c1
W=/tmp/b17
mkdir -p "$W" "$OUT"
exec > >(tee "$OUT/compile.log") 2>&1
cd "$W" || exit 1
date -u +%FT%TZ
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
nproc; free -g | head -2; uname -r
command -v python3 pip git cmake nvcc cuobjdump; python3 -V; nvcc --version | tail -2; git --version; cmake --version | head -1
echo "CUDA_HOME=${CUDA_HOME-unset} PIP_CONSTRAINT=${PIP_CONSTRAINT-unset}"
python3 -m pip list --format=json > "$W/pip-before.json"
python3 -m pip check > "$W/pip-check-before.txt" 2>&1; echo "pip check before: $(wc -l < "$W/pip-check-before.txt") line(s)"
python3 -m pip list 2>/dev/null | grep -iE "^(torch|nvidia-nvshmem|nvidia-cudnn|nvidia-ml-py|pydantic|einops|onnx|packaging|typing)" 
ls -d /usr/local/cuda/include/cccl/cuda/std 2>&1 | head -1
for c in transformer-engine deepep-hybridep; do [ -f "$W/$c.log" ] && { echo "== previous $c log"; tail -n 15 "$W/$c.log"; }; done
# In the base image `pip` is python3's own; here `pip` on PATH may belong to another interpreter.
if [ "$(pip -V 2>/dev/null | awk '{print $4}')" != "$(python3 -m pip -V | awk '{print $4}')" ]; then
  P=/opt/buildctl-pip/bin; mkdir -p "$P"; printf '#!/bin/sh\nexec python3 -m pip "$@"\n' > "$P/pip"; chmod +x "$P/pip"
  echo "pip on PATH is $(pip -V 2>&1), not python3's ($(python3 -m pip -V)): $P/pip (python3 -m pip) first on PATH"
  export PATH="$P:$PATH"
fi
echo "== compile-env: build requirements (transformer-engine)"
# the rendered compile-env-transformer-engine.Dockerfile's pip line, wheelhouse = the carried wheels
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= python3 -m pip install --no-index --find-links "$C/whl" --only-binary=:all: \
  --no-deps --no-cache-dir --no-compile -r "$C/requirements-transformer-engine.txt" || exit 1
echo "== sources (buildctl's exported prepared trees)"
for c in transformer-engine deepep-hybridep; do
  rm -rf "$W/src-$c" "$W/out-$c"; mkdir -p "$W/src-$c" "$W/out-$c"
  tar xzf "$C/$c.tar.gz" -C "$W/src-$c" || exit 1
  (cd "$W/src-$c" && echo "$c: $(cat .git/HEAD) ($(git rev-parse --short HEAD 2>&1))")
done
mkdir -p "$W/ccache"
rm -rf /src /out /ccache /buildctl; mkdir -p /src /out /ccache /buildctl; touch /buildctl/wheel.sh
for c in transformer-engine deepep-hybridep; do cp "$C/wheel-$c.sh" "$W/wheel-$c.sh"; done
# a private mount namespace per compile, as the node's container: /src read-only, /out, /ccache, own /tmp
if unshare -m /bin/sh -c "mount --bind '$W/src-deepep-hybridep' /src && mount -o remount,bind,ro /src && mount -t tmpfs tmpfs /tmp" 2>"$W/unshare.err"; then
  NS=1; echo "mount namespaces: yes (both compiles at once)"
else
  NS=0; echo "mount namespaces refused ($(head -c 200 "$W/unshare.err")): the compiles run one after the other, /src /out /ccache as links"
fi
cat > "$W/compile-one.sh" <<EOS
#!/bin/bash
c=\$1; j=\$2; t0=\$(date +%s)
if [ "$NS" = 1 ]; then
  unshare -m /bin/sh -c "set -e; mount --bind '$W/src-\$c' /src; mount -o remount,bind,ro /src; mount --bind '$W/out-\$c' /out; mount --bind '$W/ccache' /ccache; mount --bind '$W/wheel-\$c.sh' /buildctl/wheel.sh; mount -t tmpfs tmpfs /tmp; exec env BUILDCTL_JOBS=\$j /bin/sh /buildctl/wheel.sh" > "$W/\$c.log" 2>&1
else
  rm -rf /src /out /ccache; ln -s "$W/src-\$c" /src; ln -s "$W/out-\$c" /out; ln -s "$W/ccache" /ccache
  cp "$W/wheel-\$c.sh" /buildctl/wheel.sh; env BUILDCTL_JOBS=\$j /bin/sh /buildctl/wheel.sh > "$W/\$c.log" 2>&1
fi
echo "\$? \$(( \$(date +%s) - t0 ))" > "$W/\$c.rc"
EOS
rm -f "$W"/*.rc
echo "== compile (jobs: $(cat "$C/jobs.txt"))"
if [ "$NS" = 1 ]; then
  for line in $(cat "$C/jobs.txt"); do
    setsid bash "$W/compile-one.sh" "${line%%=*}" "${line#*=}" < /dev/null > /dev/null 2>&1 &
  done
else
  setsid bash -c "for line in \$(cat '$C/jobs.txt'); do bash '$W/compile-one.sh' \${line%%=*} \${line#*=}; done" < /dev/null > /dev/null 2>&1 &
fi
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "${WAIT_S:-540}" ]; do
  sleep 20
  done_n=$(ls "$W"/*.rc 2>/dev/null | wc -l)
  echo "$(( $(date +%s) - t0 )) s: $done_n of 2 done; $(for c in transformer-engine deepep-hybridep; do echo -n "$c: $(tail -c 150 "$W/$c.log" 2>/dev/null | tr '\n' ' ' | tail -c 110) | "; done)"
  [ "$done_n" -ge 2 ] && break
done
for c in transformer-engine deepep-hybridep; do echo "$c rc/seconds: $(cat "$W/$c.rc" 2>/dev/null || echo running)"; ls -la "$W/out-$c"; done
cp "$W/pip-before.json" "$W/pip-check-before.txt" "$OUT/" 2>/dev/null
# Exit status: 0 when both compiles finished with status 0, 1 when one failed, 2 when one is still running
# (the WAIT_S window ended first; it runs on under setsid and train.sh waits for it).
status=0
for c in transformer-engine deepep-hybridep; do
  if [ ! -f "$W/$c.rc" ]; then
    [ "$status" = 1 ] || status=2
  elif [ "$(cut -d' ' -f1 "$W/$c.rc")" != 0 ]; then
    status=1; echo "== $c log (failed)"; tail -n 40 "$W/$c.log"
  fi
done
echo "compile.sh exit status $status"
exit "$status"
