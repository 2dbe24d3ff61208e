"""Hostile input, fourth pass: what came after the first three, the fleet's settings and the compiler cache's
reports. The configuration's compile_cache, builders (flat and by platform), download and git mirrors read from
config.toml and the environment; a component's build: numbers; what a compile leaves in /out (its stats file and
its wheel); the files `plan`, `build`, `push` and `nightly` read back from the cache (node records, the no-op
memo, the docker CLI's memo, the gate's saved report, earlier nightly reports); the bench scripts' own arguments.
Each defect a scripted run found (a Python traceback, a hang, a host file taken for a wheel, a value refused only
where it was used, after work was done) is reproduced here and refused where it is loaded instead.

Every test makes its own files under tmp_path; nothing reaches an engine, a registry or the network.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import NoReturn

import pytest

from buildctl.builder import compilecache, smoke
from buildctl.builder.steps import keep_wheel
from buildctl.config import load_config
from buildctl.engine import buildkit
from buildctl.errors import (
    BuildFailed,
    ManifestError,
    ManifestErrors,
    SmokeFailed,
    UnreachableError,
    UsageError,
)
from buildctl.graph.records import NodeRecord, RecordStore
from buildctl.manifest import pins
from buildctl.services import nightly, noop, wiring
from buildctl.ship import verify
from tests.unit.hostile_project import MANIFEST, make_project, run
from tests.unit.test_hostile_leftovers import unblocking


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_project(tmp_path, monkeypatch)


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "config.toml").write_text(text)
    return {"BUILDCTL_CONFIG": str(tmp_path / "config.toml"), "HOME": str(tmp_path)}


# ------------------------------------------------------------------------------------------ configuration


def test_a_configuration_integer_of_more_digits_than_int_reads_is_a_configuration_error(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`network_timeout = 999...` (5,000 digits) in config.toml ended every command in tomllib's ValueError (Python
    converts at most 4,300 digits; tomllib raises that, not its TOMLDecodeError); it is a configuration error at
    that line (exit 3)."""
    text = "network_timeout = 5\nstall_timeout = " + "9" * 5000 + "\n"
    (project / "none.toml").write_text(text)
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(project / "none.toml"), "HOME": str(project)})
    assert (info.value.location.line, info.value.location.column) == (2, 17)
    assert run(project, "pins", "check") == 3
    err = capsys.readouterr().err
    assert "none.toml:2:17: cannot read this value: Exceeds the limit" in err and "Traceback" not in err


@pytest.mark.parametrize(("url", "said"), [("https://[::1/", "Invalid IPv6 URL"),
                                           ("https://[zz]/", "does not appear to be an IPv4 or IPv6 address"),
                                           ("https://mirror.example:abc/", "could not be cast to integer"),
                                           ("https://mirror.example:99999/", "out of range"),
                                           ("http://127.0.0.1:0/", "names port 0"),
                                           ("file://mirror/srv/", "a file:// URL is file:///ABSOLUTE/PATH")])
def test_a_mirror_url_urllib_cannot_fetch_is_refused_where_it_is_loaded(tmp_path: Path, url: str, said: str) -> None:
    """download_mirrors = {"https://x/" = "https://[::1/"} was loaded, then every download through it ended in
    urllib's ValueError (a traceback: HttpFetcher.open catches only URLError and OSError) or went to no port or
    another host; the URL's host and port are checked where the configuration is read, in the file and from the
    environment (exit 3). git_mirrors too, whose URL reaches git."""
    key = "https://downloads.example/"
    env = _config(tmp_path, f'download_mirrors = {{ "{key}" = "{url}" }}\n')
    with pytest.raises(ManifestError, match=said) as info:
        load_config(env)
    assert info.value.location.key == f"download_mirrors.{key}" and info.value.location.line == 1
    with pytest.raises(ManifestError) as info:  # ('[::1' is refused there already: git's '::' transports)
        load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), "BUILDCTL_GIT_MIRRORS": f"{key}={url}"})
    assert info.value.location.file == "$BUILDCTL_GIT_MIRRORS"


