"""The lock file (pins/<stack>.lock.json): data model, canonical JSON, atomic write.

Format (schema 2), keys sorted, two-space indent, one trailing newline::

    {"schema": 2, "stack": "demo", "manifest_sha256": "<sha256 of the manifest file>",
     "variants": {"<name>": {
        "base": {"ref": ..., "digest": "sha256:...", "platform": ...},     # absent when not locked (partial)
        "apt": {...}, "build_apt": {...}, "downloads": {...}, "pip": [...], "build_pip": {...},
        "components": {"<name>": {
            "repo": "<as in the manifest>",
            "base": "<full SHA of the base commit>",
            "branch_head": "<head of the manifest's branch when locked>",   # informational
            "changes": [                                                    # applied in this order
              {"kind": "commit", "sha": "<full SHA>"},                      # an upstream commit, cherry-picked
              {"kind": "pr", "number": 2146, "head": "<full SHA>", "mode": "own-commits" | "merge",
               "target": "main",                                            # the branch the PR targets
               "commits": ["<full SHA>", ...],                              # exactly what was applied, in order
               "skipped_merges": [...],                                     # merges of the target left out
               "empty": [...],                                              # picks that changed nothing
               "merged_upstream": {"how": "merge" | "squash-or-rebase", "commit": "<M or ''>"}},  # optional
              {"kind": "patch", "file": "<relative path>", "sha256": "<hex>"}],
            "dragged": [{"sha": ..., "subject": ..., "by": "PR #2146"}],   # commits a change brings that
                                                                            # are neither the base's nor its own
            "submodules": {"<path>": "<gitlink SHA in the resulting tree>"},
            "tree": "<SHA of the commit made by applying the changes (== base when none)>"}},
        "missing": {"<section>": "<why it is not locked>"},                 # partial locks only
        "resolved_at": "..."}}}

A ``pip`` / ``build_pip`` entry is ``{"name", "version", "hashes", "in_base"}`` plus ``"sdist": true`` when only
a source distribution fits (its ``hashes`` are the sdist's; the build host builds the wheel in the base).
A wheel the manifest downloads (``install: pip``) is an entry whose hash is the download's.

Sections, as ``missing`` names them: ``base``, ``apt``, ``build_apt``, ``pip``, ``build_pip``,
``downloads.<name>``, ``components.<name>``. A lock with any ``missing`` entry is *partial*
(``buildctl lock --partial``): ``plan`` uses what it has, ``build``/``push``/``nightly`` refuse it.

``resolved_at`` and each component's ``branch_head`` are informational and excluded from
``VariantLock.digest()``, the value that node keys and image tags use, so that re-locking with nothing
changed (or with only a branch head moved) keeps every key.

Extending the schema (other issues add sections this way; no schema bump is needed for it): add a field
with an empty default to ``VariantLock`` (or ``LockedComponent``), write it in ``to_json`` ONLY when it is
non-empty (``_optional``), and read it with ``.get`` in ``from_json``. Locks written before the section
existed then load unchanged and keep their digest; a lock that uses it gets a new digest, as it should.
Bump ``SCHEMA`` only for a change an older reader would misread (a renamed or re-typed key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from buildctl import untrusted
from buildctl.errors import LockError
from buildctl.lock import lockcheck
from buildctl.safepath import write_atomic

SCHEMA = 2

PrMode = Literal["own-commits", "merge"]
PR_MODES: tuple[PrMode, ...] = ("own-commits", "merge")


@dataclass(frozen=True, kw_only=True)
class LockedBase:
    ref: str  # as written in the manifest, e.g. nvcr.io/nvidia/pytorch:25.09-py3
    digest: str  # manifest digest from the registry, sha256:...
    platform: str


@dataclass(frozen=True, kw_only=True)
class LockedPip:
    name: str  # canonical name
    version: str  # exact version
    hashes: tuple[str, ...] = ()  # "sha256:<hex>" of the files pip may install for this platform
    in_base: bool = False  # already satisfied by the base image (nothing installed)
    # Only a source distribution fits (PyPI's antlr4-python3-runtime 4.9.3): ``hashes`` are the sdist's, and
    # the build host turns it into a wheel in a container of the base. Written only when true, so that the
    # locks of stacks without sdists (and their digests) stay as they were.
    sdist: bool = False


@dataclass(frozen=True, kw_only=True)
class LockedDownload:
    name: str
    url: str
    sha256: str
    computed: bool = False  # true when the lock computed it (manifest said sha256: compute)


@dataclass(frozen=True, kw_only=True)
class LockedPick:
    """An upstream commit cherry-picked onto the base."""

    sha: str  # full SHA

    def to_json(self) -> dict[str, Any]:
        return {"kind": "commit", "sha": self.sha}

    def label(self) -> str:
        return f"commit {self.sha[:12]}"


@dataclass(frozen=True, kw_only=True)
class MergedUpstream:
    """A PR found already merged into its target when locked."""

    how: Literal["merge", "squash-or-rebase"]
    commit: str = ""  # the merge commit M (how == "merge"); its commits are M^1..M^2


@dataclass(frozen=True, kw_only=True)
class LockedPr:
    """A pull request, with exactly the commits that were applied."""

    number: int
    head: str  # full SHA of refs/pull/N/head when locked
    mode: PrMode = "own-commits"
    target: str = "main"
    # own-commits: the commits cherry-picked, in order; merge: the PR's own commits that the merge brings
    commits: tuple[str, ...] = ()
    skipped_merges: tuple[str, ...] = ()  # own-commits: merges of the target branch left out
    empty: tuple[str, ...] = ()  # picks that changed nothing (their change is in the base already)
    merged_upstream: MergedUpstream | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "pr", "number": self.number, "head": self.head, "mode": self.mode,
                               "target": self.target, "commits": list(self.commits),
                               "skipped_merges": list(self.skipped_merges), "empty": list(self.empty)}
        if self.merged_upstream is not None:
            out["merged_upstream"] = {"how": self.merged_upstream.how, "commit": self.merged_upstream.commit}
        return out

    def label(self) -> str:
        return f"PR #{self.number}"


@dataclass(frozen=True, kw_only=True)
class LockedPatch:
    file: str  # as written in the manifest (relative to it)
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": "patch", "file": self.file, "sha256": self.sha256}

    def label(self) -> str:
        return f"patch {self.file}"


LockedChange = LockedPick | LockedPr | LockedPatch


@dataclass(frozen=True, kw_only=True)
class DraggedCommit:
    """A commit a change brings that the base does not have and that is not the change's own."""

    sha: str
    subject: str
    by: str  # the change's label, e.g. "PR #2146"


