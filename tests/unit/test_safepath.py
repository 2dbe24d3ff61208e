"""Host writes stay inside their folder (issue 11, defect 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildctl import safepath
from buildctl.errors import ManifestErrors
from buildctl.manifest import pins

MANIFEST = """\
schema: 1
stack: t
base: {alias: b}
variants:
  v: {image: "127.0.0.1:9/b:1", platform: linux/amd64, cuda: "13"}
downloads:
  x:
    dest: "/../../../../../../tmp/x"
    urls: {any: {url: "https://example.invalid/x", sha256: compute}}
components:
  c:
    repo: ../c.bundle
    commit: abcdef1
    install: {kind: source-tree, path: /opt/../../../etc}
"""


def test_defect2_dest_and_install_path_with_dotdot_are_refused_at_load() -> None:
    """Issue 11 defect 2: downloads.<name>.dest "/../../../../../../tmp/x" and install.path with '..' were joined
    under the build context and written outside it; validation only checked the leading '/'."""
    with pytest.raises(ManifestErrors) as info:
        pins.load_text(MANIFEST, "pins/t.yaml", base_dir=Path("/nonexistent"))
    messages = [str(e) for e in info.value.errors]
    assert any(m.startswith("pins/t.yaml:8:11: downloads.x.dest: ") and "'..'" in m for m in messages), messages
    assert any(m.startswith("pins/t.yaml:14:40: components.c.install.path: ") and "'..'" in m for m in messages)


def test_defect2_every_context_write_is_checked_where_it_happens(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    assert safepath.inside(ctx, "rootfs/usr/bin/tool") == ctx / "rootfs/usr/bin/tool"
    for bad in ("rootfs/../../outside/x", "/etc/passwd", "rootfs/a\nb", "rootfs/\x00"):
        with pytest.raises(safepath.UnsafePath):
            safepath.inside(ctx, bad)
    # a symlink in the context (a source tree copied with its links) must not carry a write outside
    (ctx / "rootfs" / "opt").mkdir(parents=True)
    os.symlink(outside, ctx / "rootfs" / "opt" / "link")
    with pytest.raises(safepath.UnsafePath, match="resolves to"):
        safepath.inside(ctx, "rootfs/opt/link/passwd")
    os.symlink(outside / "file", ctx / "rootfs" / "opt" / "file")
    with pytest.raises(safepath.UnsafePath, match="is a symlink"):
        safepath.inside(ctx, "rootfs/opt/file")
    assert list(outside.iterdir()) == []  # nothing was written there
