"""Lock files are untrusted input (issue 11, defect 6): validated against their schema with clear errors and
no traceback, and carrying a hash of their own content, so that a hand edit is reported as one, naming the
entries it changed, and never mistaken for a manifest that moved on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildctl.errors import LockError
from buildctl.lock import lockcheck, lockfile
from buildctl.lock.lockfile import (
    Lock,
    LockedBase,
    LockedComponent,
    LockedDownload,
    LockedPip,
    LockedPr,
    LockHandEdited,
    VariantLock,
)

A, B, C = "a" * 40, "b" * 40, "c" * 40
H = "sha256:" + "d" * 64


def good_lock() -> Lock:
    v = VariantLock(
        base=LockedBase(ref="127.0.0.1:5000/demo/base:1", digest="sha256:" + "e" * 64, platform="linux/amd64"),
        apt={"jq": "1.6-2.1+deb12u2", "less": "590-2.1~deb12u2"},
        build_apt={"lib": {"gcc": "4:12.2.0-3"}},
        downloads={"tool": LockedDownload(name="tool", url="https://example.invalid/tool", sha256="f" * 64)},
        pip=(LockedPip(name="six", version="1.16.0", hashes=(H,)), LockedPip(name="pyyaml", version="6.0", in_base=True)),
        build_pip={"lib": (LockedPip(name="setuptools", version="69.5.1", hashes=(H,)),)},
        components={"lib": LockedComponent(name="lib", repo="../sources/lib.bundle", commit=A,
                                           changes=(LockedPr(number=7, head=B, commits=(B,)),), tree=C)},
        resolved_at="2026-12-01T00:00:00Z")
    return Lock(stack="demo", manifest_sha256="0" * 64, variants={"default": v})


@pytest.fixture
def lock_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.lock.json"
    lockfile.write(path, good_lock())
    return path


def edit_raw(path: Path, change: Any) -> None:
    """An edit by hand: the JSON changed, the integrity hash left as it was."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_a_lock_buildctl_wrote_reads_back(lock_file: Path) -> None:
    lock = lockfile.read(lock_file)
    assert lock == good_lock() and not lock.hand_edited
    assert "integrity" in json.loads(lock_file.read_text())


# ------------------------------------------------------------------------------ malformed (schema)

# (case, change to the JSON data or raw bytes, words the error holds)
MALFORMED: list[tuple[str, Any, str]] = [
    ("non-UTF-8 bytes", b'{"schema": 2, "stack": "\xff\xfe"}', "not UTF-8 text (byte 24"),
    ("100,000-deep JSON", b"[" * 100_000 + b"]" * 100_000, "nested more than"),
    ("apt version a number", lambda d: d["variants"]["default"]["apt"].update(jq=12),
     "variants.default.apt.jq: expected a string, got the number 12"),
    ("hashes a string", lambda d: d["variants"]["default"]["pip"][0].update(hashes=H),
     "variants.default.pip[0].hashes: expected a list, got the string"),
    ("in_base a string", lambda d: d["variants"]["default"]["pip"][1].update(in_base="no"),
     "variants.default.pip[1].in_base: expected true or false, got the string 'no'"),
    ("hash an option", lambda d: d["variants"]["default"]["pip"][0].update(hashes=["--index-url=http://evil"]),
     "variants.default.pip[0].hashes[0]: '--index-url=http://evil' is not sha256:<64 hex digits>"),
    ("pip version with a space", lambda d: d["variants"]["default"]["pip"][0].update(version="1.0 --pre"),
     "variants.default.pip[0].version: '1.0 --pre' is not a PEP 440 version"),
    ("apt version a pattern", lambda d: d["variants"]["default"]["apt"].update(jq="1.6*"),
     "variants.default.apt.jq: '1.6*' is not an exact apt version"),
    ("apt name an option", lambda d: d["variants"]["default"]["apt"].update({"-o=x": "1"}),
     "variants.default.apt.-o=x: the key '-o=x' is not an apt package name"),
    ("repo an option", lambda d: d["variants"]["default"]["components"]["lib"].update(
        repo="--upload-pack=touch PWNED;false:x ://"), "components.lib.repo: '--upload-pack=touch PWNED;false:x ://' "
     "must not start with '-'"),
    ("short base SHA", lambda d: d["variants"]["default"]["components"]["lib"].update(base="abc1234"),
     "components.lib.base: 'abc1234' is not a full 40-digit"),
    ("base digest newline", lambda d: d["variants"]["default"]["base"].update(digest="sha256:" + "e" * 64 + "\nRUN id"),
     "variants.default.base.digest:"),
    ("base ref", lambda d: d["variants"]["default"]["base"].update(ref="x AS y"), "variants.default.base.ref:"),
    ("download file://", lambda d: d["variants"]["default"]["downloads"]["tool"].update(url="file:///etc/shadow"),
     "variants.default.downloads.tool.url: 'file:///etc/shadow' uses the scheme 'file'"),
    ("patch outside", lambda d: d["variants"]["default"]["components"]["lib"]["changes"].append(
        {"kind": "patch", "file": "../../etc/shadow", "sha256": "f" * 64}),
     "components.lib.changes[1].file: '../../etc/shadow' must stay inside"),
    ("change kind", lambda d: d["variants"]["default"]["components"]["lib"]["changes"].append({"kind": "exec"}),
     "components.lib.changes[1].kind: expected one of 'pr', 'commit', 'patch'"),
    ("PR number 1e29", lambda d: d["variants"]["default"]["components"]["lib"]["changes"][0].update(number=10**29),
     "changes[0].number: must be between 1 and"),
    ("NaN", b'{"schema": 2, "stack": NaN}', "NaN is not JSON"),
    ("duplicate key", b'{"schema": 2, "schema": 2}', "duplicate key 'schema'"),
    ("unknown key", lambda d: d["variants"]["default"].update(run="id"), "variants.default.run: unknown key"),
    ("not an object", b"[]", "the lock: expected an object, got a list"),
    ("pip listed twice", lambda d: d["variants"]["default"]["pip"].append(dict(d["variants"]["default"]["pip"][0])),
     "variants.default.pip: six listed twice"),
    ("stack a path", lambda d: d.update(stack="../x"), "stack: '../x' is not a name"),
]


