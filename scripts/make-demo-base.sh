#!/usr/bin/env bash
# Build the demo stack's base image: Debian bookworm (minbase) with python3 and pip, imported with
# `docker import`. It stands in for an NGC PyTorch base: it describes itself in Config.Env and ships
# a pip constraint file (PIP_CONSTRAINT), as NGC images do from 25.03 on.
#
#   scripts/make-demo-base.sh [TAG]        default TAG: buildctl-demo-base:bookworm
#
# Reused when TAG exists (BUILDCTL_REBUILD_BASE=1 forces a rebuild). The debootstrap tree is cached
# as a tarball under ${BUILDCTL_CACHE:-~/.cache/buildctl}/demo-base/ so that a rebuild is fast.
set -euo pipefail
tag=${1:-buildctl-demo-base:bookworm}
docker_cmd=${DOCKER:-docker}
if [[ -z ${BUILDCTL_REBUILD_BASE:-} ]] && $docker_cmd image inspect "$tag" >/dev/null 2>&1; then
  echo "demo base $tag: present"
  exit 0
fi
cache=${BUILDCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buildctl}/demo-base
mkdir -p "$cache"
tarball=$cache/bookworm-minbase.tar
if [[ ! -s $tarball ]]; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
  root=$(mktemp -d "$cache/root.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "demo base: debootstrap bookworm (about 30 s)"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-yaml,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
    || { echo "debootstrap failed; see $cache/debootstrap.log" >&2; tail -5 "$cache/debootstrap.log" >&2; exit 1; }
  # NGC images let pip install into the system Python; Debian marks it externally managed (PEP 668).
  rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
  mkdir -p "$root/etc/pip"
  # Like NGC's /etc/pip/constraint.txt: pins what the base ships so later installs cannot replace it.
  echo "PyYAML==6.0" >"$root/etc/pip/constraint.txt"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
fi
$docker_cmd import \
  --change 'ENV DEMO_BASE_VERSION=bookworm-1' \
  --change 'ENV PYTHON_VERSION=3.11' \
  --change 'ENV PIP_CONSTRAINT=/etc/pip/constraint.txt' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'LABEL org.opencontainers.image.title=buildctl-demo-base' \
  --change 'CMD ["/bin/bash"]' \
  "$tarball" "$tag" >/dev/null
echo "demo base $tag: built"