def test_a_manifest_download_url_urllib_cannot_fetch_is_a_manifest_error() -> None:
    """The same rule holds a manifest's download URL (`lock` fetched it: ValueError from urllib)."""
    text = MANIFEST + ("downloads:\n  x:\n    dest: /opt/x\n    urls:\n"
                       "      any: {url: \"https://[::1/x.tar\", sha256: compute}\n")
    with pytest.raises(ManifestErrors, match=r"pins/t.yaml:10:.*Invalid IPv6 URL"):
        pins.load_text(text, "pins/t.yaml")


@pytest.mark.parametrize(("key", "mirror"), [("download_mirrors", "https://mirror.example"),
                                             ("download_mirrors", "https://mirror.example/nvidia"),
                                             ("git_mirrors", "file:///srv/git-mirrors")])
def test_a_mirror_that_would_join_the_rest_of_the_url_to_its_host_is_refused(tmp_path: Path, key: str,
                                                                            mirror: str) -> None:
    """download_mirrors = {"https://developer.download.nvidia.com/" = "https://mirror.example"}: the rest of each URL
    is appended to the mirror, so https://developer.download.nvidia.com/compute/x went to the host
    mirror.examplecompute (and a git mirror's to /srv/git-mirrorsorg/repo). A mirror whose prefix ends with '/' must
    end with '/' too (or ':', git@host: for git); refused at load naming the entry (exit 3)."""
    prefix = "https://developer.download.nvidia.com/"
    with pytest.raises(ManifestError, match=f"does not end with '/' as its prefix {re.escape(repr(prefix))} does") as info:
        load_config(_config(tmp_path, f'{key} = {{ "{prefix}" = "{mirror}" }}\n'))
    assert info.value.location.key == f"{key}.{prefix}"
    assert load_config(_config(tmp_path, f'{key} = {{ "{prefix}" = "{mirror}/" }}\n'))
    assert load_config(_config(tmp_path, 'git_mirrors = { "https://github.com/" = "git@mirror.example:" }\n'))


@pytest.mark.parametrize("url", ["https://mirror.example/", "http://[::1]:8080/m/", "https://u:token@m.example/",
                                 "file:///srv/mirror/", "file://localhost/srv/mirror/"])
def test_mirror_urls_that_are_fine(tmp_path: Path, url: str) -> None:
    key = "https://downloads.example/"
    assert load_config(_config(tmp_path, f'download_mirrors = {{ "{key}" = "{url}" }}\n')).download_mirrors == {key: url}


@pytest.mark.parametrize("endpoint", ["tcp://[1.2.3.4]:2375", "tcp://[:::]:2375", "ssh://ci@[::1::2]"])
def test_a_builder_whose_brackets_hold_no_ipv6_address_is_refused_at_load(tmp_path: Path, endpoint: str) -> None:
    """builders = ["tcp://[1.2.3.4]:2375"] (or in the [builders] table, BUILDCTL_BUILDERS, --builder) passed the
    endpoint rule: `plan` left the builder out as not answering (exit 0) and `build` failed at the engine (exit 8:
    "not a Docker engine address", urllib's ValueError inside docker-py). It is refused where it is read (exit 3;
    --builder: exit 2)."""
    with pytest.raises(ManifestError, match="names no valid host") as info:
        load_config(_config(tmp_path, f'[builders]\n"linux/amd64" = ["{endpoint}"]\n'))
    assert info.value.location.key == "builders.linux/amd64" and info.value.location.line == 2
    with pytest.raises(ManifestError, match="names no valid host"):
        load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), "BUILDCTL_BUILDERS": endpoint})
    with pytest.raises(UsageError, match=rf"--builder {re.escape(repr(endpoint))} names no valid host"):
        wiring.choose_builders(load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path)}), builders=[endpoint])


