"""Pure parts of locking: Debian version order, image references, index pages, the probe's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from debian.debian_support import Version as DebianVersion

from buildctl.config import CacheLayout, Config
from buildctl.engine.values import RunResult
from buildctl.errors import BuildFailed, LockError, UnreachableError
from buildctl.imageref import ImageRef
from buildctl.lock.inbase import CA_PATH, MARK, parse_output, probe_env, request_json
from buildctl.lock.resolve import newest_first, repo_location, select_apt
from buildctl.lock.resolvers import ProbeRequest
from buildctl.sources.index import IndexFile, fetch_verified, parse_project_page, redact, select_files

# ------------------------------------------------------------------------------------------ apt


@pytest.mark.parametrize(("a", "b", "sign"), [
    ("1.0", "1.0", 0),
    ("1.0-1", "1.0-2", -1),
    ("1.0~rc1", "1.0", -1),  # a tilde sorts before the release
    ("1.0", "1.0+deb12u1", -1),
    ("1:0.9", "2.0", 1),  # the epoch wins
    ("1.6-2.1", "1.6-2.1+deb12u1", -1),
    ("7.88.1-10+deb12u5", "7.88.1-10+deb12u12", -1),  # numbers compare as numbers
    ("9.14.0.64-1", "9.13.0.50-1", 1),
    ("1.0a", "1.0+", -1),  # letters before other characters
    ("1.0-0", "1.0", 0),
    ("2.36-9+deb12u4", "2.36-9+deb12u10", -1),
])
def test_debian_version_order(a: str, b: str, sign: int) -> None:
    va, vb = DebianVersion(a), DebianVersion(b)  # what the lock orders apt versions by (python-debian)
    assert ((va > vb) - (va < vb), (vb > va) - (vb < va)) == (sign, -sign)
    if sign:
        newer = a if sign > 0 else b
        assert newest_first("p", [a, b], where="img")[0] == newer


def test_select_patterns() -> None:
    offered = ["1.6-2.1", "1.6-2.1+deb12u1", "1.7.1-1", "1.6~rc1-1"]
    assert select_apt("jq", "1.6*", offered, where="img") == "1.6-2.1+deb12u1"
    assert select_apt("jq", "*", offered, where="img") == "1.7.1-1"
    assert select_apt("jq", "1.6-2.1", offered, where="img") == "1.6-2.1"
    with pytest.raises(LockError, match=r"apt package jq=1.5-1 is not offered by img") as exc:
        select_apt("jq", "1.5-1", offered, where="img")
    assert "offered versions: 1.7.1-1, 1.6-2.1+deb12u1, 1.6-2.1, 1.6~rc1-1" in str(exc.value)
    with pytest.raises(LockError, match=r"apt package nope is not offered by the apt sources of img"):
        select_apt("nope", "*", [], where="img")


def test_a_version_that_is_not_a_debian_version_is_a_lock_error() -> None:
    with pytest.raises(LockError, match=r"apt package jq: img offers a version that is not a Debian version"):
        select_apt("jq", "*", ["1.6-2.1", "not a version!"], where="img")


# ------------------------------------------------------------------------------------------ refs


@pytest.mark.parametrize(("ref", "host", "path", "tag", "digest"), [
    ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io", "nvidia/pytorch", "25.09-py3", None),
    ("127.0.0.1:5000/buildctl/demo-base:bookworm", "127.0.0.1:5000", "buildctl/demo-base", "bookworm", None),
    ("ubuntu:24.04", "docker.io", "library/ubuntu", "24.04", None),
    ("hiyouga/verl", "docker.io", "hiyouga/verl", "latest", None),
    ("localhost/x@sha256:" + "a" * 64, "localhost", "x", None, "sha256:" + "a" * 64),
    ("reg:5000/x:1@sha256:" + "b" * 64, "reg:5000", "x", "1", "sha256:" + "b" * 64),
])
def test_image_ref_parse(ref: str, host: str, path: str, tag: str | None, digest: str | None) -> None:
    r = ImageRef.parse(ref)
    assert (r.host, r.path, r.tag, r.digest) == (host, path, tag, digest)


def test_image_ref_through_mirror() -> None:
    r = ImageRef.parse("nvcr.io/nvidia/pytorch:25.09-py3")
    assert r.with_tag("mirror:5000") == "mirror:5000/nvidia/pytorch:25.09-py3"


def test_repo_location() -> None:
    assert repo_location("https://github.com/NVIDIA/Megatron-LM.git", Path("/p")) == \
        "https://github.com/NVIDIA/Megatron-LM.git"
    assert repo_location("git@github.com:x/y.git", Path("/p")) == "git@github.com:x/y.git"
    assert repo_location("../sources/tool", Path("/p/pins")) == "/p/sources/tool"


# ------------------------------------------------------------------------------------------ index


def test_parse_pep503_html_and_pep691_json() -> None:
    html = (b'<html><body><a href="../../files/demo_a-1.0-py3-none-any.whl#sha256=' + b"a" * 64 +
            b'">demo_a-1.0-py3-none-any.whl</a><a href="demo_a-1.0.tar.gz">demo_a-1.0.tar.gz</a></body></html>')
    files = parse_project_page(html, "text/html", "http://127.0.0.1:1/simple/demo-a/")
    assert files == [
        IndexFile(filename="demo_a-1.0-py3-none-any.whl", url="http://127.0.0.1:1/files/demo_a-1.0-py3-none-any.whl",
                  sha256="a" * 64),
        IndexFile(filename="demo_a-1.0.tar.gz", url="http://127.0.0.1:1/simple/demo-a/demo_a-1.0.tar.gz", sha256=None),
    ]
    body = json.dumps({"files": [{"filename": "x-2-py3-none-any.whl", "url": "https://f/x-2-py3-none-any.whl",
                                  "hashes": {"sha256": "b" * 64}}]}).encode()
    assert parse_project_page(body, "application/vnd.pypi.simple.v1+json", "https://i/simple/x/") == [
        IndexFile(filename="x-2-py3-none-any.whl", url="https://f/x-2-py3-none-any.whl", sha256="b" * 64)]


def test_select_files_keeps_what_fits_the_platform() -> None:
    def f(name: str) -> IndexFile:
        return IndexFile(filename=name, url=f"u/{name}", sha256=name)

    files = [f("numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
             f("numpy-1.26.4-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"),
             f("numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
             f("numpy-1.26.4.tar.gz"), f("numpy-1.26.3-cp311-cp311-manylinux_2_17_x86_64.whl")]
    tags = ["cp311-cp311-manylinux_2_36_x86_64", "cp311-cp311-manylinux_2_17_x86_64", "py3-none-any"]
    assert [x.filename for x in select_files(files, "NumPy", "1.26.4", tags)] == [
        "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]
    # no wheel fits (an aarch64 base): the source distribution is what pip would use
    assert [x.filename for x in select_files(files, "numpy", "1.26.4", ["cp310-cp310-manylinux_2_35_aarch64"])] == [
        "numpy-1.26.4.tar.gz"]


def test_redact_hides_credentials() -> None:
    assert redact("https://user:tok@idx.example/simple/") == "https://***@idx.example/simple/"
    assert redact("https://idx.example/simple/") == "https://idx.example/simple/"


def test_fetch_verified_keeps_a_file_only_when_its_sha256_matches(tmp_path: Path) -> None:
    import hashlib
    import io

    body = b"x" * ((1 << 20) + 7)  # more than one chunk
    asked: list[str] = []

    class Fetcher:
        def open(self, url: str, *, accept: str | None = None) -> io.BytesIO:
            asked.append(url)
            return io.BytesIO(body)

    dest = tmp_path / "f"
    fetch_verified(Fetcher(), "https://files.example/f", hashlib.sha256(body).hexdigest(), dest, label="the f",
                   fix="look")
    assert dest.read_bytes() == body and asked == ["https://files.example/f"] and not (tmp_path / "f.part").exists()
    with pytest.raises(BuildFailed) as err:
        fetch_verified(Fetcher(), "https://files.example/f", "0" * 64, tmp_path / "g", label="the f", fix="look")
    assert err.value.what == "the f does not match its sha256"
    assert err.value.why == f"expected {'0' * 64}, got {hashlib.sha256(body).hexdigest()}" and err.value.fix == "look"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # nothing half-done


# ------------------------------------------------------------------------------------------ probe


def cfg(**over: object) -> Config:
    return Config(path=None, cache=CacheLayout(root=Path("/nonexistent")), **over)  # type: ignore[arg-type]


def test_probe_environment_from_configuration() -> None:
    c = cfg(pip_index_url="http://127.0.0.1:9/simple", pip_extra_index_urls=("http://x/simple",),
            ca_bundle=Path("/etc/ssl/ca.pem"))
    env = probe_env(c, ProbeRequest(pip=("a",), unset_constraint=True))
    assert env["PIP_INDEX_URL"] == "http://127.0.0.1:9/simple"
    assert env["PIP_EXTRA_INDEX_URL"] == "http://x/simple"
    assert env["PIP_CERT"] == CA_PATH
    assert env["PIP_CONSTRAINT"] == ""
    keep = probe_env(cfg(), ProbeRequest(pip=("a",)))
    assert "PIP_CONSTRAINT" not in keep and "PIP_CERT" not in keep and "PIP_INDEX_URL" not in keep
    assert request_json(ProbeRequest(apt=("jq",)), c)["ca_file"] == CA_PATH


def answer(data: dict[str, object], *, exit_code: int = 0, noise: str = "banner\n") -> RunResult:
    return RunResult(exit_code=exit_code, stdout=noise + MARK + json.dumps(data) + "\n", stderr="")


def test_parse_probe_answer() -> None:
    out = parse_output(answer({
        "python": "3.11.2", "tags": ["py3-none-any"], "installed": {"pyyaml": "6.0"},
        "installed_after_remove": {}, "build_pip": {"te": {"install": []}},
        "pip": {"install": [{"name": "demo-a", "version": "1.0", "url": "http://i/a.whl", "sha256": "a" * 64,
                             "requested": True}]},
        "apt": {"offered": {"jq": ["1.6-2.1"]}}}), "img", cfg())
    assert out.python == "3.11.2" and out.tags == ("py3-none-any",)
    assert [(i.name, i.version, i.sha256, i.requested) for i in out.pip] == [("demo-a", "1.0", "a" * 64, True)]
    assert dict(out.apt) == {"jq": ("1.6-2.1",)} and dict(out.build_pip) == {"te": ()}


def test_parse_probe_errors() -> None:
    resolution = "ERROR: Cannot install pyyaml>=6.0.1 because ...\nERROR: ResolutionImpossible: ..."
    with pytest.raises(LockError, match=r"pip cannot resolve the pip requirements inside img") as exc:
        parse_output(answer({"pip": {"error": resolution, "constraints": ["/etc/pip/c.txt: PyYAML==6.0"]}}),
                     "img", cfg())
    assert "ResolutionImpossible" in str(exc.value)
    assert "the base's PIP_CONSTRAINT pins: /etc/pip/c.txt: PyYAML==6.0" in str(exc.value)
    net = "WARNING: Retrying ... Failed to establish a new connection: [Errno 111] Connection refused"
    with pytest.raises(UnreachableError, match=r"pip inside img cannot reach http://127.0.0.1:9/simple"):
        parse_output(answer({"pip": {"error": net}}), "img", cfg(pip_index_url="http://127.0.0.1:9/simple"))
    with pytest.raises(UnreachableError, match=r"apt inside img cannot reach its package sources"):
        parse_output(answer({"apt": {"error": "Err:1 http://deb.debian.org bookworm InRelease\n"
                                              "  Temporary failure resolving 'deb.debian.org'"}}), "img", cfg())
    with pytest.raises(LockError, match=r"pip in img is too old"):
        parse_output(answer({"pip": {"error": "no such option: --report"}}), "img", cfg())
    with pytest.raises(LockError, match=r"another CPU architecture"):
        parse_output(RunResult(exit_code=1, stdout="", stderr="exec /usr/bin/python3: exec format error"), "img", cfg())
    with pytest.raises(LockError, match=r"did not finish in time"):
        parse_output(RunResult(exit_code=137, stdout="", stderr="", timed_out=True), "img", cfg())
