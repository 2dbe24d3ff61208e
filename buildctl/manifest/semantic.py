"""Manifest checks across fields: what no single field's syntax can say (references, topology, profiles)."""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import re
import urllib.parse
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from buildctl.errors import Location, ManifestError
from buildctl.manifest import model
from buildctl.manifest.fields import PLATFORMS
from buildctl.manifest.loader import Loader
from buildctl.manifest.model import (
    NOWHERE,
    SMOKE_CHECKS,
    GpuTier,
    InstallKind,
    Manifest,
)
from buildctl.manifest.profiles import BASE_PROFILE, TORCHRUN_OWNED, arg_key, profile_start

# ------------------------------------------------------------------------------------ semantic checks


DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z")


def wheel_of_url(url: str) -> tuple[str, str, str] | None:
    """(canonical name, version, file name) of the wheel a URL's last path component names, or None."""
    filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return str(name), str(version), filename


def _pip_download(download: model.Download, err: Any) -> None:
    """install: pip: every URL names a wheel file, all of one distribution; nothing is placed at a dest."""
    if download.dest:
        err(download.at, f"download {download.name}: install: pip takes no dest (pip installs the wheel)",
            fix="remove dest; the wheel's file name is the last part of its URL")
    names = set()
    for u in download.urls.values():
        w = wheel_of_url(u.url)
        if w is None:
            err(u.at, f"download {download.name}: install: pip needs a wheel URL, and {u.url!r} does not end in a wheel "
                      "file name (name-version-python-abi-platform.whl)",
                fix="point the URL at the .whl file itself, or use install: file")
            continue
        if not re.match(r"^[A-Za-z0-9._+-]+\.whl\Z", w[2]):
            err(u.at, f"download {download.name}: wheel file name {w[2]!r} holds characters pip would not write")
        names.add(w[0])
    if len(names) > 1:
        err(download.at, f"download {download.name}: the platforms' wheels are of different distributions ({', '.join(sorted(names))})")



