"""Install locked, hash-pinned wheels the way `pip install --no-deps` would, without pip, or decline.

buildctl copies this file into the python, compile-env and assemble nodes and runs it with the image's
own Python (its standard library and the installer wheel it is given: any base with Python 3.10 or later;
older ones decline) before pip:

    install.py --epoch SECONDS --installer URL#sha256=HEX [--find-links URL]... -- 'name==version --hash=sha256:HEX' ...

Exit 0: every wheel is installed. Exit 3: it declined before writing anything, saying why on one line,
and the build runs pip exactly as before (also for anything unexpected before the first write: a page or
a download that fails, a wheel that does not open: pip then gives its own error). Any other exit: a write
that failed.

Why: importing pip costs about 0.5 s per step; installing a locked wheel, whose file, hash and target
are all known, is unzipping it into the interpreter's scheme and writing RECORD. This file decides whether
that is the case; anything beyond it goes to pip: a requirement without an exact version and hash, a
distribution already installed (pip would replace it), a file that already exists, pip configuration that
changes an install (a constraint file, a target, a user install, a config file), Python before 3.10 (pip
used distutils' schemes there), a wheel with headers, a Requires-Python or a tag this code cannot decide,
more than one matching wheel, a wheel whose RECORD does not list each file with its sha256.

The unpacking and RECORD are pypa/installer's (``--installer``: its pure-Python wheel, served by the
wheelhouse beside the wheels, checked against the sha256 the URL names and imported from memory, so
nothing of it is written), with two things set to what pip writes: console scripts from pip's template
with the interpreter's path, and RECORD sorted with "\r\n" line ends. Files, modes (the umask's, 0755
where the wheel marks a file executable, and scripts), `#!python` rewritten, REQUESTED and RECORD are
then pip's; INSTALLER says "buildctl". installer runs twice per wheel: first writing nothing, to learn
every path, so that every refusal comes before the first write.

Every path it creates, and every folder it adds an entry to, gets the mtime SECONDS (what the settle
step of the other RUNs does with `find -newer`), so the layer is the same from build to build.
"""

import base64
import csv
import hashlib
import importlib.util
import io
import os
import platform
import re
import stat
import sys
import sysconfig
import urllib.parse
import urllib.request
import zipfile
from email.parser import Parser

DECLINE = 3
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)((?: --hash=sha256:[0-9a-f]{64})+)$")
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_HREF = re.compile(r"""href=["']([^"']+)["']""", re.I)
_INSTALLER = re.compile(r"^(?P<url>https?://[^\s#]+/(?P<file>installer-[\w.]+-py3-none-any\.whl))#sha256=(?P<sha>[0-9a-f]{64})$")
_METADATA = {"INSTALLER": b"buildctl\n", "REQUESTED": b""}  # what pip adds, but for INSTALLER's word
# pip settings by environment that do not change where or what an install of hashed wheels writes
_PIP_ENV_OK = {"PIP_BREAK_SYSTEM_PACKAGES", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_CACHE_DIR", "PIP_NO_INPUT",
               "PIP_ROOT_USER_ACTION", "PIP_DEFAULT_TIMEOUT", "PIP_PROGRESS_BAR", "PIP_NO_COLOR", "PIP_INDEX_URL",
               "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_RETRIES", "PIP_TIMEOUT", "PIP_CONSTRAINT"}
_SCRIPT = """#!%s
# -*- coding: utf-8 -*-
import re
import sys
from %s import %s
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(%s())
"""


