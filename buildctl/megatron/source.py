"""Megatron-LM's Python source read without importing it: modules and imports followed, literals, enums, calls."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

# ------------------------------------------------------------------------------------ module access


@dataclass
class _Module:
    name: str  # dotted module name
    path: Path
    rel: str  # path relative to the root, for messages
    tree: ast.Module
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class _ClassRef:
    module: _Module
    node: ast.ClassDef


class _Source:
    """Parsed modules of one tree, imports followed the way Python would, without executing anything."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, _Module | None] = {}
        self._lines: dict[str, list[str]] = {}
        self.notes: list[str] = []

    def module(self, name: str) -> _Module | None:
        if name not in self._modules:
            self._modules[name] = self._load(name)
        return self._modules[name]

    def _load(self, name: str) -> _Module | None:
        base = self.root.joinpath(*name.split("."))
        for path, is_pkg in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
            if path.is_file():
                try:
                    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
                except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
                    self.notes.append(f"cannot parse {path.relative_to(self.root)}: {exc}")
                    return None
                return _Module(name=name, path=path, rel=str(path.relative_to(self.root)), tree=tree,
                               is_package=is_pkg)
        return None

    def comments(self, mod: _Module, first: int, last: int) -> str:
        """The ``#`` comments on source lines first..last (a '#' inside a string is taken too: rare)."""
        if mod.name not in self._lines:
            self._lines[mod.name] = mod.path.read_text(encoding="utf-8").splitlines()
        lines = self._lines[mod.name][first - 1:last]
        return " ".join(line.partition("#")[2].strip() for line in lines if "#" in line)

    def module_for_file(self, rel: str) -> _Module | None:
        name = rel.removesuffix(".py").replace("/", ".")
        return self.module(name.removesuffix(".__init__"))

    # -- names

    @staticmethod
    def _absolute(mod: _Module, level: int, target: str | None) -> str:
        if level == 0:
            return target or ""
        parts = mod.package.split(".") if mod.package else []
        parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
        return ".".join([*parts, target] if target else parts)

    def imports(self, mod: _Module, body: Iterable[ast.AST]) -> dict[str, tuple[str, str | None]]:
        """Local name -> (module, attribute) for the import statements directly in ``body``
        (and in try/if blocks of it, where optional imports live)."""
        out: dict[str, tuple[str, str | None]] = {}
        for node in _flat(body):
            if isinstance(node, ast.ImportFrom):
                src = self._absolute(mod, node.level, node.module)
                for alias in node.names:
                    out[alias.asname or alias.name] = (src, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        out[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        out[top] = (top, None)
        return out

    def resolve_class(self, mod: _Module, expr: ast.expr, scope: Mapping[str, tuple[str, str | None]],
                      depth: int = 0) -> _ClassRef | None:
        """The class an expression names, seen from ``mod`` with the extra local imports ``scope``."""
        if depth > 12:
            return None
        if isinstance(expr, ast.Name):
            for node in mod.tree.body:
                if isinstance(node, ast.ClassDef) and node.name == expr.id:
                    return _ClassRef(mod, node)
            names = {**self.imports(mod, mod.tree.body), **scope}
            if expr.id in names:
                src, attr = names[expr.id]
                return self._class_in(src, attr, depth + 1) if attr else None
            return None
        if isinstance(expr, ast.Attribute):
            dotted = _dotted(expr.value)
            if dotted is None:
                return None
            names = {**self.imports(mod, mod.tree.body), **scope}
            head, _, rest = dotted.partition(".")
            if head in names:
                src, attr = names[head]
                base = f"{src}.{attr}" if attr else src
                return self._class_in(f"{base}.{rest}" if rest else base, expr.attr, depth + 1)
        return None

    def _class_in(self, module_name: str, name: str, depth: int) -> _ClassRef | None:
        target = self.module(module_name)
        if target is None:
            return None
        return self.resolve_class(target, ast.Name(id=name), {}, depth)


def _flat(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Statements of a body, descending into if/try blocks (not into functions or classes)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _flat(node.body)
            yield from _flat(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _flat(node.body)
            for h in node.handlers:
                yield from _flat(h.body)
            yield from _flat(node.orelse)
            yield from _flat(node.finalbody)


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr}" if head else None
    return None


def _const_str(expr: ast.expr | None) -> str | None:
    """A string literal, including implicit concatenation and f-strings' literal parts."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        return "".join(v.value for v in expr.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        left, right = _const_str(expr.left), _const_str(expr.right)
        if left is not None and right is not None:
            return left + right
    return None


def _literal(expr: ast.expr) -> object:
    try:
        return ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


class _Unknown:
    pass


_UNKNOWN = _Unknown()


# ------------------------------------------------------------------------------------------ enums


def _enum_members(ref: _ClassRef) -> list[tuple[str, object]] | None:
    """(name, value) of each member of an Enum class, in order; None when the class is not an Enum."""
    bases = {(_dotted(b) or "").rpartition(".")[2] for b in ref.node.bases}
    if not bases & {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"}:
        return None
    members: list[tuple[str, object]] = []
    auto = 0
    for node in ref.node.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("_"):
                continue
            if isinstance(node.value, ast.Call) and (_dotted(node.value.func) or "").endswith("auto"):
                auto += 1
                members.append((name, auto))
            else:
                value = _literal(node.value)
                members.append((name, value))
                if isinstance(value, int):
                    auto = value
    return members


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (_dotted(target) or "").rpartition(".")[2] == "dataclass":
            return True
    return False


def _scope_of(mod: _Module, src: _Source, node: ast.AST) -> dict[str, tuple[str, str | None]]:
    """Imports of the function that holds ``node`` (Megatron imports config classes inside functions)."""
    for fn in ast.walk(mod.tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and any(n is node for n in ast.walk(fn)):
            return src.imports(mod, ast.walk(fn))
    return {}


def _calls_in_functions(tree: ast.Module) -> Iterator[tuple[ast.AST | None, ast.Call]]:
    """Every call with the top-level function that holds it (None at module level)."""
    for top in tree.body:
        holder = top if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) else None
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                yield holder, node


def _calls_with_conditions(node: ast.AST, condition: str | None) -> Iterator[tuple[ast.Call, str | None]]:
    """Calls under ``node`` with the if-tests they sit under (joined), for flags added conditionally."""
    if isinstance(node, ast.If):
        test = ast.unparse(node.test)
        inner = test if condition is None else f"{condition} and {test}"
        yield from _calls_with_conditions(node.test, condition)
        for child in node.body:
            yield from _calls_with_conditions(child, inner)
        negated = f"not ({test})" if condition is None else f"{condition} and not ({test})"
        for child in node.orelse:
            yield from _calls_with_conditions(child, negated)
        return
    if isinstance(node, ast.Call):
        yield node, condition
    for sub in ast.iter_child_nodes(node):
        yield from _calls_with_conditions(sub, condition)


def _dead_functions(tree: ast.Module) -> set[str]:
    """Top-level functions of arguments.py that nothing in it refers to (their flags are never added)."""
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
    return defined - used


def _version(src: _Source) -> str | None:
    mod = src.module("megatron.core.package_info")
    if mod is None:
        return None
    values: dict[str, object] = {}
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = _literal(node.value)
    parts = [values.get(k) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(isinstance(p, int | str) for p in parts):
        return None
    pre = values.get("PRE_RELEASE")
    return ".".join(str(p) for p in parts) + (str(pre) if isinstance(pre, str) else "")
