"""Every item of the seed stacks' recipes is rendered by `build --dry-run`, or the docs say why not.

tests/data/recipes/<stack>.json holds the recipes' items as facts, written by scripts/recipe_facts.py
from the real repositories (Megatron-LM's DeepSeek-V3 guide at 1d9edcf8 and examples/bert at effebd81,
verl's docker/Dockerfile.ngc.vllm0.8 at 0d39be73). For each stack and variant the dry run is rendered
here and each item is looked for in what it wrote (Dockerfiles, compile scripts, context listings) and in
the graph it rendered (download URLs, component commits, the launch script); an item it does not show
needs a row in the stack's recipe table of docs/reference/seed-stacks.md ("recipe item -> what buildctl does"), with a reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from buildctl.builder import pipeline
from buildctl.config import load_config
from buildctl.graph.graph import Graph
from buildctl.graph.specs import (
    AssembleNodeSpec,
    CompileEnvNodeSpec,
    CudnnNodeSpec,
    EntrypointNodeSpec,
    PythonNodeSpec,
    SystemNodeSpec,
)
from buildctl.services import target

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "tests" / "data" / "recipes"
RECIPE_TABLES = ROOT / "docs" / "reference" / "seed-stacks.md"  # "### Recipe items: `STACK`" sections
STACKS = {"deepseek-v3-gb200": ["cuda13", "cuda12", "hopper"], "megatron-bert": ["ngc2401"],
          "verl-vllm": ["ngc2408"]}


@dataclass(frozen=True)
class Rendered:
    files: Mapping[str, str]  # dry-run file name -> text
    graph: Graph

    def text(self, pattern: str = "") -> str:
        return "\n".join(t for n, t in sorted(self.files.items()) if pattern in n)


def render(stack: str, variant: str, out: Path) -> Rendered:
    config = load_config({"BUILDCTL_CACHE": str(out / "cache"), "BUILDCTL_CONFIG": str(out / "none.toml")})
    t = target.load(ROOT, config, stack, variant, skip_smoke=False)
    pipeline.dry_run(t, out / "dry")
    files = {p.name: p.read_text() for p in (out / "dry").iterdir() if p.is_file()}
    return Rendered(files=files, graph=t.graph)


def _canon_words(text: str) -> set[str]:
    return {canonicalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)}


def _pip_lines(text: str) -> list[str]:
    """The requirement lines of every `printf ... > /tmp/buildctl-requirements.txt` block."""
    out, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("printf '%s\\n'"):
            inside = True
            continue
        if inside and s.startswith("> /tmp/buildctl-requirements.txt"):
            inside = False
        elif inside:
            out.append(" ".join(shlex.split(s.rstrip("\\").strip())))
    return out


def _pip_rendered(r: Rendered, value: str, where: str) -> bool:
    req = Requirement(value)
    for line in _pip_lines(r.text(where)):
        head = line.split()[0]
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(.*)$", head)
        if m and canonicalize_name(m.group(1)) == canonicalize_name(req.name):
            return not req.specifier or str(req.specifier) in m.group(2)
    return False


def _apt_rendered(r: Rendered, item: Mapping[str, Any]) -> bool:
    for name, text in r.files.items():
        if not name.endswith(".Dockerfile") or "apt-get install" not in text:
            continue
        block = text.split("apt-get install", 1)[1]
        if re.search(rf"(^|[\s']){re.escape(item['value'])}(=|'|\s|;)", block):
            install = text.split("apt-get install", 1)[1].splitlines()[0]
            return not item.get("recommends") or "--no-install-recommends" not in install
    return False


def _urls(g: Graph) -> set[str]:
    out: set[str] = set()
    for n in g.nodes:
        s = n.spec
        if isinstance(s, CudnnNodeSpec | SystemNodeSpec | CompileEnvNodeSpec):
            out.update(f.url for f in s.files)
        if isinstance(s, PythonNodeSpec):
            out.update(p.url for p in s.pins if p.url)
    return out


def _script(g: Graph) -> str:
    spec = g.node("entrypoint").spec
    assert isinstance(spec, EntrypointNodeSpec)
    return spec.script


def _launch_words(script: str) -> list[str]:
    """The words the launch script runs with its default profile (``--print-command``, run by bash), each
    site path standing as ``$NAME`` as the recipe writes it."""
    names = [n for n in re.findall(r"(?m)^([A-Z_][A-Z0-9_]*)=\$\{\1:-", script) if not n.startswith("BUILDCTL_")]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "buildctl-launch"
        path.write_text(script)
        done = subprocess.run(["bash", str(path), "--print-command"], capture_output=True, text=True, timeout=30,
                              env={"PATH": os.environ["PATH"], **{n: f"${n}" for n in names}})
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout)


def _commits(g: Graph) -> list[str]:
    spec = g.node("assemble").spec
    assert isinstance(spec, AssembleNodeSpec)
    return [v for k, v in spec.labels.items() if k.startswith("io.buildctl.component.")]


def _env_pairs(dockerfile: str) -> set[str]:
    """The NAME="value" pairs of a Dockerfile's ENV instructions (render writes one pair a line: the assemble's
    single ENV continues with a backslash)."""
    pairs: set[str] = set()
    lines = iter(dockerfile.splitlines())
    for line in lines:
        if not line.startswith("ENV "):
            continue
        part = line[4:]
        while part.endswith(" \\"):
            pairs.add(part[:-2].strip())
            part = next(lines, "")
        pairs.add(part.strip())
    return pairs


def rendered(r: Rendered, item: Mapping[str, Any], manifest_text: str) -> bool:
    kind, value = item["kind"], item["value"]
    match kind:
        case "base":
            return f"FROM {value}\n" in r.text(".Dockerfile")
        case "env" | "runtime-env":
            k, _, v = value.partition("=")
            return f'{k}="{v}"' in _env_pairs(r.files.get("assemble.Dockerfile", ""))
        case "build-env":
            k, _, v = value.partition("=")
            return f"export {k}={shlex.quote(v)}" in r.text(".sh")
        case "rm":
            return any(re.search(rf"rm -rf .*(?<!\S){re.escape(value)}(?![^\s;])", line)
                       for line in r.text(".Dockerfile").splitlines())
        case "apt":
            return _apt_rendered(r, item)
        case "pip":
            return _pip_rendered(r, value, "python.Dockerfile")
        case "pip-build":
            if value == ".":
                return "--no-build-isolation" in r.text("wheel-")
            return not value.startswith("git+") and _pip_rendered(r, value, "compile-env-")
        case "pip-wheel":
            name, version, _, _ = parse_wheel_filename(value)
            return any(line.split()[0] == f"{name}=={version}" for line in _pip_lines(r.text("python.Dockerfile")))
        case "uninstall":
            lines = [ln for ln in r.text("system.Dockerfile").splitlines() if "pip uninstall -y" in ln]
            return any(canonicalize_name(value) in _canon_words(ln.split("uninstall -y", 1)[1]) for ln in lines)
        case "download":
            return value in _urls(r.graph)
        case "dpkg":
            return f"dpkg -i /tmp/{value}" in r.text(".Dockerfile")
        case "chmod":
            mode, path = value.split()
            return mode == "+x" and f"rootfs{path}  mode 0755" in r.text(".context.txt")
        case "git":
            return f"repo: {value}" in manifest_text
        case "git-commit":
            return any(c.startswith(value) for c in _commits(r.graph))
        case "workdir":
            return f"WORKDIR {value.rstrip('/')}\n" in r.files.get("entrypoint.Dockerfile", "")
        case "launcher" | "command":
            return re.search(rf"(^|[\s/'\"]){re.escape(value)}(\s|'|\"|$)", _script(r.graph), re.M) is not None
        case "launch-arg":
            words = _launch_words(_script(r.graph))
            want = value.split()
            return any(words[i:i + len(want)] == want for i in range(len(words)))
        case "step":
            return value == "apt-get update" and "apt-get update;" in r.text(".Dockerfile")
        case _:
            return False  # args, pip config, apt sources: only the docs can say what becomes of them


def readme_rows(stack: str) -> dict[str, list[tuple[str, str]]]:
    """item id -> [(variants, what buildctl does)] from the recipe table of ``stack`` (docs/reference/seed-stacks.md)."""
    text = RECIPE_TABLES.read_text()
    m = re.search(rf"^### Recipe items: `{re.escape(stack)}`\n(.*?)(?=^#|\Z)", text, re.M | re.S)
    assert m, f"{RECIPE_TABLES.name} has no '### Recipe items: `{stack}`' section"
    rows: dict[str, list[tuple[str, str]]] = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        rows.setdefault(cells[0].strip("`"), []).append((cells[1], cells[2]))
    return rows


def _covers(variants: str, variant: str) -> bool:
    return variants == "all" or variant in [v.strip() for v in variants.split(",")]


def applies(item: Mapping[str, Any], variant: str) -> bool:
    return item.get("variant") in (None, variant)


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Rendered]:
    return {(s, v): render(s, v, tmp_path_factory.mktemp(f"{s}-{v}")) for s, vs in STACKS.items() for v in vs}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_recipe_item_is_rendered_or_explained(stack: str, renders: dict[tuple[str, str], Rendered]) -> None:
    facts = json.loads((FACTS / f"{stack}.json").read_text())
    assert facts["items"], f"no recipe items for {stack}: re-run scripts/recipe_facts.py"
    rows = readme_rows(stack)
    manifest_text = (ROOT / "pins" / f"{stack}.yaml").read_text()
    missing = []
    for variant in STACKS[stack]:
        r = renders[(stack, variant)]
        for item in facts["items"]:
            if not applies(item, variant):
                continue
            explained = [why for vs, why in rows.get(item["id"], []) if _covers(vs, variant) and why]
            if not explained and not rendered(r, item, manifest_text):
                missing.append(f"{variant}: {item['id']} ({item['source']}: {item['step']})")
    assert not missing, (f"{len(missing)} recipe item(s) of {stack} are neither rendered by the dry run nor in "
                         f"the recipe table of {RECIPE_TABLES.name}:\n  " + "\n  ".join(missing))
    known = {i["id"] for i in facts["items"]}
    stale = sorted(set(rows) - known)
    assert not stale, f"{RECIPE_TABLES.name}'s recipe table of {stack} names items the recipe does not have: {stale}"


def test_the_checker_sees_a_missing_item(renders: dict[tuple[str, str], Rendered]) -> None:
    """The check can fail: an item the manifest does not carry is not found in the rendering."""
    r = renders[("deepseek-v3-gb200", "cuda13")]
    text = (ROOT / "pins" / "deepseek-v3-gb200.yaml").read_text()
    assert rendered(r, {"kind": "pip", "value": "dm-tree"}, text)
    assert not rendered(r, {"kind": "pip", "value": "no-such-package"}, text)
    assert not rendered(r, {"kind": "pip", "value": "black==24.4.3"}, text)
    assert rendered(r, {"kind": "env", "value": "SHELL=/bin/bash"}, text)
    assert not rendered(r, {"kind": "env", "value": "SHELL=/bin/zsh"}, text)
    assert rendered(r, {"kind": "apt", "value": "gdb", "recommends": True}, text)
    assert rendered(r, {"kind": "build-env", "value": "PIP_CONSTRAINT="}, text)
    verl = renders[("verl-vllm", "ngc2408")]
    vtext = (ROOT / "pins" / "verl-vllm.yaml").read_text()
    assert rendered(verl, {"kind": "uninstall", "value": "xgboost"}, vtext)
    assert not rendered(verl, {"kind": "uninstall", "value": "numpy"}, vtext)
    bert = renders[("megatron-bert", "ngc2401")]
    btext = (ROOT / "pins" / "megatron-bert.yaml").read_text()
    assert rendered(bert, {"kind": "launch-arg", "value": "--data-path $DATA_PATH"}, btext)
    assert not rendered(bert, {"kind": "launch-arg", "value": "--num-layers 25"}, btext)
