"""`buildctl verify`, `bom` and `diff` through the CLI, against the real engine and the test registry.

Each test gets a project of its own (a copy of pins/demo.yaml whose variant image points at the test
registry, in a repository no other test uses) and a cache folder of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildctl.cli import main
from buildctl.engine.engine import Engine
from buildctl.lock import lockfile
from buildctl.lock.lockfile import Lock, LockedBase, VariantLock
from tests.engine.conftest import ImageCleanup
from tests.engine.shiptools import demo_project
from tests.helpers import unique


def write_lock(root: Path, image: str, digest: str) -> None:
    manifest = root / "pins" / "demo.yaml"
    vl = VariantLock(base=LockedBase(ref=image, digest=digest, platform="linux/amd64"))
    lockfile.write(lockfile.lock_path(manifest),
                   Lock(stack="demo", manifest_sha256="0" * 64, variants={"default": vl}))


def cli(root: Path, cache: Path, *args: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("BUILDCTL_CACHE", str(cache))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(root / "no-config.toml"))
    rc = main(["--project", str(root), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def derived(engine: Engine, cleanup: ImageCleanup, tmp_path: Path, dockerfile: str, demo_base: str,
            labels: dict[str, str] | None = None) -> str:
    ctx = tmp_path / unique("ctx")
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {demo_base}\n{dockerfile}")
    tag = cleanup(f"buildctl-shiptest/{unique('derived')}:t")
    engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels=labels or {})
    return tag


def test_verify_passes_on_the_demo_base_then_fails_when_its_tag_moved(
        engine: Engine, registry: str, demo_base: str, project_root: Path, image_cleanup: ImageCleanup,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"{registry}/{unique('shipverify-')}/demo-base"
    image = image_cleanup(f"{name}:bookworm")
    engine.tag(demo_base, image)
    old = engine.push(image)
    image_cleanup(f"{name}@{old}")  # the push left this reference on the shared demo base image
    root, cache = demo_project(tmp_path, project_root, image), tmp_path / "cache"
    write_lock(root, image, old)

    rc, out, err = cli(root, cache, "verify", "demo-base", monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 0, out + err
    assert f"ok    digest                 {old}: as locked" in out and out.rstrip().endswith("result: ok")
    assert "ok    python                 3.11." in out
    assert "ok    env DEMO_BASE_VERSION  bookworm-1" in out
    assert "info  torch                  (none): not required by the contract" in out  # reported, not crashed
    assert (cache / "reports" / "bases" / f"{old.removeprefix('sha256:')}.json").is_file()

    # Someone re-pushes the tag with another image: same name, new digest.
    moved_image = derived(engine, image_cleanup, tmp_path, "ENV DEMO_BASE_VERSION=bookworm-2\n", demo_base)
    engine.tag(moved_image, image)
    new = engine.push(image)
    image_cleanup(f"{name}@{new}")
    assert new != old

    rc, out, err = cli(root, cache, "verify", "demo-base", "--stack", "demo", "--json",
                       monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 12
    result = json.loads(out)
    [digest] = [c for c in result["checks"] if c["name"] == "digest"]
    assert (digest["status"], digest["expected"], digest["actual"]) == ("fail", old, new)
    assert old in err and new in err  # the error names both digests
    assert {"kind": "env", "key": "DEMO_BASE_VERSION", "old": "bookworm-1", "new": "bookworm-2"} in result["changes"]
    # the manifest's contract pins DEMO_BASE_VERSION exactly, so the new base also breaks the contract
    assert sorted(c["name"] for c in result["checks"] if c["status"] == "fail") == ["digest", "env DEMO_BASE_VERSION"]

    rc, out, _ = cli(root, cache, "verify", "demo-base", monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 12 and f"expected {old}, got {new}" in out
    assert "env DEMO_BASE_VERSION: bookworm-1 -> bookworm-2" in out


def test_verify_of_an_unreachable_registry_fails_fast_and_clearly(
        engine: Engine, project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = demo_project(tmp_path, project_root, f"127.0.0.1:{port}/buildctl/demo-base:bookworm")
    start = time.monotonic()
    rc, _out, err = cli(root, tmp_path / "cache", "verify", "demo-base", monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 6 and time.monotonic() - start < 30
    assert f"cannot verify demo-base (demo/default): registry 127.0.0.1:{port} cannot be reached" in err
    assert "connection refused" in err


def test_bom_of_the_demo_base_lists_python_pyyaml_and_debian_packages(
        demo_base: str, project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = demo_project(tmp_path, project_root, "127.0.0.1:1/x:y")
    rc, out, err = cli(root, tmp_path / "cache", "bom", demo_base, "--json", monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["python"].startswith("3.11.")
    assert data["pip"]["PyYAML"] == "6.0"
    assert "python3" in data["deb"] and "python3-yaml" in data["deb"] and "dpkg" in data["deb"]
    assert len(data["deb"]) > 50 and data["errors"] == {}

    rc, out, _ = cli(root, tmp_path / "cache", "bom", demo_base, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 0 and "  PyYAML==6.0\n" in out and "\n  python3-yaml " in out


def test_diff_shows_an_added_package_mapped_to_its_manifest_line(
        engine: Engine, demo_base: str, project_root: Path, image_cleanup: ImageCleanup, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # What the python layer of the demo stack adds (six, pinned in pins/demo.yaml), as metadata only so
    # that nothing is downloaded, plus an env change and a component SHA label.
    site = "/usr/local/lib/python3.11/dist-packages/six-1.16.0.dist-info"
    after = derived(engine, image_cleanup, tmp_path,
                    f"RUN mkdir -p {site} && printf 'Metadata-Version: 2.1\\nName: six\\nVersion: 1.16.0\\n' "
                    f"> {site}/METADATA\nENV DEMO_BASE_VERSION=bookworm-2\n"
                    # like a final image: its own entrypoint must not swallow the listing
                    'ENTRYPOINT ["/bin/false"]\n', demo_base,
                    labels={"io.buildctl.stack": "demo", "io.buildctl.component.fastmath": "b" * 40})
    root = demo_project(tmp_path, project_root, "127.0.0.1:1/x:y")
    lines = (root / "pins" / "demo.yaml").read_text().splitlines()
    six_line = next(i for i, line in enumerate(lines, 1) if line.strip() == "- six==1.16.0")
    fastmath_line = next(i for i, line in enumerate(lines, 1) if line.strip() == "fastmath:")
    rc, out, err = cli(root, tmp_path / "cache", "diff", demo_base, after, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == 0, err
    assert f"  pip       + six 1.16.0  [pins/demo.yaml:{six_line}: pip.requirements[0]]\n" in out
    assert "  env       ~ DEMO_BASE_VERSION bookworm-1 -> bookworm-2\n" in out
    assert f"  component + fastmath {'b' * 40}  [pins/demo.yaml:{fastmath_line + 1}: components.fastmath]\n" in out

    rc, out, _ = cli(root, tmp_path / "cache", "diff", demo_base, after, "--json", monkeypatch=monkeypatch,
                     capsys=capsys)
    data = json.loads(out)
    assert data["summary"]["pip"] == {"added": 1, "removed": 0, "changed": 0}
    assert data["summary"].get("deb") is None  # nothing Debian changed