def semantic_checks(manifest: Manifest, loader: Loader, base_dir: Path) -> None:
    """Checks across fields (syntax is checked per field while loading). Each error points at the key
    that holds the offending value (``ld.at``), not at the mapping around it."""
    def err(location: Location, what: str, fix: str = "") -> None:
        loader.errors.append(ManifestError(location, what, fix=fix))

    at = loader.at
    if manifest.schema != 1:
        err(at(manifest, "schema"), f"schema {manifest.schema} is not supported (this buildctl reads schema 1)")
    expected = Path(loader.filename).name.removesuffix(".yaml").removesuffix(".yml")
    if manifest.stack != expected and not loader.filename.startswith("<"):
        err(at(manifest, "stack"), f"stack {manifest.stack!r} does not match its file name {expected!r}",
            fix=f"rename the file to {manifest.stack}.yaml or set stack: {expected}")

    download_names = {d.name for d in manifest.downloads}
    repo_names = {r.name for r in manifest.apt.repos}
    component_names = {c.name for c in manifest.components}

    for v in manifest.variants:
        for arch in v.gpu_archs:
            if not re.match(r"^\d+\.\d+a?\Z", arch):
                err(at(v, "gpu_archs"), f"variant {v.name}: gpu arch {arch!r} is not a compute capability like '10.0'")
        for cname in v.components:
            if cname not in component_names:
                err(v.components[cname].at, f"variant {v.name} overrides unknown component {cname!r}",
                    fix=Loader._closest(cname, component_names))
        if v.cudnn and v.cudnn.repo and v.cudnn.repo not in repo_names:
            err(at(v.cudnn, "repo"), f"cudnn repo {v.cudnn.repo!r} is not in apt.repos",
                fix=Loader._closest(v.cudnn.repo, repo_names))
    if manifest.cudnn and manifest.cudnn.repo and manifest.cudnn.repo not in repo_names:
        err(at(manifest.cudnn, "repo"), f"cudnn repo {manifest.cudnn.repo!r} is not in apt.repos",
            fix=Loader._closest(manifest.cudnn.repo, repo_names))

    seen_apt: dict[str, Location] = {}
    for p in manifest.apt.packages:
        if p.name in seen_apt:
            err(p.at, f"apt package {p.name!r} is listed twice (first at line {seen_apt[p.name].line})")
        seen_apt[p.name] = p.at
    for repo in manifest.apt.repos:
        for plat in repo.lines:
            if plat not in (*PLATFORMS, "any"):
                err(at(repo, "lines"), f"apt repo {repo.name}: unknown platform {plat!r}",
                    fix=Loader._closest(plat, PLATFORMS))
        if repo.keyring and repo.keyring not in download_names:
            err(at(repo, "keyring"), f"apt repo {repo.name}: keyring {repo.keyring!r} is not a download",
                fix=Loader._closest(repo.keyring, download_names))

    for d in manifest.downloads:
        if d.install == "file" and not d.dest:
            err(d.at, f"download {d.name}: install: file needs dest (an absolute path in the image)")
        if d.install == "pip":
            _pip_download(d, err)
        for plat, u in d.urls.items():
            if plat not in (*PLATFORMS, "any"):
                err(u.at, f"download {d.name}: unknown platform {plat!r}",
                    fix=Loader._closest(plat, (*PLATFORMS, "any")))

    seen_pip: dict[str, Location] = {}
    for req in manifest.pip.requirements:
        if req.name in seen_pip:
            err(req.at, f"pip package {req.name!r} is listed twice (first at line {seen_pip[req.name].line})")
        seen_pip[req.name] = req.at

    for c in manifest.components:
        numbers = [pr.number for pr in c.prs]
        if len(set(numbers)) != len(numbers):
            twice = next(pr for i, pr in enumerate(c.prs) if pr.number in numbers[:i])
            err(twice.at, f"component {c.name}: PR {twice.number} is listed twice in {numbers}")
        picks = [ch.commit for ch in c.changes if ch.commit is not None]
        if len(set(picks)) != len(picks):
            err(c.at, f"component {c.name}: a commit is cherry-picked twice")
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", "".join(pr.target for pr in c.prs) or "x") or any(
                pr.target.startswith(("-", "/")) or ".." in pr.target for pr in c.prs):
            err(c.at, f"component {c.name}: a PR target is not a plain branch name")
        for pr in c.prs:
            if pr.number <= 0:
                err(at(pr, "number") if pr.at is not NOWHERE else c.at,
                    f"component {c.name}: PR number {pr.number} must be positive")
        for patch in c.patches:
            if not loader.filename.startswith("<"):
                f = base_dir / patch.file
                if not f.is_file():
                    err(at(patch, "file"), f"component {c.name}: patch file {patch.file} does not exist")
                elif hashlib.sha256(f.read_bytes()).hexdigest() != patch.sha256:
                    err(at(patch, "sha256"), f"component {c.name}: patch {patch.file} does not match its sha256",
                        fix="update the sha256 if the change to the patch was intended")
        seen_req: set[str] = set()
        for req in c.install.requires:
            if req.name in seen_req:
                err(req.at, f"component {c.name}: install.requires lists {req.name!r} twice")
            seen_req.add(req.name)
        for prov in c.install.provided:
            if not DIST_RE.match(prov):
                err(c.install.at, f"component {c.name}: install.provided {prov!r} is not a distribution name")
            elif canonicalize_name(prov) in seen_req:
                err(c.install.at, f"component {c.name}: {prov!r} is both in install.requires and install.provided")
        if (c.install.requires or c.install.provided) and c.install.kind is not InstallKind.WHEEL:
            err(c.install.at, f"component {c.name}: install.requires and install.provided belong to a wheel install")
        if c.install.kind is InstallKind.SOURCE_TREE and not c.install.path:
            err(at(c.install, "kind"), f"component {c.name}: a source-tree install needs install.path")

    s = manifest.smoke
    for check in s.required:
        if check not in SMOKE_CHECKS:  # pragma: no cover - Literal already checked
            err(at(s, "required"), f"unknown smoke check {check!r}")
    if s.gpu_tier is GpuTier.WAIVED and not s.gpu_waiver:
        err(at(s, "gpu_tier"), "smoke.gpu_tier is 'waived' but smoke.gpu_waiver does not say why")
    e = manifest.entrypoint
    if "train" in s.required and s.train is None:
        err(at(s, "required"), "smoke.required lists 'train' but smoke.train names no profile to train",
            fix="add `train: {profile: NAME}` under smoke (a launch profile that fits one GPU host)")
    if s.train is not None:
        if e is None:
            err(at(s, "train"), "smoke.train: the stack has no entrypoint to train with")
        elif s.train.profile != BASE_PROFILE and s.train.profile not in e.profiles:
            err(at(s.train, "profile"), f"smoke.train.profile {s.train.profile!r} is not a profile of the entrypoint",
                fix=Loader._closest(s.train.profile, e.profiles) or "declare the profile under entrypoint.profiles")

    if e is not None:
        _check_entrypoint(manifest, e, err, at, download_names, component_names)
    else:
        for v in manifest.variants:
            if v.entrypoint != model.EntrypointOverride():
                err(at(v, "entrypoint"), f"variant {v.name} overrides the entrypoint, but the stack has none")

    for kind in manifest.repro.levels:
        if kind not in ("base", "system", "cudnn", "python", "assemble", "entrypoint", "compile"):
            err(at(manifest.repro, "levels"), f"repro.levels: unknown node kind {kind!r}",
                fix="node kinds: system, cudnn, python, assemble, entrypoint, compile")
    for replaced in manifest.protect.replace:
        if not any(fnmatch.fnmatch(replaced, pat) for pat in manifest.protect.packages):
            err(at(manifest.protect, "replace"), f"protect.replace names {replaced!r}, which no protect.packages pattern covers")


