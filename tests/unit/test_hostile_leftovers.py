"""Hostile input, third pass: what the second pass left. A manifest or lock that is a FIFO (blocked forever on
open), ``build --out`` without ``--dry-run`` (silently ignored), ``evidence`` of a malformed digest (a registry
error after the registry was asked) and smoke's interpreter taken from an image label unchecked.

Every test makes its own files under tmp_path; nothing reaches an engine, a registry or the network (an address
that is needed is a dead one, 127.0.0.1:9, and is refused before it is used).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pytest

from buildctl import imageref, untrusted
from buildctl.builder import smoke
from buildctl.errors import LockError, ManifestError, ManifestErrors, SmokeFailed, UsageError
from buildctl.graph import smoke_expect
from buildctl.lock import lockfile
from buildctl.manifest import pins
from tests.unit.hostile_project import make_project, run
from tests.unit.test_smoke_host import FakeEngine, FakeRun, expectation, real


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_project(tmp_path, monkeypatch)


# ------------------------------------------------------------------------------- non-regular files


@contextmanager
def unblocking(fifo: Path) -> Iterator[list[Path]]:
    """A guard so that a regression fails instead of hanging: while the block runs, a thread keeps opening
    ``fifo`` for writing without blocking (which succeeds only once a reader has opened it) and closes it again,
    so a reader that opened the FIFO gets end-of-file. The list it yields names the FIFO when that happened."""
    opened: list[Path] = []
    done = threading.Event()

    def writer() -> None:
        while not done.wait(0.05):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader (yet): nobody opened it
                    continue
                raise
            os.close(fd)
            opened.append(fifo)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        done.set()
        thread.join()


@pytest.mark.parametrize("linked", [False, True])
def test_a_manifest_that_is_a_fifo_is_refused_before_it_is_opened(
        project: Path, linked: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """`pins check t` of a pins/t.yaml that is a FIFO (or a symlink to one) blocked forever in open(); the
    manifest is refused by name, as not a regular file (exit 3), and the FIFO never opened."""
    manifest = project / "pins" / "t.yaml"
    manifest.unlink()
    fifo = project / "pipe" if linked else manifest
    os.mkfifo(fifo)
    if linked:
        manifest.symlink_to(fifo)
    with unblocking(fifo) as opened:
        assert run(project, "pins", "check", "t") == 3
        assert run(project, "plan", "t") == 3
    assert opened == []
    err = capsys.readouterr().err
    assert f"{manifest}: not a manifest: not a regular file (a FIFO)" in err
    assert "Traceback" not in err


def test_a_lock_that_is_a_fifo_is_refused_before_it_is_opened(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`plan t` with a pins/t.lock.json that is a FIFO blocked forever in open(); it is a LockError naming the
    lock (exit 4)."""
    lock = project / "pins" / "t.lock.json"
    os.mkfifo(lock)
    with unblocking(lock) as opened:
        assert run(project, "plan", "t") == 4
    assert opened == []
    err = capsys.readouterr().err
    assert f"{lock}: not a regular file (a FIFO): not a lock file" in err


def test_a_lock_or_manifest_that_is_a_device_or_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "dev.lock.json").symlink_to("/dev/null")
    with pytest.raises(LockError, match=r"dev\.lock\.json: not a regular file \(a character device\)"):
        lockfile.read(tmp_path / "dev.lock.json")
    (tmp_path / "d.yaml").mkdir()
    with pytest.raises(ManifestErrors, match=r"d\.yaml: not a manifest: not a regular file \(a directory\)"):
        pins.load(tmp_path / "d.yaml")
    (tmp_path / "big.yaml").write_bytes(b"#" * (pins.MAX_BYTES + 1))  # a regular file: still read to the cap
    with pytest.raises(ManifestErrors, match=rf"big\.yaml: not a manifest: larger than {pins.MAX_BYTES} bytes"):
        pins.load(tmp_path / "big.yaml")
    assert lockfile.read(tmp_path / "absent.lock.json") is None  # still: no lock is no lock
    (tmp_path / "dangling.lock.json").symlink_to(tmp_path / "nowhere")
    assert lockfile.read(tmp_path / "dangling.lock.json") is None


def test_the_capped_reader_still_reads_a_pipe(tmp_path: Path) -> None:
    """`bisect --good file:<(...)` reads a pipe through read_capped on purpose: only manifests and locks check."""
    r, w = os.pipe()
    os.write(w, b"{}")
    os.close(w)
    try:
        assert untrusted.read_capped(Path(f"/dev/fd/{r}"), 10) == b"{}"
    finally:
        os.close(r)
    r, w = os.pipe()
    try:
        with pytest.raises(untrusted.Malformed, match="a FIFO"):
            untrusted.regular_file(Path(f"/dev/fd/{r}"))
    finally:
        os.close(r)
        os.close(w)


