"""Fixtures for tests against a real Docker engine and a real registry.

`make test` (scripts/testenv.sh) provides them: the engine (started only if none answered), the demo
base image, and a registry on 127.0.0.1 with temporary storage, named by BUILDCTL_TEST_REGISTRY. It also
sets BUILDCTL_REQUIRE_ENGINE=1, so that a missing piece fails these tests instead of skipping them.

The engine is shared with other people's work: tests remove exactly what they made (image_cleanup),
never prune, and never stop or reconfigure it. ``second_engine`` is a separate dockerd started here,
with its own bridge, data-root, exec-root, pidfile and socket, and torn down at the end of the session.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildctl.engine.engine import RUN_LABEL, Engine
from buildctl.errors import EngineError
from tests.helpers import unavailable, unique

DEFAULT_BASE = "buildctl-demo-base:bookworm"


def docker_cli(*args: str, engine: Engine | None = None, check: bool = True) -> str:
    """The docker CLI, for what the Engine deliberately cannot do (e.g. a legacy build without rm)."""
    cli = shutil.which("docker") or "/usr/bin/docker"
    env = dict(os.environ)
    if engine is not None:
        env["DOCKER_HOST"] = engine.address
    done = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def containers(label: str, engine: Engine | None = None) -> list[str]:
    """Ids of all containers (running or not) carrying ``label`` (``key`` or ``key=value``)."""
    return docker_cli("ps", "-aq", "--no-trunc", "--filter", f"label={label}", engine=engine).split()


# -- the engine


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    # Named per session: containers that run() creates carry the name in a label, so a leak is ours.
    eng = Engine(name=f"test-{os.getpid()}")
    problem: EngineError | None = None
    try:
        eng.ping()
    except EngineError as exc:
        problem = exc
    if problem is not None:  # outside the except block: the message alone, no chained traceback
        unavailable(f"{problem.what}\n  why: {problem.why}", problem.fix)
    yield eng
    leaked = containers(f"{RUN_LABEL}={eng.name}", eng)
    eng.close()
    assert not leaked, f"engine tests left containers behind: {leaked}"


@pytest.fixture(scope="session")
def demo_base(engine: Engine) -> str:
    ref = os.environ.get("BUILDCTL_TEST_BASE") or DEFAULT_BASE
    if not engine.image_exists(ref):
        unavailable(
            f"the demo base image {ref} is not in the engine",
            "scripts/make-demo-base.sh builds it (make test does)",
        )
    return ref


@pytest.fixture(scope="session")
def registry() -> str:
    """``127.0.0.1:PORT`` of the registry started for this test run (storage removed afterwards)."""
    addr = os.environ.get("BUILDCTL_TEST_REGISTRY", "")
    if not addr:
        unavailable("BUILDCTL_TEST_REGISTRY is not set (no test registry)")
    problem = ""
    try:
        with urllib.request.urlopen(f"http://{addr}/v2/", timeout=5) as r:
            if r.status != 200:
                problem = f"answered /v2/ with {r.status}"
    except OSError as exc:
        problem = f"does not answer: {exc}"
    if problem:
        unavailable(f"the test registry {addr} {problem}", "run the tests through `make test`, which starts it")
    return addr


class ImageCleanup:
    """Refs registered here are removed (newest first) when the test ends. Register names, not ids:
    removing an id would remove every tag of that image, including other people's."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.refs: list[tuple[Engine, str]] = []

    def __call__(self, ref: str, engine: Engine | None = None) -> str:
        self.refs.append((engine or self.engine, ref))
        return ref

    def label(self, label: str, engine: Engine | None = None) -> None:
        """Also remove every image carrying ``label`` (intermediate images of a failed build)."""
        eng = engine or self.engine
        for image_id in docker_cli("images", "-aq", "--no-trunc", "--filter", f"label={label}", engine=eng).split():
            self.refs.append((eng, image_id))

    def run(self) -> None:
        errors = []
        for eng, ref in reversed(self.refs):
            try:
                eng.remove_image(ref)
            except EngineError as exc:
                errors.append(f"{ref}: {exc}")
        assert not errors, "cleanup failed:\n" + "\n".join(errors)


