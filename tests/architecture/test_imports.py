"""The import rules of the house, read from the source with ast (pure: nothing is imported or run).

- one-way flow: cli -> commands -> services -> stages. No stage (manifest, lock, sources, graph, builder,
  megatron, repro, engine, registry, ship, inimage, and the shared top-level modules) imports a service, a
  command or the CLI; no service imports a command or the CLI;
- the front door stands on top: no module of the package imports the CLI (buildctl.cli, buildctl.__main__)
  but the CLI's own; what every command handler gets, its Context, lives in buildctl/commands/context.py;
- a command module parses, calls a service, prints: it imports no other command module (context.py, what
  they all take, aside);
- the builder (buildctl/builder/*) takes the plan and what the graph gives: it never imports the manifest
  model or pins, the lock file module or the locker;
- stages run downhill where their order is settled: the manifest and the lock read no graph (the graph is
  made from them), the registry client reads nothing of ship/ (shipping uses the registry);
- docker only in buildctl/engine/, rich only in buildctl/ui.py, yaml only in buildctl/manifest/ and
  buildctl/config.py (bench/ and smoke/ included).

Every import counts, at any depth: inside functions and under ``if TYPE_CHECKING:`` too (a type is a
dependency as well).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "buildctl"

BUILDER_MAY_NOT = ("buildctl.manifest.model", "buildctl.manifest.pins", "buildctl.lock.lockfile", "buildctl.lock.lock",
                   "buildctl.lock.resolve", "buildctl.lock.resolvers", "buildctl.lock.drift")
# The smoke runner lives in builder/ for now and reads the manifest's smoke section and the lock (what the image
# must contain): it is the lead's, to move to a room of its own. Named here so that nothing else slips in.
BUILDER_EXCEPTIONS: set[str] = set()
# (stage, the stages it may not import): the order of the stages that is settled
DOWNHILL = (("buildctl.manifest", ("buildctl.graph", "buildctl.lock", "buildctl.builder")),
            ("buildctl.lock", ("buildctl.graph", "buildctl.builder")),
            ("buildctl.registry", ("buildctl.ship",)))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``path``; ``from a import b`` yields ``a`` and ``a.b`` (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def layer(mod: str) -> str:
    """commands, services, cli, or stage (every other module of the package)."""
    parts = mod.split(".")
    if parts[:2] == ["buildctl", "commands"]:
        return "commands"
    if parts[:2] == ["buildctl", "services"]:
        return "services"
    if parts[:2] in (["buildctl", "cli"], ["buildctl", "__main__"]):
        return "cli"
    return "stage"


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


@functools.cache
def violations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"upward": [], "imports the CLI": [], "command imports command": [],
                                   "builder reads manifest or lock": [],
                                   "docker outside engine/": [], "rich outside ui.py": [],
                                   "yaml outside manifest/": [], "stage imports a stage above it": []}
    for path in sources("buildctl"):
        me = module_name(path)
        mine = layer(me)
        for line, mod in imports(path):
            if not under(mod, "buildctl"):
                continue
            theirs = layer(mod)
            where = f"{rel(path)}:{line} imports {mod}"
            if mine == "stage" and theirs in ("services", "commands", "cli"):
                found["upward"].append(where)
            if mine == "services" and theirs in ("commands", "cli"):
                found["upward"].append(where)
            if mine != "cli" and theirs == "cli":
                found["imports the CLI"].append(where)
            if (mine == "commands" and theirs == "commands" and mod.count(".") >= 2
                    and mod.split(".")[2] not in (me.split(".")[2], "__init__", "context")):
                found["command imports command"].append(where)
            if any(under(me, low) and any(under(mod, high) for high in above) for low, above in DOWNHILL):
                found["stage imports a stage above it"].append(where)
            if (rel(path).startswith("buildctl/builder/") and rel(path) not in BUILDER_EXCEPTIONS
                    and any(under(mod, banned) for banned in BUILDER_MAY_NOT)):
                found["builder reads manifest or lock"].append(where)
    for path in sources("buildctl", "bench", "smoke"):
        for line, mod in imports(path):
            where = f"{rel(path)}:{line} imports {mod}"
            if under(mod, "docker") and not rel(path).startswith("buildctl/engine/"):
                found["docker outside engine/"].append(where)
            if under(mod, "rich") and rel(path) != "buildctl/ui.py":
                found["rich outside ui.py"].append(where)
            if under(mod, "yaml") and not (rel(path).startswith("buildctl/manifest/") or rel(path) == "buildctl/config.py"):
                found["yaml outside manifest/"].append(where)
    return found


@pytest.mark.parametrize("rule", ["upward", "imports the CLI", "command imports command", "builder reads manifest or lock",
                                  "docker outside engine/", "rich outside ui.py", "yaml outside manifest/",
                                  "stage imports a stage above it"])
def test_import_rule(rule: str) -> None:
    bad = sorted(set(violations()[rule]))
    assert not bad, f"{rule}:\n  " + "\n  ".join(bad)


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The rules are only as good as the reader: plain, from, relative, nested and TYPE_CHECKING imports."""
    f = PACKAGE / "builder" / "__init__.py"
    assert module_name(f) == "buildctl.builder"
    src = ROOT / "buildctl" / "builder" / "pipeline.py"
    assert module_name(src) == "buildctl.builder.pipeline"
    probe = tmp_path / "probe.py"
    probe.write_text("import docker\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from buildctl.services.target import Target\n"
                     "def f():\n    from buildctl.commands import build\n")
    tree = [m for _, m in _imports_of_text(probe)]
    assert "docker" in tree and "buildctl.services.target" in tree and "buildctl.commands.build" in tree
    assert layer("buildctl.services.target") == "services" and layer("buildctl.graph.plan") == "stage"
    assert layer("buildctl.cli") == layer("buildctl.__main__") == "cli"


def _imports_of_text(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or ""
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
