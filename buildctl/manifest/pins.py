"""Pin manifests: YAML -> frozen dataclasses (buildctl.manifest.model), with errors that point at file:line:col.

The loader is driven by the dataclasses' own type annotations, so the schema is written once.
It reports every problem it can find in one pass (``ManifestErrors``), each naming file, line,
column and key path, what was expected, and the closest known key for a misspelt one.
No input, however malformed, makes it raise anything but ``ManifestError``/``ManifestErrors``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
from pathlib import Path

import yaml

from buildctl import untrusted
from buildctl.errors import Location, ManifestError, ManifestErrors, UsageError
from buildctl.manifest import model
from buildctl.manifest.loader import INVALID, Loader, expansion_problem
from buildctl.manifest.model import (
    Manifest,
    PullRequest,
)
from buildctl.manifest.semantic import semantic_checks

# -------------------------------------------------------------------------------------------- public


def _normalise_changes(manifest: Manifest, loader: Loader) -> Manifest:
    """One ordered ``changes`` list per component, and prs/patches that agree with it."""
    comps = []
    for c in manifest.components:
        if c.changes and (c.prs or c.patches):
            loader.errors.append(ManifestError(c.at, f"component {c.name}: give either changes: or prs:/patches:, not both",
                                               fix="move the PRs and patches into changes:, in the order they apply"))
            comps.append(c)
            continue
        if not c.changes:
            comps.append(c)  # Component.steps derives the ordered changes from prs + patches
            continue
        bad = False
        for ch in c.changes:
            given = [k for k in ("commit", "pr", "patch") if getattr(ch, k) is not None]
            if len(given) != 1:
                loader.errors.append(ManifestError(ch.at, f"component {c.name}: a change needs exactly one of commit, pr "
                                                      f"or patch (got {', '.join(given) or 'none'})"))
                bad = True
                continue
            if ch.pr is None and (ch.head is not None or ch.apply != "own-commits" or ch.target != "main"):
                loader.errors.append(ManifestError(ch.at, f"component {c.name}: head, apply and target belong to a pr change"))
                bad = True
            if (ch.patch is None) != (ch.sha256 is None):
                loader.errors.append(ManifestError(ch.at, f"component {c.name}: a patch change needs patch and sha256 "
                                                      "together (and only a patch change has sha256)"))
                bad = True
            if ch.commit is not None and not re.fullmatch(r"[0-9a-f]{40}", ch.commit):
                loader.errors.append(ManifestError(ch.at, f"component {c.name}: commit {ch.commit!r} to cherry-pick "
                                                      "must be a full 40-digit lower-case SHA",
                                                   fix="write the full SHA: a change is applied exactly as named"))
                bad = True
        if bad:
            comps.append(c)
            continue
        prs = tuple(PullRequest(number=ch.pr, head=ch.head, apply=ch.apply, target=ch.target, at=ch.at)
                    for ch in c.changes if ch.pr is not None)
        patches = tuple(model.Patch(file=ch.patch, sha256=ch.sha256, at=ch.at)
                        for ch in c.changes if ch.patch is not None and ch.sha256 is not None)
        comps.append(dataclasses.replace(c, prs=prs, patches=patches))
    return dataclasses.replace(manifest, components=tuple(comps))


def load_text(text: str, filename: str = "<string>", base_dir: Path | None = None) -> Manifest:
    """Parse one manifest. Raises ManifestErrors (one or more ManifestError) for bad input."""
    ld = Loader(filename)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ManifestErrors([ManifestError(
            Location(file=filename, line=line, column=col),
            f"YAML syntax error: {exc.problem or exc.context}",
            fix="check indentation and quoting near this position")]) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise ManifestErrors([ManifestError(Location(file=filename), f"cannot read YAML: {exc}")]) from None
    if root is None:
        raise ManifestErrors([ManifestError(Location(file=filename), "the manifest is empty",
                                            fix="start from pins/demo.yaml")])
    problem = expansion_problem(root, filename)
    if problem is not None:
        raise ManifestErrors([problem])
    try:
        result = ld.convert(root, Manifest, "")
    except RecursionError:
        raise ManifestErrors([ManifestError(Location(file=filename), "the document nests too deeply")]) from None
    if result is not INVALID:
        result = dataclasses.replace(result, path=filename)
        result = _normalise_changes(result, ld)
        semantic_checks(result, ld, base_dir or Path(filename).parent)
        if not result.variants and not ld.errors:
            ld.error(root, "variants", "at least one variant is required")
    if ld.errors:
        raise ManifestErrors(ld.errors)
    assert isinstance(result, Manifest)
    return result


def load(path: Path) -> Manifest:
    try:
        text = read_text_exact(path)
    except FileNotFoundError:
        raise ManifestErrors([ManifestError(Location(file=str(path)), "no such manifest")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestErrors([ManifestError(Location(file=str(path)), f"cannot read: {exc}")]) from None
    return load_text(text, str(path), path.parent)


MAX_BYTES = 4 << 20  # the seed stacks' manifests are 5 to 26 KB; a pins/STACK.yaml that is /dev/zero is not read on


def _read_bytes(path: Path) -> bytes:
    """The manifest's bytes, at most MAX_BYTES of them (ManifestErrors past that; OSError passes through)."""
    try:
        return untrusted.read_regular(path, MAX_BYTES)  # a FIFO as (or linked from) pins/STACK.yaml: refused
    except untrusted.Malformed as exc:
        raise ManifestErrors([ManifestError(Location(file=str(path)), f"not a manifest: {exc}")]) from None


def manifest_sha256(path: Path) -> str:
    """The manifest's hash as every lock records it: of the file's bytes (CRLF line ends included)."""
    return hashlib.sha256(_read_bytes(path)).hexdigest()


def read_text_exact(path: Path) -> str:
    """The manifest's text exactly as its bytes are (no newline translation: CRLF stays CRLF), so that
    ``text_sha256`` of it is ``manifest_sha256`` of the file and an edit written back keeps its line ends."""
    return _read_bytes(path).decode("utf-8")


def text_sha256(text: str) -> str:
    """``manifest_sha256`` of a manifest whose bytes are ``text`` in UTF-8 (the one hashing of a manifest)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stacks(pins_dir: Path) -> dict[str, Path]:
    """Stack name -> manifest path for every pins/*.yaml."""
    return {p.name.removesuffix(".yaml"): p for p in sorted(pins_dir.glob("*.yaml"))}


def find(pins_dir: Path, stack: str) -> Path:
    known = stacks(pins_dir)
    if stack in known:
        return known[stack]
    match = difflib.get_close_matches(stack, list(known), n=1)
    raise UsageError(
        f"unknown stack {stack!r}",
        why=f"there is no {pins_dir / (stack + '.yaml')}",
        fix=(f"did you mean {match[0]!r}? " if match else "") + f"known stacks: {', '.join(known) or 'none'}",
    )


def select_variant(manifest: Manifest, name: str | None) -> model.Variant:
    try:
        return manifest.variant(name)
    except KeyError:
        names = [v.name for v in manifest.variants]
        match = difflib.get_close_matches(name or "", names, n=1)
        raise UsageError(
            f"stack {manifest.stack} has no variant {name!r}",
            fix=(f"did you mean {match[0]!r}? " if match else "") + f"variants: {', '.join(names)}",
        ) from None