class Decline(Exception):
    """pip should do this install (said before anything is written)."""


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(v):
    """A comparable form of a plain release version (1.2.3); None for anything else."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)$", v.strip())
    if not m:
        return None
    parts = [int(x) for x in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def same_version(a, b):
    ka, kb = version_key(a), version_key(b)
    return ka == kb if ka is not None and kb is not None else a.lower() == b.lower()


def _pad(t, n):
    return tuple(t[:n]) + (0,) * (n - len(t[:n]))


def satisfies(spec, version, what):
    """Whether ``version`` (a tuple like (3, 11, 2)) meets a version range like '>=3.8,!=3.9.*'; Decline if
    the range is more than plain release numbers (``what`` names it in the reason)."""
    for clause in [c.strip() for c in spec.split(",") if c.strip()]:
        m = re.match(r"^(~=|==|!=|<=|>=|<|>)\s*v?(\d+(?:\.\d+)*)(\.\*)?$", clause)
        if not m:
            raise Decline("%s %r is not a plain version range" % (what, spec))
        op, v, star = m.group(1), tuple(int(x) for x in m.group(2).split(".")), bool(m.group(3))
        if (star and op not in ("==", "!=")) or (op == "~=" and len(v) < 2):
            raise Decline("%s %r is not a plain version range" % (what, spec))
        if star:
            match = _pad(version, len(v)) == v
            ok = match if op == "==" else not match
        elif op == "~=":
            ok = _pad(version, max(len(v), len(version))) >= _pad(v, max(len(v), len(version))) \
                and _pad(version, len(v) - 1) == v[:-1]
        else:
            width = max(len(v), len(version))
            have, want = _pad(version, width), _pad(v, width)
            ok = {"==": have == want, "!=": have != want, "<": have < want, "<=": have <= want, ">": have > want,
                  ">=": have >= want}[op]
        if not ok:
            return False
    return True


def requires_python(spec, version):
    return satisfies(spec, version, "Requires-Python")


def constraints(environ):
    """Canonical name -> version range of every line of the PIP_CONSTRAINT files; Decline past plain lines."""
    out = {}
    for path in (environ.get("PIP_CONSTRAINT") or "").split():
        if "://" in path:
            raise Decline("PIP_CONSTRAINT names %s" % path)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise Decline("PIP_CONSTRAINT file %s: %s" % (path, e.strerror)) from None
        for raw in lines:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:(?:~=|==|!=|<=|>=|<|>)\s*[\w.*+!-]+\s*,?\s*)+)$", line)
            if not m:
                raise Decline("constraint line %r in %s" % (line, path))
            out.setdefault(canon(m.group(1)), []).append(m.group(2).strip().rstrip(","))
    return out


def glibc():
    try:
        name, ver = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (AttributeError, ValueError, OSError):
        return None
    m = re.match(r"^(\d+)\.(\d+)", ver)
    return (int(m.group(1)), int(m.group(2))) if name == "glibc" and m else None


def supported(py, abi, plat, *, version, arch, libc):
    """Whether this interpreter (CPython ``version``, Linux ``arch``, glibc ``libc``) can load a wheel tag."""
    major, minor = version[0], version[1]
    cp = "cp%d%d" % (major, minor)
    if plat in ("any", "linux_" + arch):
        plat_ok = True
    else:
        legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
        m = re.match(r"^manylinux_(\d+)_(\d+)_(.+)$", plat)
        if m:
            need, tail = (int(m.group(1)), int(m.group(2))), m.group(3)
        else:
            head, _, tail = plat.partition("_")
            need = legacy.get(head)
            if need is None:
                return False
        plat_ok = tail == arch and libc is not None and libc >= need
    if not plat_ok:
        return False
    if abi == cp:
        return py == cp
    if abi == "abi3":
        m = re.match(r"^cp(\d)(\d+)$", py)
        return bool(m) and int(m.group(1)) == major and int(m.group(2)) <= minor
    if abi == "none":
        if py == cp:
            return True
        m = re.match(r"^py(\d)(\d*)$", py)
        return bool(m) and int(m.group(1)) == major and (not m.group(2) or int(m.group(2)) <= minor)
    return False


def wheel_ok(filename, *, version, arch, libc):
    m = _WHEEL.match(filename)
    if not m:
        return False
    return any(supported(py, abi, plat, version=version, arch=arch, libc=libc)
               for py in m.group("py").split(".") for abi in m.group("abi").split(".")
               for plat in m.group("plat").split("."))


def parse_requirements(lines):
    reqs = []
    for line in lines:
        m = _REQ.match(line.strip())
        if not m:
            raise Decline("%r is not an exact version with hashes" % line)
        hashes = set(re.findall(r"sha256:([0-9a-f]{64})", m.group(3)))
        reqs.append((m.group(1), m.group(2), hashes))
    names = [canon(n) for n, _, _ in reqs]
    if len(set(names)) != len(names):
        raise Decline("a distribution is named twice")
    return reqs


def config_files(environ, home):
    """The pip configuration files pip would read (any of them could change what an install does)."""
    dirs = [d for d in (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    files = ["/etc/pip.conf", os.path.join(sys.prefix, "pip.conf"), os.path.join(home, ".pip", "pip.conf"),
             os.path.join(environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf")]
    files += [os.path.join(d, "pip", "pip.conf") for d in dirs]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(environ["PIP_CONFIG_FILE"])
    return files


def check_settings(environ, files):
    for k, v in sorted(environ.items()):
        if k.startswith("PIP_") and v and k not in _PIP_ENV_OK:
            raise Decline("%s is set" % k)
    for f in files:
        if os.path.exists(f):
            raise Decline("pip reads %s" % f)


def scheme():
    """The paths pip (on Python 3.10+, where it follows sysconfig) installs into."""
    if sys.version_info < (3, 10):
        raise Decline("Python %d.%d: pip's install scheme there comes from distutils" % sys.version_info[:2])
    if sys.implementation.name != "cpython":
        raise Decline("not CPython")
    paths = sysconfig.get_paths(scheme=sysconfig.get_default_scheme())  # novermin (3.10+, checked above)
    for key in ("purelib", "platlib"):
        p = os.path.realpath(paths[key])
        if p not in {os.path.realpath(s) for s in sys.path if s}:
            raise Decline("%s %s is not on sys.path" % (key, paths[key]))
        if not os.access(p, os.W_OK):
            raise Decline("%s %s is not writable (pip would install for the user)" % (key, paths[key]))
    return paths


def installed():
    from importlib import metadata

    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canon(name) not in out:
            out[canon(name)] = dist.version
    return out


def links(url):
    with urllib.request.urlopen(url, timeout=120) as r:
        page = r.read().decode("utf-8", "replace")
    out = []
    for href in _HREF.findall(page):
        full = urllib.parse.urljoin(url, href)
        name = urllib.parse.unquote(urllib.parse.urlsplit(full).path.rsplit("/", 1)[-1])
        if name.endswith(".whl"):
            out.append((name, full))
    return out


def fetch(url, hashes):
    with urllib.request.urlopen(url, timeout=600) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest not in hashes:
        raise Decline("%s has sha256 %s, which the lock does not allow" % (url, digest))
    return data


def choose(req, found, *, version, arch, libc):
    name, ver, _ = req
    match = []
    for filename, url in found:
        m = _WHEEL.match(filename)
        if m and canon(m.group("name")) == canon(name) and same_version(m.group("ver"), ver) \
                and wheel_ok(filename, version=version, arch=arch, libc=libc):
            match.append((filename, url))
    if len(match) != 1:
        raise Decline("%d wheels of %s==%s fit this interpreter" % (len(match), name, ver))
    return match[0]


class _WheelImporter:
    """Imports one pure-Python package (``top``) from a wheel held in memory: nothing of it is written, so the
    RUN's layer holds nothing of the tool (python -B: no bytecode either)."""

    def __init__(self, zf, top):
        self.zf, self.top = zf, top
        self.names = set(zf.namelist())

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.top and not fullname.startswith(self.top + "."):
            return None
        base = fullname.replace(".", "/")
        for member, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if member in self.names:
                return importlib.util.spec_from_loader(fullname, self, origin="%s/%s" % (self.zf.filename, member),
                                                       is_package=package)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        member = module.__spec__.origin[len(self.zf.filename) + 1:]
        exec(compile(self.zf.read(member), module.__spec__.origin, "exec", dont_inherit=True), module.__dict__)


