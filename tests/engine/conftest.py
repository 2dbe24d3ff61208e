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


@pytest.fixture(scope="session", autouse=True)
def _wheelhouse_port_per_worker() -> Iterator[None]:
    """Under pytest-xdist, each worker's in-process builds serve the wheelhouse on a port of their own.

    The wheelhouse URL is a build arg of every step that reads it, so the engine's step cache of those steps is
    reused only by a build that serves it on the same port; buildctl asks for one port per stack and variant
    (wheelhouse.preferred_port). The two workers build demo/default at the same time, each with its own cache, so
    whichever came second found that port taken and served on a random one: its steps could not reuse any
    (StepCache, below, keeps them). With a preferred port per worker, a worker's builds (one test at a time) ask
    for the same port every time. Only the name asked for changes: buildctl's choice of the port and its
    fallback to a free one are what runs (without xdist, the name is buildctl's own)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        yield
        return
    from buildctl.builder import wheelhouse
    original = wheelhouse.preferred_port
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wheelhouse, "preferred_port", lambda name: original(f"{name}@{worker}"))
        yield


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


class StepCache:
    """Tags of this session that keep the engine's step cache of the compile environments until it ends.

    Removing a test's last tag of a node image also removes the untagged images below it, the build's steps,
    which are the engine's step cache: every test that built the demo ran compile-env's steps afresh (apt-get
    install of gcc, git, libc6-dev and python3-dev, then setuptools and wheel), though they are the same steps
    with the same inputs in every build of the session (compile-env is built on the base, and its labels are its
    last step). A compile-env image whose steps no tag of this session keeps yet is tagged here before the test's
    own tag goes, so that later builds of the session reuse those steps; buildctl still builds, tags, records and
    pushes the node (only the engine's work inside its steps is reused, as it is for a user's builds). Tests that
    need every step run build with nocache (repro, the far builder's pair). The other nodes gain nothing from this:
    each is built on its parent node's image, whose labels make it another image in every build. The wheelhouse
    port per worker (above) is what makes the steps the same: its URL is a build arg of those steps."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.prefix = f"buildctl-test-stepcache/{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}"
        self.tags: dict[str, str] = {}  # the image below the labels (the last step that ran): the tag keeping it

    def keep(self, eng: Engine, ref: str) -> None:
        if eng is not self.engine:
            return
        try:
            node = eng.inspect_image(ref).labels.get("io.buildctl.node", "")
        except EngineError:
            return
        if not node.startswith("compile-env:"):
            return
        below = docker_cli("image", "inspect", "--format", "{{.Parent}}", ref, engine=eng, check=False).strip()
        if below and below not in self.tags:
            tag = f"{self.prefix}:{len(self.tags)}"
            eng.tag(ref, tag)
            self.tags[below] = tag

    def close(self) -> None:
        for tag in self.tags.values():
            self.engine.remove_image(tag)


@pytest.fixture(scope="session")
def step_cache(engine: Engine) -> Iterator[StepCache]:
    held = StepCache(engine)
    yield held
    held.close()


class ImageCleanup:
    """Refs registered here are removed (newest first) when the test ends. Register names, not ids:
    removing an id would remove every tag of that image, including other people's."""

    def __init__(self, engine: Engine, step_cache: StepCache | None = None) -> None:
        self.engine = engine
        self.step_cache = step_cache
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
                if self.step_cache is not None:
                    self.step_cache.keep(eng, ref)
                eng.remove_image(ref)
            except EngineError as exc:
                errors.append(f"{ref}: {exc}")
        assert not errors, "cleanup failed:\n" + "\n".join(errors)


@pytest.fixture
def image_cleanup(engine: Engine, step_cache: StepCache) -> Iterator[ImageCleanup]:
    cleanup = ImageCleanup(engine, step_cache)
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
