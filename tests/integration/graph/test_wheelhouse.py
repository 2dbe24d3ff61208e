"""The wheelhouse a build reads: wheels found by name, version and allowed hash; served on 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from buildctl.builder import wheelhouse
from buildctl.config import CacheLayout, Config
from buildctl.errors import BuildFailed
from buildctl.graph.specs import PipPin
from tests.integration.pyindex import make_index, make_wheel, serve, sha256


def test_find_local_checks_name_version_and_hash(tmp_path: Path) -> None:
    f = tmp_path / "PyYAML-6.0.1-cp311-cp311-manylinux_2_17_x86_64.whl"
    f.write_bytes(b"wheel bytes")
    digest = "sha256:" + hashlib.sha256(b"wheel bytes").hexdigest()
    assert wheelhouse.find_local(PipPin(name="pyyaml", version="6.0.1", hashes=(digest,)), tmp_path) == f
    assert wheelhouse.find_local(PipPin(name="pyyaml", version="6.0.1", hashes=("sha256:" + "0" * 64,)), tmp_path) is None
    assert wheelhouse.find_local(PipPin(name="pyyaml", version="6.0.2", hashes=(digest,)), tmp_path) is None
    assert wheelhouse.find_local(PipPin(name="pyyaml", version=None, spec=">=6"), tmp_path) is None


def test_requirement_lines() -> None:
    assert wheelhouse.requirement_lines([PipPin(name="six", version="1.16.0", hashes=("sha256:ab", "sha256:cd"))]) == [
        "six==1.16.0 --hash=sha256:ab --hash=sha256:cd"]


def test_platform_tags() -> None:
    tags = wheelhouse.platform_tags("linux/arm64")
    assert "manylinux_2_17_aarch64" in tags and "manylinux2014_aarch64" in tags and all("aarch64" in t for t in tags)


def test_serve_lists_and_serves_files(tmp_path: Path) -> None:
    src = tmp_path / "six-1.16.0-py2.py3-none-any.whl"
    src.write_bytes(b"six")
    root = tmp_path / "root"
    wheelhouse.link_tree(root, {src.name: src, "components/fastmath/fastmath-0.2.0.whl": src})
    with wheelhouse.serve(root) as url:
        assert url.startswith("http://127.0.0.1:")
        listing = urllib.request.urlopen(url, timeout=5).read().decode()
        assert f'href="{src.name}"' in listing and 'href="components/"' in listing
        assert urllib.request.urlopen(url + "components/fastmath/fastmath-0.2.0.whl", timeout=5).read() == b"six"
        # the preferred port is taken (by this server): another server gets a free one
        with wheelhouse.serve(root) as other:
            assert other != url
            assert urllib.request.urlopen(other + src.name, timeout=5).read() == b"six"
    # closed afterwards
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1].strip("/")))) != 0


def test_serve_on_the_configured_address_only(tmp_path: Path) -> None:
    """config wheelhouse_address: the server binds that one address (here 127.0.0.2, another loopback address a
    second machine's stand-in can reach) and the URL the builds get names it; 127.0.0.1 is not served."""
    src = tmp_path / "six-1.16.0-py2.py3-none-any.whl"
    src.write_bytes(b"six")
    root = tmp_path / "root"
    wheelhouse.link_tree(root, {src.name: src})
    with wheelhouse.serve(root, port=0, host="127.0.0.2") as url:
        assert url.startswith("http://127.0.0.2:")
        assert urllib.request.urlopen(url + src.name, timeout=5).read() == b"six"
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0


def _config(index: str) -> Config:
    return Config(path=None, pip_index_url=index, cache=CacheLayout(root=Path("/nonexistent")))


def test_download_from_an_index_two_versions_and_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip configuration adds indexes
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    made = tmp_path / "made"
    made.mkdir()
    one = make_wheel(made, "alpha-pkg", "1.0")
    two = make_wheel(made, "alpha-pkg", "2.0")
    root = make_index(tmp_path / "index", [one, two])
    pins = [PipPin(name="alpha-pkg", version="1.0", hashes=(f"sha256:{sha256(one)}",)),
            PipPin(name="alpha-pkg", version="2.0", hashes=(f"sha256:{sha256(two)}",)),
            PipPin(name="beta", version="1.0", in_base=True)]  # the base has it: not downloaded
    folder = tmp_path / "wheels"
    log = tmp_path / "pip.log"
    with serve(root) as url:
        got = wheelhouse.download(pins, folder=folder, python="3.11", platform="linux/amd64",
                                  config=_config(f"{url}/simple"), log_file=log)
        assert sorted(got) == ["alpha-pkg==1.0", "alpha-pkg==2.0"]
        assert got["alpha-pkg==2.0"].read_bytes() == two.read_bytes()
        assert "--index-url" in log.read_text() and "--require-hashes" in log.read_text()

        bad = PipPin(name="alpha-pkg", version="1.0", hashes=("sha256:" + "0" * 64,))
        with pytest.raises(BuildFailed) as failed:
            wheelhouse.download([bad], folder=tmp_path / "other", python="3.11", platform="linux/amd64",
                                config=_config(f"{url}/simple"), log_file=log)
        assert str(log) in failed.value.what
    # present and matching: no pip run at all (the index is gone)
    again = wheelhouse.download(pins, folder=folder, python="3.11", platform="linux/amd64",
                                config=_config("http://127.0.0.1:9/simple"), log_file=log)
    assert again == got


def test_a_run_trusts_the_wheelhouse_host_it_is_given_and_no_other() -> None:
    """render.WHEELHOUSE_HOST derives the wheelhouse's host:port inside the RUN from the build arg (the rendered text
    is the same for every wheelhouse_address, and so is every key); pip (the host's, the same check as the base's)
    then trusts exactly that host and port for plain http, and still requires the hashes."""
    import subprocess
    import sys

    from buildctl.graph import render

    cases = {"http://127.0.0.1:47803/": "127.0.0.1:47803", "http://10.231.7.1:48001/": "10.231.7.1:48001",
             "http://[fd00::4]:47803/": "[fd00::4]:47803"}
    script = "set -eu; " + render.WHEELHOUSE_HOST.removesuffix("\\") + ' printf %s "$wheelhouse_host"'
    for url, host in cases.items():
        for shell in ("/bin/sh", "bash"):
            done = subprocess.run([shell, "-c", script], env={"BUILDCTL_WHEELHOUSE": url, "PATH": os.environ["PATH"]},
                                  capture_output=True, text=True, timeout=10, check=True)
            assert done.stdout == host, (shell, url)
    # pip's own check of a find-links location (pip's internals import pkg_resources, which warns: in a child)
    ask = ("import sys; from pip._internal.models.link import Link; from pip._internal.network.session import "
           "PipSession\nfor t, u in zip(sys.argv[1::2], sys.argv[2::2]): "
           "print(PipSession(trusted_hosts=[t]).is_secure_origin(Link(u)))")
    argv: list[str] = []
    expected: list[str] = []
    for url, host in cases.items():
        other_port = url.replace(host.rsplit(":", 1)[1], "1")
        other_host = url.replace("10.231.7.1", "10.231.7.2").replace("fd00::4", "fd00::5").replace("127.0.0.1",
                                                                                                   "10.9.9.9")
        argv += [host, url + "components/fastmath/x.whl", host, other_port + "x.whl", host, other_host + "x.whl"]
        expected += ["True", str(host.startswith("127.")), "False"]  # pip trusts any port of 127/8 (and ::1) anyway
    said = subprocess.run([sys.executable, "-W", "ignore", "-c", ask, *argv],
                          capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert said == expected, said


def test_an_address_gone_since_the_configuration_was_read_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """wheelhouse_address is checked when the configuration is loaded (config.py, hostaddr.py); one that this host
    no longer has when the build starts (an interface gone) stops the build with an error naming the setting."""
    with pytest.raises(BuildFailed) as failed, wheelhouse.serve(tmp_path, host="203.0.113.77"):  # TEST-NET-3
        pass
    assert "cannot serve the build's wheelhouse on 203.0.113.77" in failed.value.what
    assert "wheelhouse_address" in failed.value.fix
