"""Input audit: what a stack's builds fetch without a pin (pure: manifest, lock and rendered text in, findings out).

Three sources of findings:

- the manifest: every value that floats as written (a pip requirement without ``==``, an apt package
  without an exact version, a base by tag, a short commit, a download with ``sha256: compute``). Each is
  ``locked`` when the lock pins it (builds from the lock agree; a re-lock may change it, which
  ``buildctl repro --relock`` shows) and ``floating`` when the lock does not (there is nothing to build from);
- the rendered Dockerfiles and build scripts of every node (the component's own build command included):
  anything fetched at build time without a pin is ``floating`` even with a lock, because the lock never
  sees it: a URL fetched by curl/wget/ADD without a checksum check, ``pip install`` of a requirement
  without ``==`` (or without ``--hash`` where the lock has hashes for it), ``git clone`` of a branch
  with no checkout of a full SHA, ``apt-get install`` of a package without an exact version;
- ``buildctl lock --check`` (the caller runs it; ``drift_findings`` turns its result into findings): what
  the pins resolve to today and the lock does not say (``locked``: the lock still builds what it pinned).

A finding names the node it concerns and, where it can, the packages and paths its fetch produces, so that
`buildctl repro` can name a floating input as the cause of a difference (``repro.Floating``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from buildctl.graph import render
from buildctl.graph.graph import Graph
from buildctl.lock.lockfile import VariantLock
from buildctl.manifest.model import Manifest, ReproLevel, Variant
from buildctl.repro.levels import level_for
from buildctl.repro.repro import Floating

Status = Literal["floating", "locked"]
Rule = Literal[
    "url-without-checksum", "add-url", "pip-unpinned", "pip-without-hash", "git-branch", "apt-unversioned",
    "manifest-pip", "manifest-apt", "manifest-base", "manifest-commit", "manifest-download", "unlocked",
    "lock-drift",
]

_SHA = re.compile(r"^[0-9a-f]{40}\Z")
_URL = re.compile(r"^(https?|ftp)://", re.I)
_LOOPBACK = re.compile(r"^https?://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?/", re.I)
_HEX_DIGEST = re.compile(r"\b[0-9a-f]{64}\b|\b[0-9a-f]{128}\b")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "\n"}
# pip options that take a value (the value is not a requirement)
_PIP_VALUE_OPTS = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
    "-t", "--target", "--prefix", "--root", "--platform", "--python-version", "--implementation", "--abi", "--src",
    "--upgrade-strategy", "--progress-bar", "--log", "--cache-dir", "--trusted-host", "--cert", "--client-cert",
    "--proxy", "--timeout", "--retries", "--exists-action", "-w", "--wheel-dir", "--global-option",
    "--config-settings", "-C", "--only-binary", "--no-binary", "-e", "--editable", "--python", "--report",
}


@dataclass(frozen=True, kw_only=True)
class AuditFinding:
    rule: Rule
    status: Status
    where: str  # "manifest pip.requirements", "Dockerfile of system", "compile script of wheel:te"
    what: str  # one line: what is fetched without a pin
    node: str | None = None
    level: ReproLevel | None = None  # the node's declared level
    fix: str = ""
    packages: tuple[str, ...] = ()  # canonical names the fetch installs
    paths: tuple[str, ...] = ()  # absolute paths (fnmatch patterns) the fetch writes

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status, "where": self.where, "what": self.what,
                "node": self.node, "level": self.level.value if self.level else None, "fix": self.fix,
                "packages": list(self.packages), "paths": list(self.paths)}

    def line(self) -> str:
        node = f" [{self.node}]" if self.node else ""
        return f"{self.status}: {self.what}{node} ({self.where})"

    def floating(self) -> Floating:
        return Floating(what=self.what, packages=self.packages, paths=self.paths)


def floating_by_node(findings: Iterable[AuditFinding], graph: Graph) -> dict[str, list[Floating]]:
    """Node -> the floating inputs that can change it (a finding about a node changes its dependants too)."""
    out: dict[str, list[Floating]] = {}
    for f in findings:
        if f.node is None:
            continue
        for name in (f.node, *sorted(graph.dependants(f.node))):
            out.setdefault(name, []).append(f.floating())
    return out


def inputs_level_met(findings: Iterable[AuditFinding]) -> bool:
    """Every input pinned by the lock (and nothing fetched at build time without one)."""
    return not any(f.status == "floating" for f in findings)


# ------------------------------------------------------------------------------------------- manifest


def _exact_apt(version: str) -> bool:
    return version not in ("", "*") and "*" not in version


def manifest_findings(manifest: Manifest, vlock: VariantLock | None, variant: Variant,
                      graph: Graph | None = None) -> list[AuditFinding]:
    """What floats in the manifest as written, and whether the lock pins it."""
    levels = manifest.repro.levels
    out: list[AuditFinding] = []

    def status(locked: bool) -> Status:
        return "locked" if locked else "floating"

    locked_pip = {p.name: p for p in vlock.pip} if vlock else {}
    for r in manifest.pip.requirements:
        if r.exact:
            continue
        lp = locked_pip.get(r.name)
        out.append(AuditFinding(
            rule="manifest-pip", status=status(lp is not None), where=f"{manifest.path or 'manifest'}: pip.requirements",
            what=f"pip {r.text} (not pinned to one version in the manifest)" + (
                f"; the lock pins {lp.name}=={lp.version}" if lp else ""),
            node="python", level=level_for("python", levels), packages=(r.name,),
            fix=f"pin it in the manifest ({r.name}==<version>) for the inputs level without the lock"))
    for c in manifest.components:
        locked_build = {p.name: p for p in (vlock.build_pip.get(c.name, ()) if vlock else ())}
        for r in c.build.requires:
            if not r.exact:
                out.append(AuditFinding(
                    rule="manifest-pip", status=status(r.name in locked_build),
                    where=f"{manifest.path or 'manifest'}: components.{c.name}.build.requires",
                    what=f"pip {r.text} (build requirement of {c.name}, not pinned in the manifest)",
                    node=f"compile-env:{c.name}", level=level_for("compile-env", levels), packages=(r.name,),
                    fix=f"pin it ({r.name}==<version>)"))
        locked_apt = vlock.build_apt.get(c.name, {}) if vlock else {}
        for p in c.build.apt:
            if not p.exact:
                out.append(AuditFinding(
                    rule="manifest-apt", status=status(p.name in locked_apt),
                    where=f"{manifest.path or 'manifest'}: components.{c.name}.build.apt",
                    what=f"apt {p.name}" + (f"={p.version}" if p.version != "*" else " (no version)")
                         + f" (build requirement of {c.name})",
                    node=f"compile-env:{c.name}", level=level_for("compile-env", levels), packages=(p.name,),
                    fix=f"pin {p.name}=<exact version>"))
        if not _SHA.match(c.commit) or any(pr.head is None for pr in c.prs):
            locked = vlock is not None and c.name in vlock.components
            out.append(AuditFinding(
                rule="manifest-commit", status=status(locked), where=f"{manifest.path or 'manifest'}: components.{c.name}",
                what=f"git {c.name}: " + ("commit " + c.commit + " is not a full SHA" if not _SHA.match(c.commit)
                                          else "a PR without its reviewed head SHA"),
                node=f"wheel:{c.name}" if graph is None or f"wheel:{c.name}" in graph.names() else "assemble",
                fix="write the full 40-hex SHA (and each PR's head:)"))
    runtime_apt = vlock.apt if vlock else {}
    for p in manifest.apt.packages:
        if not p.exact:
            out.append(AuditFinding(
                rule="manifest-apt", status=status(p.name in runtime_apt), where=f"{manifest.path or 'manifest'}: apt.packages",
                what=f"apt {p.name}" + (f"={p.version}" if p.version != "*" else " (no version)") + (
                    f"; the lock pins {runtime_apt[p.name]}" if p.name in runtime_apt else ""),
                node="system", level=level_for("system", levels), packages=(p.name,),
                fix=f"pin {p.name}=<exact version> in the manifest"))
    cudnn = manifest.cudnn_for(variant)
    if cudnn is not None and not _exact_apt(cudnn.apt_version or f"{cudnn.version}-*"):
        out.append(AuditFinding(
            rule="manifest-apt", status=status(cudnn.package in runtime_apt), where=f"{manifest.path or 'manifest'}: cudnn",
            what=f"apt {cudnn.package}={cudnn.apt_version or cudnn.version + '-*'} (cuDNN)",
            node="cudnn", level=level_for("cudnn", levels), packages=(cudnn.package,),
            fix="pin cudnn.apt_version exactly"))
    if "@sha256:" not in variant.image:
        out.append(AuditFinding(
            rule="manifest-base", status=status(vlock is not None and vlock.base is not None and vlock.base.ref == variant.image),
            where=f"{manifest.path or 'manifest'}: variants.{variant.name}.image",
            what=f"base {variant.image} is a tag" + (f"; the lock pins {vlock.base.digest}" if vlock and vlock.base else ""),
            node="base", fix="the lock pins the digest; write image@sha256:... for the inputs level without it"))
    for d in manifest.downloads:
        u = d.for_platform(variant.platform)
        if u is not None and u.sha256 == "compute":
            locked = vlock is not None and d.name in vlock.downloads
            out.append(AuditFinding(
                rule="manifest-download", status=status(locked), where=f"{manifest.path or 'manifest'}: downloads.{d.name}",
                what=f"download {d.name} has sha256: compute (whatever {u.url} serves when locked)",
                node="system", level=level_for("system", levels), paths=(d.dest,),
                fix="write its sha256 in the manifest"))
    if graph is not None:
        # what the graph could not take from the lock (a missing or stale lock): nothing to build from
        for n in graph.nodes:
            for text in n.unlocked:
                kind, _, rest = text.partition(" ")
                subject = f"{kind} {rest.split()[0].split('=')[0]}" if rest else kind
                if any(f.node == n.name and f.what.startswith(subject) for f in out):
                    continue  # already said, by the manifest finding about the same value
                out.append(AuditFinding(rule="unlocked", status="floating", where="lock", node=n.name,
                                        level=level_for(n.kind, levels), what=f"{text} is not pinned by the lock",
                                        fix=f"buildctl lock {manifest.stack} --variant {variant.name}"))
    return out


def drift_findings(drift: Iterable[Any]) -> list[AuditFinding]:
    """`buildctl lock --check`'s differences (lock.Drift) as findings: the lock still pins the old values."""
    return [AuditFinding(rule="lock-drift", status="locked", where="buildctl lock --check", what=d.message(),
                         fix="builds from the lock keep the old value; re-lock to take the new one")
            for d in drift]


