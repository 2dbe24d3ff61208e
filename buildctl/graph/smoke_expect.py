"""The smoke suite's expectation for one variant's image, from the manifest and its lock (pure).

``expect_for(manifest, lock, variant)`` computes smoke/README.md's expect.json (schema 1); the graph
records it in the assemble image under ``EXPECT_LABEL`` (canonical JSON; base64 of it is read too), with
the interpreter the training runs with under ``PYTHON_LABEL``, so that an image can be smoked anywhere
without its manifest (``buildctl.builder.smoke`` runs it).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from buildctl import untrusted
from buildctl.errors import Location, ManifestError, UsageError
from buildctl.graph.entrypoint import PATH_REF, SCRIPT_PATH, launches, select_profile, variant_entrypoint
from buildctl.graph.render import PIP_CHECK_BASE
from buildctl.lock.lockfile import VariantLock, canonical
from buildctl.manifest.model import (
    SMOKE_CHECKS,
    Component,
    GpuTier,
    InstallKind,
    Manifest,
    SmokeCheckName,
    TrainSpec,
    Variant,
)
from buildctl.manifest.profiles import arg_key, effective_args

EXPECT_LABEL = "io.buildctl.smoke.expect"  # the expectation, canonical JSON (or base64 of it)
PYTHON_LABEL = "io.buildctl.smoke.python"  # the interpreter the training runs with (default python3)
EXPECT_SCHEMA = 1
DEFAULT_TIMEOUT_S = 600.0
# The source-tree commit record the assemble layer writes (smoke/checks/versions.py reads it, then .git/HEAD).
COMMIT_RECORD = ".buildctl-commit"


# ------------------------------------------------------------------------------------- expectations


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """What an image must show (expect.json). ``checks`` holds each check's section as smoke/README.md defines it."""

    stack: str
    variant: str
    required: tuple[SmokeCheckName, ...]
    gpu_tier: GpuTier = GpuTier.REQUIRED
    gpu_waiver: str = ""
    python: str = "python3"
    python_path: tuple[str, ...] = ()
    driver_stub: Literal["auto", "always", "never"] = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    checks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """expect.json as the suite reads it (``python`` and ``timeout_s`` are the runner's, kept alongside)."""
        return {
            "schema": EXPECT_SCHEMA,
            "stack": self.stack,
            "variant": self.variant,
            "required": list(self.required),
            "gpu_tier": self.gpu_tier.value,
            "gpu_waiver": self.gpu_waiver,
            "python_path": list(self.python_path),
            "driver_stub": self.driver_stub,
            "checks": {k: dict(v) for k, v in sorted(self.checks.items())},
            "runner": {"python": self.python, "timeout_s": self.timeout_s},
        }

    def suite_json(self) -> dict[str, Any]:
        data = self.to_json()
        data.pop("runner")
        return data

    def label_value(self) -> str:
        """The EXPECT_LABEL value: canonical JSON (sorted keys), so equal expectations give equal labels."""
        return canonical(self.to_json())

    @staticmethod
    def from_json(data: Any, source: str = "expectation") -> Expectation:
        if not isinstance(data, dict) or data.get("schema") != EXPECT_SCHEMA:
            got = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise UsageError(f"{source}: smoke expectation schema {got!r} is not supported (this buildctl reads "
                             f"schema {EXPECT_SCHEMA})", fix="rebuild the image, or pass --stack S --variant V")
        try:
            required = tuple(data.get("required", []))
            bad = [r for r in required if r not in SMOKE_CHECKS]
            if bad:
                raise ValueError(f"unknown check {bad[0]!r}")
            runner = data.get("runner", {})
            return Expectation(
                stack=str(data.get("stack", "")), variant=str(data.get("variant", "")),
                required=required,  # checked against SMOKE_CHECKS above
                gpu_tier=GpuTier(data.get("gpu_tier", "required")), gpu_waiver=str(data.get("gpu_waiver", "")),
                python=str(runner.get("python", "python3")),
                python_path=tuple(str(p) for p in data.get("python_path", [])),
                driver_stub=data.get("driver_stub", "auto"),
                timeout_s=float(runner.get("timeout_s", DEFAULT_TIMEOUT_S)),
                checks={str(k): dict(v) for k, v in data.get("checks", {}).items()},
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{source}: malformed smoke expectation: {exc}",
                             fix="rebuild the image, or pass --stack S --variant V") from exc


