"""`buildctl bom IMAGE` and `buildctl diff IMAGE_A IMAGE_B`: what is in an image, and what changed.

The bill of materials is read from the image itself: Python distributions through importlib.metadata
and Debian packages through dpkg-query, both in one throw-away container of the image (no network),
plus what the image says about itself in its labels (component SHAs, base name and digest, stack,
variant, lock hash) and its environment. A diff of two BOMs maps each change back to the manifest
entry that asks for it where there is one (a pip package to its requirement's file:line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from packaging.utils import canonicalize_name

from buildctl import untrusted
from buildctl.engine.imageview import ImageView, RunOutcome, at_hand
from buildctl.errors import Location
from buildctl.labels import (
    BASE_DIGEST_LABEL,
    BASE_NAME_LABEL,
    COMPONENT_LABEL,
    LOCK_LABEL,
    STACK_LABEL,
    VARIANT_LABEL,
)
from buildctl.manifest.model import Manifest

BOM_SCHEMA = 1
BOM_TIMEOUT_S = 120.0
Section = Literal["pip", "deb", "component", "label", "env", "python"]


class BomEngine(Protocol):
    def image_exists(self, ref: str) -> bool: ...
    def inspect_image(self, ref: str) -> ImageView: ...
    def pull(self, ref: str, platform: str | None = None) -> str: ...
    def run(self, image: str, command: Sequence[str], *, network_mode: str | None = None, timeout: float,
            entrypoint: Sequence[str] | None = None) -> RunOutcome: ...


# Runs with the image's own python3, standard library only (3.8+: importlib.metadata). The first
# distribution of a name on sys.path is the one Python imports; later ones are listed as shadowed.
BOM_SCRIPT = r"""
import json, subprocess, sys
out = {"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "pip": {}, "shadowed": {}, "deb": None, "errors": {},
       "deb_arch": {}, "os": {}}
try:
    for line in open("/etc/os-release", encoding="utf-8", errors="replace"):
        k, sep, v = line.strip().partition("=")
        if sep and k in ("ID", "VERSION_ID", "VERSION_CODENAME"):
            out["os"][k] = v.strip().strip('"')
except OSError:
    pass
try:
    from importlib import metadata
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if not name:
            continue
        if name in out["pip"]:
            out["shadowed"].setdefault(name, []).append(d.version)
        else:
            out["pip"][name] = d.version
except Exception as e:
    out["errors"]["pip"] = "%s: %s" % (type(e).__name__, e)
try:
    text = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=True).stdout
    out["deb"] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0].startswith("ii"):
            out["deb"][parts[1]] = parts[2]
            out["deb_arch"][parts[1]] = parts[3]
except Exception as e:
    out["errors"]["deb"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""


@dataclass(frozen=True, kw_only=True)
class Bom:
    image: str
    image_id: str
    platform: str
    python: str | None
    pip: Mapping[str, str]  # distribution name (as its metadata spells it) -> version
    deb: Mapping[str, str] | None  # package -> version; None when the image has no dpkg
    components: Mapping[str, str]  # component -> SHA (from labels)
    base: Mapping[str, str]  # name / digest from the OCI base labels
    labels: Mapping[str, str]
    env: Mapping[str, str]
    shadowed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)  # what could not be read, and why
    # For the standard formats (sbom.py) only; not in buildctl's own output (to_json, render_bom):
    repo_digests: tuple[str, ...] = ()  # name@sha256:... of the registry manifests the engine knows
    deb_arch: Mapping[str, str] = field(default_factory=dict)  # package -> dpkg architecture
    os_release: Mapping[str, str] = field(default_factory=dict)  # ID, VERSION_ID, VERSION_CODENAME

    @property
    def stack(self) -> str | None:
        return self.labels.get(STACK_LABEL)

    def to_json(self) -> dict[str, Any]:
        return {"schema": BOM_SCHEMA, "image": self.image, "image_id": self.image_id, "platform": self.platform,
                "python": self.python, "pip": dict(sorted(self.pip.items(), key=lambda kv: kv[0].lower())),
                "deb": None if self.deb is None else dict(sorted(self.deb.items())),
                "components": dict(sorted(self.components.items())), "base": dict(sorted(self.base.items())),
                "labels": dict(sorted(self.labels.items())), "env": dict(sorted(self.env.items())),
                "shadowed": {k: list(v) for k, v in sorted(self.shadowed.items())},
                "errors": dict(sorted(self.errors.items()))}


