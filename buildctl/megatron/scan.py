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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from buildctl.megatron.flags import (
    _DEPRECATED_MENTION,
    Action,
    Choice,
    FlagSpec,
    FlagTable,
    NotMegatronSource,
    ValueType,
    _deprecation,
    replacement_in,
)
from buildctl.megatron.source import (
    _calls_in_functions,
    _calls_with_conditions,
    _ClassRef,
    _const_str,
    _dead_functions,
    _dotted,
    _enum_members,
    _is_dataclass,
    _literal,
    _Module,
    _scope_of,
    _Source,
    _version,
)

ARGUMENTS_PY = "megatron/training/arguments.py"
_ACTIONS: dict[str, Action] = {
    "store": "store", "store_true": "store_true", "store_false": "store_false", "store_const": "store_const",
    "append": "append", "extend": "extend", "count": "count",
}
_TYPES: dict[str, ValueType] = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


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

    def scan_add_argument_calls(self, mod: _Module, function: ast.AST, condition: str | None) -> None:
        for call, cond in _calls_with_conditions(function, condition):
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

    def _exclude(self, function: ast.AST | None, expr: ast.expr | None, where: str) -> set[str]:
        if expr is None:
            return set()
        value = _literal(expr)
        if isinstance(value, list | tuple | set):
            return {str(v) for v in value}
        if value is None:
            return set()
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self._exclude(function, expr.left, where) | self._exclude(function, expr.right, where)
        if isinstance(expr, ast.Name) and function is not None:
            for node in ast.walk(function):
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
