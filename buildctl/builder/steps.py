"""Building one node: an image node (context, build, whiteouts, record, tag, push), a wheel (compile, keep,
one-file image) or a pull; plus the pure helpers of these steps."""

from __future__ import annotations

import contextlib
import datetime
import functools
import io
import json
import math
import os
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from buildctl import quoting, runs, safepath
from buildctl.builder import compilecache, compose, normalise, wheelhouse
from buildctl.builder.pushes import EarlyPull
from buildctl.builder.state import Action, NodeResult, Outcome, RunState
from buildctl.errors import BuildctlError, BuildFailed, SmokeFailed, disk_full
from buildctl.graph import render
from buildctl.graph.graph import Node, shared_labels
from buildctl.graph.records import NodeRecord
from buildctl.graph.specs import AssembleNodeSpec, EntrypointNodeSpec, WheelNodeSpec
from buildctl.labels import SMOKE_LABEL
from buildctl.sources.export import BUILD_GIT_ENV

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine



def smoke_label(spec: EntrypointNodeSpec) -> Literal["skipped", "passed"]:
    """The entrypoint image's smoke label, from its spec (part of its key): skipped, else passed (the gate ran)."""
    return "skipped" if spec.smoke == "skipped" else "passed"


class Steps:
    def __init__(self, state: RunState, *, engine_for: Callable[[Sequence[str]], AbstractContextManager[Engine]]) -> None:
        self.s = state
        self.engine_for = engine_for  # the engine for a task, preferring one that holds these parents

    def task(self, name: str, action: Action, publish: bool) -> None:
        node = self.s.g.node(name)
        start = time.monotonic()
        with self.engine_for(node.parents) as e:
            if action == "have" and publish:
                self._publish(e, node)
                return
            if name in self.s.untrusted and e.image_exists(self.s.ref(name)):
                # the untrusted image goes (its tag would otherwise move and leave it dangling)
                e.remove_image(self.s.ref(name))
            if action == "pull":
                early = self.s.early.get(name)
                if early is None:
                    self.s.progress.node(name, "pulling", self.s.ref(name))
                if node.kind == "wheel":
                    self._pull_wheel(e, node)
                    self.s.records.save(self.s.g.stack, self.s.g.variant, NodeRecord.of(self.s.g, node, engine=e.name))
                else:
                    if early is None or not early.wait(e):  # pulled early into this engine, or now
                        e.pull(self.s.ref(name), platform=self._pull_platform(node))
                        self._pulled(node, e)
                outcome: Outcome = "pulled"
            else:
                self.s.progress.node(name, "building")
                if node.kind == "wheel":
                    self._build_wheel(e, node)
                else:
                    self._build_image(e, node)
                outcome = "built"
        seconds = time.monotonic() - start
        with self.s.lock:
            hits, misses = self.s.cache_stats.get(name, (None, None))
            self.s.results.append(NodeResult(name=name, outcome=outcome, engine=e.name, ref=self.s.ref(name),
                                             seconds=seconds, backend=e.backend if outcome == "built" else "",
                                             cache_hits=hits, cache_misses=misses))
        cached = "" if hits is None or misses is None else (
            f"; compiled: {hits} of {hits + misses} objects from the cache")
        self.s.progress.node(name, outcome, f"{self.s.ref(name)} on {self._on(e)}{cached}")

    def pull_early(self, actions: Mapping[str, Action]) -> None:
        """Start the image pulls the plan asks for now, in the background, while the host prepares sources and
        downloads (seconds on a fresh builder that pulls a compile environment): each node's task then finds
        its image here. Only with one engine (with several, the scheduler picks the engine of each node); a
        pull that fails here is tried again, and reported, by its task."""
        if len(self.s.engines) != 1 or self.s.cancelled.is_set():
            return
        for name in self.s.g.names():
            node = self.s.g.node(name)
            if actions.get(name) == "pull" and node.kind != "wheel":
                self.s.progress.node(name, "pulling", self.s.ref(name))
                self.s.early[name] = EarlyPull.start(
                    self.s.e0, self.s.ref(name), self.s.threads,
                    platform=self._pull_platform(node),
                    then=functools.partial(self._pulled, node, self.s.e0))  # its record at once: a tag always has one

    def _pull_platform(self, node: Node) -> str | None:
        """The platform a pull asks for: the variant's for the base (a multi-platform image), none for ours."""
        return self.s.g.platform if node.kind == "base" else None

    def _pulled(self, node: Node, engine: Engine) -> None:
        """A node's image just pulled into ``engine``: where it is, and (but for the base) its record."""
        self.s.have(node.name, engine)
        if node.kind != "base":
            self.s.records.save(self.s.g.stack, self.s.g.variant, NodeRecord.of(self.s.g, node, engine=engine.name))

    def ensure(self, engine: Engine, name: str) -> None:
        """Make the image of node ``name`` present in engine ``engine`` (pulling what another engine pushed, once that
        push ended)."""
        ref = self.s.ref(name)
        if engine.name in self.s.where.get(name, ()) or engine.image_exists(ref):
            self.s.have(name, engine)
            return
        self.s.pushes.wait(name)
        if engine.image_exists(ref):  # made here in the background meanwhile (a wheel's one-file image)
            self.s.have(name, engine)
            return
        node = self.s.g.node(name)
        engine.pull(ref, platform=self._pull_platform(node))
        self.s.have(name, engine)

    def _push(self, engine: Engine, node: Node) -> None:
        """Start the push of a node just built (or found unpublished): it runs in the background while the
        node's children build (builder/pushes.py); the run ends only once it did."""
        if self._pushes():
            self.s.progress.node(node.name, "pushing", self.s.ref(node.name))
            self.s.pushes.start(node.name, functools.partial(engine.push, self.s.ref(node.name)))

    def _pushes(self) -> bool:
        """Whether a node built now goes to the registry: there is one, and the run was not interrupted."""
        return self.s.t.registry is not None and not self.s.cancelled.is_set()

    def _publish(self, engine: Engine, node: Node) -> None:
        """A node present here but not in the registry (built before with the registry down): push it."""
        if node.kind == "wheel" and not engine.image_exists(self.s.ref(node.name)):
            self._wheel_image(engine, node, self.s.wheels[node.component or ""])
        else:
            self.ensure(engine, node.name)
        self._push(engine, node)

    def _labels(self, node: Node) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.source": self.s.source,
            "org.opencontainers.image.revision": self.s.revision,
            "org.opencontainers.image.created": self.s.created,
            "org.opencontainers.image.base.name": self.s.t.base_image,
            "org.opencontainers.image.base.digest": self.s.t.base_digest,
            **shared_labels(self.s.g, node),
        }
        if isinstance(node.spec, AssembleNodeSpec | EntrypointNodeSpec):
            labels.update(node.spec.labels)
        if isinstance(node.spec, EntrypointNodeSpec):
            labels[SMOKE_LABEL] = smoke_label(node.spec)
        return labels

    def _parent_ref(self, node: Node) -> str:
        return self.s.t.base_ref if node.parents[0] == "base" else self.s.ref(node.parents[0])

    def _build_image(self, engine: Engine, node: Node) -> None:
        self.ensure(engine, node.parents[0])
        if isinstance(node.spec, EntrypointNodeSpec) and node.spec.smoke == "gate":
            self._gate(engine, node)
        wheels: dict[str, render.WheelFile] = {}
        if isinstance(node.spec, AssembleNodeSpec):
            for w in node.spec.wheels:
                f = self.s.wheels[w.component]
                wheels[w.component] = render.WheelFile(filename=f.name, sha256=wheelhouse.sha256_file(f))
                assert self.s.wheelhouse_root is not None
                wheelhouse.link_tree(self.s.wheelhouse_root, {f"components/{w.component}/{f.name}": f})
        rendered = render.render(node, templates=self.s.t.templates, parent_ref=self._parent_ref(node), wheels=wheels,
                                 built=self.s.built)
        part = self._part_ref(node)
        labels = self._labels(node)
        try:
            with self._context(node, rendered, labels=labels) as ctx:
                if not self._compose(engine, node, rendered, ctx, part, labels):
                    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=part, labels={},
                                 buildargs={render.WHEELHOUSE_ARG: self.s.wheelhouse_url} if rendered.wheelhouse else None,
                                 network_mode="host" if rendered.wheelhouse else None,
                                 on_log=lambda line: self.s.progress.log(node.name, line),
                                 log_file=self.s.log_file(node.name), nocache=self.s.opt.nocache)
            self._settle_whiteouts(engine, node, rendered, part)
            self._record_and_tag(engine, node, part)
        finally:
            with contextlib.suppress(BuildctlError):
                engine.remove_image(part)  # the temporary tag (with it the image, when it never got its content tag)
        self.s.have(node.name, engine)
        self._push(engine, node)

    def _compose(self, engine: Engine, node: Node, rendered: render.Rendered, ctx: Path, part: str,
                 labels: Mapping[str, str]) -> bool:
        """A node that only copies files (the entrypoint, a wheel's one-file image) composed on this host, without
        the builder (builder/compose.py); False where it cannot be, and the builder builds it."""
        spec = node.spec
        if isinstance(spec, EntrypointNodeSpec):
            changes = compose.Changes(labels=labels, workdir=spec.workdir, entrypoint=spec.entrypoint, cmd=spec.cmd)
            parent: str | None = self._parent_ref(node)
        elif isinstance(spec, WheelNodeSpec):
            changes, parent = compose.Changes(labels=labels), None
        else:
            return False
        if not compose.plain(rendered.dockerfile, changes, scratch=parent is None):
            return False  # a template that does more than copy and set metadata: the builder's
        log = self.s.log_file(node.name + ("-image" if parent is None else ""))
        if compose.compose(engine, parent_ref=parent, platform=str(self.s.g.platform), root=ctx / "rootfs", changes=changes,
                           tag=part, scratch=self.s.scratch, epoch=render.EPOCH) is None:
            return False
        msg = "composed on this host: one layer and its config, loaded (no builder)"
        with contextlib.suppress(OSError):
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(msg + "\n")
        if parent is not None:
            self.s.progress.log(node.name, msg)
        return True

    def _on(self, engine: Engine) -> str:
        """The engine as a record and the progress name it: said when it runs the variant's platform under QEMU."""
        return engine.name + (f" (emulating {self.s.g.platform})" if engine.name in self.s.opt.emulated else "")

    def _part_ref(self, node: Node) -> str:
        from buildctl.engine.values import PART_REPOSITORY

        return f"{PART_REPOSITORY}/{runs.owner()}:{node.slug}"

    def _record_and_tag(self, engine: Engine, node: Node, part: str, *, stats: compilecache.Stats | None = None) -> None:
        """The record of the completed build first, then the content tag: a tag always has its record."""
        if self.s.cancelled.is_set():
            raise BuildFailed(f"{node.name}: cancelled", why="the build was interrupted")
        self.s.records.save(self.s.g.stack, self.s.g.variant, NodeRecord.of(
            self.s.g, node, built_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            engine=self._on(engine), backend=engine.backend, cache_hits=None if stats is None else stats.hits,
            cache_misses=None if stats is None else stats.misses))
        engine.tag(part, self.s.ref(node.name))

    def _settle_whiteouts(self, engine: Engine, node: Node, rendered: render.Rendered, ref: str) -> None:
        """Give the whiteouts of a node declared bit-level a fixed time (normalise.py): a RUN that deleted a file
        of a lower layer left one with the time of the build, and a RUN cannot touch it. The check costs a
        `docker save` of the node image (about 1.7 s for the demo's 190 MB), so only bit-level RUN nodes pay it."""
        if node.kind not in self.s.t.bit_level:
            return
        if not any(line.startswith("RUN ") for line in rendered.dockerfile.splitlines()):
            return
        below = len(engine.inspect_image(self._parent_ref(node)).layers)
        if normalise.settle_whiteouts(engine, ref, parent_layers=below, scratch=self.s.scratch,
                                      epoch=render.EPOCH):
            self.s.progress.log(node.name, "whiteouts given a fixed time (save, rewrite, load)")

    def _gate(self, engine: Engine, node: Node) -> None:
        assemble = self.s.ref("assemble")
        if self.s.smoke_gate is None:
            raise SmokeFailed("no smoke runner is available to gate the entrypoint",
                              fix="pass --skip-smoke to build past the gate (the image is labelled smoke=skipped)")
        # the suite's report names the assembled image's registry digest: its push (in the background) first
        self.s.pushes.wait("assemble")
        self.s.progress.node(node.name, "smoke", f"build-host tier on {assemble}")
        summary = self.s.smoke_gate(engine, assemble, log_file=self.s.log_file("smoke"))
        self.s.smoke = "passed"
        self.s.progress.log(node.name, summary)

    @contextlib.contextmanager
    def _context(self, node: Node, rendered: render.Rendered, *, labels: Mapping[str, str]) -> Iterator[Path]:
        ctx = Path(tempfile.mkdtemp(prefix=f"ctx-{node.slug}-", dir=self.s.scratch))
        try:
            (ctx / "Dockerfile").write_text(rendered.dockerfile + label_instruction(labels))
            for cf in rendered.context:
                self._materialize(ctx, cf)
            rootfs = ctx / "rootfs"
            if rootfs.is_dir():
                for dirpath, dirnames, _ in os.walk(rootfs, topdown=False):
                    for d in dirnames:
                        p = Path(dirpath) / d
                        if not p.is_symlink():
                            os.chmod(p, render.dir_mode(p.relative_to(rootfs).as_posix()))
                            os.utime(p, (render.EPOCH, render.EPOCH))
            yield ctx
        finally:
            shutil.rmtree(ctx, ignore_errors=True)

    def _materialize(self, ctx: Path, context_file: render.ContextFile) -> None:
        materialize(ctx, context_file, trees=self.s.prepared, downloads=self.s.downloads, wheels=self.s.wheels)

    def _build_wheel(self, engine: Engine, node: Node) -> None:
        from buildctl.engine.values import Mount

        spec = node.spec
        assert isinstance(spec, WheelNodeSpec) and node.component
        self.ensure(engine, node.parents[0])
        rendered = render.render(node, templates=self.s.t.templates, parent_ref=self.s.ref(node.parents[0]))
        assert rendered.script is not None
        compiles = sum(1 for n in self.s.g.nodes if n.kind == "wheel")
        # sized by the builder's host: this one's figures, or what another host's engine says of its own
        cores, memory = engine.capacity() if engine.far else (self.s.opt.host_cores, self.s.opt.host_memory_gib)
        jobs = compile_jobs(cores=cores, memory_gib=memory, per_job_gib=spec.memory_per_job_gib,
                            concurrent=min(self.s.opt.jobs, compiles))
        cache = compilecache.setup(self.s.config.compile_cache, self.s.config.cache, self.s.compile_tool,
                                   component_on=spec.compile_cache)
        out = Path(tempfile.mkdtemp(prefix=f"out-{node.slug}-", dir=self.s.scratch))
        # the script: a read-only bind mount on an engine of this host (copying it in costs the run ~50 ms); on
        # another host's, Engine.run copies it in as it does every mount
        script = Path(tempfile.mkdtemp(prefix=f"script-{node.slug}-", dir=self.s.scratch)) / "wheel.sh"
        script.write_text(rendered.script)
        log = self.s.log_file(node.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        # an engine on another host gets the source and gives the wheel back as copies (Engine.run); this host's
        # cache folder stays here (copying it both ways would cost more than the compiles it saves): a server only
        where = ""
        if engine.far:
            cache = compilecache.elsewhere(cache)
            where = (f" on {engine.name}, another host (the source copied in, the wheel copied out): "
                     + ("the compiler cache server only, not this host's cache folder" if cache.on else
                        "without a compiler cache (this host's cache folder is not shared; compile_cache names no server)"))
        try:
            self.s.progress.log(node.name, f"compiling with {jobs} job(s){where}")
            result = engine.run(self.s.ref(node.parents[0]), ["/buildctl/wheel.sh"], entrypoint=["/bin/sh"],
                                # the tree keeps the host user's uid (cp -a): git would call it "dubious" and the
                                # version would lose its +sha, so the copy is marked safe (sources.BUILD_GIT_ENV)
                                env={"BUILDCTL_JOBS": str(jobs), **BUILD_GIT_ENV, **cache.env},
                                mounts=[Mount(source=self.s.prepared[node.component], target="/src", read_only=True),
                                        Mount(source=out, target="/out", read_only=False),
                                        *(Mount(source=src, target=dst, read_only=ro) for src, dst, ro in cache.mounts),
                                        Mount(source=script, target="/buildctl/wheel.sh", read_only=True)],
                                network_mode=cache.network_mode, timeout=self.s.opt.compile_timeout)
            log.write_text(f"$ compile {node.component} in {self.s.ref(node.parents[0])} ({jobs} jobs){where}\n"
                           + result.stdout + result.stderr)
            lines = (result.stdout + result.stderr).strip().splitlines()
            if lines:
                self.s.progress.log(node.name, lines[-1])
            stats = compilecache.read_stats(out) if cache.on else None
            if stats is not None:
                self.s.progress.log(node.name, stats.line())
                with self.s.lock:
                    self.s.cache_stats[node.name] = (stats.hits, stats.misses)
            made = sorted(out.glob("*.whl"))
            if not result.ok or len(made) != 1:
                tail = "\n".join(f"    {x}" for x in lines[-12:])
                why = ("timed out" if result.timed_out else f"exit status {result.exit_code}") if not result.ok else (
                    f"the build command left {len(made)} wheel(s) in /out, not one")
                raise BuildFailed(f"compile of {node.component} failed; full log: {log}",
                                  why=why + (f"\n  last log lines:\n{tail}" if tail else ""),
                                  fix=f"read {log}, correct the component or its build settings, and build again")
            wheel = self._keep_wheel(node, made[0])
        finally:
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(script.parent, ignore_errors=True)
        # the nodes that install the wheel take it from this host: its one-file image (what another builder pulls
        # instead of compiling), record, tag and push go on in the background while they build (builder/pushes.py)
        self.s.pushes.start(node.name, lambda: self._wheel_image(engine, node, wheel, stats=stats, push=True))

    def _keep_wheel(self, node: Node, made: Path) -> Path:
        """Move a finished wheel to wheels/<component>/<key>/, whole or not at all."""
        assert node.component
        if self.s.cancelled.is_set():
            raise BuildFailed(f"{node.name}: cancelled", why="the build was interrupted")
        kept = keep_wheel(self.s.config.cache.wheels / node.component / node.key, made)
        with self.s.lock:
            self.s.wheels[node.component] = kept
        return kept

    def _wheel_image(self, engine: Engine, node: Node, wheel: Path, *, stats: compilecache.Stats | None = None,
                     push: bool = False) -> None:
        """The wheel's one-file image, its record and content tag; with ``push``, its push too (in this thread:
        the caller runs it in the background)."""
        with self.s.lock:
            self.s.wheels[node.component or ""] = wheel
        rendered = render.render(node, templates=self.s.t.templates, parent_ref="scratch")
        part = self._part_ref(node)
        labels = self._labels(node)
        try:
            with self._context(node, rendered, labels=labels) as ctx:
                if not self._compose(engine, node, rendered, ctx, part, labels):
                    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=part, labels={},
                                 log_file=self.s.log_file(node.name + "-image"), nocache=self.s.opt.nocache)
            self._record_and_tag(engine, node, part, stats=stats)
        finally:
            with contextlib.suppress(BuildctlError):
                engine.remove_image(part)
        self.s.have(node.name, engine)
        if push and self._pushes():
            self.s.progress.node(node.name, "pushing", self.s.ref(node.name))
            engine.push(self.s.ref(node.name))

    def _pull_wheel(self, engine: Engine, node: Node) -> None:
        """Take the wheel out of its one-file image (pulled when the engine lacks it): no compile."""
        assert node.component
        ref = self.s.ref(node.name)
        if not engine.image_exists(ref):
            engine.pull(ref)
        self.s.have(node.name, engine)
        with tempfile.TemporaryDirectory(prefix="wheel-", dir=self.s.scratch) as tmp:
            tar = Path(tmp) / "image.tar"
            engine.save(ref, tar)
            found = extract_wheel(tar, Path(tmp) / "out")
            if found is None:
                raise BuildFailed(f"the image {ref} holds no wheel", fix="remove it from the registry and build again")
            self._keep_wheel(node, found)


