"""Where things live: user configuration and the cache layout.

One documented layout (docs/reference/configuration.md, "Where things live"):

- configuration: ``$BUILDCTL_CONFIG`` or ``$XDG_CONFIG_HOME/buildctl/config.toml``
  (``~/.config/buildctl/config.toml``); every key has an environment override.
- cache root: ``$BUILDCTL_CACHE`` or ``$XDG_CACHE_HOME/buildctl`` (``~/.cache/buildctl``), holding
  ``sources/`` (git mirrors and exported trees), ``wheels/<node>/<key>/`` (compiled wheels by key),
  ``ccache/`` (compiler cache, unless ``compile_cache`` names another folder), ``tools/`` (the ccache binary),
  ``logs/<stack>/<variant>/<node>.log``, ``reports/`` (smoke, nightly, repro) and ``downloads/``.
- registry credentials: docker's own ``~/.docker/config.json`` (never buildctl's file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from buildctl import hostaddr, safepath, syntax, untrusted
from buildctl.errors import Location, ManifestError

CONFIG_KEYS = {
    "default_stack": "BUILDCTL_DEFAULT_STACK",
    "ca_bundle": "BUILDCTL_CA_BUNDLE",
    "pip_index_url": "BUILDCTL_PIP_INDEX_URL",
    "pip_extra_index_urls": "BUILDCTL_PIP_EXTRA_INDEX_URLS",
    "registry": "BUILDCTL_REGISTRY",
    "registry_mirrors": "BUILDCTL_REGISTRY_MIRRORS",
    "git_mirrors": "BUILDCTL_GIT_MIRRORS",
    "download_mirrors": "BUILDCTL_DOWNLOAD_MIRRORS",
    "network_timeout": "BUILDCTL_NETWORK_TIMEOUT",
    "stall_timeout": "BUILDCTL_STALL_TIMEOUT",
    "backend": "BUILDCTL_BACKEND",
    "builders": "BUILDCTL_BUILDERS",
    "docker_cli": "BUILDCTL_DOCKER_CLI",
    "wheelhouse_address": "BUILDCTL_WHEELHOUSE_ADDRESS",
    "compile_cache": "BUILDCTL_COMPILE_CACHE",
}
BACKENDS = ("classic", "buildkit")  # how a node's image is built (engine/buildkit.py says which does what)
PLATFORMS = ("linux/amd64", "linux/arm64")  # the keys of the [builders] table (a variant's platform)


@dataclass(frozen=True, kw_only=True)
class CacheLayout:
    root: Path

    @property
    def sources(self) -> Path:
        return self.root / "sources"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def ccache(self) -> Path:
        return self.root / "ccache"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    def node_log(self, stack: str, variant: str, node: str) -> Path:
        return self.logs / stack / variant / f"{node}.log"


@dataclass(frozen=True, kw_only=True)
class CompileCache:
    """Where compile nodes keep their compiler cache (config ``compile_cache``, builder/compilecache.py): unset, the
    local folder ``<cache>/ccache``; an absolute path, that folder; ``redis://HOST:PORT``, that server (a fleet's)
    with the local folder as the first level; ``off``, no cache."""

    off: bool = False
    folder: Path | None = None  # None: <cache>/ccache
    server: str | None = None  # redis://HOST:PORT[/DB]

    @staticmethod
    def parse(value: str) -> CompileCache:
        """The setting from its one string (ValueError saying what is wrong)."""
        if value == "off":
            return CompileCache(off=True)
        if value.startswith("/"):
            problem = syntax.abs_path(value)
            if problem:
                raise ValueError(f"{value!r} {problem}")
            return CompileCache(folder=Path(value))
        m = re.match(r"^redis://(?P<host>[^/:]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})(/[0-9]{1,2})?\Z", value)
        if m and syntax.host_port(m.group("host")) is None and 0 < int(m.group("port")) < 65536:
            return CompileCache(server=value)
        if value.startswith("redis://"):
            raise ValueError(f"{value!r} is not redis://HOST:PORT[/DB] (a name or an address, and a port)")
        raise ValueError(f"{value!r} is not a compiler cache: \"off\", an absolute folder, or redis://HOST:PORT")


@dataclass(frozen=True, kw_only=True)
class Config:
    """User configuration, after environment overrides."""

    path: Path | None
    default_stack: str = "deepseek-v3-gb200"
    # Extra CA bundle for a TLS-intercepting proxy: handed to builds that reach a package index,
    # never written into a layer or a build arg.
    ca_bundle: Path | None = None
    pip_index_url: str | None = None
    pip_extra_index_urls: tuple[str, ...] = ()
    registry: str | None = None
    # image registry mirrors: "nvcr.io" -> "mirror.example:5000"
    registry_mirrors: Mapping[str, str] = field(default_factory=dict)
    # git mirrors: "https://github.com/" -> "file:///srv/mirrors/" (git's url.<base>.insteadOf)
    git_mirrors: Mapping[str, str] = field(default_factory=dict)
    # download mirrors: URL prefix -> mirror prefix, for plain downloads and wheels fetched by URL
    # ("https://developer.download.nvidia.com/" -> "https://mirror.example/nvidia/"); the lock keeps the URL
    # as the manifest writes it, the file comes from the mirror and is checked against the same sha256.
    download_mirrors: Mapping[str, str] = field(default_factory=dict)
    network_timeout: float = 10.0
    stall_timeout: float = 60.0  # a push or pull attempt with no bytes moving for this long is retried (3 in all)
    # the build backend: the classic builder through docker-py, or the engine's BuildKit through a docker CLI
    # (None: not configured; `build` then uses classic, or buildkit when builders are named)
    backend: str | None = None
    # BuildKit builders (syntax.builder_endpoint) a build spreads over; () means the one engine of DOCKER_HOST
    builders: tuple[str, ...] = ()
    # builders by platform (the [builders] table, or BUILDCTL_BUILDERS="linux/amd64=local linux/arm64=ssh://h"):
    # each variant's nodes go to the builders of its platform, each asked its platform (graph/routing.py)
    builders_by_platform: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    docker_cli: Path | None = None  # the docker CLI that drives BuildKit (None: the first one found that can)
    # the address of this host the build's wheelhouse is served on (None: 127.0.0.1): one a builder on another
    # machine reaches (hostaddr.problem: an IP address this host has, never 0.0.0.0, ::, broadcast or multicast)
    wheelhouse_address: str | None = None
    compile_cache: CompileCache = field(default_factory=CompileCache)
    cache: CacheLayout


def _xdg(name: str, fallback: str, env: Mapping[str, str]) -> Path:
    value = env.get(name)
    return Path(value) if value else Path(env.get("HOME", str(Path.home()))) / fallback


def _pairs(text: str) -> dict[str, str]:
    """Parse ``a=b,c=d`` (environment form of a mapping)."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def _line_of(text: str, key: str, *, table: str | None = None) -> tuple[int, int]:
    """(line, column) where ``key`` is given in a TOML text (inside ``[table]`` or an inline table), 0 when not
    found: tomllib keeps no positions, and a configuration error must still point at its line."""
    pattern = re.compile(rf"""(^|[{{,\s])(?P<k>["']?{re.escape(key)}["']?)\s*=""")
    in_table = table is None
    for n, line in enumerate(text.splitlines(), 1):
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        if header and table is not None:
            in_table = header.group(1).strip() == table
            continue
        if table is not None and re.match(rf"^\s*{re.escape(table)}\s*=", line):
            in_table = True  # an inline table: its keys follow on this line
        m = pattern.search(line)
        if m and in_table:
            return n, m.start("k") + 1
    return 0, 0


