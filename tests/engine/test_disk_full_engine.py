"""A node's build log on a disk that fills up during the build (issue 33 item 13): DiskFull naming the log
instead of an OSError naming nothing. The small filesystem is a tmpfs this test mounts
(tests/integration/test_disk_full.py). What is tagged stays the pipeline's business: a node's content tag is
written only after its build, record and normalisation, never by a build that raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl.engine.engine import Engine
from buildctl.errors import DiskFull
from tests.engine.conftest import ImageCleanup
from tests.helpers import unique
from tests.integration.test_disk_full import fill, small_fs

__all__ = ["small_fs"]  # the fixture, imported for this module's test


def test_a_build_log_on_a_full_disk_names_it(engine: Engine, image_cleanup: ImageCleanup,
                                                              small_fs: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    # a Dockerfile the engine refuses at once: its error is the first line the log gets, and no build goes on in
    # the engine after the client stopped reading (a real build would, and tag its image after this test ended)
    (ctx / "Dockerfile").write_text("FROM scratch\nNOSUCHINSTRUCTION x\n")
    tag = image_cleanup(f"buildctl-fulltest/{unique('img')}:t")
    log = small_fs / "logs" / "node.log"
    log.parent.mkdir()
    fill(small_fs)
    with pytest.raises(DiskFull) as err:
        engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels={}, log_file=log)
    assert str(log) in err.value.what and err.value.exit_code == 16
