"""A builder on another host, tested as another host: a dockerd in a network namespace of its own (farhost.py).

The far engine can reach this host only through its end of a veth pair: the registry (TLS, one name for both
engines: <this host's end>:<port>), the wheelhouse (config wheelhouse_address) and nothing else. The build is
spread over this host's engine and the far one (`--builder local --builder tcp://<far>:2375`, BuildKit); the far one
compiles, with the source copied into its container and the wheel copied out (it cannot mount this host's paths).

The scheduling that puts the compile there: a build whose ready nodes are the system node and the compile hands
the first to the first builder and the second to the idle other one (schedule.Scheduler.engine). The compile-env
image (apt from Debian's mirror, which the far host cannot reach) comes from a first build on this host alone, as a
fleet's builders share what one of them built, through the registry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import engine2
from buildctl import hostaddr
from buildctl.builder import pipeline, steps, wheelhouse
from buildctl.engine.engine import Engine
from buildctl.graph import render
from buildctl.graph.records import RecordStore, state_root
from buildctl.lock import lockfile
from buildctl.services import build, wiring
from buildctl.sources.sources import Sources
from tests.engine import farhost
from tests.engine.test_build import (
    ALL,
    HOST_CA,
    Demo,
    Recorder,
    base_env,
    demo_lock,
    demo_lock_light,
    write_project,
)
from tests.helpers import unavailable, unique

__all__ = ["demo_lock", "demo_lock_light"]  # fixtures of test_build.py


class Far:
    """The far host: its network, its engine (through its unix socket, for the test's own questions) and builder
    endpoint, and the registry both engines use."""

    def __init__(self, net: farhost.FarNet, engine: Engine, endpoint: str, registry: farhost.TlsRegistry,
                 cache_server: str) -> None:
        self.net, self.engine, self.endpoint, self.registry = net, engine, endpoint, registry
        self.cache_server = cache_server  # redis://<this host's end>:<port>


@pytest.fixture
def far() -> Iterator[Far]:
    """Everything made here is gone afterwards, whatever the test did: checked at the end."""
    problem = ""
    with contextlib.ExitStack() as stack:
        try:
            net = stack.enter_context(farhost.far_net())
            registry = stack.enter_context(farhost.tls_registry(net.host_ip))
            server = stack.enter_context(farhost.redis_server(net.host_ip))
            engine, endpoint = stack.enter_context(farhost.far_engine(net))
        except farhost.NoNamespaces as exc:
            pytest.skip(f"no network namespace can be made here: {exc}")
        except engine2.SecondEngineError as exc:
            problem = str(exc)
        if not problem:
            yield Far(net, engine, endpoint, registry, server)
    if problem:  # outside the except block and the stack (all undone): the message alone
        unavailable(problem)
    assert net.ns not in farhost.namespaces() and net.veth not in farhost.links()
    assert not (farhost.CERTS_D / registry.address).exists()


def test_a_build_spread_over_this_host_and_a_builder_on_another(
        far: Far, engine: Engine, demo_base: str, registry: str, demo_lock_light: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, image_cleanup: Any) -> None:
    reg = far.registry.address
    # the demo base in the far-reachable registry, under the demo's name (one push of this host's engine: TLS from
    # the test's CA through /etc/docker/certs.d)
    base = image_cleanup(f"{reg}/buildctl/demo-base:bookworm")
    engine.tag(demo_base, base)
    engine.push(base)
    repository = f"buildctl-test/{unique('far')}"
    root = write_project(tmp_path / "project", reg, repository, apt=False)
    # buildctl's own CA bundle: the host's (the package index goes through a TLS proxy here) and the registry's CA
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_bytes((HOST_CA.read_bytes() if HOST_CA.is_file() else b"") + far.registry.ca.read_bytes())
    base_env(monkeypatch, tmp_path / "cache", ca=bundle)
    monkeypatch.setenv("BUILDCTL_COMPILE_CACHE", far.cache_server)  # the fleet's compiler cache server
    # the session's lock, its base named in this registry: the same image, pushed by the same engine, has the same
    # digest there (what `buildctl lock` of this project writes, without its half minute)
    lock = root / "pins" / "demo.lock.json"
    lock.write_text(demo_lock_light)

    def far_base(data: dict[str, Any]) -> None:
        for v in data["variants"].values():
            assert v["base"]["ref"] == f"{registry}/buildctl/demo-base:bookworm"
            assert engine.inspect_image(base).repo_digests and v["base"]["digest"] in "".join(
                engine.inspect_image(base).repo_digests)
            v["base"]["ref"] = base
    lockfile.edit(lock, far_base)
    demo = Demo(root=root, repository=repository, monkeypatch=monkeypatch, cleanup=image_cleanup)

    # 1. this host alone builds every node and pushes it (the compile-env's apt needs Debian's mirror); its compile
    # fills the cache server
    first = demo.build([Engine(name=engine.name, backend="buildkit")])
    assert sorted(first.built) == sorted(ALL)
    records = RecordStore(state_root(demo.config().cache)).load_all(demo.target().graph)
    assert (records["wheel:fastmath"].cache_hits, records["wheel:fastmath"].cache_misses) == (0, 1)

    # 2. the compile's environment (not its compiler's input: a new wheel key, the same object) and a removed path
    # change: the system node and the compile are ready at once
    demo.edit_manifest('CFLAGS: "-O2"', 'CFLAGS: "-O2"\n        FASTMATH_BUILT_BY: far-host-test')
    demo.edit_manifest("pip:\n  constraint:", "remove:\n  paths: [/opt/buildctl-far-test]\n\npip:\n  constraint:")
    monkeypatch.setenv("BUILDCTL_WHEELHOUSE_ADDRESS", far.net.host_ip)  # what the far host reaches
    config = demo.config()
    assert config.wheelhouse_address == far.net.host_ip
    chosen = wiring.choose_builders(config, builders=["local", far.endpoint])
    t = demo.target()
    demo.register(t, [engine])
    progress = Recorder()
    engines = wiring.build_engines(config, chosen)
    try:
        report = build.build_target(t, engines=engines, config=config, progress=progress, project=root,
                                    sources=Sources.from_config(config, base_dir=root / "pins"),
                                    # every step runs (no step cache of an earlier run with this wheelhouse URL):
                                    # the RUNs that read the wheelhouse on the pair's address run here and now
                                    options=pipeline.BuildOptions(jobs=2, skip_smoke=True, nocache=True))
    finally:
        for e in engines:
            e.close()
    local, remote = chosen.names()
    built = {n.name: n.engine for n in report.nodes if n.outcome == "built"}
    assert built == {"system": local, "python": local, "wheel:fastmath": remote, "assemble": local,
                     "entrypoint": local}, report.nodes
    assert report.backend == "buildkit"
    # each node built once: one result and one "built" event per node
    assert sorted(n.name for n in report.nodes) == sorted(set(n.name for n in report.nodes))
    events = [name for name, state, _ in progress.events if state == "built"]
    assert sorted(events) == sorted(built)
    records = RecordStore(state_root(config.cache)).load_all(t.graph)
    assert {n: records[n].engine for n in built} == built

    # the far compile: the source copied in, the wheel copied out; its one object came from the cache server (its
    # own host has no cache folder: only the server, through the pair, could give it the object this host compiled)
    log = (config.cache.logs / "demo" / "default" / "wheel-fastmath.log").read_text()
    assert (f"on {remote}, another host (the source copied in, the wheel copied out): the compiler cache server only"
            in log)
    cpus, memory = far.engine.capacity()  # sized by the far host's own figures, as its engine gives them
    jobs = steps.compile_jobs(cores=cpus, memory_gib=memory, per_job_gib=1, concurrent=1)
    assert f"({jobs} jobs) on {remote}, another host" in log
    assert (records["wheel:fastmath"].cache_hits, records["wheel:fastmath"].cache_misses) == (1, 0)
    assert far.engine.image_exists(t.refs["wheel:fastmath"])  # its one-file image was built there
    assert far.engine.image_exists(t.refs["compile-env:fastmath"])  # pulled through the registry
    # the wheel it made is the one the final image holds (installed on this host from the wheelhouse)
    wheel = report.wheels["fastmath"]
    out = engine.run(report.final, ["python3", "-c", "import fastmath, importlib.metadata as m; "
                                    "print(fastmath.clamp(5, 0, 3), m.version('fastmath'))"], entrypoint=[], timeout=60)
    assert out.ok, out.stderr
    assert out.stdout.split() == ["3.0", wheel.name.split("-")[1]]
    # this host's python node read the wheelhouse on the pair's address (the only one it was served on), with
    # images/install.py as from 127.0.0.1
    logs = config.cache.logs / "demo" / "default"
    assert "installed six 1.16.0, tomli 2.0.1 (without pip)" in (logs / "python.log").read_text()
    assert f"installed fastmath {wheel.name.split('-')[1]} (without pip)" in (logs / "assemble.log").read_text()

    # the far host is another host: a container of its engine with host networking has the far address only, and
    # pip there installs from a wheelhouse on this host's end of the pair, trusting exactly that host (render's text)
    six = next((config.cache.downloads / "pip").glob("six-1.16.0-*.whl"))
    served = tmp_path / "served"
    wheelhouse.link_tree(served, {six.name: six})
    with wheelhouse.serve(served, port=0, host=far.net.host_ip) as url:
        script = ("set -eu; cat /proc/net/fib_trie; " + render.WHEELHOUSE_HOST.removesuffix("\\")
                  + f" printf '%s\\n' 'six==1.16.0 --hash=sha256:{wheelhouse.sha256_file(six)}' > /tmp/req.txt; "
                  'PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip download -q --no-deps --no-index '
                  '--find-links "$BUILDCTL_WHEELHOUSE" --require-hashes -r /tmp/req.txt -d /tmp/got; ls /tmp/got')
        ran = far.engine.run(t.refs["compile-env:fastmath"], ["/bin/sh", "-c", script], entrypoint=[],
                             env={"BUILDCTL_WHEELHOUSE": url}, network_mode="host", timeout=120)
    assert ran.ok, ran.stdout + ran.stderr
    mine, _ = hostaddr.parse_fib_trie(ran.stdout)
    assert far.net.far_ip in mine and far.net.host_ip not in mine, mine
    assert mine <= {far.net.far_ip, "127.0.0.1", "172.31.254.1"}, mine  # its own pair end, loopback, its bridge
    assert ran.stdout.strip().splitlines()[-1] == six.name
