"""Whether an IP address is one of this host's own: config ``wheelhouse_address``, checked where it is loaded.

The wheelhouse binds that one address and builders on other machines fetch from it, so it must be an address of
an interface of this host, and one that names this host alone. The kernel answers the first: a socket binds an
address only when the host has it (a bind test; EADDRNOTAVAIL otherwise). It does not answer the second: Linux
lets a socket bind a broadcast address of its own networks (10.0.0.255 on 10.0.0.0/24), which pip then cannot
reach. Those come from the host's local routing table, ``/proc/net/fib_trie`` (``/32 link BROADCAST`` entries).
No external command: the reading and the bind are this module's, in this network namespace.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path

from buildctl import syntax

_FIB_TRIE = Path("/proc/net/fib_trie")
_IF_INET6 = Path("/proc/net/if_inet6")
_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_ENTRY = re.compile(r"^\s*\|--\s+(\d+\.\d+\.\d+\.\d+)\s*\Z")
_KIND = re.compile(r"^\s*/(\d+)\s+\S+\s+([A-Z]+)\s*\Z")


def parse_fib_trie(text: str) -> tuple[set[str], set[str]]:
    """(this host's IPv4 addresses, the broadcast addresses of its networks) from /proc/net/fib_trie's text."""
    local: set[str] = set()
    broadcast: set[str] = set()
    last = ""
    for line in text.splitlines():
        entry = _ENTRY.match(line)
        if entry:
            last = entry.group(1)
            continue
        kind = _KIND.match(line)
        if kind and last and kind.group(1) == "32":
            (local if kind.group(2) == "LOCAL" else broadcast if kind.group(2) == "BROADCAST" else set()).add(last)
    return local, broadcast


def parse_if_inet6(text: str) -> set[str]:
    """This host's IPv6 addresses from /proc/net/if_inet6's text (32 hex digits, then index, prefix, scope...)."""
    out: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if words and re.fullmatch(r"[0-9a-f]{32}", words[0]):
            out.add(str(ipaddress.IPv6Address(bytes.fromhex(words[0]))))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""  # not Linux, or /proc not mounted: the bind test alone decides


def _bind(value: str) -> str | None:
    """None when a socket of this host binds ``value``, else the kernel's reason."""
    family = socket.AF_INET6 if ":" in value else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((value, 0))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def problem(value: str) -> str | None:
    """None for an address of this host that a server may bind for other hosts; else what is wrong with it
    (the loader adds file, line and key)."""
    bad = syntax.bind_address(value)
    if bad:
        return bad
    ip = ipaddress.ip_address(value)
    if ip == _LIMITED_BROADCAST:
        return "is the broadcast address (every host of the network): name this host's own address"
    local, broadcast = parse_fib_trie(_read(_FIB_TRIE)) if ip.version == 4 else (parse_if_inet6(_read(_IF_INET6)), set())
    if str(ip) in broadcast:
        return ("is the broadcast address of a network of this host (every host on it), not this host's own: "
                f"name one of {_listed(local)}")
    why = _bind(str(ip))
    if why is not None:
        if ip.version == 6 and ip.is_link_local:
            return "is a link-local IPv6 address, which needs a zone (%...): name an address without one"
        return f"is not an address of this host ({why}): name one of {_listed(local)}"
    return None


def _listed(addresses: set[str]) -> str:
    """This host's addresses, those other hosts can reach first (loopback last), for an error message."""
    if not any(not ipaddress.ip_address(a).is_link_local for a in addresses):
        return "this host's addresses (`ip -br addr` lists them)"
    ips = [ip for ip in map(ipaddress.ip_address, addresses) if not ip.is_link_local]  # those need a zone
    ordered = [str(ip) for ip in sorted(ips, key=lambda ip: (ip.is_loopback, ip.version, int(ip)))]
    return "this host's addresses: " + ", ".join(ordered)
