"""Device side: the source trees of the compiler-cache runs, from what prepare_cache.py packed.

    python3 variant.py materialize PACK NAME DEST     # tree A, B or D, checked against trees.json's digest
    python3 variant.py onefile SRC DEST               # run 3's tree: SRC plus a one-line change of one .cu file

``materialize`` unpacks te-A.tar.gz (and for B or D applies te-<NAME>.delta.tar.gz and te-<NAME>.removed), then
computes the digest prepare_cache.py computed on buildctl's export of that tree and refuses (exit 1) if
they differ: the device compiles exactly the tree buildctl's Sources prepared.

``onefile`` copies SRC and makes the kind of change a one-file fix is: one line of real code (an unused
constant, so preprocessed output changes too: no cache can call it the same translation unit) appended to
FILE, and a new commit id in .git/HEAD (what a new commit would give the tree; TE's version suffix comes
from it). It prints what it did as JSON and writes it to DEST/.git/buildctl-h200-variant.json.
Standard library only (the device's python3).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
from pathlib import Path

FILE = "transformer_engine/common/fused_rope/fused_rope.cu"
LINE = "namespace { [[maybe_unused]] constexpr int buildctl_h200_cache_onefile_change = 3; }  // h200-cache run 3\n"


def listing(root: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("l", hashlib.sha256(str(p.readlink()).encode()).hexdigest())
        elif p.is_file():
            out[rel] = (f"f{p.stat().st_mode & 0o777:o}", hashlib.sha256(p.read_bytes()).hexdigest())
        elif p.is_dir():
            out[rel] = ("d", "")
    return out


def digest(items: dict[str, tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for rel in sorted(items):
        kind, sha = items[rel]
        h.update(f"{rel}\0{kind}\0{sha}\n".encode())
    return h.hexdigest()


def extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        try:
            tf.extractall(dest, filter="tar")
        except TypeError:  # Python without extraction filters (< 3.11.4); the archives are prepare_cache.py's own
            tf.extractall(dest)


def materialize(pack: Path, name: str, dest: Path) -> int:
    trees = json.loads((pack / "trees.json").read_text())["trees"]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    extract(pack / "te-A.tar.gz", dest)
    if name != "A":
        for rel in (pack / f"te-{name}.removed").read_text().splitlines():
            p = dest / rel
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        extract(pack / f"te-{name}.delta.tar.gz", dest)
    got, want = digest(listing(dest)), trees[name]["digest"]
    head = (dest / ".git" / "HEAD").read_text().strip()
    ok = got == want and head == trees[name]["commit"]
    print(json.dumps({"tree": name, "commit": head, "digest": got, "digest_ok": ok}))
    return 0 if ok else 1


def onefile(src: Path, dest: Path) -> int:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    target = dest / FILE
    old_head = (dest / ".git" / "HEAD").read_text().strip()
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    with target.open("a") as f:
        f.write(LINE)
    new_head = hashlib.sha1(f"{old_head}\n{FILE}\n{LINE}".encode()).hexdigest()
    (dest / ".git" / "HEAD").write_text(new_head + "\n")
    info = {"from": old_head, "commit": new_head, "file": FILE, "appended": LINE.rstrip("\n"),
            "sha256_before": before, "sha256_after": hashlib.sha256(target.read_bytes()).hexdigest()}
    (dest / ".git" / "buildctl-h200-variant.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["materialize"] and len(sys.argv) == 5:
        sys.exit(materialize(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])))
    if sys.argv[1:2] == ["onefile"] and len(sys.argv) == 4:
        sys.exit(onefile(Path(sys.argv[2]), Path(sys.argv[3])))
    sys.exit(__doc__)
