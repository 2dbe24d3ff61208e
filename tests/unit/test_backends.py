"""Build backends and BuildKit builders: the pure parts (endpoint syntax, configuration, which engines a build
uses, the docker CLI's argv). The builds themselves are tests/engine/test_buildkit.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl import syntax
from buildctl.config import Config, load_config
from buildctl.engine import buildkit
from buildctl.errors import ManifestError, UsageError
from buildctl.services import wiring

GOOD = ["local", "unix:///var/run/docker.sock", "unix:///tmp/buildctl-e2-x_1/docker.sock", "tcp://127.0.0.1:2375",
        "tcp://builder-3.example.org:2376", "tcp://[::1]:2375", "ssh://builder@gpu-host", "ssh://gpu-host:2222",
        "ssh://ci.builder@10.0.0.5"]
BAD = {
    "http://127.0.0.1:2375": "is not a builder endpoint",
    "--host=tcp://x:1": "is not a builder endpoint",
    "tcp://127.0.0.1": "must name a port",
    "tcp://127.0.0.1:0": "outside 1-65535",
    "tcp://127.0.0.1:65536": "outside 1-65535",
    "tcp://user:secret@host:2375": "which only ssh:// takes",
    "ssh://user:secret@host": "not a plain user name",
    "ssh://-oProxyCommand=sh@host": "not a plain user name",
    "ssh://-oProxyCommand=sh": "no valid host",
    "tcp://host:2375/v1.41": "no path",
    "tcp://host:2375?x=1": "'?'",
    "tcp://host:2375#frag": "'#'",
    "unix://relative.sock": "absolute, normalised socket path",
    "unix:///run/../etc/docker.sock": "absolute, normalised socket path",
    "unix:///run/./docker.sock": "absolute, normalised socket path",
    "unix:///run/my docker.sock": "whitespace",
    "tcp://host:2375\n": "control character",
    "tcp://host\x00:2375": "control character",
    "": "is not a builder endpoint",
}


@pytest.mark.parametrize("value", GOOD)
def test_a_builder_endpoint_is_local_unix_tcp_or_ssh(value: str) -> None:
    assert syntax.builder_endpoint(value) is None


@pytest.mark.parametrize(("value", "says"), list(BAD.items()))
def test_anything_else_is_refused_saying_why(value: str, says: str) -> None:
    problem = syntax.builder_endpoint(value)
    assert problem is not None and says in problem, problem


def _config(tmp_path: Path, text: str = "", **env: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path), **env})


def test_the_configuration_names_backend_builders_and_cli(tmp_path: Path) -> None:
    c = _config(tmp_path, 'backend = "buildkit"\nbuilders = ["local", "tcp://10.0.0.5:2376"]\n'
                          'docker_cli = "/usr/bin/docker"\n')
    assert (c.backend, c.builders, c.docker_cli) == ("buildkit", ("local", "tcp://10.0.0.5:2376"), Path("/usr/bin/docker"))
    env = _config(tmp_path, BUILDCTL_BACKEND="classic", BUILDCTL_BUILDERS="tcp://a:1, ssh://b")
    assert env.backend == "classic" and env.builders == ("tcp://a:1", "ssh://b")
    assert _config(tmp_path).backend is None and _config(tmp_path).builders == ()
    # an address this host has (tests/unit/test_hostaddr.py: which ones are refused, on a host made up for the test)
    assert _config(tmp_path, 'wheelhouse_address = "127.0.0.1"\n').wheelhouse_address == "127.0.0.1"
    assert _config(tmp_path, BUILDCTL_WHEELHOUSE_ADDRESS="127.0.0.2").wheelhouse_address == "127.0.0.2"
    assert _config(tmp_path).wheelhouse_address is None


@pytest.mark.parametrize(("text", "line", "key", "says"), [
    ('registry = "127.0.0.1:5000"\nbuilders = ["tcp://x:1", "tcp://evil:1 --privileged"]\n', 2, "builders", "whitespace"),
    ('backend = "kaniko"\n', 1, "backend", "is not a build backend"),
    ('builders = "tcp://x:1"\n', 1, "builders", None),  # a string is one word list (as from the environment)
    ("builders = [1]\n", 1, "builders", "expected a list of endpoints"),
    ('docker_cli = "docker"\n', 1, "docker_cli", "absolute path"),
    ('\n\nbuilders = ["http://x:1"]\n', 3, "builders", "is not a builder endpoint"),
    ('wheelhouse_address = "0.0.0.0"\n', 1, "wheelhouse_address", "is every interface"),
    ('\nwheelhouse_address = "build-host.example"\n', 2, "wheelhouse_address", "is not an IP address"),
    ('wheelhouse_address = "10.0.0.4:8000"\n', 1, "wheelhouse_address", "is not an IP address"),
    ('wheelhouse_address = "::"\n', 1, "wheelhouse_address", "is every interface"),
    ('wheelhouse_address = "fe80::1%a;b$(id)"\n', 1, "wheelhouse_address", "has a zone"),
    ('wheelhouse_address = "10.0.0.4;id"\n', 1, "wheelhouse_address", "is not an IP address"),
    ('wheelhouse_address = "-10.0.0.4"\n', 1, "wheelhouse_address", "is not an IP address"),
])
def test_a_bad_value_names_the_file_line_and_key(tmp_path: Path, text: str, line: int, key: str,
                                                 says: str | None) -> None:
    if says is None:
        assert _config(tmp_path, text).builders == ("tcp://x:1",)
        return
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, text)
    loc = failed.value.location
    assert (loc.file, loc.line, loc.key) == (str(tmp_path / "config.toml"), line, key)
    assert says in failed.value.what


def test_a_bad_value_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, BUILDCTL_BUILDERS="tcp://ok:1,unix://no")
    assert failed.value.location.file == "$BUILDCTL_BUILDERS" and failed.value.location.key == "builders"


def test_which_engines_and_backend_a_build_uses(tmp_path: Path) -> None:
    plain = _config(tmp_path)
    default = wiring.choose_builders(plain)
    assert (default.backend, default.endpoints) == ("classic", (None,))
    assert wiring.choose_builders(plain, backend="buildkit").endpoints == (None,)
    named = wiring.choose_builders(plain, builders=["local", "tcp://127.0.0.1:2375"])
    assert (named.backend, named.endpoints, named.source) == ("buildkit", (None, "tcp://127.0.0.1:2375"), "--builder")
    assert named.names() == ["engine0", "engine1"]
    engines = wiring.choose_builders(plain, engines=["unix:///run/e2.sock"], backend="buildkit")
    assert (engines.backend, engines.endpoints) == ("buildkit", ("unix:///run/e2.sock",))

    configured = _config(tmp_path, 'builders = ["tcp://10.0.0.5:2376"]\n')
    assert wiring.choose_builders(configured).endpoints == ("tcp://10.0.0.5:2376",)
    assert wiring.choose_builders(configured).backend == "buildkit"
    # --engine, or --backend classic, puts the configured builders aside
    assert wiring.choose_builders(configured, engines=["unix:///x.sock"]).backend == "classic"
    assert wiring.choose_builders(configured, backend="classic").endpoints == (None,)
    assert wiring.choose_builders(_config(tmp_path, 'backend = "buildkit"\n')).backend == "buildkit"


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"engines": ["unix:///a.sock"], "builders": ["local"]}, "give one of them"),
    ({"builders": ["tcp://h:1"], "backend": "classic"}, "--builder names BuildKit builders"),
    ({"builders": ["tcp://h:1 -v /:/host"]}, "--builder 'tcp://h:1 -v /:/host' must not hold whitespace"),
    ({"backend": "kaniko"}, "is not a build backend"),
])
def test_contradictions_and_bad_builders_are_usage_errors(tmp_path: Path, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError) as failed:
        wiring.choose_builders(_config(tmp_path), **kwargs)  # type: ignore[arg-type]
    assert says in failed.value.what


def test_the_docker_cli_argv_joins_every_value_to_its_flag(tmp_path: Path) -> None:
    cli = buildkit.Cli(path="/usr/bin/docker", version="20.10.24", buildx=False)
    argv = buildkit.command(cli, context_dir=tmp_path, dockerfile="Dockerfile", tag="buildctl-part/o:system",
                            iidfile=tmp_path / "iid", labels={"b": "-x", "a": "1"},
                            buildargs={"BUILDCTL_WHEELHOUSE": "http://127.0.0.1:1/"}, network_mode="host", nocache=True)
    assert argv == ["/usr/bin/docker", "build", "--progress=plain", f"--iidfile={tmp_path / 'iid'}",
                    "--tag=buildctl-part/o:system", f"--file={tmp_path / 'Dockerfile'}", "--label=a=1", "--label=b=-x",
                    "--build-arg=BUILDCTL_WHEELHOUSE=http://127.0.0.1:1/", "--network=host", "--no-cache",
                    str(tmp_path)]
    plain = buildkit.command(cli, context_dir=tmp_path, dockerfile="Dockerfile", tag="t", iidfile=tmp_path / "i",
                             labels={}, buildargs=None, network_mode=None, nocache=False)
    assert "--network=host" not in plain and "--no-cache" not in plain and plain[-1] == str(tmp_path)


def test_buildkits_error_lines_are_what_a_failure_says() -> None:
    lines: list[str] = []
    errors: list[str] = []
    for line in ["#5 [2/2] RUN exit 3", "#5 ERROR: executor failed running [/bin/sh -c exit 3]: exit code: 3",
                 "------", "error: failed to solve: rpc error: code = Unknown desc = executor failed running "
                 "[/bin/sh -c exit 3]: exit code: 3"]:
        buildkit._line(line, lines.append, errors)
    assert lines[0] == "#5 [2/2] RUN exit 3\n" and len(lines) == 4
    assert errors[0].startswith("ERROR: executor failed") and "failed to solve" in errors[-1]

