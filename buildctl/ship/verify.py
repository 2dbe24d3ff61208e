"""`buildctl verify BASE`: is the base image still what the manifest and the lock say it is?

Three looks at the base of one stack variant, each reported item by item and never by crashing:

1. the registry: the tag's manifest digest now, against the digest the lock recorded (a moved tag
   fails, naming both digests);
2. the image config: Config.Env values, prefixes and presence, and the platform (the contract of
   ``Manifest.contract_for(variant)``);
3. a probe run with the image's own python3 (standard library only, no GPU, no network): Python,
   torch, torch.version.cuda, the cuDNN torch loads, and $CUDA_HOME/bin/nvcc.

Each verified base is recorded per digest under ``<cache>/reports/bases/`` so that the next verify can
say what changed against the base the previous lock recorded (env, labels, probe values).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from buildctl import untrusted
from buildctl.engine.imageview import ImageView, RunOutcome
from buildctl.errors import ManifestErrors, UnreachableError, UsageError
from buildctl.graph.plan import mirror_ref
from buildctl.imageref import ImageRef
from buildctl.lock.lockfile import VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import BaseContract, Manifest, Variant
from buildctl.safepath import write_atomic

CheckStatus = Literal["ok", "fail", "skip", "info"]
ChangeKind = Literal["env", "label", "probe", "platform"]
RECORD_SCHEMA = 1
PROBE_TIMEOUT_S = 180.0


class VerifyEngine(Protocol):
    def platform(self) -> str: ...
    def registry_digest(self, ref: str) -> str | None: ...
    def image_exists(self, ref: str) -> bool: ...
    def inspect_image(self, ref: str) -> ImageView: ...
    def pull(self, ref: str, platform: str | None = None) -> str: ...
    def run(self, image: str, command: Sequence[str], *, network_mode: str | None = None, timeout: float,
            entrypoint: Sequence[str] | None = None) -> RunOutcome: ...


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: CheckStatus
    expected: str = ""
    actual: str = ""
    note: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "expected": self.expected, "actual": self.actual,
                "note": self.note}


@dataclass(frozen=True, kw_only=True)
class BaseProbe:
    """What the probe saw inside the image; a value is None when it could not be read (see errors)."""

    python: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    cudnn: str | None = None
    cuda_home: str | None = None
    nvcc: str | None = None  # path of an executable nvcc
    errors: Mapping[str, str] = field(default_factory=dict)  # item -> why it could not be read

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "torch": self.torch, "torch_cuda": self.torch_cuda, "cudnn": self.cudnn,
                "cuda_home": self.cuda_home, "nvcc": self.nvcc, "errors": dict(sorted(self.errors.items()))}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> BaseProbe:
        return BaseProbe(python=data.get("python"), torch=data.get("torch"), torch_cuda=data.get("torch_cuda"),
                         cudnn=data.get("cudnn"), cuda_home=data.get("cuda_home"), nvcc=data.get("nvcc"),
                         errors=dict(data.get("errors") or {}))


@dataclass(frozen=True, kw_only=True)
class BaseRecord:
    """The verified config of one base digest, kept so later verifies can say what changed."""

    ref: str
    digest: str
    platform: str
    env: Mapping[str, str]
    labels: Mapping[str, str]
    probe: BaseProbe | None
    recorded_at: str

    def to_json(self) -> dict[str, Any]:
        return {"schema": RECORD_SCHEMA, "ref": self.ref, "digest": self.digest, "platform": self.platform,
                "env": dict(sorted(self.env.items())), "labels": dict(sorted(self.labels.items())),
                "probe": None if self.probe is None else self.probe.to_json(), "recorded_at": self.recorded_at}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> BaseRecord:
        return BaseRecord(ref=data["ref"], digest=data["digest"], platform=data["platform"], env=dict(data["env"]),
                          labels=dict(data["labels"]), probe=None if data.get("probe") is None else BaseProbe.from_json(data["probe"]),
                          recorded_at=data.get("recorded_at", ""))


@dataclass(frozen=True, kw_only=True)
class BaseChange:
    kind: ChangeKind
    key: str
    old: str | None
    new: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "old": self.old, "new": self.new}


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    alias: str
    stack: str
    variant: str
    ref: str  # as written in the manifest
    checked_ref: str  # after the registry mirror, if any
    locked_digest: str | None
    digest: str | None  # the tag's digest in the registry now
    checks: tuple[Check, ...]
    baseline: str | None = None  # digest the changes are measured against
    baseline_note: str = ""
    changes: tuple[BaseChange, ...] | None = None  # None: there was nothing to compare with

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "alias": self.alias, "stack": self.stack, "variant": self.variant, "ref": self.ref,
                "checked_ref": self.checked_ref, "locked_digest": self.locked_digest, "digest": self.digest,
                "checks": [c.to_json() for c in self.checks], "baseline": self.baseline,
                "baseline_note": self.baseline_note,
                "changes": None if self.changes is None else [c.to_json() for c in self.changes]}


# --------------------------------------------------------------------------------------- pure checks


def version_matches(expected: str, actual: str) -> bool:
    """Component-wise prefix: '9.14' matches '9.14.0' but not '9.1' or '9.140'."""
    want = expected.rstrip(".").split(".")
    have = actual.split(".")
    if len(have) < len(want):
        return False
    if have[: len(want) - 1] != want[:-1]:
        return False
    last = have[len(want) - 1]
    # the last component may carry a local or pre-release suffix: 2.9.0a0+git... matches "2.9.0"
    return last == want[-1] or (last.startswith(want[-1]) and not last[len(want[-1])].isdigit())


def check_digest(locked: str | None, remote: str | None, ref: str) -> Check:
    if remote is None:
        return Check(name="digest", status="fail", expected=locked or "", actual="(tag not in the registry)",
                     note=f"{ref} does not exist in its registry")
    if locked is None:
        return Check(name="digest", status="info", actual=remote, note="no lock for this variant: nothing to compare")
    if locked == remote:
        return Check(name="digest", status="ok", expected=locked, actual=remote, note="as locked")
    return Check(name="digest", status="fail", expected=locked, actual=remote,
                 note="the tag moved since the lock was written")


def check_config(contract: BaseContract, variant: Variant, env: Mapping[str, str], platform: str) -> list[Check]:
    checks = [Check(name="platform", status="ok" if platform == variant.platform else "fail",
                    expected=variant.platform, actual=platform)]
    for k, want in sorted(contract.env.items()):
        have = env.get(k)
        checks.append(Check(name=f"env {k}", status="ok" if have == want else "fail", expected=want,
                            actual="(not set)" if have is None else have))
    for k, prefix in sorted(contract.env_prefix.items()):
        have = env.get(k)
        checks.append(Check(name=f"env {k}", status="ok" if have is not None and have.startswith(prefix) else "fail",
                            expected=f"{prefix}*", actual="(not set)" if have is None else have))
    for k in contract.env_present:
        have = env.get(k)
        checks.append(Check(name=f"env {k}", status="ok" if have is not None else "fail", expected="(set)",
                            actual="(not set)" if have is None else have))
    return checks


def _probe_check(name: str, want: str | None, have: str | None, why_missing: str | None) -> Check:
    if want is None:
        return Check(name=name, status="info", actual=have or "(none)",
                     note="not required by the contract" + (f"; {why_missing}" if have is None and why_missing else ""))
    if have is None:
        return Check(name=name, status="fail", expected=f"{want}*", actual="(none)", note=why_missing or "")
    return Check(name=name, status="ok" if version_matches(want, have) else "fail", expected=f"{want}*", actual=have)


def check_probe(contract: BaseContract, probe: BaseProbe) -> list[Check]:
    e = probe.errors
    checks = [
        _probe_check("python", contract.python, probe.python, e.get("python")),
        _probe_check("torch", contract.torch, probe.torch, e.get("torch")),
        _probe_check("torch.version.cuda", contract.torch_cuda, probe.torch_cuda, e.get("torch_cuda") or e.get("torch")),
        _probe_check("cuDNN (torch)", contract.cudnn, probe.cudnn, e.get("cudnn") or e.get("torch")),
    ]
    where = f"{probe.cuda_home}/bin/nvcc" if probe.cuda_home else "$CUDA_HOME/bin/nvcc"
    if contract.nvcc:
        checks.append(Check(name="nvcc", status="ok" if probe.nvcc else "fail", expected=where,
                            actual=probe.nvcc or "(missing)", note=e.get("nvcc", "")))
    else:
        checks.append(Check(name="nvcc", status="info", actual=probe.nvcc or "(missing)",
                            note="not required by the contract"))
    return checks


def skipped_probe(why: str) -> list[Check]:
    return [Check(name=n, status="skip", note=why) for n in ("python", "torch", "torch.version.cuda", "cuDNN (torch)", "nvcc")]


# --------------------------------------------------------------------------------------- the probe

# Runs inside arbitrary base images with their own python3 (3.10 in NGC 24.01): standard library only,
# every item guarded so that a missing torch or CUDA is reported, never fatal. `import torch` works
# without a GPU; cudnn.version() loads libcudnn but needs no device.
PROBE_SCRIPT = r"""
import json, os, sys
out = {"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "errors": {}}
def err(k, e):
    out["errors"][k] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
try:
    import torch
    out["torch"] = str(torch.__version__)
    out["torch_cuda"] = torch.version.cuda
    if torch.version.cuda is None:
        out["errors"]["torch_cuda"] = "torch was built without CUDA"
    try:
        v = torch.backends.cudnn.version()
        if v is None:
            out["errors"]["cudnn"] = "torch sees no cuDNN"
        else:
            major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
            out["cudnn"] = "%d.%d.%d" % (major, rest // 100, rest % 100)
    except Exception as e:
        err("cudnn", e)
except Exception as e:
    err("torch", e)
home = os.environ.get("CUDA_HOME")
out["cuda_home"] = home
if not home:
    out["errors"]["nvcc"] = "CUDA_HOME is not set"
else:
    nvcc = os.path.join(home, "bin", "nvcc")
    if os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
        out["nvcc"] = nvcc
    else:
        out["errors"]["nvcc"] = "no executable " + nvcc
print(json.dumps(out))
"""


def parse_probe(result: RunOutcome) -> BaseProbe:
    """The probe's JSON line, or a BaseProbe whose errors say why there is none."""
    if result.timed_out:
        return BaseProbe(errors={"python": "the probe timed out"})
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return BaseProbe.from_json(untrusted.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError):
                break
    tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
    if result.exit_code in (126, 127) or "executable file not found" in result.stderr:
        return BaseProbe(errors={"python": f"no python3 in the image ({tail})"})
    return BaseProbe(errors={"python": f"the probe exited {result.exit_code}: {tail}"})


# --------------------------------------------------------------------------------------- records


def diff_records(old: BaseRecord, new: BaseRecord) -> tuple[BaseChange, ...]:
    changes: list[BaseChange] = []
    if old.platform != new.platform:
        changes.append(BaseChange(kind="platform", key="platform", old=old.platform, new=new.platform))
    for kind, a, b in (("env", old.env, new.env), ("label", old.labels, new.labels)):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                changes.append(BaseChange(kind=kind, key=k, old=a.get(k), new=b.get(k)))  # type: ignore[arg-type]
    if old.probe is not None and new.probe is not None:
        po, pn = old.probe.to_json(), new.probe.to_json()
        for k in ("python", "torch", "torch_cuda", "cudnn", "nvcc"):
            if po[k] != pn[k]:
                changes.append(BaseChange(kind="probe", key=k, old=po[k], new=pn[k]))
    return tuple(changes)


RECORD_MAX = 1 << 20  # bytes of one base record read at most (its env, labels and probe: a few KiB)


def _texts(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in value.items())


def _record_shape(data: object) -> bool:
    """Whether ``data`` has the shape BaseRecord.to_json writes (what from_json and the comparisons take)."""
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("ref", "digest", "platform")):
        return False
    probe = data.get("probe")
    probe_ok = probe is None or (isinstance(probe, dict) and _texts(probe.get("errors") or {}) and all(
        probe.get(k) is None or isinstance(probe.get(k), str)
        for k in ("python", "torch", "torch_cuda", "cudnn", "cuda_home", "nvcc")))
    return _texts(data.get("env")) and _texts(data.get("labels")) and isinstance(data.get("recorded_at", ""), str) and probe_ok


class BaseRecords:
    """``<cache>/reports/bases/<digest hex>.json``: one small record per verified base digest."""

    def __init__(self, reports: Path) -> None:
        self.root = reports / "bases"

    def _path(self, digest: str) -> Path:
        return self.root / (digest.removeprefix("sha256:") + ".json")

    def get(self, digest: str) -> BaseRecord | None:
        """The record of ``digest``, or None. A file of the cache, read as untrusted: a regular file of at most
        RECORD_MAX bytes opened without blocking (a FIFO there made `verify` wait forever), JSON bounded in depth
        (100,000 '[' was json's RecursionError), each field of its type (a list as ``env`` was a ValueError). A
        damaged record is as good as none: it is rewritten by the next verify."""
        try:
            data = untrusted.loads(untrusted.read_regular(self._path(digest), RECORD_MAX))
        except (OSError, ValueError):
            return None
        return BaseRecord.from_json(data) if _record_shape(data) else None

    def put(self, record: BaseRecord) -> Path:
        path = self._path(record.digest)
        write_atomic(path, json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
        return path

    def latest_for(self, name: str, *, other_than: str) -> BaseRecord | None:
        """The newest record of another digest of the same image name (registry/repository)."""
        found: list[BaseRecord] = []
        for p in sorted(self.root.glob("*.json")) if self.root.is_dir() else ():
            r = self.get("sha256:" + p.stem)
            if r is not None and r.digest != other_than and ImageRef.parse(r.ref).name() == name:
                found.append(r)
        return max(found, key=lambda r: r.recorded_at, default=None)


# --------------------------------------------------------------------------------------- orchestration


def find_base(pins_dir: Path, alias: str, stack: str | None, default_stack: str) -> tuple[Path, Manifest]:
    """The manifest whose base is ``alias``: --stack's, else the default stack's, else the only one."""
    if stack is not None:
        path = pins.find(pins_dir, stack)
        m = pins.load(path)
        if m.base.alias != alias:
            raise UsageError(f"the base of stack {stack} is {m.base.alias!r}, not {alias!r}",
                             fix=f"run `buildctl verify {m.base.alias} --stack {stack}`")
        return path, m
    known = pins.stacks(pins_dir)
    order = [default_stack] if default_stack in known else []
    order += sorted(set(known) - {default_stack})
    matches: list[tuple[Path, Manifest]] = []
    aliases: dict[str, str] = {}
    unreadable: list[str] = []
    for name in order:
        try:
            m = pins.load(known[name])
        except ManifestErrors:
            unreadable.append(name)  # its own errors are `buildctl pins check`'s to report
            continue
        aliases[name] = m.base.alias
        if m.base.alias == alias:
            if name == default_stack:
                return known[name], m
            matches.append((known[name], m))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"base alias {alias!r} names the bases of several stacks: "
                         + ", ".join(m.stack for _, m in matches), fix="pick one with --stack STACK")
    listed = ", ".join(f"{a} ({s})" for s, a in sorted(aliases.items())) or "none"
    unread = f"; unreadable manifests: {', '.join(unreadable)} (see `buildctl pins check`)" if unreadable else ""
    raise UsageError(f"no stack has a base alias {alias!r}", fix=f"known base aliases: {listed}{unread}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def verify(*, alias: str, stack: str, variant: Variant, contract: BaseContract, lock: VariantLock | None,
           engine: VerifyEngine, mirrors: Mapping[str, str], store: BaseRecords,
           clock: Callable[[], str] = _now) -> VerifyResult:
    checked = mirror_ref(variant.image, dict(mirrors))
    target = ImageRef.parse(checked)
    locked = lock.base.digest if lock is not None and lock.base is not None else None
    try:
        remote = engine.registry_digest(checked)
    except UnreachableError as exc:
        raise UnreachableError(
            f"cannot verify {alias} ({stack}/{variant.name}): {exc.what}", why=exc.why,
            fix=exc.fix or (f"point buildctl at a mirror: BUILDCTL_REGISTRY_MIRRORS='{target.host}=HOST:PORT' "
                            "(or registry_mirrors in config.toml)"),
        ) from exc
    first = check_digest(locked, remote, checked)
    if lock is not None and lock.base is not None and lock.base.ref != variant.image:
        # the manifest names another base than the one locked: the locked digest says nothing about it
        locked = None
        first = Check(name="digest", status="fail", expected=f"a lock of {variant.image}",
                      actual=f"the lock is of {lock.base.ref}", note="re-lock the stack (`buildctl lock STACK`)")
    result = VerifyResult(alias=alias, stack=stack, variant=variant.name, ref=variant.image,
                          checked_ref=checked, locked_digest=locked, digest=remote, checks=(first,))
    if remote is None:
        return result
    checks = list(result.checks)

    pinned = f"{target.name()}@{remote}"
    if not engine.image_exists(pinned):
        engine.pull(pinned, platform=variant.platform)
    info = engine.inspect_image(pinned)
    checks += check_config(contract, variant, info.env, info.platform)

    probe: BaseProbe | None = None
    host = engine.platform()
    if info.platform != host:
        checks += skipped_probe(f"the image is {info.platform} and the engine runs {host}: "
                                "the probe needs emulation (binfmt/qemu) or a native engine")
    else:
        # python3 as the entrypoint: an image's own ENTRYPOINT (a launch script) must not wrap the probe
        probe = parse_probe(engine.run(pinned, ["-c", PROBE_SCRIPT], entrypoint=["python3"], network_mode="none",
                                       timeout=PROBE_TIMEOUT_S))
        checks += check_probe(contract, probe)

    record = BaseRecord(ref=checked, digest=remote, platform=info.platform, env=dict(info.env),
                        labels=dict(info.labels), probe=probe, recorded_at=clock())
    baseline, note, changes = _against_previous(store, record, locked, target.name())
    store.put(record)
    return replace(result, checks=tuple(checks), baseline=baseline, baseline_note=note, changes=changes)


def _against_previous(store: BaseRecords, record: BaseRecord, locked: str | None,
                      name: str) -> tuple[str | None, str, tuple[BaseChange, ...] | None]:
    """(baseline digest, what it is, changes); changes is None when there is nothing to compare with."""
    if locked is not None and locked == record.digest:
        return locked, "the locked base", ()
    if locked is not None:
        old = store.get(locked)
        if old is None:
            return locked, ("no record of the locked base was kept here (a verify while the lock was "
                            "current keeps one)"), None
        return locked, "the locked base", diff_records(old, record)
    old = store.latest_for(name, other_than=record.digest)
    if old is None:
        return None, "no earlier base of this image was verified here", None
    return old.digest, f"the base verified at {old.recorded_at}", diff_records(old, record)


# --------------------------------------------------------------------------------------- rendering

_MARK: Mapping[CheckStatus, str] = {"ok": "ok", "fail": "FAIL", "skip": "skip", "info": "info"}


def render(result: VerifyResult) -> str:
    lines = [f"verify {result.alias} ({result.stack}/{result.variant}): {result.checked_ref}"]
    if result.checked_ref != result.ref:
        lines[0] += f" (mirror of {result.ref})"
    width = max((len(c.name) for c in result.checks), default=0)
    for c in result.checks:
        detail = c.actual
        if c.status == "fail" and c.expected:
            detail = f"expected {c.expected}, got {c.actual}"
        elif c.status == "ok" and c.expected not in ("", c.actual, "(set)"):
            detail = f"{c.actual} (expected {c.expected})"
        if c.note:
            detail = f"{detail}: {c.note}" if detail else c.note
        lines.append(f"  {_MARK[c.status]:<4}  {c.name:<{width}}  {detail}".rstrip())
    if result.baseline_note:
        digest = f" ({result.baseline})" if result.baseline else ""
        head = f"changes against {result.baseline_note}{digest}"
        if result.changes is None:
            lines.append(f"changes: not shown: {result.baseline_note}{digest}")
        elif not result.changes:
            lines.append(f"{head}: none")
        else:
            lines.append(f"{head}:")
            lines += [f"  {ch.kind} {ch.key}: {_show(ch.old)} -> {_show(ch.new)}" for ch in result.changes]
    n = len(result.failures)
    lines.append("result: ok" if n == 0 else f"result: FAILED ({n} check{'s' if n > 1 else ''}: "
                 + ", ".join(c.name for c in result.failures) + ")")
    return "\n".join(lines) + "\n"


def _show(value: str | None) -> str:
    return "(unset)" if value is None else repr(value) if value == "" else value
