"""Fixtures for tests against a real Docker engine and a real registry.

`make test` (scripts/testenv.sh) provides them: the engine (started only if none answered), the demo
base image, and a registry on 127.0.0.1 with temporary storage, named by BUILDCTL_TEST_REGISTRY. It also
sets BUILDCTL_REQUIRE_ENGINE=1, so that a missing piece fails these tests instead of skipping them.

The engine is shared with other people's work: tests remove exactly what they made (image_cleanup),
never prune, and never stop or reconfigure it. ``second_engine`` is a separate dockerd (bench/engine2.py,
the one helper of bench and tests) with its own bridge, data-root, exec-root, pidfile and socket, torn
down at the end of the session with nothing left behind; ``second_builder`` is the same dockerd's TCP
endpoint on 127.0.0.1 (a remote builder, as --builder names one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from bench import engine2
from buildctl import retrying
from buildctl.engine.engine import Engine
from buildctl.engine.values import RUN_LABEL
from buildctl.errors import EngineError
from tests.helpers import unavailable

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
    # transient registry answers are retried as in production (retrying.py), only with short waits
    eng.retry = retrying.Backoff(attempts=3, first_delay=0.2, factor=2.0, max_delay=1.0, budget=30.0)
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
def registry_base(engine: Engine, registry: str, demo_base: str) -> str:
    """The demo base in the test registry under the name the demo manifest gives it (pins/demo.yaml), pushed once
    per session. No test removes this tag: the engine tests run in two pytest-xdist workers at once, and
    removing a repository's last tag also drops its digest reference (``repo@sha256:...``), which builds in the
    other worker read as the base. testenv removes the tags of its registry when it stops it."""
    ref = f"{registry}/buildctl/demo-base:bookworm"
    engine.tag(demo_base, ref)
    engine.push(ref)
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


@pytest.fixture(scope="session")
def cache_server() -> str:
    """``redis://127.0.0.1:PORT`` of the compiler cache server started for this test run (`make test`: a
    redis-server that keeps nothing on disk), as config ``compile_cache`` names one."""
    url = os.environ.get("BUILDCTL_TEST_CACHE_SERVER", "")
    if not url:
        unavailable("BUILDCTL_TEST_CACHE_SERVER is not set (no compiler cache server)",
                    "run the tests through `make test`, which starts one")
    host, _, port = url.removeprefix("redis://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"PING\r\n")
            answer = s.recv(64)
    except (OSError, ValueError) as exc:
        answer = str(exc).encode()
    if not answer.startswith(b"+PONG"):
        unavailable(f"the compiler cache server {url} does not answer PING: {answer!r}",
                    "run the tests through `make test`, which starts it")
    return url


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


@pytest.fixture(scope="session")
def _second() -> Iterator[tuple[Engine, str]]:
    """A second dockerd beside the shared one (bench/engine2.py, the bench's own helper): its own bridge,
    data-root, exec-root, pidfile and socket, also listening on 127.0.0.1 TCP; stopped and its folder removed at
    the end of the session. (the Engine on its socket, its ``tcp://127.0.0.1:PORT`` endpoint)"""
    with contextlib.ExitStack() as stack:
        tcp: list[str] = []
        try:
            eng = stack.enter_context(engine2.second_engine(tcp=tcp))
        except engine2.SecondEngineError as exc:
            problem = str(exc)
        else:
            problem = ""
        if problem:  # outside the except block: the message alone, no chained traceback
            unavailable(problem)
        yield eng, tcp[0]


@pytest.fixture(scope="session")
def second_engine(_second: tuple[Engine, str]) -> Engine:
    """The second engine, through its unix socket."""
    return _second[0]


@pytest.fixture(scope="session")
def second_builder(_second: tuple[Engine, str]) -> str:
    """The same second engine as a builder reached over the network: ``tcp://127.0.0.1:PORT`` (a remote
    BuildKit builder is another engine's endpoint; buildctl's --builder)."""
    return _second[1]
