#!/usr/bin/env python3
"""Read the three seed stacks' recipes from real repository mirrors and write their items as facts.

    python3 scripts/recipe_facts.py MIRRORS [--out tests/data/recipes]

MIRRORS is a folder of bare git mirrors laid out for `git_mirrors` (MIRRORS/NVIDIA/Megatron-LM.git,
MIRRORS/volcengine/verl.git). Each recipe is read with `git show COMMIT:PATH` and reduced to short
facts, one per item (an apt or pip name, an env name and value, an uninstall, a removed path, a
download, a step), written to OUT/<stack>.json: facts with their source, never a copy of the file.
tests/unit/test_recipes.py checks that `buildctl build STACK --variant V --dry-run` renders each item,
or that the stack's recipe table (docs/reference/seed-stacks.md) says what buildctl does instead and why.

Only the standard library: it runs anywhere git does.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

RECIPES: tuple[dict[str, str], ...] = (
    {"stack": "deepseek-v3-gb200", "repo": "NVIDIA/Megatron-LM", "commit": "1d9edcf8",
     "path": "docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-reproduce-guide.md",
     "kind": "guide"},
    {"stack": "megatron-bert", "repo": "NVIDIA/Megatron-LM", "commit": "effebd81",
     "path": "examples/bert/train_bert_340m_distributed.sh", "kind": "bert-script"},
    {"stack": "megatron-bert", "repo": "NVIDIA/Megatron-LM", "commit": "effebd81",
     "path": "examples/bert/README.md", "kind": "bert-readme"},
    {"stack": "verl-vllm", "repo": "volcengine/verl", "commit": "0d39be73",
     "path": "docker/Dockerfile.ngc.vllm0.8", "kind": "dockerfile"},
)


def git_show(mirrors: Path, repo: str, commit: str, path: str) -> tuple[str, str]:
    """(full commit SHA, file text) from the bare mirror MIRRORS/<repo>.git."""
    gitdir = mirrors / f"{repo}.git"
    sha = subprocess.run(["git", "--git-dir", str(gitdir), "rev-parse", "--verify", "--end-of-options",
                          f"{commit}^{{commit}}"], capture_output=True, text=True, check=True).stdout.strip()
    text = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{sha}:{path}"],
                          capture_output=True, text=True, check=True).stdout
    return sha, text


# ------------------------------------------------------------------------------------------ shell


def logical_lines(text: str) -> list[str]:
    """Dockerfile / shell lines with backslash continuations joined and comments dropped."""
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and line.lstrip().startswith("#"):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append(buf.strip())
        buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line (split at && ; ||), each as words; {...} groups flattened."""
    out: list[list[str]] = []
    for part in re.split(r"&&|\|\||;", run):
        part = part.strip().strip("{}").strip()
        if not part:
            continue
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        if words:
            out.append(words)
    return out


def _env_prefix(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]):
        k, _, v = words[i].partition("=")
        env[k] = v
        i += 1
    return env, words[i:]


def _pip_names(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


# ------------------------------------------------------------------------------------------ items


class Facts:
    def __init__(self, source: dict[str, str]) -> None:
        self.source = source
        self.items: list[dict[str, Any]] = []
        self.step = ""

    def add(self, kind: str, value: str, **extra: Any) -> None:
        item: dict[str, Any] = {"id": f"{kind}:{value}", "kind": kind, "value": value, "step": self.step}
        item.update({k: v for k, v in extra.items() if v not in (None, "", [], {})})
        if all(i["id"] != item["id"] for i in self.items):
            self.items.append(item)


def _expand(word: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m.group(1), m.group(0)), word)


