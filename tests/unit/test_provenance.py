"""provenance.py: the in-toto statement names every locked input; the lock must be the image's (pure)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from buildctl.errors import LockError, UsageError
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock, VariantLock
from buildctl.ship import provenance
from tests.helpers import unnamed_lock_values
from tests.unit.fakes_ship import FakeEngine, Image

SHA = {c: c * 40 for c in "0123456789abcdef"}
H = {c: c * 64 for c in "0123456789abcdef"}

# A lock (schema 2) of every kind of entry: the demo stack's shape, plus a cherry-pick, a PR applied by its
# own commits with a merge of its target skipped and a commit it dragged in, a PR applied by merge and
# merged upstream, a patch, a submodule, a build pip pin and a pip requirement the base satisfies.
LOCK = {
    "base": {"ref": "127.0.0.1:5000/buildctl/demo-base:bookworm", "digest": "sha256:" + H["9"],
             "platform": "linux/amd64"},
    "apt": {"jq": "1.6-2.1", "less": "590-2.1~deb12u2"},
    "build_apt": {"fastmath": {"gcc": "4:12.2.0-3", "python3-dev": "3.11.2-1+b1"}},
    "downloads": {"hello-deb": {"url": "http://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3_amd64.deb",
                                "sha256": H["2"], "computed": False},
                  "hello-source": {"url": "http://deb.debian.org/debian/pool/main/h/hello/hello_2.10.orig.tar.gz",
                                   "sha256": H["3"], "computed": True}},
    "pip": [{"name": "six", "version": "1.16.0", "hashes": ["sha256:" + H["4"], "sha256:" + H["5"]],
             "in_base": False},
            {"name": "pyyaml", "version": "6.0", "hashes": [], "in_base": True}],
    "build_pip": {"fastmath": [{"name": "setuptools", "version": "69.5.1", "hashes": ["sha256:" + H["6"]],
                                "in_base": False}]},
    "components": {
        "fastmath": {"repo": "../demo/sources/fastmath.bundle", "base": SHA["1"],
                     "changes": [{"kind": "commit", "sha": SHA["9"]},
                                 {"kind": "pr", "number": 7, "head": SHA["2"], "mode": "own-commits", "target": "main",
                                  "commits": [SHA["a"], SHA["2"]], "skipped_merges": [SHA["b"]], "empty": []},
                                 {"kind": "patch", "file": "patches/fix.patch", "sha256": H["7"]}],
                     "dragged": [{"sha": SHA["c"], "subject": "Remove a dependency", "by": "PR #7"}],
                     "submodules": {"third_party/x": SHA["3"]}, "tree": SHA["4"], "branch_head": SHA["5"]},
        "demo-trainer": {"repo": "../demo/sources/demo-trainer.bundle", "base": SHA["6"],
                         "changes": [{"kind": "pr", "number": 3, "head": SHA["7"], "mode": "merge", "target": "main",
                                      "commits": [SHA["7"]], "skipped_merges": [], "empty": [],
                                      "merged_upstream": {"how": "merge", "commit": SHA["d"]}}],
                         "dragged": [], "submodules": {}, "tree": SHA["8"], "branch_head": ""}},
    "resolved_at": "2026-12-01T00:00:00Z",
}
@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins" / "demo.yaml").write_text("stack: demo\n")
    lockfile.write(tmp_path / "pins" / "demo.lock.json",
                   Lock(stack="demo", manifest_sha256=H["a"], variants={"default": VariantLock.from_json(LOCK)}))
    return tmp_path


def vlock() -> VariantLock:
    return VariantLock.from_json(LOCK)


def labels(lock_hash: str | None = None) -> dict[str, str]:
    return {"io.buildctl.stack": "demo", "io.buildctl.variant": "default",
            "io.buildctl.lock-hash": lock_hash or vlock().digest(),
            "org.opencontainers.image.base.digest": "sha256:" + H["9"],
            "org.opencontainers.image.created": "2026-12-01T10:00:00Z"}


def statement(project: Path) -> dict[str, Any]:
    found = provenance.lock_for_image(project / "pins", labels(), "img")
    return provenance.statement(subject_name="127.0.0.1:5000/buildctl/demo", subject_digest="sha256:" + H["e"],
                                found=found, labels=labels(), image_id="sha256:" + H["f"], project=project)


def test_the_statement_is_in_toto_v1_with_slsa_provenance_v1_for_the_manifest_digest(project: Path) -> None:
    s = statement(project)
    assert s["_type"] == "https://in-toto.io/Statement/v1"
    assert s["predicateType"] == "https://slsa.dev/provenance/v1"
    assert s["subject"] == [{"name": "127.0.0.1:5000/buildctl/demo", "digest": {"sha256": H["e"]}}]
    bd = s["predicate"]["buildDefinition"]
    assert bd["buildType"] == provenance.BUILD_TYPE
    assert bd["externalParameters"] == {"stack": "demo", "variant": "default",
                                        "manifest": {"uri": "pins/demo.yaml", "digest": {"sha256": H["a"]}}}
    assert bd["internalParameters"]["lockHash"] == vlock().digest()
    recorded = json.loads((project / "pins" / "demo.lock.json").read_text())["integrity"]["sha256"]
    assert bd["internalParameters"]["lockIntegritySha256"] == recorded
    run = s["predicate"]["runDetails"]
    assert run["builder"]["id"] == provenance.BUILDER_ID and run["metadata"] == {"finishedOn": "2026-12-01T10:00:00Z"}
    assert run["byproducts"] == [{"name": "image config", "digest": {"sha256": H["f"]}}]
    for rd in bd["resolvedDependencies"]:  # every ResourceDescriptor names something and is hashable text
        assert rd.get("uri") or rd.get("digest"), rd
        assert all(isinstance(v, str) for v in (rd.get("digest") or {}).values())
    assert json.loads(provenance.to_text(s)) == s


def test_every_locked_entry_appears_in_the_resolved_dependencies(project: Path) -> None:
    deps = statement(project)["predicate"]["buildDefinition"]["resolvedDependencies"]
    missing = unnamed_lock_values(vlock().to_json(), deps)
    assert missing == []
    # and the inputs by kind, each with its digest where the lock has one
    by_uri = {(d.get("uri"), json.dumps(d.get("digest"), sort_keys=True)) for d in deps}
    assert (f"pkg:oci/demo-base@sha256:{H['9']}?repository_url=127.0.0.1:5000/buildctl/demo-base&tag=bookworm",
            json.dumps({"sha256": H["9"]})) in by_uri
    assert (f"git+../demo/sources/fastmath.bundle@{SHA['1']}", json.dumps({"gitCommit": SHA["1"]})) in by_uri
    assert ("git+../demo/sources/fastmath.bundle@refs/pull/7/head", json.dumps({"gitCommit": SHA["2"]})) in by_uri
    assert ("git+../demo/sources/fastmath.bundle", json.dumps({"gitCommit": SHA["4"]})) in by_uri  # prepared
    for sha in ("9", "a", "c"):  # the cherry-pick, the PR's commit applied, the commit it dragged in
        assert (f"git+../demo/sources/fastmath.bundle@{SHA[sha]}", json.dumps({"gitCommit": SHA[sha]})) in by_uri
    assert not [d for d in deps if SHA["b"] in json.dumps(d)]  # a merge of the target that was left out is no input
    roles = [d["annotations"].get("role", d["annotations"]["kind"]) for d in deps
             if d["annotations"].get("component") == "fastmath"]
    assert roles == ["base commit", "cherry-picked commit", "pull request head", "commit of PR #7",
                     "commit of PR #7", "patch", "dragged in by PR #7", "submodule",
                     "prepared commit (base commit with the changes applied)"]
    assert ("git+../demo/sources/fastmath.bundle#third_party/x", json.dumps({"gitCommit": SHA["3"]})) in by_uri
    assert ("patches/fix.patch", json.dumps({"sha256": H["7"]})) in by_uri
    assert (LOCK["downloads"]["hello-source"]["url"], json.dumps({"sha256": H["3"]})) in by_uri  # type: ignore[index]
    for h in ("4", "5"):  # one descriptor per file pip may install
        assert ("pkg:pypi/six@1.16.0", json.dumps({"sha256": H[h]})) in by_uri
    assert ("pkg:pypi/setuptools@69.5.1", json.dumps({"sha256": H["6"]})) in by_uri
    assert [d["annotations"] for d in deps if d.get("uri") == "pkg:pypi/pyyaml@6.0"] == [
        {"kind": "pip", "scope": "runtime", "in-base": "true"}]
    assert ("pkg:deb/jq@1.6-2.1?arch=amd64", "null") in by_uri
    assert [d["annotations"]["scope"] for d in deps if d.get("uri", "").startswith("pkg:deb/python3-dev@")] == [
        "build:fastmath"]
    [lock] = [d for d in deps if d["annotations"]["kind"] == "lock"]
    assert lock["uri"] == "pins/demo.lock.json" and lock["annotations"]["lock-hash"] == vlock().digest()
    assert lock["digest"] == {"sha256": hashlib.sha256((project / "pins" / "demo.lock.json").read_bytes()).hexdigest()}


def test_a_lock_that_moved_on_since_the_build_is_refused(project: Path) -> None:
    with pytest.raises(LockError, match=r"is not the lock img was built from") as exc:
        provenance.lock_for_image(project / "pins", labels(lock_hash="0" * 64), "img")
    assert "re-locked since the build" in exc.value.why
    with pytest.raises(LockError, match="built without a lock"):
        provenance.lock_for_image(project / "pins", labels(lock_hash="unlocked"), "img")
    with pytest.raises(UsageError, match="was not built by buildctl"):
        provenance.lock_for_image(project / "pins", {}, "img")
    (project / "pins" / "demo.lock.json").unlink()
    with pytest.raises(LockError, match="has none"):
        provenance.lock_for_image(project / "pins", labels(), "img")


def test_labels_that_disagree_with_the_lock_about_the_base_are_refused(project: Path) -> None:
    found = provenance.lock_for_image(project / "pins", labels(), "img")
    with pytest.raises(LockError, match="says its base is"):
        provenance.statement(subject_name="r", subject_digest="sha256:" + H["e"], found=found,
                             labels={**labels(), "org.opencontainers.image.base.digest": "sha256:" + H["0"]})


def test_the_subject_is_the_registry_manifest_digest(project: Path) -> None:
    d1, d2 = "sha256:" + H["c"], "sha256:" + H["d"]
    info = Image(repo_digests=(f"127.0.0.1:5000/a/entrypoint@{d1}", f"127.0.0.1:5000/b@{d2}"), labels=labels())
    assert provenance.subject_of(info, "127.0.0.1:5000/b:default-1") == ("127.0.0.1:5000/b", d2)
    assert provenance.subject_of(info, f"127.0.0.1:5000/a/entrypoint@{d1}") == ("127.0.0.1:5000/a/entrypoint", d1)
    with pytest.raises(UsageError, match="several repositories under different manifest digests"):
        provenance.subject_of(info, "local:tag")
    with pytest.raises(UsageError, match="never pushed or pulled") as exc:
        provenance.subject_of(Image(labels=labels()), "local:tag")
    assert "--attest provenance" in exc.value.fix
    one = Image(repo_digests=(f"127.0.0.1:5000/a/entrypoint@{d1}",), labels=labels())
    engine = FakeEngine(images={"local:tag": one})
    s = provenance.for_image(engine, project / "pins", "local:tag", project)
    assert s["subject"] == [{"name": "127.0.0.1:5000/a/entrypoint", "digest": {"sha256": H["c"]}}]
