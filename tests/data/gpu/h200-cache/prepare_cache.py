"""Host side of the compiler-cache run on the H200: buildctl's own trees and compile script for
deepseek-v3-gb200 / hopper / transformer-engine, packed for one device call. Run from the buildctl checkout's
root with it first on PYTHONPATH:

    BUILDCTL_CACHE=... BUILDCTL_GIT_MIRRORS='https://github.com/=/work/mirrors/' \\
      PYTHONPATH=. python3 tests/data/gpu/h200-cache/prepare_cache.py DEST

Trees, each prepared by buildctl's Sources (prepare_component + exported, the tree a wheel node gets) from
the hopper lock with one change left out where named:

- ``A``: the lock without dd7ab715 (#2286, "Fix error with triton 3.5", one .py file): what the pin was
  before #2286 joined it (tree bd2094f, h200-train's attempts 1-2). Run 1 compiles it cold.
- ``B``: the lock as it is (tree cf4707d): A plus the Python-only commit. Run 2.
- ``D``: the lock without PR #2150 (PDL for quantization: it edits headers every unit includes). Run 4.
  (Run 3's tree, B plus a one-line change of one .cu file, is made on the device by ``variant.py``.)

DEST gets ``te-A.tar.gz`` (A, cutlass's media/docs/test/examples left out as in h200-hopper/prepare.py), for
B and D a delta against A (``te-<X>.delta.tar.gz``: the files that differ or are new, ``.git`` included,
and ``te-<X>.removed``: paths that A has and X lacks), ``trees.json`` (per tree: the prepared commit, the
short SHA, a digest of the packed content that ``variant.py`` checks on the device), the rendered wheel
script ``wheel-transformer-engine.sh`` (pipeline.dry_run), ``jobs.txt`` (compile_jobs for the device's 16
cores / 128 GiB, TE alone) and ``requirements-transformer-engine.txt`` (the compile-env's pip line).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import sys
import tarfile
from pathlib import Path

from buildctl.builder import pipeline
from buildctl.config import load_config
from buildctl.graph.specs import CompileEnvNodeSpec, WheelNodeSpec
from buildctl.lock.lockfile import LockedPick, LockedPr
from buildctl.manifest.model import Change
from buildctl.services import target
from buildctl.sources.sources import Sources

STACK, VARIANT, COMPONENT = "deepseek-v3-gb200", "hopper", "transformer-engine"
DEVICE_CORES, DEVICE_MEMORY_GIB = 16, 128
DROP = ("3rdparty/cutlass/media", "3rdparty/cutlass/docs", "3rdparty/cutlass/test", "3rdparty/cutlass/examples")
PY_ONLY = "dd7ab715a55d18740de5f10546ac71842f832e07"  # #2286
HEADERS_PR = 2150


def kept(rel: str) -> bool:
    return not any(rel == d or rel.startswith(d + "/") for d in DROP)


def listing(root: Path) -> dict[str, tuple[str, str]]:
    """rel path -> (kind+mode, sha256 of content or link target), for what gets packed."""
    out: dict[str, tuple[str, str]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not kept(rel):
            continue
        if p.is_symlink():
            out[rel] = ("l", hashlib.sha256(str(p.readlink()).encode()).hexdigest())
        elif p.is_file():
            out[rel] = (f"f{p.stat().st_mode & 0o777:o}", hashlib.sha256(p.read_bytes()).hexdigest())
        elif p.is_dir():
            out[rel] = ("d", "")
    return out


def digest(items: dict[str, tuple[str, str]]) -> str:
    """The same digest variant.py computes on the device (paths sorted, one line each)."""
    h = hashlib.sha256()
    for rel in sorted(items):
        kind, sha = items[rel]
        h.update(f"{rel}\0{kind}\0{sha}\n".encode())
    return h.hexdigest()


def add(tf: tarfile.TarFile, root: Path, rel: str) -> None:
    tf.add(root / rel, arcname=rel, recursive=False)


def pack_full(root: Path, dest: Path, items: dict[str, tuple[str, str]]) -> None:
    with tarfile.open(dest, "w:gz", compresslevel=9) as tf:
        for rel in sorted(items):
            add(tf, root, rel)


def pack_delta(root: Path, dest: Path, items: dict[str, tuple[str, str]], base: dict[str, tuple[str, str]]) -> list[str]:
    changed = [rel for rel in sorted(items) if base.get(rel) != items[rel] and items[rel][0] != "d"]
    removed = sorted(rel for rel in base if rel not in items)
    with tarfile.open(dest, "w:gz", compresslevel=9) as tf:
        for rel in changed:
            add(tf, root, rel)
        # folders new in this tree, so that empty ones exist too
        for rel in sorted(r for r in items if items[r][0] == "d" and r not in base):
            add(tf, root, rel)
    (dest.parent / dest.name.replace(".delta.tar.gz", ".removed")).write_text("".join(r + "\n" for r in removed))
    return changed


def left_out(component, locked, *, commit: str | None = None, pr: int | None = None):  # type: ignore[no-untyped-def]
    """The component and its lock with one change left out (the rest in the lock's order)."""
    def drop_step(s: Change) -> bool:
        return (commit is not None and s.commit == commit) or (pr is not None and s.pr == pr)

    def drop_locked(c: object) -> bool:
        return ((commit is not None and isinstance(c, LockedPick) and c.sha == commit)
                or (pr is not None and isinstance(c, LockedPr) and c.number == pr))

    steps = tuple(s for s in component.steps if not drop_step(s))
    changes = tuple(c for c in locked.changes if not drop_locked(c))
    assert len(steps) == len(component.steps) - 1 and len(changes) == len(locked.changes) - 1, (commit, pr)
    return dataclasses.replace(component, changes=steps), dataclasses.replace(locked, changes=changes, tree="")


def main(project: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    config = load_config()
    t = target.load(project, config, STACK, VARIANT, local_only=True)
    assert t.vlock is not None, "the hopper variant is not locked"
    sources = Sources.from_config(config, base_dir=t.manifest_path.parent)
    comp = next(c for c in t.manifest.components if c.name == COMPONENT)
    locked = t.vlock.components[COMPONENT]
    variants = {
        "A": left_out(comp, locked, commit=PY_ONLY),
        "B": (comp, locked),
        "D": left_out(comp, locked, pr=HEADERS_PR),
    }
    trees: dict[str, object] = {}
    items: dict[str, dict[str, tuple[str, str]]] = {}
    for name, (c, lk) in variants.items():
        prepared = sources.prepare_component(c, lk, check_tree=name == "B")
        root = sources.exported(prepared)
        items[name] = listing(root)
        trees[name] = {"commit": prepared.tree, "short": prepared.short, "export": str(root),
                       "changes": [s.label() for s in c.steps], "files": len(items[name]),
                       "digest": digest(items[name])}
        if name == "A":
            pack_full(root, dest / "te-A.tar.gz", items[name])
            trees[name]["packed"] = "te-A.tar.gz"  # type: ignore[index]
        else:
            changed = pack_delta(root, dest / f"te-{name}.delta.tar.gz", items[name], items["A"])
            trees[name]["packed"] = f"te-{name}.delta.tar.gz"  # type: ignore[index]
            trees[name]["changed_vs_A"] = changed  # type: ignore[index]
        print(f"{name}: {prepared.tree[:12]} ({', '.join(s.label() for s in c.steps)}), {len(items[name])} entries")
    # B vs A must be the Python-only commit (plus .git's HEAD and source record)
    non_py = [r for r in trees["B"]["changed_vs_A"] if not r.startswith(".git/") and not r.endswith(".py")]  # type: ignore[index]
    assert not non_py, f"#2286 is not Python-only here: {non_py}"
    rendered = dest / "rendered"
    pipeline.dry_run(t, rendered)
    wheel = next(n for n in t.graph.nodes if n.kind == "wheel" and n.component == COMPONENT)
    assert isinstance(wheel.spec, WheelNodeSpec)
    jobs = pipeline.compile_jobs(cores=DEVICE_CORES, memory_gib=DEVICE_MEMORY_GIB,
                                 per_job_gib=wheel.spec.memory_per_job_gib, concurrent=1)
    script = (rendered / f"{wheel.slug}.sh").read_text()
    (dest / "wheel-transformer-engine.sh").write_text(script)
    (dest / "jobs.txt").write_text(f"{jobs}\n")
    for n in t.graph.nodes:
        if isinstance(n.spec, CompileEnvNodeSpec) and n.component == COMPONENT:
            text = (rendered / f"{n.slug}.Dockerfile").read_text()
            reqs = re.findall(r"^\s+(\S+==\S+) \\$", text, flags=re.M)
            (dest / "requirements-transformer-engine.txt").write_text("\n".join(reqs) + "\n")
    facts = {"project": str(project), "stack": STACK, "variant": VARIANT, "component": COMPONENT,
             "jobs": jobs, "lock_stale": t.lock_stale, "trees": trees,
             "wheel_script_sha256": hashlib.sha256(script.encode()).hexdigest()}
    (dest / "trees.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    buf = io.StringIO()
    json.dump({k: {kk: vv for kk, vv in v.items() if kk != "changed_vs_A"} for k, v in trees.items()},  # type: ignore[union-attr]
              buf, indent=1)
    print(buf.getvalue())
    print(f"jobs {jobs}; wheel script sha256 {facts['wheel_script_sha256'][:16]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 2 else Path.cwd(), Path(sys.argv[-1]))