# ------------------------------------------------------------------------------------ rendered text


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _tokens(shell: str) -> list[str]:
    lex = shlex.shlex(shell, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:  # an unbalanced quote: fall back to words
        return shell.split()


def _commands(tokens: Sequence[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for t in tokens:
        if t in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(t)
    return [c for c in out if c]


def _strip_env(cmd: list[str]) -> list[str]:
    """The command without leading NAME=value assignments, sudo/env wrappers."""
    i = 0
    while i < len(cmd) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[i]) or cmd[i] in ("sudo", "env", "exec")):
        i += 1
    return cmd[i:]


def _redirect_target(cmd: Sequence[str]) -> str | None:
    for i, t in enumerate(cmd):
        if t in (">", ">>") and i + 1 < len(cmd):
            return cmd[i + 1]
    return None


def _without_redirects(cmd: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for t in cmd:
        if skip:
            skip = False
            continue
        if t in (">", ">>", "<", "2>", "&>"):
            skip = True
            continue
        out.append(t)
    return out


@dataclass(frozen=True, kw_only=True)
class _Context:
    where: str
    node: str | None
    level: ReproLevel | None
    locked_hashes: frozenset[str]  # canonical pip names the lock has hashes for


def _pip_args(cmd: list[str]) -> list[str] | None:
    """The arguments after `pip install` / `pip wheel` (any python -m pip spelling), else None."""
    for i, t in enumerate(cmd):
        base = t.rsplit("/", 1)[-1]
        if re.match(r"^pip[0-9.]*\Z", base) and i + 1 < len(cmd) and cmd[i + 1] in ("install", "wheel", "download"):
            return cmd[i + 2:]
        if (re.match(r"^python[0-9.]*\Z", base) and cmd[i + 1:i + 3] == ["-m", "pip"] and i + 3 < len(cmd)
                and cmd[i + 3] in ("install", "wheel", "download")):
            return cmd[i + 4:]
    return None


def _requirement_findings(lines: Iterable[str], ctx: _Context, *, origin: str) -> list[AuditFinding]:
    out: list[AuditFinding] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", "-")) or "<built by" in line or "<known after" in line:
            continue
        spec, _, rest = line.partition(" --hash")
        hashed = bool(rest) or "--hash" in line
        if _URL.match(spec) and not _LOOPBACK.match(spec):
            if not hashed:
                out.append(_f(ctx, "url-without-checksum", f"pip installs {spec} without a --hash ({origin})",
                              fix="add --hash=sha256:<digest> (or install from the locked wheelhouse)"))
            continue
        if spec.startswith(("/", ".", "$", '"$')) or spec == ".":
            continue  # a local path: the source is the context, not a fetch
        try:
            req = Requirement(spec.split(";")[0].strip())
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        pinned = len(req.specifier) == 1 and next(iter(req.specifier)).operator in ("==", "===") and \
            "*" not in str(req.specifier)
        if req.url:
            if not hashed and not _LOOPBACK.match(req.url):
                out.append(_f(ctx, "url-without-checksum", f"pip installs {name} @ {req.url} without a --hash ({origin})",
                              packages=(name,), fix="add --hash=sha256:<digest>"))
        elif not pinned:
            out.append(_f(ctx, "pip-unpinned", f"pip installs {spec} without an exact version ({origin})",
                          packages=(name,), fix=f"pin {name}==<version> (buildctl installs locked pins with --hash)"))
        elif not hashed and name in ctx.locked_hashes:
            out.append(_f(ctx, "pip-without-hash", f"pip installs {spec} without --hash although the lock has "
                          f"its hashes ({origin})", packages=(name,), fix="add --hash=sha256:<digest> from the lock"))
    return out


def _f(ctx: _Context, rule: Rule, what: str, *, packages: tuple[str, ...] = (), paths: tuple[str, ...] = (),
       fix: str = "") -> AuditFinding:
    return AuditFinding(rule=rule, status="floating", where=ctx.where, what=what, node=ctx.node, level=ctx.level,
                        packages=packages, paths=paths, fix=fix)


def _checksummed(script: str) -> bool:
    """Whether a script verifies what it downloads (sha256sum -c, or a digest compared against a literal)."""
    return bool(re.search(r"\bsha(256|512)sum\b[^;&|]*(-c|--check)\b", script)) or (
        bool(re.search(r"\bsha(256|512)sum\b", script)) and bool(_HEX_DIGEST.search(script)))


def scan_shell(script: str, ctx: _Context) -> list[AuditFinding]:
    """Findings in one shell script (a RUN's command, or a build script)."""
    out: list[AuditFinding] = []
    files: dict[str, list[str]] = {}  # file -> lines written by printf/echo (requirements files)
    commands = [c for line in _logical_lines(script) for c in _commands(_tokens(line))]
    checked = _checksummed(script)
    shas = {t for c in commands for t in c if _SHA.match(t)}
    for raw in commands:
        cmd = _strip_env(raw)
        if not cmd:
            continue
        target = _redirect_target(cmd)
        words = _without_redirects(cmd)
        prog = words[0].rsplit("/", 1)[-1] if words else ""
        if prog in ("printf", "echo") and target:
            args = words[1:]
            if prog == "printf" and args:
                args = args[1:]  # the format
            files.setdefault(target, []).extend(a for part in args for a in part.split("\n"))
            continue
        if prog in ("curl", "wget"):
            urls = [w for w in words[1:] if _URL.match(w) and not _LOOPBACK.match(w)]
            out_path = None
            for i, w in enumerate(words):
                if w in ("-o", "--output", "-O", "--output-document") and i + 1 < len(words):
                    out_path = words[i + 1]
            if urls and not checked:
                out.append(_f(ctx, "url-without-checksum",
                              f"{prog} fetches {urls[0]} and nothing checks its checksum",
                              paths=(out_path,) if out_path and out_path.startswith("/") else (),
                              fix="declare it as a download with a sha256 in the manifest (fetched and verified on "
                                  "the host), or verify it with sha256sum -c in the same step"))
            continue
        if prog == "git" and "clone" in words:
            rest = words[words.index("clone") + 1:]
            branch = None
            positional: list[str] = []
            skip = False
            for i, w in enumerate(rest):
                if skip:
                    skip = False
                    continue
                if w in ("-b", "--branch") and i + 1 < len(rest):
                    branch = rest[i + 1]
                    skip = True
                elif w.startswith("--branch="):
                    branch = w.split("=", 1)[1]
                elif w in ("--depth", "-o", "--origin", "-c", "--config", "--reference", "-j", "--jobs"):
                    skip = True
                elif not w.startswith("-"):
                    positional.append(w)
            if branch is not None and _SHA.match(branch):
                continue
            if shas:  # a full SHA is checked out (or fetched) after the clone
                continue
            url = positional[0] if positional else "?"
            dest = positional[1] if len(positional) > 1 else url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            out.append(_f(ctx, "git-branch", f"git clone of {url} at " + (f"branch {branch}" if branch else
                                                                           "its default branch") + ", no commit SHA",
                          paths=(f"{dest}/*",) if dest.startswith("/") else (),
                          fix="make it a component (repo + commit SHA, fetched on the host), or check out a full "
                              "SHA after the clone"))
            continue
        pip = _pip_args(words)
        if pip is not None:
            reqs: list[str] = []
            i = 0
            while i < len(pip):
                w = pip[i]
                if w in ("-r", "--requirement") and i + 1 < len(pip):
                    reqs += files.get(pip[i + 1], [])
                    i += 2
                    continue
                if w in _PIP_VALUE_OPTS:
                    i += 2
                    continue
                if w.startswith("-"):
                    i += 1
                    continue
                # a positional requirement, with its own --hash options following it
                line = w
                while i + 1 < len(pip) and pip[i + 1].startswith("--hash"):
                    line += " " + pip[i + 1]
                    i += 1
                reqs.append(line)
                i += 1
            out += _requirement_findings(reqs, ctx, origin=f"{words[0]} {' '.join(w for w in words[1:3])}".strip())
            continue
        if prog in ("apt-get", "apt") and "install" in words:
            for w in words[words.index("install") + 1:]:
                if w.startswith("-"):
                    continue
                name, eq, version = w.partition("=")
                if not eq or "*" in version:
                    out.append(_f(ctx, "apt-unversioned",
                                  f"apt-get install {w}" + (" (a version pattern)" if eq else " (no version)")
                                  + (f" in a layer declared {ctx.level.value}" if ctx.level in
                                     (ReproLevel.SEMANTIC, ReproLevel.BIT) else ""),
                                  packages=(name.split(":")[0],), fix=f"pin {name}=<exact version> (the lock does this "
                                                                      "for the manifest's apt packages)"))
    return out


def scan_dockerfile(text: str, ctx: _Context) -> list[AuditFinding]:
    out: list[AuditFinding] = []
    for line in _logical_lines(text):
        word, _, rest = line.strip().partition(" ")
        instr = word.upper()
        if instr == "RUN":
            out += scan_shell(rest, ctx)
        elif instr == "ADD":
            args = [a for a in rest.split() if not a.startswith("--")]
            for a in args[:-1]:
                if _URL.match(a):
                    out.append(_f(ctx, "add-url", f"ADD {a}: fetched by the engine at build time, unchecked",
                                  paths=(args[-1] + ("*" if args[-1].endswith("/") else ""),),
                                  fix="declare it as a download with a sha256 (fetched and verified on the host)"))
    return out


def scan_graph(graph: Graph, templates: render.Templates, *, levels: Mapping[str, ReproLevel],
               vlock: VariantLock | None, refs: Mapping[str, str]) -> list[AuditFinding]:
    """Findings in every node's rendered Dockerfile and compile script (placeholders for unbuilt wheels)."""
    hashed = frozenset({p.name for p in (vlock.pip if vlock else ()) if p.hashes}
                       | {p.name for ps in (vlock.build_pip.values() if vlock else ()) for p in ps if p.hashes})
    out: list[AuditFinding] = []
    for n in graph.nodes:
        if n.kind == "base":
            continue
        r = render.render(n, templates=templates, parent_ref=refs.get(n.parents[0], n.parents[0]))
        level = level_for(n.kind, levels)
        out += scan_dockerfile(r.dockerfile, _Context(where=f"Dockerfile of {n.name}", node=n.name, level=level,
                                                      locked_hashes=hashed))
        if r.script is not None:
            out += scan_shell(r.script, _Context(where=f"compile script of {n.name}", node=n.name, level=level,
                                                 locked_hashes=hashed))
    return out


def audit(manifest: Manifest, vlock: VariantLock | None, variant: Variant, graph: Graph, templates: render.Templates,
          refs: Mapping[str, str], drift: Iterable[Any] = ()) -> list[AuditFinding]:
    """Everything above for one stack's variant, floating findings first."""
    declared = manifest_findings(manifest, vlock, variant, graph)
    said = {(f.node, p) for f in declared for p in f.packages}
    # Unlocked values render as written (einops, curl): the manifest finding already names them.
    rendered = [f for f in scan_graph(graph, templates, levels=manifest.repro.levels, vlock=vlock, refs=refs)
                if not (f.rule in ("pip-unpinned", "apt-unversioned") and f.packages
                        and all((f.node, p) in said for p in f.packages))]
    found = declared + rendered + drift_findings(drift)
    return sorted(found, key=lambda f: (f.status != "floating", f.node or "", f.rule, f.what))
