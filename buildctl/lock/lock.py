"""`buildctl lock`: pin every floating value of a manifest, and say what drifted since.

``resolve(manifest, variant, resolvers, config)`` turns one variant into a ``VariantLock``:

- base image tag -> manifest digest, through the registry API (``Registry``), asked through a
  configured mirror when the manifest's registry has one (nvcr.io -> mirror);
- git: short SHA -> full SHA, branch -> head, PR -> head (refs/pull/N/head), submodule SHAs, the
  tree after applying PRs and patches (``GitResolver``, backed by sources.py);
- downloads marked ``sha256: compute`` -> sha256 of the file, fetched on the host (``Fetcher``);
- pip and apt -> exact versions, resolved INSIDE the pulled base (``InBase``), so that what the base
  already has, and its PIP_CONSTRAINT file, count; pip file hashes from the index (``PackageIndex``).

Everything is resolved before anything is written, and the file is written once, atomically:
a failure anywhere leaves the previous lock as it was. ``check`` re-resolves and returns the
differences (``Drift``); it writes nothing. The seams are Protocols so unit tests use data.

Here: ``resolve`` (one variant), ``lock_stack`` (the file), ``check``. The seams are resolvers.py's,
the resolution of each kind of pin resolve.py's, and what drifted (Drift, diff_variant) drift.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildctl.config import Config
from buildctl.errors import BuildctlError, EngineError, LockError, UnreachableError
from buildctl.lock.drift import NONE, Drift, diff_variant
from buildctl.lock.lockfile import (
    Lock,
    LockedBase,
    LockedComponent,
    LockedDownload,
    LockedPip,
    VariantLock,
)
from buildctl.lock.resolve import (
    check_protected,
    cudnn_pattern,
    download_wheels,
    pip_pins,
    probe_request,
    resolve_apt,
    resolve_base,
    resolve_component,
    resolve_downloads,
)
from buildctl.lock.resolvers import (
    ProbeRequest,
    Resolvers,
)
from buildctl.manifest.model import (
    Manifest,
    Variant,
)
from buildctl.manifest.requirements import runtime_requirements

# ------------------------------------------------------------------------------------------ base


# ------------------------------------------------------------------------------------------ resolve


def _now() -> datetime:
    return datetime.now(UTC)


# Section groups `lock --only` picks from (a partial lock records the rest as not asked).
GROUPS = ("base", "git", "downloads", "packages")


def _sections_of_packages(manifest: Manifest, variant: Variant) -> list[str]:
    """The lock sections the in-base probe fills for this variant."""
    out = []
    if manifest.apt.packages or manifest.cudnn_for(variant) is not None:
        out.append("apt")
    if any(c.build.apt for c in manifest.components):
        out.append("build_apt")
    if manifest.pip.requirements:
        out.append("pip")
    if any(c.build.requires for c in manifest.components):
        out.append("build_pip")
    return out


def _why(exc: BuildctlError) -> str:
    return exc.what + (f" ({exc.why})" if exc.why else "")


def resolve(manifest: Manifest, variant: Variant, resolvers: Resolvers, config: Config, *,
            now: Callable[[], datetime] = _now, partial: bool = False, only: Iterable[str] | None = None,
            notes: list[str] | None = None) -> VariantLock:
    """Pin every floating value of variant ``variant``; raises (and returns nothing) on any failure.

    ``partial``: a section whose host cannot be reached (UnreachableError; for the in-base probe also an
    engine that is not there) is recorded in ``missing`` with the reason instead of failing the lock.
    ``only``: resolve these groups (GROUPS) alone; the others are recorded as not asked (needs partial).
    """
    r = _Resolution(m=manifest, v=variant, resolvers=resolvers, config=config, partial=partial,
                    wanted=set(GROUPS if only is None else only), notes=notes)
    r.base()
    r.components()
    r.downloads()
    request = probe_request(manifest, variant, r.keyrings, r.wheels())
    blocked = r.probe_blocked(request.needed)
    if blocked:
        r.missing.update({s: blocked for s in _sections_of_packages(manifest, variant)})
    elif request.needed:
        r.probe(request)
    if r.missing and not partial:
        raise LockError(f"{manifest.stack}/{variant.name}: --only leaves sections unlocked", fix="add --partial")
    return VariantLock(base=r.locked_base, apt=r.apt, build_apt=r.build_apt, downloads=r.locked_downloads, pip=r.pip,
                       build_pip=r.build_pip, components=r.locked_components, missing=r.missing,
                       resolved_at=now().strftime("%Y-%m-%dT%H:%M:%SZ"))


@dataclass(kw_only=True)
class _Resolution:
    """One variant's lock as ``resolve`` makes it, group by group (GROUPS); what a group could not resolve
    (``partial``) or was not asked for (``wanted``) goes to ``missing`` with the reason."""

    m: Manifest
    v: Variant
    resolvers: Resolvers
    config: Config
    partial: bool
    wanted: set[str]
    notes: list[str] | None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)
    locked_base: LockedBase | None = None
    pull_ref: str = ""
    locked_components: dict[str, LockedComponent] = dataclasses.field(default_factory=dict)
    locked_downloads: dict[str, LockedDownload] = dataclasses.field(default_factory=dict)
    keyrings: dict[str, bytes] = dataclasses.field(default_factory=dict)
    pip: tuple[LockedPip, ...] = ()
    build_pip: dict[str, tuple[LockedPip, ...]] = dataclasses.field(default_factory=dict)
    apt: dict[str, str] = dataclasses.field(default_factory=dict)
    build_apt: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    _wheels: dict[str, tuple[str, str]] | None = None

    @property
    def not_asked(self) -> str:
        return f"not asked (lock --only {','.join(sorted(self.wanted))})"

    def tolerate(self, section: str, exc: BuildctlError) -> None:
        """Record ``exc`` as why ``section`` is missing where a partial lock may leave it; else raise it."""
        if not self.partial or not isinstance(exc, UnreachableError | EngineError):
            raise exc
        self.missing[section] = _why(exc)

    def base(self) -> None:
        """The base image's digest (and the reference the probe pulls it by)."""
        if "base" not in self.wanted:
            self.missing["base"] = self.not_asked
            return
        try:
            self.locked_base, self.pull_ref = resolve_base(self.m.stack, self.v, self.resolvers.registry,
                                                           self.config.registry_mirrors)
        except BuildctlError as exc:
            self.tolerate("base", exc)

    def components(self) -> None:
        """Each component's commit, tree and PR heads, from git."""
        base_dir = Path(self.m.path).parent if self.m.path else Path.cwd()
        for c in self.m.components:
            if "git" not in self.wanted:
                self.missing[f"components.{c.name}"] = self.not_asked
                continue
            try:
                self.locked_components[c.name] = resolve_component(c, self.resolvers.git, base_dir, self.notes)
            except BuildctlError as exc:
                self.tolerate(f"components.{c.name}", exc)

    def downloads(self) -> None:
        """Each download of the variant's platform, fetched and hashed (apt keyrings kept for the probe)."""
        for d in self.m.downloads:
            if "downloads" not in self.wanted:
                if d.for_platform(self.v.platform) is not None:
                    self.missing[f"downloads.{d.name}"] = self.not_asked
                continue
            try:
                got, content = resolve_downloads(self.m, self.v, self.resolvers.fetch, names={d.name})
            except BuildctlError as exc:
                self.tolerate(f"downloads.{d.name}", exc)
                continue
            self.locked_downloads.update(got)
            self.keyrings.update(content)

    def wheels(self) -> dict[str, tuple[str, str]]:
        """The wheel downloads the probe installs with the pip pins (fetched once)."""
        if self._wheels is None:
            self._wheels = download_wheels(self.m, self.v, self.locked_downloads, self.config.download_mirrors)
        return self._wheels

    def probe_blocked(self, needed: bool) -> str:
        """Why the packages (pip, apt, their build sections), resolved inside the base, cannot be now ("":
        they can, or need no probe): not asked, the base not locked, or a keyring or wheel they need missing."""
        m = self.m
        if "packages" not in self.wanted:
            return self.not_asked
        if self.locked_base is None and needed:
            return f"resolved inside the base image, which is not locked ({self.missing.get('base', '')})"
        if not needed:
            return ""
        lacking = [r.keyring for r in m.apt.repos if r.keyring and f"downloads.{r.keyring}" in self.missing]
        wheels_missing = [d.name for d in m.downloads if d.install == "pip" and f"downloads.{d.name}" in self.missing]
        if lacking and any(s in _sections_of_packages(m, self.v) for s in ("apt", "build_apt")):
            return f"needs the apt keyring download {', '.join(lacking)}, which is not locked"
        if wheels_missing:
            return f"resolved together with the wheel download {', '.join(wheels_missing)}, which is not locked"
        return ""

    def probe(self, request: ProbeRequest) -> None:
        """The base's own Python, pip and apt, asked inside it: the runtime and build pins resolved there."""
        m, v = self.m, self.v
        assert self.locked_base is not None
        where = f"{v.image} ({v.platform})"
        try:
            result = self.resolvers.in_base.probe(image=self.pull_ref, platform=v.platform, request=request)
        except BuildctlError as exc:
            self.tolerate("packages", exc)
            why = self.missing.pop("packages")
            self.missing.update({s: why for s in _sections_of_packages(m, v)})
            return
        if result.python and not (result.python + ".").startswith(v.python + "."):
            raise LockError(f"{m.stack}/{v.name}: the base's python is {result.python}, the variant says {v.python}",
                            fix=f"set variants.{v.name}.python: \"{'.'.join(result.python.split('.')[:2])}\"")
        check_protected(m, result.pip, result.installed, where=where)
        self.pip = pip_pins(runtime_requirements(m), result.pip, result.installed_after_remove, result.tags,
                            self.resolvers.index, where=where,
                            downloads={n: sha for n, (_, sha) in self.wheels().items()})
        for c in m.components:
            if c.build.requires:
                self.build_pip[c.name] = pip_pins(c.build.requires, result.build_pip.get(c.name, ()),
                                                  result.installed, result.tags, self.resolvers.index,
                                                  where=f"{where}, build requirements of {c.name}")
        wanted_apt = [(p.name, p.version) for p in m.apt.packages]
        cud = cudnn_pattern(m, v)
        if cud:
            wanted_apt.append(cud)
        self.apt = resolve_apt(wanted_apt, result.apt, where=where)
        for c in m.components:
            if c.build.apt:
                self.build_apt[c.name] = resolve_apt([(p.name, p.version) for p in c.build.apt], result.apt,
                                                     where=f"{where}, build dependencies of {c.name}")



