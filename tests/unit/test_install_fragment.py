"""images/install.py, the wheel installer the python, compile-env and assemble RUNs try before pip.

Pure parts (tags, version ranges, requirement lines, settings, constraints) and the install itself into a
scheme of folders under tmp_path, from wheels this test writes with zipfile (made-up distributions), by
pypa/installer (the dev dependency pinned to graph/render.py's INSTALLER; in the images install.py imports it
from its wheel, which this test also does, from a wheel of the installed package's files). What pip writes
for the same wheels, compared file by file in a container of the demo base, is the engine test
tests/engine/test_install_fragment_engine.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any

import installer
import pytest

from buildctl.graph import render
from tests.helpers import load_script

IMAGES = Path(__file__).resolve().parents[2] / "images"
EPOCH = 315532800


def _module() -> Any:
    return load_script("install_fragment", IMAGES / "install.py")


inst = _module()
TOOL = f"http://127.0.0.1:9/tools/{render.INSTALLER_WHEEL}#sha256={'ab' * 32}"


def plan(wheel: Path, paths: dict[str, str]) -> Any:
    return inst.Plan(installer, wheel.name, wheel.read_bytes(), paths, "/usr/bin/python3")


def make_wheel(folder: Path, name: str, version: str, *, tag: str = "py3-none-any", purelib: bool = True,
               requires_python: str | None = None, extra: dict[str, tuple[bytes, int]] | None = None,
               entry_points: str | None = None, broken: dict[str, bytes] | None = None,
               record_hash: str = "sha256") -> Path:
    """A wheel of made-up distribution ``name``: files (path -> (bytes, mode)) plus its dist-info, and a
    RECORD that lists them with their hashes; ``broken``: files written after RECORD (as bytes it lists
    otherwise, or not at all)."""
    info = f"{name}-{version}.dist-info"
    files: dict[str, tuple[bytes, int]] = {f"{name}/__init__.py": (b"VALUE = 1\n", 0o644), **(extra or {})}
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        meta += f"Requires-Python: {requires_python}\n"
    files[f"{info}/METADATA"] = (meta.encode(), 0o644)
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {'true' if purelib else 'false'}\n"
                              f"Tag: {tag}\n".encode(), 0o644)
    if entry_points:
        files[f"{info}/entry_points.txt"] = (entry_points.encode(), 0o644)
    rows = [f"{m},{record_hash}={base64.urlsafe_b64encode(hashlib.new(record_hash, b).digest()).decode().rstrip('=')},"
            f"{len(b)}" for m, (b, _) in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*rows, f"{info}/RECORD,,", ""]).encode(), 0o644)
    for member, body in (broken or {}).items():
        files[member] = (body, 0o644)
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, (body, mode) in files.items():
            zi = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(zi, body)
    return path


def scheme(root: Path) -> dict[str, str]:
    paths = {"purelib": root / "lib/site", "platlib": root / "lib64/site", "scripts": root / "bin", "data": root}
    for p in paths.values():
        p.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in paths.items()}


# ------------------------------------------------------------------------------------- deciding


@pytest.mark.parametrize(("filename", "ok"), [
    ("six-1.16.0-py2.py3-none-any.whl", True),
    ("a-1-cp311-cp311-linux_x86_64.whl", True),
    ("a-1-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
    ("a-1-cp311-cp311-manylinux_2_28_x86_64.whl", True),
    ("a-1-cp311-cp311-manylinux_2_39_x86_64.whl", False),  # newer glibc than (2, 36)
    ("a-1-cp312-cp312-linux_x86_64.whl", False),
    ("a-1-cp312-abi3-linux_x86_64.whl", False),  # abi3 from a newer minor
    ("a-1-cp311-cp311-musllinux_1_1_x86_64.whl", False),
    ("a-1-cp311-cp311-linux_aarch64.whl", False),
    ("a-1-py3-none-manylinux1_x86_64.whl", True),
    ("a-1-py312-none-any.whl", False),
    ("a-1-pp310-pypy310_pp73-linux_x86_64.whl", False),
    ("not-a-wheel.whl", False),
])
def test_wheel_tags(filename: str, ok: bool) -> None:
    assert inst.wheel_ok(filename, version=(3, 11), arch="x86_64", libc=(2, 36)) is ok


@pytest.mark.parametrize(("spec", "ok"), [
    (">=3.8", True), (">=3.12", False), ("<3.11", False), ("<4", True), ("!=3.11.*", False),
    ("==3.11.*", True), ("~=3.9", True), ("~=3.12", False), (">=3.7, !=3.8.*", True), ("==3.11.2", True),
    ("==3.11", False), ("~=3.11.1", True), ("~=3.11.3", False), (">2.7, !=3.0.*, !=3.1.*", True),
])
def test_requires_python(spec: str, ok: bool) -> None:
    assert inst.requires_python(spec, (3, 11, 2)) is ok


@pytest.mark.parametrize("spec", [">=3.8a1", "===3.11", ">=3.*", "~=3", "python>=3"])
def test_requires_python_it_cannot_read_goes_to_pip(spec: str) -> None:
    with pytest.raises(inst.Decline, match="not a plain version range"):
        inst.requires_python(spec, (3, 11, 2))


def test_requirements() -> None:
    h = "ab" * 32
    assert inst.parse_requirements([f"six==1.16.0 --hash=sha256:{h} --hash=sha256:{'cd' * 32}"]) == [
        ("six", "1.16.0", {h, "cd" * 32})]
    for bad in ["six", "six>=1.0 --hash=sha256:" + h, "six==1.16.0", "six==<built by wheel:x> --hash=sha256:" + h]:
        with pytest.raises(inst.Decline, match="not an exact version with hashes"):
            inst.parse_requirements([bad])
    with pytest.raises(inst.Decline, match="named twice"):
        inst.parse_requirements([f"Six==1 --hash=sha256:{h}", f"six==2 --hash=sha256:{h}"])


def test_pip_settings_that_change_an_install_go_to_pip(tmp_path: Path) -> None:
    inst.check_settings({"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_CONSTRAINT": "", "PIP_NO_CACHE_DIR": "1"}, [])
    for key in ("PIP_TARGET", "PIP_PREFIX", "PIP_USER", "PIP_CONFIG_FILE", "PIP_INSTALL_OPTION"):
        with pytest.raises(inst.Decline, match=f"{key} is set"):
            inst.check_settings({key: "x"}, [])
    conf = tmp_path / "home/.config/pip/pip.conf"
    files = inst.config_files({}, str(tmp_path / "home"))
    assert "/etc/pip.conf" in files and str(conf) in files and "/etc/xdg/pip/pip.conf" in files
    inst.check_settings({}, [str(conf)])
    conf.parent.mkdir(parents=True)
    conf.write_text("[install]\ntarget = /x\n")
    with pytest.raises(inst.Decline, match="pip reads"):
        inst.check_settings({}, [str(conf)])


def test_constraints(tmp_path: Path) -> None:
    f = tmp_path / "constraint.txt"
    f.write_text("# NGC's\nPyYAML==6.0\ntorch >= 2.4, <3  # comment\n\n")
    assert inst.constraints({"PIP_CONSTRAINT": str(f)}) == {"pyyaml": ["==6.0"], "torch": [">= 2.4, <3"]}
    assert inst.constraints({"PIP_CONSTRAINT": ""}) == {}
    assert inst.satisfies(">= 2.4, <3", inst.version_key("2.6.0"), "c")
    assert not inst.satisfies("==6.0", inst.version_key("6.0.1"), "c")
    for line in ("-c other.txt", "torch @ https://x/y.whl", "numpy; python_version<'3.12'"):
        f.write_text(line + "\n")
        with pytest.raises(inst.Decline, match="constraint line"):
            inst.constraints({"PIP_CONSTRAINT": str(f)})
    with pytest.raises(inst.Decline, match="PIP_CONSTRAINT names"):
        inst.constraints({"PIP_CONSTRAINT": "https://x/c.txt"})


def test_choose_needs_exactly_one_wheel() -> None:
    req: tuple[str, str, set[str]] = ("six", "1.16.0", set())
    one = [("six-1.16.0-py2.py3-none-any.whl", "u1"), ("six-1.15.0-py2.py3-none-any.whl", "u0"),
           ("tomli-2.0.1-py3-none-any.whl", "u2")]
    env = {"version": (3, 11), "arch": "x86_64", "libc": (2, 36)}
    assert inst.choose(req, one, **env) == ("six-1.16.0-py2.py3-none-any.whl", "u1")
    with pytest.raises(inst.Decline, match="2 wheels"):
        inst.choose(req, [*one, ("six-1.16-py3-none-any.whl", "u3")], **env)
    with pytest.raises(inst.Decline, match="0 wheels"):
        inst.choose(("six", "9.0", set()), one, **env)


# ------------------------------------------------------------------------------------- installing


def test_install_writes_what_pip_writes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    paths = scheme(root)
    before = {p for p in root.rglob("*")} | {root}
    for p in before:
        os.utime(p, (1_700_000_000, 1_700_000_000))
    wheel = make_wheel(tmp_path, "demo_pure", "1.0", requires_python=">=3.8", extra={
        "demo_pure/tool.sh": (b"#!/bin/sh\n", 0o755),
        "demo_pure-1.0.data/scripts/demo-run": (b"#!python -u\nprint(1)\n", 0o755),
        "demo_pure-1.0.data/data/share/demo/x.txt": (b"x\n", 0o644)},
        entry_points="[console_scripts]\ndemo-pure = demo_pure.cli:main.run [extra]\n[other]\nx = y\n")
    inst.write([plan(wheel, paths)], EPOCH)
    site = Path(paths["purelib"])
    info = site / "demo_pure-1.0.dist-info"
    assert (site / "demo_pure/__init__.py").read_bytes() == b"VALUE = 1\n"
    mode = {p: stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    assert mode[site / "demo_pure/__init__.py"] == 0o644 and mode[site / "demo_pure/tool.sh"] == 0o755
    assert mode[site / "demo_pure"] == 0o755
    # a script of the wheel's data: '#!python' becomes the interpreter (pip's fix_script), mode from the wheel
    assert (root / "bin/demo-run").read_bytes() == b"#!/usr/bin/python3\nprint(1)\n"
    assert mode[root / "bin/demo-run"] == 0o755
    assert (root / "share/demo/x.txt").read_bytes() == b"x\n"
    # a console script from pip's template (distlib's), executable
    assert (root / "bin/demo-pure").read_text() == (
        "#!/usr/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom demo_pure.cli import main\n"
        "if __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(main.run())\n")
    assert mode[root / "bin/demo-pure"] == 0o755
    assert (info / "INSTALLER").read_bytes() == b"buildctl\n" and (info / "REQUESTED").read_bytes() == b""
    # RECORD: every file with its hash and size, relative to the site folder, sorted, CRLF, itself last-less
    record = (info / "RECORD").read_bytes().decode()
    rows = record.split("\r\n")
    assert rows[-1] == "" and "demo_pure-1.0.dist-info/RECORD,," in rows
    body = (root / "bin/demo-pure").read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode().rstrip("=")
    assert f"../../bin/demo-pure,sha256={digest},{len(body)}" in rows
    assert rows[:-1] == sorted(rows[:-1])
    listed = {r.split(",")[0] for r in rows if r}
    written = {os.path.relpath(p, site) for p in root.rglob("*") if p.is_file()}
    assert listed == written
    # every path written, every folder made and every folder that gained an entry: mtime EPOCH; no other
    gained = {Path(paths["purelib"]), root / "bin", root}  # root: gained share/
    for p in {*root.rglob("*"), root}:
        assert p.lstat().st_mtime == (EPOCH if p not in before or p in gained else 1_700_000_000), p
    assert not list(root.rglob("__pycache__"))


def test_platlib_root_and_an_existing_file(tmp_path: Path) -> None:
    paths = scheme(tmp_path / "root")
    wheel = make_wheel(tmp_path, "demo_plat", "2.0", purelib=False)
    planned = plan(wheel, paths)
    assert all(dest.startswith(paths["platlib"]) for dest in planned.targets)
    assert not list(Path(paths["platlib"]).iterdir())  # the plan is installer's dry run: nothing written
    (Path(paths["platlib"]) / "demo_plat").mkdir()
    (Path(paths["platlib"]) / "demo_plat/__init__.py").write_text("theirs")
    with pytest.raises(inst.Decline, match="exists already"):
        inst.write([planned], EPOCH)
    # nothing of the wheel was written: pip gets the whole install
    assert sorted(p.name for p in Path(paths["platlib"]).rglob("*")) == ["__init__.py", "demo_plat"]


def test_two_wheels_that_write_one_file_go_to_pip(tmp_path: Path) -> None:
    paths = scheme(tmp_path / "root")
    a = make_wheel(tmp_path, "one", "1.0", extra={"shared/__init__.py": (b"a", 0o644)})
    b = make_wheel(tmp_path, "two", "1.0", extra={"shared/__init__.py": (b"b", 0o644)})
    plans = [plan(w, paths) for w in (a, b)]
    with pytest.raises(inst.Decline, match="written by two wheels"):
        inst.write(plans, EPOCH)
    assert not list(Path(paths["purelib"]).iterdir())  # nothing written


def test_wheels_it_leaves_to_pip(tmp_path: Path) -> None:
    paths = scheme(tmp_path / "root")
    cases = [
        (make_wheel(tmp_path, "old", "1.0", requires_python=">=3.99"), "needs Python"),
        (make_wheel(tmp_path, "hdr", "1.0", extra={"hdr-1.0.data/headers/h.h": (b"", 0o644)}), "h.h goes to the headers"),
        (make_wheel(tmp_path, "esc", "1.0", extra={"../evil.py": (b"", 0o644)}), "member"),
        (make_wheel(tmp_path, "ep", "1.0", entry_points="[console_scripts]\nx = os:system('id')\n"), "ep-1.0-py3-none-any.whl: installer refuses it"),
        (make_wheel(tmp_path, "ep2", "1.0", entry_points="[console_scripts]\nx/y = os:main\n"), "entry point x/y = os:main"),
        (make_wheel(tmp_path, "dat", "1.0", extra={"dat-1.0.data/other/x": (b"", 0o644)}), "not contained in a valid"),
        (make_wheel(tmp_path, "rec", "1.0", broken={"rec/__init__.py": b"changed"}), "RECORD does not list rec/__init__.py"),
        (make_wheel(tmp_path, "unl", "1.0", broken={"unl/extra.py": b""}), "RECORD does not list unl/extra.py"),
        (make_wheel(tmp_path, "md5", "1.0", record_hash="md5"), "RECORD does not list md5/__init__.py with its sha256"),
    ]
    for wheel, why in cases:
        with pytest.raises(inst.Decline, match=why.replace(".", r"\.")):
            plan(wheel, paths)
    assert not [p for p in Path(tmp_path / "root").rglob("*") if p.is_file()]  # nothing written by any


def test_main_declines_without_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_TARGET", "/somewhere")
    assert inst.main(["--epoch", str(EPOCH), "--installer", TOOL, "--", f"six==1.16.0 --hash=sha256:{'ab' * 32}"]) \
        == inst.DECLINE
    assert capsys.readouterr().out == "buildctl-install: pip installs these instead: PIP_TARGET is set\n"
    assert inst.main(["--", "x"]) == 2  # no --epoch: a usage error, not a decline
    assert inst.main(["--epoch", str(EPOCH), "--", "x"]) == 2  # no --installer either
    # anything unexpected before the first write (here: a find-links page that cannot be read) is pip's case
    monkeypatch.delenv("PIP_TARGET")
    monkeypatch.setattr(inst, "check_settings", lambda environ, files: None)
    monkeypatch.setattr(inst, "scheme", lambda: {"purelib": "/nowhere", "platlib": "/nowhere"})
    monkeypatch.setattr(inst, "installed", lambda: {})
    monkeypatch.setattr(inst, "constraints", lambda environ: {})

    def unreadable(url: str) -> list[tuple[str, str]]:
        raise OSError(f"cannot read {url}")

    monkeypatch.setattr(inst, "links", unreadable)
    assert inst.main(["--epoch", str(EPOCH), "--installer", TOOL, "--find-links", "http://127.0.0.1:9/",
                      "--", f"six==1.16.0 --hash=sha256:{'ab' * 32}"]) == inst.DECLINE
    assert capsys.readouterr().out == (
        "buildctl-install: pip installs these instead: OSError: cannot read http://127.0.0.1:9/\n")
    assert sys.path  # main() leaves the interpreter usable


# ------------------------------------------------------------------------------------- the installer


def installer_wheel() -> bytes:
    """A wheel of the installed pypa/installer's files (the dev dependency: the pinned version)."""
    folder = Path(installer.__file__).parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                zf.writestr(f"installer/{f.relative_to(folder).as_posix()}", f.read_bytes())
    return buf.getvalue()


