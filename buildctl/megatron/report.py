"""What the argument lint works on and hands back: an argument as argparse sees it, findings, the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from buildctl.errors import ArgsLintFailed, Location
from buildctl.manifest.model import NOWHERE
from buildctl.megatron.flags import FlagSpec

Severity = Literal["error", "warning"]


@dataclass(frozen=True, kw_only=True)
class LintFinding:
    severity: Severity
    check: str  # unknown-flag, bad-choice, bad-type, bad-count, duplicate, deprecated, conditional, ...
    flag: str
    message: str
    suggestion: str = ""
    at: Location = field(default=NOWHERE)
    value: str = ""  # the value the rule judged, as the manifest gives it
    source: str = ""  # the upstream assertion the rule stands for (rules.where), when there is one

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
    findings: tuple[LintFinding, ...] = ()
    derived: Mapping[str, int | str] = field(default_factory=dict)  # DP size, virtual stages, ...
    notes: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[LintFinding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[LintFinding, ...]:
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


def _effective(use: _Use) -> tuple[str, ...] | bool:
    if use.spec is not None and not use.spec.takes_value:
        const = use.spec.value_for(use.option)
        return True if const is None else const
    if use.spec is None and not use.values:
        return not use.option.startswith("--no-")
    return use.values