def test_a_fifo_swapped_in_after_the_check_is_refused_not_waited_on(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The window between regular_file's stat and the open: a FIFO put at the path after the check (here: the check
    let through, as if the swap came right after it) is opened without blocking and refused by what was opened,
    for the manifest and the lock alike. Without the second check the open would wait for a writer forever: the
    alarm turns that into a failure."""
    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    monkeypatch.setattr(untrusted, "regular_file", lambda path: None)
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the open blocked on the FIFO"))
    signal.alarm(5)
    try:
        with pytest.raises(untrusted.Malformed, match="replaced while being opened"):
            untrusted.read_regular(fifo, 100)
        with pytest.raises(ManifestErrors, match="replaced while being opened"):
            pins.manifest_sha256(fifo)
        with pytest.raises(LockError, match="replaced while being opened"):
            lockfile.read(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    (tmp_path / "plain").write_bytes(b"x" * 11)
    with pytest.raises(untrusted.Malformed, match="larger than 10 bytes"):
        untrusted.read_regular(tmp_path / "plain", 10)
    assert untrusted.read_regular(tmp_path / "plain", 11) == b"x" * 11


# ----------------------------------------------------------------------------------------- build --out


def test_build_out_without_dry_run_is_a_usage_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`build t --out DIR` without --dry-run went on to build and never wrote DIR (the option silently ignored);
    it is a usage error (exit 2) before anything is asked of an engine, and DIR is not made."""
    out = project / "review"
    assert run(project, "build", "t", "--engine", "tcp://127.0.0.1:9", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "--out goes with --dry-run" in err
    assert "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit):
        run(project, "build", "--help")
    assert "with --dry-run only: folder to write into" in " ".join(capsys.readouterr().out.split())


# -------------------------------------------------------------------------------------- evidence IMAGE


@pytest.mark.parametrize(("image", "said"), [
    ("127.0.0.1:9/a/b@sha256:zz", "has the digest 'sha256:zz', not sha256:<64 lower-case hex digits>"),
    ("127.0.0.1:9/a/b@sha256:" + "A" * 64, "not sha256:<64 lower-case hex digits>"),
    ("127.0.0.1:9/a/b@md5:" + "a" * 32, "has the digest 'md5:"),
    ("127.0.0.1:9/a/b@", "has the digest '', not sha256"),
    ("127.0.0.1:9/a/b:c@sha256:" + "a" * 64 + "@x", "not sha256:<64 lower-case hex digits>"),
    ("127.0.0.1:9/a/b:", "has an empty tag"),
    ("127.0.0.1:9/a/b:-x", "has the tag '-x'"),
    ("127.0.0.1:9/A/b:c", "names the repository 'A/b'"),
    ("[zz]:9/a/b:c", "names the registry host '[zz]:9'"),
    ("127.0.0.1:9/a\nb:c", "holds the control character"),
])
@pytest.mark.parametrize("attach", [False, True])
def test_evidence_of_a_malformed_reference_is_a_usage_error(project: Path, image: str, said: str, attach: bool,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`evidence 127.0.0.1:9/a/b@sha256:zz` asked the registry for that digest and exited 11 (a registry error);
    the reference is checked where the argument is read, a usage error (exit 2) naming it, no registry asked
    (the unit tests' guard would turn a connection into a failure)."""
    report = project / "report.json"
    report.write_text("{}")
    argv = ["evidence", "attach", image, str(report)] if attach else ["evidence", image]
    assert run(project, *argv) == 2
    err = capsys.readouterr().err
    assert f"IMAGE {image!r} " in err and said in err
    assert "Traceback" not in err


@pytest.mark.parametrize("image", ["127.0.0.1:9/a/b@sha256:" + "a" * 64, "127.0.0.1:9/a/b:c@sha256:" + "0" * 64,
                                   "[::1]:9/a/b:c", "localhost/a/b", "nvcr.io/nvidia/pytorch:25.09-py3",
                                   "docker.io/library/x", "127.0.0.1:9/a__b/c-d.e:1.0_x"])
def test_references_that_are_fine(image: str) -> None:
    assert imageref.problem(image) is None


# ------------------------------------------------------------------------------ smoke's image interpreter


@pytest.mark.parametrize("value", ["python3; id", "$(id)", "-c", "python3 -c 1", "python3\nid", "../python3"])
def test_an_interpreter_label_that_breaks_the_rule_is_refused_before_a_container(tmp_path: Path, value: str) -> None:
    """`buildctl smoke IMAGE` without --python ran the image's io.buildctl.smoke.python label as given (--python
    and the manifest's smoke.python are held to syntax.interpreter); the label is too: SmokeFailed naming the
    image and the label (the image's fault, as a suite that cannot run in it), before a container is started."""
    eng = FakeEngine(answer=FakeRun(exit_code=1, stdout=real("report-build.json")),
                     labels={smoke_expect.EXPECT_LABEL: expectation().label_value(), smoke_expect.PYTHON_LABEL: value})
    with pytest.raises(SmokeFailed) as info:
        smoke.run_smoke(eng, "127.0.0.1:9/a/b:1", None, report_dir=tmp_path / "reports")
    assert info.value.what.startswith(f"the smoke suite cannot run in 127.0.0.1:9/a/b:1: its {smoke_expect.PYTHON_LABEL} "
                                      f"label says {value!r}, which ")
    assert eng.runs == [] and not (tmp_path / "reports").exists()
    # --python wins over the label (and is checked as the command line checks it)
    smoke.run_smoke(eng, "127.0.0.1:9/a/b:1", None, report_dir=tmp_path / "reports", python="/usr/bin/python3.12")
    command = eng.runs[-1]["command"]
    assert isinstance(command, list) and command[0] == "/usr/bin/python3.12"
    with pytest.raises(UsageError, match=r"--python 'python3; id' is not an interpreter name"):
        smoke.run_smoke(eng, "127.0.0.1:9/a/b:1", None, report_dir=tmp_path / "reports", python="python3; id")


def test_an_interpreter_the_expectation_label_records_is_held_to_the_rule(tmp_path: Path) -> None:
    """With no interpreter label, the one the image's expectation label records (runner.python) is used: the same
    rule, the same refusal."""
    hostile = dataclasses.replace(expectation(), python="python3; id")
    eng = FakeEngine(answer=FakeRun(exit_code=0, stdout=""), labels={smoke_expect.EXPECT_LABEL: hostile.label_value()})
    with pytest.raises(SmokeFailed, match=r"runner\.python of its smoke expectation .* says 'python3; id'"):
        smoke.run_smoke(eng, "127.0.0.1:9/a/b:1", None, report_dir=tmp_path)
    assert eng.runs == []


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_configuration_that_is_no_regular_file_is_named(tmp_path: Path, kind: str) -> None:
    """BUILDCTL_CONFIG naming a FIFO blocked every command in the read; a folder there was passed over as if
    there were no configuration. Both are a ManifestError naming the file (exit 3), the FIFO never opened."""
    from buildctl.config import load_config

    path = tmp_path / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    refused = pytest.raises(ManifestError, match=r"config\.toml: cannot read the configuration: not a regular file")
    guard: AbstractContextManager[list[Path]] = unblocking(path) if kind == "fifo" else nullcontext([])
    with guard as opened, refused:
        load_config({"BUILDCTL_CONFIG": str(path)})
    assert opened == []


def test_a_configuration_past_its_cap_is_named(tmp_path: Path) -> None:
    from buildctl.config import CONFIG_MAX, load_config

    path = tmp_path / "config.toml"
    path.write_text("# " + "x" * CONFIG_MAX + "\n")
    with pytest.raises(ManifestError, match=f"larger than {CONFIG_MAX} bytes"):
        load_config({"BUILDCTL_CONFIG": str(path)})
    path.write_text("")
    assert load_config({"BUILDCTL_CONFIG": str(path)}) is not None  # an empty file is an empty configuration


def test_a_configuration_that_is_a_device_is_read_to_its_cap() -> None:
    """BUILDCTL_CONFIG=/dev/null is the idiom for no configuration; /dev/zero is cut at the cap, not read on."""
    from buildctl.config import CONFIG_MAX, load_config

    assert load_config({"BUILDCTL_CONFIG": "/dev/null"}).registry == load_config(
        {"BUILDCTL_CONFIG": "/nonexistent/config.toml"}).registry
    with pytest.raises(ManifestError, match=f"/dev/zero: cannot read the configuration: larger than {CONFIG_MAX} bytes"):
        load_config({"BUILDCTL_CONFIG": "/dev/zero"})


# ----------------------------------------------------------------------------- local IMAGE arguments


@pytest.mark.parametrize("argv", [
    ("smoke", "[zz]:9/x"), ("smoke", "x@sha256:zz"), ("bom", "x@sha256:zz"), ("bom", "x:"),
    ("provenance", "[zz]:9/x"), ("diff", "demo:1", "ABC"), ("diff", "x@sha256:1", "demo:1"),
])
def test_a_malformed_local_image_is_a_usage_error_before_the_engine(
        project: Path, argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """smoke, bom, provenance and diff took IMAGE to the engine unchecked: a malformed reference was the engine's
    refusal (exit 8), or 'engine not reachable' where there is none. Now it is a usage error (exit 2) naming the
    argument, before an engine is asked (here: none answers at the address given)."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    assert run(project, *argv) == 2
    err = capsys.readouterr().err
    bad = next(a for a in argv[1:] if imageref.local_problem(a))
    assert repr(bad) in err and ("IMAGE_" if argv[0] == "diff" else "IMAGE ") in err
    assert "engine" not in err


@pytest.mark.parametrize("ref", ["abcdef012345", "sha256:" + "0" * 64, "demo:1", "127.0.0.1:5000/a/b:t",
                                 "[::1]:5000/a@sha256:" + "f" * 64])
def test_a_local_image_id_or_reference_passes_the_check(ref: str) -> None:
    assert imageref.local_problem(ref) is None


@pytest.mark.parametrize("ref", ["ABCDEF012345", "a b", "x:", "x@sha256:1"])
def test_what_is_neither_an_id_nor_a_reference_is_named(ref: str) -> None:
    assert imageref.local_problem(ref)