def _host_path(value: str) -> str | None:
    """A registry (mirror) address: host[:port], optionally followed by a path."""
    host, _, rest = value.partition("/")
    return syntax.host_port(host) or (syntax.repository(rest) and "is not host[:port][/path]" if rest else None)


def registry_address(value: str) -> str | None:
    """The rule of a registry to push to or share nodes through (the configuration's ``registry``, ``--registry``)."""
    return _host_path(value)


def _git_mirror(value: str) -> str | None:
    """One side of a ``url.<mirror>.insteadOf=<orig>`` rule: a URL, git@host:path, or an absolute path.

    It becomes one word of ``git -c``, which splits at the first '=': an '=' would change which setting is made."""
    bad = syntax.control(value)
    if bad:
        return bad
    if value.startswith("-") or "=" in value or any(c.isspace() for c in value) or "::" in value:
        return "must not start with '-' or hold '=', '::' or whitespace"
    if value.startswith("/") or re.match(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:", value):
        return None
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if not m or m.group(1) not in syntax.MIRROR_SCHEMES:
        return f"is not a URL ({', '.join(s + '://' for s in syntax.MIRROR_SCHEMES)}), git@host:path or /path"
    return syntax.url_authority(value)


_VALUE_RULES: Mapping[str, syntax.Rule] = {
    "default_stack": syntax.name,
    "ca_bundle": syntax.abs_path,
    "pip_index_url": lambda v: syntax.url(v, ("https", "http")),
    "pip_extra_index_urls": lambda v: syntax.url(v, ("https", "http")),
    "registry": _host_path,
    "backend": lambda v: None if v in BACKENDS else f"is not a build backend ({' or '.join(BACKENDS)})",
    "builders": syntax.builder_endpoint,
    "docker_cli": syntax.abs_path,
    "wheelhouse_address": hostaddr.problem,  # an address of this host, not a broadcast one (checked here, not at build)
}
# mapping keys: (key rule, value rule)
_MAP_RULES: Mapping[str, tuple[syntax.Rule, syntax.Rule]] = {
    "registry_mirrors": (_host_path, _host_path),
    "git_mirrors": (_git_mirror, _git_mirror),
    "download_mirrors": (lambda v: syntax.url(v, ("https", "http", "file")),
                         lambda v: syntax.url(v, ("https", "http", "file"))),
}
NETWORK_TIMEOUT_MAX = 3600.0
NETWORK_TIMEOUT_MIN = 0.1  # seconds: below this no connection completes, not even on loopback


def mirror_url(url: str, mirrors: Mapping[str, str]) -> str:
    """``url`` with the longest matching prefix of ``mirrors`` replaced by its mirror (unchanged: none matches)."""
    best = max((p for p in mirrors if url.startswith(p)), key=len, default=None)
    return url if best is None else mirrors[best] + url[len(best):]


CONFIG_MAX = 1 << 20  # bytes of a configuration file read at most (a few hundred is usual)


# Folders never mounted read-write into a compile container (which runs a pull request's code): the system's, and
# the home folder's that hold credentials. The home folder itself, and any folder above it, are refused too.
_SYSTEM_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                   "/sys", "/usr", "/var/lib", "/var/run")
_CREDENTIAL_FOLDERS = (".ssh", ".docker", ".gnupg", ".aws", ".kube", ".config")