@pytest.mark.parametrize("source", ["file", "environment"])
def test_a_platform_of_no_builder_is_refused_at_load(tmp_path: Path, source: str) -> None:
    """`"linux/amd64" = []` (or BUILDCTL_BUILDERS="linux/amd64=", a typo) was a fleet of no builder: the backend
    became buildkit and `plan` said "build: backend buildkit on  ([builders] in ...)"; it is refused, naming it."""
    env = (_config(tmp_path, '[builders]\n"linux/amd64" = []\n"linux/arm64" = ["ssh://ci@grace-1"]\n')
           if source == "file" else
           {"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), "BUILDCTL_BUILDERS": "linux/amd64="})
    with pytest.raises(ManifestError, match="names no builder for linux/amd64") as info:
        load_config(env)
    assert info.value.location.key == "builders.linux/amd64"
    assert info.value.location.line == (2 if source == "file" else 0)


@pytest.mark.parametrize("endpoint", ["tcp://[::1]:2375", "ssh://ci@[fd00::5]:22", "tcp://10.0.0.5:2376", "local"])
def test_builders_that_are_fine(tmp_path: Path, endpoint: str) -> None:
    config = load_config(_config(tmp_path, f'[builders]\n"linux/amd64" = ["{endpoint}"]\n'))
    assert config.builders_by_platform == {"linux/amd64": (endpoint,)}


@pytest.mark.parametrize("below", [False, True])
def test_a_compile_cache_folder_that_is_a_file_is_refused_at_load(tmp_path: Path, below: bool) -> None:
    """compile_cache = "/path/to/a/file" (or a folder below one) was taken: the first compile's compilecache.setup
    ended in FileExistsError (NotADirectoryError), a traceback, once the nodes before it were built. It is refused
    where the configuration is read (exit 3), from the file and from BUILDCTL_COMPILE_CACHE."""
    (tmp_path / "file").write_text("x")
    value = str(tmp_path / "file" / "ccache") if below else str(tmp_path / "file")
    said = f"is below {tmp_path / 'file'}, which is not a folder" if below else "is not a folder"
    with pytest.raises(ManifestError, match=re.escape(said)) as info:
        load_config(_config(tmp_path, f'compile_cache = "{value}"\n'))
    assert (info.value.location.key, info.value.location.line) == ("compile_cache", 1)
    with pytest.raises(ManifestError, match=re.escape(said)):
        load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), "BUILDCTL_COMPILE_CACHE": value})
    fine = load_config(_config(tmp_path, f'compile_cache = "{tmp_path / "new" / "ccache"}"\n'))
    assert fine.compile_cache.folder == tmp_path / "new" / "ccache" and not (tmp_path / "new").exists()


@pytest.mark.parametrize(("value", "said"), [
    ("/", "is the root folder"), ("/etc/ccache", "is in the system folder /etc"),
    ("/usr/local/ccache", "is in the system folder /usr"), ("/var/lib/docker/x", "is in the system folder /var/lib"),
    ("{home}", "is the home folder"), ("{top}", "above the home folder"),
    ("{home}/.ssh/ccache", "is in {home}/.ssh, where credentials"), ("{home}/.docker", "is in {home}/.docker, where"),
    ("{link}/ccache", "is in {home}/.ssh, where credentials")])
