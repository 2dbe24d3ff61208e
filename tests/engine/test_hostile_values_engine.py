"""The builder itself reads the rendered ENV, WORKDIR and LABEL lines back as the values (issue 11, defect 3).

The unit render tests read the output with tests/shellwords.py; this test checks that reader's model of the
Dockerfile against the real classic builder: the assemble node's ENV lines, the entrypoint node's WORKDIR and
the pipeline's LABEL line, rendered with values holding $(), backticks, quotes, spaces, # and \\, are built
FROM scratch and the image's config must hold exactly those values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from buildctl.engine.engine import Engine
from tests.helpers import unique
from tests.unit.test_render_hostile import NASTY, VALUES, rendered


def test_defect3_the_builder_reads_env_workdir_and_labels_as_the_values(engine: Engine, tmp_path: Path,
                                                                        image_cleanup: Any) -> None:
    out = rendered(1)
    lines = out["assemble.Dockerfile"].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("ENV "))
    env = lines[first:first + 1]  # one ENV for all: the instruction with its continuation lines
    while env[-1].endswith("\\"):
        env.append(lines[first + len(env)])
    entry = out["entrypoint.Dockerfile"].splitlines()
    workdir = [line for line in entry if line.startswith("WORKDIR ")]
    start = next(i for i, line in enumerate(entry) if line.startswith("LABEL "))
    label = entry[start:]
    (tmp_path / "Dockerfile").write_text("\n".join(["FROM scratch", *env, *workdir, *label]) + "\n")
    tag = image_cleanup(f"buildctl-test/hostile:{unique()}")
    engine.build(context_dir=tmp_path, dockerfile="Dockerfile", tag=tag, labels={})
    info = engine.inspect_image(tag)
    assert info.env["HOSTILE"] == NASTY
    assert info.workdir == VALUES["workdir"][1]
    assert info.labels["buildctl.entrypoint.profile"] == VALUES["profile"][1]
