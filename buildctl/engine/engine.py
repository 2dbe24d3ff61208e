"""The Docker engine, through docker-py: Engine, which builds images and runs containers.

buildctl.engine is the ONLY package that imports docker. Engine is assembled from client.py (the
connection, cancel, docker's errors mapped to ours), images.py (local images) and transfer.py (push,
pull, registry lookups); values.py has what they hand out. Everything leaving the package is ours: frozen
dataclasses (ImageInfo, RunResult, Mount, TransferProgress) and BuildctlError subclasses that say what failed,
why, and what to do. No docker ``attrs`` dict and no docker exception travels past it.

Facts this module relies on (measured: docs/reference/engine-facts.md):

- docker-py's ``build()`` keeps the containers of failed steps unless rm=True and forcerm=True.
- Live build logs need the low-level ``APIClient.build(decode=True)`` generator; a failed step comes
  as an ``{'error': ...}`` chunk, not as an exception.
- ``push(stream=True)`` never raises on failure: the error is a chunk in the stream. So every chunk is
  decoded, and the pushed digest is confirmed against the registry afterwards.
- The engine bounds a registry lookup only by its own 25 s deadline (measured against a registry that
  accepts connections and never answers), so registry lookups go through a client with a short
  ``network_timeout``.

Every HTTP call to the engine is bounded: short calls by ``timeout``, registry lookups by
``network_timeout``, builds, saves and loads by ``stream_timeout`` of silence. Pushes and pulls by
``stall_timeout``: a registry that accepts the connection and then stops taking (or giving) bytes makes
the engine wait without a word (measured: no stream chunk at all, and no error of its own within 400 s),
so an attempt whose stream shows no change for that long is abandoned (its connection closed, which
makes the engine drop the transfer) and retried, ``attempts`` times in all.

``cancel()`` stops what this Engine object is doing, from another thread: running streams are cut (the
engine cancels a build whose client went away and removes its container: forcerm) and the containers
run() started are killed and removed; the calls blocked on them raise Cancelled.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl.engine import buildkit, lazy
from buildctl.engine.client import _explanation
from buildctl.engine.transfer import Transfers
from buildctl.engine.values import PART_REPOSITORY, RUN_LABEL, Mount, RunResult, TransferProgress, split_ref
from buildctl.errors import (
    BuildFailed,
    Cancelled,
    EngineError,
    disk_full,
)
from buildctl.runs import OWNER_LABEL, dead_owner, owner

if TYPE_CHECKING:  # the real modules for the type checker; at run time imported on first use (lazy.py)
    import docker
    import docker.errors
    import docker.types
    import requests.exceptions
else:
    docker = lazy.Module("docker")
    requests = lazy.Module("requests")

# The classic builder's words for a step's container: "---> Running in 3f2a..." and, once it is gone,
# "Removing intermediate container 3f2a..." (group 1 set).
# " ---> 3f2a1b2c3d4e": the image a classic build step committed (or took from the cache, after "Using cache").
_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})[ \t\r]*(?=\n|\Z)", re.MULTILINE)
_STEP_CONTAINER = re.compile(r"(?:Running in|(Removing intermediate container)) ([0-9a-f]{12,64})")
# The classic builder looks for a step's cache by reading, one by one, every image that could be it: the parent's
# children, or for a step right after FROM scratch every image without a parent (each pulled or loaded image).
# When another client removes one of them in between, the engine fails the step with this message (moby's
# GetCachedImage / getLocalCachedImage: "unable to find image %q"), though the build itself is fine. Nothing was
# tagged, so the build runs once more; the removed image is no longer listed. Seen in CI: a wheel image (FROM
# scratch, COPY) built in one test worker while the other removed its images.
_VANISHED = re.compile(r'unable to find image "(sha256:[0-9a-f]{64})"')


class Engine(Transfers):
    """One Docker engine: builds images, runs containers, and cleans up after runs that died; the
    connection, local images and registry transfers come from Client, Images and Transfers."""

    def remove_own_part_tags(self) -> int:
        """Remove this process's temporary ``buildctl-part`` tags; return how many there were."""
        tags = self._tags_of(f"{PART_REPOSITORY}/{owner()}", "removing temporary tags")
        for t in tags:
            self.remove_image(t)
        return len(tags)

    def remove_leftovers(self) -> tuple[list[str], list[str]]:
        """Remove what runs of buildctl that died left in this engine: containers labelled with an owner
        that is no longer alive (on this host), and their temporary ``buildctl-part`` tags. Returns
        (container ids, tags) removed."""
        what = "looking for leftovers of earlier runs"
        containers: list[str] = []
        for c in self._containers_labelled(OWNER_LABEL, what):
            token = str((c.get("Labels") or {}).get(OWNER_LABEL, ""))
            if dead_owner(token):
                self._remove_dead_container(str(c["Id"]), what)
                containers.append(str(c["Id"]))
        tags: list[str] = []
        for t in self._tags_of(f"{PART_REPOSITORY}/*", what):
            repo, _tag = split_ref(t)
            if dead_owner(repo.split("/", 1)[-1]):
                self.remove_image(t)
                tags.append(t)
        return containers, tags

    def _tags_of(self, reference: str, what: str) -> list[str]:
        """The tags of the local images whose name matches ``reference`` (the engine's reference filter)."""
        filters = json.dumps({"reference": [reference]})
        if self._wire() is not None:
            images = self._json("/images/json", what, list, {"filters": filters},
                                missing=lambda why: self._refused(what, why))
        else:
            with self._errors(what):
                images = self._api().images(filters={"reference": reference})
        return [str(t) for image in images for t in (image.get("RepoTags") or ())]

    def _containers_labelled(self, label: str, what: str) -> list[dict[str, Any]]:
        """Every container (running or not) that carries ``label``."""
        if self._wire() is not None:
            return list(self._json("/containers/json", what, list,
                                   {"all": "1", "filters": json.dumps({"label": [label]})},
                                   missing=lambda why: self._refused(what, why)))
        with self._errors(what):
            return list(self._api().containers(all=True, filters={"label": label}))

    def _remove_dead_container(self, cid: str, what: str) -> None:
        """Remove a container (and its anonymous volumes), running or not; one already gone is fine."""
        if self._wire() is not None:
            answer = self._call("DELETE", f"/containers/{cid}", what, {"force": "1", "v": "1"})
            if answer.status not in (200, 204, 404):
                raise self._refused(what, answer.message)
            return
        with self._errors(what), suppress(docker.errors.NotFound):
            self._api().remove_container(cid, force=True, v=True)

    # -- builds

    def build(
        self,
        *,
        context_dir: Path,
        dockerfile: str,
        tag: str,
        labels: Mapping[str, str],
        buildargs: Mapping[str, str] | None = None,
        network_mode: str | None = None,
        on_log: Callable[[str], None] | None = None,
        log_file: Path | None = None,
        nocache: bool = False,
    ) -> str:
        """Build ``dockerfile`` (a path relative to ``context_dir``) into ``tag``; return the image id.

        Each log line goes to ``on_log`` as it arrives and to ``log_file``; when no log file is given
        a failed build still writes one (under the temporary folder) so that the error can name it.
        Build args are visible in `docker history`: never pass secrets through them. ``nocache`` runs
        every step afresh (the engine's step cache would otherwise hand a second build the first one's
        layers: `buildctl repro` needs two independent builds).
        """
        tail: deque[str] = deque(maxlen=15)
        lines: list[str] = []
        steps: set[str] = set()  # this build's step containers (cancel() waits for those still there)
        partial = ""
        image_id = ""
        error = ""
        out = None
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            out = log_file.open("w", encoding="utf-8")

        def emit(text: str) -> None:
            nonlocal partial, out
            if out is not None:
                try:
                    out.write(text)
                    out.flush()
                except OSError as exc:  # the disk filled up under the build: say which file, stop the build
                    with suppress(OSError):
                        out.close()
                    out = None
                    if full := disk_full(log_file, exc):
                        raise full from exc
                    raise
            else:
                lines.append(text)
            partial += text
            *complete, partial = partial.split("\n")
            for line in complete:
                line = line.rstrip("\r")
                tail.append(line)
                if on_log is not None:
                    on_log(line)

        try:
            if self.backend == "buildkit":
                image_id, error = self._build_buildkit(context_dir=context_dir, dockerfile=dockerfile, tag=tag,
                                                       labels=labels, buildargs=buildargs, network_mode=network_mode,
                                                       nocache=nocache, emit=emit)
            else:
                def classic() -> tuple[str, str]:
                    return self._build_classic(context_dir=context_dir, dockerfile=dockerfile, tag=tag, labels=labels,
                                               buildargs=buildargs, network_mode=network_mode, nocache=nocache,
                                               emit=emit, steps=steps)
                image_id, error = classic()
                gone = None if image_id or self.cancelled else _VANISHED.search(error)
                if gone is not None:  # once: a second failure is reported as it is
                    emit(("\n" if partial else "") + "buildctl: the engine's step cache offered image "
                         f"{gone.group(1)}, which another client removed meanwhile: building again\n")
                    image_id, error = classic()
            if partial:
                emit("\n")
        except EngineError as exc:
            # The engine refused the build (missing Dockerfile, bad context): a failure of this node,
            # reported with its log like any other. An engine that is gone stays an EngineError.
            if not isinstance(exc.__cause__, docker.errors.APIError):
                raise
            error = f"{exc.what}: {exc.why}"
            emit(error + "\n")
        finally:
            if out is not None:
                out.close()
            if not self.cancelled:  # a cancelled build's steps stay listed for cancel() to wait on
                with self._lock:
                    self._step_containers.difference_update(steps)
        if error or not image_id:
            if log_file is None:
                fd, name = tempfile.mkstemp(prefix="buildctl-build-", suffix=".log")
                with open(fd, "w", encoding="utf-8") as f:
                    f.write("".join(lines))
                log_file = Path(name)
            last = "\n".join(f"    {line}" for line in tail)
            raise BuildFailed(
                f"build of {tag} failed; full log: {log_file}",
                why=(error or "the engine reported no image id") + (f"\n  last log lines:\n{last}" if last else ""),
                fix=f"read {log_file}, correct the step that failed, and build again",
            )
        return image_id

    def _build_classic(self, *, context_dir: Path, dockerfile: str, tag: str, labels: Mapping[str, str],
                       buildargs: Mapping[str, str] | None, network_mode: str | None, nocache: bool,
                       emit: Callable[[str], None], steps: set[str]) -> tuple[str, str]:
        """The classic builder through docker-py's build stream; returns (image id, error)."""
        image_id = ""
        error = ""
        with self._errors(f"build of {tag}", fix=f"check the Dockerfile {context_dir / dockerfile}"), \
                self._stream():
            stream = self._api().build(
                path=str(context_dir),
                dockerfile=dockerfile,
                tag=tag,
                labels=dict(labels),
                buildargs=dict(buildargs) if buildargs else None,
                network_mode=network_mode,
                rm=True,
                forcerm=True,
                nocache=nocache,
                decode=True,
                timeout=self.stream_timeout,
            )
            cached = False
            for chunk in stream:
                if "error" in chunk:
                    # Keep reading: the engine ends the stream itself after the error.
                    text = str(chunk.get("error") or chunk.get("errorDetail", {}).get("message", ""))
                    error = error or text
                    emit(text.rstrip("\n") + "\n")
                    continue
                if "stream" in chunk:
                    text = str(chunk["stream"])
                    if "---> Using cache" in text or re.search(r"^Step \d+/\d+ : FROM ", text, re.MULTILINE):
                        cached = True  # the next image is the cache's or the base: not this build's own
                    for m in _STEP_IMAGE.finditer(text):
                        if not cached:  # committed by this build: listed, so that a later run can remove it
                            self._journal(m.group(1))
                        cached = False
                    for m in _STEP_CONTAINER.finditer(text):
                        with self._lock:
                            (self._step_containers.discard if m.group(1) else self._step_containers.add)(
                                m.group(2))
                        steps.add(m.group(2))
                    emit(text)
                elif "status" in chunk and not (chunk.get("progressDetail") or {}).get("current"):
                    # A base pulled during the build: its state changes, not every progress tick.
                    emit(str(TransferProgress(status=str(chunk["status"]), layer=str(chunk.get("id", "")))) + "\n")
                aux = chunk.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = str(aux["ID"])
        return image_id, error

    def _journal(self, image: str) -> None:
        if self.intermediates is None:
            return
        with suppress(OSError), self.intermediates.open("a", encoding="utf-8") as f:
            f.write(image + "\n")

    def remove_intermediates(self, images: Sequence[str]) -> list[str]:
        """Remove the step images a killed classic build listed (``intermediates``), newest first, each only while
        it has no tag and no image builds on it (the engine refuses to remove one with children or a container);
        return those removed."""
        removed: list[str] = []
        for image in reversed(list(dict.fromkeys(images))):
            if not re.fullmatch(r"[0-9a-f]{12,64}", image):
                continue
            try:
                info = self.inspect_image(image)
                if info.repo_tags:
                    continue
                self.remove_image(image)
            except EngineError:
                continue  # children, a container, or gone already: not ours to force
            removed.append(image)
        return removed

    def _build_buildkit(self, *, context_dir: Path, dockerfile: str, tag: str, labels: Mapping[str, str],
                        buildargs: Mapping[str, str] | None,
                        network_mode: str | None, nocache: bool, emit: Callable[[str], None]) -> tuple[str, str]:
        """The engine's own BuildKit through a docker CLI (buildkit.py); returns (image id, error)."""
        if self._cancelled.is_set():
            raise Cancelled(f"build of {tag}: cancelled", why="the build was interrupted")
        cli = buildkit.find_cli(self.docker_cli, memo=self.cli_memo)

        def started(proc: subprocess.Popen[bytes]) -> None:
            with self._lock:
                self._procs.add(proc)

        def stopped(proc: subprocess.Popen[bytes]) -> None:
            with self._lock:
                self._procs.discard(proc)

        image_id, error = buildkit.build(cli, address=self.address, context_dir=context_dir, dockerfile=dockerfile,
                                         tag=tag, labels=labels, buildargs=buildargs, network_mode=network_mode, nocache=nocache,
                                         emit=emit, started=started, stopped=stopped, silence_s=self.stream_timeout)
        if self._cancelled.is_set():
            raise Cancelled(f"build of {tag}: cancelled", why="the build was interrupted")
        return image_id, error

    def check_backend(self) -> str:
        """Say how this engine builds; raise EngineError when its backend cannot build here (before a build starts)."""
        if self.backend == "classic":
            return "classic (the engine's classic builder, through docker-py)"
        cli = buildkit.find_cli(self.docker_cli, memo=self.cli_memo)
        return f"buildkit (the engine's own BuildKit, through {cli.describe()})"

    # -- containers

    def run(
        self,
        image: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        files: Mapping[str, bytes] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        network_mode: str | None = None,
        gpus: bool = False,
        timeout: float,
        entrypoint: Sequence[str] | None = None,
    ) -> RunResult:
        """Run ``command`` in a fresh container of ``image``, wait at most ``timeout`` seconds.

        ``files`` (absolute path -> content) are copied in before the container starts. On timeout
        the container is killed and the result says timed_out. The container is always removed: when
        this call returns or raises, and by cancel() from another thread (this call then raises Cancelled).
        It carries this process's owner label, so that a later run removes it if this one dies.

        ``mounts`` are bind mounts of host folders on an engine of this host. An engine on another host (``far``)
        cannot mount a path of this one: there each folder travels instead, copied in before the start (the
        engine's archive API), and a writable one copied back out into its host folder once the command ended.
        """
        archive = _tar(files) if files else None
        far = self.far
        binds = () if far else mounts
        gpu_fix = "GPU runs need a GPU host with the NVIDIA Container Toolkit (nvidia-container-toolkit)"
        with self._errors(f"run in {image}", fix=gpu_fix if gpus else ""):
            if self._cancelled.is_set():
                raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
            api = self._api()
            host_config = api.create_host_config(
                mounts=[
                    docker.types.Mount(
                        target=m.target, source=str(Path(m.source).resolve()), type="bind", read_only=m.read_only
                    )
                    for m in binds
                ] or None,
                network_mode=network_mode,
                device_requests=(
                    [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None
                ),
            )
            try:
                created = api.create_container(
                    image,
                    command=list(command),
                    environment=dict(env) if env else None,
                    working_dir=workdir,
                    user=user,
                    entrypoint=list(entrypoint) if entrypoint is not None else None,
                    labels={RUN_LABEL: self.name, OWNER_LABEL: owner()},
                    host_config=host_config,
                )
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"cannot run {image}: no such image in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build it, or pull it first",
                ) from exc
            cid = str(created["Id"])
            with self._lock:
                self._containers.add(cid)
            try:
                if self._cancelled.is_set():  # cancel() ran between the create and the line above
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
                if archive is not None:
                    api.put_archive(cid, "/", archive)
                if far:
                    for m in mounts:
                        self._copy_in(cid, m)
                api.start(cid)
                timed_out = False
                try:
                    # The wait request's read timeout is the run's time limit.
                    status = api.wait(cid, timeout=timeout)
                except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                    if self._cancelled.is_set():
                        raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted") from None
                    timed_out = True
                    # A 409 here means it exited between the timeout and the kill.
                    with suppress(docker.errors.APIError):
                        api.kill(cid)
                    status = api.wait(cid, timeout=self.timeout)
                if self._cancelled.is_set():
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted")
                stdout = api.logs(cid, stdout=True, stderr=False)
                stderr = api.logs(cid, stdout=False, stderr=True)
                if far:
                    for m in mounts:
                        if not m.read_only:
                            self._copy_out(cid, m)
            except docker.errors.APIError:
                if self._cancelled.is_set():  # cancel() removed it under our feet
                    raise Cancelled(f"run in {image}: cancelled", why="the build was interrupted") from None
                raise
            finally:
                self._remove_container(cid)
        return RunResult(
            exit_code=int(status.get("StatusCode", -1)),
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            timed_out=timed_out,
        )

    @property
    def far(self) -> bool:
        """Whether this engine is reached over the network (tcp://, ssh://): on another host, as far as buildctl
        knows, so nothing of this host's file system can be mounted into its containers."""
        return self.address.startswith(("tcp://", "ssh://", "http://", "https://"))

    def capacity(self) -> tuple[int, float]:
        """(CPUs, memory in GiB) of the engine's host, as the engine says (`docker info`: NCPU, MemTotal): what a
        compile on another host is sized by, where this host's own figures say nothing."""
        with self._errors(f"info of engine {self.name}"):
            info = self._api().info()
        cpus, memory = info.get("NCPU"), info.get("MemTotal")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (cpus, memory)):
            raise EngineError(f"engine {self.name} did not say how many CPUs and how much memory its host has",
                              why=f"its info says NCPU={cpus!r}, MemTotal={memory!r}",
                              fix="check the engine at that endpoint (`docker -H ENDPOINT info`)")
        return int(cpus), int(memory) / (1 << 30)

    def _copy_in(self, cid: str, mount: Mount) -> None:
        """The host folder ``m.source`` into the created container at ``m.target`` (tar over the engine's API,
        spooled on disk: a source tree can be large)."""
        with tempfile.TemporaryFile(prefix="buildctl-copy-in-") as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tf:
                tf.add(str(mount.source), arcname=mount.target.strip("/"), recursive=True)  # symlinks stay links
            spool.seek(0)
            self._api(self.stream_timeout).put_archive(cid, "/", spool)

    def _copy_out(self, cid: str, mount: Mount) -> None:
        """The container's folder ``m.target`` back into the host folder ``m.source``: its folders and plain
        files only (a link, device or path that would leave the folder is skipped: the container's content is
        not trusted to name host paths)."""
        stream, _stat = self._api(self.stream_timeout).get_archive(cid, mount.target)
        with tempfile.TemporaryFile(prefix="buildctl-copy-out-") as spool:
            for chunk in stream:
                spool.write(chunk)
            spool.seek(0)
            top = Path(mount.target).name
            dest = Path(mount.source)
            with tarfile.open(fileobj=spool, mode="r:") as tf:
                for member in tf:
                    parts = member.name.split("/")
                    if not parts or parts[0] != top or any(p in ("", ".", "..") for p in parts[1:]):
                        continue
                    rel = "/".join(parts[1:])
                    if not rel:
                        continue
                    target = dest / rel
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                    elif member.isfile():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        if target.is_symlink() or not target.parent.resolve().is_relative_to(dest.resolve()):
                            continue
                        src = tf.extractfile(member)
                        if src is None:
                            continue
                        with target.open("wb") as out:
                            shutil.copyfileobj(src, out)
                        os.chmod(target, 0o755 if member.mode & 0o100 else 0o644)


def _tar(files: Mapping[str, bytes]) -> bytes:
    """A tar of ``files`` rooted at /; the engine creates missing parent folders (0755, root)."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path, content in files.items():
            if not path.startswith("/"):
                raise ValueError(f"files: path must be absolute, got {path!r}")
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mtime = now
            # Scripts with a shebang stay executable; everything else is plain data.
            info.mode = 0o755 if content.startswith(b"#!") else 0o644
            tf.addfile(info, io.BytesIO(content))
    return buf.getvalue()