def load_installer(arg):
    """pypa/installer from its wheel at URL#sha256=HEX (the wheelhouse's tools/ folder), checked, imported."""
    m = _INSTALLER.match(arg)
    if not m:
        raise Decline("--installer %r is not a wheel URL with its sha256" % arg)
    return import_installer(fetch(m.group("url"), {m.group("sha")}), m.group("file"))


def import_installer(data, filename):
    zf = zipfile.ZipFile(io.BytesIO(data))
    zf.filename = filename
    for name in [n for n in sys.modules if n == "installer" or n.startswith("installer.")]:
        del sys.modules[name]  # never one the image has
    finder = _WheelImporter(zf, "installer")
    sys.meta_path.insert(0, finder)
    try:
        import installer  # from the wheel, through the finder above
        import installer.destinations
        import installer.records
        import installer.sources
    finally:
        sys.meta_path.remove(finder)
    return installer


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


_CLASSES = {}


def classes(inst):
    """installer's WheelFile and destination, as install.py uses them (made once per installer module):

    - Source: a wheel whose files' bytes Plan has read (once, checking RECORD): no member is opened again;
    - Destination: the interpreter's scheme, writing what pip writes where installer differs (console
      scripts from pip's template; RECORD sorted, with "\\r\\n" line ends); with ``dry``, it writes nothing
      and notes each path (``targets``), so that every refusal comes before the first write.
    """
    if id(inst) in _CLASSES:
        return _CLASSES[id(inst)]

    class Source(inst.sources.WheelFile):
        def __init__(self, zf):
            super().__init__(zf)
            self.zf, self.data, self.rows = zf, {}, {}

        def get_contents(self):  # as installer's, from self.data
            for item in self.zf.infolist():
                if not item.filename.endswith("/"):
                    mode = item.external_attr >> 16
                    yield (self.rows.get(item.filename, (item.filename, "", "")), io.BytesIO(self.data[item.filename]),
                           bool(mode and stat.S_ISREG(mode) and mode & 0o111))

    class Destination(inst.destinations.SchemeDictionaryDestination):
        def __init__(self, filename, paths, python, dry):
            super().__init__({k: paths[k] for k in ("purelib", "platlib", "scripts", "data")},
                             interpreter=python, script_kind="posix")
            self.filename, self.dry, self.targets = filename, dry, []

        def write_to_fs(self, scheme, path, stream, is_executable):
            if scheme not in self.scheme_dict:
                raise Decline("%s: %s goes to the %s scheme" % (self.filename, path, scheme))
            if self.dry:
                self.targets.append(os.path.join(self.scheme_dict[scheme], path))
                return inst.records.RecordEntry(path, None, None)
            return super().write_to_fs(scheme, path, stream, is_executable)

        def write_script(self, name, module, attr, section):
            if not re.match(r"^[\w.]+$", module) or not re.match(r"^[\w.]+$", attr or "") or "/" in name:
                raise Decline("%s: entry point %s = %s:%s" % (self.filename, name, module, attr))
            body = (_SCRIPT % (self.interpreter, module, attr.split(".")[0], attr)).encode()
            with io.BytesIO(body) as stream:
                return self.write_to_fs("scripts", name, stream, True)

        def finalize_installation(self, scheme, record_file_path, records):
            rows = []
            for s, record in records:
                prefix = None if s == scheme else os.path.relpath(self.scheme_dict[s], self.scheme_dict[scheme]) + "/"
                rows.append(record.to_row(prefix))
            out = io.StringIO()
            csv.writer(out).writerows(sorted(rows))  # "\r\n" line ends, as pip writes RECORD
            with io.BytesIO(out.getvalue().encode()) as stream:
                self.write_to_fs(scheme, record_file_path, stream, False)

    _CLASSES[id(inst)] = Source, Destination
    return Source, Destination


