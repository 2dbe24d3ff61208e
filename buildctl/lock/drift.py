"""What drifted since the lock: Drift, the difference of two variant locks, and its rendering."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, assert_never

from buildctl.lock.lockfile import (
    LockedComponent,
    LockedPip,
    VariantLock,
)

# ------------------------------------------------------------------------------------------ drift


DriftKind = Literal["manifest", "variant", "base", "component", "commit", "branch", "pr", "pick", "submodule",
                    "patch", "tree", "download", "pip", "build-pip", "apt", "build-apt", "missing"]

NONE = "(none)"


@dataclass(frozen=True, kw_only=True)
class Drift:
    """One difference between the lock and what the pins resolve to now."""

    variant: str  # "" for the whole stack
    kind: DriftKind
    subject: str
    old: str
    new: str

    def message(self) -> str:
        s, o, n = self.subject, self.old, self.new
        match self.kind:
            case "manifest":
                text = f"the manifest {s} was edited since locking (sha256 {o[:12]} -> {n[:12]})"
            case "variant":
                text = f"variant {s} is not in the lock"
            case "base":
                text = f"base image {s} moved: {o} -> {n}"
            case "commit":
                text = f"{s}: the commit now resolves to {n}, the lock has {o}"
            case "branch":
                text = f"{s} moved: {o} -> {n}"
            case "pr":
                text = f"{s} head changed: {o} -> {n}"
            case "patch":
                text = f"{s}: sha256 {o} -> {n}"
            case "tree":
                text = f"{s} after applying PRs and patches: {o} -> {n}"
            case "download":
                text = f"download {s}: {o} -> {n}"
            case "pip":
                text = f"pip {s}: {o} -> {n}"
            case "apt":
                text = f"apt {s}: {o} -> {n}"
            case "component":
                text = f"component {s}: {o} -> {n}"
            case "missing":
                text = f"{s}: {o} -> {n}"
            case "submodule" | "build-pip" | "build-apt" | "pick":
                text = f"{s}: {o} -> {n}"
            case _:
                assert_never(self.kind)
        return f"{self.variant}: {text}" if self.variant else text

    def to_json(self) -> dict[str, str]:
        return {"variant": self.variant, "kind": self.kind, "subject": self.subject, "old": self.old,
                "new": self.new, "message": self.message()}


def _pip_text(pip: LockedPip | None) -> str:
    if pip is None:
        return NONE
    return f"{pip.version} (in base)" if pip.in_base else pip.version


def _diff_pips(variant: str, kind: DriftKind, prefix: str, old: Iterable[LockedPip], new: Iterable[LockedPip]
               ) -> list[Drift]:
    o = {p.name: p for p in old}
    n = {p.name: p for p in new}
    out = []
    for name in sorted(set(o) | set(n)):
        a, b = o.get(name), n.get(name)
        if a is not None and b is not None and (a.version, a.in_base) == (b.version, b.in_base):
            if a.hashes != b.hashes:
                added, removed = len(set(b.hashes) - set(a.hashes)), len(set(a.hashes) - set(b.hashes))
                out.append(Drift(variant=variant, kind=kind, subject=f"{prefix}{name}=={a.version}",
                                 old=f"{len(a.hashes)} file hash(es)",
                                 new=f"{len(b.hashes)} file hash(es) (+{added} -{removed})"))
            continue
        out.append(Drift(variant=variant, kind=kind, subject=f"{prefix}{name}", old=_pip_text(a), new=_pip_text(b)))
    return out


def _diff_map(variant: str, kind: DriftKind, prefix: str, old: Mapping[str, str], new: Mapping[str, str]
              ) -> list[Drift]:
    return [Drift(variant=variant, kind=kind, subject=f"{prefix}{k}", old=old.get(k, NONE), new=new.get(k, NONE))
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _diff_component(variant: str, name: str, old: LockedComponent, new: LockedComponent) -> list[Drift]:
    c = f"component {name}"
    out: list[Drift] = []
    if old.repo != new.repo:
        out.append(Drift(variant=variant, kind="component", subject=name, old=f"repo {old.repo}", new=f"repo {new.repo}"))
    if old.commit != new.commit:
        out.append(Drift(variant=variant, kind="commit", subject=c, old=old.commit, new=new.commit))
    if old.branch_head != new.branch_head:
        out.append(Drift(variant=variant, kind="branch", subject=f"{c}: branch", old=old.branch_head or NONE,
                         new=new.branch_head or NONE))
    if old.picks != new.picks:
        out.append(Drift(variant=variant, kind="pick", subject=f"{c}: cherry-picks",
                         old=", ".join(x[:12] for x in old.picks) or NONE, new=", ".join(x[:12] for x in new.picks) or NONE))
    out += _diff_map(variant, "pr", f"{c}: PR #", old.prs, new.prs)
    for number, head in new.prs.items():
        pa, pb = old.pr(int(number)), new.pr(int(number))
        if pa is not None and pb is not None and pa.head == head and (pa.mode, pa.commits) != (pb.mode, pb.commits):
            out.append(Drift(variant=variant, kind="pr", subject=f"{c}: PR #{number} commits applied",
                             old=f"{pa.mode}: {len(pa.commits)} commit(s)", new=f"{pb.mode}: {len(pb.commits)} commit(s)"))
    out += _diff_map(variant, "patch", f"{c}: patch ", old.patches, new.patches)
    out += _diff_map(variant, "submodule", f"{c}: submodule ", old.submodules, new.submodules)
    # The tree follows from commit, PRs and patches; report it only when nothing above explains it.
    if old.tree != new.tree and not out:
        out.append(Drift(variant=variant, kind="tree", subject=c, old=old.tree, new=new.tree))
    return out


def diff_variant(variant: str, old: VariantLock, new: VariantLock) -> list[Drift]:
    """Every difference between two locks of one variant, in a fixed order."""
    out: list[Drift] = []
    ob, nb = old.base, new.base
    if ob is None or nb is None:
        if ob != nb:
            out.append(Drift(variant=variant, kind="base", subject="digest", old=ob.digest if ob else NONE,
                             new=nb.digest if nb else NONE))
    elif ob.ref != nb.ref:
        out.append(Drift(variant=variant, kind="base", subject="reference", old=ob.ref, new=nb.ref))
    elif ob.digest != nb.digest:
        out.append(Drift(variant=variant, kind="base", subject=nb.ref, old=ob.digest, new=nb.digest))
    for sec in sorted(set(old.missing) | set(new.missing)):
        if (sec in old.missing) != (sec in new.missing):
            out.append(Drift(variant=variant, kind="missing", subject=f"section {sec}",
                             old="not locked" if sec in old.missing else "locked",
                             new="not locked" if sec in new.missing else "locked"))
    for name in sorted(set(old.components) | set(new.components)):
        a, b = old.components.get(name), new.components.get(name)
        if a is None or b is None:
            out.append(Drift(variant=variant, kind="component", subject=name,
                             old="locked" if a else NONE, new="in the manifest" if b else NONE))
        else:
            out += _diff_component(variant, name, a, b)
    for name in sorted(set(old.downloads) | set(new.downloads)):
        da, db = old.downloads.get(name), new.downloads.get(name)
        ta = f"{da.url} sha256 {da.sha256}" if da else NONE
        tb = f"{db.url} sha256 {db.sha256}" if db else NONE
        if ta != tb:
            out.append(Drift(variant=variant, kind="download", subject=name, old=ta, new=tb))
    out += _diff_map(variant, "apt", "", old.apt, new.apt)
    for comp in sorted(set(old.build_apt) | set(new.build_apt)):
        out += _diff_map(variant, "build-apt", f"component {comp} build apt ",
                         old.build_apt.get(comp, {}), new.build_apt.get(comp, {}))
    out += _diff_pips(variant, "pip", "", old.pip, new.pip)
    for comp in sorted(set(old.build_pip) | set(new.build_pip)):
        out += _diff_pips(variant, "build-pip", f"component {comp} build pip ",
                          old.build_pip.get(comp, ()), new.build_pip.get(comp, ()))
    return out


def render_drift(lock_file: str, drift: Sequence[Drift]) -> str:
    lines = [f"{lock_file} is out of date ({len(drift)} difference(s)):"]
    lines += [f"  - {d.message()}" for d in drift]
    return "\n".join(lines)
