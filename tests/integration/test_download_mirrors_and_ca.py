"""download_mirrors (URL prefix -> mirror prefix) and the configured CA bundle reaching git, against
servers on 127.0.0.1: an HTTPS server with a certificate from a CA this test makes (as a TLS-intercepting
proxy would present), serving a git repository over dumb HTTP and plain download files."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildctl.config import CacheLayout, Config, load_config, mirror_url
from buildctl.errors import ManifestError, UnreachableError
from buildctl.lock import resolve as lockmod
from buildctl.manifest import pins
from buildctl.sources.index import HttpFetcher
from buildctl.sources.sources import Sources
from tests.integration.pyindex import ClosingHTTPServer

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_GLOBAL": os.devnull,
       "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


@dataclass(frozen=True)
class Server:
    url: str  # https://127.0.0.1:PORT/
    root: Path
    ca: Path
    head: str  # main of repo.git


def _run(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(list(args), cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("tls")
    ca_key, ca, key, csr, cert = (d / n for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test proxy CA",
         "-keyout", str(ca_key), "-out", str(ca))
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key),
         "-out", str(csr))
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-days", "2", "-extfile", str(d / "ext"), "-out", str(cert))
    root = d / "www"
    work = d / "work"
    _run("git", "init", "-q", "-b", "main", str(work))
    (work / "README").write_text("over https\n")
    _run("git", "add", ".", cwd=work)
    _run("git", "commit", "-q", "-m", "first", cwd=work)
    head = _run("git", "rev-parse", "HEAD", cwd=work)
    root.mkdir()
    _run("git", "clone", "-q", "--bare", str(work), str(root / "repo.git"))
    _run("git", "--git-dir", str(root / "repo.git"), "update-server-info")  # dumb HTTP
    for sub in ("nvidia/compute/cuda/repos", "raw/NVIDIA/mlperf-common/refs/heads/main/client",
                "gh/mikefarah/yq/releases/download/v4.27.5"):
        (root / sub).mkdir(parents=True)
    (root / "nvidia/compute/cuda/repos/cuda-keyring_1.1-1_all.deb").write_bytes(b"keyring deb")
    (root / "raw/NVIDIA/mlperf-common/refs/heads/main/client/bindpcie").write_bytes(b"#!/bin/sh\n")
    (root / "gh/mikefarah/yq/releases/download/v4.27.5/yq_linux_amd64").write_bytes(b"yq binary")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ClosingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield Server(url=f"https://127.0.0.1:{httpd.server_address[1]}/", root=root, ca=ca, head=head)
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join()


def test_git_over_https_fails_without_the_ca_and_works_with_the_configured_ca_bundle(server: Server, tmp_path: Path) -> None:
    repo = server.url + "repo.git"
    with pytest.raises(UnreachableError) as err:
        Sources(cache=tmp_path / "a").branch_head(repo, "main")
    assert "certificate" in str(err.value).lower() and "set ca_bundle" in err.value.fix
    config = Config(path=None, cache=CacheLayout(root=tmp_path / "b"), ca_bundle=server.ca)
    s = Sources.from_config(config)
    assert s.branch_head(repo, "main") == server.head  # ls-remote and fetch over https, trusting the CA
    assert s.prepare(repo, server.head).tree == server.head
    # pip's side of the same proxy: the host fetcher trusts the same bundle
    assert HttpFetcher.from_config(config).content(server.url + "repo.git/HEAD") == b"ref: refs/heads/main\n"


@pytest.mark.parametrize(("url", "prefix", "served"), [
    ("https://developer.download.nvidia.com/compute/cuda/repos/cuda-keyring_1.1-1_all.deb",
     "https://developer.download.nvidia.com/", "nvidia/"),
    ("https://raw.githubusercontent.com/NVIDIA/mlperf-common/refs/heads/main/client/bindpcie",
     "https://raw.githubusercontent.com/", "raw/"),
    ("https://github.com/mikefarah/yq/releases/download/v4.27.5/yq_linux_amd64", "https://github.com/", "gh/"),
])
def test_download_mirrors_serve_downloads_by_url_prefix(server: Server, tmp_path: Path, url: str, prefix: str,
                                                        served: str) -> None:
    mirrors = {prefix: server.url + served}
    local = server.root / served / url[len(prefix):]
    assert mirror_url(url, mirrors) == server.url + served + url[len(prefix):]
    config = Config(path=None, cache=CacheLayout(root=tmp_path), ca_bundle=server.ca, download_mirrors=mirrors)
    assert HttpFetcher.from_config(config).sha256(url) == hashlib.sha256(local.read_bytes()).hexdigest()


def test_the_lock_records_the_manifests_url_and_the_mirrors_file(server: Server, tmp_path: Path) -> None:
    url = "https://github.com/mikefarah/yq/releases/download/v4.27.5/yq_linux_amd64"
    (tmp_path / "pins").mkdir()
    path = tmp_path / "pins" / "dl.yaml"
    path.write_text(f"""\
schema: 1
stack: dl
base: {{alias: b}}
variants:
  default: {{image: "127.0.0.1:9/b:1", platform: linux/amd64, cuda: "13"}}
downloads:
  yq:
    dest: /usr/bin/yq
    urls:
      any: {{url: "{url}", sha256: compute}}
""")
    m = pins.load(path)
    fetch = HttpFetcher(ca_bundle=server.ca, timeout=5, mirrors={"https://github.com/": server.url + "gh/"})
    locked, _ = lockmod.resolve_downloads(m, m.variant("default"), fetch)
    assert locked["yq"].url == url
    assert locked["yq"].sha256 == hashlib.sha256(b"yq binary").hexdigest()
    # a mirror that does not answer is named, and so is what was asked
    dead = HttpFetcher(timeout=2, mirrors={"https://github.com/": "http://127.0.0.1:9/gh/"})
    with pytest.raises(UnreachableError) as err:
        lockmod.resolve_downloads(m, m.variant("default"), dead)
    assert "cannot reach 127.0.0.1:9" in err.value.what and url in err.value.what and "through the mirror" in err.value.what


def test_download_mirrors_in_the_configuration(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('download_mirrors = { "https://developer.download.nvidia.com/" = "https://m.example/nv/" }\n')
    c = load_config({"BUILDCTL_CONFIG": str(cfg), "HOME": str(tmp_path)})
    assert c.download_mirrors == {"https://developer.download.nvidia.com/": "https://m.example/nv/"}
    env = load_config({"BUILDCTL_CONFIG": str(cfg), "HOME": str(tmp_path),
                       "BUILDCTL_DOWNLOAD_MIRRORS": "https://github.com/=file:///srv/gh/"})
    assert env.download_mirrors == {"https://github.com/": "file:///srv/gh/"}
    cfg.write_text('download_mirrors = { "github.com" = "https://m.example/" }\n')
    with pytest.raises(ManifestError, match=r"config\.toml:1:22: download_mirrors\.github\.com: the key 'github\.com' is not a URL"):
        load_config({"BUILDCTL_CONFIG": str(cfg), "HOME": str(tmp_path)})
