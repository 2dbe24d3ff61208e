#!/bin/bash
# Split a file into parts small enough for the device tool, and join them again, checked by sha256.
# The device tool carries at most 64 MiB a call (the checkout included) and brings back files of at most
# 16 MiB from $OUT (at most 8 files a call), so a TE wheel (34 MB) or a big wheel from PyPI travels in parts:
#
#   bash split_parts.sh split FILE DIR [SIZE]   # DIR/<name>.part.aa, .ab, ... of SIZE bytes (default 15M:
#                                               # under $OUT's 16 MiB a file; 60M for a carry) and
#                                               # DIR/<name>.sha256 (sha256sum's line for the whole file)
#   bash split_parts.sh join DIR NAME DEST      # DIR/NAME.part.* joined (in name order) into DEST/NAME, then
#                                               # checked against DIR/NAME.sha256; exit 1 and DEST/NAME
#                                               # removed when the parts are incomplete or altered
#
# Parts split on one call's machine and joined on the next: the machine keeps /tmp only while it stays
# warm (about 30 s after a call), so make such calls back to back (tests/data/gpu/h200-train/README.md).
set -euo pipefail
usage() { sed -n '2,12p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in
  split)
    [ $# -ge 3 ] && [ $# -le 4 ] || usage
    file=$2 dir=$3 size=${4:-15M}
    [ -f "$file" ] || { echo "split_parts.sh: no file $file" >&2; exit 1; }
    name=$(basename "$file")
    mkdir -p "$dir"
    rm -f "$dir/$name".part.*
    (cd "$(dirname "$file")" && sha256sum "$name") > "$dir/$name.sha256"
    split -b "$size" "$file" "$dir/$name.part."
    ls -l "$dir/$name".part.* | awk '{print $5, $NF}'
    cat "$dir/$name.sha256"
    ;;
  join)
    [ $# -eq 4 ] || usage
    dir=$2 name=$3 dest=$4
    [ "$name" = "$(basename "$name")" ] || { echo "split_parts.sh: NAME must be a file name, not a path: $name" >&2; exit 2; }
    [ -f "$dir/$name.sha256" ] || { echo "split_parts.sh: no $dir/$name.sha256 (split writes it)" >&2; exit 1; }
    compgen -G "$dir/$name.part.*" > /dev/null || { echo "split_parts.sh: no parts $dir/$name.part.*" >&2; exit 1; }
    mkdir -p "$dest"
    dir=$(cd "$dir" && pwd)
    cat "$dir/$name".part.* > "$dest/$name"   # the shell sorts the glob: .aa, .ab, ... in order
    if ! (cd "$dest" && sha256sum --quiet -c "$dir/$name.sha256"); then
      rm -f "$dest/$name"
      echo "split_parts.sh: $name joined from $(ls "$dir/$name".part.* | wc -l) part(s) does not match $dir/$name.sha256" >&2
      exit 1
    fi
    echo "joined $dest/$name ($(stat -c %s "$dest/$name") bytes, sha256 ok)"
    ;;
  *) usage ;;
esac
