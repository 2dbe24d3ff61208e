"""credentials.py: secrets never shown, BUILDCTL_REGISTRY_AUTH handed to docker-py via a private config."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from buildctl.errors import UsageError
from buildctl.registry import credentials

SECRET = "s3cr3t-pa55:with-colon"


def test_redactor_masks_known_secrets_url_credentials_and_auth_fields() -> None:
    r = credentials.Redactor(secrets=(SECRET,))
    text = r(f'failed {SECRET} at https://bob:hunter2@reg.example/v2/ with {{"auth": "Ym9iOmh1bnRlcjI="}}')
    assert text == 'failed *** at https://***@reg.example/v2/ with {"auth": "***"}'


def test_a_malformed_auth_variable_is_refused_without_echoing_it() -> None:
    with pytest.raises(UsageError) as info:
        credentials.env_auth({credentials.AUTH_ENV: "justapassword"}, "r:1")
    assert "justapassword" not in str(info.value)


def test_env_auth_repr_hides_the_password() -> None:
    auth = credentials.env_auth({credentials.AUTH_ENV: f"bob:{SECRET}"}, "r:1")
    assert auth is not None and auth.password == SECRET and SECRET not in repr(auth)


def test_redactor_for_knows_docker_config_and_env_secrets(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"auths": {"r:1": {"auth": base64.b64encode(b"alice:from-docker-config").decode()}}}))
    env = {"DOCKER_CONFIG": str(tmp_path), credentials.AUTH_ENV: f"bob:{SECRET}"}
    r = credentials.redactor_for(env, "r:1")
    assert r(f"x from-docker-config {SECRET} {base64.b64encode(f'bob:{SECRET}'.encode()).decode()}") == "x *** *** ***"


def test_docker_credentials_points_docker_config_at_a_private_copy(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    user_config = tmp_path / "user"
    user_config.mkdir()
    (user_config / "config.json").write_text(json.dumps(
        {"auths": {"other:1": {"auth": "b3RoZXI6eA=="}}, "credsStore": "desktop"}))
    monkeypatch.setenv("DOCKER_CONFIG", str(user_config))
    env = {"DOCKER_CONFIG": str(user_config), credentials.AUTH_ENV: f"bob:{SECRET}"}
    with credentials.docker_credentials(env, "127.0.0.1:5001"):
        private = Path(os.environ["DOCKER_CONFIG"])
        assert private != user_config
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert stat.S_IMODE((private / "config.json").stat().st_mode) == 0o600
        data = json.loads((private / "config.json").read_text())
        assert base64.b64decode(data["auths"]["127.0.0.1:5001"]["auth"]).decode() == f"bob:{SECRET}"
        assert data["auths"]["other:1"] == {"auth": "b3RoZXI6eA=="} and "credsStore" not in data
    assert os.environ["DOCKER_CONFIG"] == str(user_config)
    assert not private.exists()


def test_without_the_variable_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    with credentials.docker_credentials({}, "r:1"):
        assert "DOCKER_CONFIG" not in os.environ


def test_defect9_build_uses_registry_auth_as_push_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11, item 9: `build` ignored BUILDCTL_REGISTRY_AUTH, which `push` honours. `buildctl build` and the
    nightly's build make their engines inside wiring.registry_credentials(t.registry): the same private docker
    configuration push uses, for the registry the nodes are shared through."""
    from buildctl.commands import build as cmd_build
    from buildctl.services import nightly as svc_nightly
    from buildctl.services import wiring

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "user"))
    env = {"DOCKER_CONFIG": str(tmp_path / "user"), credentials.AUTH_ENV: f"ci:{SECRET}"}
    with wiring.registry_credentials("127.0.0.1:5002", env):
        data = json.loads((Path(os.environ["DOCKER_CONFIG"]) / "config.json").read_text())
        assert base64.b64decode(data["auths"]["127.0.0.1:5002"]["auth"]).decode() == f"ci:{SECRET}"
    assert os.environ["DOCKER_CONFIG"] == str(tmp_path / "user")
    with wiring.registry_credentials(None, env):  # a local-only build shares nothing: nothing changes
        assert os.environ["DOCKER_CONFIG"] == str(tmp_path / "user")
    for module in (cmd_build, svc_nightly):  # handle_build and nightly's build make their engines inside
        assert module.__file__ is not None
        assert "with wiring.registry_credentials(t.registry, os.environ):" in Path(module.__file__).read_text()
