"""Another host for the engine tests: a network namespace joined to this one by a veth pair, with a dockerd of its
own inside, and a registry with TLS on this host's end of the pair (tests/engine/test_far_builder.py).

- ``far_net``: the namespace and the pair, both made here and removed on exit, addressed in a free /30 of
  10.231.0.0/16 (this host .1, the far one .2). The namespace has no other interface and no default route: from
  it, only this host's end of the pair (and its own loopback) can be reached.
- ``far_engine``: a containerd and a dockerd started inside the namespace (``nsenter --net``), with their own
  bridge (inside the namespace), data-root (a tmpfs), exec-root, pidfile and sockets, --iptables=false --ip-masq=false;
  the API on tcp://<far address>:2375, as a builder on another machine is reached. Its own containerd, not one
  a host may run at /run/containerd: containers (and their host networking) must live in the namespace. Stopped,
  and whatever they mounted and wrote removed, on exit (bench/engine2.py's way, never --bridge=none).
- ``tls_registry``: docker-registry on <this host's address>:<port> with a certificate from a CA made here; the
  CA in /etc/docker/certs.d/<address:port>/ca.crt, which every engine of this host reads per connection (no
  restart, no daemon.json change; the system engine treats only 127.0.0.0/8 as insecure), removed on exit.
- ``redis_server``: Debian's redis-server on this host's end of the pair, the compiler cache server.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import engine2
from buildctl.engine.engine import Engine

_LOCK = "/tmp/buildctl-far-host.lock"  # two test runs never pick one /30 at once
_NETS = [ipaddress.ip_network(f"10.231.{n}.{m}/30") for n in range(7, 256) for m in range(0, 256, 4)]
CERTS_D = Path("/etc/docker/certs.d")
CAP_NET_ADMIN = 12


class NoNamespaces(Exception):
    """Network namespaces cannot be made here (the message says why): the far-host tests skip."""


@dataclass(frozen=True, kw_only=True)
class FarNet:
    ns: str  # the namespace's name (ip netns)
    host_ip: str  # this host's end of the pair
    far_ip: str  # the far host's end, inside the namespace
    veth: str  # this host's end's interface name


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        raise engine2.SecondEngineError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def net_admin() -> bool:
    """Whether this process holds CAP_NET_ADMIN (what making a namespace and a veth pair takes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    return False


@contextlib.contextmanager
def far_net() -> Iterator[FarNet]:
    if shutil.which("ip") is None:
        raise NoNamespaces("no `ip` command (iproute2) to make a network namespace")
    if not net_admin():
        raise NoNamespaces("this process lacks CAP_NET_ADMIN: it cannot make a network namespace and a veth pair")
    tag = uuid.uuid4().hex[:8]
    ns, veth, peer = f"buildctl-far-{tag}", f"vfh{tag}", f"vfn{tag}"  # interface names: at most 15 characters
    made_ns = made_link = False
    try:
        with open(_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = engine2._used()
            net = next((n for n in _NETS if not any(n.overlaps(u) for u in used)), None)
            if net is None:
                raise engine2.SecondEngineError("no unused /30 in 10.231.0.0/16 for the far host")
            host_ip, far_ip = str(net.network_address + 1), str(net.network_address + 2)
            _ip("netns", "add", ns)
            made_ns = True
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer, "netns", ns)
            made_link = True
            _ip("addr", "add", f"{host_ip}/30", "dev", veth)
            _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", f"{far_ip}/30", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield FarNet(ns=ns, host_ip=host_ip, far_ip=far_ip, veth=veth)
    finally:
        if made_link:  # deleting one end deletes the pair
            subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=20, check=False)
        if made_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20, check=False)


def links() -> set[str]:
    """This host's interface names."""
    return set(os.listdir("/sys/class/net"))


def namespaces() -> set[str]:
    """The names `ip netns` knows."""
    folder = Path("/run/netns")
    return set(os.listdir(folder)) if folder.is_dir() else set()


