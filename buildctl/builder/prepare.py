"""Host-side preparation before any node is built: the git source trees, the verified downloads, the pip wheels
(sdists built into wheels in the base), for the nodes the plan builds."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from buildctl.builder import compilecache, wheelhouse
from buildctl.builder.inputs import Fetchers
from buildctl.builder.state import Action, RunState
from buildctl.errors import BuildctlError, BuildFailed
from buildctl.graph import render
from buildctl.graph.specs import (
    AssembleNodeSpec,
    CompileEnvNodeSpec,
    CudnnNodeSpec,
    FileSpec,
    PipPin,
    PythonNodeSpec,
    SystemNodeSpec,
    WheelNodeSpec,
)
from buildctl.sources.index import HttpFetcher, fetch_verified

if TYPE_CHECKING:
    from buildctl.engine.engine import Engine


class HostPrep:
    def __init__(self, state: RunState, *, fetchers: Fetchers, ensure: Callable[[Engine, str], None]) -> None:
        self.s = state
        self.fetchers = fetchers
        self.ensure = ensure  # make a node's image present in an engine (steps.Steps.ensure)

    def prepare_sources(self, actions: Mapping[str, Action]) -> None:
        """Prepared, exported source trees for every compile and source-tree install to run."""
        wanted = [n.component for n in self.s.g.nodes if n.kind == "wheel" and actions.get(n.name) == "build"]
        assemble = self.s.g.node("assemble").spec if "assemble" in self.s.g.names() else None
        if actions.get("assemble") == "build" and isinstance(assemble, AssembleNodeSpec):
            wanted += [tr.component for tr in assemble.trees]
        for name in dict.fromkeys(wanted):
            assert name is not None
            self.s.progress.node(self._node_for(name), "sources", f"preparing {name} at {self.s.t.sources.tree(name)[:12]}")
            self.s.prepared[name] = self.s.t.sources.export(name)

    def _node_for(self, component: str) -> str:
        return f"wheel:{component}" if f"wheel:{component}" in self.s.g.names() else "assemble"

    def fetch_compile_tool(self, actions: Mapping[str, Action]) -> None:
        """The compiler cache's binary (builder/compilecache.py), when a compile to run uses the cache."""
        if self.s.config.compile_cache.off:
            return
        compiles = [n for n in self.s.g.nodes if isinstance(n.spec, WheelNodeSpec) and n.spec.compile_cache
                    and actions.get(n.name) == "build"]
        if not compiles:
            return
        try:
            self.s.compile_tool = compilecache.ensure_tool(self.s.config.cache, self.s.g.platform,
                                                           self.fetchers.downloads())
        except BuildctlError as exc:  # the cache only makes a compile faster: without it, the compile is the same
            self.s.progress.node(compiles[0].name, "cache", f"the compiler cache is not at hand ({exc.what}): "
                                 "compiling without it")
            return
        if self.s.compile_tool is None:
            self.s.progress.node(compiles[0].name, "cache", f"no compiler cache is pinned for {self.s.g.platform}: "
                                 "compiling without one")

    def fetch_downloads(self, actions: Mapping[str, Action]) -> None:
        files: dict[str, FileSpec] = {}
        for n in self.s.g.nodes:
            if actions.get(n.name) == "build" and isinstance(n.spec, CudnnNodeSpec | SystemNodeSpec | CompileEnvNodeSpec):
                files.update({f.name: f for f in n.spec.files})
        if not files:
            return
        fetcher = self.fetchers.downloads()
        folder = self.s.config.cache.downloads / "files"
        folder.mkdir(parents=True, exist_ok=True)
        for f in files.values():
            assert f.sha256, "a locked graph has every checksum"
            dest = folder / f.sha256
            if not (dest.is_file() and wheelhouse.sha256_file(dest) == f.sha256):
                self._download(fetcher, f, dest)
            self.s.downloads[f.name] = dest

    def _download(self, fetcher: HttpFetcher, file_spec: FileSpec, dest: Path) -> None:
        assert file_spec.sha256, "a locked graph has every checksum"
        fetch_verified(fetcher, file_spec.url, file_spec.sha256, dest, label=f"download {file_spec.name} from {file_spec.url}",
                       fix="the file changed upstream: check it, then update the manifest or re-lock")

    def fetch_pip(self, actions: Mapping[str, Action]) -> None:
        self._fetch_installer(actions)
        # by name and version: a build requirement may pin another version than the runtime does
        pins: dict[tuple[str, str | None], PipPin] = {}
        for n in self.s.g.nodes:
            if actions.get(n.name) == "build" and isinstance(n.spec, PythonNodeSpec | CompileEnvNodeSpec):
                pins.update({(p.name, p.version): p for p in n.spec.to_install})
        if not pins:
            return
        self.s.progress.node("python" if actions.get("python") == "build" else next(
            n for n, a in actions.items() if a == "build"), "wheels", f"{len(pins)} pip wheel(s) on the host")
        # wheels the manifest downloads (install: pip): fetched and verified like any download, served by file name
        downloaded = [p for p in pins.values() if p.download]
        if downloaded:
            fetcher = self.fetchers.downloads()
            folder = self.s.config.cache.downloads / "files"
            folder.mkdir(parents=True, exist_ok=True)
            for p in downloaded:
                assert p.hashes, "a locked graph has every checksum"
                sha = p.hashes[0].removeprefix("sha256:")
                dest = folder / sha
                if not (dest.is_file() and wheelhouse.sha256_file(dest) == sha):
                    self._download(fetcher, FileSpec(name=p.download, dest="", mode="0644", sha256=sha, url=p.url), dest)
                self.s.pip_files[p.filename] = dest
        sdists = [p for p in pins.values() if p.sdist]
        if sdists:
            self._build_sdists(sdists)
        self.s.pip = wheelhouse.download(
            sorted((p for p in pins.values() if not p.download and not p.sdist), key=lambda p: (p.name, p.version or "")),
            folder=self.s.config.cache.downloads / "pip",
            python=self.s.t.python, platform=self.s.g.platform, config=self.s.config,
            log_file=self.s.log_file("pip-download"))

    def _fetch_installer(self, actions: Mapping[str, Action]) -> None:
        """pypa/installer's wheel, which images/install.py imports in the RUNs that install wheels (render.INSTALLER),
        fetched and verified as the compiler cache's wheel is, and served at tools/ of the wheelhouse, outside the
        folders pip's --find-links read. A failure fails the build: the RUN would otherwise take pip's route under
        the same key."""
        if not any(a == "build" and self.s.g.node(n).kind in ("python", "compile-env", "assemble")
                   for n, a in actions.items()):
            return
        wheel = compilecache.fetch_wheel(self.s.config.cache, compilecache.ToolWheel.of(render.INSTALLER),
                                         self.fetchers.downloads(),
                                         what="pypa/installer's wheel (images/install.py unpacks wheels with it)",
                                         fix="check the download mirror (download_mirrors) that served it")
        self.s.pip_files[render.INSTALLER_DIR + render.INSTALLER_WHEEL] = wheel

    def _build_sdists(self, pins: Sequence[PipPin]) -> None:
        """Requirements only a source distribution fits: fetched on the host by the lock's sha256 and built into
        a wheel in a container of the base with no network (nothing runs on the host, nothing is fetched inside
        an image build). The wheel is kept under the sdist's hash and the base's digest."""
        from buildctl.engine.values import Mount

        index, fetcher = self.fetchers.index()
        folder = self.s.config.cache.downloads / "pip" / "sdists"
        base = self.s.t.base_digest or "unlocked"
        log = self.s.log_file("sdists")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.s.scratch.mkdir(parents=True, exist_ok=True)
        for p in pins:
            sdist = wheelhouse.fetch_sdist(p, folder=folder, index=index, fetcher=fetcher)
            keep = self.s.config.cache.downloads / "pip" / "built" / sdist.parent.name / base.replace(":", "-")
            made = sorted(keep.glob("*.whl")) if keep.is_dir() else []
            if len(made) != 1:
                self.ensure(self.s.e0, "base")
                self.s.progress.log("python", f"building {p.name}=={p.version} from its sdist in the base")
                out = Path(tempfile.mkdtemp(prefix="sdist-", dir=self.s.scratch))
                try:
                    script = wheelhouse.sdist_script(self.s.t.image_python, sdist.name, render.EPOCH)
                    result = self.s.e0.run(self.s.t.base_ref, ["/bin/sh", "/buildctl/sdist.sh"], entrypoint=[],
                                           mounts=[Mount(source=sdist.parent, target="/in", read_only=True),
                                                   Mount(source=out, target="/out", read_only=False)],
                                           files={"/buildctl/sdist.sh": script.encode()}, user="0",
                                           network_mode="none", timeout=1800.0)
                    with log.open("a") as f:
                        f.write(f"$ build {sdist.name} in {self.s.t.base_ref}\n{result.stdout}{result.stderr}\n")
                    wheels = sorted(out.glob("*.whl"))
                    if not result.ok or len(wheels) != 1:
                        tail = wheelhouse.build_output(result.stdout + result.stderr)
                        raise BuildFailed(
                            f"pip requirement {p.name}=={p.version} exists only as a source distribution "
                            f"({sdist.name}), and building it into a wheel in the base failed; log: {log}",
                            why=tail or f"exit status {result.exit_code}",
                            fix="the sdist is built with the base's own build tools (--no-build-isolation, no "
                                "network): add what it needs to the base, or pin a version of it that has a wheel")
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    tmp = Path(tempfile.mkdtemp(prefix=".built-", dir=keep.parent))
                    shutil.copy2(wheels[0], tmp / wheels[0].name)
                    shutil.rmtree(keep, ignore_errors=True)
                    os.replace(tmp, keep)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                made = sorted(keep.glob("*.whl"))
            wheel = made[0]
            self.s.pip_files[wheel.name] = wheel
            self.s.built[f"{p.name}=={p.version}"] = wheelhouse.sha256_file(wheel)
