"""Check the entrypoint's arguments against the pinned Megatron-LM source, before anything is built.

Two kinds of checks:

- flag checks, against the flags the Megatron tree declares (``scan.scan``; static, no
  import): unknown flags with the closest known ones, values outside choices, values of the wrong
  type or count, flags Megatron marks deprecated, flags that exist only when an optional module
  imports, and a flag given twice with different values (argparse silently keeps the last);
- consistency checks a person would otherwise do by hand, from the arguments alone (so they run even
  when the source is not at hand): the pipeline layout against --num-layers and PP x virtual stages,
  TP x PP x CP (x EP) and the data-parallel size against the GPU count the profile declares, the global
  batch against micro batch x DP, --moe-layer-freq against --num-layers, HybridEP's fp32 router, and
  --fp8-param-gather under --reuse-grad-buf-for-mxfp8-param-ag.

The flag checks are here; the consistency checks are consistency.py's (from the arguments alone) and
asserts.py's (the upstream assertions); report.py has what ``lint`` hands back. ``lint`` never raises
for what it finds; ``LintReport.raise_for_errors`` turns errors into
``ArgsLintFailed`` for the commands that must stop.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from buildctl.graph.entrypoint import PATH_REF, gpu_count, select_profile, variant_entrypoint
from buildctl.manifest.model import Arg, Manifest, Variant
from buildctl.manifest.profiles import effective_args
from buildctl.megatron.asserts import _Consistency
from buildctl.megatron.flags import FlagSpec, FlagTable, NotMegatronSource, replacement_in
from buildctl.megatron.report import LintFinding as LintFinding
from buildctl.megatron.report import LintReport as LintReport
from buildctl.megatron.report import Severity, _effective, _Use
from buildctl.megatron.scan import scan

# Rules about what the variant's hardware refuses (TE's recipes, grouped GEMM, HybridEP's NVLink domain):
# Megatron's validate_args does not see them, TE and DeepEP do at the first step.
HARDWARE_CHECKS = frozenset({"fp8-hardware", "hybridep-domain"})
_NO_EFFECT = re.compile(r"\bignored\b|\bno-op\b|\bno effect\b", re.IGNORECASE)


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


def _megatron_launch(manifest: Manifest, table: FlagTable | None) -> bool:
    """Whether the launch is Megatron-LM's, so that what its validate_args refuses applies (combos.py): the
    entrypoint names its component, a Megatron source was read, or the command runs one of its ``pretrain_*.py``
    entry scripts. Another program's ``--save`` or ``--data-path`` (the demo trainer's) means what it says."""
    e = manifest.entrypoint
    script = _entry_script(manifest) or ""
    return (e is not None and e.megatron is not None) or table is not None or (
        script.rsplit("/", 1)[-1].startswith("pretrain_"))


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
    findings: list[LintFinding] = []
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
    checks.megatron = _megatron_launch(manifest, table)
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


def _use(arg: Arg, table: FlagTable | None, defaults: Mapping[str, str]) -> _Use:
    option, eq, inline = arg.flag.partition("=")
    values = ((inline,) if eq else ()) + arg.values
    # Site paths take their defaults here: the check is about the value's form, not the site.
    values = tuple(PATH_REF.sub(lambda m: defaults.get(m.group(1), m.group(0)), v) for v in values)
    spec = table.get(option) if table else None
    if spec is None and table is not None and table.allow_abbrev:
        matches = {s.dest: s for o, s in table.flags.items() if o.startswith(option)}
        spec = next(iter(matches.values())) if len(matches) == 1 else None
    return _Use(option=option, values=values, at=arg.at, spec=spec)


def _check_flag(use: _Use, table: FlagTable, version: str) -> list[LintFinding]:
    out: list[LintFinding] = []

    def add(severity: Severity, check: str, message: str, suggestion: str = "") -> None:
        out.append(LintFinding(severity=severity, check=check, flag=use.option, message=message, suggestion=suggestion,
                               at=use.at))

    spec = use.spec
    if spec is None:
        known = sorted(o for o in table.flags if o.startswith("--"))
        close = difflib.get_close_matches(use.option, known, n=3, cutoff=0.6)
        add("error", "unknown-flag", f"Megatron-LM {version} has no such flag",
            (f"did you mean {' or '.join(close)}?" if close else "no similar flag; remove it or check the pinned commit"))
        return out
    if use.option not in spec.options:
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
    n = len(use.values)
    if not spec.takes_value:
        if n:
            add("error", "bad-count", f"takes no value, but the manifest gives {list(use.values)}",
                f"write it bare ('- {use.option}'), or remove the value")
        return out
    expected = spec.nargs
    if expected is None and n != 1:
        add("error", "bad-count", f"takes exactly one value, got {n}",
            f"write '- {use.option}: VALUE'")
    elif expected == "+" and n < 1:
        add("error", "bad-count", "takes one or more values, got none", f"write '- {use.option}: [V1, V2]'")
    elif expected == "?" and n > 1:
        add("error", "bad-count", f"takes at most one value, got {n}")
    elif isinstance(expected, int) and n != expected:
        add("error", "bad-count", f"takes exactly {expected} values, got {n}")
    for v in use.values:
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


def _duplicates(uses: Sequence[_Use]) -> list[LintFinding]:
    """A flag given twice: argparse keeps the last value without a word."""
    by_dest: dict[str, list[_Use]] = {}
    for u in uses:
        if u.spec is not None and u.spec.action in ("append", "extend", "count"):
            continue
        by_dest.setdefault(u.dest, []).append(u)
    out: list[LintFinding] = []
    for group in by_dest.values():
        if len(group) < 2:
            continue
        lines = ", ".join(f"line {u.at.line}" if u.at.line else u.option for u in group)
        values = [_effective(u) for u in group]
        last = group[-1]
        if all(v == values[0] for v in values):
            out.append(LintFinding(severity="warning", check="duplicate", flag=last.option,
                                   message=f"given {len(group)} times with the same value ({lines})",
                                   suggestion="keep one", at=last.at))
        else:
            shown = "; ".join(f"{u.option} {' '.join(u.values)}".strip() + f" ({u.at})" for u in group)
            out.append(LintFinding(severity="error", check="duplicate", flag=last.option,
                                   message=f"given {len(group)} times with different values: {shown}; "
                                       "Megatron silently keeps the last",
                                   suggestion="keep the one you mean (a profile replaces a base argument by itself)",
                                   at=last.at))
    return out


# -------------------------------------------------------------------------------- consistency


# ---------------------------------------------------------------------------------- for plan


def lint_for_plan(manifest: Manifest, variant: Variant, locate: MegatronSourceLocator,
                  profile: str | None = None) -> LintReport:
    """What `buildctl plan/build` run: the lint against the located source, or a report saying why not."""
    found = locate(manifest, variant)
    return lint(manifest, variant, found.root, profile, missing_reason=found.reason)

