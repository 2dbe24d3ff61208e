"""Check the entrypoint's arguments against the pinned Megatron-LM source, before anything is built.

Two kinds of checks:

- flag checks, against the flags the Megatron tree declares (``megatron_flags.scan``; static, no
  import): unknown flags with the closest known ones, values outside choices, values of the wrong
  type or count, flags Megatron marks deprecated, flags that exist only when an optional module
  imports, and a flag given twice with different values (argparse silently keeps the last);
- consistency checks a person would otherwise do by hand, from the arguments alone (so they run even
  when the source is not at hand): the pipeline layout against --num-layers and PP x virtual stages,
  TP x PP x CP (x EP) and the data-parallel size against the GPU count the profile declares, the global
  batch against micro batch x DP, --moe-layer-freq against --num-layers, HybridEP's fp32 router, and
  --fp8-param-gather under --reuse-grad-buf-for-mxfp8-param-ag.

``lint`` never raises for what it finds; ``LintReport.raise_for_errors`` turns errors into
``ArgsLintFailed`` for the commands that must stop.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl.errors import ArgsLintFailed, Location
from buildctl.graph.entrypoint import (
    PATH_REF,
    effective_args,
    gpu_count,
    select_profile,
    variant_entrypoint,
)
from buildctl.manifest.model import NOWHERE, Arg, Manifest, Variant
from buildctl.megatron import megatron_rules as rules
from buildctl.megatron.megatron_flags import FlagSpec, FlagTable, NotMegatronSource, replacement_in, scan

Severity = Literal["error", "warning"]
# Rules about what the variant's hardware refuses (TE's recipes, grouped GEMM, HybridEP's NVLink domain):
# Megatron's validate_args does not see them, TE and DeepEP do at the first step.
HARDWARE_CHECKS = frozenset({"fp8-hardware", "hybridep-domain"})
_NO_EFFECT = re.compile(r"\bignored\b|\bno-op\b|\bno effect\b", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Finding:
    severity: Severity
    check: str  # unknown-flag, bad-choice, bad-type, bad-count, duplicate, deprecated, conditional, ...
    flag: str
    message: str
    suggestion: str = ""
    at: Location = field(default=NOWHERE)
    value: str = ""  # the value the rule judged, as the manifest gives it
    source: str = ""  # the upstream assertion the rule stands for (megatron_rules.where), when there is one

    def __str__(self) -> str:
        text = f"{self.at}: {self.severity}: {self.flag}: {self.message}"
        if self.source:
            text += f"\n  upstream: {self.source}"
        return text + (f"\n  fix: {self.suggestion}" if self.suggestion else "")

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "check": self.check, "rule": self.check, "flag": self.flag,
                "value": self.value, "message": self.message, "source": self.source,
                "suggestion": self.suggestion, "fix": self.suggestion, "file": self.at.file, "line": self.at.line,
                "column": self.at.column, "key": self.at.key}


@dataclass(frozen=True, kw_only=True)
class LintReport:
    stack: str
    variant: str
    profile: str | None
    gpus: int | None
    ran: bool  # whether the flags were checked against a Megatron source
    reason: str  # the source it ran against, or why the flag checks did not run
    megatron_root: str | None = None
    megatron_version: str | None = None
    known_flags: int = 0
    generated: bool = False  # the source generates flags from dataclasses (Megatron >= 72230d25)
    args_checked: int = 0
    findings: tuple[Finding, ...] = ()
    derived: Mapping[str, int | str] = field(default_factory=dict)  # DP size, virtual stages, ...
    notes: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        what = f"{self.stack} / {self.variant}" + (f" / profile {self.profile}" if self.profile else "")
        if self.ran:
            against = f"Megatron-LM {self.megatron_version or '(version unknown)'} at {self.megatron_root}"
            head = f"{what}: {self.args_checked} arguments checked against {against} ({self.known_flags} flags)"
        else:
            head = f"{what}: flags NOT checked against Megatron ({self.reason}); consistency checks ran"
        return f"{head}: {len(self.errors)} error(s), {len(self.warnings)} warning(s)"

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "variant": self.variant, "profile": self.profile, "gpus": self.gpus,
                "ran": self.ran, "reason": self.reason, "megatron_root": self.megatron_root,
                "megatron_version": self.megatron_version, "known_flags": self.known_flags,
                "generated": self.generated, "args_checked": self.args_checked, "ok": self.ok,
                "findings": [f.to_json() for f in self.findings], "derived": dict(self.derived),
                "notes": list(self.notes)}

    def raise_for_errors(self, *, detail: bool = True) -> None:
        """ArgsLintFailed when there are errors; ``detail`` lists them (False where they were just printed)."""
        if self.ok:
            return
        what = f"{len(self.errors)} error(s) in the entrypoint arguments of {self.stack}"
        if detail:
            what += ":\n" + "\n".join(str(f) for f in self.errors)
        raise ArgsLintFailed(
            what,
            why=(f"checked against {self.megatron_root}" if self.ran
                 else f"consistency checks only; the flags were not checked: {self.reason}"),
            fix=f"correct the arguments named above in the manifest, then run `buildctl lint-args {self.stack}`",
        )


# -------------------------------------------------------------------------------- source lookup


@dataclass(frozen=True, kw_only=True)
class SourceLookup:
    root: Path | None
    reason: str  # where the tree came from, or why there is none


class MegatronSourceLocator(Protocol):
    """Finds the prepared Megatron-LM tree of a manifest's ``entrypoint.megatron`` component."""

    def __call__(self, manifest: Manifest, variant: Variant) -> SourceLookup: ...


def given_source(root: Path) -> MegatronSourceLocator:
    """A locator for a tree the user names (``--megatron-src DIR``)."""

    def locate(manifest: Manifest, variant: Variant) -> SourceLookup:
        return SourceLookup(root=root, reason=f"given as {root}")

    return locate