def _check_topology(err: Any, location: Location, what: str, gpus: int | None, nodes: int) -> None:
    if gpus is not None and gpus % nodes:
        err(location, f"{what}: {gpus} GPUs do not spread evenly over {nodes} nodes",
            fix="give a GPU count that is nodes x GPUs per node")


def _check_entrypoint(manifest: Manifest, entrypoint: model.Entrypoint, err: Any, location: Any, download_names: set[str],
                      component_names: set[str]) -> None:
    """The launch fields across each other: launcher, profiles' GPUs and nodes, the variants' overrides."""
    launcher = entrypoint.launcher
    if launcher.wrapper is not None and launcher.wrapper not in download_names:
        err(location(launcher, "wrapper"), f"launcher.wrapper {launcher.wrapper!r} is not a download",
            fix=Loader._closest(launcher.wrapper, download_names) or "name the download that provides it")
    if launcher.args and launcher.kind != "torchrun":
        err(location(launcher, "args"), f"launcher.args are torchrun options; a {launcher.kind} launcher takes none",
            fix="the host's srun gets its own options" if launcher.kind == "srun" else "remove them")
    for word in launcher.args:
        if arg_key(word) in TORCHRUN_OWNED:
            err(location(launcher, "args"), f"launcher.args: {word} comes from the profile (gpus, nodes) or the "
                "environment (NODE_RANK, MASTER_ADDR, MASTER_PORT)",
                fix="remove it; set launcher.master_port for the default port")
    if launcher.kind != "none" and entrypoint.gpus is None and not entrypoint.profiles:
        err(location(entrypoint, "launcher"), f"a {launcher.kind} launcher needs entrypoint.gpus (or profiles) to know how many "
            "ranks to start")
    _check_topology(err, location(entrypoint, "nodes"), "entrypoint", entrypoint.gpus, entrypoint.nodes)
    if entrypoint.default_profile and entrypoint.default_profile not in entrypoint.profiles:
        err(location(entrypoint, "default_profile"), f"default_profile {entrypoint.default_profile!r} is not in profiles",
            fix=Loader._closest(entrypoint.default_profile, entrypoint.profiles))
    if entrypoint.megatron and entrypoint.megatron not in component_names:
        err(location(entrypoint, "megatron"), f"entrypoint.megatron {entrypoint.megatron!r} is not a component",
            fix=Loader._closest(entrypoint.megatron, component_names))
    for name, p in entrypoint.profiles.items():
        if name == BASE_PROFILE:
            err(p.at, f"invalid profile name {name!r}",
                fix=f"{BASE_PROFILE!r} names the arguments without a profile at run time; choose another name")
        _check_topology(err, location(p, "nodes"), f"profile {name}", p.gpus, p.nodes)
        _check_derived(err, location, entrypoint, name, p, tuple(a for v in manifest.variants for a in v.entrypoint.args))
    base_options = {arg_key(a.flag) for a in entrypoint.args}
    for v in manifest.variants:
        o = v.entrypoint
        for option in o.drop:
            if option not in base_options:
                err(location(o, "drop"), f"variant {v.name}: entrypoint.drop: {option} is not in entrypoint.args",
                    fix=_drop_hint(option, {k: "entrypoint.args" for k in base_options}))
        if o.default_profile is not None and o.default_profile != BASE_PROFILE and o.default_profile not in entrypoint.profiles:
            err(location(o, "default_profile"), f"variant {v.name}: default_profile {o.default_profile!r} is not in profiles",
                fix=Loader._closest(o.default_profile, entrypoint.profiles))
        if o.gpus is not None or o.nodes is not None:
            _check_topology(err, location(o, "gpus" if o.gpus is not None else "nodes"), f"variant {v.name} entrypoint",
                            o.gpus if o.gpus is not None else entrypoint.gpus, o.nodes if o.nodes is not None else entrypoint.nodes)


