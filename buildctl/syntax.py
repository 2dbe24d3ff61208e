"""The syntax every untrusted string must have before it may go anywhere (pure, no I/O).

Manifests, locks and configuration arrive in pull requests that CI builds as root, so each field is
checked where it is loaded (pins.py, lockfile.py, config.py) against one of the rules here, and what
then reaches a shell or a Dockerfile is still quoted (buildctl/quoting.py). A rule returns ``None``
for a good value and otherwise a short sentence saying what is wrong; loaders add file, line and key.

The rules are deliberately narrower than what git, apt, pip or docker accept: a value that fits
one can be used as one word anywhere, and what does not fit is refused with a fix, never repaired.
"""

from __future__ import annotations

import math
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Sequence

Rule = Callable[[str], "str | None"]

# Control characters end lines in Dockerfiles and shell scripts, and NUL truncates C strings.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}\Z")
FULL_SHA_RE = re.compile(r"^[0-9a-f]{40}\Z")
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
APT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")
APT_VERSION_RE = re.compile(r"^[A-Za-z0-9.+~:*-]+\Z")
PIP_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
PIP_PATTERN_RE = re.compile(r"^[A-Za-z0-9._*?\[\]-]+\Z")
MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*\Z")
MODE_RE = re.compile(r"^0?[0-7]{3}\Z")
FLAG_RE = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*(=.*)?\Z")
# host[:port]: a DNS name or IPv4 address, or [IPv6]
HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*)"
                     r"(:[0-9]{1,5})?\Z")
# docker's reference grammar (distribution/reference), narrowed to what we use
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*\Z")
IMAGE_RE = re.compile(
    r"^(?:(?P<host>[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?)/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?\Z")
# git check-ref-format, narrowed: no leading '-', no '..', no '//', no '@{', no trailing '.lock' or '/'
_REF_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*\Z")
_URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>[^\s]*)\Z")
_SCP_RE = re.compile(r"^(?P<user>[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<path>[^\s]*)\Z")
REPO_SCHEMES = ("https", "ssh", "file")
DOWNLOAD_SCHEMES = ("https", "http")
MIRROR_SCHEMES = ("https", "http", "ssh", "file", "git")
# What a shell word or Dockerfile value never needs and a value of one of the rules below never holds.
PORT_MAX = 65535


def control(text: str) -> str | None:
    m = _CONTROL.search(text)
    if m:
        return f"holds the control character {m.group()!r} (a newline or NUL would end or cut a line)"
    return None


def _first(*checks: str | None) -> str | None:
    return next((c for c in checks if c), None)


def regex(pattern: re.Pattern[str], what: str) -> Rule:
    def rule(text: str) -> str | None:
        return _first(control(text), None if pattern.match(text) else f"is not {what}")
    return rule


