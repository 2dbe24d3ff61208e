"""The engine client's short questions without docker-py (Client._call over peek.request): against an HTTP server
on a unix socket that stands in for the engine's API (a local process; the engine tests ask the real engine the
same questions on every build). What is checked: the requests sent (method, path, query), the answers read
(found, missing, refused, no engine), the errors as the docker-py path words them, and that none of it loads
docker-py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from buildctl.engine.engine import Engine
from buildctl.errors import EngineError
from tests.integration.test_engine_peek import Server, _http
from tests.integration.test_engine_peek import serve as api

__all__ = ["api"]  # the stand-in API's fixture (test_engine_peek.py's)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = {"Id": "sha256:" + "a" * 64, "RepoTags": ["r/x:1"], "RepoDigests": [], "Created": "2026-01-01T00:00:00Z",
         "Os": "linux", "Architecture": "amd64", "Config": {"Labels": {"k": "v"}, "Env": ["A=1"]},
         "RootFS": {"Layers": ["sha256:" + "b" * 64]}, "GraphDriver": {"Name": "overlay2", "Data": {}}}
HISTORY = [{"Created": 1, "CreatedBy": "COPY rootfs/ / # buildkit", "Size": 10, "Comment": "", "Tags": None}]


def _json(status: str, data: object) -> bytes:
    return _http(status, json.dumps(data).encode())


def _engine(path: Path) -> Engine:
    return Engine(f"unix://{path}", name="stand-in", timeout=5, network_timeout=5)


def _split(request_line: str) -> tuple[str, str, dict[str, list[str]]]:
    method, url, _ = request_line.split(" ")
    parts = urlsplit(url)
    return method, unquote(parts.path), parse_qs(parts.query)


def test_inspect_tag_and_remove_send_the_engine_api_calls_and_read_the_answers(api: tuple[Path, list[Server]]) -> None:
    path, servers = api
    s = Server(path, [_json("200 OK", IMAGE), _json("404 Not Found", {"message": "No such image: r/y:2"}),
                      _json("200 OK", IMAGE), _json("200 OK", HISTORY),
                      _http("201 Created", b""), _json("200 OK", [{"Untagged": "r/x:1"}]),
                      _json("404 Not Found", {"message": "No such image: r/x:1"}),
                      _json("200 OK", {"Os": "linux", "Arch": "arm64", "Version": "20.10.24"})])
    servers.append(s)
    e = _engine(path)
    assert e.image_id("r/x:1") == IMAGE["Id"]
    assert e.image_exists("127.0.0.1:5000/r/y:2") is False
    info = e.inspect_image("r/x:1")
    assert (info.labels, info.env, info.layers, info.storage_driver) == ({"k": "v"}, {"A": "1"},
                                                                           ("sha256:" + "b" * 64,), "overlay2")
    assert info.history[0].created_by == "COPY rootfs/ / # buildkit"
    e.tag("r/x:1", "127.0.0.1:5000/r/x:key")
    e.remove_image("r/x:1")
    e.remove_image("r/x:1")  # already gone: fine
    assert e.platform() == "linux/arm64"
    assert e.platform() == "linux/arm64"  # asked once
    sent = [_split(r) for r in s.requests]
    assert [(m, p) for m, p, _ in sent] == [
        ("GET", "/images/r/x:1/json"), ("GET", "/images/127.0.0.1:5000/r/y:2/json"),
        ("GET", "/images/r/x:1/json"), ("GET", "/images/r/x:1/history"),
        ("POST", "/images/r/x:1/tag"), ("DELETE", "/images/r/x:1"), ("DELETE", "/images/r/x:1"), ("GET", "/version")]
    assert sent[4][2] == {"repo": ["127.0.0.1:5000/r/x"], "tag": ["key"]}
    assert sent[5][2] == {"force": ["0"]}


def test_refusals_and_a_missing_engine_are_engine_errors_worded_as_the_docker_py_path(
        api: tuple[Path, list[Server]], tmp_path: Path) -> None:
    path, servers = api
    s = Server(path, [_json("404 Not Found", {"message": "No such image: r/x:1"}),
                      _json("409 Conflict", {"message": "conflict: unable to delete (image is being used by a container)"}),
                      _json("404 Not Found", {"message": "No such image: r/x:1"}),
                      _json("500 Internal Server Error", {"message": "boom"})])
    servers.append(s)
    e = _engine(path)
    with pytest.raises(EngineError) as exc:
        e.tag("r/x:1", "r/x:2")
    assert exc.value.what == "cannot tag r/x:1 as r/x:2: no such image" and exc.value.why == "No such image: r/x:1"
    with pytest.raises(EngineError) as exc:
        e.remove_image("r/x:1")
    assert exc.value.what == "remove r/x:1: the engine refused" and "being used by a container" in exc.value.why
    assert "remove that container" in exc.value.fix
    with pytest.raises(EngineError) as exc:
        e.inspect_image("r/x:1")
    assert exc.value.what == "image r/x:1 is not in engine 'stand-in'"
    with pytest.raises(EngineError) as exc:
        e.image_exists("r/x:1")
    assert exc.value.what == "inspect r/x:1: the engine refused" and exc.value.why == "boom"
    gone = _engine(tmp_path / "no-engine.sock")
    with pytest.raises(EngineError) as exc:
        gone.image_exists("r/x:1")
    assert exc.value.what == f"inspect r/x:1: no Docker engine answers at unix://{tmp_path / 'no-engine.sock'} (stand-in)"
    assert "start an engine" in exc.value.fix


def test_leftovers_of_dead_runs_are_listed_by_label_and_name_and_removed(api: tuple[Path, list[Server]],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path, servers = api
    dead = "nohost.1.1"
    containers = [{"Id": "c" * 64, "Labels": {"org.buildctl.owner": dead}}]
    s = Server(path, [_json("200 OK", containers), _http("204 No Content", b""),
                      _json("200 OK", [{"RepoTags": [f"buildctl-part/{dead}:python", "other:1"]}]),
                      _json("200 OK", [{"Untagged": "x"}])])
    servers.append(s)
    e = _engine(path)
    monkeypatch.setattr("buildctl.engine.engine.dead_owner", lambda token: token == dead)  # no such process here
    removed = e.remove_leftovers()
    assert removed == (["c" * 64], [f"buildctl-part/{dead}:python"])
    sent = [_split(r) for r in s.requests]
    assert sent[0] == ("GET", "/containers/json", {"all": ["1"], "filters": [json.dumps({"label": ["org.buildctl.owner"]})]})
    assert sent[1] == ("DELETE", f"/containers/{'c' * 64}", {"force": ["1"], "v": ["1"]})
    assert sent[2] == ("GET", "/images/json", {"filters": [json.dumps({"reference": ["buildctl-part/*"]})]})
    assert sent[3][:2] == ("DELETE", f"/images/buildctl-part/{dead}:python")


def test_short_questions_load_no_docker_py_and_other_addresses_keep_it(api: tuple[Path, list[Server]]) -> None:
    """In a fresh interpreter: asking a unix socket loads neither docker-py nor requests; a tcp:// engine (or TLS
    settings in the environment) goes through docker-py, as before."""
    path, servers = api
    servers.append(Server(path, [_json("200 OK", IMAGE), _json("200 OK", {"Os": "linux", "Arch": "amd64"})]))
    code = ("import sys; from buildctl.engine.engine import Engine; e = Engine(sys.argv[1], timeout=5); "
            "assert e.image_exists('r/x:1'); assert e.platform() == 'linux/amd64'; "
            "print(sorted(m for m in ('docker', 'requests', 'urllib3') if m in sys.modules)); "
            "print(Engine('tcp://127.0.0.1:1')._wire(), Engine(None)._wire())")
    done = subprocess.run([sys.executable, "-c", code, f"unix://{path}"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DOCKER_TLS_VERIFY": "1"},
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "None None"]


def test_a_small_load_goes_in_one_request_on_the_socket(api: tuple[Path, list[Server]], tmp_path: Path) -> None:
    path, servers = api
    loaded = b"".join(json.dumps(x).encode() + b"\r\n" for x in ({"stream": "Loaded image: r/x:part\n"},))
    s = Server(path, [_http("200 OK", loaded),
                      _http("200 OK", json.dumps({"errorDetail": {"message": "bad"}, "error": "bad layer"}).encode())])
    servers.append(s)
    tar = tmp_path / "thin.tar"
    tar.write_bytes(b"x" * 3000)
    e = _engine(path)
    assert e.load(tar) == ["r/x:part"]
    with pytest.raises(EngineError, match=r"load of .* failed") as err:
        e.load(tar)
    assert "bad layer" in str(err.value.why)
    assert [_split(r)[:2] for r in s.requests] == [("POST", "/images/load")] * 2
    assert _split(s.requests[0])[2] == {"quiet": ["1"]}
    assert s.bodies == [b"x" * 3000] * 2 and s.headers[0]["content-type"] == "application/x-tar"