def from_image(info: ImageView, image: str, result: RunOutcome) -> Bom:
    """Assemble a BOM from the image config and the output of BOM_SCRIPT (pure)."""
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            try:
                found = untrusted.loads(line)
                data = found if isinstance(found, dict) else {}
            except ValueError:
                data = {}
            break
    if not data:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        why = ("the listing timed out" if result.timed_out else
               f"no python3 in the image ({tail})" if result.exit_code in (126, 127) else
               f"the listing exited {result.exit_code}: {tail}")
        errors["pip"] = why
        errors["deb"] = why
    errors.update(data.get("errors") or {})
    labels = dict(info.labels)
    return Bom(
        image=image, image_id=info.id, platform=info.platform, python=data.get("python"),
        pip=dict(data.get("pip") or {}), deb=data.get("deb"),
        components={k[len(COMPONENT_LABEL):]: v for k, v in labels.items() if k.startswith(COMPONENT_LABEL)},
        base={k: labels[lbl] for k, lbl in (("name", BASE_NAME_LABEL), ("digest", BASE_DIGEST_LABEL)) if lbl in labels},
        labels=labels, env=dict(info.env),
        shadowed={k: tuple(v) for k, v in (data.get("shadowed") or {}).items()}, errors=errors,
        repo_digests=tuple(info.repo_digests), deb_arch=dict(data.get("deb_arch") or {}),
        os_release=dict(data.get("os") or {}),
    )


def collect(engine: BomEngine, image: str) -> Bom:
    """The BOM of ``image`` (pulled first when the engine does not have it)."""
    at_hand(engine, image)
    info = engine.inspect_image(image)
    # python3 as the entrypoint: a final image's ENTRYPOINT (its launch script) must not wrap the listing
    result = engine.run(image, ["-c", BOM_SCRIPT], entrypoint=["python3"], network_mode="none",
                        timeout=BOM_TIMEOUT_S)
    return from_image(info, image, result)


# --------------------------------------------------------------------------------------------- diff


@dataclass(frozen=True, kw_only=True)
class Delta:
    section: Section
    name: str
    old: str | None  # None: added
    new: str | None  # None: removed
    source: str = ""  # the manifest entry that asks for it: file:line: key path

    @property
    def change(self) -> Literal["added", "removed", "changed"]:
        return "added" if self.old is None else "removed" if self.new is None else "changed"

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "change": self.change, "old": self.old,
                "new": self.new, "source": self.source}


@dataclass(frozen=True, kw_only=True)
class BomDiff:
    a: str
    b: str
    deltas: tuple[Delta, ...]
    manifest: str | None = None  # which manifest the sources point into

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "manifest": self.manifest, "deltas": [d.to_json() for d in self.deltas],
                "summary": summary(self.deltas)}