def test_a_compile_cache_folder_no_compile_may_write_is_refused(tmp_path: Path, value: str, said: str) -> None:
    """The folder is mounted read-write into every compile container, which runs the code it compiles (a pull
    request's): compile_cache = "/", a system folder, the home folder or one above it, or a folder among the
    home folder's credentials (through a link too) was taken. Refused where read, naming the key (exit 3)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (tmp_path / "link").symlink_to(home / ".ssh")
    value, said = (x.format(home=home, link=tmp_path / "link", top=tmp_path) for x in (value, said))
    env = {"BUILDCTL_CONFIG": "/dev/null", "HOME": str(home), "BUILDCTL_COMPILE_CACHE": value}
    with pytest.raises(ManifestError, match=re.escape(said)) as info:
        load_config(env)
    assert info.value.location.key == "compile_cache" and info.value.exit_code == 3
    for fine in (home / ".cache" / "buildctl" / "ccache", tmp_path / "ccache", home / "ccache"):
        assert load_config({**env, "BUILDCTL_COMPILE_CACHE": str(fine)}).compile_cache.folder == fine


# ---------------------------------------------------------------------------------- a component's build:


DEMO = Path(__file__).resolve().parents[2] / "pins" / "demo.yaml"


@pytest.mark.parametrize(("line", "value"), [
    pytest.param("      memory_per_job_gib: 1", "9" * 400, id="memory-400-digits"),
    pytest.param("      memory_per_job_gib: 1", "-" + "9" * 309, id="memory-minus-309-digits"),
    pytest.param("      - {number: 7, head:", "9" * 400, id="pr-number-400-digits")])
def test_an_integer_past_floats_range_is_a_manifest_error(line: str, value: str) -> None:
    """`memory_per_job_gib: 999...` (309 to 4,300 digits: more is the int limit's own error) ended `pins check`,
    plan and build in float()'s OverflowError (a float field given an integer, or an integer field with bounds such
    as a pull request's number); it is an error at that line naming the key (exit 3)."""
    text = DEMO.read_text()
    assert line in text
    old = line.rsplit(" ", 1)[-1] if "memory" in line else "7"
    mutated = text.replace(line, line.replace(old, value) if "memory" in line else line.replace("number: 7", f"number: {value}"))
    n = text[:text.index(line)].count("\n") + 1
    with pytest.raises(ManifestErrors) as info:
        pins.load_text(mutated, str(DEMO), base_dir=DEMO.parent)
    found = [e for e in info.value.errors if e.location.line == n]
    assert found and f"got a number of {len(value.lstrip('-'))} digits" in found[0].detail, [str(e) for e in info.value.errors]


# ------------------------------------------------------------------------------ compile statistics (/out)


def test_a_stats_file_that_is_a_fifo_is_not_opened(tmp_path: Path) -> None:
    """The compile container writes /out, so its .buildctl-ccache-stats.json may be a FIFO: the build read it with
    read_text, which waits in open() until a writer comes, never (here the guard's writer ends the wait, and
    says that it had to). It counts as no stats, without being opened."""
    os.mkfifo(tmp_path / compilecache.STATS)
    with unblocking(tmp_path / compilecache.STATS) as opened:
        assert compilecache.read_stats(tmp_path) is None
    assert opened == []


@pytest.mark.parametrize("text", [pytest.param("[" * 100_000, id="deep"),
                                  pytest.param('{"cache_miss": 1}' + " " * (1 << 20), id="huge"),
                                  pytest.param(json.dumps({"cache_miss": 10**30}), id="count-past-int64")])
def test_a_stats_file_of_another_shape_counts_as_none(tmp_path: Path, text: str) -> None:
    """100,000 '[' ended the compile's thread (and the build) in json's RecursionError; a file past any stats' size
    was read whole; a count of 31 digits went into the record and `plan --json`. Each counts as no stats."""
    (tmp_path / compilecache.STATS).write_text(text)
    assert compilecache.read_stats(tmp_path) is None


def test_a_stats_file_linked_to_a_device_is_not_read(tmp_path: Path) -> None:
    (tmp_path / compilecache.STATS).symlink_to("/dev/zero")  # read_text read it without end
    assert compilecache.read_stats(tmp_path) is None
    (tmp_path / compilecache.STATS).unlink()
    (tmp_path / compilecache.STATS).write_text(json.dumps({"direct_cache_hit": 2, "cache_miss": 1}))
    assert compilecache.read_stats(tmp_path) == compilecache.Stats(hits=2, misses=1)


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_wheel_the_compile_left_that_is_no_regular_file_is_not_kept(tmp_path: Path, kind: str) -> None:
    """The compile container writes /out on this host: a `x-1.0-py3-none-any.whl` it left as a link to a host file
    (here a secret beside the cache) was copied by keep_wheel's copy2, link followed, into the wheel cache, then
    into the wheel's image and its push; a FIFO ended the build in shutil's SpecialFileError (a traceback), a
    folder in IsADirectoryError. Each is a BuildFailed naming the file (exit 9), and nothing is kept."""
    secret = tmp_path / "config.json"
    secret.write_text('{"auths": {"registry": {"auth": "c2VjcmV0"}}}')
    out = tmp_path / "out"
    out.mkdir()
    made = out / "x-1.0-py3-none-any.whl"
    {"link": lambda: made.symlink_to(secret), "fifo": lambda: os.mkfifo(made), "folder": made.mkdir}[kind]()
    final = tmp_path / "wheels" / "x" / ("k" * 64)
    with pytest.raises(BuildFailed, match=f"{made.name} is a .*, not a wheel file") as info:
        keep_wheel(final, made)
    assert info.value.exit_code == 9
    assert not final.exists() and not any((tmp_path / "wheels").rglob("*"))
    if kind == "folder":
        made.rmdir()
    else:
        made.unlink()
    made.write_bytes(b"PK\x03\x04")
    assert keep_wheel(final, made).read_bytes() == b"PK\x03\x04"


# ------------------------------------------------------------------------------ records under <cache>/state


GOOD_RECORD = {"schema": 1, "node": "wheel:x", "kind": "wheel", "key": "k" * 64, "parents": {"system": "s" * 64},
               "template": "t", "inputs": {"env": {"A": "1"}}, "built_at": "", "engine": "default",
               "backend": "classic", "cache_hits": 3, "cache_misses": 1}


def test_a_record_that_is_a_fifo_is_not_opened(tmp_path: Path) -> None:
    """`plan` and `build` read each node's record (and `has`, whether a local tag is trusted) with read_text: a
    FIFO at <cache>/state/<stack>/<variant>/<node>.json made them wait forever in open(). It is no record."""
    store = RecordStore(tmp_path)
    path = store.path("t", "v", "wheel:x")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with unblocking(path) as opened:
        assert store.load("t", "v", "wheel:x") is None
        assert not store.has("t", "v", "wheel:x", "k" * 64)
    assert opened == []


@pytest.mark.parametrize("data", [pytest.param("[" * 100_000, id="deep"),
                                  pytest.param({**GOOD_RECORD, "parents": {"system": 5}}, id="parent-key-a-number"),
                                  pytest.param({**GOOD_RECORD, "parents": [["system", "s"]]}, id="parents-a-list"),
                                  pytest.param({**GOOD_RECORD, "inputs": ["env"]}, id="inputs-a-list"),
                                  pytest.param({**GOOD_RECORD, "key": ["k"]}, id="key-a-list"),
                                  pytest.param({**GOOD_RECORD, "cache_hits": 10**30}, id="count-past-int64")])
def test_a_record_of_another_shape_is_no_record(tmp_path: Path, data: object) -> None:
    """A damaged or hand-edited record: 100,000 '[' ended plan and build in json's RecursionError (a traceback);
    `"parents": {"system": 5}` in a TypeError where the plan says why a key moved (was[:12]); a list of inputs or a
    key that is a list was taken as a record and diffed. Each is no record (the plan says none is recorded); a
    count of 31 digits is no count."""
    store = RecordStore(tmp_path)
    path = store.path("t", "v", "wheel:x")
    path.parent.mkdir(parents=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    got = store.load("t", "v", "wheel:x")
    if isinstance(data, dict) and data.get("cache_hits") == 10**30:
        assert got is not None and got.cache_hits is None and got.cache_misses == 1
    else:
        assert got is None
    path.write_text(json.dumps(GOOD_RECORD))
    assert store.load("t", "v", "wheel:x") == NodeRecord.from_json(GOOD_RECORD)


# -------------------------------------------------------------------------- the docker CLI's memo (buildkit)


def test_the_docker_cli_memo_is_read_as_an_untrusted_cache_file(tmp_path: Path) -> None:
    """<cache>/docker-cli.json remembers which docker CLI drives BuildKit: a FIFO there made a buildkit build wait
    in open() forever, 100,000 '[' ended it in json's RecursionError, and a memo whose stamp matched but whose
    "path" was another program had that program run as the docker CLI. Each is no memo (the CLI is asked again)."""
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\n")
    stamp = buildkit._stamp([str(cli)])
    memo = tmp_path / "docker-cli.json"
    good = {"candidates": stamp, "path": str(cli), "version": "20.10.24", "buildx": False}
    memo.write_text(json.dumps(good))
    assert buildkit._recall(memo, stamp) == buildkit.Cli(path=str(cli), version="20.10.24", buildx=False)
    memo.write_text(json.dumps({**good, "path": "/tmp/not-a-candidate"}))
    assert buildkit._recall(memo, stamp) is None
    memo.write_text("[" * 100_000)
    assert buildkit._recall(memo, stamp) is None
    memo.unlink()
    os.mkfifo(memo)
    with unblocking(memo) as opened:
        assert buildkit._recall(memo, stamp) is None
    assert opened == []


# --------------------------------------------------------------------------- the no-op build's memo (build)


def test_a_no_op_memo_that_is_deep_or_no_regular_file_is_no_memo(project: Path) -> None:
    """`build` first asks the memo of an earlier build of the same request (<cache>/state/noop/<digest>.json):
    100,000 '[' there ended every such build in json's RecursionError (a traceback), and a FIFO there made it
    wait in open() forever. Either is no memo: the build goes the full way."""
    env = {"DOCKER_HOST": "unix:///nonexistent.sock"}
    config = load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(project), "BUILDCTL_CACHE": str(project / "cache")})
    req = noop.request(project, {"stack": "t"}, engine=None, env=env)
    memo = noop.memo_path(config, noop._request_digest(req, config))
    memo.parent.mkdir(parents=True)
    memo.write_text("[" * 100_000)
    assert noop.cached(req, config, env) is None
    memo.unlink()
    os.mkfifo(memo)
    with unblocking(memo) as opened:
        assert noop.cached(req, config, env) is None
    assert opened == []


