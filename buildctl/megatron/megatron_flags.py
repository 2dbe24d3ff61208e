"""The command-line flags a Megatron-LM source tree accepts, read statically (Megatron is never imported).

Megatron builds its parser in megatron/training/arguments.py in two ways:

- literal ``group.add_argument('--flag', '--alias', ..., type=..., choices=..., action=..., dest=...)``
  calls (every version; 591 of them at effebd81), where a static scan must take every option string,
  allow ``_`` in names, follow ``argparse.BooleanOptionalAction`` (which adds ``--no-X``), and resolve
  choices written as ``list(AttnBackend)`` or ``[e.value for e in StrictHandling]`` from the enum's
  source;
- from Megatron 72230d25 (2025-12-10) on, ``ArgumentGroupFactory(SomeConfig, exclude=[...])``
  (megatron/training/argument_utils.py), which turns each dataclass field into ``--field-name`` (``_``
  -> ``-``), a bool field whose default is not False into ``--no-field``/``--disable-field``
  (store_false), ``Literal[...]``/Enum annotations into choices, ``list[X]`` into ``nargs='+'``, and
  lets ``field(metadata={"argparse_meta": {...}})`` override any of it. A literal scan of such a
  version misses --fp8-recipe, --attention-backend, --moe-flex-dispatcher-backend and many more.

The entry script (pretrain_gpt.py) may add flags through ``extra_args_provider=``; those are scanned
too when the script is given, with the condition under which they are added.

What the scan cannot resolve it says in ``FlagTable.notes`` instead of guessing silently.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ValueType = Literal["int", "float", "str", "bool", "other"]
Action = Literal["store", "store_true", "store_false", "store_const", "boolean_optional", "append", "extend",
                 "count", "other"]
Origin = Literal["add_argument", "dataclass"]
Choice = str | int | float

ARGUMENTS_PY = "megatron/training/arguments.py"
_ACTIONS: dict[str, Action] = {
    "store": "store", "store_true": "store_true", "store_false": "store_false", "store_const": "store_const",
    "append": "append", "extend": "extend", "count": "count",
}
_TYPES: dict[str, ValueType] = {"int": "int", "float": "float", "str": "str", "bool": "bool"}
# "--enable-cuda-graph is deprecated", "--tokenizer-hf-use-fast argument is deprecated"; not "--x=full is ..."
_DEPRECATED_MENTION = re.compile(r"(--[A-Za-z0-9][\w-]*)(?:\s+(?:argument|flag|option))?\s+(?:is|are)\s+deprecated",
                                 re.IGNORECASE)
_DEPRECATED_WORD = re.compile(r"\b(?:DEPRECATED|Deprecated)\b|\b(?:flag|argument|option) is deprecated\b")
# "use --x instead", 'Use "--x ..."', "see --x", "replaced by cuda_graph_impl" (a dest: the caller maps it)
_REPLACEMENT = re.compile(
    r"\b(?:use|see|replaced by|in favou?r of)\s+[\"'`]?(--[A-Za-z0-9][\w-]*|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b",
    re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class FlagSpec:
    """One declaration: every option string it accepts and how argparse treats a value."""

    options: tuple[str, ...]
    dest: str
    action: Action
    nargs: str | int | None = None
    value_type: ValueType = "str"
    choices: tuple[Choice, ...] | None = None  # values accepted after type conversion; None: any
    negated: tuple[str, ...] = ()  # options that store False (BooleanOptionalAction's --no-X)
    deprecated: str | None = None  # Megatron's own words, when it marks the flag deprecated
    condition: str | None = None  # the flag exists only when this holds (an optional module, ...)
    origin: Origin = "add_argument"
    source: str = ""  # "megatron/training/arguments.py:1607" or "...transformer_config.py:125 (TransformerConfig.x)"

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append", "extend") and self.nargs != 0

    def value_for(self, option: str) -> bool | None:
        """The constant a value-less option stores (True/False), None for anything else."""
        if self.action == "store_true":
            return True
        if self.action == "store_false":
            return False
        if self.action == "boolean_optional":
            return option not in self.negated
        return None


@dataclass(frozen=True, kw_only=True)
class FlagTable:
    root: str
    version: str | None  # megatron/core/package_info.py, when present
    flags: Mapping[str, FlagSpec]  # option string -> its declaration
    allow_abbrev: bool  # argparse's prefix matching (Megatron turns it off)
    generated: bool  # some flags come from ArgumentGroupFactory dataclasses
    notes: tuple[str, ...] = ()

    def get(self, option: str) -> FlagSpec | None:
        return self.flags.get(option)

    def __len__(self) -> int:
        return len(self.flags)


class NotMegatronSource(Exception):
    """The folder is not a Megatron-LM tree (no megatron/training/arguments.py)."""


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


# ------------------------------------------------------------------------------------- the scanner


@dataclass
class _Scan:
    src: _Source
    flags: dict[str, FlagSpec] = field(default_factory=dict)
    generated: bool = False

    def note(self, text: str) -> None:
        self.src.notes.append(text)

    def add(self, spec: FlagSpec) -> None:
        for opt in spec.options:
            # First declaration wins, as argparse would refuse a second one (conflict_handler='error').
            self.flags.setdefault(opt, spec)

    # -- add_argument calls

    def scan_add_argument_calls(self, mod: _Module, fn: ast.AST, condition: str | None) -> None:
        for call, cond in _calls_with_conditions(fn, condition):
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
                self.add_argument(mod, call, cond)

    def add_argument(self, mod: _Module, call: ast.Call, condition: str | None) -> None:
        where = f"{mod.rel}:{call.lineno}"
        options: list[str] = []
        for a in call.args:
            text = _const_str(a)
            if text is None:
                self.note(f"{where}: an option string that is not a literal ({ast.unparse(a)}) was skipped")
                continue
            options.append(text)
        options = [o for o in options if o.startswith("-")]
        if not options:
            return
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        action, negated = self._action(kw.get("action"), options, where)
        if action == "boolean_optional":
            negated = tuple(f"--no-{o[2:]}" for o in options if o.startswith("--"))
            options = [*options, *negated]
        long = next((o for o in options if o.startswith("--")), options[0])
        dest_text = _const_str(kw.get("dest")) if "dest" in kw else None
        dest = dest_text or long.lstrip("-").replace("-", "_")
        help_text = _const_str(kw.get("help")) or ""
        nargs = _literal(kw["nargs"]) if "nargs" in kw else None
        comment = self.src.comments(mod, call.lineno, call.end_lineno or call.lineno)
        self.add(FlagSpec(
            options=tuple(options),
            dest=dest,
            action=action,
            nargs=nargs if isinstance(nargs, str | int) else None,
            value_type=self._type(kw.get("type"), action),
            choices=self._choices(mod, kw.get("choices"), kw.get("type"), where) if "choices" in kw else None,
            negated=negated,
            deprecated=_deprecation(help_text, dest, comment),
            condition=condition,
            origin="add_argument",
            source=where,
        ))

    def _action(self, expr: ast.expr | None, options: list[str], where: str) -> tuple[Action, tuple[str, ...]]:
        if expr is None:
            return "store", ()
        name = _const_str(expr)
        if name is not None:
            if name in _ACTIONS:
                return _ACTIONS[name], ()
            self.note(f"{where}: action {name!r} is not one buildctl knows; its values are not checked")
            return "other", ()
        dotted = _dotted(expr) or ""
        if dotted.endswith("BooleanOptionalAction"):
            return "boolean_optional", ()
        self.note(f"{where}: custom action {ast.unparse(expr)} for {options[0]}; its values are not checked")
        return "other", ()

    @staticmethod
    def _type(expr: ast.expr | None, action: Action) -> ValueType:
        if expr is None:
            return "bool" if action in ("store_true", "store_false", "boolean_optional") else "str"
        if isinstance(expr, ast.Name) and expr.id in _TYPES:
            return _TYPES[expr.id]
        if isinstance(expr, ast.Lambda) and isinstance(expr.body, ast.Subscript):
            return "str"  # lambda x: SomeEnum[x]: the value is a member name, checked by choices
        return "other"

    def _choices(self, mod: _Module, expr: ast.expr | None, type_expr: ast.expr | None,
                 where: str) -> tuple[Choice, ...] | None:
        if expr is None:
            return None
        value = _literal(expr)
        if isinstance(value, list | tuple | set | frozenset):
            return tuple(v for v in value if isinstance(v, str | int | float) and not isinstance(v, bool))
        # range(a, b[, step]) of literals
        if isinstance(expr, ast.Call) and _dotted(expr.func) == "range":
            bounds = [b for b in (_literal(a) for a in expr.args) if isinstance(b, int)]
            if len(bounds) == len(expr.args) and 1 <= len(bounds) <= 3:
                return tuple(range(*bounds))
        members, how = self._enum_choices(mod, expr, type_expr)
        if members is not None:
            return tuple(v for v in (name if how == "name" else val for name, val in members)
                         if isinstance(v, str | int | float))
        # a module-level constant list: choices=SOME_CHOICES
        if isinstance(expr, ast.Name):
            for node in mod.tree.body:
                if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id
                                                         for t in node.targets)):
                    value = _literal(node.value)
                    if isinstance(value, list | tuple):
                        return tuple(v for v in value if isinstance(v, str | int | float))
        self.note(f"{where}: choices {ast.unparse(expr)} could not be read; values are not checked against them")
        return None

    def _enum_choices(self, mod: _Module, expr: ast.expr,
                      type_expr: ast.expr | None) -> tuple[list[tuple[str, object]] | None, str]:
        """choices=list(E) / tuple(E) / [e for e in E] / [e.value for e in E] / [e.name for e in E]."""
        enum_expr: ast.expr | None = None
        how = "name"
        if isinstance(expr, ast.Call) and _dotted(expr.func) in ("list", "tuple") and len(expr.args) == 1:
            enum_expr = expr.args[0]
        elif isinstance(expr, ast.ListComp | ast.SetComp) and len(expr.generators) == 1:
            gen = expr.generators[0]
            enum_expr = gen.iter
            if isinstance(expr.elt, ast.Attribute) and expr.elt.attr == "value":
                how = "value"
        if enum_expr is None:
            return None, how
        # type=SomeEnum looks a member up by value; type=lambda x: SomeEnum[x] by name.
        if how == "name" and type_expr is not None and _dotted(type_expr) == _dotted(enum_expr):
            how = "value"
        ref = self.src.resolve_class(mod, enum_expr, _scope_of(mod, self.src, expr))
        if ref is None:
            return None, how
        return _enum_members(ref), how

    # -- ArgumentGroupFactory(SomeConfig, exclude=[...])

    def scan_factories(self, mod: _Module) -> None:
        for fn, call in _calls_in_functions(mod.tree):
            if (_dotted(call.func) or "").rpartition(".")[2] != "ArgumentGroupFactory" or not call.args:
                continue
            self.generated = True
            where = f"{mod.rel}:{call.lineno}"
            scope = self.src.imports(mod, ast.walk(fn)) if fn is not None else {}
            ref = self.src.resolve_class(mod, call.args[0], scope)
            if ref is None:
                self.note(f"{where}: ArgumentGroupFactory({ast.unparse(call.args[0])}): the dataclass was not "
                          "found in the tree; its flags are unknown to the lint")
                continue
            exclude_expr = next((k.value for k in call.keywords if k.arg == "exclude"), None)
            if exclude_expr is None and len(call.args) > 1:
                exclude_expr = call.args[1]
            exclude = self._exclude(fn, exclude_expr, where)
            for fld in self._dataclass_fields(ref, 0).values():
                if fld.name in exclude or not fld.init:
                    continue
                self.add(self._field_flag(fld))

    def _exclude(self, fn: ast.AST | None, expr: ast.expr | None, where: str) -> set[str]:
        if expr is None:
            return set()
        value = _literal(expr)
        if isinstance(value, list | tuple | set):
            return {str(v) for v in value}
        if value is None:
            return set()
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self._exclude(fn, expr.left, where) | self._exclude(fn, expr.right, where)
        if isinstance(expr, ast.Name) and fn is not None:
            for node in ast.walk(fn):
                if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id
                                                         for t in node.targets)):
                    return self._exclude(None, node.value, where)
        self.note(f"{where}: exclude={ast.unparse(expr)} could not be read; every field is taken as a flag")
        return set()

    def _dataclass_fields(self, ref: _ClassRef, depth: int) -> dict[str, _Field]:
        """Fields in dataclasses order: those of the bases first, a redefinition keeps its place."""
        out: dict[str, _Field] = {}
        if depth > 12:
            return out
        scope = self.src.imports(ref.module, ref.module.tree.body)
        for base in reversed(ref.node.bases):
            base_ref = self.src.resolve_class(ref.module, base, scope)
            if base_ref is None:
                name = _dotted(base) or ast.unparse(base)
                if name not in ("object", "Generic", "ABC", "abc.ABC") and not name.startswith("typing"):
                    self.note(f"{ref.module.rel}:{ref.node.lineno}: base class {name} of {ref.node.name} was not "
                              "found; fields it declares are unknown to the lint")
                continue
            out.update(self._dataclass_fields(base_ref, depth + 1))
        if not _is_dataclass(ref.node):
            return out
        body = ref.node.body
        for i, node in enumerate(body):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                try:
                    ann = ast.parse(ann.value, mode="eval").body
                except SyntaxError:
                    continue
            head = (_dotted(ann.value) if isinstance(ann, ast.Subscript) else _dotted(ann)) or ""
            if head.rpartition(".")[2] in ("ClassVar", "InitVar", "KW_ONLY"):
                continue
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = _const_str(nxt.value) if isinstance(nxt, ast.Expr) else None
            out[node.target.id] = _Field.parse(node.target.id, ann, node.value, doc or "", ref, node.lineno)
        return out

    def _field_flag(self, fld: _Field) -> FlagSpec:
        """What ArgumentGroupFactory makes of one field (argument_utils.py, from 72230d25 on)."""
        where = f"{fld.ref.module.rel}:{fld.line} ({fld.ref.node.name}.{fld.name})"
        names = ["--" + fld.name.replace("_", "-")]
        action: Action = "store"
        nargs: str | int | None = None
        value_type, choices, nargs = self._annotation(fld, fld.annotation, where)
        if value_type == "bool":
            if fld.default_is_false:
                action = "store_true"
            else:
                action = "store_false"
                names = ["--no-" + fld.name.replace("_", "-"), "--disable-" + fld.name.replace("_", "-")]
            nargs = None
        dest = fld.name
        meta = fld.meta
        help_text = fld.doc
        if meta:
            if "arg_names" in meta:
                got = _literal(meta["arg_names"])
                if isinstance(got, list | tuple) and all(isinstance(n, str) for n in got):
                    names = list(got)
                else:
                    self.note(f"{where}: argparse_meta arg_names could not be read")
            if "action" in meta:
                action, _ = self._action(meta["action"], names, where)
                if action in ("store_true", "store_false", "boolean_optional", "count", "store_const"):
                    value_type = "bool" if action != "count" else "int"
            if "type" in meta:
                value_type = self._type(meta["type"], action)
            if "nargs" in meta:
                got = _literal(meta["nargs"])
                nargs = got if isinstance(got, str | int) else None
            if "choices" in meta:
                choices = self._choices(fld.ref.module, meta["choices"], meta.get("type"), where)
            if "dest" in meta:
                dest = _const_str(meta["dest"]) or dest
            if "help" in meta:
                help_text = _const_str(meta["help"]) or help_text
        negated: tuple[str, ...] = ()
        if action == "boolean_optional":
            negated = tuple(f"--no-{n[2:]}" for n in names if n.startswith("--"))
            names = [*names, *negated]
        return FlagSpec(options=tuple(names), dest=dest, action=action, nargs=nargs, value_type=value_type,
                        choices=choices, negated=negated, deprecated=_deprecation(help_text, dest),
                        origin="dataclass", source=where)

    def _annotation(self, fld: _Field, ann: ast.expr,
                    where: str) -> tuple[ValueType, tuple[Choice, ...] | None, str | int | None]:
        """(value type, choices, nargs) the way ArgumentGroupFactory._extract_type infers them."""
        if isinstance(ann, ast.Constant) and ann.value is None:
            return "other", None, None
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
            parts = [p for p in (ann.left, ann.right) if not (isinstance(p, ast.Constant) and p.value is None)]
            if len(parts) == 1:
                return self._annotation(fld, parts[0], where)
            return "other", None, None
        if isinstance(ann, ast.Subscript):
            head = (_dotted(ann.value) or "").rpartition(".")[2]
            inner = ann.slice
            items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
            if head == "Optional":
                return self._annotation(fld, items[0], where)
            if head == "Union":
                rest = [p for p in items if not (isinstance(p, ast.Constant) and p.value is None)]
                if len(rest) == 1:
                    return self._annotation(fld, rest[0], where)
                return "other", None, None  # Megatron needs argparse_meta for these
            if head in ("list", "List"):
                value_type, choices, _ = self._annotation(fld, items[0], where)
                return value_type, choices, "+"
            if head == "Literal":
                values = [_literal(i) for i in items]
                choices = tuple(v for v in values if isinstance(v, str | int | float) and not isinstance(v, bool))
                first = values[0] if values else ""
                vt: ValueType = "int" if isinstance(first, int) else "float" if isinstance(first, float) else "str"
                return vt, choices, None
            return "other", None, None
        name = _dotted(ann) or ""
        if name in _TYPES:
            return _TYPES[name], None, None
        ref = self.src.resolve_class(fld.ref.module, ann, {})
        if ref is not None:
            members = _enum_members(ref)
            if members is not None:  # Enum fields take member names (config_type[cli_arg])
                return "str", tuple(n for n, _ in members), None
        return "other", None, None

    # -- the entry script's extra_args_provider

    def scan_entry_script(self, rel: str) -> None:
        mod = self.src.module_for_file(rel)
        if mod is None:
            self.note(f"entry script {rel} is not in the tree; flags it adds are unknown to the lint")
            return
        self.scan_add_argument_calls(mod, mod.tree, None)
        imports = self.src.imports(mod, mod.tree.body)
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg != "extra_args_provider":
                    continue
                target, condition = kw.value, None
                if isinstance(kw.value, ast.IfExp):
                    target, condition = kw.value.body, ast.unparse(kw.value.test)
                if isinstance(target, ast.Name) and target.id in imports:
                    src_mod, attr = imports[target.id]
                    self._scan_provider(src_mod, attr, condition, rel)

    def _scan_provider(self, module_name: str, attr: str | None, condition: str | None, rel: str) -> None:
        mod = self.src.module(module_name)
        fn = None
        if mod is not None:
            fn = next((n for n in mod.tree.body if isinstance(n, ast.FunctionDef) and n.name == attr), None)
        if mod is None or fn is None:
            self.note(f"{rel}: extra_args_provider {module_name}.{attr} was not found in the tree")
            return
        cond = f"{condition} (in {rel})" if condition else None
        self.scan_add_argument_calls(mod, fn, cond)


@dataclass(frozen=True)
class _Field:
    name: str
    annotation: ast.expr
    default: ast.expr | None  # None: no default value (MISSING)
    init: bool
    meta: Mapping[str, ast.expr]
    doc: str
    ref: _ClassRef
    line: int

    @property
    def default_is_false(self) -> bool:
        # ArgumentGroupFactory tests `attribute.default == False`: True for False and 0, not for None.
        d = self.default
        if not isinstance(d, ast.Constant):
            return False
        return d.value is False or (type(d.value) in (int, float) and d.value == 0)

    @staticmethod
    def parse(name: str, ann: ast.expr, value: ast.expr | None, doc: str, ref: _ClassRef, line: int) -> _Field:
        default: ast.expr | None = value
        init = True
        meta: dict[str, ast.expr] = {}
        if isinstance(value, ast.Call) and (_dotted(value.func) or "").rpartition(".")[2] == "field":
            default = None
            for kw in value.keywords:
                if kw.arg == "default":
                    default = kw.value
                elif kw.arg == "init":
                    init = _literal(kw.value) is not False
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                        if k is not None and _const_str(k) == "argparse_meta" and isinstance(v, ast.Dict):
                            meta = {s: mv for mk, mv in zip(v.keys, v.values, strict=True)
                                    if mk is not None and (s := _const_str(mk)) is not None}
        return _Field(name=name, annotation=ann, default=default, init=init, meta=meta, doc=doc, ref=ref,
                      line=line)


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


def _deprecation(help_text: str, dest: str, comment: str = "") -> str | None:
    """Megatron's own deprecation mark on a declaration: its help text, or a *_deprecated dest.

    Only the capitalised word (a sentence of its own: "Deprecated: use --x", "DEPRECATED. ...") or "this
    flag is deprecated" counts: lower-case mentions are about values or formats ('"full" is deprecated').
    """
    text = " ".join(help_text.split())
    if _DEPRECATED_WORD.search(text):
        return text
    if "deprecated" in dest:
        return " ".join(p for p in (text, comment) if p) or f"its dest {dest} marks it deprecated"
    return None


def replacement_in(text: str) -> str | None:
    """The flag (or dest) a deprecation message points to ("use --x instead"), if it names one."""
    m = _REPLACEMENT.search(text)
    return m.group(1) if m else None


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


def scan(root: Path, *, entry_script: str | None = None) -> FlagTable:
    """Every flag the tree's Megatron parser accepts (plus, with ``entry_script``, those the script adds)."""
    src = _Source(root)
    mod = src.module_for_file(ARGUMENTS_PY)
    if mod is None:
        raise NotMegatronSource(f"{root} has no readable {ARGUMENTS_PY}")
    s = _Scan(src)
    dead = _dead_functions(mod.tree)
    for top in mod.tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            cond = f"never: {top.name}() is not called" if top.name in dead else None
            s.scan_add_argument_calls(mod, top, cond)
    s.scan_factories(mod)
    # Deprecations Megatron states outside the declarations ("--enable-cuda-graph is deprecated, use ...").
    mentions: dict[str, str] = {}
    for node in ast.walk(mod.tree):
        text = _const_str(node) if isinstance(node, ast.Constant | ast.JoinedStr) else None
        if text and "deprecated" in text.lower():
            for m in _DEPRECATED_MENTION.finditer(text):
                mentions.setdefault(m.group(1), " ".join(text.split()))
    flags = dict(s.flags)
    for opt, message in mentions.items():
        spec = flags.get(opt)
        if spec is None:
            continue
        if spec.deprecated is None:
            updated = dataclasses.replace(spec, deprecated=message)
        elif replacement_in(spec.deprecated) is None and replacement_in(message) is not None:
            updated = dataclasses.replace(spec, deprecated=f"{spec.deprecated} {message}")
        else:
            continue
        for o in spec.options:
            if flags.get(o) is spec:
                flags[o] = updated
    # argparse's own (add_help=True, which Megatron keeps)
    for opt in ("-h", "--help"):
        flags.setdefault(opt, FlagSpec(options=("-h", "--help"), dest="help", action="other", nargs=0,
                                       source="argparse"))
    if entry_script:
        s.flags = flags
        s.scan_entry_script(entry_script)
        flags = dict(s.flags)
    allow_abbrev = True
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("ArgumentParser"):
            for kw in node.keywords:
                if kw.arg == "allow_abbrev" and _literal(kw.value) is False:
                    allow_abbrev = False
    return FlagTable(root=str(root), version=_version(src), flags=flags, allow_abbrev=allow_abbrev,
                     generated=s.generated, notes=tuple(dict.fromkeys(src.notes)))
