"""An arm64 variant on this amd64 engine, declared its linux/arm64 builder and run under QEMU only on request.

The engine answers linux/amd64 when asked, so the configuration that lists it under "linux/arm64" is refused
unless the build passes --emulate, and then its nodes (none of them a compile) run arm64 code under
qemu-aarch64-static through binfmt_misc, and each node's record says the engine emulated the platform. The
stack's base is one tiny arm64 program standing as /bin/sh (hand-assembled below: it writes /arm64-ran with the
text "aarch64" and exits 0), so every RUN of the stack's nodes runs it, emulated; the final image holds the file
it wrote. Without a registered handler the RUN fails with "exec format error": the test can fail.

Registering the handler needs root, /proc/sys/fs/binfmt_misc (mounted here if it is not) and
qemu-user-static (scripts/testenv.sh installs it); where any of these is missing the test skips, saying
which. A handler this test registered is removed after it, and binfmt_misc unmounted if it mounted it.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildctl import cli
from buildctl.engine.engine import Engine
from buildctl.lock import lockfile
from buildctl.manifest import pins
from tests.engine.conftest import docker_cli
from tests.helpers import unique

PROJECT = Path(__file__).resolve().parents[2]
QEMU = Path("/usr/bin/qemu-aarch64-static")
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# Debian's qemu-aarch64 magic and mask (qemu's scripts/qemu-binfmt-conf.sh); F: the kernel opens the interpreter
# now, so that a container, whose filesystem has no qemu, can run it
REGISTRATION = (r":qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:"
                r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:" + str(QEMU) + ":F")


def aarch64_program() -> bytes:
    """A static aarch64 ELF (191 bytes): openat(AT_FDCWD, "/arm64-ran", O_WRONLY|O_CREAT|O_TRUNC, 0644),
    write(fd, "aarch64\\n", 8), exit(0); its arguments (a RUN's ``-c SCRIPT``) are ignored."""
    def movz(rd: int, imm: int) -> int:
        return 0xD2800000 | (imm << 5) | rd

    def adr(rd: int, offset: int) -> int:  # offset from the instruction, in bytes
        return 0x10000000 | ((offset & 3) << 29) | (((offset >> 2) & 0x7FFFF) << 5) | rd

    svc = 0xD4000001
    path, text = b"/arm64-ran\0", b"aarch64\n"
    count = 13
    path_at, text_at = 4 * count, 4 * count + len(path)
    words = [0x92800C60,  # movn x0, #99: AT_FDCWD (-100)
             adr(1, path_at - 4), movz(2, 0x241), movz(3, 0o644), movz(8, 56), svc,  # openat
             adr(1, text_at - 24), movz(2, len(text)), movz(8, 64), svc,  # write (x0: the fd)
             movz(0, 0), movz(8, 93), svc]  # exit(0)
    assert len(words) == count
    code = b"".join(struct.pack("<I", w) for w in words) + path + text
    base, header, segment = 0x400000, 64, 56
    size = header + segment + len(code)
    elf = (b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
           + struct.pack("<HHIQQQIHHHHHH", 2, 183, 1, base + header + segment, header, 0, 0, header, segment, 1, 0, 0, 0))
    return elf + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code


@pytest.fixture
def aarch64_binfmt() -> Iterator[None]:
    """A qemu-aarch64 handler registered with binfmt_misc for the test (skips, saying why, where it cannot be)."""
    if not QEMU.is_file():
        pytest.skip(f"{QEMU} is missing: no arm64 emulator to register (Debian: apt-get install qemu-user-static)")
    if os.geteuid() != 0:
        pytest.skip("registering a binfmt_misc handler needs root")
    mounted = False
    if not (BINFMT / "register").exists():
        done = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True,
                              text=True, timeout=30, check=False)
        if done.returncode != 0:
            pytest.skip(f"binfmt_misc cannot be mounted at {BINFMT}: {done.stderr.strip()}")
        mounted = True
    handler = BINFMT / "qemu-aarch64"
    registered = False
    try:
        if handler.exists():
            state = handler.read_text()
            if not state.startswith("enabled") or "flags: " not in state or "F" not in state.split("flags: ")[1]:
                pytest.skip(f"{handler} is registered by someone else, disabled or without the F flag (a container "
                            "cannot reach its interpreter): left as it is")
        else:
            try:
                (BINFMT / "register").write_text(REGISTRATION)
            except OSError as exc:
                pytest.skip(f"cannot register a qemu-aarch64 handler with binfmt_misc: {exc}")
            registered = True
        yield
    finally:
        if registered:
            handler.write_text("-1")
        if mounted:
            subprocess.run(["umount", str(BINFMT)], capture_output=True, timeout=30, check=False)