@pytest.fixture
def image_cleanup(engine: Engine) -> Iterator[ImageCleanup]:
    cleanup = ImageCleanup(engine)
    yield cleanup
    cleanup.run()


# -- a second engine on this machine


_CANDIDATE_NETS = [ipaddress.ip_network(f"10.{n}.0.0/16") for n in range(201, 255)] + [
    ipaddress.ip_network(f"172.{n}.0.0/16") for n in range(24, 32)
]


def _used_networks() -> list[ipaddress.IPv4Network]:
    used = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
        for word in out.split():
            if word[0].isdigit() and "." in word:  # an address or a prefix; a bare address is a /32
                with contextlib.suppress(ValueError):
                    used.append(ipaddress.ip_network(word, strict=False))
    return [n for n in used if isinstance(n, ipaddress.IPv4Network)]


def _answers(eng: Engine) -> bool:
    try:
        eng.ping()
    except EngineError:
        return False
    return True


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture(scope="session")
def second_engine() -> Iterator[Engine]:
    """A second dockerd beside the shared one (ENGINE.md): its own bridge on an unused /16, data-root,
    exec-root, pidfile and socket; --iptables=false --ip-masq=false so that it touches none of the first
    engine's rules. Never --bridge=none: that deletes the host's docker0 and breaks the first engine."""
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)
    if os.geteuid() != 0:
        unavailable("the second engine needs root (a bridge and a dockerd)")
    if dockerd is None or shutil.which("ip") is None:
        unavailable("the second engine needs dockerd and ip", "apt-get install docker.io iproute2")
    assert dockerd is not None
    tag = unique("")[:6]
    bridge = f"docker-bc{tag[:6]}"  # at most 15 characters; unique to this session
    state = Path(tempfile.mkdtemp(prefix="bc-eng2-", dir="/tmp"))  # short: the socket path has a limit
    proc: subprocess.Popen[bytes] | None = None
    made_bridge = False
    log = state / "dockerd.log"
    try:
        # Two test sessions may pick a network at the same moment: one at a time.
        with open("/tmp/buildctl-second-engine.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_networks()
            net = next((n for n in _CANDIDATE_NETS if not any(n.overlaps(u) for u in used)), None)
            if net is None:
                unavailable("no unused /16 for the second engine's bridge")
            assert net is not None
            _ip("link", "add", bridge, "type", "bridge")
            made_bridge = True
            _ip("addr", "add", f"{net.network_address + 1}/{net.prefixlen}", "dev", bridge)
            _ip("link", "set", bridge, "up")
        (state / "daemon.json").write_text(json.dumps({}))  # not /etc/docker/daemon.json: nothing shared
        sock = state / "docker.sock"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    dockerd,
                    "--config-file", str(state / "daemon.json"),
                    "--bridge", bridge,
                    "--iptables=false",
                    "--ip-masq=false",
                    "--ip-forward=false",
                    "--data-root", str(state / "root"),
                    "--exec-root", str(state / "exec"),
                    "--pidfile", str(state / "docker.pid"),
                    "--host", f"unix://{sock}",
                    # Only matters where a system containerd runs and both engines would share it.
                    "--containerd-namespace", f"buildctl-{tag}",
                    "--containerd-plugins-namespace", f"buildctl-{tag}-plugins",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        eng = Engine(f"unix://{sock}", name="second")
        deadline = time.monotonic() + 60
        while not _answers(eng):
            if proc.poll() is not None or time.monotonic() > deadline:
                eng.close()
                tail = log.read_text(errors="replace").splitlines()[-15:]
                unavailable("the second dockerd did not come up:\n    " + "\n    ".join(tail))
            time.sleep(0.3)
        yield eng
        eng.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if made_bridge:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)
        mounts = Path("/proc/self/mountinfo").read_text()
        if f" {state}/" not in mounts:  # never rm -rf through a mount the dockerd left behind
            shutil.rmtree(state, ignore_errors=True)
