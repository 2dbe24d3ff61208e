"""--big-base: the bench's scenarios on a base of real size (issue 34 item 5).

The demo base (Debian bookworm minbase + python3, about 190 MB) flatters every tool that pulls, pushes or
copies a base. This base is the demo base plus torch with its CUDA wheels from PyPI (bench/bigbase-requirements.txt:
every wheel pinned by version and sha256, torch 2.5.1 for CPython 3.11 and its nvidia-*-cu12 dependencies), a few
GB and tens of thousands of files, as a training image's base has (NGC's PyTorch base is about 18 GiB).

It is made once and kept, named by a content tag (the requirements, the Dockerfile text and the demo base's
digest): ``buildctl-bench-bigbase:<tag>`` in the engine and ``<registry>/buildctl/bench-bigbase:<tag>`` in the
registry; a later run finds both and builds nothing. The wheels are downloaded on the host (pip, hashes required,
``BUILDCTL_CA_BUNDLE`` passed as ``--cert`` where a proxy needs its CA) into a folder of their own, and installed
into the image offline from a BuildKit bind mount of that folder: no CA, no network and no wheel file reach a
layer or the image's history. Remove it by hand (`docker rmi`, the registry's tag) when it is no longer wanted.

Every state's manifest names the big base instead of the demo base (``rebase``), so buildctl and every
Dockerfile baseline (which take ``FROM`` from the same locked target) build on it, and the second builders of
(c2) and (d) pull it from the registry. The result's ``base`` (``describe``) says which base the rows used.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import DOCKER, ROOT, BenchError, docker, registry_digest, say

REQUIREMENTS = ROOT / "bench" / "bigbase-requirements.txt"
PATH = "buildctl/bench-bigbase"  # its repository in the registry; the tag is the content tag
LOCAL = "buildctl-bench-bigbase"  # its name in the engine
LABEL = "io.buildctl.bench-base"
MOUNT = "/tmp/bench-bigbase-wheels"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+) --hash=sha256:([0-9a-f]{64})$")
# the wheels are for the demo base's Python (bookworm's 3.11) on x86_64, whatever the host runs
PLATFORM = ("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
            *(a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                          "manylinux1_x86_64") for a in ("--platform", p)))


def pins(text: str) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of each line of the requirements file; comments and blank lines skipped. Any
    other line is refused: the file is what gets installed, so nothing in it may go unchecked."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _PIN.match(line)
        if m is None:
            raise BenchError(f"{REQUIREMENTS.name} line {n}: not `name==version --hash=sha256:<64 hex>`: {line!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
    if not out:
        raise BenchError(f"{REQUIREMENTS.name} pins nothing")
    return out


def dockerfile(parent: str) -> str:
    """The big base's Dockerfile: the demo base (by digest) with the wheels installed offline from a bind mount
    of the build context (the wheel folder), hashes required; pip compiles bytecode as a user's install does."""
    return (f"FROM {parent}\n"
            f"LABEL {LABEL}=torch-cuda-wheels\n"
            f"RUN --mount=type=bind,target={MOUNT} PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= python3 -m pip install "
            f"--no-index --no-deps --no-cache-dir --require-hashes --find-links {MOUNT} -r {MOUNT}/requirements.txt\n")