def _cache_folder_problem(folder: Path, env: Mapping[str, str]) -> str | None:
    """Why ``folder`` cannot be the compiler cache's local folder (None: it can). The first compile makes it and
    mounts it read-write into every compile container: it must be a folder or one still to be made below a folder
    (a file there ended the first compile in FileExistsError), and not one whose contents no compile may write
    (``/``, a system folder, the home folder or one above it, or a home folder's credentials)."""
    unusable = safepath.folder_problem(folder)
    if unusable:
        return unusable
    real = Path(os.path.realpath(folder))
    home = Path(os.path.realpath(env.get("HOME") or Path.home()))
    why = "compile containers, which run the code they compile, would write into it: give a folder of its own"
    system = next((f for f in _SYSTEM_FOLDERS if real == Path(f) or Path(f) in real.parents), None)
    if real == Path("/") or system:
        return f"is {'the root folder' if system is None else f'in the system folder {system}'}: {why}"
    if real == home or real in home.parents:
        return f"is {'the home folder' if real == home else f'{real}, above the home folder {home}'}: {why}"
    kept = next((home / c for c in _CREDENTIAL_FOLDERS if real == home / c or home / c in real.parents), None)
    if kept is not None:
        return f"is in {kept}, where credentials and settings are kept: {why}"
    return None


