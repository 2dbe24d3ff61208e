"""The launch arguments checked against the pinned Megatron-LM, for plan, build, nightly and `lint-args`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from buildctl.config import Config
from buildctl.errors import BuildctlError
from buildctl.lock import lockfile
from buildctl.manifest.model import Manifest, Variant
from buildctl.megatron import lintargs
from buildctl.services import wiring
from buildctl.services.target import Target

Warn = Callable[[str], None]


def prepared_source(config: Config, manifest_path: Path) -> lintargs.MegatronSourceLocator:
    """The prepared tree of ``entrypoint.megatron`` at its locked commit + PRs, from the sources cache only.

    Nothing is fetched for a plan: a mirror that is not on this host yet (offline, never built) makes the
    lint say why it did not run instead of failing; `buildctl build` fetches sources and so fills it.
    """

    def locate(manifest: Manifest, variant: Variant) -> lintargs.SourceLookup:
        e = manifest.entrypoint
        if e is None or e.megatron is None:
            return lintargs.no_source_cache(manifest, variant)
        component = manifest.component(e.megatron)
        vlock = lockfile.read_beside(manifest_path, manifest.stack)
        locked = vlock.variants.get(variant.name) if vlock else None
        lc = locked.components.get(component.name) if locked else None
        if lc is None or not lc.tree:
            return lintargs.SourceLookup(root=None, reason=(
                f"component {component.name} is not locked yet (`buildctl lock {manifest.stack}` pins its tree)"))
        sources = wiring.sources(config, base_dir=manifest_path.parent)
        if not sources.mirror_path(component.repo).exists():
            return lintargs.SourceLookup(root=None, reason=(
                f"the source of {component.name} ({component.repo}) is not fetched on this host yet "
                f"(`buildctl build {manifest.stack}` fetches it)"))
        try:
            root = sources.exported(sources.prepare_component(component, lc))
        except BuildctlError as exc:
            return lintargs.SourceLookup(root=None, reason=f"the source of {component.name} could not be "
                                                           f"prepared here: {exc.what}")
        return lintargs.SourceLookup(root=root, reason=f"{component.name} at {lc.tree[:12]} (prepared tree)")

    return locate


def lint_entrypoint(config: Config, target: Target, warn: Warn) -> lintargs.LintReport | None:
    """The launch arguments against the pinned Megatron-LM where its prepared source is at hand (the
    consistency checks run either way); plan and build stop on its errors, before anything is built."""
    if target.manifest.entrypoint is None:
        return None
    report = lintargs.lint_for_plan(target.manifest, target.variant, prepared_source(config, target.manifest_path), target.profile)
    for f in report.findings:
        if f.severity != "error":
            warn(str(f))
    return report


def lint_before_build(config: Config, target: Target, warn: Warn) -> None:
    """Refuse a partial lock; fetch and prepare the pinned Megatron-LM first (the build needs it anyway), so
    that the launch arguments are checked against it before any node is built; stop on errors."""
    lockfile.refuse_partial(target.lock, target.variant.name, action="build", lock_file=str(lockfile.lock_path(target.manifest_path)))
    e = target.manifest.entrypoint
    if e is None:
        return
    if e.megatron and target.vlock is not None and e.megatron in target.vlock.components:
        sources = wiring.sources(config, base_dir=target.manifest_path.parent)
        sources.prepare_component(target.manifest.component(e.megatron), target.vlock.components[e.megatron])
    report = lint_entrypoint(config, target, warn)
    if report is not None:
        if not report.ran and e.megatron:
            warn(f"lint-args: the flags were not checked against Megatron-LM: {report.reason}")
        report.raise_for_errors()
