"""Where things live: user configuration and the cache layout.

One documented layout (README, "Where things live"):

- configuration: ``$BUILDCTL_CONFIG`` or ``$XDG_CONFIG_HOME/buildctl/config.toml``
  (``~/.config/buildctl/config.toml``); every key has an environment override.
- cache root: ``$BUILDCTL_CACHE`` or ``$XDG_CACHE_HOME/buildctl`` (``~/.cache/buildctl``), holding
  ``sources/`` (git mirrors and exported trees), ``wheels/<node>/<key>/`` (compiled wheels by key),
  ``ccache/`` (compiler cache), ``logs/<stack>/<variant>/<node>.log``, ``reports/`` (smoke, nightly,
  repro) and ``downloads/``.
- registry credentials: docker's own ``~/.docker/config.json`` (never buildctl's file).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from buildctl.errors import Location, ManifestError

CONFIG_KEYS = {
    "default_stack": "BUILDCTL_DEFAULT_STACK",
    "ca_bundle": "BUILDCTL_CA_BUNDLE",
    "pip_index_url": "BUILDCTL_PIP_INDEX_URL",
    "pip_extra_index_urls": "BUILDCTL_PIP_EXTRA_INDEX_URLS",
    "registry": "BUILDCTL_REGISTRY",
    "registry_mirrors": "BUILDCTL_REGISTRY_MIRRORS",
    "git_mirrors": "BUILDCTL_GIT_MIRRORS",
    "network_timeout": "BUILDCTL_NETWORK_TIMEOUT",
}


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
    network_timeout: float = 10.0
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


def load_config(env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    path = Path(env["BUILDCTL_CONFIG"]) if env.get("BUILDCTL_CONFIG") else (
        _xdg("XDG_CONFIG_HOME", ".config", env) / "buildctl" / "config.toml"
    )
    raw: dict[str, object] = {}
    if path.is_file():
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ManifestError(Location(file=str(path)), f"invalid TOML: {exc}") from exc
        unknown = sorted(set(raw) - set(CONFIG_KEYS))
        if unknown:
            raise ManifestError(
                Location(file=str(path), key=unknown[0]),
                f"unknown configuration key {unknown[0]!r}",
                fix=f"known keys: {', '.join(sorted(CONFIG_KEYS))}",
            )
    values: dict[str, object] = dict(raw)
    for key, var in CONFIG_KEYS.items():
        if env.get(var):
            values[key] = env[var]
    try:
        return _build(values, path if path.is_file() else None, env)
    except (TypeError, ValueError) as exc:
        raise ManifestError(Location(file=str(path)), f"invalid configuration: {exc}") from exc


def _build(values: Mapping[str, object], path: Path | None, env: Mapping[str, str]) -> Config:
    def mapping(v: object) -> dict[str, str]:
        if isinstance(v, str):
            return _pairs(v)
        if isinstance(v, dict):
            return {str(k): str(x) for k, x in v.items()}
        raise TypeError(f"expected a table or NAME=VALUE list, got {v!r}")

    extra = values.get("pip_extra_index_urls", ())
    extras = tuple(extra.split()) if isinstance(extra, str) else tuple(str(x) for x in extra)  # type: ignore[attr-defined]
    cache_root = Path(env["BUILDCTL_CACHE"]) if env.get("BUILDCTL_CACHE") else (
        _xdg("XDG_CACHE_HOME", ".cache", env) / "buildctl"
    )
    ca = values.get("ca_bundle")
    return Config(
        path=path,
        default_stack=str(values.get("default_stack", "deepseek-v3-gb200")),
        ca_bundle=Path(str(ca)) if ca else None,
        pip_index_url=str(values["pip_index_url"]) if values.get("pip_index_url") else None,
        pip_extra_index_urls=extras,
        registry=str(values["registry"]) if values.get("registry") else None,
        registry_mirrors=mapping(values.get("registry_mirrors", {})),
        git_mirrors=mapping(values.get("git_mirrors", {})),
        network_timeout=float(str(values.get("network_timeout", 10.0))),
        cache=CacheLayout(root=cache_root),
    )
