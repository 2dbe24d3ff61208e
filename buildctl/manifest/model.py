"""The pin manifest as typed, frozen values.

A manifest (pins/<stack>.yaml) says everything that goes into a stack's images. ``pins.load`` turns
YAML into these classes; nothing past pins.py sees raw YAML. Field docstrings (the ``doc`` metadata)
are the manifest reference: ``buildctl pins schema`` prints them.

Every value carries the ``Location`` of the YAML node it came from in ``at`` (excluded from equality),
so that later stages (lock, lint-args, plan) can point a user at the file, line and key.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from buildctl.errors import Location
from buildctl.manifest.launch import Arg as Arg
from buildctl.manifest.launch import Entrypoint as Entrypoint
from buildctl.manifest.launch import EntrypointOverride as EntrypointOverride
from buildctl.manifest.launch import Launcher as Launcher
from buildctl.manifest.launch import Profile as Profile
from buildctl.manifest.launch import SitePath as SitePath
from buildctl.manifest.located import NOWHERE as NOWHERE
from buildctl.manifest.located import doc as _doc
from buildctl.manifest.located import loc as loc

Platform = Literal["linux/amd64", "linux/arm64"]
SmokeCheckName = Literal[
    "versions",  # component / package versions and SHAs against the lock
    "cudnn",  # cuDNN installed version against the pin
    "protected",  # protected base packages unchanged
    "imports",  # the modules listed in smoke.imports import
    "mxfp8",  # MXFP8 recipe importable / supported
    "fp8",  # the launch's FP8 recipe (--fp8-recipe/--fp8-format) importable / available on the GPU
    "attention",  # attention env agrees with the entrypoint
    "hybridep",  # deep_ep.HybridEPBuffer + Megatron HAVE_HYBRIDEP + nvcc + JIT dir
    "arch",  # compiled extensions carry the variant's GPU arch
    "megatron-args",  # baked arguments parse with Megatron's parser
    "requirements",  # pip check in the image reports nothing the base did not (our layers broke no requirement)
    "train",  # GPU tier: the launch script trains smoke.train.profile for a few steps, the loss finite and falling
]
SMOKE_CHECKS: tuple[str, ...] = typing.get_args(SmokeCheckName)


class PipConstraintPolicy(StrEnum):
    """What to do with the base image's PIP_CONSTRAINT (NGC sets it from 25.03 on)."""

    KEEP = "keep"  # installs honour the base's constraint file
    UNSET = "unset"  # installs run with PIP_CONSTRAINT="" (the DeepSeek guide's `unset PIP_CONSTRAINT`)


class InstallKind(StrEnum):
    WHEEL = "wheel"  # compiled off the chain into a wheel, installed by the assemble node
    SOURCE_TREE = "source-tree"  # the patched tree placed at install.path (Megatron-LM)


class ReproLevel(StrEnum):
    INPUTS = "inputs"
    SEMANTIC = "semantic"
    BIT = "bit"


class GpuTier(StrEnum):
    REQUIRED = "required"  # moving tags need GPU-tier smoke results
    WAIVED = "waived"  # the report says it was waived, and why


SHA256_COMPUTE = "compute"


# ---------------------------------------------------------------------------------------------- base


