"""Engine.build on the classic builder when another client removes an image while the builder reads the
candidates for a step's cache.

For a step after FROM scratch the candidates are every image without a parent; moby's GetCachedImage fails the
step with 'unable to find image "sha256:<id>"' when one of them is gone by the time it is read. Seen in a CI run
of 2026-12-03 at the COPY step of a wheel image, while the other test worker removed its images. The build runs
once more. The race itself cannot be timed on a real engine (the list and the read are one instant), so a fake
of docker-py's low-level client plays the engine's build stream here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildctl.engine.engine import Engine
from buildctl.errors import BuildFailed

GONE = "sha256:" + "f" * 64
BUILT = "sha256:" + "a" * 64
Stream = list[dict[str, Any]]
VANISHED: Stream = [{"stream": "Step 1/3 : FROM scratch\n"}, {"stream": " ---> \n"}, {"stream": "Step 2/3 : COPY rootfs/ /\n"},
            {"errorDetail": {"message": f'unable to find image "{GONE}"'}, "error": f'unable to find image "{GONE}"'}]
GOOD: Stream = [{"stream": "Step 1/3 : FROM scratch\n"}, {"stream": "Step 2/3 : COPY rootfs/ /\n"}, {"stream": " ---> 1b2c\n"},
        {"aux": {"ID": BUILT}}, {"stream": "Successfully built aaaaaaaaaaaa\n"}]
FAILED_STEP: Stream = [{"stream": "Step 2/3 : RUN exit 3\n"},
               {"error": "The command '/bin/sh -c exit 3' returned a non-zero code: 3"}]


class FakeAPI:
    """docker.APIClient.build: one stream of decoded chunks per call, in order."""

    def __init__(self, *streams: Stream) -> None:
        self.streams = list(streams)
        self.calls = 0

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls += 1
        assert kwargs["tag"] == "buildctl-part/x:wheel" and kwargs["rm"] and kwargs["forcerm"]
        return iter(self.streams.pop(0))


def engine_with(api: FakeAPI, monkeypatch: pytest.MonkeyPatch) -> Engine:
    e = Engine(name="unit", base_url="unix:///nonexistent/docker.sock")
    monkeypatch.setattr(e, "_api", lambda timeout=None: api)
    return e


def build(e: Engine, tmp_path: Path) -> str:
    return e.build(context_dir=tmp_path, dockerfile="Dockerfile", tag="buildctl-part/x:wheel", labels={},
                   log_file=tmp_path / "build.log")


def test_a_cache_image_removed_meanwhile_builds_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeAPI(VANISHED, GOOD)
    assert build(engine_with(api, monkeypatch), tmp_path) == BUILT
    assert api.calls == 2
    log = (tmp_path / "build.log").read_text()
    assert f'unable to find image "{GONE}"\n' in log  # both attempts are in the log, said as they happened
    assert f"buildctl: the engine's step cache offered image {GONE}, which another client removed meanwhile: " \
           "building again\n" in log
    assert log.index("building again") < log.index("Successfully built")


def test_it_builds_again_only_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeAPI(VANISHED, VANISHED, GOOD)
    with pytest.raises(BuildFailed) as failed:
        build(engine_with(api, monkeypatch), tmp_path)
    assert api.calls == 2 and f'unable to find image "{GONE}"' in failed.value.why


def test_any_other_failure_is_not_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeAPI(FAILED_STEP, GOOD)
    with pytest.raises(BuildFailed) as failed:
        build(engine_with(api, monkeypatch), tmp_path)
    assert api.calls == 1 and "returned a non-zero code: 3" in failed.value.why
    assert "building again" not in (tmp_path / "build.log").read_text()