def content_tag(requirements: str, parent: str) -> str:
    """The tag the big base is kept under: what it is made of (the pins, the Dockerfile, the parent by digest)."""
    h = hashlib.sha256()
    for part in (requirements, dockerfile(parent)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def rebase(text: str, old: str, new: str) -> str:
    """A state's manifest with its variant's base image ``old`` replaced by ``new``."""
    line = f"    image: {old}\n"
    if line not in text:
        raise BenchError(f"the demo manifest no longer names its base as {line.strip()!r}")
    return text.replace(line, f"    image: {new}\n")


def describe(ref: str, digest: str, *, kind: str) -> dict[str, Any]:
    """Which base the rows used: its name, digest, size in bytes (the engine's figure: every layer, uncompressed)
    and how many regular files it holds (``find / -xdev -type f`` in a container of it)."""
    got = docker(["image", "inspect", "--format", "{{.Size}} {{len .RootFS.Layers}}", ref])
    if got.returncode != 0:
        raise BenchError(f"docker image inspect {ref} failed: {got.stderr.strip()[-400:]}")
    size, layers = (int(x) for x in got.stdout.split())
    counted = docker(["run", "--rm", "--network", "none", "--entrypoint", "sh", ref, "-c",
                      "find / -xdev -type f 2>/dev/null | wc -l"], timeout=900)
    if counted.returncode != 0 or not counted.stdout.strip().isdigit():
        raise BenchError(f"counting the files of {ref} failed: {(counted.stdout + counted.stderr).strip()[-400:]}")
    return {"kind": kind, "name": ref.split("@", 1)[0], "digest": digest, "size_bytes": size, "layers": layers,
            "files": int(counted.stdout.strip())}


def describe_demo(registry: str, path: str, local: str) -> dict[str, Any]:
    """The demo base's description (the result's ``base`` without --big-base): the engine's ``local`` image where
    it has it, else the registry's, pulled (every build of the run needs it in the engine anyway)."""
    ref = local
    if docker(["image", "inspect", "--format", "{{.Id}}", local]).returncode != 0:
        ref = f"{registry}/{path}"
        done = docker(["pull", ref], timeout=1800)
        if done.returncode != 0:
            raise BenchError(f"docker pull {ref} failed: {(done.stdout + done.stderr).strip()[-800:]}")
    return {**describe(ref, registry_digest(registry, path), kind="demo"), "name": f"{registry}/{path}"}


def label(base: dict[str, Any] | None) -> str:
    """The base named in a report: ``torch-cuda-wheels base 127.0.0.1:5000/... (sha256:abcd...), 5.80 GB, 26,010
    files``; a result file from before the base was recorded ran on the demo base."""
    if not base:
        return "the demo base (buildctl/demo-base:bookworm, Debian bookworm minbase + python3; not recorded in this result file)"
    what = {"demo": "the demo base", "torch": "the torch base (demo base + torch 2.5.1 and its CUDA wheels from PyPI)"}
    return (f"{what.get(base['kind'], base['kind'])}: {base['name']} ({base['digest'][:19]}...), "
            f"{base['size_bytes'] / 1e9:.2f} GB, {base['files']:,} files, {base['layers']} layer(s)")


def download(folder: Path, requirements: str) -> None:
    """Every pinned wheel into ``folder`` (pip download on the host, hashes required, no dependencies beyond the
    file's; BUILDCTL_CA_BUNDLE as --cert). Wheels already there are checked against their hash, not fetched."""
    folder.mkdir(parents=True, exist_ok=True)
    req = folder / "requirements.txt"
    req.write_text(requirements)
    ca = os.environ.get("BUILDCTL_CA_BUNDLE", "")
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
            *PLATFORM, "--dest", str(folder), "-r", str(req), *(["--cert", ca] if ca else [])]
    say(f"big base: downloading {len(pins(requirements))} wheels into {folder}")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"pip download of the big base's wheels failed:\n{(done.stdout + done.stderr)[-1500:]}")
    stray = [p.name for p in folder.iterdir() if p.name != "requirements.txt" and not p.name.endswith(".whl")]
    if stray:  # the folder is the build context: nothing but the wheels and the requirements goes in
        raise BenchError(f"{folder} holds more than wheels: {', '.join(sorted(stray))}")


def ensure(registry: str, demo_path: str, wheels: Path | None) -> dict[str, Any]:
    """The big base in the engine and in ``registry`` (made and pushed where missing); its description, with
    ``ref``, the reference the manifests name (by tag: the lock pins the digest)."""
    requirements = REQUIREMENTS.read_text()
    pins(requirements)  # validated where loaded
    parent_digest = registry_digest(registry, demo_path)
    if not parent_digest:
        raise BenchError(f"the registry {registry} has no {demo_path}")
    parent = f"{registry}/{demo_path.rsplit(':', 1)[0]}@{parent_digest}"
    tag = content_tag(requirements, parent)
    local, remote = f"{LOCAL}:{tag}", f"{registry}/{PATH}:{tag}"
    if docker(["image", "inspect", "--format", "{{.Id}}", local]).returncode != 0 and registry_digest(
            registry, f"{PATH}:{tag}"):
        say(f"big base: pulling {remote}")
        for args in (["pull", remote], ["tag", remote, local]):
            done = docker(args, timeout=3600)
            if done.returncode != 0:
                raise BenchError(f"docker {' '.join(args)} failed: {(done.stdout + done.stderr).strip()[-800:]}")
    if docker(["image", "inspect", "--format", "{{.Id}}", local]).returncode != 0:
        say(f"big base: {local} is not in the engine: making it (once)")
        folder = wheels or Path(tempfile.mkdtemp(prefix="buildctl-bench-bigbase-"))
        try:
            download(folder, requirements)
            (folder / "Dockerfile.bigbase").write_text(dockerfile(parent))
            done = subprocess.run([DOCKER, "build", "--progress=plain", "-f", str(folder / "Dockerfile.bigbase"),
                                   "-t", local, str(folder)], env={**os.environ, "DOCKER_BUILDKIT": "1"},
                                  capture_output=True, text=True, check=False, timeout=3600)
            if done.returncode != 0:
                raise BenchError(f"building the big base failed:\n{(done.stdout + done.stderr)[-2000:]}")
        finally:
            (folder / "Dockerfile.bigbase").unlink(missing_ok=True)
            if wheels is None:
                shutil.rmtree(folder, ignore_errors=True)
    digest = registry_digest(registry, f"{PATH}:{tag}")
    if not digest:
        say(f"big base: pushing {remote}")
        for args in (["tag", local, remote], ["push", remote]):
            done = docker(args, timeout=3600)
            if done.returncode != 0:
                raise BenchError(f"docker {' '.join(args)} failed: {(done.stdout + done.stderr).strip()[-800:]}")
        digest = registry_digest(registry, f"{PATH}:{tag}")
    elif docker(["image", "inspect", "--format", "{{.Id}}", remote]).returncode != 0:
        docker(["tag", local, remote])
    desc = describe(local, digest, kind="torch")
    say(f"big base: {label({**desc, 'name': remote})}")
    return {**desc, "name": remote, "ref": remote, "tag": tag, "parent": parent,
            "requirements": [f"{n}=={v}" for n, v, _ in pins(requirements)]}
