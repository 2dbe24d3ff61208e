"""Builders by platform: the configuration's forms and errors, routing a variant to the builders of its platform
(each builder asked, through a fake BuilderProbe), the refusal of what no native builder may build, the plan's builder
per node and a nightly over a stack of two platforms. The emulated build itself: tests/engine/test_emulated_builder.py."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from buildctl.config import Config, load_config
from buildctl.errors import BuildctlError, EngineError, ManifestError
from buildctl.graph import plan, routing
from buildctl.services import nightly, wiring

GRAPHSTACK = Path(__file__).parent / "data" / "graphstack.yaml"  # gpu13: linux/arm64, gpu12: linux/amd64


def _config(tmp_path: Path, text: str = "", **env: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path), **env})


# ----------------------------------------------------------------------------------------- configuration

TABLE = '[builders]\n"linux/amd64" = ["local", "tcp://10.0.0.5:2376"]\n"linux/arm64" = ["ssh://ci@grace-1"]\n'


def test_builders_by_platform_from_a_table_or_the_environment(tmp_path: Path) -> None:
    c = _config(tmp_path, TABLE)
    assert c.builders_by_platform == {"linux/amd64": ("local", "tcp://10.0.0.5:2376"),
                                      "linux/arm64": ("ssh://ci@grace-1",)}
    assert c.builders == ()
    inline = _config(tmp_path, 'builders = { "linux/arm64" = ["ssh://ci@grace-1"] }\n')
    assert inline.builders_by_platform == {"linux/arm64": ("ssh://ci@grace-1",)}
    env = _config(tmp_path, BUILDCTL_BUILDERS="linux/amd64=local,tcp://10.0.0.5:2376  linux/arm64=ssh://ci@grace-1")
    assert env.builders_by_platform == c.builders_by_platform
    # the flat list works as before: its builders serve the platform they answer
    flat = _config(tmp_path, 'builders = ["local", "tcp://10.0.0.5:2376"]\n')
    assert flat.builders == ("local", "tcp://10.0.0.5:2376") and flat.builders_by_platform == {}
    assert _config(tmp_path, BUILDCTL_BUILDERS="local, tcp://h:1").builders == ("local", "tcp://h:1")
    # the table makes buildkit the default backend, as the flat list does, and lists every builder
    chosen = wiring.choose_builders(c)
    assert chosen.backend == "buildkit" and chosen.by_platform == c.builders_by_platform
    assert chosen.endpoints == (None, "tcp://10.0.0.5:2376", "ssh://ci@grace-1")
    assert wiring.fleet(chosen).by_platform == c.builders_by_platform
    # flags name builders of no platform: they serve the platform they answer
    flagged = wiring.fleet(wiring.choose_builders(c, builders=["tcp://127.0.0.1:2375"]), emulate=True)
    assert flagged.any_platform == ("tcp://127.0.0.1:2375",) and flagged.by_platform == {} and flagged.emulate


@pytest.mark.parametrize(("text", "line", "key", "says"), [
    ('[builders]\n"linux/amd64" = ["local"]\n"linux/riscv64" = ["ssh://h"]\n', 3, "builders.linux/riscv64",
     "'linux/riscv64' is not a platform (linux/amd64 or linux/arm64)"),
    ('[builders]\n"linux/arm64" = ["ssh://h", "tcp://h"]\n', 2, "builders.linux/arm64", "must name a port"),
    ('[builders]\n"linux/arm64" = "ssh://h"\n', 2, "builders.linux/arm64", "expected a list of builder endpoints"),
    ('[builders]\n"linux/amd64" = ["local"]\n\n"linux/arm64" = ["local"]\n', 4, "builders.linux/arm64",
     "builder 'local' is listed under linux/amd64 and linux/arm64: a builder has one platform"),
    ('registry = "r:5000"\n[builders]\n"linux/arm64" = ["ssh://-oProxyCommand=x"]\n', 3, "builders.linux/arm64",
     "no valid host"),
])
def test_a_bad_builders_table_names_the_file_line_and_key(tmp_path: Path, text: str, line: int, key: str,
                                                          says: str) -> None:
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, text)
    loc = failed.value.location
    assert (loc.file, loc.line, loc.key) == (str(tmp_path / "config.toml"), line, key)
    assert says in failed.value.what


@pytest.mark.parametrize(("value", "key", "says"), [
    ("linux/amd64=local ssh://ci@grace-1", "builders", "'ssh://ci@grace-1' has no platform"),
    ("linux/amd64=local linux/amd64=tcp://h:1", "builders.linux/amd64", "given twice"),
    ("linux/arm=ssh://h", "builders.linux/arm", "is not a platform"),
    ("linux/arm64=ssh://h,unix://no", "builders.linux/arm64", "absolute, normalised socket path"),
])
def test_a_bad_builders_variable_names_it(tmp_path: Path, value: str, key: str, says: str) -> None:
    with pytest.raises(ManifestError) as failed:
        _config(tmp_path, BUILDCTL_BUILDERS=value)
    assert (failed.value.location.file, failed.value.location.key) == ("$BUILDCTL_BUILDERS", key)
    assert says in failed.value.what


# ------------------------------------------------------------------------------------------------- routing


@dataclass
class FakeProbe:
    """Builders as their engines would answer: endpoint -> Os/Arch, and which hosts emulate what."""

    answers: dict[str, str]
    emulating: dict[str, bool | None] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def platform(self, endpoint: str) -> str:
        self.asked.append(endpoint)
        if endpoint not in self.answers:
            raise EngineError(f"no Docker engine answers at {endpoint}")
        return self.answers[endpoint]

    def emulates(self, endpoint: str, platform: str) -> bool | None:
        return self.emulating.get(endpoint, False)


FLEET = routing.Fleet(by_platform={"linux/amd64": ("local",), "linux/arm64": ("ssh://ci@grace-1",)},
                      source="[builders] in /etc/buildctl.toml")


def test_the_answer_is_normalised() -> None:
    assert routing.normalise("linux/x86_64") == "linux/amd64"
    assert routing.normalise("Linux/aarch64") == "linux/arm64"
    assert routing.normalise("linux/arm64") == "linux/arm64"
    assert routing.normalise("linux/ppc64le") == "linux/ppc64le"
    assert routing.qemu_name("linux/arm64") == "qemu-aarch64"


def test_each_platform_goes_to_its_builders_each_asked() -> None:
    probe = FakeProbe({"local": "linux/amd64", "ssh://ci@grace-1": "linux/aarch64"})
    arm = routing.route("linux/arm64", FLEET, probe)
    amd = routing.route("linux/amd64", FLEET, probe)
    assert [(b.endpoint, b.answered, b.emulated) for b in arm.builders] == [("ssh://ci@grace-1", "linux/arm64", False)]
    assert [b.endpoint for b in amd.builders] == ["local"]
    assert arm.missing == amd.missing == "" and not arm.emulated
    assert probe.asked == ["ssh://ci@grace-1", "local"]  # only the builders of the platform routed


def test_a_builder_that_answers_another_platform_than_configured_is_an_error_naming_both() -> None:
    probe = FakeProbe({"local": "linux/amd64", "ssh://ci@grace-1": "linux/amd64"})
    with pytest.raises(EngineError) as failed:
        routing.route("linux/arm64", FLEET, probe)
    assert failed.value.what == ("builder ssh://ci@grace-1 is configured for linux/arm64 ([builders] in "
                                 "/etc/buildctl.toml) and answered linux/amd64")
    assert "asked of its engine, never taken from the configuration" in failed.value.why
    assert 'list it under "linux/amd64" instead' in failed.value.fix and "--emulate" in failed.value.fix


def test_builders_of_no_platform_serve_the_one_they_answer() -> None:
    fleet = routing.Fleet(any_platform=("local", "tcp://127.0.0.1:2375"), source="--builder")
    probe = FakeProbe({"local": "linux/amd64", "tcp://127.0.0.1:2375": "linux/arm64"})
    assert [b.endpoint for b in routing.route("linux/arm64", fleet, probe).builders] == ["tcp://127.0.0.1:2375"]
    r = routing.route("linux/amd64", fleet, probe)
    assert [b.endpoint for b in r.builders] == ["local"]
    assert r.notes == ("builder tcp://127.0.0.1:2375 is linux/arm64: not used for linux/amd64",)


def test_no_native_builder_says_which_is_missing_and_how_to_configure_one() -> None:
    fleet = routing.Fleet(any_platform=("local",))
    r = routing.route("linux/arm64", fleet, FakeProbe({"local": "linux/amd64"}))
    assert r.builders == () and r.label() == "none"
    assert r.missing == "no native linux/arm64 builder (local is linux/amd64)"
    assert r.fix == ('configure one: [builders] "linux/arm64" = ["ssh://USER@HOST"] in the configuration file '
                     '(or BUILDCTL_BUILDERS="linux/arm64=ssh://USER@HOST"), or name one with --builder')


def test_a_builder_that_does_not_answer_is_left_out_saying_so() -> None:
    fleet = routing.Fleet(by_platform={"linux/amd64": ("tcp://10.0.0.9:2376", "local")})
    r = routing.route("linux/amd64", fleet, FakeProbe({"local": "linux/amd64"}))
    assert [b.endpoint for b in r.builders] == ["local"]
    assert r.notes == ("builder tcp://10.0.0.9:2376 did not answer (no Docker engine answers at "
                       "tcp://10.0.0.9:2376): not used",)
    down = routing.route("linux/arm64", routing.Fleet(by_platform={"linux/arm64": ("ssh://ci@grace-1",)}),
                         FakeProbe({}))
    assert down.builders == () and down.missing == "no native linux/arm64 builder (ssh://ci@grace-1 did not answer)"
    assert down.fix.startswith("check that ssh://ci@grace-1 answers (the engine's version), or configure one: ")


def test_emulation_only_on_request_and_only_where_the_host_has_a_handler() -> None:
    declared = routing.Fleet(by_platform={"linux/arm64": ("local",)}, emulate=True)
    r = routing.route("linux/arm64", declared, FakeProbe({"local": "linux/amd64"}, {"local": True}))
    assert r.emulated and r.label() == "local (emulated on linux/amd64)"
    assert r.missing == "no native linux/arm64 builder (local is linux/amd64)"
    with pytest.raises(EngineError) as failed:  # declared for arm64, no handler: the answer is a mismatch still
        routing.route("linux/arm64", declared, FakeProbe({"local": "linux/amd64"}, {"local": False}))
    assert "has no qemu-aarch64 handler registered with binfmt_misc" in failed.value.why
    # with --emulate, a builder of another platform whose host emulates this one stands in
    r = routing.route("linux/arm64", routing.Fleet(by_platform={"linux/amd64": ("local",)}, emulate=True),
                      FakeProbe({"local": "linux/amd64"}, {"local": True}))
    assert [(b.endpoint, b.emulated) for b in r.builders] == [("local", True)]
    # without --emulate it does not, and a host without a handler is said with --emulate
    assert routing.route("linux/arm64", routing.Fleet(by_platform={"linux/amd64": ("local",)}),
                         FakeProbe({"local": "linux/amd64"}, {"local": True})).builders == ()
    r = routing.route("linux/arm64", routing.Fleet(any_platform=("local",), emulate=True),
                      FakeProbe({"local": "linux/amd64"}, {"local": False}))
    assert r.builders == () and any("has no qemu-aarch64 handler" in n for n in r.notes)
    # a native builder wins over an emulated one
    both = routing.Fleet(any_platform=("local", "ssh://g"), emulate=True)
    r = routing.route("linux/arm64", both, FakeProbe({"local": "linux/amd64", "ssh://g": "linux/arm64"},
                                                     {"local": True}))
    assert [b.endpoint for b in r.builders] == ["ssh://g"] and not r.emulated


def test_what_is_refused_and_what_is_not() -> None:
    none = routing.route("linux/arm64", routing.Fleet(any_platform=("local",)), FakeProbe({"local": "linux/amd64"}))
    what, fix = routing.refusal(none, [("system", "system"), ("wheel:te", "wheel")]) or ("", "")
    assert what == "2 node(s) to build (system, wheel:te): no native linux/arm64 builder (local is linux/amd64)"
    assert fix.startswith('configure one: [builders] "linux/arm64"') and "NVIDIA/Megatron-LM#7492" in fix
    assert "--emulate" not in fix  # a compile is among them: emulation would not do
    _what, fix = routing.refusal(none, [("system", "system")]) or ("", "")
    assert "or pass --emulate to build these nodes (no compile among them) under QEMU" in fix
    assert routing.refusal(none, []) is None  # nothing to build: pulls and what is there are fine
    emulated = routing.route("linux/arm64", routing.Fleet(any_platform=("local",), emulate=True),
                             FakeProbe({"local": "linux/amd64"}, {"local": True}))
    assert routing.refusal(emulated, [("system", "system"), ("python", "python")]) is None
    what, _fix = routing.refusal(emulated, [("system", "system"), ("wheel:te", "wheel")]) or ("", "")
    assert what.startswith("wheel:te would compile under QEMU on local (emulated on linux/amd64): refused")
    native = routing.route("linux/amd64", routing.Fleet(any_platform=("local",)), FakeProbe({"local": "linux/amd64"}))
    assert routing.refusal(native, [("wheel:te", "wheel")]) is None


# ---------------------------------------------------------------------------------------------- the plan


@dataclass
class Engine:
    arch: str = "linux/amd64"

    def image_exists(self, ref: str) -> bool:
        return False

    def registry_digest(self, ref: str) -> str | None:
        return None

    def platform(self) -> str:
        return self.arch


def _plan(gs: Any, variant: str, route: routing.Route) -> plan.Plan:
    m = gs.load()
    g = gs.make(m, gs.lock_for(m, variant), variant)
    refs = plan.refs_for(g, registry="r.example:5000", repository="t/g", base_ref="r.example/base@sha256:" + "a" * 64)
    return plan.make(g, refs=refs, engine=Engine(), records={}, registry="r.example:5000", route=route)


def test_the_plan_names_the_builder_of_every_node(gs: Any) -> None:
    probe = FakeProbe({"local": "linux/amd64", "ssh://ci@grace-1": "linux/arm64"})
    p = _plan(gs, "gpu13", routing.route("linux/arm64", FLEET, probe))
    assert p.refused is None
    assert {n.builder for n in p.nodes} == {"ssh://ci@grace-1"}  # nothing is present: every node pulled or built
    j = p.to_json()
    assert j["route"] == {"platform": "linux/arm64", "emulated": False, "missing": "",
                          "builders": [{"endpoint": "ssh://ci@grace-1", "answered": "linux/arm64", "emulated": False}]}
    assert {n["builder"] for n in j["nodes"]} == {"ssh://ci@grace-1"} and j["refused"] is None


def test_the_plan_refuses_compiles_without_a_native_builder(gs: Any) -> None:
    r = routing.route("linux/arm64", routing.Fleet(any_platform=("local",), emulate=True),
                      FakeProbe({"local": "linux/amd64"}, {"local": True}))
    p = _plan(gs, "gpu13", r)
    assert p.refused is not None and p.refused[0].startswith("wheel:engine, wheel:kernels would compile under QEMU")
    assert p.node("wheel:engine").builder == "refused: compile under emulation"
    assert p.node("system").builder == "local (emulated on linux/amd64)"
    assert any(n.startswith("--emulate: linux/arm64 nodes run under QEMU on local") for n in p.notes)
    assert p.to_json()["refused"]["what"] == p.refused[0]
    from buildctl.builder import pipeline
    with pytest.raises(EngineError) as failed:  # the build stops on it before anything starts
        pipeline.executed(p)
    assert failed.value.what.startswith("cannot build graphstack/gpu13 (linux/arm64): wheel:engine, wheel:kernels")
    none = _plan(gs, "gpu13", routing.route("linux/arm64", routing.Fleet(any_platform=("local",)),
                                            FakeProbe({"local": "linux/amd64"})))
    assert {none.node(n).builder for n in none.to_build} == {"refused: no linux/arm64 builder"}
    assert none.node("base").builder == "no linux/arm64 builder"  # pulled into the engine asked, built on nothing


# --------------------------------------------------------------------------------------------- the nightly


def test_a_nightly_over_two_platforms_sends_each_variant_to_its_builders(tmp_path: Path) -> None:
    (tmp_path / "pins").mkdir()
    shutil.copy(GRAPHSTACK, tmp_path / "pins" / "graphstack.yaml")
    todo = nightly.targets(tmp_path / "pins", ["graphstack"], None)
    assert [(s, v) for s, v, _d in todo] == [("graphstack", "gpu13"), ("graphstack", "gpu12")]
    probe = FakeProbe({"local": "linux/amd64", "ssh://ci@grace-1": "linux/arm64"})
    routes = nightly.routes(tmp_path / "pins", todo, FLEET, probe)
    arm, amd = routes[("graphstack", "gpu13")], routes[("graphstack", "gpu12")]
    assert isinstance(arm, routing.Route) and isinstance(amd, routing.Route)
    assert (arm.platform, [b.endpoint for b in arm.builders]) == ("linux/arm64", ["ssh://ci@grace-1"])
    assert (amd.platform, [b.endpoint for b in amd.builders]) == ("linux/amd64", ["local"])
    assert sorted(probe.asked) == ["local", "ssh://ci@grace-1"]  # each builder asked once for the night
    # a builder that answers another platform fails its variant's build alone
    wrong = FakeProbe({"local": "linux/amd64", "ssh://ci@grace-1": "linux/amd64"})
    routes = nightly.routes(tmp_path / "pins", todo, FLEET, wrong)
    assert isinstance(routes[("graphstack", "gpu13")], BuildctlError)
    assert isinstance(routes[("graphstack", "gpu12")], routing.Route)