@dataclass(frozen=True, kw_only=True)
class LockedComponent:
    name: str
    repo: str
    commit: str  # full 40-hex SHA of the base commit (JSON key "base")
    changes: tuple[LockedChange, ...] = ()  # applied in order
    dragged: tuple[DraggedCommit, ...] = ()
    submodules: Mapping[str, str] = field(default_factory=dict)  # path -> gitlink SHA in `tree`
    tree: str = ""  # SHA of the commit made by applying the changes (== commit when none)
    # Head of the manifest's `branch` when locked: only what `lock --check` compares to say that the
    # branch moved. Not an input of any build (the commit is), so VariantLock.digest() leaves it out.
    branch_head: str = ""

    @property
    def prs(self) -> dict[str, str]:
        """PR number (as text) -> head SHA, in order."""
        return {str(c.number): c.head for c in self.changes if isinstance(c, LockedPr)}

    @property
    def patches(self) -> dict[str, str]:
        """Patch file -> sha256, in order."""
        return {c.file: c.sha256 for c in self.changes if isinstance(c, LockedPatch)}

    @property
    def picks(self) -> tuple[str, ...]:
        return tuple(c.sha for c in self.changes if isinstance(c, LockedPick))

    def pr(self, number: int) -> LockedPr | None:
        return next((c for c in self.changes if isinstance(c, LockedPr) and c.number == number), None)

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "base": self.commit, "changes": [c.to_json() for c in self.changes],
                "dragged": [{"sha": d.sha, "subject": d.subject, "by": d.by} for d in self.dragged],
                "submodules": dict(sorted(self.submodules.items())), "tree": self.tree,
                "branch_head": self.branch_head}

    @staticmethod
    def from_json(name: str, data: Mapping[str, Any]) -> LockedComponent:
        return LockedComponent(
            name=name, repo=data["repo"], commit=data["base"], changes=tuple(_change_from(x) for x in data.get("changes", [])),
            dragged=tuple(DraggedCommit(sha=d["sha"], subject=d.get("subject", ""), by=d.get("by", ""))
                          for d in data.get("dragged", [])),
            submodules=dict(data.get("submodules", {})), tree=data.get("tree", ""), branch_head=data.get("branch_head", ""))