@dataclass(frozen=True, kw_only=True)
class BaseContract:
    """What a base image must say about itself (image config + a probe inside it)."""

    env: Mapping[str, str] = field(default_factory=dict, metadata=_doc("exact Config.Env values"))
    env_prefix: Mapping[str, str] = field(
        default_factory=dict, metadata=_doc("Config.Env values that must start with this (CUDA_VERSION: '13.')")
    )
    env_present: tuple[str, ...] = field(default=(), metadata=_doc("Config.Env names that must be set"))
    python: str | None = field(default=None, metadata=_doc("major.minor of the image's python3"))
    torch: str | None = field(default=None, metadata=_doc("torch version prefix seen by the probe"))
    torch_cuda: str | None = field(default=None, metadata=_doc("torch.version.cuda prefix"))
    cudnn: str | None = field(default=None, metadata=_doc("cuDNN version prefix seen by torch"))
    nvcc: bool | None = field(default=None, metadata=_doc("whether $CUDA_HOME/bin/nvcc must exist"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class BaseSpec:
    alias: str = field(metadata=_doc("name for `buildctl verify ALIAS` (e.g. nvcr-base)"))
    description: str = field(default="", metadata=_doc("what the base is, in words"))
    contract: BaseContract = field(default_factory=BaseContract)
    at: Location = loc()


# -------------------------------------------------------------------------------------------- system


@dataclass(frozen=True, kw_only=True)
class PlatformUrl:
    url: str = field(metadata=_doc("http(s) URL, fetched on the host and checked against sha256"))
    sha256: str = field(metadata=_doc("64 hex digits, or 'compute' to have the lock compute it"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class AptRepo:
    name: str
    # one sources.list line per platform: "deb [signed-by=/usr/share/keyrings/x.gpg] URL SUITE COMPONENT"
    lines: Mapping[str, str] = field(metadata=_doc("platform -> sources.list line"))
    keyring: str | None = field(default=None, metadata=_doc("name of a download that installs the key"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class AptPackage:
    name: str
    version: str = field(default="*", metadata=_doc("exact apt version, or a pattern with * the lock resolves"))
    at: Location = loc()

    @property
    def exact(self) -> bool:
        return "*" not in self.version


@dataclass(frozen=True, kw_only=True)
class AptSpec:
    repos: tuple[AptRepo, ...] = field(default=(), metadata=_doc("apt sources beyond the base's, by name"))
    packages: tuple[AptPackage, ...] = ()
    recommends: bool = field(
        default=False,
        metadata=_doc("install recommended packages too (plain `apt-get install`, as the DeepSeek guide and "
                      "verl's recipe do); false: --no-install-recommends"),
    )
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Download:
    name: str
    dest: str = field(default="", metadata=_doc("install: file: absolute path in the image (install: pip: none)"))
    mode: str = field(default="0644", metadata=_doc("install: file: the file's octal mode in the image"))
    urls: Mapping[str, PlatformUrl] = field(metadata=_doc("platform (or 'any') -> url + sha256"))
    install: Literal["file", "pip"] = field(
        default="file",
        metadata=_doc("file: placed at dest; pip: a wheel (the URL's last part is its file name) that the lock "
                      "resolves with the pip requirements (its own requirements locked with them) and the "
                      "python node pip-installs from the host's wheelhouse by name, version and sha256"),
    )
    at: Location = loc()

    def for_platform(self, platform: str) -> PlatformUrl | None:
        return self.urls.get(platform) or self.urls.get("any")


@dataclass(frozen=True, kw_only=True)
class PipRequirement:
    """One requirement line, parsed with `packaging` (name, extras, specifier)."""

    text: str
    name: str  # canonicalised
    specifier: str  # "" for unpinned
    at: Location = loc()

    @property
    def exact(self) -> bool:
        return self.specifier.startswith("==") and "," not in self.specifier and "*" not in self.specifier


@dataclass(frozen=True, kw_only=True)
class PipSpec:
    constraint: PipConstraintPolicy = field(default=PipConstraintPolicy.KEEP, metadata=_doc("keep or unset"))
    requirements: tuple[PipRequirement, ...] = ()
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class RemoveSpec:
    pip: tuple[str, ...] = field(default=(), metadata=_doc("pip packages removed from the base"))
    paths: tuple[str, ...] = field(default=(), metadata=_doc("absolute paths removed from the base"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class ProtectSpec:
    packages: tuple[str, ...] = field(
        default=(), metadata=_doc("base pip packages (fnmatch patterns) later layers must not replace")
    )
    replace: tuple[str, ...] = field(
        default=(), metadata=_doc("protected packages this stack replaces on purpose (verl: torch)")
    )
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class CudnnSpec:
    package: str = field(metadata=_doc("apt package, e.g. libcudnn9-cuda-13"))
    version: str = field(metadata=_doc("cuDNN version (9.14.0.64); apt version resolved by the lock"))
    apt_version: str = field(default="", metadata=_doc("exact apt version or pattern; default '<version>-*'"))
    repo: str | None = field(default=None, metadata=_doc("apt.repos entry it comes from"))
    at: Location = loc()


# ------------------------------------------------------------------------------------------ components


PrApply = Literal["own-commits", "merge"]


@dataclass(frozen=True, kw_only=True)
class PullRequest:
    """An upstream PR applied on top of the commit: `2146` or `{number: 2146, head: <sha>}`."""

    number: int = field(metadata=_doc("the PR number (refs/pull/N/head)"))
    head: str | None = field(default=None, metadata=_doc("the reviewed head SHA; the lock checks it still is"))
    apply: PrApply = field(default="own-commits", metadata=_doc(
        "own-commits: cherry-pick the PR's own commits (reachable from its head, not from target; merges of "
        "target skipped); merge: merge the head (brings whatever the PR branch merged)"))
    target: str = field(default="main", metadata=_doc("the branch the PR targets (its own commits are not on it)"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Patch:
    file: str = field(metadata=_doc("path relative to the manifest"))
    sha256: str = field(metadata=_doc("the patch file's sha256 (64 hex digits)"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Change:
    """One entry of a component's ordered ``changes``: exactly one of ``commit`` (an upstream commit to
    cherry-pick, full SHA), ``pr`` (with ``head``, ``apply``, ``target`` as for ``prs``) or ``patch``
    (with ``sha256``)."""

    commit: str | None = field(default=None, metadata=_doc("full SHA of an upstream commit to cherry-pick"))
    pr: int | None = field(default=None, metadata=_doc("PR number (refs/pull/N/head)"))
    head: str | None = field(default=None, metadata=_doc("pr: the reviewed head SHA"))
    apply: PrApply = field(default="own-commits", metadata=_doc("pr: own-commits or merge"))
    target: str = field(default="main", metadata=_doc("pr: the branch the PR targets"))
    patch: str | None = field(default=None, metadata=_doc("patch file, relative to the manifest"))
    sha256: str | None = field(default=None, metadata=_doc("patch: its sha256"))
    at: Location = loc()

    @property
    def kind(self) -> Literal["commit", "pr", "patch"]:
        return "commit" if self.commit is not None else "pr" if self.pr is not None else "patch"

    def label(self) -> str:
        if self.commit is not None:
            return f"commit {self.commit[:12]}"
        if self.pr is not None:
            return f"PR #{self.pr}"
        return f"patch {self.patch}"


@dataclass(frozen=True, kw_only=True)
class ComponentBuild:
    env: Mapping[str, str] = field(default_factory=dict, metadata=_doc("build environment (NVTE_CUDA_ARCHS, ...)"))
    requires: tuple[PipRequirement, ...] = field(default=(), metadata=_doc("pip build requirements"))
    apt: tuple[AptPackage, ...] = field(default=(), metadata=_doc("apt build requirements"))
    needs_cudnn: bool = field(default=False, metadata=_doc("the compile node builds on the cuDNN layer"))
    command: str = field(
        default="pip wheel --no-build-isolation --no-deps -w /out .",
        metadata=_doc("run in the source tree; must leave one wheel in /out"),
    )
    parallel_env: str | None = field(
        default=None, metadata=_doc("env var that receives the job count (MAX_JOBS, NVTE_BUILD_THREADS_PER_JOB)")
    )
    memory_per_job_gib: float = field(default=4.0, metadata=_doc("memory one compile job needs"))
    compile_cache: bool = field(
        default=True, metadata=_doc("compile through the compiler cache (config compile_cache); never part of a key"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class ComponentInstall:
    kind: InstallKind = field(default=InstallKind.WHEEL, metadata=_doc("wheel or source-tree"))
    path: str | None = field(default=None, metadata=_doc("source-tree only: where the tree goes"))
    dist: str | None = field(default=None, metadata=_doc("distribution name of the wheel (for version checks)"))
    module: str | None = field(default=None, metadata=_doc("import name (for smoke checks)"))
    requires: tuple[PipRequirement, ...] = field(
        default=(),
        metadata=_doc("the wheel's own requirements (its Requires-Dist): resolved and locked with the runtime pip "
                      "requirements (the lock marks those the base satisfies), installed by the python node; "
                      "the wheel itself is installed --no-deps"),
    )
    provided: tuple[str, ...] = field(
        default=(),
        metadata=_doc("requirements of the wheel that the base provides and the stack protects (torch): "
                      "not resolved; the requirements smoke check proves them satisfied in the image"),
    )
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class MissingObject:
    """A blob that a repository's mirror lacks and no build reads: buildctl writes a placeholder at that
    one path of the export (buildctl.sources.missing), and refuses any other missing object."""

    repo: str = field(metadata=_doc("the repository that lacks it (the component's or a submodule's, as .gitmodules names it)"))
    path: str = field(metadata=_doc("the file's path inside that repository (a picture or document)"))
    blob: str = field(metadata=_doc("the blob's SHA (7 to 40 hex digits)"))
    why: str = field(metadata=_doc("why no build needs it"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Component:
    name: str
    repo: str = field(metadata=_doc("https://, ssh://, file:// URL, git@host:path, or a path relative to the manifest; never starting with -"))
    commit: str = field(metadata=_doc("short (>= 7) or full SHA"))
    branch: str | None = field(default=None, metadata=_doc("the branch `buildctl bump` follows"))
    prs: tuple[PullRequest, ...] = field(default=(), metadata=_doc("upstream PRs applied in order (refs/pull/N/head)"))
    patches: tuple[Patch, ...] = field(default=(), metadata=_doc("patch files applied after prs (or: changes)"))
    # The ordered list of changes on top of `commit` (cherry-picks, PRs, patches), as written. The loader
    # fills prs/patches from it; `steps` is the one ordered view either way (changes, or prs then patches).
    changes: tuple[Change, ...] = field(default=(), metadata=_doc(
        "ordered changes: {commit: SHA}, {pr: N, head: SHA, apply: merge}, {patch: FILE, sha256: HEX}"))
    submodules: bool = field(default=True, metadata=_doc("check out submodules at the tree's gitlinks"))
    missing_objects: tuple[MissingObject, ...] = field(default=(), metadata=_doc(
        "blobs a mirror may lack: {repo: URL, path: PATH, blob: SHA, why: TEXT}; a placeholder stands in"))
    build: ComponentBuild = field(default_factory=ComponentBuild, metadata=_doc("how the wheel is compiled"))
    install: ComponentInstall = field(default_factory=ComponentInstall, metadata=_doc("how it goes in the image"))
    at: Location = loc()

    @property
    def steps(self) -> tuple[Change, ...]:
        """The changes on top of ``commit``, in the order they apply."""
        if self.changes:
            return self.changes
        return (tuple(Change(pr=pr.number, head=pr.head, apply=pr.apply, target=pr.target, at=pr.at) for pr in self.prs)
                + tuple(Change(patch=p.file, sha256=p.sha256, at=p.at) for p in self.patches))


# ------------------------------------------------------------------------------------------ smoke, push


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    """The ``train`` check: which launch profile trains on the GPU tier, and how long it may take."""

    profile: str = field(metadata=_doc("a launch profile (a proxy that fits the GPU host), or 'base'"))
    min_steps: int = field(default=20, metadata=_doc("logged training steps the run must reach"))
    timeout_s: int = field(default=900, metadata=_doc("the run is stopped after this long and fails"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class SmokeSpec:
    required: tuple[SmokeCheckName, ...] = field(default=(), metadata=_doc("checks that must pass"))
    gpu_tier: GpuTier = field(default=GpuTier.REQUIRED, metadata=_doc("required or waived (for promotion)"))
    gpu_waiver: str = field(default="", metadata=_doc("why the GPU tier is waived (required with waived)"))
    python: str = field(default="python3", metadata=_doc("interpreter the training runs with"))
    imports: tuple[str, ...] = field(default=(), metadata=_doc("modules the imports check imports"))
    timeout_s: int = field(default=300, metadata=_doc("seconds the suite may run"))
    train: TrainSpec | None = field(default=None, metadata=_doc("the GPU tier's train check (profile to run)"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class PushSpec:
    registry: str = field(metadata=_doc("host[:port]; --registry or the config override it"))
    repository: str = field(metadata=_doc("repository under the registry, e.g. training/deepseek-v3"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class SizeBudget:
    """How many bytes a promoted image may add or rewrite against the last promoted one of its variant."""

    bytes: int = field(metadata=_doc("the most bytes of layers added or rewritten (as the registry stores them)"))
    fail: bool = field(default=False, metadata=_doc("going over stops the promotion; false: reported only"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class ReproSpec:
    """Which reproducibility level each node kind is declared to reach."""

    levels: Mapping[str, ReproLevel] = field(default_factory=dict, metadata=_doc("node kind -> inputs|semantic|bit"))
    at: Location = loc()


# ---------------------------------------------------------------------------------------------- variant


@dataclass(frozen=True, kw_only=True)
class ComponentOverride:
    env: Mapping[str, str] = field(default_factory=dict, metadata=_doc("laid over the component's build.env"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    description: str = field(default="", metadata=_doc("what the variant is for, in words"))
    image: str = field(metadata=_doc("base image reference (tag or @digest)"))
    platform: Platform = field(metadata=_doc("where it runs; its nodes build on builders of it"))
    cuda: str = field(metadata=_doc("CUDA major version, e.g. '13'"))
    gpu_archs: tuple[str, ...] = field(default=(), metadata=_doc("compute capabilities, e.g. ['10.0']"))
    nvlink_domain: int | None = field(default=None, metadata=_doc(
        "GPUs one NVLink domain joins on the target machine: 72 for GB200 NVL72, 8 for an HGX H100/H200 node "
        "(lint-args holds HybridEP's NVLINK_DOMAIN_SIZE to it)"))
    python: str = field(default="3.12", metadata=_doc("major.minor of the base's python"))
    contract: BaseContract = field(default_factory=BaseContract, metadata=_doc("merged over base.contract"))
    cudnn: CudnnSpec | None = field(default=None, metadata=_doc("replaces the stack's cudnn"))
    components: Mapping[str, ComponentOverride] = field(default_factory=dict, metadata=_doc("per-component env"))
    entrypoint: EntrypointOverride = field(default_factory=EntrypointOverride,
                                           metadata=_doc("the entrypoint's env and arguments for this variant"))
    budget: SizeBudget | None = field(default=None, metadata=_doc("replaces the stack's size budget"))
    at: Location = loc()


# ---------------------------------------------------------------------------------------------- stack


@dataclass(frozen=True, kw_only=True)
class Manifest:
    schema: int = field(default=1, metadata=_doc("the manifest format's version"))
    stack: str = field(metadata=_doc("the stack's name (the file is pins/<stack>.yaml)"))
    description: str = field(default="", metadata=_doc("what the stack is, in words"))
    path: str = field(default="", compare=False, metadata=_doc("(set by the loader)"))
    base: BaseSpec
    variants: tuple[Variant, ...] = field(metadata=_doc("name -> variant; the first is the default"))
    apt: AptSpec = field(default_factory=AptSpec)
    downloads: tuple[Download, ...] = ()
    pip: PipSpec = field(default_factory=PipSpec)
    remove: RemoveSpec = field(default_factory=RemoveSpec)
    protect: ProtectSpec = field(default_factory=ProtectSpec)
    cudnn: CudnnSpec | None = None
    components: tuple[Component, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, metadata=_doc("runtime environment of the image"))
    entrypoint: Entrypoint | None = None
    smoke: SmokeSpec = field(default_factory=SmokeSpec)
    push: PushSpec | None = None
    budget: SizeBudget | None = field(default=None, metadata=_doc("size budget of every variant's final image"))
    repro: ReproSpec = field(default_factory=ReproSpec)
    cleanup: tuple[str, ...] = field(default=(), metadata=_doc("paths emptied at the end of each layer"))
    at: Location = loc()

    @property
    def default_variant(self) -> Variant:
        return self.variants[0]

    def variant(self, name: str | None) -> Variant:
        """The named variant (default: the first). Raises KeyError for an unknown name."""
        if name is None:
            return self.variants[0]
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def cudnn_for(self, variant: Variant) -> CudnnSpec | None:
        return variant.cudnn or self.cudnn

    def env_for(self, variant: Variant) -> dict[str, str]:
        """The image's runtime environment: ``env`` with the variant's ``entrypoint.env`` laid over it."""
        return {**self.env, **variant.entrypoint.env}

    def component_env(self, component: Component, variant: Variant) -> dict[str, str]:
        env = dict(component.build.env)
        override = variant.components.get(component.name)
        if override:
            env.update(override.env)
        return env

    def contract_for(self, variant: Variant) -> BaseContract:
        """base.contract with the variant's contract laid over it."""
        b, v = self.base.contract, variant.contract
        return BaseContract(
            env={**b.env, **v.env},
            env_prefix={**b.env_prefix, **v.env_prefix},
            env_present=tuple(dict.fromkeys((*b.env_present, *v.env_present))),
            python=v.python or b.python or variant.python,
            torch=v.torch or b.torch,
            torch_cuda=v.torch_cuda or b.torch_cuda,
            cudnn=v.cudnn or b.cudnn,
            nvcc=v.nvcc if v.nvcc is not None else b.nvcc,
            at=v.at if v.at is not NOWHERE else b.at,
        )