def no_source_cache(manifest: Manifest, variant: Variant) -> SourceLookup:
    """Used until buildctl/sources/sources.py prepares trees on the host: says so instead of failing."""
    e = manifest.entrypoint
    if e is None or e.megatron is None:
        return SourceLookup(root=None, reason="the entrypoint names no Megatron component (entrypoint.megatron)")
    return SourceLookup(root=None, reason=(
        f"the source of component {e.megatron} is not prepared on this host (sources are prepared by "
        "`buildctl build`); pass --megatron-src DIR to check against a checkout"))


# ---------------------------------------------------------------------------------------- lint


@dataclass(frozen=True)
class _Use:
    """One argument as argparse sees it: an option and its values."""

    option: str
    values: tuple[str, ...]
    at: Location
    spec: FlagSpec | None

    @property
    def dest(self) -> str:
        return self.spec.dest if self.spec else self.option.lstrip("-").replace("-", "_")


def _entry_script(manifest: Manifest) -> str | None:
    """The Megatron-relative path of the script the command runs (pretrain_gpt.py), when it is one."""
    e = manifest.entrypoint
    assert e is not None
    script = next((w for w in reversed(e.command) if w.endswith(".py")), None)
    if script is None:
        return None
    if script.startswith("/"):
        prefix = e.workdir.rstrip("/") + "/"
        return script[len(prefix):] if script.startswith(prefix) else None
    return script


def lint(manifest: Manifest, variant: Variant, megatron_root: Path | None, profile: str | None = None, *,
         missing_reason: str = "no Megatron-LM source was given") -> LintReport:
    """Check the arguments of ``manifest``'s entrypoint (with ``profile`` laid over them).

    With ``megatron_root`` None the flag checks do not run and the report says why
    (``missing_reason``); the consistency checks run either way.
    """
    e = manifest.entrypoint
    if e is None:
        return LintReport(stack=manifest.stack, variant=variant.name, profile=None, gpus=None, ran=False,
                          reason="the stack has no entrypoint")
    e = variant_entrypoint(manifest, variant)  # the variant's drop/args/gpus laid over the entrypoint
    profile_name, prof = select_profile(e, profile)
    args = effective_args(e, prof)
    gpus = gpu_count(e, prof)
    defaults = {name: p.default for name, p in e.paths.items()}

    table: FlagTable | None = None
    reason = missing_reason
    if megatron_root is not None:
        try:
            table = scan(megatron_root, entry_script=_entry_script(manifest))
            reason = f"source at {megatron_root}"
        except NotMegatronSource as exc:
            reason = f"{exc}: not a Megatron-LM tree"
        except OSError as exc:
            reason = f"cannot read {megatron_root}: {exc}"

    uses = [_use(a, table, defaults) for a in args]
    findings: list[Finding] = []
    version = (table.version if table else None) or "(version unknown)"
    if table is not None:
        for u in uses:
            findings.extend(_check_flag(u, table, version))
    findings.extend(_duplicates(uses))
    gpus_from = f"profile {profile_name}" if prof is not None else "entrypoint.gpus"
    env = manifest.env_for(variant)
    env_at = variant.entrypoint.at if "NVLINK_DOMAIN_SIZE" in variant.entrypoint.env else manifest.at
    checks = _Consistency(uses, table, gpus, gpus_from, prof.at if prof is not None else e.at,
                          root=megatron_root if table is not None else None, variant=variant, env=env, env_at=env_at)
    findings.extend(checks.run())
    return LintReport(
        stack=manifest.stack, variant=variant.name, profile=profile_name, gpus=gpus,
        ran=table is not None, reason=reason,
        megatron_root=str(megatron_root) if table is not None else None,
        megatron_version=table.version if table else None,
        known_flags=len(table) if table else 0, generated=table.generated if table else False,
        args_checked=len(uses), findings=tuple(findings), derived=dict(checks.derived),
        notes=(table.notes if table else ()) + tuple(checks.notes),
    )


def _use(a: Arg, table: FlagTable | None, defaults: Mapping[str, str]) -> _Use:
    option, eq, inline = a.flag.partition("=")
    values = ((inline,) if eq else ()) + a.values
    # Site paths take their defaults here: the check is about the value's form, not the site.
    values = tuple(PATH_REF.sub(lambda m: defaults.get(m.group(1), m.group(0)), v) for v in values)
    spec = table.get(option) if table else None
    if spec is None and table is not None and table.allow_abbrev:
        matches = {s.dest: s for o, s in table.flags.items() if o.startswith(option)}
        spec = next(iter(matches.values())) if len(matches) == 1 else None
    return _Use(option=option, values=values, at=a.at, spec=spec)