def keep_wheel(final: Path, made: Path) -> Path:
    """Put the wheel ``made`` alone in the folder ``final`` (wheels/<component>/<key>/), whole or not at all: it is
    copied into a folder of this run beside it (swept by a later run if this one dies), which then replaces
    ``final``. A copy that fails (a full disk: DiskFull naming the wheel) leaves no part of it behind.

    ``made`` is what the compile container left in /out, a folder it writes: it must be a regular file, never a
    link (copy2 followed one: a link to a host file such as ~/.docker/config.json became the wheel, its image and
    its push), a FIFO (shutil's SpecialFileError, a traceback) or a folder."""
    kind = _not_regular(made)
    if kind:
        raise BuildFailed(f"{made.name} is {kind}, not a wheel file: not kept",
                          why="a compile's /out is the container's to write, and is not trusted to name host files",
                          fix="make the build command write the wheel itself into /out (pip wheel -w /out)")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"run-{runs.owner()}-", dir=final.parent))
    try:
        shutil.copy2(made, tmp / made.name, follow_symlinks=False)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        full = disk_full(final / made.name, exc) if isinstance(exc, OSError) else None
        if full is not None:
            raise full from exc
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final / made.name


def _not_regular(path: Path) -> str | None:
    """What ``path`` is, itself and not what it links to, when that is not a regular file (None: it is one)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"a file that cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)!r})"
    if not stat.S_ISREG(mode):
        return "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a special file"
    return None


def compile_jobs(*, cores: int, memory_gib: float, per_job_gib: float, concurrent: int) -> int:
    """Parallel compile jobs for one compile: what the cores allow and what memory allows, shared by the
    compiles running at once (parallel nvcc running out of memory is the commonest TE build failure)."""
    share = max(1, concurrent)
    by_cores = cores // share
    by_memory = math.floor(memory_gib / share / per_job_gib) if per_job_gib > 0 else by_cores
    return max(1, min(by_cores, by_memory))


def materialize(ctx: Path, context_file: render.ContextFile, *, trees: Mapping[str, Path], downloads: Mapping[str, Path],
                wheels: Mapping[str, Path]) -> None:
    """Put one file of a rendered context (render.ContextFile) under ``ctx``: a source tree (component ->
    exported tree), a wheel (component -> wheel file), a download (name -> verified file) or text; files get
    their mode and the fixed time (render.EPOCH). Shared with bench/baselines.py, which writes the same contexts."""
    target = safepath.inside(ctx, context_file.path)
    if context_file.tree is not None:
        shutil.copytree(trees[context_file.tree], target, symlinks=True)
        return
    if context_file.wheel is not None:
        target.mkdir(parents=True, exist_ok=True)
        f = wheels[context_file.wheel]
        shutil.copy2(f, target / f.name)
        os.utime(target / f.name, (render.EPOCH, render.EPOCH))
        return
    if context_file.download is not None:
        shutil.copyfile(downloads[context_file.download], target)
    else:
        target.write_text(context_file.text or "")
    os.chmod(target, int(context_file.mode, 8))
    os.utime(target, (render.EPOCH, render.EPOCH))


def label_instruction(labels: Mapping[str, str]) -> str:
    """One LABEL instruction for all labels (the engine turns a build's ``labels`` into one step each,
    about 0.1 s apiece). Keys and values are quoted by ``quoting.dockerfile``."""
    if not labels:
        return ""
    pairs = [f"{quoting.dockerfile(k)}={quoting.dockerfile(v)}" for k, v in sorted(labels.items())]
    return "LABEL " + " \\\n      ".join(pairs) + "\n"


def extract_wheel(image_tar: Path, dest: Path) -> Path | None:
    """The one wheel under /wheel/ in a `docker save` archive of a one-file wheel image."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(image_tar) as outer:
        names = outer.getnames()
        manifest = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for layer in manifest[0]["Layers"]:
            if layer not in names:
                continue
            data = outer.extractfile(layer)
            if data is None:
                continue
            with tarfile.open(fileobj=io.BytesIO(data.read())) as inner:
                for m in inner.getmembers():
                    path = m.name.lstrip("./")
                    if m.isfile() and path.startswith("wheel/") and path.endswith(".whl") and "/" not in path[6:]:
                        out = dest / Path(path).name
                        src = inner.extractfile(m)
                        assert src is not None
                        out.write_bytes(src.read())
                        return out
    return None
