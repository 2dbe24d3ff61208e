"""Registry credentials: where they come from, and keeping them out of every output.

buildctl never stores credentials of its own. The engine client (docker-py) reads docker's own
configuration: ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``, credential helpers included.
For CI, ``BUILDCTL_REGISTRY_AUTH=USER:PASSWORD`` gives credentials for the registry being pushed to;
they are handed to the engine client through a private, temporary docker configuration (a 0700
folder removed afterwards), because that is the one door docker-py opens for them.

Whatever credentials are in play are also known to a ``Redactor``, which every message, log line and
report passes through before it is shown or written.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from buildctl.errors import UsageError

AUTH_ENV = "BUILDCTL_REGISTRY_AUTH"
MASK = "***"
# user:password@ in URLs, and the values of auth-looking JSON keys, whatever the secret is
_URL_CREDS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@", re.IGNORECASE)
_AUTH_FIELDS = re.compile(r'(?P<key>"(?:auth|password|identitytoken|registrytoken)"\s*:\s*")[^"]*"', re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Redactor:
    """Replaces every known secret (and URL credentials, auth fields) with ***."""

    secrets: tuple[str, ...] = ()

    def __call__(self, text: str) -> str:
        for s in sorted(self.secrets, key=len, reverse=True):
            if s:
                text = text.replace(s, MASK)
        text = _URL_CREDS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
        return _AUTH_FIELDS.sub(lambda m: f'{m.group("key")}{MASK}"', text)

    def with_secrets(self, *more: str) -> Redactor:
        return Redactor(secrets=tuple(dict.fromkeys((*self.secrets, *(m for m in more if m)))))


@dataclass(frozen=True, kw_only=True)
class EnvAuth:
    """Credentials from BUILDCTL_REGISTRY_AUTH for one registry host."""

    registry: str
    username: str
    password: str

    def __repr__(self) -> str:  # never show the password, not even in a traceback's locals
        return f"EnvAuth(registry={self.registry!r}, username={self.username!r}, password={MASK!r})"


def env_auth(env: Mapping[str, str], registry: str) -> EnvAuth | None:
    value = env.get(AUTH_ENV)
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        # the value itself is never echoed: it may be a password given in the wrong form
        raise UsageError(f"{AUTH_ENV} is not in the form USER:PASSWORD",
                         fix=f"set {AUTH_ENV}=USER:PASSWORD, or unset it and use `docker login {registry}`")
    return EnvAuth(registry=registry, username=user, password=password)


@dataclass(frozen=True, kw_only=True)
class Login:
    """A user name and password (or token) for one registry, for clients that speak its HTTP API."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Login(username={self.username!r}, password={MASK!r})"


def _host_key(key: str) -> str:
    """docker's config keys a registry as ``host``, ``https://host`` or ``https://host/v1/``."""
    return key.split("://", 1)[-1].split("/", 1)[0]


def registry_login(env: Mapping[str, str], registry: str) -> Login | None:
    """Credentials for ``registry``: BUILDCTL_REGISTRY_AUTH (the registry being pushed to), else the
    ``auths`` entry of docker's config (``auth`` = base64 of USER:PASSWORD, or username/password).
    Credential helpers and identity tokens are docker's own business: without a plain entry, None."""
    auth = env_auth(env, registry)
    if auth is not None:
        return Login(username=auth.username, password=auth.password)
    try:
        data = json.loads((docker_config_dir(env) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if not isinstance(entry, dict) or _host_key(str(key)) != registry:
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, sep, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
            except (binascii.Error, ValueError):
                continue
            if sep and user:
                return Login(username=user, password=password)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Login(username=entry["username"], password=entry["password"])
    return None


def docker_config_dir(env: Mapping[str, str]) -> Path:
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"])
    return Path(env.get("HOME", str(Path.home()))) / ".docker"


def docker_config_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """Every password and token in docker's config file, so that none of them can leak through us."""
    path = docker_config_dir(env) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return ()
    found: list[str] = []
    auths = data.get("auths") if isinstance(data, dict) else None
    for entry in (auths or {}).values() if isinstance(auths, dict) else ():
        if not isinstance(entry, dict):
            continue
        for key in ("auth", "password", "identitytoken", "registrytoken"):
            v = entry.get(key)
            if isinstance(v, str) and v:
                found.append(v)
        if isinstance(entry.get("auth"), str):
            try:
                _user, _, password = base64.b64decode(entry["auth"]).decode("utf-8", "replace").partition(":")
            except (binascii.Error, ValueError):
                continue
            if password:
                found.append(password)
    return tuple(found)


def redactor_for(env: Mapping[str, str], registry: str | None) -> Redactor:
    secrets = list(docker_config_secrets(env))
    value = env.get(AUTH_ENV)
    if value:
        secrets.append(value)
        _, _, password = value.partition(":")
        secrets.append(password)
        secrets.append(base64.b64encode(value.encode()).decode())
    return Redactor(secrets=tuple(dict.fromkeys(s for s in secrets if s)))


@contextmanager
def docker_credentials(env: Mapping[str, str], registry: str) -> Iterator[None]:
    """Make the engine clients created inside this block use BUILDCTL_REGISTRY_AUTH for ``registry``.

    docker-py reads credentials when a client is created, from $DOCKER_CONFIG of the process
    environment, so the process's DOCKER_CONFIG points at a private copy of docker's config for the
    duration of the block: the user's other entries are kept, the entry for ``registry`` carries the
    credentials, and the copy (a 0700 folder, a 0600 file) is removed afterwards. Without
    BUILDCTL_REGISTRY_AUTH nothing changes: docker's own configuration is used.
    """
    auth = env_auth(env, registry)
    if auth is None:
        yield
        return
    source = docker_config_dir(env) / "config.json"
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    auths = data.get("auths")
    if not isinstance(auths, dict):
        auths = {}
    token = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
    data["auths"] = {**auths, registry: {"auth": token}}
    # a credential store or helper would take precedence over the entry written here
    data.pop("credsStore", None)
    if isinstance(data.get("credHelpers"), dict):
        data["credHelpers"].pop(registry, None)
    folder = Path(tempfile.mkdtemp(prefix="buildctl-docker-config-"))
    previous = os.environ.get("DOCKER_CONFIG")
    try:
        os.chmod(folder, 0o700)
        fd = os.open(folder / "config.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.environ["DOCKER_CONFIG"] = str(folder)
        yield
    finally:
        if previous is None:
            os.environ.pop("DOCKER_CONFIG", None)
        else:
            os.environ["DOCKER_CONFIG"] = previous
        shutil.rmtree(folder, ignore_errors=True)