def _check_flag(u: _Use, table: FlagTable, version: str) -> list[Finding]:
    out: list[Finding] = []

    def add(severity: Severity, check: str, message: str, suggestion: str = "") -> None:
        out.append(Finding(severity=severity, check=check, flag=u.option, message=message, suggestion=suggestion,
                           at=u.at))

    spec = u.spec
    if spec is None:
        known = sorted(o for o in table.flags if o.startswith("--"))
        close = difflib.get_close_matches(u.option, known, n=3, cutoff=0.6)
        add("error", "unknown-flag", f"Megatron-LM {version} has no such flag",
            (f"did you mean {' or '.join(close)}?" if close else "no similar flag; remove it or check the pinned commit"))
        return out
    if u.option not in spec.options:
        add("warning", "abbreviation", f"abbreviation of {spec.options[0]} (accepted only while the parser "
            "allows prefixes)", f"write {spec.options[0]}")
    if spec.condition is not None:
        add("warning", "conditional", f"Megatron adds this flag only when {spec.condition} ({spec.source})",
            "make sure that holds in the image, or the parser rejects the flag")
    if spec.deprecated is not None:
        note = spec.deprecated if len(spec.deprecated) <= 200 else spec.deprecated[:197] + "..."
        replacement = replacement_in(spec.deprecated)
        if replacement and not replacement.startswith("--"):
            by_dest = next((s for s in table.flags.values() if s.dest == replacement), None)
            replacement = by_dest.options[0] if by_dest else None
        if _NO_EFFECT.search(spec.deprecated):
            fix = "remove it: Megatron ignores it"
        elif replacement:
            fix = f"use {replacement} instead"
        else:
            fix = "see Megatron's note above"
        add("warning", "deprecated", f"deprecated in Megatron-LM {version}: {note!r}", fix)
    if spec.action == "other":
        return out  # a custom action: what it does with values is its own business
    n = len(u.values)
    if not spec.takes_value:
        if n:
            add("error", "bad-count", f"takes no value, but the manifest gives {list(u.values)}",
                f"write it bare ('- {u.option}'), or remove the value")
        return out
    expected = spec.nargs
    if expected is None and n != 1:
        add("error", "bad-count", f"takes exactly one value, got {n}",
            f"write '- {u.option}: VALUE'")
    elif expected == "+" and n < 1:
        add("error", "bad-count", "takes one or more values, got none", f"write '- {u.option}: [V1, V2]'")
    elif expected == "?" and n > 1:
        add("error", "bad-count", f"takes at most one value, got {n}")
    elif isinstance(expected, int) and n != expected:
        add("error", "bad-count", f"takes exactly {expected} values, got {n}")
    for v in u.values:
        if "${" in v:
            continue
        converted = _convert(v, spec)
        if converted is _BAD:
            add("error", "bad-type", f"{v!r} is not {'an integer' if spec.value_type == 'int' else 'a number'}",
                f"give {'an integer' if spec.value_type == 'int' else 'a number'}")
            continue
        if spec.value_type == "bool" and spec.action == "store":
            add("warning", "bad-type", f"type=bool turns every non-empty value into True, {v!r} included",
                "give an empty value for False, or drop the flag")
        if spec.choices is not None and converted not in spec.choices:
            choices = [str(c) for c in spec.choices]
            close = difflib.get_close_matches(v, choices, n=1, cutoff=0.5)
            add("error", "bad-choice", f"{v!r} is not one of {', '.join(choices)}",
                f"did you mean {close[0]!r}?" if close else f"choose one of {', '.join(choices)}")
    return out


class _Bad:
    pass


_BAD = _Bad()


def _convert(value: str, spec: FlagSpec) -> object:
    """The value as argparse's type would make it (int/float), or _BAD; other types stay text."""
    try:
        if spec.value_type == "int":
            return int(value)
        if spec.value_type == "float":
            return float(value)
    except ValueError:
        return _BAD
    return value


def _effective(u: _Use) -> tuple[str, ...] | bool:
    if u.spec is not None and not u.spec.takes_value:
        const = u.spec.value_for(u.option)
        return True if const is None else const
    if u.spec is None and not u.values:
        return not u.option.startswith("--no-")
    return u.values


def _duplicates(uses: Sequence[_Use]) -> list[Finding]:
    """A flag given twice: argparse keeps the last value without a word."""
    by_dest: dict[str, list[_Use]] = {}
    for u in uses:
        if u.spec is not None and u.spec.action in ("append", "extend", "count"):
            continue
        by_dest.setdefault(u.dest, []).append(u)
    out: list[Finding] = []
    for group in by_dest.values():
        if len(group) < 2:
            continue
        lines = ", ".join(f"line {u.at.line}" if u.at.line else u.option for u in group)
        values = [_effective(u) for u in group]
        last = group[-1]
        if all(v == values[0] for v in values):
            out.append(Finding(severity="warning", check="duplicate", flag=last.option,
                               message=f"given {len(group)} times with the same value ({lines})",
                               suggestion="keep one", at=last.at))
        else:
            shown = "; ".join(f"{u.option} {' '.join(u.values)}".strip() + f" ({u.at})" for u in group)
            out.append(Finding(severity="error", check="duplicate", flag=last.option,
                               message=f"given {len(group)} times with different values: {shown}; "
                                       "Megatron silently keeps the last",
                               suggestion="keep the one you mean (a profile replaces a base argument by itself)",
                               at=last.at))
    return out


# --------------------------------------------------------------------------- pipeline layout


@dataclass(frozen=True, kw_only=True)
class PipelineLayout:
    """A --pipeline-model-parallel-layout string, expanded (E embedding, t transformer, m mtp, L loss)."""

    text: str
    stages: tuple[str, ...]  # one string of layer letters per stage, in stage order

    @property
    def decoder_layers(self) -> int:
        return sum(s.count("t") for s in self.stages)

    def count(self, letter: str) -> int:
        return sum(s.count(letter) for s in self.stages)


class LayoutError(ValueError):
    pass


_LAYERS = frozenset("ELtm")


def parse_layout(text: str) -> PipelineLayout:
    """Expand a layout string the way Megatron does (PipelineParallelLayerLayout.parse_str_to_list):
    commas are cosmetic, ``(X)*N`` repeats X (which may hold ``|``), ``c*N`` repeats one letter,
    ``|`` separates stages."""
    s = text.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    stages = tuple(s.split("|"))
    for stage in stages:
        bad = sorted(set(stage) - _LAYERS)
        if bad:
            raise LayoutError(f"{text!r} holds {', '.join(repr(b) for b in bad)} after expansion; a layout "
                              "uses only E (embedding), t (transformer layer), m (MTP layer), L (loss), | and (...)*N")
    return PipelineLayout(text=text, stages=stages)


# ------------------------------------------------------------------------------ moe layer freq


