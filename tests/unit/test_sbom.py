"""sbom.py: CycloneDX 1.6 of a BOM, validated against the schema by cyclonedx-python-lib (pure)."""

from __future__ import annotations

import json

import pytest

from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedPatch, LockedPick, LockedPr, VariantLock
from buildctl.ship import bom, sbom
from tests.unit.fakes_ship import Image, Run

BASE_DIGEST = "sha256:" + "9" * 64
MANIFEST_DIGEST = "sha256:" + "3" * 64
LABELS = {"io.buildctl.component.fastmath": "a" * 40, "io.buildctl.component.demo-trainer": "b" * 40,
          "org.opencontainers.image.base.digest": BASE_DIGEST,
          "org.opencontainers.image.base.name": "127.0.0.1:5000/buildctl/demo-base:bookworm",
          "io.buildctl.stack": "demo", "io.buildctl.variant": "default", "io.buildctl.lock-hash": "f" * 64}
LISTING = {"python": "3.11.2", "pip": {"PyYAML": "6.0", "fastmath": "0.1.0+g2ce4723", "six": "1.16.0"},
           "shadowed": {"six": ["1.15.0"]}, "deb": {"jq": "1.6-2.1", "libc6": "2.36-9+deb12u4", "tzdata": "2024a-0+deb12u1"},
           "deb_arch": {"jq": "amd64", "libc6": "amd64", "tzdata": "all"},
           "os": {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"}, "errors": {}}
VLOCK = VariantLock(
    base=LockedBase(ref="127.0.0.1:5000/buildctl/demo-base:bookworm", digest=BASE_DIGEST, platform="linux/amd64"),
    components={"fastmath": LockedComponent(
        name="fastmath", repo="../demo/sources/fastmath.bundle", commit="c" * 40, tree="a" * 40,
        changes=(LockedPr(number=7, head="d" * 40, commits=("5" * 40, "d" * 40)), LockedPick(sha="6" * 40),
                 LockedPatch(file="fix.patch", sha256="e" * 64)))})


def the_bom(listing: dict[str, object] | None = None, labels: dict[str, str] | None = None,
            repo_digests: tuple[str, ...] = (f"127.0.0.1:5000/buildctl/demo@{MANIFEST_DIGEST}",)) -> bom.Bom:
    info = Image(id="sha256:" + "2" * 64, labels=LABELS if labels is None else labels, repo_digests=repo_digests)
    return bom.from_image(info, "127.0.0.1:5000/buildctl/demo:default-0123", Run(stdout=json.dumps(listing or LISTING)))


def test_the_cyclonedx_document_validates_and_names_packages_by_purl() -> None:
    text = sbom.cyclonedx(the_bom(), VLOCK)
    sbom.validate(text)  # again, explicitly: the schema accepts it
    doc = json.loads(text)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    by_purl = sbom.components_by_purl(text)
    assert {"pkg:pypi/pyyaml@6.0", "pkg:pypi/six@1.16.0", "pkg:pypi/fastmath@0.1.0%2Bg2ce4723"} <= set(by_purl)
    assert by_purl["pkg:pypi/six@1.16.0"]["properties"] == [{"name": "buildctl:shadows", "value": "1.15.0"}]
    assert "pkg:deb/debian/jq@1.6-2.1?arch=amd64&distro=debian-12" in by_purl
    assert "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all&distro=debian-12" in by_purl
    base = by_purl[f"pkg:oci/demo-base@sha256:{'9' * 64}?repository_url=127.0.0.1:5000/buildctl/demo-base&tag=bookworm"]
    assert base["type"] == "container" and base["hashes"] == [{"alg": "SHA-256", "content": "9" * 64}]
    image = doc["metadata"]["component"]
    assert image["type"] == "container" and image["version"] == MANIFEST_DIGEST
    assert image["purl"] == f"pkg:oci/demo@{MANIFEST_DIGEST}?repository_url=127.0.0.1:5000/buildctl/demo"
    assert {"name": "buildctl:image-id", "value": "sha256:" + "2" * 64} in image["properties"]
    [dep] = [d for d in doc["dependencies"] if d["ref"] == "image"]
    assert len(dep["dependsOn"]) == len(doc["components"])  # the image is made of everything listed


def test_components_carry_their_commits_from_the_lock_and_only_the_label_without_it() -> None:
    doc = json.loads(sbom.cyclonedx(the_bom(), VLOCK))
    comps = {c["bom-ref"]: c for c in doc["components"]}
    fm = comps["component:fastmath"]
    assert fm["version"] == "a" * 40
    assert fm["purl"] == f"pkg:generic/fastmath@{'a' * 40}?vcs_url=git%2B../demo/sources/fastmath.bundle%40{'c' * 40}"
    assert {(c["uid"], c["message"]) for c in fm["pedigree"]["commits"]} == {
        ("c" * 40, "base commit"), ("d" * 40, "PR #7 head"), ("5" * 40, "applied from PR #7 (own-commits)"),
        ("6" * 40, "cherry-picked"), ("a" * 40, "prepared: the base commit with the changes applied")}
    assert fm["pedigree"]["ancestors"][0]["version"] == "c" * 40
    props = {p["name"]: p["value"] for p in fm["properties"]}
    assert props["buildctl:tree"] == "a" * 40 and props["buildctl:pr:7"] == "d" * 40
    assert props["buildctl:patch:fix.patch"] == "sha256:" + "e" * 64
    # demo-trainer is not in this lock: its label's commit, no pedigree
    dt = comps["component:demo-trainer"]
    assert dt["version"] == "b" * 40 and "pedigree" not in dt
    assert json.loads(sbom.cyclonedx(the_bom()))["components"]  # no lock at all: still valid


def test_an_image_without_python_or_dpkg_still_gives_a_valid_document() -> None:
    b = bom.from_image(Image(), "scratchy:1", Run(exit_code=127, stderr='exec: "python3": executable file not found'))
    doc = json.loads(sbom.cyclonedx(b))
    assert doc["metadata"]["component"]["version"] == "sha256:" + "1" * 64  # no registry digest: the image id
    assert doc.get("components", []) == []
    assert {p["name"] for p in doc["metadata"]["properties"]} == {"buildctl:not-read:deb", "buildctl:not-read:pip"}


def test_a_document_the_schema_refuses_is_an_error() -> None:
    text = sbom.cyclonedx(the_bom())
    broken = json.loads(text)
    broken["components"][0]["type"] = "no-such-type"
    with pytest.raises(sbom.InvalidDocument, match=r"does not validate against the 1\.6 schema"):
        sbom.validate(json.dumps(broken))


def test_the_default_output_is_unchanged_by_what_the_standard_formats_read() -> None:
    b = the_bom()
    assert set(b.to_json()) == {"schema", "image", "image_id", "platform", "python", "pip", "deb", "components",
                                "base", "labels", "env", "shadowed", "errors"}
    assert b.deb_arch["tzdata"] == "all" and b.os_release["VERSION_ID"] == "12"
