#!/bin/bash
# Host: download the wheels of wheels.txt for the device (Python 3.12, manylinux x86_64), --no-deps, one
# version each, with the device README's flags (/work/.library/device/README.md, Notes).
#   bash fetch_wheels.sh DEST [runtime|compile|all]     (default: runtime)
# runtime wheels go to DEST (for .devcarry/c2/whl), compile wheels (nvidia-mathdx) too when asked
# (for .devcarry/c1/whl). Prints each file and the total size.
set -euo pipefail
DEST=${1:?usage: fetch_wheels.sh DEST [runtime|compile|all]}
WHICH=${2:-runtime}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST"
FLAGS=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
grep -v '^\s*#' "$HERE/wheels.txt" | while read -r req tag; do
  [ -n "$req" ] || continue
  kind=${tag:-runtime}
  [ "$WHICH" = all ] || [ "$WHICH" = "$kind" ] || continue
  python3 -m pip download -q "${FLAGS[@]}" -d "$DEST" "$req"
done
# one version of each distribution: two stop the whole --no-deps install on the device
dups=$(ls "$DEST"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "more than one version of: $dups (in $DEST)" >&2; exit 1; }
ls -l "$DEST"/*.whl | awk '{print $5, $NF}'
du -cb "$DEST"/*.whl | tail -1 | awk '{printf "total %d bytes (%.1f MiB)\n", $1, $1/1048576}'