def _wait(what: str, ready: Callable[[], bool], procs: list[subprocess.Popen[bytes]], log: Path,
          seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
            raise engine2.SecondEngineError(f"{what} did not come up:\n    " + "\n    ".join(tail))
        time.sleep(0.2)


@contextlib.contextmanager
def far_engine(net: FarNet) -> Iterator[tuple[Engine, str]]:
    """(the far engine through its unix socket, its builder endpoint tcp://<far address>:2375)."""
    tools = {t: shutil.which(t) for t in ("dockerd", "containerd", "nsenter")}
    missing = [t for t, p in tools.items() if p is None]
    if missing:
        raise engine2.SecondEngineError(f"the far engine needs {', '.join(missing)} (docker.io, containerd, util-linux)")
    enter = [str(tools["nsenter"]), f"--net=/run/netns/{net.ns}"]
    state = Path(tempfile.mkdtemp(prefix="buildctl-far-", dir="/tmp"))  # short: socket paths have a length limit
    procs: list[subprocess.Popen[bytes]] = []
    eng: Engine | None = None
    tag = net.ns.rsplit("-", 1)[-1]
    try:
        # its bridge lives in the namespace, so its name and network are the namespace's own
        _ip("-n", net.ns, "link", "add", "docker-far", "type", "bridge")
        _ip("-n", net.ns, "addr", "add", "172.31.254.1/24", "dev", "docker-far")
        _ip("-n", net.ns, "link", "set", "docker-far", "up")
        # its data-root in memory: what it pulls and builds (a few hundred MB) goes with one unmount, where removing
        # the files of an image from disk took 13 s on a loaded machine here
        (state / "root").mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g,mode=0711", "tmpfs", str(state / "root")],
                              capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise engine2.SecondEngineError(f"mount tmpfs for the far engine's data-root: {done.stderr.strip()}")
        ctr = state / "containerd"
        ctr.mkdir()
        sock = ctr / "containerd.sock"
        (ctr / "config.toml").write_text(
            f'version = 2\nroot = "{ctr}/root"\nstate = "{ctr}/state"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
            f'[debug]\n  address = "{ctr}/debug.sock"\n[metrics]\n  address = ""\n')
        log = state / "daemons.log"
        with log.open("wb") as out:
            procs.append(subprocess.Popen([*enter, str(tools["containerd"]), "--config", str(ctr / "config.toml")],
                                          stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
            _wait("the far host's containerd", sock.exists, procs, log)
            (state / "daemon.json").write_text(json.dumps({}))  # not /etc/docker/daemon.json: nothing shared
            endpoint = f"tcp://{net.far_ip}:2375"
            procs.append(subprocess.Popen(
                [*enter, str(tools["dockerd"]), "--config-file", str(state / "daemon.json"), "--containerd", str(sock),
                 "--bridge", "docker-far", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                 "--data-root", str(state / "root"), "--exec-root", str(state / "exec"),
                 "--pidfile", str(state / "docker.pid"), "--host", f"unix://{state}/docker.sock",
                 # plain TCP on the pair's private /30, said explicitly (--tls=false): otherwise dockerd
                 # sleeps 15 s at start to warn about it; a real builder is reached over TLS or ssh
                 "--host", endpoint, "--tls=false",
                 "--containerd-namespace", f"buildctl-far-{tag}",
                 "--containerd-plugins-namespace", f"buildctl-far-{tag}-plugins"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        eng = Engine(f"unix://{state}/docker.sock", name="far")
        probe = eng
        _wait("the far host's dockerd", lambda: engine2._answers(probe), procs, log)
        yield eng, endpoint
    finally:
        if eng is not None:
            eng.close()
        for p in reversed(procs):  # dockerd first, then its containerd
            engine2._stop(p)
        engine2.remove_folder(state)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise engine2.SecondEngineError(f"openssl {args[0]}: {done.stderr.strip()[-500:]}")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class TlsRegistry:
    address: str  # host:port, the one name both engines and buildctl use
    ca: Path  # the CA that signed its certificate


@contextlib.contextmanager
def tls_registry(host: str) -> Iterator[TlsRegistry]:
    """docker-registry on ``host`` (an address of this host) with TLS from a CA made here."""
    registry = shutil.which("docker-registry")
    if registry is None or shutil.which("openssl") is None:
        raise engine2.SecondEngineError("the far-host registry needs docker-registry and openssl")
    state = Path(tempfile.mkdtemp(prefix="buildctl-farreg-", dir="/tmp"))
    proc: subprocess.Popen[bytes] | None = None
    certs: Path | None = None
    made_certs_d = not CERTS_D.exists()
    try:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=buildctl far-host test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=state)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                 "-subj", f"/CN={host}", cwd=state)
        (state / "ext.cnf").write_text(f"subjectAltName=IP:{host}\nextendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf", cwd=state)
        port = _free_port(host)
        address = f"{host}:{port}"
        (state / "registry.yml").write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {state}/storage\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {address}\n  secret: buildctl-test-only\n"
            f"  tls:\n    certificate: {state}/server.crt\n    key: {state}/server.key\n")
        certs = CERTS_D / address
        certs.mkdir(parents=True, exist_ok=False)
        shutil.copyfile(state / "ca.crt", certs / "ca.crt")
        log = state / "registry.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([registry, "serve", str(state / "registry.yml")], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        context = ssl.create_default_context(cafile=str(state / "ca.crt"))

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"https://{address}/v2/", timeout=2, context=context) as r:
                    return bool(r.status == 200)
            except OSError:
                return False
        _wait(f"the registry on {address}", answers, [proc], log, seconds=30)
        yield TlsRegistry(address=address, ca=state / "ca.crt")
    finally:
        if proc is not None:
            engine2._stop(proc)
        if certs is not None:
            shutil.rmtree(certs, ignore_errors=True)
        if made_certs_d:
            with contextlib.suppress(OSError):
                CERTS_D.rmdir()  # only when empty: another run may have put its own there meanwhile
        shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def redis_server(host: str) -> Iterator[str]:
    """Debian's redis-server on ``host`` (an address of this host), nothing on disk, stopped on exit: the
    compiler cache server (config compile_cache ``redis://HOST:PORT``) of the far-host test. Yields the URL."""
    redis = shutil.which("redis-server")
    if redis is None:
        raise engine2.SecondEngineError("the compiler cache server needs redis-server (apt-get install redis-server)")
    state = Path(tempfile.mkdtemp(prefix="buildctl-farredis-", dir="/tmp"))
    port = _free_port(host)
    proc: subprocess.Popen[bytes] | None = None
    try:
        log = state / "redis.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([redis, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no",
                                     "--protected-mode", "no", "--dir", str(state), "--daemonize", "no"],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

        def answers() -> bool:
            try:
                with socket.create_connection((host, port), timeout=2) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False
        _wait(f"redis-server on {host}:{port}", answers, [proc], log, seconds=30)
        yield f"redis://{host}:{port}"
    finally:
        if proc is not None:
            engine2._stop(proc)
        shutil.rmtree(state, ignore_errors=True)
