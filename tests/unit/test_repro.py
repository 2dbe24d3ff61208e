"""repro: comparing two builds of a node from `docker save` archives the tests write themselves."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from buildctl.manifest.model import ReproLevel
from buildctl.repro import levels as levels_of
from buildctl.repro import repro
from buildctl.repro.archive import ImageConfig, SavedImages, dpkg_versions
from buildctl.repro.repro import Cause, Floating, Side, Verdict

EPOCH = 315532800


@dataclass
class F:
    """One entry of a layer the test writes."""

    path: str
    data: bytes | None = b""  # None: a folder
    mtime: int = EPOCH
    mode: int = 0o644
    link: str = ""  # a symlink target
    pax: dict[str, str] = field(default_factory=dict)


def layer_bytes(entries: list[F]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            info = tarfile.TarInfo(e.path)
            info.mtime = e.mtime
            info.pax_headers = dict(e.pax)
            if e.link:
                info.type = tarfile.SYMTYPE
                info.linkname = e.link
                info.mode = 0o777
                tf.addfile(info)
            elif e.data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tf.addfile(info)
            else:
                info.size = len(e.data)
                info.mode = e.mode
                tf.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def diff_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def save(path: Path, layers: list[list[F]], *, config: dict[str, object] | None = None, tag: str = "img:1") -> Path:
    """A `docker save` archive (docker 20.10 layout) of one image made of ``layers``."""
    blobs = [layer_bytes(entries) for entries in layers]
    ids = [diff_id(b) for b in blobs]
    cfg = {"architecture": "amd64", "os": "linux", "created": "2025-01-01T00:00:00Z",
           "config": config or {"Env": ["PATH=/usr/bin"]}, "rootfs": {"type": "layers", "diff_ids": ids}}
    cfg_bytes = json.dumps(cfg).encode()
    cfg_name = hashlib.sha256(cfg_bytes).hexdigest() + ".json"
    manifest = [{"Config": cfg_name, "RepoTags": [tag], "Layers": [f"{i[7:19]}{n}/layer.tar" for n, i in enumerate(ids)]}]
    with tarfile.open(path, "w") as tf:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        add(cfg_name, cfg_bytes)
        for (name, blob) in zip(manifest[0]["Layers"], blobs, strict=True):
            add(str(name), blob)
        add("manifest.json", json.dumps(manifest).encode())
    return path


def side(archive: Path | None, *, key: str = "k1", base_layers: int = 0, ref: str = "r") -> Side:
    assert archive is not None
    saved = SavedImages(archive)
    img = saved.image()
    return Side(ref=ref, key=key, diff_ids=img.diff_ids[base_layers:], config=img.config, archive=saved)


def compare(tmp_path: Path, a: list[list[F]], b: list[list[F]], *, kind: str = "system",
            level: ReproLevel | None = ReproLevel.BIT, floating: tuple[Floating, ...] = (),
            config_a: dict[str, object] | None = None, config_b: dict[str, object] | None = None,
            keys: tuple[str, str] = ("k1", "k1")) -> repro.NodeReport:
    sa = side(save(tmp_path / "a.tar", a, config=config_a), key=keys[0], ref="a")
    sb = side(save(tmp_path / "b.tar", b, config=config_b), key=keys[1], ref="b")
    return repro.compare_node(node=kind, kind=kind, level=level, side_a=sa, side_b=sb, floating=floating)


def wheel(members: dict[str, bytes], date: tuple[int, int, int, int, int, int] = (1980, 1, 1, 0, 0, 0)) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=date), data)
    return buf.getvalue()


BASE = [F("usr", None), F("usr/bin", None), F("usr/bin/tool", b"#!/bin/sh\n", mode=0o755)]


# ------------------------------------------------------------------------------------------ verdicts


def test_same_layers_are_bit_identical_without_reading_them(tmp_path: Path) -> None:
    layer = [F("opt", None), F("opt/x", b"x\n")]
    a = side(save(tmp_path / "a.tar", [BASE, layer]), base_layers=1)
    # the same diff IDs need no archive at all
    b = Side(ref="b", key="k1", diff_ids=a.diff_ids, config=a.config, archive=None)
    r = repro.compare_node(node="system", kind="system", level=ReproLevel.BIT, side_a=a, side_b=b)
    assert r.verdict is Verdict.BIT and r.causes == () and r.meets_level
    assert [p.same for p in r.layers] == [True]


def test_mtimes_only_are_semantically_identical(tmp_path: Path) -> None:
    r = compare(tmp_path, [BASE, [F("opt", None, mtime=1000), F("opt/x", b"x\n")]],
                [BASE, [F("opt", None, mtime=2000), F("opt/x", b"x\n")]])
    assert r.verdict is Verdict.SEMANTIC
    assert r.causes == (Cause.TIMESTAMPS,)
    assert [(f.path, f.change) for f in r.files] == [("opt", "mtime")]
    assert r.metadata_summary() == ["mtimes of 1 path(s), e.g. /opt"]
    assert not r.meets_level  # declared bit
    assert repro.compare_node(node="n", kind="system", level=ReproLevel.SEMANTIC, side_a=r_side(tmp_path, "a"),
                              side_b=r_side(tmp_path, "b")).meets_level


def r_side(tmp_path: Path, name: str) -> Side:
    return side(tmp_path / f"{name}.tar", base_layers=0)


def test_build_metadata_left_behind_is_named(tmp_path: Path) -> None:
    pkg = "usr/lib/python3/dist-packages/mod"
    a = [F(f"{pkg}/__init__.py", b"x = 1\n"), F(f"{pkg}/__pycache__/__init__.cpython-311.pyc", b"\x01pyc-a"),
         F("var/log/apt/history.log", b"Start-Date: 10:00\n"), F("var/cache/ldconfig/aux-cache", b"aa")]
    b = [F(f"{pkg}/__init__.py", b"x = 1\n"), F(f"{pkg}/__pycache__/__init__.cpython-311.pyc", b"\x01pyc-b"),
         F("var/log/apt/history.log", b"Start-Date: 11:00\n"), F("var/cache/ldconfig/aux-cache", b"bb")]
    r = compare(tmp_path, [a], [b], level=ReproLevel.SEMANTIC)
    assert r.verdict is Verdict.SEMANTIC and r.meets_level
    assert r.causes == (Cause.BUILD_METADATA,)
    assert sorted(f.path for f in r.files if f.metadata) == [
        f"{pkg}/__pycache__/__init__.cpython-311.pyc", "var/cache/ldconfig/aux-cache", "var/log/apt/history.log"]
    assert r.metadata_summary()[0].startswith("build metadata: 3 path(s)")


def test_same_entries_in_another_order_differ_only_in_the_archive(tmp_path: Path) -> None:
    x, y = F("opt/x", b"x"), F("opt/y", b"y")
    r = compare(tmp_path, [[F("opt", None), x, y]], [[F("opt", None), y, x]])
    assert r.verdict is Verdict.SEMANTIC and r.causes == (Cause.ARCHIVE,) and r.files == ()
    assert "tar headers" in r.metadata_summary()[0]
    # pax atime/ctime headers are archive headers too
    r = compare(tmp_path, [[F("opt/x", b"x", pax={"atime": "1.5"})]], [[F("opt/x", b"x", pax={"atime": "2.5"})]])
    assert r.verdict is Verdict.SEMANTIC and r.causes == (Cause.ARCHIVE,)
    assert "headers (atime/ctime" in r.notes[0]


def test_changed_added_removed_files_with_sizes_and_hashes(tmp_path: Path) -> None:
    r = compare(tmp_path, [[F("etc", None), F("etc/app.conf", b"a=1\n"), F("etc/old", b"old")]],
                [[F("etc", None), F("etc/app.conf", b"a=22\n", mode=0o600), F("etc/new", b"new!")]])
    assert r.verdict is Verdict.DIFFERENT and r.causes == (Cause.UNKNOWN,) and not r.meets_level
    by = {f.path: f for f in r.files}
    assert by["etc/app.conf"].what == ("content", "mode")
    assert by["etc/old"].change == "removed" and by["etc/new"].change == "added"
    h1, h22 = (hashlib.sha256(x).hexdigest() for x in (b"a=1\n", b"a=22\n"))
    assert by["etc/app.conf"].line() == f"* /etc/app.conf 4 B {h1[:12]} -> 5 B {h22[:12]}; mode"
    assert by["etc/new"].line() == f"+ /etc/new (4 B, sha256 {hashlib.sha256(b'new!').hexdigest()[:12]})"
    j = by["etc/app.conf"].to_json()
    assert j["a"] == {"kind": "file", "mode": "0644", "owner": "0:0", "mtime": EPOCH, "size": 4,
                      "sha256": h1}


def test_a_package_version_from_a_floating_input(tmp_path: Path) -> None:
    site = "usr/local/lib/python3.11/dist-packages"

    def dist(version: str) -> list[F]:
        info = f"{site}/floaty-{version}.dist-info"
        return [F(f"{site}/floaty_mod/__init__.py", f"VERSION = {version!r}\n".encode()),
                F(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: floaty\nVersion: {version}\n\nBody\n".encode()),
                F(f"{info}/RECORD", b"...")]

    hint = Floating(what="pip floaty (not pinned to one version in the manifest)", packages=("floaty",))
    r = compare(tmp_path, [dist("1.0")], [dist("1.1")], kind="python", floating=(hint,))
    assert r.verdict is Verdict.DIFFERENT
    assert Cause.FLOATING_INPUT in r.causes and Cause.UNKNOWN not in r.causes
    assert [p.line() for p in r.packages] == ["python floaty: 1.0 -> 1.1"]
    assert r.notes == ("floating input: pip floaty (not pinned to one version in the manifest)",)
    changes = {(f.path.rsplit("/", 2)[-2], f.change) for f in r.files if f.path.endswith("METADATA")}
    assert changes == {("floaty-1.0.dist-info", "removed"), ("floaty-1.1.dist-info", "added")}
    # a file that a floating fetch wrote, named by path
    byfile = Floating(what="curl fetches https://x.example/tool", paths=("/usr/local/bin/tool",))
    r = compare(tmp_path, [[F("usr/local/bin/tool", b"v1")]], [[F("usr/local/bin/tool", b"v2")]], floating=(byfile,))
    assert r.causes == (Cause.FLOATING_INPUT,) and r.notes == ("floating input: curl fetches https://x.example/tool",)


def test_dpkg_status_versions(tmp_path: Path) -> None:
    def status(version: str) -> bytes:
        return (f"Package: jq\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}\n"
                "Description: x\n more\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n").encode()

    assert dpkg_versions(status("1.6-2")) == {"jq": "1.6-2"}
    r = compare(tmp_path, [[F("var/lib/dpkg/status", status("1.6-2"))]], [[F("var/lib/dpkg/status", status("1.6-3"))]])
    assert [p.line() for p in r.packages] == ["deb jq: 1.6-2 -> 1.6-3"]
    assert Cause.FLOATING_INPUT in r.causes


def test_a_shared_object_that_differs_with_identical_inputs(tmp_path: Path) -> None:
    r = compare(tmp_path, [[F("usr/lib/libfast.so.1", b"\x7fELF-a")]], [[F("usr/lib/libfast.so.1", b"\x7fELF-b")]],
                kind="wheel", level=ReproLevel.SEMANTIC)
    assert r.causes == (Cause.NONDETERMINISTIC_COMPILE,) and r.verdict is Verdict.DIFFERENT and not r.meets_level
    assert "/usr/lib/libfast.so.1" in r.notes[0]
    # the same bytes under different keys: the inputs differed, not the compiler
    r = compare(tmp_path, [[F("usr/lib/libfast.so.1", b"a")]], [[F("usr/lib/libfast.so.1", b"b")]], keys=("k1", "k2"))
    assert r.causes == (Cause.INPUTS,)


def test_a_difference_that_comes_from_a_node_it_builds_on(tmp_path: Path) -> None:
    site = "usr/local/lib/python3.11/dist-packages/fastmath"
    a, b = [[F(f"{site}/__init__.py", b"STAMP = 1\n")]], [[F(f"{site}/__init__.py", b"STAMP = 2\n")]]
    r = compare(tmp_path, a, b, kind="assemble")
    assert r.causes == (Cause.UNKNOWN,)
    sa, sb = r_side(tmp_path, "a"), r_side(tmp_path, "b")
    r = repro.compare_node(node="assemble", kind="assemble", level=ReproLevel.BIT, side_a=sa, side_b=sb,
                           upstream=["wheel:fastmath"])
    assert r.causes == (Cause.UPSTREAM,) and r.notes == ("builds on wheel:fastmath, which differ(s) between the builds",)


def test_wheels_are_compared_by_their_members(tmp_path: Path) -> None:
    members = {"fastmath/__init__.py": b"from ._ext import *\n", "fastmath/_ext.so": b"\x7fELF",
               "fastmath-0.2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fastmath\nVersion: 0.2.0\n"}
    a = wheel(members, (1980, 1, 1, 0, 0, 0))
    b = wheel(members, (2025, 6, 1, 12, 0, 0))
    assert a != b
    r = compare(tmp_path, [[F("wheel", None), F("wheel/fastmath-0.2.0-cp311-cp311-linux_x86_64.whl", a)]],
                [[F("wheel", None), F("wheel/fastmath-0.2.0-cp311-cp311-linux_x86_64.whl", b)]], kind="wheel",
                level=ReproLevel.SEMANTIC)
    assert r.verdict is Verdict.SEMANTIC and r.causes == (Cause.TIMESTAMPS,)  # zip dates are timestamps
    c = wheel({**members, "fastmath/_ext.so": b"\x7fELF-other"})
    r = compare(tmp_path, [[F("wheel/fastmath-0.2.0-cp311-cp311-linux_x86_64.whl", a)]],
                [[F("wheel/fastmath-0.2.0-cp311-cp311-linux_x86_64.whl", c)]], kind="wheel", level=ReproLevel.SEMANTIC)
    assert r.verdict is Verdict.DIFFERENT and r.causes == (Cause.NONDETERMINISTIC_COMPILE,)
    [f] = r.files
    assert f.members == (("fastmath/_ext.so", "changed"),)
    assert "members: changed fastmath/_ext.so" in f.line()
    # the version inside a wheel is a package too
    d = wheel({**members, "fastmath-0.2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fastmath\nVersion: 0.3\n"})
    r = compare(tmp_path, [[F("wheel/x.whl", a)]], [[F("wheel/x.whl", d)]], kind="wheel")
    assert [p.line() for p in r.packages] == ["wheel fastmath: 0.2.0 -> 0.3"]


def test_whiteouts_are_what_a_node_removes(tmp_path: Path) -> None:
    r = compare(tmp_path, [[F("opt/.wh.old-tree", b"", mtime=1000)]], [[F("opt/.wh.old-tree", b"", mtime=2000)]])
    assert r.verdict is Verdict.SEMANTIC and [(f.path, f.a.kind if f.a else "") for f in r.files] == [
        ("opt/old-tree", "whiteout")]
    r = compare(tmp_path, [[F("opt/.wh.old-tree", b"")]], [[F("opt/keep", b"")]])
    assert {(f.path, f.change) for f in r.files} == {("opt/old-tree", "removed"), ("opt/keep", "added")}


def test_a_later_own_layer_wins_and_its_whiteouts_apply(tmp_path: Path) -> None:
    first = [F("opt", None), F("opt/tmpfile", b"scratch"), F("opt/keep", b"1")]
    second = [F("opt/.wh.tmpfile", b""), F("opt/keep", b"2")]
    a = SavedImages(save(tmp_path / "a.tar", [first, second]))
    tree = a.tree(a.image().diff_ids)
    assert sorted(tree.entries) == ["opt", "opt/keep", "opt/tmpfile"]
    assert tree.entries["opt/tmpfile"].kind == "whiteout" and tree.entries["opt/keep"].size == 1


def test_config_fields_and_build_time_labels(tmp_path: Path) -> None:
    layer = [[F("x", b"x")]]
    ca: dict[str, object] = {"Env": ["A=1"], "Labels": {"org.opencontainers.image.created": "t1", "k": "v"}, "WorkingDir": "/w"}
    r = compare(tmp_path, layer, layer, config_a=ca,
                config_b={**ca, "Labels": {"org.opencontainers.image.created": "t2", "k": "v"}})
    assert r.verdict is Verdict.BIT and r.meets_level
    assert [c.field for c in r.config] == ["labels.org.opencontainers.image.created"] and r.config[0].metadata
    r = compare(tmp_path, layer, layer, config_a=ca, config_b={**ca, "Env": ["A=2"], "WorkingDir": "/v"})
    assert r.verdict is Verdict.DIFFERENT and r.causes == (Cause.CONFIG,)
    assert [c.line() for c in r.config] == ['env: ["A=1"] -> ["A=2"]', 'workdir: "/w" -> "/v"']


def test_differing_layers_need_the_archives(tmp_path: Path) -> None:
    a = side(save(tmp_path / "a.tar", [[F("x", b"1")]]))
    b = side(save(tmp_path / "b.tar", [[F("x", b"2")]]))
    with pytest.raises(ValueError, match="no archive"):
        repro.compare_node(node="n", kind="system", level=None, side_a=a, side_b=Side(ref="b", key="k1", diff_ids=b.diff_ids,
                                                                                      config=b.config))


# ------------------------------------------------------------------------------------------ helpers


def test_levels_and_own_layers() -> None:
    levels = {"system": ReproLevel.BIT, "compile": ReproLevel.SEMANTIC}
    assert levels_of.level_for("system", levels) is ReproLevel.BIT
    assert levels_of.level_for("wheel", levels) is ReproLevel.SEMANTIC
    assert levels_of.level_for("compile-env", levels) is ReproLevel.SEMANTIC
    assert levels_of.level_for("python", levels) is None
    assert repro.own_layers(("a", "b", "c"), ("a",)) == ("b", "c")
    with pytest.raises(ValueError):
        repro.own_layers(("a", "b"), ("x",))
    assert repro.is_build_metadata("/usr/lib/python3.11/__pycache__/x.cpython-311.pyc")
    assert repro.is_build_metadata("var/log/dpkg.log") and not repro.is_build_metadata("var/lib/dpkg/status")
    assert repro.is_compiled("a/b/_C.cpython-311-x86_64-linux-gnu.so") and not repro.is_compiled("a.py")


def test_saved_images_reads_config_and_layers(tmp_path: Path) -> None:
    path = save(tmp_path / "s.tar", [BASE], config={"Env": ["A=1"], "Entrypoint": ["/run"], "Cmd": None,
                                                    "WorkingDir": "/w", "Labels": {"a": "b"}}, tag="x:1")
    s = SavedImages(path)
    img = s.image("x:1")
    assert img.config == ImageConfig(env=("A=1",), labels={"a": "b"}, entrypoint=("/run",), cmd=None, workdir="/w")
    with pytest.raises(KeyError):
        s.image("y:1")
    tree = s.tree(img.diff_ids)
    assert tree.entries["usr/bin/tool"].mode == 0o755 and tree.entries["usr"].kind == "dir"


def test_report_json_and_text(tmp_path: Path) -> None:
    different = compare(tmp_path, [[F("etc/a", b"1")]], [[F("etc/a", b"2")]], level=ReproLevel.SEMANTIC)
    bit = repro.compare_node(node="entrypoint", kind="entrypoint", level=ReproLevel.BIT, side_a=r_side(tmp_path, "a"),
                             side_b=r_side(tmp_path, "a"))
    report = repro.ReproReport(stack="demo", variant="default", mode="lock", nodes=(bit, different))
    assert [n.node for n in report.failures] == ["system"]
    j = report.to_json()
    assert j["schema"] == 1 and j["ok"] is False
    assert j["nodes"][1]["verdict"] == "different" and j["nodes"][1]["causes"] == ["unexplained content"]
    assert j["nodes"][1]["files"][0]["path"] == "/etc/a"
    ha, hb = (hashlib.sha256(x).hexdigest()[:12] for x in (b"1", b"2"))
    assert repro.render_text(report) == [
        "entrypoint: bit-identical (declared bit)",
        "system: different (declared semantic)  <- below its declared level",
        "    cause: unexplained content",
        f"    * /etc/a 1 B {ha} -> 1 B {hb}",
    ]