def dockerfile_items(f: Facts, text: str) -> None:
    args: dict[str, str] = {}
    for line in logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        rest = rest.strip()
        f.step = line[:60]
        if word == "FROM":
            f.add("base", rest.split()[0])
        elif word == "ENV":
            for k, v in _env_pairs(rest):
                f.add("env", f"{k}={v}")
        elif word == "ARG":
            name, _, value = rest.partition("=")
            args[name] = _expand(value.strip().strip('"'), args)
            f.add("arg", f"{name}={args[name]}")
        elif word == "WORKDIR":
            f.add("workdir", rest)
        elif word == "RUN":
            run_items(f, rest, args)


def _env_pairs(rest: str) -> list[tuple[str, str]]:
    if "=" not in rest.split()[0]:
        name, _, value = rest.partition(" ")
        return [(name, value.strip().strip('"'))]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in shlex.split(rest)]


def run_items(f: Facts, run: str, args: dict[str, str]) -> None:
    unset_constraint = False
    cmds = [_env_prefix(w) for w in commands(run)]
    # a RUN that compiles (an env-prefixed pip install) installs its other pip packages for that compile
    compiles = any(env and words[:1] == ["pip"] for env, words in cmds)
    for env, words in cmds:
        if ">" in words:
            words = words[:words.index(">")]  # `{ echo ...; } > FILE`: the apt-sources step, recorded by its cp
        words = [_expand(w, args) for w in words]
        if not words:
            continue
        if words[0] == "apt-get" and "install" in words:
            words = ["apt-get", "install", *(w for w in words[1:] if w != "install")]
        if words[0] == "unset" and "PIP_CONSTRAINT" in words:
            unset_constraint = True
            continue
        if words[:2] == ["apt-get", "install"]:
            opts = [w for w in words[2:] if w.startswith("-")]
            for name in (w for w in words[2:] if not w.startswith("-") and w != "Dpkg::Options::=--force-confdef"):
                f.add("apt", name, recommends="--no-install-recommends" not in opts,
                      options=[o for o in opts if o != "-y"])
        elif words[0] == "wget":
            url = next(w for w in words[1:] if w.startswith("http"))
            f.add("download", url)
        elif words[0] == "dpkg" and "-i" in words:
            f.add("dpkg", words[-1])
        elif words[0] in ("pip", "python", "python3"):
            pip = words[words.index("pip"):] if "pip" in words else words
            if pip[1:2] == ["install"]:
                opts = [a for a in pip[2:] if a.startswith("-")]
                for name in _pip_names(pip[2:]):
                    if name.endswith(".whl"):
                        f.add("pip-wheel", name)
                        continue
                    kind = "pip-build" if env or compiles else "pip"
                    f.add(kind, name, unset_constraint=unset_constraint or None, env=env or None,
                          options=[o for o in opts if o not in ("--no-cache-dir",)] or None)
                for k, v in env.items():
                    f.add("build-env", f"{k}={v}")
                if unset_constraint and env:
                    f.add("build-env", "PIP_CONSTRAINT=")
            elif pip[1:2] == ["uninstall"]:
                for name in _pip_names(pip[2:]):
                    f.add("uninstall", name)
            elif pip[1:2] == ["config"]:
                f.add("pip-config", " ".join(pip[2:4]))
        elif words[:2] == ["rm", "-rf"]:
            for p in words[2:]:
                f.add("rm", p)
        elif words[0] == "git" and words[1:2] == ["clone"]:
            url = next(w for w in words[2:] if w.startswith("http"))
            branch = words[words.index("--branch") + 1] if "--branch" in words else ""
            f.add("git", url, branch=branch)
        elif words[0] == "git" and words[1:2] == ["checkout"]:
            f.add("git-commit", words[2])
        elif words[0] == "cp" and "/etc/apt/sources.list" in words:
            f.add("apt-sources", "replaced")
        elif words[0] == "chmod":
            f.add("chmod", " ".join(words[1:]))
        elif words[0] == "cd":
            continue
        elif words[0] == "echo" and "deb" in " ".join(words):
            continue  # the sources.list lines of the apt-sources step
        else:
            f.add("step", " ".join(words)[:80])


