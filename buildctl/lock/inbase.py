"""Lock-time questions answered inside the pulled base image (the ``InBase`` seam of lock.py).

One throw-away container per variant (``docker run``, removed afterwards) runs inbase_probe.py with
the base's own python3: pip --dry-run --report for the runtime and each component's build
requirements, apt-get update + apt-cache madison for the apt packages. It runs with the host's
network (so an index on 127.0.0.1 and the user's proxy work), the user's CA bundle mounted
read-only and named by PIP_CERT, and the index settings from the configuration as environment
variables. A run is not a layer: nothing of this reaches an image.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from buildctl import untrusted
from buildctl.config import Config
from buildctl.engine.values import Mount, RunResult
from buildctl.errors import LockError, UnreachableError
from buildctl.lock.resolvers import PipInstall, ProbeRequest, ProbeResult

PROBE_PATH = "/buildctl/probe.py"
REQUEST_PATH = "/buildctl/request.json"
CA_PATH = "/buildctl/ca.crt"
MARK = "BUILDCTL-PROBE-RESULT:"

_NETWORK_MARKERS = ("temporary failure", "could not resolve", "connection refused", "timed out", "timeout",
                    "max retries exceeded", "name or service not known", "network is unreachable",
                    "failed to establish a new connection", "no route to host")


class ProbeEngine(Protocol):
    """What the probe needs of the Engine."""

    def image_exists(self, ref: str) -> bool: ...

    def pull(self, ref: str, platform: str | None = None) -> str: ...

    def platform(self) -> str: ...

    def run(self, image: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            mounts: Sequence[Mount] = (), files: Mapping[str, bytes] | None = None, workdir: str | None = None,
            user: str | None = None, network_mode: str | None = None, gpus: bool = False, timeout: float,
            entrypoint: Sequence[str] | None = None) -> RunResult: ...


def probe_env(config: Config, request: ProbeRequest) -> dict[str, str]:
    """The environment of the probe container: index settings and CA from the configuration."""
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "DEBIAN_FRONTEND": "noninteractive"}
    if config.pip_index_url:
        env["PIP_INDEX_URL"] = config.pip_index_url
    if config.pip_extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(config.pip_extra_index_urls)
    if config.ca_bundle:
        env["PIP_CERT"] = CA_PATH
    if request.unset_constraint:
        env["PIP_CONSTRAINT"] = ""
    return env


def request_json(request: ProbeRequest, config: Config) -> dict[str, Any]:
    return {
        "pip": list(request.pip),
        "build_pip": {c: list(r) for c, r in request.build_pip.items()},
        "apt": list(request.apt),
        "apt_sources": dict(request.apt_sources),
        "apt_debs": list(request.apt_debs),
        "remove_pip": list(request.remove_pip),
        "remove_paths": list(request.remove_paths),
        "unset_constraint": request.unset_constraint,
        "timeout": max(1, int(config.network_timeout)),
        "ca_file": CA_PATH if config.ca_bundle else "",
    }


def _installs(group: Mapping[str, Any]) -> tuple[PipInstall, ...]:
    return tuple(PipInstall(name=str(i["name"]), version=str(i["version"]), url=str(i.get("url") or ""),
                            sha256=i.get("sha256") or None, requested=bool(i.get("requested")))
                 for i in group.get("install", []))


def _network(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _NETWORK_MARKERS)


def _pip_failure(what: str, group: Mapping[str, Any], image: str, config: Config) -> LockError | UnreachableError:
    out = str(group.get("error", ""))
    tail = "\n".join(out.strip().splitlines()[-12:])
    if "no such option: --report" in out or "no such option: --dry-run" in out:
        return LockError(f"pip in {image} is too old to resolve {what} without installing",
                         why=tail, fix="the base needs pip >= 22.2 (pip install --dry-run --report)")
    if _network(out) and "ResolutionImpossible" not in out:
        index = config.pip_index_url or "the base's default index (pypi.org)"
        return UnreachableError(f"pip inside {image} cannot reach {index} while resolving {what}",
                                why=tail, fix="check pip_index_url / pip_extra_index_urls and ca_bundle in the "
                                              "buildctl configuration (the CA is given to pip as PIP_CERT)")
    pinned = [str(c) for c in group.get("constraints", [])]
    if pinned:
        tail += "\n  the base's PIP_CONSTRAINT pins: " + "; ".join(pinned)
    return LockError(f"pip cannot resolve {what} inside {image}", why=tail,
                     fix="adjust the requirements; with `pip: {constraint: keep}` the base's PIP_CONSTRAINT file "
                         "counts too (`constraint: unset` ignores it, as `unset PIP_CONSTRAINT` would)")


def parse_output(run: RunResult, image: str, config: Config) -> ProbeResult:
    """The probe's answer, or the error that explains why there is none."""
    line = next((ln for ln in reversed(run.stdout.splitlines()) if ln.startswith(MARK)), None)
    if run.timed_out or line is None or run.exit_code != 0:
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-12:])
        if "exec format error" in tail:
            raise LockError(f"cannot run {image} on this engine to resolve pip and apt pins",
                            why="the image is for another CPU architecture (exec format error)",
                            fix="lock this variant on a host of its platform, or register qemu binfmt handlers "
                                "for it on this one")
        raise LockError(f"the lock probe inside {image} " +
                        ("did not finish in time" if run.timed_out else f"failed (exit {run.exit_code})"),
                        why=tail or "no output", fix="the base image needs python3 on its PATH")
    try:  # output of a process in the base image (outside content): bounded, and its shape checked
        data = untrusted.obj(untrusted.loads(line[len(MARK):]), "the probe's answer")
        return _probe_result(data, image, config)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LockError(f"the lock probe inside {image} answered something that is not its answer",
                        why=f"{type(exc).__name__}: {str(exc)[:300]}",
                        fix="check that the base image's python3 is a real CPython (the probe is "
                            "buildctl/inimage/inbase_probe.py)") from None


