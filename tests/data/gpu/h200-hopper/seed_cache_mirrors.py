"""Seed buildctl's source cache with mirrors of repositories whose bare mirror here cannot serve a fetch.

    python3 seed_cache_mirrors.py MIRRORS_DIR CACHE_SOURCES_DIR URL...

The mirrors under MIRRORS_DIR (laid out as git_mirrors maps https://github.com/) lack blobs of 4 MiB or
more, so `git fetch` from them dies in upload-pack ("possible repository corruption") whatever is asked.
Each URL's cache mirror (CACHE_SOURCES_DIR/mirrors/<mirror_name(url)>.git, as buildctl.sources.sources names it)
becomes `git clone --mirror --shared` of the local mirror: the same refs, objects read through
alternates, nothing copied. buildctl then finds every ref up to date and every commit present, and
fetches nothing. A blob the commits it needs reference but the mirror lacks is named on the command
line as URL#BLOB=PATH: it gets a replace ref to a small text blob saying so (cat-file, which buildctl's
export reads blobs with, honours replace refs), so that the export can be written; the placeholder
stands in that one path only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from buildctl.sources.urls import mirror_name


def main(mirrors: Path, cache: Path, specs: list[str]) -> None:
    for spec in specs:
        url, _, missing = spec.partition("#")
        rel = url.removeprefix("https://github.com/")
        src = mirrors / (rel if rel.endswith(".git") else rel + ".git")
        dest = cache / "mirrors" / f"{mirror_name(url)}.git"
        if dest.exists():
            print(f"{url}: {dest} exists, left as it is")
        else:
            subprocess.run(["git", "clone", "-q", "--mirror", "--shared", str(src), str(dest)], check=True)
            subprocess.run(["git", "--git-dir", str(dest), "config", "buildctl.url", url], check=True)
            print(f"{url}: {dest} shares {src}/objects")
        for item in filter(None, missing.split(",")):
            blob, _, path = item.partition("=")
            text = f"placeholder: blob {blob} ({path}) is missing from the mirror {src}\n"
            new = subprocess.run(["git", "--git-dir", str(dest), "hash-object", "-w", "--stdin"], input=text,
                                 capture_output=True, text=True, check=True).stdout.strip()
            subprocess.run(["git", "--git-dir", str(dest), "update-ref", f"refs/replace/{blob}", new], check=True)
            print(f"{url}: {path} ({blob}) -> placeholder {new}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
