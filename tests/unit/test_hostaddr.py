"""config ``wheelhouse_address``: an address of this host that other hosts reach it at (buildctl/hostaddr.py).

The host is made up for most tests (its routing table and what a bind says are the module's two sources), so
they say the same on every machine; two use the machine's own loopback, which every Linux host has."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl import hostaddr
from buildctl.config import Config, load_config
from buildctl.errors import ManifestError

# /proc/net/fib_trie of a host with 10.0.0.4/24 on one interface and loopback (its local table, as the kernel prints it)
FIB_TRIE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.0.0.0/24 2 0 2
        +-- 10.0.0.0/29 2 0 2
           |-- 10.0.0.0
              /24 link UNICAST
           |-- 10.0.0.4
              /32 host LOCAL
        |-- 10.0.0.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
"""
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000004 02 40 00 80     eth0
fe8000000000000000000000000000fc 02 40 20 80     eth0
"""
HAS = {"10.0.0.4", "10.0.0.255", "127.0.0.1", "127.255.255.255", "::1", "fd00::4"}  # what a bind of this host takes


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(FIB_TRIE)
    (tmp_path / "if_inet6").write_text(IF_INET6)
    monkeypatch.setattr(hostaddr, "_FIB_TRIE", tmp_path / "fib_trie")
    monkeypatch.setattr(hostaddr, "_IF_INET6", tmp_path / "if_inet6")
    # Linux binds a broadcast address of its own networks too (10.0.0.255 above): the routing table refuses it
    monkeypatch.setattr(hostaddr, "_bind", lambda a: None if a in HAS else "Cannot assign requested address")


def test_the_tables_are_read_as_the_kernel_writes_them() -> None:
    local, broadcast = hostaddr.parse_fib_trie(FIB_TRIE)
    assert local == {"10.0.0.4", "127.0.0.1"} and broadcast == {"10.0.0.255", "127.255.255.255"}
    assert hostaddr.parse_if_inet6(IF_INET6) == {"::1", "fd00::4", "fe80::fc"}
    assert hostaddr.parse_fib_trie("") == (set(), set()) and hostaddr.parse_if_inet6("garbage\n") == set()


@pytest.mark.usefixtures("host")
@pytest.mark.parametrize("address", ["10.0.0.4", "127.0.0.1", "fd00::4", "::1"])
def test_an_address_of_this_host_is_accepted(address: str) -> None:
    assert hostaddr.problem(address) is None


@pytest.mark.usefixtures("host")
@pytest.mark.parametrize(("address", "says"), [
    ("10.0.0.255", "is the broadcast address of a network of this host"),
    ("127.255.255.255", "is the broadcast address of a network of this host"),
    ("255.255.255.255", "is the broadcast address"),
    ("10.0.0.9", "is not an address of this host (Cannot assign requested address)"),
    ("10.0.0.0", "is not an address of this host"),  # the network's own address: a route, not an address
    ("fd00::9", "is not an address of this host"),
    ("fe80::fc", "is a link-local IPv6 address, which needs a zone"),
    ("224.0.0.1", "is a multicast address"),
    ("ff02::1", "is a multicast address"),
    ("0.0.0.0", "is every interface"),
    ("::", "is every interface"),
    ("wheelhouse.example", "is not an IP address"),
])
def test_an_address_that_is_not_this_hosts_own_is_refused_saying_why(address: str, says: str) -> None:
    problem = hostaddr.problem(address)
    assert problem is not None and says in problem, problem


@pytest.mark.usefixtures("host")
def test_the_refusal_lists_the_addresses_other_hosts_reach_first() -> None:
    assert hostaddr.problem("10.0.0.9") == ("is not an address of this host (Cannot assign requested address): name "
                                            "one of this host's addresses: 10.0.0.4, 127.0.0.1")
    listed = hostaddr.problem("fd00::9")
    assert listed is not None and listed.endswith("this host's addresses: fd00::4, ::1")  # fe80::fc needs a zone


def _config(tmp_path: Path, text: str = "", **env: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path), **env})


@pytest.mark.usefixtures("host")
def test_the_configuration_refuses_it_naming_the_file_line_and_key(tmp_path: Path) -> None:
    assert _config(tmp_path, 'wheelhouse_address = "10.0.0.4"\n').wheelhouse_address == "10.0.0.4"
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, 'backend = "buildkit"\nwheelhouse_address = "10.0.0.255"\n')
    loc = failed.value.location
    assert (loc.file, loc.line, loc.key) == (str(tmp_path / "config.toml"), 2, "wheelhouse_address")
    assert "'10.0.0.255' is the broadcast address of a network of this host" in failed.value.what
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, BUILDCTL_WHEELHOUSE_ADDRESS="10.0.0.9")
    loc = failed.value.location
    assert (loc.file, loc.key) == ("$BUILDCTL_WHEELHOUSE_ADDRESS", "wheelhouse_address")
    assert "'10.0.0.9' is not an address of this host" in failed.value.what


@pytest.mark.parametrize(("address", "says"), [
    ("127.0.0.1", None),
    ("127.255.255.255", "is the broadcast address of a network of this host"),  # loopback's, on every Linux host
    ("203.0.113.77", "is not an address of this host"),  # TEST-NET-3 (RFC 5737): no host has it
])
def test_this_machine(tmp_path: Path, address: str, says: str | None) -> None:
    """The machine's own tables and a real bind (a bind opens no connection): loopback is the same everywhere."""
    if says is None:
        assert _config(tmp_path, BUILDCTL_WHEELHOUSE_ADDRESS=address).wheelhouse_address == address
        return
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, BUILDCTL_WHEELHOUSE_ADDRESS=address)
    assert says in failed.value.what