@pytest.mark.parametrize(("case", "change", "words"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_defect6_a_malformed_lock_is_a_clear_lock_error(lock_file: Path, case: str, change: Any, words: str) -> None:
    """Issue 11 defect 6: non-UTF-8 bytes, 100,000-deep JSON and "apt": {"jq": 12} gave tracebacks; "hashes" as a
    string became 71 one-character --hash options; "in_base": "no" counted as true. Each is now a LockError
    (exit 4) naming the file and the key."""
    if isinstance(change, bytes):
        lock_file.write_bytes(change)
    else:
        edit_raw(lock_file, change)
    with pytest.raises(LockError) as info:
        lockfile.read(lock_file)
    assert info.value.exit_code == 4
    assert str(lock_file) in str(info.value) and words in str(info.value), str(info.value)


# ------------------------------------------------------------------------------ edited by hand

# (case, change, entries named)
HAND_EDITS: list[tuple[str, Any, list[str]]] = [
    ("a pip hash", lambda d: d["variants"]["default"]["pip"][0].update(hashes=["sha256:" + "9" * 64]),
     ["changed variants.default.pip.six"]),
    ("a tree SHA", lambda d: d["variants"]["default"]["components"]["lib"].update(tree="9" * 40),
     ["changed variants.default.components.lib"]),
    ("the base digest", lambda d: d["variants"]["default"]["base"].update(digest="sha256:" + "9" * 64),
     ["changed variants.default.base"]),
    ("an added pip entry", lambda d: d["variants"]["default"]["pip"].append(
        {"name": "evil", "version": "1.0", "hashes": [H], "in_base": False}), ["added variants.default.pip.evil"]),
    ("a commit", lambda d: d["variants"]["default"]["components"]["lib"].update(base="9" * 40),
     ["changed variants.default.components.lib"]),
    ("a download URL", lambda d: d["variants"]["default"]["downloads"]["tool"].update(url="https://evil.example/t"),
     ["changed variants.default.downloads.tool"]),
    ("a removed apt package", lambda d: d["variants"]["default"]["apt"].pop("less"),
     ["removed variants.default.apt.less"]),
    ("the integrity hash dropped", lambda d: d.pop("integrity"), ["the integrity hash itself"]),
]


@pytest.mark.parametrize(("case", "change", "named"), HAND_EDITS, ids=[c[0] for c in HAND_EDITS])
def test_defect6_a_hand_edit_is_reported_as_one_with_its_entries(lock_file: Path, case: str, change: Any,
                                                                 named: list[str]) -> None:
    """Issue 11 defect 6: edits to a pip hash, a tree SHA, the base digest or an added pip entry changed keys with
    no word, and edits of a commit or URL were reported as "the manifest changed since locking". Each is now
    LockHandEdited naming exactly the entries that changed."""
    edit_raw(lock_file, change)
    with pytest.raises(LockHandEdited) as info:
        lockfile.read(lock_file)
    if named[0].startswith("the integrity"):
        assert len(info.value.edited) == 1 and info.value.edited[0].startswith(named[0])
    else:
        assert info.value.edited == named
    assert "edited by hand" in str(info.value) and "manifest changed" not in str(info.value)
    relocking = lockfile.read(lock_file, allow_hand_edit=True)
    assert relocking is not None and relocking.hand_edited == tuple(info.value.edited)


def test_the_edit_api_rehashes(lock_file: Path) -> None:
    lockfile.edit(lock_file, lambda d: d["variants"]["default"]["apt"].update(jq="1.7-1"))
    lock = lockfile.read(lock_file)
    assert lock is not None and lock.variants["default"].apt["jq"] == "1.7-1" and not lock.hand_edited
    with pytest.raises(LockError, match="refusing to write an invalid lock"):
        lockfile.edit(lock_file, lambda d: d["variants"]["default"]["apt"].update(jq=12))


# ------------------------------------------------------------------------------ fuzzed

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


GOOD = json.loads(lockfile.to_text(good_lock()))
PATHS = [p for p in _paths(GOOD) if p]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATHS), json_values)
def test_a_fuzzed_lock_is_a_lock_or_a_lock_error(tmp_path: Path, where: tuple[Any, ...], value: Any) -> None:
    data = json.loads(json.dumps(GOOD))
    node = data
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    path = tmp_path / "fuzz.lock.json"
    path.write_text(json.dumps(data))
    for allow in (False, True):
        try:
            lock = lockfile.read(path, allow_hand_edit=allow)
        except LockError:
            continue
        assert isinstance(lock, Lock)
        assert allow or lockcheck.edited_entries(data) is None  # a strict read only returns an unedited lock


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_are_a_lock_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "fuzz.lock.json"
    path.write_bytes(raw)
    with pytest.raises(LockError):
        lockfile.read(path)

