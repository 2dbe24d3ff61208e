"""lock/archive.py: REF parsing as untrusted input, and the archive filed by lock hash (pure: files in tmp_path)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from buildctl.errors import LockError, UsageError
from buildctl.lock import archive, lockfile
from buildctl.lock.archive import LockArchive, Ref, parse_ref
from buildctl.lock.lockfile import Lock, VariantLock
from tests.unit.test_lock_drift import base_lock

H = "ab" * 32


@pytest.mark.parametrize(("text", "kind", "value"), [
    (H, "hash", H),
    (H[:12], "hash", H[:12]),
    (f"lock:{H[:20]}", "hash", H[:20]),
    ("file:old.json", "file", "old.json"),
    ("locks/good.lock.json", "file", "locks/good.lock.json"),
    ("127.0.0.1:5000/buildctl/demo:latest", "image", "127.0.0.1:5000/buildctl/demo:latest"),
    (f"reg.example/a/b@sha256:{H}", "image", f"reg.example/a/b@sha256:{H}"),
    ("image:demo", "image", "demo"),
    ("registry.local:5000/team/img:default-0123", "image", "registry.local:5000/team/img:default-0123"),
])
def test_what_a_ref_names(text: str, kind: str, value: str, tmp_path: Path) -> None:
    assert parse_ref(text, cwd=tmp_path) == Ref(kind=kind, value=value)  # type: ignore[arg-type]


def test_an_existing_file_is_a_file_whatever_its_name(tmp_path: Path) -> None:
    (tmp_path / "good").write_text("{}")
    assert parse_ref("good", cwd=tmp_path) == Ref(kind="file", value="good")


@pytest.mark.parametrize("text", ["", "-rf", "--good", "a\nb", "x\x00y", "lock:XYZ", "lock:abc", "lock:" + "a" * 65,
                                  "Upper/Case:tag", "a b", "reg/x:tag;rm -rf /", "$(id)", "x" * 600,
                                  "image:has space", "image:../../etc", "demo:tag@sha256:short"])
def test_anything_else_is_refused_as_a_usage_error(text: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        parse_ref(text, cwd=tmp_path)


def variant() -> VariantLock:
    v = base_lock()  # its file hashes made well-formed: a lock that the schema accepts
    return replace(v, pip=tuple(replace(p, hashes=(f"sha256:{'1' * 64}",)) for p in v.pip),
                   build_pip={c: tuple(replace(p, hashes=(f"sha256:{'2' * 64}",)) for p in ps)
                              for c, ps in v.build_pip.items()})


def lock() -> Lock:
    return Lock(stack="demo", manifest_sha256="0" * 64, variants={"default": variant()})


def test_a_lock_is_filed_by_its_variant_hash_once_and_found_by_a_prefix(tmp_path: Path) -> None:
    store = LockArchive(tmp_path / "locks")
    kept = store.save(lock())
    digest = variant().digest()
    assert [(a.variant, a.lock_hash) for a in kept] == [("default", digest)]
    assert kept[0].path == tmp_path / "locks" / "demo" / f"{digest}.lock.json"
    assert kept[0].path.read_text() == lockfile.to_text(lock())
    mtime = kept[0].path.stat().st_mtime_ns
    store.save(lock())
    assert kept[0].path.stat().st_mtime_ns == mtime  # written once
    found = store.find("demo", digest[:12])
    assert found is not None and found[1:] == ("default", digest) and found[0].variants["default"].digest() == digest
    assert store.find("demo", "f" * 12) is None
    with pytest.raises(UsageError):
        store.find("../etc", digest[:12])
    with pytest.raises(UsageError):
        store.find("demo", "*")


def test_a_file_under_a_hash_it_does_not_hold_and_a_hand_edited_lock_are_refused(tmp_path: Path) -> None:
    store = LockArchive(tmp_path / "locks")
    (tmp_path / "locks" / "demo").mkdir(parents=True)
    wrong = tmp_path / "locks" / "demo" / f"{'c' * 64}.lock.json"
    wrong.write_text(lockfile.to_text(lock()))
    with pytest.raises(LockError, match="no variant of this lock has the hash"):
        store.find("demo", "c" * 12)
    edited = lockfile.to_text(lock()).replace('"jq": "1.6-2.1"', '"jq": "9.9"')
    with pytest.raises(LockError, match="edited"):
        archive.from_text(edited, "x.lock.json")
