"""Registry content buildctl did not write (issue 33, item 3): every value read from a registry has its type
checked before use (buildctl/untrusted.py). A config blob that is a JSON list, its ``config`` a string or its
``Labels`` a list (`bisect --good image:REF`); a referrer whose manifest is a list or whose ``subject`` is a
string (`buildctl evidence IMAGE`, promotion in `push --promote` and `nightly`): each gave AttributeError.
Now the image REF is refused by name, and an odd referrer is left out and named, never a traceback.
Pure: a data fake of the registry slice (the same cases against a real registry: tests/integration)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from buildctl.errors import LockError, UsageError
from buildctl.imageref import ImageRef
from buildctl.registry import attest
from buildctl.registry.registry import OCI_MANIFEST, Descriptor, sha256_digest
from buildctl.services import evidence, lockarchive
from buildctl.ship import evidence as ev

REG = "127.0.0.1:5999"
SUBJECT = sha256_digest(b"the image")


class FakeRegistry:
    """manifests and blobs by digest (tags too), and a referrers list per subject."""

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.refs: dict[str, list[Descriptor]] = {}

    def put(self, body: Any, *, tag: str = "") -> str:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        d = sha256_digest(data)
        self.manifests[d] = data
        if tag:
            self.manifests[tag] = data
        return d

    def blob(self, body: Any) -> str:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.blobs[sha256_digest(data)] = data
        return sha256_digest(data)

    def manifest(self, repo: str, reference: str) -> tuple[bytes, Descriptor] | None:
        got = self.manifests.get(reference)
        return None if got is None else (got, Descriptor(media_type=OCI_MANIFEST, digest=sha256_digest(got),
                                                          size=len(got)))

    def get_blob(self, repo: str, digest: str, *, limit: int = 0) -> bytes | None:
        return self.blobs.get(digest)

    def referrers(self, repo: str, subject: str, artifact_type: str = "") -> list[Descriptor]:
        return [d for d in self.refs.get(subject, []) if not artifact_type or d.artifact_type == artifact_type]

    def attach(self, *a: Any, **k: Any) -> Descriptor:  # pragma: no cover (not used here)
        raise AssertionError


def _referrer(reg: FakeRegistry, manifest: Any) -> str:
    d = reg.put(manifest)
    reg.refs.setdefault(SUBJECT, []).append(Descriptor(media_type=OCI_MANIFEST, digest=d, size=1,
                                                       artifact_type=ev.ARTIFACT_TYPE))
    return d


def _layer(reg: FakeRegistry, payload: bytes) -> dict[str, Any]:
    return {"mediaType": ev.ARTIFACT_TYPE, "digest": reg.blob(payload), "size": len(payload)}


@pytest.mark.parametrize("manifest, named", [
    (["a", "list"], "the manifest: expected an object, got a list"),
    ("a string", "the manifest: expected an object, got a string"),
    ({"subject": "sha256:" + "1" * 64, "layers": []}, "subject: expected an object, got a string"),
    ({"subject": ["x"], "layers": []}, "subject: expected an object, got a list"),
    ({"subject": {"digest": "sha256:" + "2" * 64}, "layers": []}, "subject: names sha256:2222"),
    ({"subject": {"digest": SUBJECT}, "layers": {"a": 1}}, "layers: expected a list, got an object"),
    ({"subject": {"digest": SUBJECT}, "layers": ["x"]}, "a descriptor is not an object"),
    ({"subject": {"digest": SUBJECT}, "layers": [{"digest": 5}]}, "malformed descriptor"),
])
def test_an_odd_referrer_is_left_out_and_named_the_good_one_still_counts(manifest: Any, named: str) -> None:
    reg = FakeRegistry()
    odd = _referrer(reg, manifest)
    payload = b'{"not": "evidence"}'
    good = _referrer(reg, {"subject": {"digest": SUBJECT}, "layers": [_layer(reg, payload)]})
    problems: list[str] = []
    found = attest.find(reg, f"{REG}/demo", SUBJECT, ev.ARTIFACT_TYPE, problems)
    assert [(d.digest, body) for d, body in found] == [(good, payload)]
    [line] = problems
    assert line.startswith(f"{REG}/demo@{odd}: referrer of {SUBJECT} left out: ") and named in line
    # what `buildctl evidence IMAGE` and promotion read: the odd one and the payload that is no evidence, named
    got, probs = evidence.read(reg, f"{REG}/demo", SUBJECT)
    assert got == [] and len(probs) == 2 and named in probs[0] and "not smoke evidence" in probs[1]


def test_a_deep_referrer_manifest_is_refused_by_the_bounded_reader() -> None:
    reg = FakeRegistry()
    _referrer(reg, b"[" * 100_000)
    problems: list[str] = []
    assert attest.find(reg, f"{REG}/demo", SUBJECT, ev.ARTIFACT_TYPE, problems) == []
    assert "nested more than" in problems[0]


def _image(reg: FakeRegistry, config: Any) -> ImageRef:
    cfg = reg.blob(config)
    reg.put({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
             "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": 2},
             "layers": []}, tag="v1")
    return ImageRef.parse(f"{REG}/demo:v1")


@pytest.mark.parametrize("config, named", [
    (["a", "list"], "the config blob: expected an object, got a list"),
    ({"config": "a string"}, "config: expected an object, got a string"),
    ({"config": {"Labels": ["io.buildctl.lock=abc"]}}, "config.Labels: expected an object, got a list"),
    ({"config": {"Labels": {"io.buildctl.lock": 7}}}, "config.Labels.io.buildctl.lock: expected a string"),
    (b"[" * 100_000, "nested more than"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_bisect_image_ref_with_a_config_blob_of_other_types_is_refused_by_name(config: Any, named: str) -> None:
    reg = FakeRegistry()
    ref = _image(reg, config)
    with pytest.raises(LockError, match="is not an image config") as caught:
        lockarchive._labels_from_registry(reg, ref)  # type: ignore[arg-type]
    assert named in caught.value.what and "127.0.0.1:5999/demo:v1" in caught.value.what


@pytest.mark.parametrize("manifest", [["x"], {"config": "sha256:x"}, {"config": {"digest": 5}}, {"layers": []}])
def test_bisect_image_ref_whose_manifest_is_not_an_image_manifest(manifest: Any) -> None:
    reg = FakeRegistry()
    reg.put(manifest, tag="v1")
    with pytest.raises(UsageError, match="is not a single-platform image manifest"):
        lockarchive._labels_from_registry(reg, ImageRef.parse(f"{REG}/demo:v1"))  # type: ignore[arg-type]


def test_labels_of_a_good_config_are_read() -> None:
    reg = FakeRegistry()
    ref = _image(reg, {"config": {"Labels": {"io.buildctl.lock": "abc"}}})
    labels, digest = lockarchive._labels_from_registry(reg, ref)  # type: ignore[arg-type]
    assert labels == {"io.buildctl.lock": "abc"} and digest == sha256_digest(reg.manifests["v1"])


@pytest.mark.parametrize("config, named", [
    (["a", "list"], "the config blob: expected an object, got a list"),
    ({"rootfs": "x"}, "rootfs: expected an object, got a string"),
    ({"rootfs": {"diff_ids": {}}}, "rootfs.diff_ids: expected a list, got an object"),
    ({"rootfs": {"diff_ids": []}, "config": "a string"}, "config: expected an object, got a string"),
    ({"rootfs": {"diff_ids": []}, "config": {"Labels": ["a=b"]}}, "config.Labels: expected an object, got a list"),
    ({"rootfs": {"diff_ids": []}, "history": ["x"]}, "history[0]: expected an object, got a string"),
])
def test_the_image_evidence_and_promotion_read_is_refused_by_name(config: Any, named: str) -> None:
    from buildctl.errors import PushError
    from buildctl.ship import sizes

    reg = FakeRegistry()
    _image(reg, config)
    with pytest.raises(PushError, match="its config is not an image config") as caught:
        sizes.remote_image(reg, f"{REG}/demo", "v1")
    assert named in caught.value.what


def test_an_image_manifest_that_is_a_list_is_refused_by_name() -> None:
    from buildctl.errors import PushError
    from buildctl.ship import sizes

    reg = FakeRegistry()
    reg.put(["x"], tag="v1")
    with pytest.raises(PushError, match=r"not an image manifest \(the manifest: expected an object, got a list\)"):
        sizes.remote_image(reg, f"{REG}/demo", "v1")


@pytest.mark.parametrize("page, named", [
    (["x"], "the project page: expected an object, got a list"),
    ({"files": "x"}, "files: expected a list, got a string"),
    ({"files": [["x"]]}, "files[0]: expected an object, got a list"),
    ({"files": [{"filename": 5, "url": "u"}]}, "files[0].filename: expected a string, got a number"),
    ({"files": [{"filename": "a.whl", "url": None}]}, "files[0].url: expected a string, got null"),
    ({"files": [{"filename": "a.whl", "url": "u", "hashes": ["sha256"]}]}, "files[0].hashes: expected an object"),
])
def test_a_package_index_page_of_other_types_is_refused_by_name(page: Any, named: str) -> None:
    from buildctl.sources.index import parse_project_page

    with pytest.raises(LockError, match="is not a PEP 691 project page") as caught:
        parse_project_page(json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json",
                           "https://user:s3cret@index.invalid/simple/x/")
    assert named in caught.value.what and "s3cret" not in caught.value.what


def test_a_referrers_index_entry_that_is_no_descriptor_is_left_out_when_reading_only() -> None:
    from buildctl.errors import PushError
    from buildctl.registry.registry import _index_entries

    good = {"mediaType": OCI_MANIFEST, "digest": SUBJECT, "size": 3, "artifactType": ev.ARTIFACT_TYPE}
    body = json.dumps({"manifests": ["x", {"digest": 5}, good, None]}).encode()
    assert [d.digest for d in _index_entries(body, "r", skip_malformed=True)] == [SUBJECT]
    with pytest.raises(PushError, match=r"r: manifests\[0\]: a descriptor is not an object"):
        _index_entries(body, "r")  # adding to the tag keeps every entry or refuses
    for odd in (b"[1]", b'{"manifests": "x"}', b"[" * 10_000):
        with pytest.raises(PushError, match="r: not an image index"):
            _index_entries(odd, "r", skip_malformed=True)