def _probe_result(data: dict[str, Any], image: str, config: Config) -> ProbeResult:
    if data.get("remove_error"):
        raise LockError(f"removing the manifest's remove.pip packages inside {image} failed",
                        why=str(data["remove_error"])[-2000:])
    build: dict[str, tuple[PipInstall, ...]] = {}
    for comp, group in data.get("build_pip", {}).items():
        if "error" in group:
            raise _pip_failure(f"the build requirements of {comp}", group, image, config)
        build[comp] = _installs(group)
    pip: tuple[PipInstall, ...] = ()
    if "pip" in data:
        if "error" in data["pip"]:
            raise _pip_failure("the pip requirements", data["pip"], image, config)
        pip = _installs(data["pip"])
    apt: dict[str, tuple[str, ...]] = {}
    if "apt" in data:
        if "error" in data["apt"]:
            out = str(data["apt"]["error"])
            tail = "\n".join(out.strip().splitlines()[-12:])
            if _network(out):
                raise UnreachableError(f"apt inside {image} cannot reach its package sources", why=tail,
                                       fix="check the network or proxy; for https sources behind a "
                                           "TLS-intercepting proxy set ca_bundle in the buildctl configuration")
            raise LockError(f"apt-get update failed inside {image}", why=tail,
                            fix="check apt.repos in the manifest (sources lines and keyrings)")
        apt = {k: tuple(v) for k, v in data["apt"].get("offered", {}).items()}
    return ProbeResult(python=str(data.get("python", "")), tags=tuple(data.get("tags", ())),
                       installed=dict(data.get("installed", {})),
                       installed_after_remove=dict(data.get("installed_after_remove", {})),
                       pip=pip, build_pip=build, apt=apt)


class EngineInBase:
    """``InBase`` through a Docker engine: pull the base by digest when missing, run the probe in it."""

    def __init__(self, engine: ProbeEngine, config: Config, *, timeout: float = 600.0) -> None:
        self.engine = engine
        self.config = config
        self.timeout = timeout

    def probe(self, *, image: str, platform: str, request: ProbeRequest) -> ProbeResult:
        if not self.engine.image_exists(image):
            try:
                self.engine.pull(image, platform)
            except UnreachableError as exc:
                raise UnreachableError(
                    f"cannot pull the base {image} to resolve pip and apt pins in it", why=f"{exc.what}: {exc.why}",
                    fix=exc.fix) from exc
        files = {PROBE_PATH: (Path(__file__).parent.parent / "inimage" / "inbase_probe.py").read_bytes(),
                 REQUEST_PATH: json.dumps(request_json(request, self.config)).encode(),
                 **request.files}
        mounts = [Mount(source=self.config.ca_bundle, target=CA_PATH)] if self.config.ca_bundle else []
        run = self.engine.run(image, ["python3", PROBE_PATH, REQUEST_PATH], env=probe_env(self.config, request),
                              mounts=mounts, files=files, user="0", network_mode="host", timeout=self.timeout)
        return parse_output(run, image, self.config)