def guide_items(f: Facts, text: str) -> None:
    m = re.search(r"```dockerfile\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("the guide has no ```dockerfile block")
    dockerfile_items(f, m.group(1))
    tip = re.search(r"change the base container to `([^`]+)` and the cuDNN to be installed to `([^`]+)`", text)
    if tip:
        f.step = "Tip: CUDA 12.9"
        f.add("base", tip.group(1), variant="cuda12")
        f.add("apt", tip.group(2), variant="cuda12", recommends=True)
    env = re.search(r"### Environment variables\s*```bash\n(.*?)```", text, re.S)
    if env:
        f.step = "4. Training scripts: environment variables"
        for line in env.group(1).splitlines():
            if "=" in line:
                f.add("runtime-env", line.strip())
    f.step = "4. Training scripts: bindpcie"
    for url in re.findall(r"wget (https://\S+bindpcie)", text):
        f.add("download", url)
    f.add("launcher", "bindpcie")
    f.step = "2. Megatron-Core"
    mc = re.search(r"git clone (https://github.com/NVIDIA/Megatron-LM.git).*?git checkout ([0-9a-f]{40})", text, re.S)
    if mc:
        f.add("git", mc.group(1))
        f.add("git-commit", mc.group(2))


def bert_script_items(f: Facts, text: str) -> None:
    literal = dict(re.findall(r"(?m)^([A-Z_]+)=([^$\s(][^\s#]*)", text))  # GPUS_PER_NODE=8, MASTER_ADDR=...
    arrays: dict[str, list[str]] = {}
    for name, body in re.findall(r"(?ms)^([A-Z_]+_ARGS)=\(\n(.*?)^\)", text):
        words: list[str] = []
        for line in body.splitlines():
            words += [re.sub(r"^\$([A-Z_]+)$", lambda m: literal.get(m.group(1), m.group(0)), w)
                      for w in line.split("#", 1)[0].split()]
        arrays[name] = words
    for line in logical_lines(text):
        f.step = line[:60]
        if line.startswith("export "):
            f.add("runtime-env", line.removeprefix("export ").strip())
        elif line.startswith("torchrun"):
            words = line.split()
            f.add("launcher", words[0])
            f.add("command", next(w for w in words if w.endswith(".py")))
    for name, words in arrays.items():
        f.step = name
        i = 0
        while i < len(words):
            flag = words[i]
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else ""
            f.add("launch-arg", f"{flag} {value}".strip())
            i += 2 if value else 1


def bert_readme_items(f: Facts, text: str) -> None:
    m = re.search(r"PYTORCH_IMAGE=(\S+)", text)
    if m:
        f.step = "1. Training setup"
        f.add("base", m.group(1))
    m = re.search(r"--workdir (\S+)", text)
    if m:
        f.add("workdir", m.group(1))


def collect(mirrors: Path) -> dict[str, dict[str, Any]]:
    stacks: dict[str, dict[str, Any]] = {}
    for r in RECIPES:
        sha, text = git_show(mirrors, r["repo"], r["commit"], r["path"])
        f = Facts(r)
        {"guide": guide_items, "dockerfile": dockerfile_items, "bert-script": bert_script_items,
         "bert-readme": bert_readme_items}[r["kind"]](f, text)
        entry = stacks.setdefault(r["stack"], {"stack": r["stack"], "sources": [], "items": []})
        entry["sources"].append({"repo": r["repo"], "commit": sha, "path": r["path"]})
        for item in f.items:
            item["source"] = r["path"].rsplit("/", 1)[-1]
            if all(i["id"] != item["id"] or i.get("variant") != item.get("variant") for i in entry["items"]):
                entry["items"].append(item)
    return stacks


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mirrors", type=Path, help="folder of bare mirrors (NVIDIA/Megatron-LM.git, volcengine/verl.git)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "data" / "recipes")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for stack, data in collect(args.mirrors).items():
        path = args.out / f"{stack}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{path}: {len(data['items'])} items")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