def test_a_file_the_memo_hashes_that_became_a_fifo_is_not_opened(project: Path) -> None:
    """The memo hashes every file the target was made from before anything else: a manifest replaced by a FIFO
    (or a link to one; a link to /dev/zero, which a pull request can hold, was read without end) made `build` wait
    in open() before the manifest's loader could refuse it. Such a file hashes as none: the memo does not hold."""
    manifest = project / "pins" / "t.yaml"
    digest = noop._file_digest(str(manifest))
    assert digest is not None and len(digest) == 64
    manifest.unlink()
    os.mkfifo(manifest)
    with unblocking(manifest) as opened:
        assert noop._file_digest(str(manifest)) is None
    assert opened == []
    manifest.unlink()
    manifest.symlink_to("/dev/zero")
    assert noop._file_digest(str(manifest)) is None


# ----------------------------------------------------------------------- the smoke gate's saved report (push)


@pytest.mark.parametrize("kind", ["deep", "list", "no-report", "exit-code-infinite", "fifo"])
def test_a_saved_gate_report_of_another_shape_is_a_smoke_error_not_a_traceback(tmp_path: Path, kind: str) -> None:
    """`push` attaches the smoke gate's saved report (<cache>/reports/smoke/.../<id>.build.json) as the image's
    evidence when the registry has none: 100,000 '[' there ended it in json's RecursionError, a JSON list or a
    report without "report" in a TypeError or KeyError, "exit_code": Infinity in an OverflowError (tracebacks),
    and a FIFO made it wait in open() forever. Each is the smoke error a saved file that is not JSON already was."""
    image_id = "sha256:" + "a" * 64
    path = tmp_path / f"{smoke.report_stem(image_id, 'build')}.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text({"deep": "[" * 100_000, "list": "[]", "no-report": '{"image": "x", "exit_code": 0}',
                         "exit-code-infinite": '{"report": {}, "image": "x", "exit_code": Infinity}'}[kind])
    with unblocking(path) as opened, pytest.raises(SmokeFailed, match=re.escape(f"no usable report for {image_id}: {path}")):
        smoke.recorded(tmp_path, image_id, "build")
    assert opened == []
    assert smoke.recorded(tmp_path, "sha256:" + "b" * 64, "build") is None  # none saved: none