def _change_from(data: Mapping[str, Any]) -> LockedChange:
    kind = data["kind"]
    if kind == "commit":
        return LockedPick(sha=data["sha"])
    if kind == "patch":
        return LockedPatch(file=data["file"], sha256=data["sha256"])
    if kind == "pr":
        mu = data.get("merged_upstream")
        mode = data.get("mode", "own-commits")
        if mode not in PR_MODES:
            raise TypeError(f"PR mode {mode!r}")
        return LockedPr(number=int(data["number"]), head=data["head"], mode=mode, target=data.get("target", "main"),
                        commits=tuple(data.get("commits", ())), skipped_merges=tuple(data.get("skipped_merges", ())),
                        empty=tuple(data.get("empty", ())),
                        merged_upstream=MergedUpstream(how=mu["how"], commit=mu.get("commit", "")) if mu else None)
    raise TypeError(f"change kind {kind!r}")


def _optional(out: dict[str, Any], key: str, value: Any) -> None:
    """Write an optional section only when it holds something (see the module docstring)."""
    if value:
        out[key] = value


@dataclass(frozen=True, kw_only=True)
class VariantLock:
    base: LockedBase | None  # None: not locked (a partial lock; ``missing["base"]`` says why)
    apt: Mapping[str, str] = field(default_factory=dict)  # package -> exact version (runtime + cudnn)
    build_apt: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # component -> package -> version
    downloads: Mapping[str, LockedDownload] = field(default_factory=dict)
    pip: tuple[LockedPip, ...] = ()
    build_pip: Mapping[str, tuple[LockedPip, ...]] = field(default_factory=dict)  # component -> pins
    components: Mapping[str, LockedComponent] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)  # section -> why it is not locked (partial)
    resolved_at: str = ""

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "apt": dict(sorted(self.apt.items())),
            "build_apt": {c: dict(sorted(p.items())) for c, p in sorted(self.build_apt.items())},
            "downloads": {n: {"url": d.url, "sha256": d.sha256, "computed": d.computed}
                          for n, d in sorted(self.downloads.items())},
            "pip": [_pip_json(p) for p in self.pip],
            "build_pip": {c: [_pip_json(p) for p in ps] for c, ps in sorted(self.build_pip.items())},
            "components": {n: c.to_json() for n, c in sorted(self.components.items())},
            "resolved_at": self.resolved_at,
        }
        if self.base is not None:
            out["base"] = {"ref": self.base.ref, "digest": self.base.digest, "platform": self.base.platform}
        _optional(out, "missing", dict(sorted(self.missing.items())))
        return out

    def digest(self) -> str:
        """Hash of what was resolved (not when): the 'lock hash' in tags and labels."""
        data = self.to_json()
        data.pop("resolved_at")
        for c in data["components"].values():
            c.pop("branch_head")
        return hashlib.sha256(canonical(data).encode()).hexdigest()

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> VariantLock:
        b = data.get("base")
        missing = {str(k): str(v) for k, v in data.get("missing", {}).items()}
        if b is None and "base" not in missing:
            raise KeyError("base")
        return VariantLock(
            base=LockedBase(ref=b["ref"], digest=b["digest"], platform=b["platform"]) if b is not None else None,
            apt=dict(data.get("apt", {})),
            build_apt={c: dict(p) for c, p in data.get("build_apt", {}).items()},
            downloads={n: LockedDownload(name=n, url=d["url"], sha256=d["sha256"], computed=d.get("computed", False))
                       for n, d in data.get("downloads", {}).items()},
            pip=tuple(_pip_from(p) for p in data.get("pip", [])),
            build_pip={c: tuple(_pip_from(p) for p in ps) for c, ps in data.get("build_pip", {}).items()},
            components={n: LockedComponent.from_json(n, c) for n, c in data.get("components", {}).items()},
            missing=missing,
            resolved_at=data.get("resolved_at", ""),
        )


