"""Hostile input, second pass, the loaders: manifests, locks, the entrypoint's arguments and the templates under
images/. Each defect an adversarial run of every command found (a Python traceback, or a read without bound) is
reproduced here and refused with a clear error instead.

Every test makes its own files under tmp_path; nothing reaches an engine, a registry or the network.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from buildctl.errors import ManifestErrors
from buildctl.lock import lockcheck, lockfile
from buildctl.manifest import pins
from buildctl.megatron.lintargs import lint
from tests.unit.hostile_project import MANIFEST, make_project, run


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_project(tmp_path, monkeypatch)


# ------------------------------------------------------------------------------------------ manifests


@pytest.mark.parametrize("where", ["value", "key"])
def test_an_integer_of_more_digits_than_int_reads_is_a_manifest_error(where: str) -> None:
    """`pins check` of `schema: 999...` (5,000 digits) ended in a ValueError from PyYAML's int() (Python refuses
    to convert more than 4,300 digits); it is an error at that line, as any unreadable value is."""
    big = "9" * 5000
    # (a key that long is a complex key, `? KEY`: a plain one ends at 1,024 characters)
    text = MANIFEST.replace("schema: 1", f"schema: {big}") if where == "value" else MANIFEST + f"? {big}\n: x\n"
    with pytest.raises(ManifestErrors) as info:
        pins.load_text(text, "pins/t.yaml")
    line = 1 if where == "value" else MANIFEST.count("\n") + 1
    assert any(e.location.line == line and "cannot read this value" in e.detail for e in info.value.errors), \
        [str(e) for e in info.value.errors]


def test_a_manifest_that_is_a_device_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pins/t.yaml a link to /dev/zero: `pins check` read it without bound (killed after minutes, gigabytes in);
    it is refused, naming the file (exit 3): a device is no regular file, and is not opened (third pass; a
    regular file past pins.MAX_BYTES is still refused by size, test_bounded_reader)."""
    (project / "pins" / "t.yaml").unlink()
    (project / "pins" / "t.yaml").symlink_to("/dev/zero")
    assert run(project, "pins", "check") == 3
    err = capsys.readouterr().err
    assert f"{project / 'pins' / 't.yaml'}: not a manifest: not a regular file (a character device)" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------- locks


@pytest.mark.parametrize("missing", [True, 5, "base", None])
def test_a_lock_whose_missing_is_not_a_map_is_a_list_of_problems(missing: object) -> None:
    """A lock whose variant says ``"missing": true`` made every command that reads it end in a TypeError
    (``"base" in True``, lockcheck.validate); the schema problem is reported instead, with the absent base."""
    data = {"schema": lockfile.SCHEMA, "stack": "t", "manifest_sha256": "0" * 64, "variants": {"v": {"missing": missing}}}
    problems = lockcheck.validate(data)
    assert "variants.v.base: missing (and not listed in missing)" in problems
    if missing is not None:
        assert any(p.startswith("variants.v.missing: ") for p in problems), problems


def test_the_cli_reports_such_a_lock_as_a_lock_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"schema": lockfile.SCHEMA, "stack": "t", "manifest_sha256": "0" * 64, "variants": {"v": {"missing": True}}}
    (project / "pins" / "t.lock.json").write_text(json.dumps(data))
    assert run(project, "smoke", "x:1", "--stack", "t") == 4
    err = capsys.readouterr().err
    assert "t.lock.json: not a valid lock file" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["smoke", "x:1", "--stack", "t"], ["bump", "t", "--no-push"],
                                  ["lock", "t", "--partial", "--only", "git"], ["lock", "t", "--check"],
                                  ["plan", "t"], ["build", "t", "--dry-run"]])
def test_the_lock_of_another_stack_is_not_read_as_this_ones(project: Path, argv: list[str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """pins/t.lock.json copied from another stack (its integrity hash made anew, its manifest hash t's): plan,
    build and push refused it, but smoke took its expectations from it, bump (and lint-args, verify) read it as
    t's and `lock` kept its entries. Every reader of the lock beside a manifest now refuses it (exit 4): plan and build
    too, through the same lockfile.read_beside (they had a check of their own, a usage error, exit 2)."""
    sha = pins.manifest_sha256(project / "pins" / "t.yaml")
    lockfile.write_data(project / "pins" / "t.lock.json",
                        {"schema": lockfile.SCHEMA, "stack": "other", "manifest_sha256": sha, "variants": {}})
    assert run(project, *argv) == 4
    err = capsys.readouterr().err
    assert "t.lock.json is the lock of stack 'other', not 't'" in err and "Traceback" not in err


def test_a_bump_from_a_lock_of_no_variant_is_a_lock_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`"variants": {}` (a valid lock of nothing) ended `bump` in StopIteration."""
    (project / "pins" / "t.yaml").write_text(MANIFEST + textwrap.dedent("""\
        components:
          lib:
            repo: https://git.example/org/lib.git
            commit: 0123456789abcdef0123456789abcdef01234567
            branch: main
        """))
    sha = pins.manifest_sha256(project / "pins" / "t.yaml")
    lockfile.write_data(project / "pins" / "t.lock.json",
                        {"schema": lockfile.SCHEMA, "stack": "t", "manifest_sha256": sha, "variants": {}})
    assert run(project, "bump", "t", "--no-push") == 4
    err = capsys.readouterr().err
    assert "locks no variant" in err and "Traceback" not in err


# ----------------------------------------------------------------------------------- entrypoint args


@pytest.mark.parametrize(("option", "value"), [("--tensor-model-parallel-size", 0),
                                               ("--pipeline-model-parallel-size", 0),
                                               ("--context-parallel-size", -2),
                                               ("--expert-model-parallel-size", 0),
                                               ("--expert-tensor-parallel-size", 0)])
def test_a_parallel_size_below_one_is_a_finding(option: str, value: int) -> None:
    """TP 0 in a profile's arguments: `plan` and `lint-args` ended in an AssertionError (consistency.py); each
    size below 1 is an error finding at its line, and nothing divides by it."""
    m = pins.load_text(MANIFEST + textwrap.dedent(f"""\
        entrypoint:
          workdir: /opt/megatron-lm
          command: [python, pretrain_gpt.py]
          gpus: 8
          args:
            - --num-attention-heads: 8
            - {option}: {value}
        """), "pins/t.yaml")
    report = lint(m, m.default_variant, None, missing_reason="not fetched")
    found = [(f.severity, f.flag, f.at.line) for f in report.findings if f.check == "parallel-sizes"]
    assert found == [("error", option, 12)]


# ------------------------------------------------------------------------------------------- templates


@pytest.mark.parametrize("damage", ["folder", "not utf-8"])
def test_a_template_that_cannot_be_read_is_a_template_error(project: Path, damage: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """images/wheel.Dockerfile.in a folder, or not UTF-8: `plan` ended in IsADirectoryError/UnicodeDecodeError
    (a missing one was already a clear error)."""
    root = Path(__file__).resolve().parents[2] / "images"
    for f in root.iterdir():
        if f.is_file():
            (project / "images" / f.name).write_bytes(f.read_bytes())
    bad = project / "images" / "wheel.Dockerfile.in"
    bad.unlink()
    if damage == "folder":
        bad.mkdir()
    else:
        bad.write_bytes(b"\xff\xfe")
    assert run(project, "plan", "t", "--local") == 1
    err = capsys.readouterr().err
    assert f"{bad} cannot be read as a template" in err and "Traceback" not in err
