"""Python packages for builds: downloaded on the host, hash-checked, served on 127.0.0.1.

Builds never reach a package index. The host's pip downloads the exact, locked wheels for the
variant's platform and Python (with the user's CA bundle and index settings from the configuration)
into ``<cache>/downloads/pip/``; a build gets a folder of links to the files it needs (and the
compiled component wheels) served over HTTP on 127.0.0.1, named by the BUILDCTL_WHEELHOUSE build
arg, and runs with network_mode=host to reach it. Neither the CA nor an index credential can reach a
layer: the only thing inside the build is a loopback URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from buildctl.config import Config
from buildctl.errors import BuildFailed, UnreachableError
from buildctl.graph import PipPin
from buildctl.index import redact

_ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
_NETWORK = ("temporary failure in name resolution", "could not resolve", "connection refused",
            "max retries exceeded", "network is unreachable", "timed out", "failed to establish")


def platform_tags(platform: str) -> list[str]:
    """Wheel platform tags a Linux base of this architecture can install (glibc 2.17 to 2.39)."""
    arch = _ARCH[platform]
    tags = [f"manylinux_2_{n}_{arch}" for n in range(39, 16, -1)]
    return [*tags, f"manylinux2014_{arch}"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_local(pin: PipPin, folder: Path) -> Path | None:
    """A wheel of ``pin`` already in ``folder`` whose sha256 is one the lock allows."""
    if pin.version is None or not folder.is_dir():
        return None
    allowed = {h.removeprefix("sha256:") for h in pin.hashes}
    for f in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(f.name)
        except InvalidWheelFilename:
            continue
        if name == canonicalize_name(pin.name) and version == Version(pin.version) and (
                not allowed or sha256_file(f) in allowed):
            return f
    return None


def requirement_lines(pins: Iterable[PipPin]) -> list[str]:
    return [" ".join([f"{p.name}=={p.version}", *(f"--hash={h}" for h in p.hashes)]) for p in pins]


def download(pins: Sequence[PipPin], *, folder: Path, python: str, platform: str, config: Config,
             log_file: Path, timeout: float = 1800.0) -> dict[str, Path]:
    """Every pin's wheel in ``folder`` (downloading what is not there yet); "name==version" -> file."""
    todo = [p for p in pins if not p.in_base]
    found: dict[str, Path] = {}
    missing: list[PipPin] = []
    for p in todo:
        f = find_local(p, folder)
        if f is None:
            missing.append(p)
        else:
            found[f"{p.name}=={p.version}"] = f
    # one pip run per set of distinct names: pip refuses two versions of one package in one run
    batches: list[list[PipPin]] = []
    for p in missing:
        batch = next((b for b in batches if all(q.name != p.name for q in b)), None)
        if batch is None:
            batches.append([p])
        else:
            batch.append(p)
    for batch in batches:
        _pip_download(batch, folder=folder, python=python, platform=platform, config=config, log_file=log_file,
                      timeout=timeout)
        for p in batch:
            f = find_local(p, folder)
            if f is None:
                raise BuildFailed(f"pip downloaded no wheel of {p.name}=={p.version} for {platform}",
                                  why=f"see {log_file}",
                                  fix="the package may have no wheel for this platform and Python (sdists are not "
                                      "built on the host); pin a version that has one, or build it as a component")
            found[f"{p.name}=={p.version}"] = f
    return found


def _pip_download(pins: Sequence[PipPin], *, folder: Path, python: str, platform: str, config: Config,
                  log_file: Path, timeout: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    major, minor = python.split(".")[:2]
    hashed = all(p.hashes for p in pins)
    with tempfile.TemporaryDirectory(prefix="buildctl-pip-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(requirement_lines(pins)) + "\n")
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(folder),
                "--python-version", f"{major}.{minor}", "--implementation", "cp",
                "--abi", f"cp{major}{minor}", "--abi", "abi3", "--abi", "none",
                *(a for tag in platform_tags(platform) for a in ("--platform", tag)),
                "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "-r", str(req)]
        if hashed:
            argv.append("--require-hashes")
        if config.pip_index_url:
            argv += ["--index-url", config.pip_index_url]
        for extra in config.pip_extra_index_urls:
            argv += ["--extra-index-url", extra]
        if config.ca_bundle:
            argv += ["--cert", str(config.ca_bundle)]
        with log_file.open("a") as log:
            log.write("$ " + " ".join(shlex.quote(redact(a)) for a in argv) + "\n"
                      + "".join(f"  {line}\n" for line in requirement_lines(pins)))
            log.flush()
            try:
                r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise UnreachableError(f"pip download did not finish within {timeout:g} s",
                                       why=f"see {log_file}", fix="check the package index and the network") from None
    if r.returncode != 0:
        tail = log_file.read_text(errors="replace").strip().splitlines()[-6:]
        text = "\n".join(tail)
        cls = UnreachableError if any(m in text.lower() for m in _NETWORK) else BuildFailed
        raise cls(f"downloading {len(pins)} pip wheel(s) for {platform} / Python {python} failed; log: {log_file}",
                  why=text,
                  fix="check pip_index_url / pip_extra_index_urls and ca_bundle in the buildctl configuration "
                      "(a TLS-intercepting proxy needs its CA there), or re-lock if the versions changed")


# ----------------------------------------------------------------------------------------- serving


def link_tree(root: Path, files: Mapping[str, Path]) -> None:
    """Lay out ``root`` (relative path -> file): hard links where possible, copies otherwise."""
    for rel, src in files.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            continue
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


# The port the wheelhouse asks for first: a URL that stays the same from run to run keeps the build arg,
# and so the engine's layer cache and the images' history, the same; another free port when it is taken.
PREFERRED_PORT = 47803


@contextlib.contextmanager
def serve(root: Path, port: int = PREFERRED_PORT) -> Iterator[str]:
    """Serve ``root`` read-only on 127.0.0.1 for as long as the context lasts; yield its URL."""
    handler = partial(_QuietHandler, directory=str(root))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="buildctl-wheelhouse", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