def _pip_json(pip: LockedPip) -> dict[str, Any]:
    out: dict[str, Any] = {"name": pip.name, "version": pip.version, "hashes": list(pip.hashes), "in_base": pip.in_base}
    if pip.sdist:
        out["sdist"] = True
    return out


def _pip_from(data: Mapping[str, Any]) -> LockedPip:
    sdist = data.get("sdist", False)
    if not isinstance(sdist, bool):
        raise TypeError(f"pip {data.get('name')!r}: sdist must be true or false")
    return LockedPip(name=data["name"], version=data["version"], hashes=tuple(data.get("hashes", ())),
                     in_base=data.get("in_base", False), sdist=sdist)


@dataclass(frozen=True, kw_only=True)
class Lock:
    stack: str
    manifest_sha256: str
    variants: Mapping[str, VariantLock]
    schema: int = SCHEMA
    # read(allow_hand_edit=True) of a lock edited by hand since buildctl wrote it: what changed (lockcheck)
    hand_edited: tuple[str, ...] = field(default=(), compare=False)

    @property
    def partial(self) -> dict[str, dict[str, str]]:
        """Variant -> its missing sections, for the variants whose lock is partial."""
        return {n: dict(v.missing) for n, v in sorted(self.variants.items()) if v.missing}

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "stack": self.stack, "manifest_sha256": self.manifest_sha256,
                "variants": {n: v.to_json() for n, v in sorted(self.variants.items())}}

    @staticmethod
    def from_json(data: Mapping[str, Any], source: str = "<lock>") -> Lock:
        try:
            if data.get("schema") != SCHEMA:
                raise LockError(f"{source}: lock schema {data.get('schema')!r} is not supported (this buildctl "
                                f"reads schema {SCHEMA})",
                                fix=f"re-create it with `buildctl lock {data.get('stack', 'STACK')}`")
            return Lock(stack=data["stack"], manifest_sha256=data["manifest_sha256"],
                        variants={n: VariantLock.from_json(v) for n, v in data["variants"].items()})
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise LockError(f"{source}: malformed lock file (missing or wrong {exc})",
                            fix="re-create it with `buildctl lock STACK`") from exc


def refuse_partial(lock: Lock | None, variant: str, *, action: str, lock_file: str) -> None:
    """Raise LockError (exit 4) when ``variant``'s lock is partial: builds, pushes and nightly runs need it all."""
    v = lock.variants.get(variant) if lock is not None else None
    if v is None or not v.missing:
        return
    raise LockError(
        f"cannot {action} {lock.stack if lock else ''}/{variant}: {lock_file} is a partial lock "
        f"(missing: {', '.join(sorted(v.missing))})",
        why="; ".join(f"{k}: {why}" for k, why in sorted(v.missing.items())),
        fix=f"lock it fully where every source is reachable: `buildctl lock {lock.stack if lock else 'STACK'} "
            f"--variant {variant}` (without --partial)",
    )


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def lock_path(manifest_path: Path) -> Path:
    return manifest_path.with_name(manifest_path.name.removesuffix(".yaml") + ".lock.json")


MAX_BYTES = 16 << 20  # the seed stacks' locks are 10 to 200 KB; a REF file:/dev/zero must not be read without bound


class LockHandEdited(LockError):
    """The lock's content no longer matches the hash buildctl recorded when it wrote it."""

    def __init__(self, path: Path, edited: list[str]) -> None:
        shown = "; ".join(edited[:8]) + (f"; and {len(edited) - 8} more" if len(edited) > 8 else "")
        super().__init__(
            f"{path}: the lock was edited by hand since buildctl wrote it ({shown})",
            why="its content does not match the integrity hash recorded when it was locked; this is not a "
                "manifest that moved on (that is `buildctl lock --check`'s drift), it is the lock file itself",
            fix=f"restore it (`git checkout -- {path}`) or re-lock (`buildctl lock STACK`), which reports the "
                "edited entries and writes a lock buildctl resolved")
        self.edited = edited