def moe_layer_pattern(text: str) -> int | list[int]:
    """--moe-layer-freq as Megatron reads it: an integer N, or a Python list expression such as
    ``([0]*3+[1]*58)``. Evaluated on the AST, only list literals of integers, + and *."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"{text!r} is neither an integer nor a list expression ({exc.msg})") from None

    def ev(node: ast.expr) -> int | list[int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [ev(e) for e in node.elts]
            if not all(isinstance(i, int) for i in items):
                raise ValueError("a list of integers was expected")
            return [i for i in items if isinstance(i, int)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult):
                if isinstance(left, list) and isinstance(right, int) and 0 <= right <= 100_000:
                    return left * right
                if isinstance(left, int) and isinstance(right, list) and 0 <= left <= 100_000:
                    return right * left
        raise ValueError(f"{ast.unparse(node)!r} is not a list of integers, + or *")

    try:
        result = ev(tree)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if isinstance(result, int):
        raise ValueError(f"{text!r} evaluates to the integer {result}; write it as {result}")
    return result


# -------------------------------------------------------------------------------- consistency


class _Consistency:
    def __init__(self, uses: Sequence[_Use], table: FlagTable | None, gpus: int | None, gpus_from: str,
                 gpus_at: Location, *, root: Path | None = None, variant: Variant | None = None,
                 env: Mapping[str, str] | None = None, env_at: Location = NOWHERE) -> None:
        self.uses = uses
        self.table = table
        self.gpus = gpus
        self.gpus_from = gpus_from
        self.gpus_at = gpus_at
        self.root = root  # the pinned Megatron tree, where the rules read their assertions' lines
        self.variant = variant
        self.env = dict(env or {})
        self.env_at = env_at
        self.findings: list[Finding] = []
        self.derived: dict[str, int | str] = {}
        self.notes: list[str] = []

    def run(self) -> list[Finding]:
        for check in (self.parallel_sizes, self.pipeline_layout, self.moe_layer_freq, self.hybridep,
                      self.mxfp8_param_gather, self.layers_per_stage, self.virtual_pipeline, self.attention_sizes,
                      self.sequence_parallel, self.recompute, self.experts, self.learning_rate, self.list_values,
                      self.fp8_hardware, self.grouped_gemm, self.hybridep_domain, self.max_connections):
            check()
        return self.findings

    # -- reading values

    def last(self, option: str) -> _Use | None:
        """The argument that sets ``option``'s dest last (aliases included when the source is known)."""
        spec = self.table.get(option) if self.table else None
        dest = spec.dest if spec else option.lstrip("-").replace("-", "_")
        found = None
        for u in self.uses:
            if (u.dest == dest) if spec else (u.option == option):
                found = u
        return found

    def value(self, option: str) -> str | None:
        u = self.last(option)
        return u.values[-1] if u is not None and u.values else None

    def flag_on(self, option: str) -> bool:
        u = self.last(option)
        if u is None:
            return False
        eff = _effective(u)
        return eff if isinstance(eff, bool) else True

    def integer(self, option: str, default: int | None) -> int | None:
        text = self.value(option)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            return None  # reported by the type check when the source is known

    def at(self, *options: str) -> Location:
        for o in options:
            u = self.last(o)
            if u is not None:
                return u.at
        return self.gpus_at

    def add(self, severity: Severity, check: str, flag: str, message: str, suggestion: str, at: Location,
            cite: rules.Cite | None = None, value: str | None = None) -> None:
        source = rules.where(cite, self.root).text if cite is not None else ""
        if value is None:
            value = " ".join(self.last(flag).values) if self.last(flag) is not None else ""  # type: ignore[union-attr]
        self.findings.append(Finding(severity=severity, check=check, flag=flag, message=message,
                                     suggestion=suggestion, at=at, value=value, source=source))

    def archs(self) -> list[tuple[int, int]]:
        """The variant's compute capabilities as (major, minor), those that parse."""
        out = []
        for a in self.variant.gpu_archs if self.variant is not None else ():
            major, _, minor = a.partition(".")
            if major.isdigit() and (minor or "0").isdigit():
                out.append((int(major), int(minor or "0")))
        return out

    # -- the checks

    def parallel_sizes(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1)
        pp = self.integer("--pipeline-model-parallel-size", 1)
        cp = self.integer("--context-parallel-size", 1)
        ep = self.integer("--expert-model-parallel-size", 1)
        etp = self.integer("--expert-tensor-parallel-size", tp)
        if None in (tp, pp, cp, ep, etp):
            return
        assert tp and pp and cp and ep and etp
        where = self.at("--pipeline-model-parallel-size", "--tensor-model-parallel-size")
        heads = self.integer("--num-attention-heads", None)
        if heads is not None and heads % tp:
            self.add("error", "parallel-sizes", "--tensor-model-parallel-size",
                     f"--num-attention-heads {heads} is not divisible by TP {tp}",
                     "choose a TP that divides the number of heads", self.at("--tensor-model-parallel-size"))
        experts = self.integer("--num-experts", None)
        if experts is not None and experts % ep:
            self.add("error", "parallel-sizes", "--expert-model-parallel-size",
                     f"--num-experts {experts} is not divisible by EP {ep}",
                     "choose an EP that divides the number of experts", self.at("--expert-model-parallel-size"),
                     cite=rules.EP_EXPERTS)
        if self.gpus is None:
            self.notes.append("no GPU count is declared (entrypoint.gpus or the profile's gpus): "
                              "parallel sizes were not checked against one")
            return
        model = tp * pp * cp
        sizes = f"TP {tp} x PP {pp} x CP {cp} = {model}"
        if model > self.gpus or self.gpus % model:
            need = "at least" if model > self.gpus else "a multiple of"
            self.add("error", "parallel-sizes", "--pipeline-model-parallel-size",
                     f"{sizes} GPUs per model replica cannot run on the {self.gpus} GPUs of {self.gpus_from} "
                     f"(it needs {need} {model})",
                     f"run it on a multiple of {model} GPUs (a profile with gpus: {model} or more), or lower "
                     f"TP/PP/CP so that their product divides {self.gpus}", where, cite=rules.WORLD_DIVISIBLE)
            return
        dp = self.gpus // model
        self.derived["data_parallel"] = dp
        if ep > 1 or etp != tp:
            expert_model = etp * ep * pp
            if self.gpus % expert_model:
                self.add("error", "parallel-sizes", "--expert-model-parallel-size",
                         f"ETP {etp} x EP {ep} x PP {pp} = {expert_model} does not divide the {self.gpus} GPUs",
                         f"choose EP so that ETP x EP x PP divides {self.gpus}", self.at("--expert-model-parallel-size"))
            else:
                self.derived["expert_data_parallel"] = self.gpus // expert_model
        gbs = self.integer("--global-batch-size", None)
        mbs = self.integer("--micro-batch-size", 1)
        if gbs is not None and mbs and gbs % (mbs * dp):
            self.add("error", "batch-size", "--global-batch-size",
                     f"global batch {gbs} is not divisible by micro batch {mbs} x data-parallel {dp} "
                     f"({self.gpus} GPUs / {model})",
                     f"use a global batch that is a multiple of {mbs * dp}", self.at("--global-batch-size"))
        elif gbs is not None and mbs:
            self.derived["microbatches_per_step"] = gbs // (mbs * dp)

    def pipeline_layout(self) -> None:
        u = self.last("--pipeline-model-parallel-layout")
        if u is None or not u.values:
            return
        flag = "--pipeline-model-parallel-layout"
        try:
            layout = parse_layout(u.values[-1])
        except LayoutError as exc:
            self.add("error", "pipeline-layout", flag, str(exc), "fix the layout string", u.at)
            return
        stages = len(layout.stages)
        self.derived["pipeline_stages"] = stages
        flat = "".join(layout.stages)
        if layout.count("E") != 1 or not flat.startswith("E"):
            self.add("error", "pipeline-layout", flag, "the layout must start with the embedding E, exactly once",
                     "put one E at the start of the first stage", u.at)
        if layout.count("L") != 1 or not flat.endswith("L"):
            self.add("error", "pipeline-layout", flag, "the layout must end with the loss L, exactly once",
                     "put one L at the end of the last stage", u.at)
        layers = self.integer("--num-layers", None)
        if layers is not None and layout.decoder_layers != layers:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} holds {layout.decoder_layers} transformer layers (t), --num-layers is {layers}",
                     "make the t count match --num-layers", u.at)
        mtp = self.integer("--mtp-num-layers", 0) or 0
        if layout.count("m") != mtp:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} holds {layout.count('m')} MTP layers (m), --mtp-num-layers is {mtp}",
                     "make the m count match --mtp-num-layers", u.at)
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        if stages % pp:
            self.add("error", "pipeline-layout", flag,
                     f"{layout.text!r} has {stages} stages, not a multiple of PP {pp}",
                     f"give PP x virtual stages = {stages} (PP {pp} needs a multiple of {pp} stages)", u.at,
                     cite=rules.LAYOUT_STAGES)
            return
        vpp = stages // pp
        self.derived["virtual_stages_per_rank"] = vpp
        for other in ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage"):
            o = self.last(other)
            if o is None:
                continue
            same = other == "--num-virtual-stages-per-pipeline-rank" and o.values and o.values[-1] == str(vpp)
            self.add("error", "pipeline-layout", other,
                     f"Megatron accepts only one of --pipeline-model-parallel-layout, "
                     f"--num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-stage; "
                     f"the layout already gives {stages} stages / PP {pp} = {vpp} virtual stages per rank"
                     + ("" if same else f", {other} says {' '.join(o.values)}"),
                     f"remove {other}", o.at, cite=rules.ONE_VPP_SOURCE)

    def moe_layer_freq(self) -> None:
        u = self.last("--moe-layer-freq")
        if u is None or not u.values:
            return
        try:
            pattern = moe_layer_pattern(u.values[-1])
        except ValueError as exc:
            self.add("error", "moe-layer-freq", "--moe-layer-freq", str(exc),
                     "write an integer or a list expression such as ([0]*3+[1]*58)", u.at)
            return
        layers = self.integer("--num-layers", None)
        if isinstance(pattern, list):
            self.derived["moe_layers"] = sum(1 for p in pattern if p)
            if layers is not None and len(pattern) != layers:
                self.add("error", "moe-layer-freq", "--moe-layer-freq",
                         f"{u.values[-1]!r} describes {len(pattern)} layers, --num-layers is {layers}",
                         "give one entry per layer", u.at)

    def hybridep(self) -> None:
        backend = self.value("--moe-flex-dispatcher-backend")
        if backend != "hybridep":
            return
        at = self.at("--moe-flex-dispatcher-backend")
        dtype = self.value("--moe-router-dtype")
        if dtype != "fp32":
            self.add("error", "hybridep", "--moe-router-dtype",
                     f"--moe-flex-dispatcher-backend hybridep needs --moe-router-dtype fp32, "
                     f"{'it is not set' if dtype is None else f'it is {dtype}'}",
                     "add '- --moe-router-dtype: fp32'", self.at("--moe-router-dtype", "--moe-flex-dispatcher-backend"))
        dispatcher = self.value("--moe-token-dispatcher-type")
        if dispatcher != "flex":
            self.add("warning", "hybridep", "--moe-flex-dispatcher-backend",
                     f"the backend applies only to --moe-token-dispatcher-type flex (it is {dispatcher or 'not set'})",
                     "add '- --moe-token-dispatcher-type: flex'", at)

    def mxfp8_param_gather(self) -> None:
        if not self.flag_on("--reuse-grad-buf-for-mxfp8-param-ag"):
            return
        if not self.flag_on("--fp8-param-gather"):
            self.add("error", "mxfp8", "--fp8-param-gather",
                     "--reuse-grad-buf-for-mxfp8-param-ag needs --fp8-param-gather (Megatron's DDP config asserts it)",
                     "add '- --fp8-param-gather'", self.at("--reuse-grad-buf-for-mxfp8-param-ag"))


    # -- what validate_args and the config classes assert (Megatron-LM; megatron_rules cites each)

    def virtual_stages(self) -> int | None:
        """The virtual stages per pipeline rank as validate_args derives them (None: no interleaving)."""
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        layout = self.value("--pipeline-model-parallel-layout")
        if layout is not None:
            try:
                stages = len(parse_layout(layout).stages)
            except LayoutError:
                return None
            return stages // pp if stages % pp == 0 and stages // pp > 1 else None
        nvs = self.integer("--num-virtual-stages-per-pipeline-rank", None)
        if nvs is not None:
            return nvs if nvs > 1 else None
        per_vstage = self.integer("--num-layers-per-virtual-pipeline-stage", None)
        layers = self.split_layers()
        if per_vstage and layers is not None and layers % pp == 0 and (layers // pp) % per_vstage == 0:
            v = (layers // pp) // per_vstage
            return v if v > 1 else None
        return None

    def split_layers(self) -> int | None:
        """--num-layers plus the embedding / loss stages the split options count (arguments.py 590-596, 615-622)."""
        layers = self.integer("--num-layers", None)
        if layers is None:
            return None
        return (layers + int(self.flag_on("--account-for-embedding-in-pipeline-split"))
                + int(self.flag_on("--account-for-loss-in-pipeline-split")))

    def layers_per_stage(self) -> None:
        """No layout, no virtual stages, no uneven first/last stage: the layers split evenly over PP."""
        if any(self.last(o) is not None for o in (
                "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
                "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
                "--decoder-last-pipeline-num-layers")):
            return
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        layers = self.split_layers()
        if layers is None or pp <= 1 or layers % pp == 0:
            return
        counted = "" if layers == self.integer("--num-layers", None) else " (embedding / loss counted as layers)"
        divisors = [d for d in range(1, layers + 1) if layers % d == 0 and d <= 64]
        self.add("error", "layers-pp", "--pipeline-model-parallel-size",
                 f"{layers} layers{counted} do not divide by PP {pp}: Megatron asserts 'Number of layers should be "
                 "divisible by the pipeline-model-parallel size'",
                 f"choose PP among {', '.join(map(str, divisors))}, or give a --pipeline-model-parallel-layout",
                 self.at("--pipeline-model-parallel-size", "--num-layers"), cite=rules.LAYERS_PP)

    def virtual_pipeline(self) -> None:
        pp = self.integer("--pipeline-model-parallel-size", 1) or 1
        per_vstage = self.integer("--num-layers-per-virtual-pipeline-stage", None)
        if per_vstage is not None and self.last("--pipeline-model-parallel-layout") is None:
            flag = "--num-layers-per-virtual-pipeline-stage"
            if self.last("--num-virtual-stages-per-pipeline-rank") is None and (
                    self.last("--decoder-first-pipeline-num-layers") or self.last("--decoder-last-pipeline-num-layers")):
                self.add("error", "vpp", flag, "an uneven first/last stage with --num-layers-per-virtual-pipeline-stage",
                         "use --num-virtual-stages-per-pipeline-rank", self.at(flag), cite=rules.VPP_UNEVEN)
            layers = self.split_layers()
            if layers is not None and layers % pp:
                self.add("error", "vpp", flag, f"{layers} layers do not divide by PP {pp}",
                         "choose a PP that divides the layers", self.at(flag), cite=rules.LAYERS_PP_VPP)
            elif layers is not None and per_vstage and (layers // pp) % per_vstage:
                self.add("error", "vpp", flag,
                         f"{layers // pp} layers per pipeline stage do not divide by {per_vstage} per virtual stage",
                         "choose layers per virtual stage that divide the layers per stage", self.at(flag),
                         cite=rules.LAYERS_PER_VSTAGE)
        vpp = self.virtual_stages()
        if vpp is None:
            return
        overlap = self.last("--no-overlap-p2p-communication") is None  # store_false: present means off
        need = 2 if overlap else 3
        if pp < need:
            self.add("error", "vpp", "--pipeline-model-parallel-size",
                     f"{vpp} virtual stages per rank (the interleaved schedule) need PP > {need - 1}, PP is {pp}",
                     f"raise PP to {need} or more, or drop the virtual stages",
                     self.at("--pipeline-model-parallel-size", "--pipeline-model-parallel-layout"),
                     cite=rules.VPP_NEEDS_PP if overlap else rules.VPP_NEEDS_PP3)

    def attention_sizes(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        heads = self.integer("--num-attention-heads", None)
        hidden = self.integer("--hidden-size", None)
        if heads and hidden is not None and self.last("--kv-channels") is None and hidden % heads:
            self.add("error", "attention-sizes", "--hidden-size",
                     f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads} (and no --kv-channels)",
                     "give a hidden size that divides by the heads, or --kv-channels", self.at("--hidden-size"),
                     cite=rules.HIDDEN_HEADS)
        if self.flag_on("--group-query-attention"):
            groups = self.integer("--num-query-groups", 1)
            if groups is not None and groups % tp:
                self.add("error", "attention-sizes", "--num-query-groups",
                         f"--num-query-groups {groups} is not a multiple of TP {tp}",
                         "choose query groups that divide by TP", self.at("--num-query-groups",
                                                                          "--group-query-attention"),
                         cite=rules.HEADS_TP)
        cp = self.integer("--context-parallel-size", 1) or 1
        seq = self.integer("--seq-length", None)
        if seq is not None and cp > 1 and seq % (2 * cp):
            self.add("error", "attention-sizes", "--seq-length",
                     f"--seq-length {seq} is not a multiple of 2 x CP {cp}",
                     f"use a sequence length that divides by {2 * cp}", self.at("--seq-length"), cite=rules.SEQ_CP)
        maxpos = self.integer("--max-position-embeddings", None)
        if seq is not None and maxpos is not None and maxpos < seq:
            self.add("error", "attention-sizes", "--max-position-embeddings",
                     f"--max-position-embeddings {maxpos} is smaller than --seq-length {seq}",
                     f"give at least {seq}", self.at("--max-position-embeddings"), cite=rules.MAX_POS)

    def sequence_parallel(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        sp = self.flag_on("--sequence-parallel")
        if sp and tp == 1:
            self.add("warning", "sequence-parallel", "--sequence-parallel",
                     "TP is 1: Megatron turns sequence parallelism off ('Disabling sequence parallelism because "
                     "tensor model parallelism is disabled'); ModelParallelConfig would refuse it otherwise",
                     "drop --sequence-parallel, or use TP > 1", self.at("--sequence-parallel"), cite=rules.SP_DISABLED)
        if self.flag_on("--tp-comm-overlap") and not (sp and tp > 1):
            self.add("error", "sequence-parallel", "--tp-comm-overlap",
                     "--tp-comm-overlap needs sequence parallelism (--sequence-parallel with TP > 1)",
                     "add --sequence-parallel with TP > 1, or drop --tp-comm-overlap", self.at("--tp-comm-overlap"),
                     cite=rules.TP_COMM_OVERLAP_SP)

    def recompute(self) -> None:
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        granularity = self.value("--recompute-granularity")
        method = self.value("--recompute-method")
        if self.flag_on("--distribute-saved-activations"):
            at = self.at("--distribute-saved-activations")
            if tp <= 1:
                self.add("error", "recompute", "--distribute-saved-activations", "needs TP > 1",
                         "drop it or raise TP", at, cite=rules.DISTRIBUTE_TP)
            if granularity != "full":
                self.add("error", "recompute", "--distribute-saved-activations",
                         "applies only to --recompute-granularity full", "add '- --recompute-granularity: full'", at,
                         cite=rules.DISTRIBUTE_FULL)
            if method is None:
                self.add("error", "recompute", "--distribute-saved-activations", "needs a --recompute-method",
                         "add '- --recompute-method: uniform' (or block)", at, cite=rules.DISTRIBUTE_METHOD)
        if granularity == "selective" and method is not None:
            self.add("error", "recompute", "--recompute-method",
                     "--recompute-method is not supported with --recompute-granularity selective",
                     "drop --recompute-method", self.at("--recompute-method"), cite=rules.SELECTIVE_METHOD)

    def experts(self) -> None:
        ep = self.integer("--expert-model-parallel-size", 1) or 1
        if ep <= 1:
            return
        at = self.at("--expert-model-parallel-size")
        if self.last("--num-experts") is None:
            self.add("error", "experts", "--expert-model-parallel-size", f"EP {ep} without --num-experts",
                     "add --num-experts", at, cite=rules.EP_NEEDS_EXPERTS)
        if self.flag_on("--fp16"):
            self.add("error", "experts", "--fp16", "expert parallelism is not supported with fp16 training",
                     "train in bf16", self.at("--fp16"), cite=rules.EP_FP16)

    def learning_rate(self) -> None:
        lr, min_lr = self.value("--lr"), self.value("--min-lr")
        try:
            bad = lr is not None and min_lr is not None and float(min_lr) > float(lr)
        except ValueError:
            return
        if bad:
            self.add("error", "learning-rate", "--min-lr", f"--min-lr {min_lr} is above --lr {lr}",
                     "give a --min-lr no larger than --lr", self.at("--min-lr"), cite=rules.MIN_LR)

    def list_values(self) -> None:
        """Values of list-valued flags against the names the pinned source accepts."""
        scope = self.last("--cuda-graph-scope")
        impl = self.value("--cuda-graph-impl") or "none"
        if scope is not None and scope.values and impl != "none":
            values = list(scope.values)
            if impl == "local":
                if values != ["full_iteration"]:
                    self.add("error", "list-values", "--cuda-graph-scope",
                             "with --cuda-graph-impl local the only valid scope is full_iteration",
                             "use --cuda-graph-impl transformer_engine for other scopes", scope.at,
                             cite=rules.GRAPH_SCOPE_LOCAL)
            else:
                accepted = rules.accepted_values(self.root, "cuda_graph_scope")
                self._names(scope, values, accepted, rules.GRAPH_SCOPE)
                if "moe" in values and "moe_router" in values:
                    self.add("error", "list-values", "--cuda-graph-scope", "moe and moe_router together",
                             "keep one of moe and moe_router", scope.at, cite=rules.GRAPH_SCOPE_MOE)
        modules = self.last("--recompute-modules")
        if modules is not None and modules.values and self.value("--recompute-granularity") == "selective":
            accepted = rules.accepted_values(self.root, "recompute_modules")
            self._names(modules, list(modules.values), accepted, rules.RECOMPUTE_MODULES)
            if "moe_act" in modules.values and not self.flag_on("--moe-grouped-gemm"):
                self.add("error", "list-values", "--recompute-modules", "moe_act needs --moe-grouped-gemm",
                         "add --moe-grouped-gemm or drop moe_act", modules.at, cite=rules.MOE_ACT_GROUPED)

    def _names(self, u: _Use, values: list[str], accepted: rules.Accepted, cite: rules.Cite) -> None:
        for v in values:
            if "${" in v or v in accepted.values:
                continue
            close = difflib.get_close_matches(v, list(accepted.values), n=1, cutoff=0.5)
            self.add("error", "list-values", u.option,
                     f"{v!r} is not one of {', '.join(accepted.values)} (accepted names: {accepted.source})",
                     f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(accepted.values)}",
                     u.at, cite=cite, value=v)

    # -- what the variant's hardware refuses (Transformer Engine, DeepEP: facts cited in megatron_rules)

    def fp8_hardware(self) -> None:
        recipe_use = self.last("--fp8-recipe")
        fmt = self.value("--fp8-format")
        if fmt is None and recipe_use is not None and recipe_use.values and recipe_use.values[-1] != "delayed":
            self.add("warning", "fp8-hardware", "--fp8-recipe",
                     "FP8 is off without --fp8-format (Megatron's dest fp8): the recipe has no effect",
                     "add --fp8-format, or drop --fp8-recipe", recipe_use.at)
        archs = self.archs()
        if not archs:
            if fmt is not None or self.last("--fp4-format") is not None:
                self.notes.append("the variant declares no gpu_archs: FP8/FP4 recipes were not checked against "
                                  "the hardware")
            return
        shown = ", ".join(f"{a}.{b}" for a, b in archs)
        if fmt is not None:
            recipe = self.value("--fp8-recipe") or "delayed"
            at = recipe_use.at if recipe_use is not None else self.at("--fp8-format")
            for cc in archs:
                cite: rules.Cite | None = None
                if recipe in ("delayed", "tensorwise") and cc < (8, 9):
                    cite = rules.TE_FP8
                elif recipe == "mxfp8" and cc >= (12, 0):
                    cite = rules.TE_MXFP8_12
                elif recipe == "mxfp8" and cc < (10, 0):
                    cite = rules.TE_MXFP8
                elif recipe == "blockwise" and cc < (9, 0):
                    cite = rules.TE_BLOCK
                if cite is not None:
                    self.add("error", "fp8-hardware", "--fp8-recipe",
                             f"--fp8-recipe {recipe} on compute capability {cc[0]}.{cc[1]} (the variant's gpu_archs: "
                             f"{shown}): Transformer Engine refuses it: {cite.text!r}",
                             "on sm_90 use delayed or tensorwise (blockwise with CUDA >= 12.9); MXFP8 needs "
                             "sm_100", at, cite=cite, value=recipe)
                    break
            if recipe == "blockwise" and self.variant is not None and self.variant.cuda.split(".")[0] == "12":
                self.add("warning", "fp8-hardware", "--fp8-recipe",
                         f"blockwise scaling needs CUDA >= 12.9; the variant says CUDA {self.variant.cuda}",
                         "check the base's CUDA_VERSION", at, cite=rules.TE_BLOCK, value=recipe)
        fp4 = self.last("--fp4-format")
        if fp4 is not None and any(cc < (10, 0) for cc in archs):
            self.add("error", "fp8-hardware", "--fp4-format",
                     f"NVFP4 on compute capability {shown}: Transformer Engine needs 10.0 or higher",
                     "drop --fp4-format on this variant", fp4.at, cite=rules.TE_NVFP4)

    def grouped_gemm(self) -> None:
        if not self.flag_on("--moe-grouped-gemm"):
            return
        at = self.at("--moe-grouped-gemm")
        if not self.flag_on("--bf16"):
            self.add("error", "grouped-gemm", "--moe-grouped-gemm", "grouped GEMM for MoE needs --bf16",
                     "add --bf16", at, cite=rules.GROUPED_GEMM_BF16)
        old = [f"{a}.{b}" for a, b in self.archs() if a < 8]
        if old:
            self.add("error", "grouped-gemm", "--moe-grouped-gemm",
                     f"grouped GEMM needs compute capability 8.0 or higher; the variant has {', '.join(old)}",
                     "drop --moe-grouped-gemm on this variant", at, cite=rules.GROUPED_GEMM_CC)

    def max_connections(self) -> None:
        """TP or CP > 1 before Blackwell: validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment
        (unless FSDP or --overlap-moe-expert-parallel-comm, which only warn)."""
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        cp = self.integer("--context-parallel-size", 1) or 1
        if tp == 1 and cp == 1:
            return
        if any(self.flag_on(o) for o in ("--use-torch-fsdp2", "--use-megatron-fsdp",
                                         "--overlap-moe-expert-parallel-comm")):
            return
        old = [f"{a}.{b}" for a, b in self.archs() if a < 10]
        if not old or self.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            return
        have = self.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        self.add("error", "max-connections", "CUDA_DEVICE_MAX_CONNECTIONS",
                 f"TP {tp} x CP {cp} on compute capability {', '.join(old)} needs CUDA_DEVICE_MAX_CONNECTIONS=1 in "
                 f"the image's environment ({'it is unset' if have is None else f'it is {have!r}'})",
                 "add CUDA_DEVICE_MAX_CONNECTIONS: \"1\" to env", self.env_at, cite=rules.MAX_CONNECTIONS,
                 value=have or "")

    def hybridep_domain(self) -> None:
        """HybridEP's dispatch group within one NVLink domain, and that domain within the machine's NVLink."""
        if self.value("--moe-flex-dispatcher-backend") != "hybridep":
            return
        tp = self.integer("--tensor-model-parallel-size", 1) or 1
        ep = self.integer("--expert-model-parallel-size", 1) or 1
        etp = self.integer("--expert-tensor-parallel-size", tp) or tp
        group = ep * etp
        raw = self.env.get("NVLINK_DOMAIN_SIZE", "8")
        try:
            domain = int(raw)
        except ValueError:
            self.add("error", "hybridep-domain", "NVLINK_DOMAIN_SIZE", f"NVLINK_DOMAIN_SIZE={raw!r} is not an integer",
                     "give the GPUs of one NVLink domain", self.env_at, cite=rules.HYBRIDEP_DOMAIN, value=raw)
            return
        self.derived["hybridep_dispatch_group"] = group
        self.derived["nvlink_domain_size"] = domain
        said = "NVLINK_DOMAIN_SIZE" + (f"={raw}" if "NVLINK_DOMAIN_SIZE" in self.env else " unset (DeepEP's default 8)")
        if group > domain:
            self.add("error", "hybridep-domain", "--expert-model-parallel-size",
                     f"the expert-dispatch group ETP {etp} x EP {ep} = {group} spans more than one NVLink domain "
                     f"({said}): HybridEP then needs its multinode kernels, which DeepEP {rules.DEEPEP_AT} refuses to "
                     "build ('Multinode is not supported yet')",
                     f"choose ETP x EP <= {domain}, or a domain that holds the group",
                     self.at("--expert-model-parallel-size", "--moe-flex-dispatcher-backend"),
                     cite=rules.HYBRIDEP_MULTINODE, value=str(group))
        machine = self.variant.nvlink_domain if self.variant is not None else None
        if machine is None:
            self.notes.append("the variant declares no nvlink_domain: HybridEP's NVLINK_DOMAIN_SIZE was not "
                              "checked against the machine")
        elif domain > machine:
            self.add("error", "hybridep-domain", "NVLINK_DOMAIN_SIZE",
                     f"{said}, but NVLink joins {machine} GPUs on this variant's machine (nvlink_domain: {machine}): "
                     "HybridEP would treat GPUs without NVLink between them as one domain",
                     f"set NVLINK_DOMAIN_SIZE to {machine} or less for this variant", self.env_at,
                     cite=rules.HYBRIDEP_DOMAIN, value=raw)

# ---------------------------------------------------------------------------------- for plan


def lint_for_plan(manifest: Manifest, variant: Variant, locate: MegatronSourceLocator,
                  profile: str | None = None) -> LintReport:
    """What `buildctl plan/build` run: the lint against the located source, or a report saying why not."""
    found = locate(manifest, variant)
    return lint(manifest, variant, found.root, profile, missing_reason=found.reason)