def test_the_dev_dependency_is_the_pinned_installer() -> None:
    assert installer.__version__ == render.INSTALLER.version
    assert f"installer-{render.INSTALLER.version}-py3-none-any.whl" == render.INSTALLER_WHEEL


def test_installer_is_imported_from_its_wheel_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "installer" or n.startswith("installer.")]:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # put back afterwards
    data = installer_wheel()
    sha = hashlib.sha256(data).hexdigest()
    url = f"http://127.0.0.1:9/tools/{render.INSTALLER_WHEEL}"
    served: list[str] = []

    def urlopen(u: str, timeout: float) -> io.BytesIO:
        served.append(u)
        return io.BytesIO(data)

    monkeypatch.setattr(inst.urllib.request, "urlopen", urlopen)
    finders = list(sys.meta_path)
    with pytest.raises(inst.Decline, match="which the lock does not allow"):
        inst.load_installer(f"{url}#sha256={'ab' * 32}")
    for bad in (url, f"{url}#sha256=xyz", f"file:///x/{render.INSTALLER_WHEEL}#sha256={sha}"):
        with pytest.raises(inst.Decline, match="not a wheel URL with its sha256"):
            inst.load_installer(bad)
    mod = inst.load_installer(f"{url}#sha256={sha}")
    assert served == [url, url]
    assert mod.__spec__.origin == f"{render.INSTALLER_WHEEL}/installer/__init__.py"
    assert mod.destinations.__spec__.origin.startswith(render.INSTALLER_WHEEL + "/")
    assert mod is not installer and mod.__version__ == installer.__version__
    assert sys.meta_path == finders  # the finder is gone once the modules are loaded
    # and it installs as the installed package does
    paths = scheme(tmp_path / "root")
    wheel = make_wheel(tmp_path, "demo_pure", "1.0", extra={"demo_pure/cli.py": (b"", 0o644)},
                       entry_points="[console_scripts]\ndemo-pure = demo_pure.cli:main\n")
    p = inst.Plan(mod, wheel.name, wheel.read_bytes(), paths, "/usr/bin/python3")
    inst.write([p], EPOCH)
    assert (Path(paths["scripts"]) / "demo-pure").read_bytes().startswith(b"#!/usr/bin/python3\n# -*- coding")
    assert not [f for f in tmp_path.rglob("installer*")]  # nothing of the tool written
