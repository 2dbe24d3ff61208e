"""buildctl.engine.engine against the real engine and a real registry (127.0.0.1, started by `make test`)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildctl.engine.engine import Engine
from buildctl.engine.values import RUN_LABEL, Mount, TransferProgress
from buildctl.errors import BuildFailed, EngineError, PushError, UnreachableError
from tests.engine.conftest import ImageCleanup, containers, docker_cli
from tests.helpers import unique


def write_context(tmp_path: Path, dockerfile: str, **files: str) -> Path:
    ctx = tmp_path / "context"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (ctx / name).write_text(text)
    return ctx


@pytest.fixture
def small_image(engine: Engine, demo_base: str, image_cleanup: ImageCleanup, tmp_path: Path) -> tuple[str, str]:
    """A one-layer image on the demo base: (tag, the marker it holds in /marker)."""
    marker = unique("m")
    ctx = write_context(tmp_path, f"FROM {demo_base}\nCOPY marker /marker\n", marker=marker)
    tag = image_cleanup(f"buildctl-test/small:{unique()}")
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels={})
    return tag, marker


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers (a hung registry)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- engine


def test_ping_and_platform(engine: Engine) -> None:
    engine.ping()
    assert engine.platform() in {"linux/amd64", "linux/arm64"}


def test_no_engine_says_how_to_start_one(tmp_path: Path) -> None:
    eng = Engine(f"unix://{tmp_path}/nothing.sock", name="absent")
    with pytest.raises(EngineError) as err:
        eng.ping()
    text = str(err.value)
    assert f"unix://{tmp_path}/nothing.sock" in text
    assert "dockerd" in text and "DOCKER_HOST" in text


# -- build


def test_build_labels_env_and_live_log(
    engine: Engine, demo_base: str, image_cleanup: ImageCleanup, tmp_path: Path
) -> None:
    marker = unique("marker-")
    ctx = write_context(tmp_path, f"FROM {demo_base}\nRUN echo {marker} && echo second-line && echo {marker} >/built-marker\n")
    tag = image_cleanup(f"buildctl-test/build:{unique()}")
    seen: list[tuple[str, bool]] = []

    def on_log(line: str) -> None:
        # Whether the tag exists yet shows that the line arrived while the build was still running.
        seen.append((line, engine.image_exists(tag) if marker in line and "echo" not in line else False))

    log_file = tmp_path / "logs" / "build.log"
    image_id = engine.build(
        context_dir=ctx,
        dockerfile="Dockerfile",
        tag=tag,
        labels={"org.opencontainers.image.revision": marker, "org.buildctl.stack": "test"},
        on_log=on_log,
        log_file=log_file,
    )
    assert image_id.startswith("sha256:")
    assert engine.image_id(tag) == image_id
    marker_lines = [(line, existed) for line, existed in seen if line == marker]
    assert marker_lines == [(marker, False)], seen
    assert "second-line" in [line for line, _ in seen]
    assert marker in log_file.read_text()

    info = engine.inspect_image(tag)
    assert info.id == image_id
    assert tag in info.repo_tags
    assert info.labels["org.opencontainers.image.revision"] == marker
    assert info.labels["org.buildctl.stack"] == "test"
    assert info.env["PIP_CONSTRAINT"] == "/etc/pip/constraint.txt"  # inherited from the base
    assert info.platform == engine.platform()
    base = engine.inspect_image(demo_base)
    assert info.layers[: len(base.layers)] == base.layers and len(info.layers) == len(base.layers) + 1
    assert any(marker in h.created_by for h in info.history)


def test_failed_build_names_log_and_leaves_no_container(
    engine: Engine, demo_base: str, image_cleanup: ImageCleanup, tmp_path: Path
) -> None:
    probe = unique("probe")
    label = f"org.buildctl.test.probe={probe}"
    # The LABEL step makes every later build container carry the probe label: that is how we count them.
    ctx = write_context(tmp_path, f"FROM {demo_base}\nLABEL {label}\nRUN echo before-fail-{probe} && false\n")
    image_cleanup.label(label)  # the LABEL step's intermediate image stays as build cache
    assert containers(label) == []

    # Control: the legacy builder without rm/forcerm leaves the failed step's container behind, and
    # the count above sees it (so a zero below means something).
    docker_cli("build", "-q", "--rm=false", "--force-rm=false", str(ctx), check=False)
    left = containers(label)
    assert left, "control build left no container: the count cannot detect leftovers"
    docker_cli("rm", "-f", *left)

    log_file = tmp_path / "fail.log"
    with pytest.raises(BuildFailed) as err:
        engine.build(
            context_dir=ctx, dockerfile="Dockerfile", tag=f"buildctl-test/fail:{probe}", labels={}, log_file=log_file
        )
    text = str(err.value)
    assert str(log_file) in text
    assert "returned a non-zero code" in text
    assert f"before-fail-{probe}" in text  # the last log lines are in the message
    assert f"before-fail-{probe}" in log_file.read_text()
    assert containers(label) == []
    assert not engine.image_exists(f"buildctl-test/fail:{probe}")
    image_cleanup.label(label)


def test_failed_build_without_log_file_still_writes_one(engine: Engine, demo_base: str, tmp_path: Path) -> None:
    ctx = write_context(tmp_path, f"FROM {demo_base}\nRUN exit 3\n")
    with pytest.raises(BuildFailed) as err:
        engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=f"buildctl-test/fail:{unique()}", labels={})
    log = Path(str(err.value).split("full log: ", 1)[1].split()[0])
    try:
        assert "returned a non-zero code: 3" in log.read_text()
    finally:
        log.unlink()


def test_missing_dockerfile_is_a_build_failure(engine: Engine, tmp_path: Path) -> None:
    ctx = write_context(tmp_path, "FROM scratch\n")
    with pytest.raises(BuildFailed) as err:
        engine.build(context_dir=ctx, dockerfile="Nope.Dockerfile", tag=f"buildctl-test/x:{unique()}", labels={},
                     log_file=tmp_path / "x.log")
    assert "Nope.Dockerfile" in str(err.value) and str(tmp_path / "x.log") in str(err.value)


# -- run


def test_run_with_files_env_mounts(engine: Engine, demo_base: str, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from the host\n")
    result = engine.run(
        demo_base,
        ["sh", "-c", 'cat /opt/t/data.txt; /opt/t/tool.sh; echo "$GREETING"; cat /in/in.txt; '
                     "touch /in/x 2>/dev/null || echo read-only >&2; exit 7"],
        env={"GREETING": "hello from env"},
        files={"/opt/t/data.txt": b"file content\n", "/opt/t/tool.sh": b"#!/bin/sh\necho tool ran\n"},
        mounts=[Mount(source=tmp_path, target="/in")],
        timeout=60,
    )
    assert result.exit_code == 7 and not result.timed_out and not result.ok
    assert result.stdout == "file content\ntool ran\nhello from env\nfrom the host\n"
    assert result.stderr == "read-only\n"
    assert not (tmp_path / "x").exists()
    assert containers(f"{RUN_LABEL}={engine.name}") == []


def test_run_workdir_user_and_python(engine: Engine, demo_base: str) -> None:
    result = engine.run(demo_base, ["python3", "-c", "import os; print(os.getcwd(), os.getuid())"],
                        workdir="/tmp", user="65534", timeout=60)
    assert result.ok and result.stdout == "/tmp 65534\n"


def test_run_timeout_kills_and_reports(engine: Engine, demo_base: str) -> None:
    result = engine.run(demo_base, ["sh", "-c", "echo started; exec sleep 600"], timeout=2)
    assert result.timed_out and not result.ok
    assert result.exit_code != 0
    assert result.stdout == "started\n"
    assert containers(f"{RUN_LABEL}={engine.name}") == []


def test_run_with_gpus(engine: Engine, demo_base: str) -> None:
    if Path("/dev/nvidiactl").exists():  # a GPU host: the device request must be honoured
        result = engine.run(demo_base, ["sh", "-c", "ls /dev/nvidiactl"], gpus=True, timeout=120)
        assert result.ok, result.stderr
    else:  # our CPU machines: a clear error, and no container left behind
        with pytest.raises(EngineError, match="NVIDIA Container Toolkit") as err:
            engine.run(demo_base, ["true"], gpus=True, timeout=60)
        assert "gpu" in str(err.value).lower()
    assert containers(f"{RUN_LABEL}={engine.name}") == []


def test_run_missing_image(engine: Engine) -> None:
    with pytest.raises(EngineError, match="no such image"):
        engine.run(f"buildctl-test/absent:{unique()}", ["true"], timeout=10)


# -- images


def test_tag_inspect_remove(engine: Engine, small_image: tuple[str, str], image_cleanup: ImageCleanup) -> None:
    tag, _ = small_image
    other = image_cleanup(f"buildctl-test/other:{unique()}")
    engine.tag(tag, other)
    assert engine.image_id(other) == engine.image_id(tag)
    engine.remove_image(other)
    assert engine.image_id(other) is None and engine.image_exists(tag)
    engine.remove_image(other)  # already gone: nothing to do
    with pytest.raises(EngineError, match="not in engine"):
        engine.inspect_image(other)
    with pytest.raises(EngineError, match="no such image"):
        engine.tag(other, f"buildctl-test/x:{unique()}")


def test_save_and_load(engine: Engine, small_image: tuple[str, str], tmp_path: Path) -> None:
    tag, _ = small_image
    image_id = engine.image_id(tag)
    tar = tmp_path / "image.tar"
    engine.save(tag, tar)
    assert tar.stat().st_size > 1000 and not (tmp_path / "image.tar.part").exists()
    engine.remove_image(tag)
    assert engine.load(tar) == [tag]
    assert engine.image_id(tag) == image_id


# -- registry


def test_push_digest_confirmed_and_repush_uploads_nothing(
    engine: Engine, registry: str, small_image: tuple[str, str], image_cleanup: ImageCleanup
) -> None:
    tag, _ = small_image
    ref = image_cleanup(f"{registry}/buildctl-test/push:{unique()}")
    engine.tag(tag, ref)
    assert engine.registry_digest(ref) is None

    first: list[TransferProgress] = []
    digest = engine.push(ref, on_progress=first.append)
    assert digest.startswith("sha256:") and len(digest) == 71
    assert engine.registry_digest(ref) == digest
    assert f"{ref.rsplit(':', 1)[0]}@{digest}" in engine.inspect_image(ref).repo_digests
    assert any(p.status == "Pushed" for p in first)

    again: list[TransferProgress] = []
    assert engine.push(ref, on_progress=again.append) == digest
    layer_events = [p for p in again if p.layer and p.status not in {"Preparing", "Waiting"}]
    layer_events = [p for p in layer_events if not p.status.startswith(ref.rsplit(":", 1)[1] + ": digest")]
    assert layer_events and all(p.status == "Layer already exists" for p in layer_events), [str(p) for p in again]


def test_push_to_closed_port_raises(engine: Engine, small_image: tuple[str, str], image_cleanup: ImageCleanup) -> None:
    tag, _ = small_image
    ref = image_cleanup(f"127.0.0.1:{closed_port()}/buildctl-test/push:{unique()}")
    engine.tag(tag, ref)
    with pytest.raises(PushError) as err:
        engine.push(ref)
    assert "connection refused" in str(err.value)


def test_push_untagged_image_raises(engine: Engine, registry: str) -> None:
    with pytest.raises(PushError, match="does not exist locally"):
        engine.push(f"{registry}/buildctl-test/never-tagged:{unique()}")


def test_registry_digest_of_missing_tag_is_none(engine: Engine, registry: str, demo_base: str,
                                                 image_cleanup: ImageCleanup) -> None:
    assert engine.registry_digest(f"{registry}/buildctl-test/no-such-repo:{unique()}") is None
    ref = image_cleanup(f"{registry}/buildctl-test/some-repo:{unique()}")
    engine.tag(demo_base, ref)
    engine.push(ref)
    assert engine.registry_digest(f"{registry}/buildctl-test/some-repo:missing-{unique()}") is None


def test_registry_digest_of_unreachable_registry_fails_fast(silent_registry: str) -> None:
    # The engine itself gives up on a registry that never answers only after 25 s (measured);
    # the lookup must be bounded by network_timeout.
    eng = Engine(name="fast", network_timeout=2)
    try:
        start = time.monotonic()
        with pytest.raises(UnreachableError) as err:
            eng.registry_digest(f"{silent_registry}/x/y:z")
        assert time.monotonic() - start < 15
        assert silent_registry in str(err.value)

        with pytest.raises(UnreachableError, match="connection refused"):
            eng.registry_digest(f"127.0.0.1:{closed_port()}/x/y:z")
        # nvcr.io is not reachable from our machines: it must fail, clearly and quickly, not hang.
        start = time.monotonic()
        with pytest.raises(UnreachableError) as err:
            eng.registry_digest("nvcr.io/nvidia/pytorch:25.09-py3")
        assert time.monotonic() - start < 15
        assert "nvcr.io" in str(err.value) and "mirror" in str(err.value)
    finally:
        eng.close()


def test_pull_missing_tag(engine: Engine, registry: str) -> None:
    with pytest.raises(EngineError, match=r"no such tag"):
        engine.pull(f"{registry}/buildctl-test/no-such-repo:{unique()}")


# -- two engines


def test_second_engine_pulls_what_the_first_pushed(
    engine: Engine, second_engine: Engine, registry: str, small_image: tuple[str, str], image_cleanup: ImageCleanup
) -> None:
    tag, marker = small_image
    ref = image_cleanup(f"{registry}/buildctl-test/shared:{unique()}")
    engine.tag(tag, ref)
    digest = engine.push(ref)

    assert not second_engine.image_exists(ref)
    image_cleanup(ref, engine=second_engine)
    image_id = second_engine.pull(ref)
    assert image_id == engine.image_id(ref)  # same config, so the same image id on both engines
    assert f"{ref.rsplit(':', 1)[0]}@{digest}" in second_engine.inspect_image(ref).repo_digests
    result = second_engine.run(ref, ["cat", "/marker"], timeout=60)
    assert result.ok and result.stdout == marker
    by_digest = image_cleanup(f"{ref.rsplit(':', 1)[0]}@{digest}", engine=second_engine)
    assert second_engine.pull(by_digest) == image_id
