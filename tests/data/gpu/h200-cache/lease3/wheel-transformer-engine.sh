#!/bin/sh
# wheel: compile one component into a wheel (rendered by buildctl/graph/render.py). buildctl runs it in a
# container of the component's compile-env image with the prepared source at /src (read-only) and /out
# for the wheel; BUILDCTL_JOBS is sized by buildctl from the builder's cores and memory.
# Unless the compiler cache is off, buildctl also mounts ccache at /buildctl/tools/ccache and its local
# cache folder at /ccache (a fleet's server comes as CCACHE_REMOTE_STORAGE): every compiler, nvcc
# included, then goes through it. Nothing below depends on whether it is there, so the cache never
# changes a key; this compile's own hits and misses go to /out/.buildctl-ccache-stats.json.
set -eu
rm -rf /tmp/buildctl-src
cp -a /src/. /tmp/buildctl-src/
cd /tmp/buildctl-src
export SOURCE_DATE_EPOCH=315532800
export NVTE_BUILD_THREADS_PER_JOB=8
export NVTE_CUDA_ARCHS=90
export NVTE_FRAMEWORK=pytorch
export PIP_CONSTRAINT=''
export MAX_JOBS="${BUILDCTL_JOBS:-1}"
if [ -x /buildctl/tools/ccache ]; then
  rm -rf /tmp/buildctl-ccache
  mkdir /tmp/buildctl-ccache
  for c in cc c++ gcc g++ clang clang++ "$(uname -m)-linux-gnu-gcc" "$(uname -m)-linux-gnu-g++"; do
    if command -v "$c" >/dev/null 2>&1; then ln -s /buildctl/tools/ccache "/tmp/buildctl-ccache/$c"; fi
  done
  nvcc="${CUDA_HOME:-${CUDA_PATH:-}}"
  if [ -n "$nvcc" ]; then nvcc="$nvcc/bin/nvcc"; else nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"; fi
  if [ -x "$nvcc" ]; then PYTORCH_NVCC="/buildctl/tools/ccache $nvcc"; export PYTORCH_NVCC; fi
  # A CC/CXX the image sets to a compiler's path (torch's extension build runs $CXX as given) would pass the
  # links: it names a link of the same name instead, and the compiler's own folder comes right after the links
  # on PATH, so that ccache runs that very compiler.
  first=""
  for v in CC CXX; do
    eval "c=\${$v:-}"
    case "$c" in
      /*) if [ -f "$c" ] && [ -x "$c" ]; then
            [ -e "/tmp/buildctl-ccache/${c##*/}" ] || ln -s /buildctl/tools/ccache "/tmp/buildctl-ccache/${c##*/}"
            d="${c%/*}"
            first="${first}${d:-/}:"
            eval "$v=/tmp/buildctl-ccache/\${c##*/}"
            export "$v"
          fi ;;
    esac
  done
  PATH="/tmp/buildctl-ccache:$first$PATH"
  CMAKE_C_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CMAKE_CXX_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CMAKE_CUDA_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CCACHE_DIR=/ccache
  CCACHE_COMPILERCHECK=content
  CCACHE_STATSLOG=/tmp/buildctl-ccache.log
  export PATH CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
  export CCACHE_DIR CCACHE_COMPILERCHECK CCACHE_STATSLOG
fi
pip wheel --no-build-isolation --no-deps -w /out .
if [ -x /buildctl/tools/ccache ]; then
  /buildctl/tools/ccache --print-log-stats --format json > /out/.buildctl-ccache-stats.json \
    || rm -f /out/.buildctl-ccache-stats.json
fi
