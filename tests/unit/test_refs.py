"""refs.py: docker's reference rules, and registry mirrors."""

from __future__ import annotations

import pytest

from buildctl import refs
from buildctl.errors import UsageError

D = "sha256:" + "c" * 64


@pytest.mark.parametrize(("text", "registry", "repository", "tag", "digest", "name"), [
    ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io", "nvidia/pytorch", "25.09-py3", None, "nvcr.io/nvidia/pytorch"),
    ("127.0.0.1:5000/buildctl/demo-base:bookworm", "127.0.0.1:5000", "buildctl/demo-base", "bookworm", None,
     "127.0.0.1:5000/buildctl/demo-base"),
    ("ubuntu:24.04", "docker.io", "library/ubuntu", "24.04", None, "ubuntu"),
    ("hiyouga/verl:ngc-th2.6.0", "docker.io", "hiyouga/verl", "ngc-th2.6.0", None, "hiyouga/verl"),
    ("localhost/x", "localhost", "x", None, None, "localhost/x"),
    (f"reg:5000/a/b@{D}", "reg:5000", "a/b", None, D, "reg:5000/a/b"),
    (f"reg:5000/a/b:t@{D}", "reg:5000", "a/b", "t", D, "reg:5000/a/b"),
])
def test_parse(text: str, registry: str, repository: str, tag: str | None, digest: str | None, name: str) -> None:
    r = refs.parse(text)
    assert (r.registry, r.repository, r.tag, r.digest, r.name) == (registry, repository, tag, digest, name)
    if registry != "docker.io":
        assert str(r) == text


@pytest.mark.parametrize("bad", ["Reg/UPPER:t", "a/b@sha256:123", "a/b:bad tag", ""])
def test_parse_refuses_bad_references(bad: str) -> None:
    with pytest.raises(UsageError):
        refs.parse(bad)


def test_mirrored_rewrites_only_the_configured_registry() -> None:
    ref = refs.parse("nvcr.io/nvidia/pytorch:25.09-py3")
    assert str(refs.mirrored(ref, {"nvcr.io": "mirror:5000"})) == "mirror:5000/nvidia/pytorch:25.09-py3"
    assert refs.mirrored(ref, {"docker.io": "m:1"}) == ref
    assert str(ref.with_digest(D)) == f"nvcr.io/nvidia/pytorch@{D}"