class Plan:
    """One wheel, checked, and every path installer will write for it (a dry run of the install)."""

    def __init__(self, inst, filename, data, paths, python):
        self.inst, self.filename, self.paths, self.python = inst, filename, paths, python
        zf = zipfile.ZipFile(io.BytesIO(data))
        zf.filename = filename
        for name in zf.namelist():
            parts = name.rstrip("/").split("/")
            if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
                raise Decline("%s: member %r" % (filename, name))
        source_class, self.destination = classes(inst)
        self.source = source_class(zf)
        info = self.source.dist_info_dir
        metadata = Parser().parsestr(self.source.read_dist_info("METADATA"))
        rp = metadata.get("Requires-Python")
        if rp and not requires_python(rp, tuple(sys.version_info[:3])):
            raise Decline("%s needs Python %s" % (filename, rp))
        # pip copies the wheel's RECORD rows: one that does not list each file with its own sha256 and size
        # would make pip's RECORD differ from installer's, which hashes what it writes. Each file is read once,
        # here: installer's install takes the bytes from ``source.data``
        listed = self.source.rows
        for row in csv.reader(io.StringIO(self.source.read_dist_info("RECORD"))):
            if row:
                listed[row[0]] = tuple(row)
        for item in zf.infolist():
            if not item.filename.endswith("/"):
                body = self.source.data[item.filename] = zf.read(item)
                if item.filename != info + "/RECORD" and listed.get(item.filename) != (
                        item.filename, _record_hash(body), str(len(body))):
                    raise Decline("%s: its RECORD does not list %s with its sha256 and size" % (filename, item.filename))
        dry = self.destination(filename, paths, python, True)
        try:
            inst.install(self.source, dry, _METADATA)
        except Decline:
            raise
        except Exception as e:  # a WHEEL, an entry point or a .data folder installer does not take
            raise Decline("%s: installer refuses it (%s: %s)" % (filename, type(e).__name__, e)) from None
        self.targets = dry.targets
        if len(set(self.targets)) != len(self.targets):
            raise Decline("%s writes one path twice" % filename)

    def install(self):
        self.inst.install(self.source, self.destination(self.filename, self.paths, self.python, False), _METADATA)


