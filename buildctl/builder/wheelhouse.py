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
import re
import shlex
import shutil
import socket
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
from buildctl.graph.specs import PipPin
from buildctl.sources.index import HttpFetcher, SimpleIndex, file_release, redact

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


_NO_VERSION = re.compile(r"Could not find a version that satisfies the requirement (\S+)(?: \(from versions: ([^)]*)\))?")
_NO_DIST = re.compile(r"No matching distribution found for (\S+)")


def unavailable(pip_output: str) -> tuple[str, str] | None:
    """(requirement, versions the index offers) when pip said a requirement cannot be had at all."""
    m = _NO_VERSION.search(pip_output)
    if m:
        return m.group(1), (m.group(2) or "").strip()
    m = _NO_DIST.search(pip_output)
    return (m.group(1), "") if m else None


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
                                  fix="the package may have no wheel for this platform and Python: re-lock, so that "
                                      "the lock records the sdist (built in a container of the base), or pin a "
                                      "version that has a wheel")
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
        missing = unavailable(text)
        if missing is not None and not any(m in text.lower() for m in _NETWORK):
            wanted, versions = missing
            raise BuildFailed(
                f"pip requirement {wanted} cannot be had for {platform} / Python {python}",
                why=f"the index has no wheel of it that this platform and Python can install (versions it offers: "
                    f"{versions or 'none'}); builds take wheels, or the sdist the lock recorded when only one exists",
                fix="re-lock (`buildctl lock`): the lock marks a requirement that exists only as an sdist, and the build "
                    "host then builds its wheel in a container of the base; or pin a version that has a wheel")
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
# Each stack and variant asks for its own (preferred_port): two builds of one of them with one cache never
# run at once (the pipeline's build lock), and builds of different ones do not take each other's port. Two
# builds of one stack with two caches at once still meet: the second serves on a free port and says so.
PREFERRED_PORT = 47803
_PORTS = 2000


def preferred_port(name: str) -> int:
    """A port in 47803..49802 that depends only on ``name`` (``<stack>/<variant>``)."""
    return PREFERRED_PORT + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % _PORTS


class _Server6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


@contextlib.contextmanager
def serve(root: Path, port: int = PREFERRED_PORT, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``root`` read-only on ``host`` (an IP address: 127.0.0.1, or config ``wheelhouse_address`` for
    builders on other machines) for as long as the context lasts; yield its URL."""
    handler = partial(_QuietHandler, directory=str(root))
    v6 = ":" in host  # an IPv6 address (config.py checked that it is an IP address)
    cls = _Server6 if v6 else http.server.ThreadingHTTPServer
    try:
        server = cls((host, port), handler)
    except OSError:
        try:
            server = cls((host, 0), handler)
        except OSError as exc:  # the address is gone since the configuration was read (config.py checked it)
            raise BuildFailed(f"cannot serve the build's wheelhouse on {host}: {exc.strerror or exc}",
                              why="the address must be one this host has when the build runs",
                              fix="set config wheelhouse_address (BUILDCTL_WHEELHOUSE_ADDRESS) to an address of this "
                                  "host that the builders reach, or leave it unset for 127.0.0.1") from None
    # serve_forever checks for shutdown every poll_interval: its default 0.5 s was half a second of every
    # build's end (shutdown waits for the next check); 0.02 s costs nothing measurable on an idle loop
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="buildctl-wheelhouse",
                              daemon=True)
    thread.start()
    try:
        yield f"http://{f'[{host}]' if v6 else host}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# ----------------------------------------------------------------------------------------- sdists


def fetch_sdist(pin: PipPin, *, folder: Path, index: SimpleIndex, fetcher: HttpFetcher) -> Path:
    """The locked source distribution of ``pin`` in ``folder/<sha256>/`` (downloaded on the host, verified).

    Nothing of it runs on the host: the wheel is built later in a container of the base.
    """
    allowed = {h.removeprefix("sha256:") for h in pin.hashes}
    for sha in sorted(allowed):
        found = sorted((folder / sha).glob("*")) if (folder / sha).is_dir() else []
        if len(found) == 1 and sha256_file(found[0]) == sha:
            return found[0]
    want = Version(pin.version or "0")
    candidates = []
    for f in index.files(pin.name):
        rel = file_release(f.filename)
        if rel is not None and rel[0] == canonicalize_name(pin.name) and rel[1] == want and rel[2] is None:
            candidates.append(f)
    if not candidates:
        raise BuildFailed(f"pip requirement {pin.name}=={pin.version} cannot be had: the index lists no source "
                          "distribution of it any more, and the lock says only one fits",
                          why=f"indexes asked: {', '.join(redact(u) for u in index.urls)}",
                          fix=f"re-lock (`buildctl lock`) to see what the index offers for {pin.name} now")
    for f in candidates:
        if f.sha256 and f.sha256 not in allowed:
            continue
        dest_dir = folder / (f.sha256 or "unverified")
        dest_dir.mkdir(parents=True, exist_ok=True)
        part = dest_dir / (f.filename + ".part")
        h = hashlib.sha256()
        with fetcher.open(f.url) as resp, part.open("wb") as out:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() not in allowed:
            part.unlink(missing_ok=True)
            continue
        final_dir = folder / h.hexdigest()
        final_dir.mkdir(parents=True, exist_ok=True)
        final = final_dir / f.filename
        part.replace(final)
        return final
    raise BuildFailed(f"pip requirement {pin.name}=={pin.version} cannot be had: no source distribution on the "
                      "index has the sha256 the lock recorded",
                      why="the file was replaced upstream, or the index serves another one",
                      fix="check the index; re-lock only if the new file is trusted")


SDIST_SCRIPT = """set -eu
cd /tmp
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_NO_INDEX=1 SOURCE_DATE_EPOCH={epoch} PYTHONDONTWRITEBYTECODE=1 \\
  {python} -m pip wheel --no-deps --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check \\
  -w /out {sdist}
"""


def build_output(text: str, limit: int = 10) -> str:
    """What the sdist's own build said: the subprocess output pip frames with "[N lines of output]" ...
    "[end of output]", or else the last lines."""
    lines = text.strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if re.search(r"\[\d+ lines? of output\]", ln)), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if "[end of output]" in lines[i]), len(lines))
        inner = [ln.strip() for ln in lines[start + 1:end] if ln.strip()]
        if inner:
            return "\n".join(inner[-limit:])
    return "\n".join(lines[-limit:])


def sdist_script(python: str, sdist_name: str, epoch: int) -> str:
    """The build of one sdist into a wheel, run in a container of the base with no network: the base's own
    build backend (setuptools) builds it; a backend the base lacks is named by pip's error."""
    return SDIST_SCRIPT.format(python=shlex.quote(python), sdist=shlex.quote("/in/" + sdist_name), epoch=epoch)