def decode_label(value: str, source: str = EXPECT_LABEL) -> Expectation:
    """An EXPECT_LABEL value: canonical JSON, or base64 of it."""
    text = value.strip()
    if not text.startswith("{"):
        try:
            text = base64.b64decode(text, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise UsageError(f"{source}: neither JSON nor base64 JSON", fix="rebuild the image") from exc
    try:  # an image label (outside content): through the bounded reader
        data = untrusted.loads(text)
    except ValueError as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise UsageError(f"{source}: not valid JSON ({msg})", fix="rebuild the image") from None
    return Expectation.from_json(data, source)


def _section_versions(manifest: Manifest, lock: VariantLock | None) -> dict[str, Any]:
    if lock is not None and "pip" not in lock.missing:
        dists = [{"name": p.name, "version": p.version} for p in lock.pip]
    else:  # before locking (or in a partial lock without pip), the manifest's exact pins are all that is known
        dists = [{"name": r.name, "version": r.specifier[2:]} for r in manifest.pip.requirements if r.exact]
    comps: list[dict[str, Any]] = []
    for c in manifest.components:
        locked = lock.components.get(c.name) if lock else None
        # The built component reports the prepared tree (commit + PRs + patches), see sources.py.
        sha = (locked.tree or locked.commit) if locked else (c.commit if not c.steps else None)
        # Unlocked, a tree with PRs or patches on top has no commit yet: the suite reports it as not checked.
        unlocked = None if sha else _unlocked_why(c)
        if c.install.kind is InstallKind.WHEEL:
            entry: dict[str, Any] = {"name": c.name, "dist": c.install.dist or c.name}
            if c.install.module:
                entry["module"] = c.install.module
        else:
            if not c.install.path:
                continue
            entry = {"name": c.name, "path": c.install.path, "record": COMMIT_RECORD}
        if sha:
            entry["sha"] = sha
        elif unlocked:
            entry["unlocked"] = unlocked
        comps.append(entry)
    return {"distributions": dists, "components": comps}


def _unlocked_why(component: Component) -> str:
    on_top = ([f"cherry-pick {ch.commit[:12]}" for ch in component.steps if ch.commit is not None]
              + [f"PR #{p.number}" for p in component.prs] + ([f"{len(component.patches)} patch(es)"] if component.patches else []))
    return (f"the manifest pins {component.commit[:12]} with {', '.join(on_top)} on top; the commit of the prepared tree "
            "is known only once `buildctl lock` has prepared it")


def _entry_args(manifest: Manifest, variant: Variant, profile: str | None) -> list[str]:
    if manifest.entrypoint is None:
        return []
    e = variant_entrypoint(manifest, variant)
    _, prof = select_profile(e, profile)
    defaults = {name: p.default for name, p in e.paths.items()}
    words: list[str] = []
    for a in effective_args(e, prof):
        words.extend(PATH_REF.sub(lambda m: defaults.get(m.group(1), m.group(0)), w) for w in a.argv())
    return words


def megatron_profiles(manifest: Manifest, variant: Variant) -> list[dict[str, Any]]:
    """Every launch of the variant's script (each profile, and ``base`` where it declares its GPUs) as the
    megatron-args check validates it: the argument words, the world size and GPUs per node torchrun gives."""
    out: list[dict[str, Any]] = []
    if manifest.entrypoint is None:
        return out
    defaults = {name: p.default for name, p in manifest.entrypoint.paths.items()}
    for name, launch in launches(manifest, variant).items():
        if launch.gpus is None:
            continue
        words: list[str] = []
        for a in launch.args:
            words.extend(PATH_REF.sub(lambda m: defaults.get(m.group(1), m.group(0)), w) for w in a.argv())
        out.append({"name": name, "args": words, "world_size": launch.gpus,
                    "gpus_per_node": launch.gpus_per_node, "upstream_defect": launch.defect})
    return out


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if arg_key(a) == flag and i + 1 < len(args):
            return args[i + 1]
    return None


# Megatron-LM's defaults (megatron/training/arguments.py at effebd81) for the MoE shape the hybridep
# round trip scales down; hidden size, experts and sequence length have none that would mean MoE.
_MOE_FLAGS = {"hidden_size": ("--hidden-size", None), "num_experts": ("--num-experts", None),
              "expert_model_parallel_size": ("--expert-model-parallel-size", 1),
              "moe_router_topk": ("--moe-router-topk", 2), "moe_hybridep_num_sms": ("--moe-hybridep-num-sms", 16),
              "seq_length": ("--seq-length", None), "micro_batch_size": ("--micro-batch-size", 1)}


def _moe_shape(args: Sequence[str]) -> dict[str, int] | None:
    """The launch's MoE shape for the hybridep round trip, or None when the arguments do not give one."""
    out: dict[str, int] = {}
    for key, (flag, default) in _MOE_FLAGS.items():
        value = _flag_value(args, flag)
        if value is None:
            if default is None:
                return None
            out[key] = default
        elif value.isdigit():
            out[key] = int(value)
        else:
            return None
    return out


def train_section(manifest: Manifest, variant: Variant, spec: TrainSpec) -> dict[str, Any]:
    """The train check's section: the baked launch script, the profile it runs, and that launch's shape."""
    launch = launches(manifest, variant)[spec.profile]
    assert manifest.entrypoint is not None
    return {"profile": spec.profile, "script": SCRIPT_PATH, "launcher": manifest.entrypoint.launcher.kind,
            "gpus": launch.gpus, "min_steps": spec.min_steps, "timeout_s": spec.timeout_s}


def expect_for(manifest: Manifest, lock: VariantLock | None, variant: Variant, *,
               base_packages: Mapping[str, str] | None = None, profile: str | None = None) -> Expectation:
    """The expectation for one variant's image, from the manifest and (when there is one) its lock.

    ``base_packages`` are the base image's pip packages (name -> version), when the caller read them;
    without them the protected check compares against the base's own pip constraint file.
    Raises ManifestError when a required check has nothing to check (no cuDNN pin for ``cudnn``...).
    """
    smoke = manifest.smoke
    where = smoke.at if smoke.at.file != "<none>" else Location(file=manifest.path or manifest.stack)
    args = _entry_args(manifest, variant, profile)
    checks: dict[str, dict[str, Any]] = {}

    def need(check: str, why: str) -> None:
        if check in smoke.required:
            raise ManifestError(where, f"smoke.required lists {check!r} but {why}",
                                fix=f"add what it checks to the manifest, or drop {check!r} from smoke.required")

    versions = _section_versions(manifest, lock)
    if versions["distributions"] or versions["components"]:
        checks["versions"] = versions
    else:
        need("versions", "the stack has no lock and no components")
    cudnn = manifest.cudnn_for(variant)
    if cudnn is not None:
        section: dict[str, Any] = {"version": cudnn.version, "package": cudnn.package}
        if lock and lock.apt.get(cudnn.package):
            section["apt_version"] = lock.apt[cudnn.package]
        checks["cudnn"] = section
    else:
        need("cudnn", "the stack pins no cuDNN")
    if manifest.protect.packages:
        prot: dict[str, Any] = {"patterns": list(manifest.protect.packages), "replace": list(manifest.protect.replace)}
        if base_packages is not None:
            prot["base"] = dict(sorted(base_packages.items()))
        checks["protected"] = prot
    else:
        need("protected", "protect.packages is empty")
    if smoke.imports:
        checks["imports"] = {"modules": list(smoke.imports)}
    else:
        need("imports", "smoke.imports lists no modules")
    if "mxfp8" in smoke.required:
        checks["mxfp8"] = {}
    fp8_format = _flag_value(args, "--fp8-format")
    if "fp8" in smoke.required or fp8_format:
        if manifest.entrypoint is None:
            need("fp8", "the stack has no entrypoint whose arguments name an FP8 recipe")
        recipe = _flag_value(args, "--fp8-recipe") or "delayed"  # Megatron's default
        fp8: dict[str, Any] = {"recipe": recipe, "archs": list(variant.gpu_archs),
                               "source": f"the {manifest.stack} {variant.name} launch"}
        if fp8_format:
            fp8["format"] = fp8_format
        checks["fp8"] = fp8
    if manifest.entrypoint is not None:
        backend = _flag_value(args, "--attention-backend")
        att: dict[str, Any] = {"use_flash_attn": "--use-flash-attn" in args}
        if backend:
            att.update(backend=backend, source=f"--attention-backend {backend} ({manifest.stack} entrypoint)")
        checks["attention"] = att
    else:
        need("attention", "the stack has no entrypoint")
    if "hybridep" in smoke.required:
        checks["hybridep"] = {"megatron": manifest.entrypoint is not None and manifest.entrypoint.megatron is not None}
        roundtrip = _moe_shape(args)
        if roundtrip is not None:
            checks["hybridep"]["roundtrip"] = roundtrip
    if "arch" in smoke.required:
        wheels = [c.install.dist or c.name for c in manifest.components if c.install.kind is InstallKind.WHEEL]
        if not variant.gpu_archs or not wheels:
            need("arch", "the variant names no gpu_archs or the stack compiles no wheel")
        checks["arch"] = {"archs": list(variant.gpu_archs), "dists": wheels}
    if "requirements" in smoke.required:
        checks["requirements"] = {"baseline": PIP_CHECK_BASE}
    megatron = manifest.entrypoint.megatron if manifest.entrypoint else None
    if megatron is not None and manifest.entrypoint is not None:
        script = next((w for w in manifest.entrypoint.command if w.endswith(".py")), manifest.entrypoint.command[-1])
        checks["megatron-args"] = {"argv0": os.path.basename(script), "args": args,
                                   "profiles": megatron_profiles(manifest, variant),
                                   "gpu_archs": list(variant.gpu_archs)}
    else:
        need("megatron-args", "entrypoint.megatron names no Megatron-LM component")
    if smoke.train is not None and manifest.entrypoint is not None:
        checks["train"] = train_section(manifest, variant, smoke.train)
    else:
        need("train", "smoke.train names no profile")
    trees = tuple(c.install.path for c in manifest.components
                  if c.install.kind is InstallKind.SOURCE_TREE and c.install.path)
    return Expectation(
        stack=manifest.stack, variant=variant.name, required=tuple(smoke.required), gpu_tier=smoke.gpu_tier,
        gpu_waiver=smoke.gpu_waiver, python=smoke.python, python_path=trees, timeout_s=float(smoke.timeout_s),
        checks=checks,
    )