def _set_where(entrypoint: model.Entrypoint, profile: model.Profile, option: str) -> str:
    """Where the option a profile starts from is written: the nearest profile it extends that sets it, else the
    entrypoint's (or a variant's) args."""
    parent, seen = profile.extends, set()
    while parent is not None and parent != BASE_PROFILE and parent in entrypoint.profiles and parent not in seen:
        seen.add(parent)
        if any(arg_key(a.flag) == option for a in entrypoint.profiles[parent].args):
            return f"entrypoint.profiles.{parent}.args"
        parent = entrypoint.profiles[parent].extends
    return "entrypoint.args" if any(arg_key(a.flag) == option for a in entrypoint.args) else "a variant's entrypoint.args"


def _drop_hint(option: str, where: dict[str, str]) -> str:
    """The fix for a ``drop`` of an option that is not there. The close option found may be the misspelled one
    (a typo in the base launch): the hint names where it is written and says so, instead of steering the user to
    copy the typo into ``drop``."""
    match = difflib.get_close_matches(option, sorted(where), n=1, cutoff=0.6)
    if not match:
        return ""
    close = match[0]
    return (f"{where[close]} has {close!r}: if that is the option meant, drop it under that name; if {option!r} is "
            f"the right spelling, the typo is in {where[close]}: correct it there (`buildctl lint-args` checks every "
            "option against Megatron's own parser)")


def _check_derived(err: Any, location: Any, entrypoint: model.Entrypoint, name: str, profile: model.Profile,
                   variant_args: tuple[model.Arg, ...]) -> None:
    """A profile's ``extends``, ``drop`` and ``reasons`` against what it starts from."""
    chain = [name]
    parent = profile.extends
    while parent is not None and parent != BASE_PROFILE:
        if parent not in entrypoint.profiles:
            err(location(profile, "extends"), f"profile {name}: extends {parent!r}, which is not a profile",
                fix=Loader._closest(parent, entrypoint.profiles) or f"name a profile or {BASE_PROFILE!r}")
            return
        if parent in chain:
            err(location(profile, "extends"), f"profile {name}: extends forms a cycle ({' -> '.join([*chain, parent])})",
                fix="a profile derives from the entrypoint or from a profile that does not derive from it")
            return
        chain.append(parent)
        parent = entrypoint.profiles[parent].extends
    # what the profile starts from, with what any variant adds to the entrypoint's arguments
    start = {arg_key(a.flag) for a in profile_start(entrypoint, profile)} | {arg_key(a.flag) for a in variant_args}
    for option in profile.drop:
        if option not in start:
            err(location(profile, "drop"), f"profile {name}: drop: {option} is not in the arguments it starts from",
                fix=_drop_hint(option, {k: _set_where(entrypoint, profile, k) for k in start}))
    changed = {*profile.drop, *(arg_key(a.flag) for a in profile.args)}
    for option in profile.reasons:
        if option not in changed:
            err(location(profile, "reasons"), f"profile {name}: reasons: {option} is neither set nor dropped by this profile",
                fix="give reasons only for the options the profile sets (args) or removes (drop)")
    if profile.extends is not None:
        for option in sorted(changed - set(profile.reasons)):
            err(location(profile, "reasons"), f"profile {name} derives from {profile.extends} and changes {option} without a reason",
                fix=f"add `{option}: <why this profile differs>` under reasons")


