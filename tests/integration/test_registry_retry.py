"""registry.py through a relay that errs N times then passes (issue 33 item 14): transient answers are retried
with backoff under retrying.py's one policy, bounded; 4xx other than 429 is not; messages say what failed.

The registry is Debian's docker-registry on 127.0.0.1 (test_registry_client.Registry); the faults are made by
tests/engine/shiptools.Relay in front of it: a whole HTTP answer (503, 500, 429 with Retry-After, 400) given
instead of the registry's, a reset connection, or an answer held past the client's timeout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from buildctl import retrying
from buildctl.errors import PushError, UnreachableError
from buildctl.registry import attest
from buildctl.registry.registry import RegistryClient
from tests.engine.shiptools import CutRule, Relay, http_answer
from tests.integration.test_registry_client import Registry, image_manifest

FAST = retrying.Backoff(attempts=3, first_delay=0.01, factor=2.0, max_delay=2.0, budget=20.0)
MANIFEST_GET = rb"GET /v2/\S+/manifests/"
MANIFEST_PUT = rb"PUT /v2/\S+/manifests/"
BLOB_PUT = rb"PUT /v2/\S+/blobs/uploads/"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp("retry"))
    yield reg
    reg.stop()


@pytest.fixture
def relay(upstream: Registry) -> Iterator[Relay]:
    r = Relay(upstream=upstream.addr)
    yield r
    r.close()


def client(relay: Relay, waits: list[float], said: list[str], *, timeout: float = 10.0) -> RegistryClient:
    return RegistryClient(relay.addr, retry=FAST, sleep=waits.append, say=said.append, timeout=timeout)


def subject(relay: Relay, repo: str) -> None:
    """A small image in ``repo`` pushed through the relay with no fault armed."""
    image_manifest(RegistryClient(relay.addr, retry=FAST), repo, os.urandom(64))


def test_a_503_twice_then_the_answer(relay: Relay) -> None:
    subject(relay, "retry/a")
    relay.rule = CutRule(pattern=MANIFEST_GET, offset=0, times=2, answer=http_answer(503, "Service Unavailable"))
    waits: list[float] = []
    said: list[str] = []
    got = client(relay, waits, said).manifest("retry/a", "v1")
    assert got is not None and relay.cuts == 2
    assert waits == [FAST.delay(1), FAST.delay(2)]  # backoff: 0.01, then 0.02
    assert len(said) == 2 and "attempt 1 of 3 failed (HTTP 503)" in said[0]


def test_429_waits_what_retry_after_asks_within_the_bound(relay: Relay) -> None:
    subject(relay, "retry/b")
    relay.rule = CutRule(pattern=MANIFEST_GET, offset=0, times=1,
                         answer=http_answer(429, "Too Many Requests", {"Retry-After": "1"}))
    waits: list[float] = []
    assert client(relay, waits, []).manifest("retry/b", "v1") is not None
    assert waits == [1.0]
    # a Retry-After past the bound (max_delay 2 s) is not waited for: the error comes at once
    relay.rule = CutRule(pattern=MANIFEST_GET, offset=0, times=1,
                         answer=http_answer(429, "Too Many Requests", {"Retry-After": "3600"}))
    relay.cuts = 0
    waits.clear()
    with pytest.raises(PushError) as err:
        client(relay, waits, []).manifest("retry/b", "v1")
    assert waits == [] and "HTTP 429" in err.value.what and "run again later" in err.value.fix


def test_a_500_every_time_fails_after_the_attempts_and_says_what_failed(relay: Relay) -> None:
    subject(relay, "retry/c")
    relay.rule = CutRule(pattern=MANIFEST_PUT, offset=0, times=None, answer=http_answer(500, "Internal Server Error"))
    waits: list[float] = []
    with pytest.raises(PushError) as err:
        client(relay, waits, []).put_manifest("retry/c", "v2", b'{"schemaVersion":2}', "application/json")
    assert relay.cuts == FAST.attempts and len(waits) == FAST.attempts - 1
    assert "answered HTTP 500 (3 attempts)" in err.value.what
    assert "failed on its side" in err.value.fix and "start the registry" not in err.value.fix  # item 18


def test_a_4xx_is_not_retried(relay: Relay) -> None:
    subject(relay, "retry/d")
    relay.rule = CutRule(pattern=MANIFEST_GET, offset=0, times=None, answer=http_answer(400, "Bad Request"))
    waits: list[float] = []
    with pytest.raises(PushError, match="HTTP 400"):
        client(relay, waits, []).manifest("retry/d", "v1")
    assert relay.cuts == 1 and waits == []


def test_an_upload_reset_once_starts_a_new_upload_and_completes(relay: Relay) -> None:
    relay.rule = CutRule(pattern=BLOB_PUT, offset=0, times=1, answer=b"")
    waits: list[float] = []
    c = client(relay, waits, [])
    data = os.urandom(4096)
    desc = c.push_blob("retry/e", data, "application/octet-stream")
    assert relay.cuts == 1 and len(waits) == 1
    assert relay.count("POST", r"/blobs/uploads/") == 2  # a new upload session, not the failed one resumed
    assert RegistryClient(relay.addr).get_blob("retry/e", desc.digest) == data


def test_a_slow_answer_times_out_once_and_is_asked_again(relay: Relay) -> None:
    subject(relay, "retry/f")
    relay.rule = CutRule(pattern=MANIFEST_GET, offset=0, times=1, delay=1.5)
    waits: list[float] = []
    c = client(relay, waits, [], timeout=0.5)
    c._base()  # the scheme is probed before the fault (the probe's own retry is the same policy)
    assert c.manifest("retry/f", "v1") is not None
    assert relay.cuts == 1 and len(waits) == 1


def test_the_lock_attach_survives_one_500_on_the_referrers_tag(relay: Relay) -> None:
    subject(relay, "retry/g")
    c = client(relay, [], [])
    got = c.manifest("retry/g", "v1")
    assert got is not None
    relay.rule = CutRule(pattern=rb"PUT /v2/\S+/manifests/sha256-", offset=0, times=1,
                         answer=http_answer(500, "Internal Server Error"))
    evidence = attest.Evidence(kind="lock", artifact_type="application/vnd.buildctl.lock+json",
                               media_type="application/json", payload=b'{"lock": 1}')
    done = attest.attach(c, f"{relay.addr}/retry/g", got[1].digest, evidence)
    assert relay.cuts == 1
    found = attest.find(c, f"{relay.addr}/retry/g", got[1].digest, evidence.artifact_type)
    assert [d.digest for d, _ in found] == [done.artifact]


def test_a_refused_connection_is_not_retried_and_does_not_say_cut(relay: Relay) -> None:
    port = relay.addr.rsplit(":", 1)[1]
    relay.close()  # nothing listens there any more
    waits: list[float] = []
    with pytest.raises(UnreachableError) as err:
        RegistryClient(f"127.0.0.1:{port}", retry=FAST, sleep=waits.append).manifest("retry/h", "v1")
    assert waits == [] and "cut" not in err.value.fix