def parse(text: bytes | str, source: str) -> dict[str, Any]:
    """The JSON of a lock, checked against its schema (lockcheck); LockError (exit 4) naming every problem."""
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as exc:
        raise LockError(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})",
                        fix="restore it from git, or re-create it with `buildctl lock STACK`") from None
    try:
        data = lockcheck.loads(decoded)
    except json.JSONDecodeError as exc:
        raise LockError(f"{source}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}",
                        fix="restore it from git, or re-create it with `buildctl lock STACK`") from None
    except (ValueError, RecursionError) as exc:
        raise LockError(f"{source}: not a lock file: {exc}",
                        fix="restore it from git, or re-create it with `buildctl lock STACK`") from None
    if isinstance(data, dict) and data.get("schema") != SCHEMA:
        raise LockError(f"{source}: lock schema {data.get('schema')!r} is not supported (this buildctl reads schema "
                        f"{SCHEMA})", fix=f"re-create it with `buildctl lock {data.get('stack', 'STACK')}`")
    problems = lockcheck.validate(data)
    if problems:
        raise LockError(f"{source}: not a valid lock file ({len(problems)} problem(s)):\n"
                        + "\n".join(f"  {source}: {p}" for p in problems),
                        fix="restore it from git, or re-create it with `buildctl lock STACK`")
    assert isinstance(data, dict)
    return data


def read(path: Path, *, allow_hand_edit: bool = False) -> Lock | None:
    """The lock at ``path``, or None when there is none. A lock that fails its schema raises LockError; one edited
    by hand since buildctl wrote it raises LockHandEdited, unless ``allow_hand_edit`` (re-locking: the edit is
    reported in ``Lock.hand_edited`` and replaced)."""
    try:
        raw = untrusted.read_regular(path, MAX_BYTES)  # a FIFO as (or linked from) the lock: refused, not opened
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc}") from None
    except untrusted.Malformed as exc:
        raise LockError(f"{path}: {exc}: not a lock file") from None
    data = parse(raw, str(path))
    edited = lockcheck.edited_entries(data)
    if edited and not allow_hand_edit:
        raise LockHandEdited(path, edited)
    lock = Lock.from_json(data, str(path))
    return dataclasses.replace(lock, hand_edited=tuple(edited or ()))


def read_beside(manifest_path: Path, stack: str, *, allow_hand_edit: bool = False) -> Lock | None:
    """The lock beside the manifest of ``stack`` (``lock_path``), as ``read``; one that says it is another stack's
    (a file copied over, with its integrity hash made anew) is a LockError, never read as this stack's."""
    path = lock_path(manifest_path)
    lock = read(path, allow_hand_edit=allow_hand_edit)
    if lock is not None and lock.stack != stack:
        raise LockError(f"{path} is the lock of stack {lock.stack!r}, not {stack!r}",
                        fix=f"move it away, then re-create it with `buildctl lock {stack}`")
    return lock


def to_text(lock: Lock) -> str:
    """The file's text: canonical JSON with the integrity hash of its content."""
    data = lock.to_json()
    data["integrity"] = lockcheck.integrity(data)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_data(path: Path, data: Mapping[str, Any]) -> Lock:
    """Write a lock given as JSON data (tests, the bench): checked against the schema and hashed like any lock."""
    content = {k: v for k, v in data.items() if k != "integrity"}
    problems = lockcheck.validate(content)
    if problems:
        raise LockError(f"{path}: refusing to write an invalid lock: " + "; ".join(problems))
    lock = Lock.from_json(content, str(path))
    write(path, lock)
    return lock


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> Lock:
    """The one way to edit a lock other than re-locking (bench, test helpers): ``change`` edits the JSON data in
    place; the result is checked against the schema and written with a new integrity hash."""
    data = parse(path.read_bytes(), str(path))
    data.pop("integrity", None)
    change(data)
    return write_data(path, data)


def write(path: Path, lock: Lock) -> None:
    write_atomic(path, to_text(lock))
