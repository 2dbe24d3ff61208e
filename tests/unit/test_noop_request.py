"""services/noop.py's request: which options and settings name a memo (pure; tests/engine/noopcheck.py runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from buildctl import cli
from buildctl.config import load_config
from buildctl.services import noop


def _digest(argv: list[str], env: dict[str, str] | None = None) -> str:
    args: argparse.Namespace = cli.build_parser(argv).parse_args(argv)
    env = env if env is not None else {"BUILDCTL_CACHE": "/c", "BUILDCTL_CONFIG": "/nonexistent.toml"}
    req = noop.request(Path("/p"), vars(args), engine=args.engine[0] if args.engine else None, env=env)
    return noop._request_digest(req, load_config(env))


def test_options_that_decide_nothing_share_a_memo_and_the_others_do_not() -> None:
    base = _digest(["build", "demo", "--local"])
    assert _digest(["-q", "build", "demo", "--local", "--jobs", "5"]) == base  # --jobs, --quiet change no action
    for other in (["build", "demo"], ["build", "demo", "--local", "--skip-smoke"],
                  ["build", "demo", "--local", "--profile", "tiny"], ["build", "demo", "--local", "--variant", "v"],
                  ["build", "demo", "--local", "--engine", "unix:///other.sock"], ["build", "other", "--local"]):
        assert _digest(other) != base, other


def test_the_engine_address_and_the_configuration_name_the_memo() -> None:
    env = {"BUILDCTL_CACHE": "/c", "BUILDCTL_CONFIG": "/nonexistent.toml"}
    base = _digest(["build", "demo"], env)
    assert _digest(["build", "demo"], {**env, "DOCKER_HOST": "unix:///other.sock"}) != base
    assert _digest(["build", "demo"], {**env, "BUILDCTL_REGISTRY": "r.example:5000"}) != base
    assert _digest(["build", "demo"], {**env, "BUILDCTL_CACHE": "/elsewhere"}) != base
    assert noop.memo_path(load_config(env), base) == Path("/c/state/noop") / f"{base}.json"
