#!/usr/bin/env python3
"""A git repository with the PR topology of Transformer Engine's guide build, made from scratch.

``make(dest)`` writes a bare repository ``dest`` (fixed identities and dates: the same SHAs everywhere)
whose history reproduces what `buildctl lock` met on the real repositories (issue 10), scaled down to
a few files. ``build.sh`` line 5 ("L5") plays build_tools/wheel_utils/build_wheels.sh's contested line:

    main:        m0 ── m1 ("#2305" grouped.py) ── m2 ("#2278" L5 a->b) ── m3 ("#2295" L5 b->c) ── m4 (merges PR 40)
                   │                                                                             ── m5 (squash of PR 50)
    release_v1:    └─ r1 (VERSION 1.0.0, tag v1)
    PR 10 ("2146"): from m0: a1, merge of main at m2, a2, merge of main at m3      (own: a1, a2)
    PR 20 ("2150"): from m0: b1, b2, merge of main at m2                          (own: b1, b2)
    PR 40: from m0: c1, c2; merged into main by the true merge commit m4          (own: M^1..M^2 = c1, c2)
    PR 50: from m0: d1, d2; merged into main by squash as m5                      (own: d1, d2; empty on m5)
    PR 60: from m0: e1 changes L5 a->z                                            (conflicts with m2/m3)
    PR 70: from m0: k1 changes L5 a->k, then merges main at m3 resolving L5 to k  (own k1 conflicts on m3;
                                                                                   merging its head applies)

Replaying first-parent history (merges picked with -m 1, buildctl's algorithm before issue 10), PR 10 then
PR 20 on m1 conflicts in build.sh (PR 20's merge replays "#2278" against a stale base), and PR 20 then
PR 10 applies: as on the real repositories. Their own commits apply in either order and leave L5 as the
base has it. Usage: python3 tests/pr_topology.py DEST (prints the SHAs as JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

EPOCH = 1700000000


@dataclass(frozen=True)
class Topology:
    path: Path
    m0: str
    m1: str
    m2: str
    m3: str
    m4: str
    m5: str
    r1: str
    a1: str
    a_merge1: str
    a2: str
    a_merge2: str
    b1: str
    b2: str
    b_merge: str
    c1: str
    c2: str
    d1: str
    d2: str
    e1: str
    k1: str
    k_merge: str


def _lines(**changed: str) -> str:
    lines = [f"line {i}" for i in range(1, 13)]
    lines[4] = "L5 a"
    for k, v in changed.items():
        lines[int(k[1:]) - 1] = v
    return "\n".join(lines) + "\n"


class _Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tick = 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
                        GIT_AUTHOR_NAME="Topology Author", GIT_AUTHOR_EMAIL="author@topology.invalid",
                        GIT_COMMITTER_NAME="Topology Committer", GIT_COMMITTER_EMAIL="committer@topology.invalid")
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, check: bool = True) -> str:
        self.tick += 1
        env = {**self.env, "GIT_AUTHOR_DATE": f"@{EPOCH + self.tick * 60} +0000",
               "GIT_COMMITTER_DATE": f"@{EPOCH + self.tick * 60} +0000"}
        r = subprocess.run(["git", "-C", str(self.path), *args], env=env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {r.stderr}")
        return r.stdout.strip()

    def commit(self, message: str, files: dict[str, str]) -> str:
        for name, text in files.items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(text)
            self.git("add", "--", name)
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def merge(self, branch: str, message: str, *, resolve: dict[str, str] | None = None) -> str:
        r = self.git("merge", "-q", "--no-ff", "-m", message, branch, check=resolve is None)
        del r
        if resolve is not None:
            for name, text in resolve.items():
                (self.path / name).write_text(text)
                self.git("add", "--", name)
            self.git("commit", "-q", "--no-edit")
        return self.git("rev-parse", "HEAD")


def make(dest: Path) -> Topology:
    with tempfile.TemporaryDirectory(prefix="topology-") as tmp:
        r = _Repo(Path(tmp))
        s: dict[str, str] = {}
        s["m0"] = r.commit("initial", {"build.sh": _lines(), "VERSION.txt": "2.0.0.dev0\n", "grouped.py": "WGRAD = 0\n",
                                       "README": "topology\n"})
        s["m1"] = r.commit("Use dummy wgrad in GroupedLinear (#2305)", {"grouped.py": "WGRAD = 'dummy'\n"})
        r.git("checkout", "-q", "-b", "release_v1", s["m0"])
        s["r1"] = r.commit("Release 1.0.0", {"VERSION.txt": "1.0.0\n"})
        r.git("tag", "v1")
        r.git("checkout", "-q", "main")
        s["m2"] = r.commit("Build wheels for more CUDA versions (#2278)", {"build.sh": _lines(L5="L5 b")})
        s["m3"] = r.commit("Remove nvidia-mathdx dependency (#2295)", {"build.sh": _lines(L5="L5 c")})
        # PR 10 (TE #2146): merges main twice, after #2278 and after #2295
        r.git("checkout", "-q", "-b", "pr10", s["m0"])
        s["a1"] = r.commit("fix cpu overhead", {"cpu.py": "FAST = 1\n"})
        s["a_merge1"] = r.merge(s["m2"], "Merge branch 'main' into pr10")
        s["a2"] = r.commit("cache layout check", {"cpu.py": "FAST = 1\nCACHE = True\n"})
        s["a_merge2"] = r.merge(s["m3"], "Merge branch 'main' into pr10")
        # PR 20 (TE #2150): merged main once, after #2278 only
        r.git("checkout", "-q", "-b", "pr20", s["m0"])
        s["b1"] = r.commit("PDL for quantization", {"pdl.py": "PDL = 1\n"})
        s["b2"] = r.commit("[pre-commit.ci] auto fixes", {"pdl.py": "PDL = 1  # launch\n"})
        s["b_merge"] = r.merge(s["m2"], "Merge branch 'main' into pr20")
        # PR 40: merged upstream by a true merge commit
        r.git("checkout", "-q", "-b", "pr40", s["m0"])
        s["c1"] = r.commit("feature part 1", {"feature.py": "PART = 1\n"})
        s["c2"] = r.commit("feature part 2", {"feature2.py": "PART = 2\n"})
        r.git("checkout", "-q", "main")
        s["m4"] = r.merge("pr40", "Merge pull request #40 from pr40")
        # PR 50: merged upstream by squash
        r.git("checkout", "-q", "-b", "pr50", s["m0"])
        s["d1"] = r.commit("squashed part 1", {"squash1.py": "S = 1\n"})
        s["d2"] = r.commit("squashed part 2", {"squash2.py": "S = 2\n"})
        r.git("checkout", "-q", "main")
        s["m5"] = r.commit("Squashed feature (#50)", {"squash1.py": "S = 1\n", "squash2.py": "S = 2\n"})
        # PR 60: its own commit conflicts with #2278/#2295; merging does not help either
        r.git("checkout", "-q", "-b", "pr60", s["m0"])
        s["e1"] = r.commit("change L5 another way", {"build.sh": _lines(L5="L5 z")})
        # PR 70: its own commit conflicts, but its branch merged main and resolved it: merging applies
        r.git("checkout", "-q", "-b", "pr70", s["m0"])
        s["k1"] = r.commit("change L5 to k", {"build.sh": _lines(L5="L5 k")})
        s["k_merge"] = r.merge(s["m3"], "Merge branch 'main' into pr70", resolve={"build.sh": _lines(L5="L5 k")})
        r.git("checkout", "-q", "main")
        subprocess.run(["git", "clone", "-q", "--bare", tmp, str(dest)], check=True, env=r.env)
    heads = {10: s["a_merge2"], 20: s["b_merge"], 40: s["c2"], 50: s["d2"], 60: s["e1"], 70: s["k_merge"]}
    for number, head in heads.items():
        subprocess.run(["git", "--git-dir", str(dest), "update-ref", f"refs/pull/{number}/head", head], check=True)
    subprocess.run(["git", "--git-dir", str(dest), "update-ref", "-d", "refs/heads/pr10"], check=True)
    return Topology(path=dest, **s)


if __name__ == "__main__":
    t = make(Path(sys.argv[1]))
    print(json.dumps({k: str(v) for k, v in asdict(t).items()}, indent=2))
