"""Registry content buildctl did not write, against a real registry (Debian's docker-registry, distribution 2.8,
on 127.0.0.1, started here): issue 33, item 3. distribution stores config blobs as given and ignores a
manifest's unknown ``subject`` field, so what another tool (or a person with curl) can put there is put there:
a config blob that is a JSON list, one whose ``Labels`` is a list, an artifact whose ``subject`` is a string
listed in the referrers tag. `bisect --good image:REF`'s label read refuses such an image by name;
`buildctl evidence IMAGE` and promotion leave such a referrer out and name it. No AttributeError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.errors import LockError
from buildctl.imageref import ImageRef
from buildctl.registry.registry import (
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    canonical_json,
    referrers_tag,
)
from buildctl.services import evidence, lockarchive
from buildctl.ship import evidence as ev
from tests.integration.test_registry_client import Registry

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    r = Registry(tmp_path_factory.mktemp("odd"))
    yield r
    r.stop()


def _image(client: RegistryClient, repo: str, config: object) -> str:
    """An image whose config blob is ``config`` as JSON, tagged v1: its manifest digest."""
    cfg = client.push_blob(repo, json.dumps(config).encode(), CONFIG_TYPE)
    layer = client.push_blob(repo, b"layer of " + repo.encode(), "application/vnd.oci.image.layer.v1.tar")
    data = canonical_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg.to_json(),
                           "layers": [layer.to_json()]})
    return client.put_manifest(repo, "v1", data, OCI_MANIFEST)[0].digest


@pytest.mark.parametrize("repo, config, named", [
    ("odd/list", ["a", "list"], "the config blob: expected an object, got a list"),
    ("odd/config-string", {"config": "a string", "rootfs": {"type": "layers", "diff_ids": []}},
     "config: expected an object, got a string"),
    ("odd/labels-list", {"config": {"Labels": ["io.buildctl.lock-hash=abc"]}}, "config.Labels: expected an object"),
])
def test_bisect_image_ref_whose_config_is_of_other_types_is_refused_by_name(reg: Registry, repo: str,
                                                                            config: object, named: str) -> None:
    client = RegistryClient(reg.addr)
    _image(client, repo, config)
    with pytest.raises(LockError, match="is not an image config") as caught:
        lockarchive._labels_from_registry(client, ImageRef.parse(f"{reg.addr}/{repo}:v1"))
    assert named in caught.value.what and f"{reg.addr}/{repo}:v1" in caught.value.what


def test_evidence_lists_an_odd_referrer_as_a_problem_and_exits_0(reg: Registry, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    client = RegistryClient(reg.addr)
    repo = "odd/evidence"
    subject = _image(client, repo, {"architecture": "amd64", "os": "linux",
                                    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]},
                                    "config": {"Labels": {"io.buildctl.stack": "demo"}}})
    empty = client.push_blob(repo, b"{}", OCI_EMPTY)
    payload = client.push_blob(repo, b'{"not": "evidence"}', ev.ARTIFACT_TYPE)
    odd = canonical_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ev.ARTIFACT_TYPE,
                          "config": empty.to_json(), "layers": [payload.to_json()], "subject": subject})
    odd_desc = client.put_manifest(repo, "odd-referrer", odd, OCI_MANIFEST)[0]
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {**odd_desc.to_json(), "artifactType": ev.ARTIFACT_TYPE}]})
    client.put_manifest(repo, referrers_tag(subject), index, OCI_INDEX)

    found, problems = evidence.read(client, f"{reg.addr}/{repo}", subject)  # what promotion reads too
    assert found == []
    [line] = problems
    assert odd_desc.digest in line and "subject: expected an object, got a string" in line

    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(tmp_path / "none.toml"))
    assert cli.main(["--project", str(tmp_path), "evidence", f"{reg.addr}/{repo}:v1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["evidence"] == [] and odd_desc.digest in shown["problems"][0]
