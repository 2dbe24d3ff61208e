"""Manifest field rules: the syntax each untrusted string field must have, and the bounds of numbers."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from buildctl import syntax
from buildctl.manifest.model import (
    SHA256_COMPUTE,
)

SHA_RE = syntax.SHA_RE
SHA256_RE = syntax.SHA256_RE
NAME_RE = syntax.NAME_RE
OPTION_RE = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # an option as entrypoint.drop names it (no '=value')
PLATFORMS = ("linux/amd64", "linux/arm64")
MAX_DEPTH = 40
# YAML aliases let a small file stand for a huge document (a 10,000-item list aliased 10,000 times is
# 10^8 values in 114 KB); the loader counts the values a document expands to and refuses past this.
MAX_EXPANDED_NODES = 200_000
PR_NUMBER_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class FieldRule:
    """The syntax of one field: ``value`` for a string (or each string of a list / mapping), ``key`` for the
    keys of a mapping field."""

    value: syntax.Rule | None = None
    key: syntax.Rule | None = None


def _download_sha(value: str) -> str | None:
    return None if value == SHA256_COMPUTE else syntax.sha256_hex(value)


# (class name, field) -> rule. A string field not named here may still hold any one-line text (no control
# characters); each such field is quoted where it is used (buildctl/quoting.py).
FIELD_RULES: Mapping[tuple[str, str], FieldRule] = {
    ("Manifest", "stack"): FieldRule(value=syntax.name),
    ("Manifest", "description"): FieldRule(value=syntax.prose),
    ("Manifest", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("Manifest", "cleanup"): FieldRule(value=syntax.abs_glob),
    ("BaseSpec", "alias"): FieldRule(value=syntax.name),
    ("BaseSpec", "description"): FieldRule(value=syntax.prose),
    ("BaseContract", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("BaseContract", "env_prefix"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("BaseContract", "env_present"): FieldRule(value=syntax.env_name),
    ("BaseContract", "python"): FieldRule(value=syntax.version),
    ("BaseContract", "torch"): FieldRule(value=syntax.text),
    ("BaseContract", "torch_cuda"): FieldRule(value=syntax.version),
    ("BaseContract", "cudnn"): FieldRule(value=syntax.version),
    ("Variant", "description"): FieldRule(value=syntax.prose),
    ("Variant", "image"): FieldRule(value=syntax.image),
    ("Variant", "cuda"): FieldRule(value=syntax.version),
    ("Variant", "python"): FieldRule(value=syntax.version),
    ("Variant", "components"): FieldRule(key=syntax.name),
    ("ComponentOverride", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("AptRepo", "lines"): FieldRule(value=syntax.apt_line),
    ("AptRepo", "keyring"): FieldRule(value=syntax.name),
    ("AptPackage", "name"): FieldRule(value=syntax.apt_name),
    ("AptPackage", "version"): FieldRule(value=syntax.apt_version),
    ("Download", "dest"): FieldRule(value=syntax.abs_path),
    ("Download", "mode"): FieldRule(value=syntax.mode),
    ("PlatformUrl", "url"): FieldRule(value=syntax.download_url),
    ("PlatformUrl", "sha256"): FieldRule(value=_download_sha),
    ("RemoveSpec", "pip"): FieldRule(value=syntax.pip_name),
    ("RemoveSpec", "paths"): FieldRule(value=syntax.abs_glob),
    ("ProtectSpec", "packages"): FieldRule(value=syntax.pip_pattern),
    ("ProtectSpec", "replace"): FieldRule(value=syntax.pip_pattern),
    ("CudnnSpec", "package"): FieldRule(value=syntax.apt_name),
    ("CudnnSpec", "version"): FieldRule(value=syntax.version),
    ("CudnnSpec", "apt_version"): FieldRule(value=syntax.apt_version),
    ("CudnnSpec", "repo"): FieldRule(value=syntax.name),
    ("PullRequest", "head"): FieldRule(value=syntax.sha),
    ("PullRequest", "target"): FieldRule(value=syntax.git_ref),
    ("Change", "commit"): FieldRule(value=syntax.sha),
    ("Change", "head"): FieldRule(value=syntax.sha),
    ("Change", "target"): FieldRule(value=syntax.git_ref),
    ("Change", "patch"): FieldRule(value=syntax.rel_path),
    ("Change", "sha256"): FieldRule(value=syntax.sha256_hex),
    ("Patch", "file"): FieldRule(value=syntax.rel_path),
    ("Patch", "sha256"): FieldRule(value=syntax.sha256_hex),
    ("ComponentBuild", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("ComponentBuild", "parallel_env"): FieldRule(value=syntax.env_name),
    ("ComponentInstall", "path"): FieldRule(value=syntax.abs_path),
    ("ComponentInstall", "dist"): FieldRule(value=syntax.pip_name),
    ("ComponentInstall", "module"): FieldRule(value=syntax.module),
    ("ComponentInstall", "provided"): FieldRule(value=syntax.pip_name),
    ("Component", "repo"): FieldRule(value=syntax.repo_location),
    ("MissingObject", "repo"): FieldRule(value=syntax.repo_location),
    ("MissingObject", "path"): FieldRule(value=syntax.rel_path),
    ("MissingObject", "blob"): FieldRule(value=syntax.sha),
    ("MissingObject", "why"): FieldRule(value=syntax.prose),
    ("Component", "commit"): FieldRule(value=syntax.sha),
    ("Component", "branch"): FieldRule(value=syntax.git_ref),
    ("SitePath", "doc"): FieldRule(value=syntax.prose),
    ("Launcher", "wrapper"): FieldRule(value=syntax.name),
    ("Launcher", "args"): FieldRule(value=syntax.text),
    ("Profile", "description"): FieldRule(value=syntax.prose),
    ("Profile", "upstream_defect"): FieldRule(value=syntax.prose),
    ("Profile", "extends"): FieldRule(value=syntax.name),
    ("Profile", "drop"): FieldRule(value=syntax.regex(OPTION_RE, "an option such as '--fp8-recipe'")),
    ("Profile", "reasons"): FieldRule(value=syntax.prose, key=syntax.regex(OPTION_RE, "an option such as '--num-layers'")),
    ("EntrypointOverride", "env"): FieldRule(value=syntax.text, key=syntax.env_name),
    ("EntrypointOverride", "drop"): FieldRule(value=syntax.regex(OPTION_RE, "an option such as '--fp8-recipe'")),
    ("EntrypointOverride", "default_profile"): FieldRule(value=syntax.name),
    ("Entrypoint", "workdir"): FieldRule(value=syntax.abs_path),
    ("Entrypoint", "paths"): FieldRule(key=syntax.env_name),
    ("Entrypoint", "profiles"): FieldRule(key=syntax.name),
    ("Entrypoint", "default_profile"): FieldRule(value=syntax.name),
    ("Entrypoint", "megatron"): FieldRule(value=syntax.name),
    ("SmokeSpec", "python"): FieldRule(value=syntax.interpreter),
    ("SmokeSpec", "imports"): FieldRule(value=syntax.module),
    ("SmokeSpec", "gpu_waiver"): FieldRule(value=syntax.prose),
    ("TrainSpec", "profile"): FieldRule(value=syntax.name),
    ("PushSpec", "registry"): FieldRule(value=syntax.host_port),
    ("PushSpec", "repository"): FieldRule(value=syntax.repository),
}
# (class name, field) -> (lowest excluded, highest allowed) for numbers
NUMBER_RULES: Mapping[tuple[str, str], tuple[float, float]] = {
    ("ComponentBuild", "memory_per_job_gib"): (0.0, 4096.0),
    ("SmokeSpec", "timeout_s"): (0.0, 86_400.0),
    ("TrainSpec", "timeout_s"): (0.0, 86_400.0),
    ("TrainSpec", "min_steps"): (0.0, 1_000_000.0),
    ("Profile", "gpus"): (0.0, 1_000_000.0),
    ("Profile", "nodes"): (0.0, 100_000.0),
    ("Entrypoint", "gpus"): (0.0, 1_000_000.0),
    ("Entrypoint", "nodes"): (0.0, 100_000.0),
    ("EntrypointOverride", "gpus"): (0.0, 1_000_000.0),
    ("EntrypointOverride", "nodes"): (0.0, 100_000.0),
    ("Launcher", "master_port"): (0.0, 65535.0),
    ("Variant", "nvlink_domain"): (0.0, 1_000_000.0),
    ("PullRequest", "number"): (0.0, float(PR_NUMBER_MAX)),
    ("Change", "pr"): (0.0, float(PR_NUMBER_MAX)),
    ("SizeBudget", "bytes"): (0.0, float(1 << 50)),
}