def _file_of(image: str, path: str, into: Path) -> bytes:
    container = docker_cli("create", image, "/unused").strip()
    try:
        docker_cli("cp", f"{container}:{path}", str(into))
        return into.read_bytes()
    finally:
        docker_cli("rm", "-f", container)


def _arch(image: str) -> str:
    return docker_cli("image", "inspect", "-f", "{{.Architecture}}", image).strip()


def test_an_arm64_variant_runs_on_its_emulated_builder_only_when_asked(
        aarch64_binfmt: None, engine: Engine, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        image_cleanup: Any, capsys: pytest.CaptureFixture[str]) -> None:
    stack = unique("emu")
    base = f"{registry}/buildctl-test/{stack}/arm-base:1"
    context = tmp_path / "base"
    context.mkdir()
    (context / "sh").write_bytes(aarch64_program())
    (context / "sh").chmod(0o755)
    (context / "Dockerfile").write_text("FROM scratch\nCOPY sh /bin/sh\n")
    monkeypatch.setenv("DOCKER_BUILDKIT", "0")  # the classic builder takes --platform without buildx
    docker_cli("build", "--platform", "linux/arm64", "-t", base, str(context))
    image_cleanup(base)
    assert _arch(base) == "arm64"
    digest = engine.push(base)

    project = tmp_path / "project"
    (project / "pins").mkdir(parents=True)
    (project / "images").symlink_to(PROJECT / "images")
    manifest = project / "pins" / f"{stack}.yaml"
    manifest.write_text(f"schema: 1\nstack: {stack}\nbase: {{alias: arm-base}}\nvariants:\n"
                        f"  grace: {{image: \"{base}\", platform: linux/arm64, cuda: \"13\"}}\n")
    lockfile.write_data(lockfile.lock_path(manifest), {
        "schema": 2, "stack": stack, "manifest_sha256": pins.manifest_sha256(manifest),
        "variants": {"grace": {"base": {"ref": base, "digest": digest, "platform": "linux/arm64"}}}})
    config = tmp_path / "config.toml"
    config.write_text('backend = "classic"\n\n[builders]\n"linux/arm64" = ["local"]\n')
    monkeypatch.setenv("BUILDCTL_CONFIG", str(config))
    monkeypatch.setenv("BUILDCTL_CACHE", str(tmp_path / "cache"))
    for var in ("BUILDCTL_REGISTRY", "BUILDCTL_BUILDERS", "BUILDCTL_BACKEND", "DOCKER_HOST"):
        monkeypatch.delenv(var, raising=False)
    argv = ["--project", str(project)]

    # the builder is asked, and answers amd64: without --emulate that is an error naming both
    assert cli.main([*argv, "plan", stack, "--local", "--json"]) == 8
    err = capsys.readouterr().err
    assert f"builder local is configured for linux/arm64 ([builders] in {config}) and answered linux/amd64" in err
    assert cli.main([*argv, "build", stack, "--local"]) == 8
    capsys.readouterr()

    assert cli.main([*argv, "plan", stack, "--local", "--emulate", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["route"] == {"platform": "linux/arm64", "emulated": True,
                             "missing": "no native linux/arm64 builder (local is linux/amd64)",
                             "builders": [{"endpoint": "local", "answered": "linux/amd64", "emulated": True}]}
    nodes = {n["name"]: n for n in plan["nodes"]}
    for n in nodes.values():
        if n["kind"] != "base":
            image_cleanup(n["ref"])
    assert plan["to_build"] == ["system", "python", "assemble"] and plan["refused"] is None
    assert {nodes[n]["builder"] for n in plan["to_build"]} == {"local (emulated on linux/amd64)"}

    assert cli.main([*argv, "build", stack, "--local", "--emulate"]) == 0
    out = capsys.readouterr().out
    assert "built 3 node(s) (system, python, assemble) with the classic backend on local (emulated on linux/amd64)" in out
    for node in ("system", "python", "assemble"):
        record = json.loads((tmp_path / "cache" / "state" / stack / "grace" / f"{node}.json").read_text())
        assert record["engine"] == "default (emulating linux/arm64)", record
    final = nodes["assemble"]["ref"]
    assert _arch(final) == "arm64"
    assert _file_of(final, "/arm64-ran", tmp_path / "ran") == b"aarch64\n"  # the arm64 program's, under QEMU