def summary(deltas: Sequence[Delta]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for d in deltas:
        out.setdefault(d.section, {"added": 0, "removed": 0, "changed": 0})[d.change] += 1
    return out


def _norm(name: str) -> str:
    """PEP 503 normalisation, so 'PyYAML' in an image and 'pyyaml' in a manifest meet."""
    return canonicalize_name(name)


def manifest_sources(manifest: Manifest, project: Path | None = None) -> dict[tuple[Section, str], str]:
    """(section, name) -> 'file:line: key' of the manifest entry that asks for it."""

    def where(location: Location) -> str:
        file = location.file
        if project is not None and Path(file).resolve().is_relative_to(project.resolve()):
            file = str(Path(file).resolve().relative_to(project.resolve()))
        text = f"{file}:{location.line}" if location.line else file
        return f"{text}: {location.key}" if location.key else text

    out: dict[tuple[Section, str], str] = {}
    for r in manifest.pip.requirements:
        out[("pip", _norm(r.name))] = where(r.at)
    for c in manifest.components:
        for r in c.build.requires:
            out.setdefault(("pip", _norm(r.name)), where(r.at))
        out[("component", c.name)] = where(c.at)
        if c.install.dist:
            out.setdefault(("pip", _norm(c.install.dist)), where(c.at))
    for p in manifest.apt.packages:
        out[("deb", p.name)] = where(p.at)
    for c in manifest.components:
        for p in c.build.apt:
            out.setdefault(("deb", p.name), where(p.at))
    for v in manifest.variants:
        cd = manifest.cudnn_for(v)
        if cd is not None:
            out.setdefault(("deb", cd.package), where(cd.at))
    file = where(manifest.at).split(":", 1)[0]  # env values carry no line of their own
    for name in manifest.env:
        out[("env", name)] = f"{file}: env.{name}"
    return out


def _section(section: Section, section_a: Mapping[str, str] | None, section_b: Mapping[str, str] | None,
             sources: Mapping[tuple[Section, str], str], *, normalise: bool = False) -> list[Delta]:
    section_a, section_b = section_a or {}, section_b or {}
    key = _norm if normalise else (lambda s: s)
    na = {key(k): (k, v) for k, v in section_a.items()}
    nb = {key(k): (k, v) for k, v in section_b.items()}
    out = []
    for k in sorted(set(na) | set(nb)):
        old, new = na.get(k), nb.get(k)
        if old is not None and new is not None and old[1] == new[1]:
            continue
        name = (new or old)[0]  # type: ignore[index]
        out.append(Delta(section=section, name=name, old=old[1] if old else None, new=new[1] if new else None,
                         source=sources.get((section, k), "")))
    return out


def diff(bom_a: Bom, bom_b: Bom, manifest: Manifest | None = None, project: Path | None = None) -> BomDiff:
    """What changed from ``bom_a`` to ``bom_b`` (pure); sources come from ``manifest`` when given."""
    sources = manifest_sources(manifest, project) if manifest is not None else {}
    plain = {k: v for k, v in bom_a.labels.items() if not k.startswith(COMPONENT_LABEL)}
    plain_b = {k: v for k, v in bom_b.labels.items() if not k.startswith(COMPONENT_LABEL)}
    python_a = {"python": bom_a.python} if bom_a.python else {}
    python_b = {"python": bom_b.python} if bom_b.python else {}
    deltas = [
        *_section("python", python_a, python_b, sources),
        *_section("pip", bom_a.pip, bom_b.pip, sources, normalise=True),
        *_section("deb", bom_a.deb, bom_b.deb, sources),
        *_section("component", bom_a.components, bom_b.components, sources),
        *_section("label", plain, plain_b, sources),
        *_section("env", bom_a.env, bom_b.env, sources),
    ]
    return BomDiff(a=bom_a.image, b=bom_b.image, deltas=tuple(deltas), manifest=manifest.path if manifest else None)


# ---------------------------------------------------------------------------------------- rendering


def render_bom(bom: Bom) -> str:
    lines = [f"bom {bom.image} ({bom.image_id[:19]}, {bom.platform})"]
    if bom.stack:
        lines.append(f"  stack {bom.stack} / {bom.labels.get(VARIANT_LABEL, '?')}, lock {bom.labels.get(LOCK_LABEL, '-')}")
    lines.append(f"  base: {bom.base.get('name', '-')} {bom.base.get('digest', '')}".rstrip())
    lines.append(f"  python: {bom.python or '(none)'}")
    if bom.components:
        lines.append(f"components ({len(bom.components)}):")
        lines += [f"  {n}  {sha}" for n, sha in sorted(bom.components.items())]
    lines.append(f"python packages ({len(bom.pip)}):")
    lines += [f"  {n}=={v}" + (f"  (shadows {', '.join(bom.shadowed[n])})" if n in bom.shadowed else "")
              for n, v in sorted(bom.pip.items(), key=lambda kv: kv[0].lower())]
    if bom.deb is None:
        lines.append("debian packages: (none: no dpkg in the image)")
    else:
        lines.append(f"debian packages ({len(bom.deb)}):")
        lines += [f"  {n} {v}" for n, v in sorted(bom.deb.items())]
    lines += [f"not read: {k}: {why}" for k, why in sorted(bom.errors.items())]
    return "\n".join(lines) + "\n"


def render_diff(diff: BomDiff) -> str:
    lines = [f"diff {diff.a} -> {diff.b}"]
    if not diff.deltas:
        lines.append("  no differences")
    for x in diff.deltas:
        if x.change == "added":
            what = f"+ {x.name} {x.new}"
        elif x.change == "removed":
            what = f"- {x.name} {x.old}"
        else:
            what = f"~ {x.name} {x.old} -> {x.new}"
        lines.append(f"  {x.section:<9} {what}" + (f"  [{x.source}]" if x.source else ""))
    counts = summary(diff.deltas)
    if counts:
        lines.append("summary: " + "; ".join(
            f"{s} " + ", ".join(f"{n} {c}" for c, n in v.items() if n) for s, v in counts.items()))
    return "\n".join(lines) + "\n"