def load_config(env: Mapping[str, str] | None = None) -> Config:
    """The configuration file with its environment overrides, every value checked (exit 3 naming the file,
    line and key, or the environment variable)."""
    env = os.environ if env is None else env
    path = Path(env["BUILDCTL_CONFIG"]) if env.get("BUILDCTL_CONFIG") else (
        _xdg("XDG_CONFIG_HOME", ".config", env) / "buildctl" / "config.toml"
    )
    raw: dict[str, object] = {}
    text = ""
    # a FIFO would block the read, a folder was passed over in silence; a device is read to the cap
    # (BUILDCTL_CONFIG=/dev/null: no configuration)
    readable = path.is_file() or path.is_char_device()
    if path.exists() and not readable:
        try:
            untrusted.regular_file(path)
        except (untrusted.Malformed, OSError) as exc:
            raise ManifestError(Location(file=str(path)), f"cannot read the configuration: {exc}",
                                fix="make it a TOML file, or point BUILDCTL_CONFIG elsewhere") from None
    if readable:
        import tomllib  # here: a run without a configuration file does not load the parser

        try:
            text = untrusted.read_capped(path, CONFIG_MAX).decode("utf-8")
            raw = tomllib.loads(text)
        except untrusted.Malformed as exc:
            raise ManifestError(Location(file=str(path)), f"cannot read the configuration: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ManifestError(Location(file=str(path)), f"not UTF-8 text: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            line, col = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
            raise ManifestError(Location(file=str(path), line=line, column=col), f"invalid TOML: {exc}") from None
        except (OSError, RecursionError) as exc:
            raise ManifestError(Location(file=str(path)), f"cannot read the configuration: {exc}") from None
        except ValueError as exc:  # tomllib's int() of more digits than Python converts (4,300), not a TOMLDecodeError
            long = re.search(r"[0-9][0-9_]{4300,}", text)
            line = text.count("\n", 0, long.start()) + 1 if long else 0
            col = long.start() - text.rfind("\n", 0, long.start()) if long else 0
            raise ManifestError(Location(file=str(path), line=line, column=col),
                                f"cannot read this value: {exc}") from None
        unknown = sorted(set(raw) - set(CONFIG_KEYS))
        if unknown:
            line, col = _line_of(text, unknown[0])
            raise ManifestError(
                Location(file=str(path), line=line, column=col, key=unknown[0]),
                f"unknown configuration key {unknown[0]!r}",
                fix=f"known keys: {', '.join(sorted(CONFIG_KEYS))}",
            )
    values: dict[str, object] = dict(raw)
    where: dict[str, str] = {}
    for key, var in CONFIG_KEYS.items():
        if env.get(var):
            values[key] = env[var]
            where[key] = var

    def fail(key: str, what: str, *, entry: str | None = None) -> ManifestError:
        if key in where:
            return ManifestError(Location(file=f"${where[key]}", key=key if entry is None else f"{key}.{entry}"), what)
        line, col = _line_of(text, entry, table=key) if entry is not None else (0, 0)
        if not line:
            line, col = _line_of(text, key)
        return ManifestError(Location(file=str(path), line=line, column=col,
                                      key=key if entry is None else f"{key}.{entry}"), what)

    try:
        return _build(values, path if readable else None, env, fail)
    except (TypeError, ValueError) as exc:
        raise ManifestError(Location(file=str(path)), f"invalid configuration: {exc}") from exc


def _build(values: Mapping[str, object], path: Path | None, env: Mapping[str, str],
           fail: Callable[..., ManifestError]) -> Config:
    def mapping(key: str) -> dict[str, str]:
        v = values.get(key, {})
        if isinstance(v, str):
            try:
                v = _pairs(v)
            except ValueError as exc:
                raise fail(key, str(exc)) from None
        if not isinstance(v, dict):
            raise fail(key, f"expected a table or NAME=VALUE list, got {v!r}")
        key_rule, value_rule = _MAP_RULES[key]
        out: dict[str, str] = {}
        for k, x in v.items():
            if not isinstance(x, str):
                raise fail(key, f"expected a string for {k!r}, got {x!r}", entry=str(k))
            problem = key_rule(str(k))
            if problem:
                raise fail(key, f"the key {k!r} {problem}", entry=str(k))
            problem = value_rule(x)
            if problem:
                raise fail(key, f"{x!r} {problem}", entry=str(k))
            if key in ("download_mirrors", "git_mirrors") and str(k).endswith("/") and not x.endswith(("/", ":")):
                # the rest of the URL is appended to the mirror: "https://mirror.example" would make the host
                # mirror.examplecompute of https://x/compute/...
                raise fail(key, f"{x!r} does not end with '/' as its prefix {k!r} does: the rest of each URL is "
                                f"appended to it (write {x + '/'!r})", entry=str(k))
            out[str(k)] = x
        return out

    def string(key: str) -> str | None:
        v = values.get(key)
        if v is None or v == "":
            return None
        if not isinstance(v, str):
            raise fail(key, f"expected a string, got {v!r}")
        problem = _VALUE_RULES[key](v)
        if problem:
            raise fail(key, f"{v!r} {problem}")
        return v

    def words(key: str) -> tuple[str, ...]:
        """A list (or, from the environment, words separated by spaces or commas), each checked."""
        raw = values.get(key, ())
        if isinstance(raw, str):
            items = tuple(raw.replace(",", " ").split()) if key == "builders" else tuple(raw.split())
        elif isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
            items = tuple(raw)
        else:
            raise fail(key, f"expected a list of {'URLs' if key == 'pip_extra_index_urls' else 'endpoints'}, "
                            f"got {raw!r}")
        for x in items:
            problem = _VALUE_RULES[key](x)
            if problem:
                raise fail(key, f"{x!r} {problem}")
        twice = syntax.repeated(items)
        if twice is not None:  # two builders of one endpoint: two clients of one engine, each given half the nodes
            raise fail(key, f"{twice!r} is listed twice: name each {'URL' if key == 'pip_extra_index_urls' else 'builder'} once")
        return items

    extras = words("pip_extra_index_urls")
    by_platform = _builders_by_platform(values.get("builders"), fail)
    builders = () if by_platform is not None else words("builders")

    def seconds(key: str, default: float) -> float:
        raw = values.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise fail(key, f"expected a number of seconds, got {raw!r}")
        try:
            value = float(raw)
        except ValueError:
            raise fail(key, f"expected a number of seconds, got {raw!r}") from None
        problem = syntax.finite(value, low=0.0, high=NETWORK_TIMEOUT_MAX)
        if problem:
            raise fail(key, f"{raw!r}: {problem}")
        if value < NETWORK_TIMEOUT_MIN:  # 1e-300 passed: every connection then timed out (exit 6), said as unreachable
            raise fail(key, f"{raw!r}: must be at least {NETWORK_TIMEOUT_MIN:g} s (no connection completes in less; "
                            f"the default is {default:g} s)")
        return value

    timeout = seconds("network_timeout", 10.0)
    stall = seconds("stall_timeout", 60.0)
    cache_root = Path(env["BUILDCTL_CACHE"]) if env.get("BUILDCTL_CACHE") else (
        _xdg("XDG_CACHE_HOME", ".cache", env) / "buildctl"
    )
    ca = string("ca_bundle")
    cli = string("docker_cli")
    compile_cache = CompileCache()
    if values.get("compile_cache") not in (None, ""):
        raw_cc = values["compile_cache"]
        if not isinstance(raw_cc, str):
            raise fail("compile_cache", f"expected a string, got {raw_cc!r}")
        try:
            compile_cache = CompileCache.parse(raw_cc)
        except ValueError as exc:
            raise fail("compile_cache", str(exc)) from None
        problem = _cache_folder_problem(compile_cache.folder, env) if compile_cache.folder is not None else None
        if problem:
            raise fail("compile_cache", f"{raw_cc!r} {problem}")
    return Config(
        path=path,
        default_stack=string("default_stack") or "deepseek-v3-gb200",
        ca_bundle=Path(ca) if ca else None,
        pip_index_url=string("pip_index_url"),
        pip_extra_index_urls=extras,
        registry=string("registry"),
        registry_mirrors=mapping("registry_mirrors"),
        git_mirrors=mapping("git_mirrors"),
        download_mirrors=mapping("download_mirrors"),
        network_timeout=timeout,
        stall_timeout=stall,
        backend=string("backend"),
        builders=builders,
        builders_by_platform=by_platform or {},
        docker_cli=Path(cli) if cli else None,
        wheelhouse_address=string("wheelhouse_address"),
        compile_cache=compile_cache,
        cache=CacheLayout(root=cache_root),
    )


def _builders_by_platform(raw: object, fail: Callable[..., ManifestError]) -> dict[str, tuple[str, ...]] | None:
    """``builders`` by platform: a table ``{"linux/arm64" = ["ssh://ci@grace-1"], ...}``, or from the environment
    ``linux/amd64=local,tcp://h:2376 linux/arm64=ssh://ci@grace-1`` (PLATFORM=ENDPOINT[,ENDPOINT] words); None
    when ``builders`` is the flat list (or a string without '='), which ``words`` reads as before."""
    if isinstance(raw, str):
        if "=" not in raw:
            return None
        table: dict[str, object] = {}
        for word in raw.split():
            platform, sep, endpoints = word.partition("=")
            if not sep:
                raise fail("builders", f"{word!r} has no platform: give every builder as PLATFORM=ENDPOINT[,ENDPOINT] "
                                       "(e.g. linux/amd64=local linux/arm64=ssh://ci@grace-1), or none")
            if platform in table:
                raise fail("builders", f"platform {platform!r} given twice", entry=platform)
            table[platform] = [e for e in endpoints.split(",") if e]
        raw = table
    if not isinstance(raw, dict):
        return None
    out: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for platform, endpoints in raw.items():
        if platform not in PLATFORMS:
            raise fail("builders", f"{platform!r} is not a platform ({' or '.join(PLATFORMS)})", entry=str(platform))
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            raise fail("builders", f"expected a list of builder endpoints for {platform!r}, got {endpoints!r}",
                       entry=platform)
        if not endpoints:
            raise fail("builders", f"names no builder for {platform}: list one or more, or leave {platform} out",
                       entry=platform)
        for e in endpoints:
            problem = syntax.builder_endpoint(e)
            if problem:
                raise fail("builders", f"{e!r} {problem}", entry=platform)
            if e in seen:
                raise fail("builders", f"builder {e!r} is listed under {seen[e]} and {platform}: a builder has one "
                                       "platform (its engine's, which buildctl asks)", entry=platform)
            seen[e] = platform
        out[platform] = tuple(endpoints)
    return out
