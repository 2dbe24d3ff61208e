"""A second Docker engine on this machine (docs/reference/engine-facts.md): the one helper of the bench and tests.

Its own bridge on an unused /16, data-root, exec-root, pidfile and socket; --iptables=false and
--ip-masq=false so that it touches none of the first engine's rules; never --bridge=none (that deletes the
host's docker0 and breaks the first engine). Started empty; on exit it is stopped, its bridge deleted,
whatever the stopped dockerd left mounted in its folder (the data-root's own mount, network namespaces
under the exec-root) unmounted, and the folder removed: each use is a builder with an empty local cache
that shares only the registry, and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from buildctl.engine.engine import Engine
from buildctl.errors import EngineError

_NETS = [ipaddress.ip_network(f"10.{n}.0.0/16") for n in range(201, 255)] + [
    ipaddress.ip_network(f"172.{n}.0.0/16") for n in range(24, 32)]
_LOCK = "/tmp/buildctl-second-engine.lock"  # two sessions never pick one network at once


class SecondEngineError(Exception):
    """The second engine could not be started (the message says why)."""


def _used() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
        for word in out.split():
            if word[0].isdigit() and "." in word:  # an address or a prefix; a bare address is a /32
                with contextlib.suppress(ValueError):
                    used.append(ipaddress.ip_network(word, strict=False))
    return used


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0:
        raise SecondEngineError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _answers(eng: Engine) -> bool:
    try:
        eng.ping()
    except EngineError:
        return False
    return True


def mounts_under(folder: Path) -> list[str]:
    """Mount points inside ``folder`` (the folder itself included), from /proc/self/mountinfo."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == str(folder) or p.startswith(f"{folder}/")]


def remove_folder(folder: Path) -> None:
    """Unmount what is mounted inside ``folder`` (deepest first; lazily when a plain unmount fails), then
    remove it. Never rm -rf through a mount: a mount that stays leaves the folder in place."""
    for point in sorted(mounts_under(folder), key=len, reverse=True):
        done = subprocess.run(["umount", point], capture_output=True, timeout=10, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=10, check=False)
    if not mounts_under(folder):
        shutil.rmtree(folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def second_engine(bridges: list[str] | None = None, folders: list[Path] | None = None,
                  tcp: list[str] | None = None) -> Iterator[Engine]:
    """A fresh, empty dockerd beside the shared one; stopped, its bridge and folder removed, on exit.
    ``bridges`` and ``folders``: the bridge's name and the state folder are added to them (for a check
    that they are gone). ``tcp``: the engine also listens on ``tcp://127.0.0.1:PORT`` (a free port), added
    to it: a builder reached over the network, as a remote one is (plain TCP on loopback only; a real remote
    builder is reached over TLS or ssh). The Engine yielded is always the unix socket's."""
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)
    if os.geteuid() != 0:
        raise SecondEngineError("a second engine needs root (a bridge and a dockerd)")
    if dockerd is None or shutil.which("ip") is None:
        raise SecondEngineError("a second engine needs dockerd and ip (apt-get install docker.io iproute2)")
    tag = uuid.uuid4().hex[:6]
    bridge = f"docker-e2{tag}"  # at most 15 characters
    if bridges is not None:
        bridges.append(bridge)
    state = Path(tempfile.mkdtemp(prefix="buildctl-e2-", dir="/tmp"))  # short: a socket path has a length limit
    if folders is not None:
        folders.append(state)
    proc: subprocess.Popen[bytes] | None = None
    made_bridge = False
    eng: Engine | None = None
    log = state / "dockerd.log"
    try:
        with open(_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used()
            net = next((n for n in _NETS if not any(n.overlaps(u) for u in used)), None)
            if net is None:
                raise SecondEngineError("no unused /16 for the second engine's bridge")
            _ip("link", "add", bridge, "type", "bridge")
            made_bridge = True
            _ip("addr", "add", f"{net.network_address + 1}/{net.prefixlen}", "dev", bridge)
            _ip("link", "set", bridge, "up")
        (state / "daemon.json").write_text(json.dumps({}))  # not /etc/docker/daemon.json: nothing shared
        sock = state / "docker.sock"
        hosts = ["--host", f"unix://{sock}"]
        if tcp is not None:
            port = _free_port()
            hosts += ["--host", f"tcp://127.0.0.1:{port}"]
            tcp.append(f"tcp://127.0.0.1:{port}")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [dockerd, "--config-file", str(state / "daemon.json"), "--bridge", bridge, "--iptables=false",
                 "--ip-masq=false", "--ip-forward=false", "--data-root", str(state / "root"),
                 "--exec-root", str(state / "exec"), "--pidfile", str(state / "docker.pid"),
                 *hosts,
                 # only matters where a system containerd runs and both engines would share it
                 "--containerd-namespace", f"buildctl-{tag}",
                 "--containerd-plugins-namespace", f"buildctl-{tag}-plugins"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        eng = Engine(f"unix://{sock}", name="second")
        deadline = time.monotonic() + 60
        while not _answers(eng):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").splitlines()[-15:]
                raise SecondEngineError("the second dockerd did not come up:\n    " + "\n    ".join(tail))
            time.sleep(0.3)
        yield eng
    finally:
        if eng is not None:
            eng.close()
        if proc is not None:
            _stop(proc)
        if made_bridge:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10, check=False)
        remove_folder(state)