def write(plans, epoch):
    """Install every plan (none of its paths may exist yet), then give what changed the mtime ``epoch``."""
    created_dirs, parents, seen = set(), set(), set()
    for plan in plans:
        for dest in plan.targets:
            if os.path.lexists(dest):
                raise Decline("%s exists already" % dest)
            if dest in seen:  # two of the wheels write one file: pip lets the later win; leave that to pip
                raise Decline("%s is written by two wheels" % dest)
            seen.add(dest)
            d = os.path.dirname(dest)
            while not os.path.isdir(d) and d not in created_dirs:
                created_dirs.add(d)
                d = os.path.dirname(d)
            if d not in created_dirs:
                parents.add(d)
    for plan in plans:
        plan.install()
    for p in sorted(seen) + sorted(created_dirs, key=len, reverse=True) + sorted(parents - created_dirs):
        os.utime(p, (epoch, epoch), follow_symlinks=False)


def _decline(why):
    sys.stdout.write("buildctl-install: pip installs these instead: %s\n" % why)
    sys.stdout.flush()
    return DECLINE


def main(argv):
    epoch, find_links, tool = None, [], None
    args = list(argv)
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--epoch" and args:
            epoch = int(args.pop(0))
        elif flag == "--find-links" and args:
            find_links.append(args.pop(0))
        elif flag == "--installer" and args:
            tool = args.pop(0)
        else:
            sys.stderr.write(__doc__)
            return 2
    if epoch is None or tool is None or not args:
        sys.stderr.write(__doc__)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # not the folder of this file
    try:
        reqs = parse_requirements(args[1:])
        check_settings(os.environ, config_files(os.environ, os.path.expanduser("~")))
        paths = scheme()
        have = installed()
        limits = constraints(os.environ)
        for name, ver, _ in reqs:
            if canon(name) in ("pip", "setuptools"):
                raise Decline("pip writes %s's scripts its own way" % name)
            if canon(name) in have:
                raise Decline("%s %s is installed (pip replaces it)" % (name, have[canon(name)]))
            for spec in limits.get(canon(name), ()):
                key = version_key(ver)
                if key is None or not satisfies(spec, key, "the constraint of %s" % name):
                    raise Decline("%s==%s and the constraint %s%s: pip decides" % (name, ver, name, spec))
        python = sys.executable
        if not python or len(python) > 120 or not re.match(r"^/[\w./+-]+$", python):
            raise Decline("interpreter path %r" % python)
        version, arch, libc = tuple(sys.version_info[:2]), platform.machine(), glibc()
        found = [item for url in find_links for item in links(url)]
        chosen = [choose(req, found, version=version, arch=arch, libc=libc) for req in reqs]
        inst = load_installer(tool)
        plans = [Plan(inst, filename, fetch(url, req[2]), paths, python) for req, (filename, url) in zip(reqs, chosen)]
    except Decline as e:
        return _decline(str(e))
    except Exception as e:  # anything else before a byte is written (a page, a download, a wheel): pip's case
        return _decline("%s: %s" % (type(e).__name__, e))
    try:
        write(plans, epoch)  # declines before its first write; a failure after it fails the RUN
    except Decline as e:
        return _decline(str(e))
    names = ", ".join("%s %s" % (n, v) for n, v, _ in reqs)
    sys.stdout.write("buildctl-install: installed %s (without pip)\n" % names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