# ----------------------------------------------------------------------------------- earlier nightly reports


def test_an_earlier_nightly_report_that_is_a_fifo_is_passed_over_unopened(tmp_path: Path) -> None:
    """A nightly reads the earlier reports in its report folder (any --report-dir) before its first stage: a FIFO
    named 2*.json there made it wait forever in open() (the bounded reader caps what it reads, but opens pipes).
    It is passed over, as a report that is not JSON is, and never opened."""
    fifo = tmp_path / "20260101T000000Z-1.json"
    os.mkfifo(fifo)
    good = {"runs": [{"build": {"node_keys": {"a": "k"}}, "lock": {"hash": "h"}, "stack": "t", "variant": "w"}]}
    (tmp_path / "20260102T000000Z-1.json").write_text(json.dumps(good))
    with unblocking(fifo) as opened:
        assert list(nightly.previous_runs(tmp_path)) == [("t", "w")]
    assert opened == []


# --------------------------------------------------------------------------------------- bench scripts


@pytest.mark.parametrize("ref", ["127.0.0.1:99999/a:1", "127.0.0.1:/a:1", "localhost:0/a:1", "localhost:5000.example/a:1",
                                 "127.0.0.1:5000/a:b/c:1", "127.0.0.1:5000/../a:1", "127.0.0.1:5000/A:1",
                                 "127.0.0.1:5000/a:1:2", "127.0.0.1:5000/a:$(id)"])