name = regex(NAME_RE, "a name (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit)")
env_name = regex(ENV_NAME_RE, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
sha = regex(SHA_RE, "a 7 to 40 digit lower-case hex SHA")
full_sha = regex(FULL_SHA_RE, "a full 40-digit lower-case hex SHA")
sha256_hex = regex(SHA256_RE, "64 lower-case hex digits")
apt_name = regex(APT_NAME_RE, "an apt package name")
apt_version = regex(APT_VERSION_RE, "an apt version (letters, digits and .+~:*-)")
pip_name = regex(PIP_NAME_RE, "a pip distribution name")
pip_pattern = regex(PIP_PATTERN_RE, "a pip name pattern (letters, digits, . _ - and the wildcards * ? [])")
module = regex(MODULE_RE, "a Python module name such as a.b")
version = regex(VERSION_RE, "a version such as 9.14.0.64")
mode = regex(MODE_RE, "an octal mode like '0755'")
_host_port_shape = regex(HOST_RE, "host[:port]")


def host_port(value: str) -> str | None:
    """host[:port]: a DNS name or IPv4 address, or [IPv6], and a port of 1-65535 when one is given (what a URL
    takes as its authority: urllib refuses a port past 65535 or a bracket that holds no IP address, and would
    otherwise raise that where the address is used)."""
    problem = _host_port_shape(value)
    if problem:
        return problem
    try:
        port = urllib.parse.urlsplit(f"//{value}").port
    except ValueError as exc:
        return f"is not host[:port] ({exc})"
    if port is not None and not 0 < port <= PORT_MAX:
        return f"names port {port}, outside 1-{PORT_MAX}"
    return None


repository = regex(REPOSITORY_RE, "a registry repository such as training/deepseek-v3 (lower case)")
image = regex(IMAGE_RE, "an image reference such as nvcr.io/nvidia/pytorch:25.09-py3 or ...@sha256:<64 hex>")
flag = regex(FLAG_RE, "a flag such as --lr or --x=1")


def text(value: str) -> str | None:
    """Any one-line text: a value that is quoted wherever it goes (env values, arguments, commands)."""
    return control(value)


def prose(value: str) -> str | None:
    """Descriptions and docs: several lines are fine (renderers fold them), NUL is not."""
    return "holds a NUL character" if "\x00" in value else None


def _path(value: str, *, glob: bool) -> str | None:
    bad = control(value)
    if bad:
        return bad
    if not value.startswith("/"):
        return "must be an absolute path (starting with '/')"
    parts = value.split("/")
    if ".." in parts:
        return "must not hold '..' (every path stays inside the image's own tree)"
    if posixpath.normpath(value) != value and value != "/":
        return f"is not normalised (write {posixpath.normpath(value)!r})"
    if not glob and any(c in value for c in "*?["):
        return "must not hold wildcards (* ? [)"
    return None


def bind_address(value: str) -> str | None:
    """An IP address (v4 or v6, no port, no name) of one interface: what a server binds to and a URL names."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return "is not an IP address (a name or a port is not accepted)"
    if getattr(ip, "scope_id", None) is not None:  # fe80::1%eth0: a zone may hold any character, and URLs spell it %25
        return "has a zone (%...): name an address without one"
    if ip.is_unspecified:
        return "is every interface: name the one address builders reach (the wheelhouse would serve the whole network)"
    if ip.is_multicast:
        return "is a multicast address"
    return None


def abs_path(value: str) -> str | None:
    """An absolute, normalised path in an image: no '..', '.', '//', trailing '/', NUL or newline."""
    return _path(value, glob=False)


def abs_glob(value: str) -> str | None:
    """An absolute path that may hold shell wildcards (cleanup, remove.paths)."""
    return _path(value, glob=True)


def rel_path(value: str) -> str | None:
    """A path relative to the manifest's folder that stays inside it (patch files)."""
    bad = control(value)
    if bad:
        return bad
    if value.startswith(("/", "~", "-")):
        return "must be a path relative to the manifest's folder (not starting with '/', '~' or '-')"
    parts = value.split("/")
    if ".." in parts or "." in parts or "" in parts:
        return "must stay inside the manifest's folder: no '..', '.' or empty parts"
    return None


def git_ref(value: str) -> str | None:
    bad = control(value)
    if bad:
        return bad
    if (not _REF_RE.match(value) or ".." in value or "//" in value or "@{" in value
            or value.endswith((".lock", "/", ".")) or "/." in value):
        return "is not a branch name git accepts (letters, digits, . _ / + -, not starting with '-')"
    return None


def repo_location(value: str) -> str | None:
    """Where a component's git repository is: https://, ssh://, file://, git@host:path, or a relative path.

    Never anything git could read as an option (a leading '-'), an ext:: / fd:: transport or a
    remote helper ("x::..."), and no whitespace or control characters.
    """
    bad = control(value)
    if bad:
        return bad
    if value.startswith("-"):
        return "must not start with '-' (git would read it as an option)"
    if any(c.isspace() for c in value):
        return "must not hold whitespace"
    if "::" in value:
        return "must not name a git remote helper or transport ('x::...')"
    m = _URL_RE.match(value)
    if m:
        if m.group("scheme") not in REPO_SCHEMES:
            return f"uses the scheme {m.group('scheme')!r}; use https://, ssh://, file:// or git@host:path"
        if not m.group("rest") or m.group("rest").startswith("-"):
            return "names no host or path after the scheme"
        return None
    if "://" in value:
        return "is not a URL git can fetch (scheme://...)"
    if ":" in value.split("/", 1)[0]:
        # scp-like: host:path, read by git as ssh
        s = _SCP_RE.match(value)
        if not s or s.group("path").startswith("-"):
            return "is neither a URL nor git@host:path"
        return None
    if value.startswith("/"):
        return "must be a URL or a path relative to the manifest (an absolute host path is a fact of one machine)"
    parts = value.split("/")
    if "" in parts:
        return "is not a normalised relative path"
    return None


def url(value: str, schemes: tuple[str, ...]) -> str | None:
    bad = control(value)
    if bad:
        return bad
    m = _URL_RE.match(value)
    if not m:
        return f"is not a URL ({' or '.join(s + '://' for s in schemes)}...)"
    if m.group("scheme").lower() not in schemes:
        return f"uses the scheme {m.group('scheme')!r}; only {', '.join(s + '://' for s in schemes)} are allowed"
    if not m.group("rest") or (m.group("rest")[0] in "/-" and m.group("scheme") != "file"):
        return "names no host after the scheme"
    return url_authority(value)


def url_authority(value: str) -> str | None:
    """The [user@]host[:port] of a URL as urllib reads it where the URL is fetched: a bracket that holds no IP
    address, a port that is no number or outside 1-65535 (urllib's ValueError there, a connection to another
    port, or none), or a file:// URL that names a host (urllib fetches only file:///PATH) is refused here."""
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return f"names no valid host[:port] ({exc})"
    if parts.scheme.lower() == "file":
        return None if parts.netloc in ("", "localhost") else "names a host: a file:// URL is file:///ABSOLUTE/PATH"
    if not parts.hostname:
        return "names no host after the scheme"
    if port is not None and not 0 < port <= PORT_MAX:
        return f"names port {port}, outside 1-{PORT_MAX}"
    return None


def download_url(value: str) -> str | None:
    """A download is fetched on the host with its sha256 checked: http(s) only, never file://."""
    return url(value, DOWNLOAD_SCHEMES)


def apt_line(value: str) -> str | None:
    bad = control(value)
    if bad:
        return bad
    if not re.match(r"^deb(-src)? (\[[^\]'\"\\]*\] )?[a-z][a-z0-9+.-]*://\S+( [^\s'\"\\]+)+\Z", value):
        return "is not a sources.list line ('deb [options] URL SUITE COMPONENT...')"
    return None


def interpreter(value: str) -> str | None:
    """smoke.python: a program name or an absolute path, one shell word with nothing to quote."""
    bad = control(value)
    if bad:
        return bad
    if not re.match(r"^(/[A-Za-z0-9_.+-]+)*/?[A-Za-z0-9_.+-]+\Z", value) or value.startswith("-"):
        return "is not an interpreter name or absolute path such as python3 or /usr/bin/python3.12"
    return None


def repeated(items: Sequence[str]) -> str | None:
    """The first of ``items`` that is listed again after it (None: each is listed once)."""
    return next((x for i, x in enumerate(items) if x in items[:i]), None)


def finite(value: float, *, low: float, high: float) -> str | None:
    if math.isnan(value) or math.isinf(value):
        return f"must be a finite number, got {value!r}"
    if not low < value <= high:
        return f"must be more than {low:g} and at most {high:g}, got {value:g}"
    return None


# A BuildKit builder's endpoint: the engine (and its BuildKit) behind a docker CLI's -H / DOCKER_HOST.
ENDPOINT_SCHEMES = ("unix", "tcp", "ssh")
LOCAL_ENDPOINT = "local"  # DOCKER_HOST, else the local socket: the engine every other command talks to
_SOCKET_PATH_RE = re.compile(r"^(/[A-Za-z0-9_.+@-]+)+\Z")
_SSH_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\Z")


def builder_endpoint(value: str) -> str | None:
    """Where a BuildKit builder is: ``local``, ``unix:///abs/path.sock``, ``tcp://host:port`` or
    ``ssh://[user@]host[:port]``. It reaches the docker CLI (as DOCKER_HOST) and docker-py, so nothing
    else: no query, fragment, credentials in a URL, path after a tcp/ssh host, '..', whitespace or '-' first."""
    bad = control(value)
    if bad:
        return bad
    if value == LOCAL_ENDPOINT:
        return None
    schemes = ", ".join(s + "://" for s in ENDPOINT_SCHEMES)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ENDPOINT_SCHEMES:
        return f"is not a builder endpoint ({LOCAL_ENDPOINT!r}, or {schemes}...)"
    if any(c.isspace() for c in value) or any(c in rest for c in "?#\\"):
        return "must not hold whitespace, '?', '#' or '\\'"
    if scheme == "unix":
        if not _SOCKET_PATH_RE.match(rest) or ".." in rest.split("/") or "." in rest.split("/"):
            return "is not unix:// followed by an absolute, normalised socket path (letters, digits, . _ + @ -)"
        return None
    user, at, hostport = rest.rpartition("@")
    if at and (scheme != "ssh" or not _SSH_USER_RE.match(user)):
        return ("names a user, which only ssh:// takes (a user name: letters, digits, . _ -)" if scheme != "ssh"
                else "names a user that is not a plain user name (letters, digits, . _ -; no password)")
    if "/" in hostport:
        return f"must name only a host and port after {scheme}:// (no path)"
    if not HOST_RE.match(hostport) or hostport.startswith("-"):
        return "names no valid host[:port]"
    try:  # a bracket that holds no IPv6 address ([1.2.3.4], [:::]): docker-py's urllib refuses it where it is used
        urllib.parse.urlsplit(f"//{hostport}")
    except ValueError as exc:
        return f"names no valid host[:port] ({exc})"
    _host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else (hostport, "", "")
    if scheme == "tcp" and not colon:
        return "must name a port: tcp://host:port"
    if colon and not 0 < int(port) <= PORT_MAX:
        return f"names port {port}, outside 1-{PORT_MAX}"
    return None
