"""Which docker CLI drives BuildKit, remembered on disk between runs (buildkit.find_cli's memo): a stand-in CLI, a
shell script that answers --version, counts how often a run had to start it."""

from __future__ import annotations

from pathlib import Path

from buildctl.engine import buildkit


def _fake_docker(path: Path, version: str) -> Path:
    """A stand-in docker CLI (a shell script) that answers --version and counts how often it was asked."""
    path.write_text(f"#!/bin/sh\necho asked >> {path}.count\necho 'Docker version {version}, build x'\n")
    path.chmod(0o755)
    return path


def test_the_cli_found_is_remembered_for_the_same_file_and_asked_again_when_it_changes(tmp_path: Path) -> None:
    cli = _fake_docker(tmp_path / "docker", "20.10.24")
    memo = tmp_path / "cache" / "docker-cli.json"

    def find() -> buildkit.Cli:
        buildkit._FOUND.clear()  # a new process: only the memo file remains
        return buildkit.find_cli(cli, memo=memo)

    def asked() -> int:
        return len((tmp_path / "docker.count").read_text().split())

    assert find() == buildkit.Cli(path=str(cli), version="20.10.24", buildx=False) and asked() == 1
    assert find().version == "20.10.24" and asked() == 1  # from the memo: no CLI started
    _fake_docker(cli, "20.10.25")  # replaced (another size and time): asked again
    assert find().version == "20.10.25" and asked() == 2
    memo.write_text("{not json")
    assert find().version == "20.10.25" and asked() == 3  # an unreadable memo is asked past, and rewritten
    assert find().version == "20.10.25" and asked() == 3