def test_pull_floor_refuses_a_malformed_reference_with_its_message(ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/pull_floor.py REF checked only that REF began with 127.0.0.1: or localhost:; a port past 65535, a
    repository or tag the registry client refuses ended in that client's PushError, a traceback. Each is the
    script's own message (exit 2), before the registry is asked (here: none could be)."""
    from bench import pull_floor

    assert pull_floor.main([ref]) == 2
    assert capsys.readouterr().err == (f"pull_floor: not an image of a registry on this machine: {ref!r} "
                                       "(give 127.0.0.1:PORT/REPO:TAG)\n")


def test_pull_floor_checks_out_first_and_says_what_the_registry_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--out naming a file was found only after every pull (FileExistsError from mkdir, a traceback), and a registry
    that does not answer ended the script in buildctl's UnreachableError, a traceback. --out is checked before
    anything is asked (exit 2); the registry's refusal is a message (exit 1)."""
    from bench import pull_floor

    (tmp_path / "file").write_text("x")
    assert pull_floor.main(["127.0.0.1:5000/a:1", "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.startswith(f"pull_floor: --out {tmp_path / 'file'}: cannot use it as a folder")

    def unreachable(*_args: object) -> NoReturn:
        raise UnreachableError("the registry 127.0.0.1:5000 does not answer")

    monkeypatch.setattr(pull_floor, "forms", unreachable)
    monkeypatch.setattr(pull_floor, "uptime", lambda: "load average: 0.00")  # (`uptime` is a process)
    assert pull_floor.main(["127.0.0.1:5000/a:1", "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.endswith("\npull_floor: the registry 127.0.0.1:5000 does not answer\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "said"), [
    (["--sizes", "10,10"], "--sizes takes increasing component counts"),
    (["--sizes", "0,5"], "--sizes takes increasing component counts"),
    (["--sizes", "50,10"], "--sizes takes increasing component counts"),
    (["--weight", "-1"], "--weight must be 0 or more"),
    (["--graph-nodes", "3"], "--graph-nodes must be 0 (no graph) or at least 6"),
    (["--registry", "registry"], "--registry must be HOST:PORT"),
    (["--registry", "[::1]:5000"], "--registry must be HOST:PORT"),
    (["--registry", "127.0.0.1:99999"], "--registry must be HOST:PORT"),
    (["--out", "FILE"], "cannot use it as a folder")])
def test_bench_rebuild_checks_its_options_before_it_starts(tmp_path: Path, argv: list[str], said: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """bench/bench_rebuild.py took --sizes 10,10 (name_growth's ZeroDivisionError once every build had run),
    --sizes 0 or a descending list, --weight -1 (a commit of nothing), --graph-nodes 3 (a stack of -1 components),
    a --registry the relay cannot split or reach (ValueError in its thread, or every connection dropped) and an
    --out that is a file (FileExistsError at the end). Each is refused by argparse's error (exit 2) before
    anything starts (here: starting anything is a failure of the unit tests' guard)."""
    from bench import bench_rebuild

    (tmp_path / "FILE").write_text("x")
    argv = [str(tmp_path / a) if a == "FILE" else a for a in argv]
    with pytest.raises(SystemExit) as info:
        bench_rebuild.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.mark.parametrize("kind", ["deep", "list", "fifo"])
def test_bench_report_of_a_file_that_is_no_result_is_said_so(tmp_path: Path, kind: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`bench_rebuild.py --report FILE` of 100,000 '[' ended in RecursionError, of a JSON list in a TypeError
    (tracebacks), and of a FIFO waited forever; each is "not a result file of this bench" (exit 1)."""
    from bench import bench_rebuild

    report = tmp_path / "r.json"
    if kind == "fifo":
        os.mkfifo(report)
    else:
        report.write_text("[" * 100_000 if kind == "deep" else "[]")
    with unblocking(report) as opened:
        assert bench_rebuild.main(["--report", str(report)]) == 1
    assert opened == []
    assert f"bench: error: {report}: not a result file of this bench" in capsys.readouterr().err


# ------------------------------------------------------------------------------ verify's base records

BASE_RECORD = {"schema": 1, "ref": "127.0.0.1:5000/b:1", "digest": "sha256:" + "a" * 64, "platform": "linux/amd64",
               "env": {"PATH": "/usr/bin"}, "labels": {}, "probe": None, "recorded_at": "2026-12-06T00:00:00Z"}


def test_a_base_record_that_is_a_fifo_is_passed_over_unopened(tmp_path: Path) -> None:
    """`<cache>/reports/bases/<hex>.json` made a FIFO: `verify` waited forever in open (get, and latest_for's walk
    over every record). It is no record now, never opened."""
    store = verify.BaseRecords(tmp_path)
    store.root.mkdir()
    fifo = store.root / ("b" * 64 + ".json")
    os.mkfifo(fifo)
    with unblocking(fifo) as opened:
        assert store.get("sha256:" + "b" * 64) is None
        assert store.latest_for("127.0.0.1:5000/b", other_than="sha256:" + "c" * 64) is None
    assert opened == []


@pytest.mark.parametrize("data", [
    pytest.param("[" * 100_000, id="deep"), pytest.param([1], id="a-list"),
    pytest.param({**BASE_RECORD, "env": [["PATH", "/usr/bin"]]}, id="env-a-list-of-pairs"),
    pytest.param({**BASE_RECORD, "env": ["PATH"]}, id="env-a-list"),
    pytest.param({**BASE_RECORD, "labels": {"a": 5}}, id="label-a-number"),
    pytest.param({**BASE_RECORD, "recorded_at": 5}, id="time-a-number"),
    pytest.param({**BASE_RECORD, "ref": None}, id="ref-null"),
    pytest.param({**BASE_RECORD, "probe": {"python": 3}}, id="probe-python-a-number"),
    pytest.param({**BASE_RECORD, "probe": {"errors": ["x"]}}, id="probe-errors-a-list")])
def test_a_base_record_of_another_shape_is_none(tmp_path: Path, data: object) -> None:
    """A damaged record is as good as none (the docstring always said so): a deep one was json's RecursionError,
    a list env a ValueError, a number among the labels or as the time a TypeError in the comparisons."""
    store = verify.BaseRecords(tmp_path)
    store.root.mkdir()
    (store.root / ("a" * 64 + ".json")).write_text(data if isinstance(data, str) else json.dumps(data))
    assert store.get("sha256:" + "a" * 64) is None
    assert store.latest_for("127.0.0.1:5000/b", other_than="sha256:" + "c" * 64) is None
    (store.root / ("a" * 64 + ".json")).write_text(json.dumps(BASE_RECORD))
    good = store.get("sha256:" + "a" * 64)
    assert good is not None and good.env == {"PATH": "/usr/bin"}
    assert store.latest_for("127.0.0.1:5000/b", other_than="sha256:" + "c" * 64) == good


# ----------------------------------------------------------------- timeouts too short, builders named twice


@pytest.mark.parametrize(("key", "value"), [("network_timeout", "1e-300"), ("network_timeout", "0.05"),
                                            ("stall_timeout", "0.01")])
def test_a_timeout_no_connection_can_meet_is_refused(tmp_path: Path, key: str, value: str) -> None:
    """network_timeout = 1e-300 was taken: every connection then timed out and was reported as an unreachable
    registry or engine (exit 6), far from its cause. At least 0.1 s, from the file (its line) and the variable."""
    with pytest.raises(ManifestError, match=r"must be at least 0\.1 s") as info:
        load_config(_config(tmp_path, f"{key} = {value}\n"))
    assert (info.value.location.key, info.value.location.line) == (key, 1)
    with pytest.raises(ManifestError, match=r"must be at least 0\.1 s"):
        load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), f"BUILDCTL_{key.upper()}": value})
    assert getattr(load_config(_config(tmp_path, f"{key} = 0.1\n")), key) == 0.1


def test_a_builder_named_twice_is_refused(tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--builder local --builder local` (or builders = ["local", "local"]) made two clients of one engine, each
    given part of the nodes as if it were a builder of its own. Refused: the flag a usage error (exit 2), the
    configuration an error naming the key (exit 3)."""
    with pytest.raises(ManifestError, match="'local' is listed twice") as info:
        load_config(_config(tmp_path, 'builders = ["local", "tcp://10.0.0.5:2376", "local"]\n'))
    assert info.value.location.key == "builders"
    with pytest.raises(ManifestError, match="listed twice"):
        load_config({"BUILDCTL_CONFIG": "/dev/null", "HOME": str(tmp_path), "BUILDCTL_BUILDERS": "local, local"})
    assert run(DEMO.parents[1], "plan", "demo", "--builder", "local", "--builder", "local") == 2
    assert "--builder 'local' is given twice" in capsys.readouterr().err