# ------------------------------------------------------------------------------------------ the file


def _content(variant_lock: VariantLock) -> dict[str, object]:
    data = variant_lock.to_json()
    data.pop("resolved_at")
    return data


@dataclass(frozen=True, kw_only=True)
class LockOutcome:
    lock: Lock
    resolved: Mapping[str, VariantLock]
    unchanged: tuple[str, ...]  # resolved variants whose content did not change
    stale: tuple[str, ...]  # variants kept from a lock of an older manifest
    dropped: tuple[str, ...]  # variants no longer in the manifest, removed from the lock
    notes: tuple[str, ...] = ()  # how changes were applied, where the user must hear it (merged PRs, empty picks)


def lock_stack(manifest: Manifest, manifest_sha256: str, variants: Sequence[str], resolvers: Resolvers, config: Config,
               existing: Lock | None, *, now: Callable[[], datetime] = _now, partial: bool = False,
               only: Iterable[str] | None = None) -> LockOutcome:
    """The new lock: ``variants`` resolved, every other variant's entry kept as it was."""
    notes: list[str] = []
    resolved = {name: resolve(manifest, manifest.variant(name), resolvers, config, now=now, partial=partial, only=only,
                              notes=notes) for name in variants}
    known = {v.name for v in manifest.variants}
    kept = dict(existing.variants) if existing is not None and existing.stack == manifest.stack else {}
    dropped = tuple(sorted(n for n in kept if n not in known))
    merged = {n: v for n, v in kept.items() if n in known}
    unchanged = []
    for name, new in resolved.items():
        old = merged.get(name)
        if old is not None and _content(old) == _content(new):
            # Keep the old time too, so that re-locking an unchanged stack leaves the file unchanged.
            new = dataclasses.replace(new, resolved_at=old.resolved_at)
            unchanged.append(name)
        merged[name] = new
    stale = tuple(sorted(n for n in merged if n not in resolved and existing is not None
                         and existing.manifest_sha256 != manifest_sha256))
    return LockOutcome(lock=Lock(stack=manifest.stack, manifest_sha256=manifest_sha256, variants=merged),
                       resolved=resolved, unchanged=tuple(unchanged), stale=stale, dropped=dropped,
                       notes=tuple(dict.fromkeys(notes)))


def check(manifest: Manifest, manifest_file: str, manifest_sha256: str, variants: Sequence[str], resolvers: Resolvers,
          config: Config, existing: Lock | None, *, now: Callable[[], datetime] = _now) -> list[Drift]:
    """What drifted between the lock and the pins resolved now (empty: the lock is current)."""
    if existing is None:
        raise LockError(f"{manifest.stack} has no lock to check",
                        fix=f"create it with `buildctl lock {manifest.stack}`")
    drift: list[Drift] = []
    if existing.manifest_sha256 != manifest_sha256:
        drift.append(Drift(variant="", kind="manifest", subject=manifest_file, old=existing.manifest_sha256,
                           new=manifest_sha256))
    for name in variants:
        new = resolve(manifest, manifest.variant(name), resolvers, config, now=now)
        old = existing.variants.get(name)
        if old is None:
            drift.append(Drift(variant="", kind="variant", subject=name, old=NONE, new=NONE))
        else:
            drift += diff_variant(name, old, new)
    return drift

