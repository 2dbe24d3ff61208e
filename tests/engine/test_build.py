"""`buildctl build` of the demo stack against the real engine and the test registry.

Each test builds a copy of pins/demo.yaml in its own project (the test registry instead of
127.0.0.1:5000, a repository of its own, the demo sources by absolute path) and its own cache, from
one lock made per session with `buildctl lock` (pip and apt resolved inside the demo base).
The tests whose subject is the pipeline (resuming, sharing, pulling, the gate) build the demo without its own
apt packages (``light_demo``), which halves a build from nothing here; the whole demo is built by
test_build_every_node_then_nothing, the first BuildKit test, the repro tests and the first nightly.
Images the tests make are removed by name at the end (image_cleanup).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from buildctl import cli
from buildctl.builder import pipeline, smoke
from buildctl.config import Config, load_config
from buildctl.engine.engine import Engine
from buildctl.errors import BuildFailed, SmokeFailed, SourceError
from buildctl.graph.records import RecordStore, state_root
from buildctl.lock import lockfile
from buildctl.services import build, target
from buildctl.services.target import Target
from buildctl.sources.sources import Sources
from tests.engine.noopcheck import check_the_noop
from tests.helpers import unique

PROJECT = Path(__file__).resolve().parents[2]
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")  # reaching PyPI here goes through a TLS proxy
ALL = ["system", "python", "compile-env:fastmath", "wheel:fastmath", "assemble", "entrypoint"]


# The demo's own apt packages (the system node's): the slowest part of a build from nothing here, apt-get
# update and install from Debian's mirror, then the settle of the whiteouts apt leaves (`docker save` / `load`)
APT_SECTION = re.compile(r"(?ms)^apt:\n.*?(?=^downloads:)")


def write_project(root: Path, registry: str, repository: str, *, apt: bool = True) -> Path:
    """A project with a copy of the demo manifest pointing at the test registry; images/ is the checkout's.
    ``apt=False``: without the demo's own apt packages (APT_SECTION), for the tests whose subject is not them;
    its lock is ``demo_lock_light``."""
    (root / "pins").mkdir(parents=True)
    (root / "images").symlink_to(PROJECT / "images")
    (root / "demo").symlink_to(PROJECT / "demo")  # the manifest's repos are relative: ../demo/sources/
    text = (PROJECT / "pins" / "demo.yaml").read_text()
    text = text.replace("127.0.0.1:5000", registry)
    text = re.sub(r"(?m)^  repository: .*$", f"  repository: {repository}", text)
    if not apt:
        text, n = APT_SECTION.subn("", text)
        assert n == 1, "pins/demo.yaml no longer has its apt section before downloads"
    (root / "pins" / "demo.yaml").write_text(text)
    return root


def base_env(monkeypatch: pytest.MonkeyPatch, cache: Path, ca: Path | None = None) -> None:
    monkeypatch.setenv("BUILDCTL_CACHE", str(cache))
    monkeypatch.setenv("BUILDCTL_CONFIG", str(cache.parent / "no-config.toml"))
    monkeypatch.setenv("BUILDCTL_NETWORK_TIMEOUT", "15")
    for var in ("BUILDCTL_REGISTRY", "BUILDCTL_REGISTRY_MIRRORS", "BUILDCTL_GIT_MIRRORS", "BUILDCTL_PIP_INDEX_URL",
                "BUILDCTL_PIP_EXTRA_INDEX_URLS"):
        monkeypatch.delenv(var, raising=False)
    ca = ca or (HOST_CA if HOST_CA.is_file() else None)
    if ca is not None:
        monkeypatch.setenv("BUILDCTL_CA_BUNDLE", str(ca))
    else:
        monkeypatch.delenv("BUILDCTL_CA_BUNDLE", raising=False)


@pytest.fixture(scope="session")
def demo_lock(registry: str, registry_base: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The text of a lock of the demo stack against the test registry (made once with `buildctl lock`).

    Once per run: under pytest-xdist the first worker to need it makes it, under a file lock in the run's
    shared temporary folder, and the other reads it there (both use the same registry, so the same lock)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _lock_demo(registry, tmp_path_factory)
    shared = tmp_path_factory.getbasetemp().parent / f"demo-lock-{registry.replace(':', '-')}.json"
    with open(shared.with_suffix(".flock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not shared.is_file():
            shared.write_text(_lock_demo(registry, tmp_path_factory))
        return shared.read_text()


def _lock_demo(registry: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    root = write_project(tmp_path_factory.mktemp("lockproject"), registry, "buildctl-test/lock")
    with pytest.MonkeyPatch.context() as mp:
        base_env(mp, tmp_path_factory.mktemp("lockcache"))
        assert cli.main(["--project", str(root), "-q", "lock", "demo"]) == 0
    return (root / "pins" / "demo.lock.json").read_text()


@pytest.fixture(scope="session")
def demo_lock_light(demo_lock: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's lock for a project written with ``apt=False``: ``demo_lock`` with no apt pins, which is what
    `buildctl lock` writes for that manifest (the same pins otherwise; checked by hand: `lock` of such a project
    with this lock in place says "unchanged")."""
    path = tmp_path_factory.mktemp("lock-light") / "demo.lock.json"
    path.write_text(demo_lock)

    def no_apt(data: dict[str, Any]) -> None:
        for v in data["variants"].values():
            assert v["apt"], "the demo lock has no apt pins to leave out"
            v["apt"] = {}
    lockfile.edit(path, no_apt)
    return path.read_text()


@dataclass
class Recorder:
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def node(self, name: str, state: str, detail: str = "") -> None:
        self.events.append((name, state, detail))

    def log(self, name: str, line: str) -> None:
        pass


@dataclass
class Demo:
    root: Path
    repository: str
    monkeypatch: pytest.MonkeyPatch
    cleanup: Any
    engines_used: list[Engine] = field(default_factory=list)

    @property
    def manifest(self) -> Path:
        return self.root / "pins" / "demo.yaml"

    @property
    def lock(self) -> Path:
        return self.root / "pins" / "demo.lock.json"

    def config(self) -> Config:
        return load_config(os.environ)

    def target(self, *, skip_smoke: bool = True) -> Target:
        return target.load(self.root, self.config(), "demo", None, skip_smoke=skip_smoke)

    def register(self, t: Target, engines: Sequence[Engine]) -> None:
        for e in engines:
            for n in t.graph.nodes:
                if n.kind != "base":
                    self.cleanup(t.refs[n.name], engine=e)

    def build(self, engines: Sequence[Engine], *, jobs: int = 2, skip_smoke: bool = True,
              gate: pipeline.SmokeGate | None = None) -> pipeline.BuildReport:
        t = self.target(skip_smoke=skip_smoke)
        self.register(t, engines)
        config = self.config()
        return build.build_target(t, engines=engines, config=config,
                                  sources=Sources.from_config(config, base_dir=self.root / "pins"),
                                  progress=Recorder(), project=self.root,
                                  options=pipeline.BuildOptions(jobs=jobs, skip_smoke=skip_smoke), smoke_gate=gate)

    def edit_manifest(self, old: str, new: str) -> None:
        text = self.manifest.read_text()
        assert old in text
        self.manifest.write_text(text.replace(old, new))

    def edit_lock(self, change: Any) -> None:
        """Edit the default variant's lock through lockfile.edit (checked and rehashed, as buildctl writes it)."""
        lockfile.edit(self.lock, lambda data: change(data["variants"]["default"]))

    def drop_prs(self, component: str, manifest_text: str) -> None:
        """``component`` without its PRs, in the manifest (``manifest_text`` removed) and in the lock."""
        self.edit_manifest(manifest_text, "")

        def change(v: dict[str, Any]) -> None:
            c = v["components"][component]
            c["changes"] = []
            c["tree"] = c["base"]  # nothing applied: the tree is the commit
        self.edit_lock(change)


def _demo(lock: str, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image_cleanup: Any, *,
          apt: bool) -> Demo:
    repository = f"buildctl-test/{unique('b')}"
    root = write_project(tmp_path / "project", registry, repository, apt=apt)
    (root / "pins" / "demo.lock.json").write_text(lock)
    base_env(monkeypatch, tmp_path / "cache")
    return Demo(root=root, repository=repository, monkeypatch=monkeypatch, cleanup=image_cleanup)


@pytest.fixture
def demo(demo_lock: str, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image_cleanup: Any) -> Demo:
    """The whole demo stack, its apt packages included."""
    return _demo(demo_lock, registry, tmp_path, monkeypatch, image_cleanup, apt=True)


@pytest.fixture
def light_demo(demo_lock_light: str, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               image_cleanup: Any) -> Demo:
    """The demo stack without its own apt packages (the compile's build dependencies stay): for the tests about
    the pipeline (resuming, sharing, pulling, the gate), which the apt step would only make slower."""
    return _demo(demo_lock_light, registry, tmp_path, monkeypatch, image_cleanup, apt=False)


def outcomes(report: pipeline.BuildReport) -> dict[str, str]:
    return {n.name: n.outcome for n in report.nodes}


# ------------------------------------------------------------------------------------------ tests


HOST_USER = 4242  # a non-root uid: the files of a cache that a non-root user's buildctl wrote


def own_sources_as_a_host_user(demo: Demo) -> None:
    """Export the demo's prepared sources into the cache as the build will find them, owned by a non-root uid,
    as they are when a non-root user runs buildctl against a rootful engine (the compile runs as root)."""
    t = demo.target()
    assert t.vlock is not None
    sources = Sources.from_config(demo.config(), base_dir=t.manifest_path.parent)
    for c in t.manifest.components:
        tree = sources.exported(sources.prepare_component(c, t.vlock.components[c.name]))
        for path in [tree, *tree.rglob("*")]:
            os.lchown(path, HOST_USER, HOST_USER)
        assert tree.stat().st_uid == HOST_USER


def test_build_every_node_then_nothing(demo: Demo, engine: Engine, registry: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # item 6 of issue 12: the compile keeps its +sha whoever owns the source (git's "dubious ownership")
    own_sources_as_a_host_user(demo)
    first = demo.build([engine])
    assert sorted(first.built) == sorted(ALL)
    t = demo.target()
    for name in ALL:
        assert engine.image_exists(t.refs[name]), name
        assert engine.registry_digest(t.refs[name]) is not None, name  # pushed for other builders
    info = engine.inspect_image(first.final)
    assert info.labels["io.buildctl.stack"] == "demo" and info.labels["io.buildctl.node"] == "entrypoint"
    assert info.labels["io.buildctl.key"] == t.graph.node("entrypoint").key
    assert info.labels["io.buildctl.lock-hash"] == t.graph.lock_digest
    assert info.labels["io.buildctl.smoke"] == "skipped"
    lock = json.loads(demo.lock.read_text())["variants"]["default"]
    assert info.labels["io.buildctl.component.fastmath"] == lock["components"]["fastmath"]["tree"]
    assert info.labels["org.opencontainers.image.base.digest"] == lock["base"]["digest"]
    for key in ("source", "revision", "created", "base.name"):
        assert info.labels[f"org.opencontainers.image.{key}"]
    # the image works: the compiled wheel with its PR, the source tree with its PR, the pinned packages
    out = engine.run(first.final, ["python3", "-c",
                                   "import fastmath, six, tomli, importlib.metadata as m;"
                                   "print(fastmath.clamp(5, 0, 3), m.version('fastmath'), six.__version__)"],
                     entrypoint=[], timeout=60)
    assert out.ok, out.stderr
    clamp, version, six = out.stdout.split()
    assert float(clamp) == 3.0 and six == "1.16.0"
    assert version.endswith("+" + lock["components"]["fastmath"]["tree"][:7])  # TE-style version suffix
    printed = engine.run(first.final, ["--print-command"], timeout=60)
    assert printed.ok and "--recompute-granularity selective" in printed.stdout
    # the nodes that only copy files were composed on this host, not built (builder/compose.py)
    logs = demo.config().cache.logs / "demo" / "default"
    for log in ("entrypoint.log", "wheel-fastmath-image.log"):
        assert (logs / log).read_text().startswith("composed on this host"), log
    # who installed what (a dist-info's INSTALLER; the layers say it even where the engine's step cache gave
    # the RUN): images/install.py the runtime pins and the compiled wheel, pip the compile environment's
    # setuptools and wheel (install.py leaves pip and setuptools to pip, and the base has wheel)
    who = ("import importlib.metadata as m, sys; "
           "print(' '.join(m.distribution(n).read_text('INSTALLER').strip() for n in sys.argv[1:]))")
    out = engine.run(first.final, ["python3", "-c", who, "six", "tomli", "fastmath"], entrypoint=[], timeout=60)
    assert out.ok and out.stdout.split() == ["buildctl", "buildctl", "buildctl"], out.stdout + out.stderr
    out = engine.run(t.refs["compile-env:fastmath"], ["python3", "-c", who, "setuptools", "wheel"], timeout=60)
    assert out.ok and out.stdout.split() == ["pip", "pip"], out.stdout + out.stderr
    # the wheel is kept under its key
    wheel_key = t.graph.node("wheel:fastmath").key
    assert [p.name for p in (demo.config().cache.wheels / "fastmath" / wheel_key).iterdir()] == [
        first.wheels["fastmath"].name]

    # what the image is, in the formats other tools read (CycloneDX, in-toto/SLSA, OCI 1.1 referrers)
    check_the_ecosystems_formats(demo, engine, registry, first.final, capsys)

    again = demo.build([engine])
    assert again.built == []
    assert outcomes(again) == {"entrypoint": "cached"}  # one image looked at: nothing below it
    # and through the CLI
    assert cli.main(["--project", str(demo.root), "-q", "build", "demo", "--skip-smoke"]) == 0
    check_the_noop(demo.root, engine, t.refs, capsys)  # and again: the no-op from its memo (services/noop.py)
    # the same build gives what the profiles and the variant override say (one build serves both tests)
    check_profiles_and_the_variant_override(demo, engine, first)
    # item 7 of issue 12: a second checkout elsewhere has the same keys, so it builds nothing
    other = demo.root.parent / "elsewhere" / "checkout"
    shutil.copytree(demo.root, other, symlinks=True)
    moved = target.load(other, demo.config(), "demo", None, skip_smoke=True)
    assert {n.name: n.key for n in moved.graph.nodes} == {n.name: n.key for n in t.graph.nodes}
    assert cli.main(["--project", str(other), "-q", "build", "demo", "--skip-smoke"]) == 0
    assert engine.image_exists(moved.refs["entrypoint"])


FAKE_TORCHRUN = b"""#!/usr/bin/python3
import json, os, sys
print(json.dumps({"args": sys.argv[1:], "domain": os.environ.get("DEMO_DOMAIN_SIZE")}))
"""


def check_profiles_and_the_variant_override(demo: Demo, engine: Engine, first: pipeline.BuildReport) -> None:
    """The launch script of a built image starts the ranks of the profile chosen at run time (default
    chosen with `build --profile`); the variant's env is in the image and its arguments in the command."""
    info = engine.inspect_image(first.final)
    assert info.env["DEMO_DOMAIN_SIZE"] == "4"  # variants.default.entrypoint.env, laid over env
    assert info.labels["buildctl.entrypoint.profile"] == "base"
    fake = {"/usr/local/bin/torchrun": FAKE_TORCHRUN}  # the demo base has no torch: a stand-in that prints argv

    def launch(image: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        out = engine.run(image, [], env=env, files=fake, timeout=60)
        assert out.ok, out.stderr
        return dict(json.loads(out.stdout))

    seen = launch(first.final)
    assert seen["domain"] == "4"
    assert seen["args"][:4] == ["--nproc_per_node", "8", "--nnodes", "1"]
    assert "--heads" not in seen["args"] and seen["args"][-2:] == ["--seq-length", "1024"]
    assert seen["args"][seen["args"].index("--precision") + 1] == "fp16"
    two = launch(first.final, {"BUILDCTL_PROFILE": "two-nodes", "NODE_RANK": "1", "MASTER_ADDR": "node0"})
    assert two["args"][:8] == ["--nproc_per_node", "4", "--nnodes", "2", "--node_rank", "1", "--master_addr", "node0"]
    assert two["args"][two["args"].index("--tensor-parallel") + 1] == "4"

    # `build --profile`: the default baked into the script; only the entrypoint node differs
    t = target.load(demo.root, demo.config(), "demo", None, skip_smoke=True, profile="tiny")
    demo.register(t, [engine])
    assert t.graph.node("assemble").key == demo.target().graph.node("assemble").key
    assert t.graph.node("entrypoint").key != demo.target().graph.node("entrypoint").key
    assert cli.main(["--project", str(demo.root), "-q", "build", "demo", "--skip-smoke", "--profile", "tiny"]) == 0
    tiny = t.refs["entrypoint"]
    assert engine.inspect_image(tiny).labels["buildctl.entrypoint.profile"] == "tiny"
    assert launch(tiny)["args"][:4] == ["--nproc_per_node", "1", "--nnodes", "1"]
    assert launch(tiny, {"BUILDCTL_PROFILE": "base"})["args"][:4] == ["--nproc_per_node", "8", "--nnodes", "1"]


def test_one_component_rebuilds_only_its_nodes(light_demo: Demo, engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    demo = light_demo
    demo.build([engine])
    before = demo.target().graph

    # the compiled component without its PR: its wheel and what installs it, nothing else
    demo.drop_prs("fastmath", "    prs:\n      - {number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}   # adds clamp()\n")
    capsys.readouterr()
    assert cli.main(["--project", str(demo.root), "plan", "demo", "--json"]) == 0
    plan = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert [n for n, p in plan.items() if p["state"] == "missing"] == ["wheel:fastmath", "assemble", "entrypoint"]
    assert plan["wheel:fastmath"]["why"] == [
        f"source.tree: {before.node('wheel:fastmath').spec.source.tree} -> "  # type: ignore[union-attr]
        "2ce4723579053c914fae1dee4bc38f8fd4da5557"]
    assert plan["assemble"]["why"][0].startswith("parent wheel:fastmath changed")

    report = demo.build([engine])
    assert sorted(report.built) == ["assemble", "entrypoint", "wheel:fastmath"]
    out = engine.run(report.final, ["python3", "-c", "import fastmath; print(hasattr(fastmath, 'clamp'))"],
                     entrypoint=[], timeout=60)
    assert out.stdout.strip() == "False"

    # the source-tree component: only assemble and the entrypoint
    demo.drop_prs("demo-trainer",
                  "      - {number: 3, head: a0e8f9b0511cbd794f941565f63c65c62fd8f6ec}   # adds --recompute-granularity\n")
    demo.edit_manifest("    - --recompute-granularity: selective\n", "")  # the flag PR 3 adds
    report = demo.build([engine])
    assert sorted(report.built) == ["assemble", "entrypoint"]


def test_a_failed_node_leaves_no_tag_and_a_rerun_resumes(light_demo: Demo, engine: Engine, registry: str) -> None:
    demo = light_demo
    demo.edit_manifest("command: pip wheel --no-build-isolation --no-deps -w /out .",
                       "command: echo compiling; exit 3")
    with pytest.raises(BuildFailed) as failed:
        demo.build([engine])
    assert "compile of fastmath failed" in failed.value.what and "exit status 3" in failed.value.why
    log = Path(failed.value.what.split("full log: ")[1])
    assert "compiling" in log.read_text()
    t = demo.target()
    # Which of system/python finished before the compile failed depends on timing (they run beside it);
    # what does not: compile-env finished (the compile ran in it), and every tagged node has its record.
    done = {n for n in ("system", "python", "compile-env:fastmath") if engine.image_exists(t.refs[n])}
    assert "compile-env:fastmath" in done
    for name in ("wheel:fastmath", "assemble", "entrypoint"):
        assert not engine.image_exists(t.refs[name]), name
        assert engine.registry_digest(t.refs[name]) is None, name
    assert not (demo.config().cache.wheels / "fastmath" / t.graph.node("wheel:fastmath").key).exists()
    records = RecordStore(state_root(demo.config().cache)).load_all(t.graph)
    assert set(records) == done

    demo.edit_manifest("command: echo compiling; exit 3", "command: pip wheel --no-build-isolation --no-deps -w /out .")
    report = demo.build([engine])
    assert sorted(report.built) == sorted(set(ALL) - done)  # resumed: only what had not completed
    assert outcomes(report)["compile-env:fastmath"] == "cached"


def test_a_pr_that_does_not_apply_fails_before_any_build(demo: Demo, engine: Engine, tmp_path: Path) -> None:
    # A copy of the fastmath repository with PR 99: branched before main's last commit, it rewrites the
    # line that commit changed, so its cherry-pick conflicts.
    repo = tmp_path / "fastmath.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    work = tmp_path / "work"
    subprocess.run([*git, "clone", "-q", str(PROJECT / "demo/sources/fastmath.bundle"), str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "checkout", "-q", "-b", "pr", "HEAD~1"], check=True)
    (work / "fastmath" / "VERSION.txt").write_text("9.9.9\n")
    subprocess.run([*git, "-C", str(work), "commit", "-qam", "conflicting version"], check=True)
    head = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "update-ref", "refs/pull/99/head", head], check=True)
    demo.edit_manifest("repo: ../demo/sources/fastmath.bundle", f"repo: file://{repo}")
    demo.edit_manifest("{number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}", f"{{number: 99, head: {head}}}")

    def pr99(v: dict[str, Any]) -> None:
        c = v["components"]["fastmath"]
        c["repo"] = f"file://{repo}"
        c["changes"] = [{"kind": "pr", "number": 99, "head": head, "mode": "own-commits", "target": "main",
                         "commits": [head], "skipped_merges": [], "empty": []}]
        c["tree"] = "f" * 40  # unknown: it cannot be made
    demo.edit_lock(pr99)
    t = demo.target()
    with pytest.raises(SourceError) as failed:
        demo.build([engine])
    assert "PR #99 does not apply" in failed.value.what
    assert "fastmath/VERSION.txt" in failed.value.why
    for n in t.graph.nodes:
        if n.kind != "base":
            assert not engine.image_exists(t.refs[n.name]), n.name  # nothing was built, not even system
    assert RecordStore(state_root(demo.config().cache)).load_all(t.graph) == {}


def _fake_ca(tmp_path: Path) -> tuple[Path, str]:
    """A CA bundle: this machine's (PyPI goes through its proxy) plus a certificate made here."""
    marker = unique("buildctl-test-ca-")
    key, cert = tmp_path / "ca.key", tmp_path / "ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={marker}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    bundle = tmp_path / "bundle.pem"
    bundle.write_text((HOST_CA.read_text() if HOST_CA.is_file() else "") + cert.read_text())
    body = "".join(cert.read_text().strip().splitlines()[1:-1])
    return bundle, body


def test_the_ca_bundle_is_in_no_layer_and_no_history(light_demo: Demo, engine: Engine, tmp_path: Path) -> None:
    demo = light_demo
    bundle, body = _fake_ca(tmp_path)
    base_env(demo.monkeypatch, tmp_path / "cache-ca", ca=bundle)
    report = demo.build([engine])
    assert report.built  # a real build, through host pip with the bundle
    assert f"--cert {bundle}" in (demo.config().cache.logs / "demo" / "default" / "pip-download.log").read_text()
    needles = [body[i:i + 64].encode() for i in range(0, len(body) - 64, 300)] + [str(bundle).encode(), b"ca.pem"]
    saved = tmp_path / "final.tar"
    engine.save(report.final, saved)
    scanned = 0
    with tarfile.open(saved) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith(".tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for f in layer.getmembers():
                        if f.isfile():
                            content = layer.extractfile(f).read()  # type: ignore[union-attr]
                            assert not any(n in content for n in needles), f"{member.name}:{f.name}"
                            scanned += 1
            else:  # the image config (env, labels, history) and the manifest
                assert not any(n in data for n in needles), member.name
    assert scanned > 1000  # every file of every layer, the base's included
    info = engine.inspect_image(report.final)
    history = json.dumps([h.created_by for h in info.history]) + json.dumps(dict(info.env)) + json.dumps(dict(info.labels))
    assert "ca.pem" not in history and str(bundle) not in history and "PIP_CERT" not in history


def test_the_smoke_gate_guards_the_entrypoint(light_demo: Demo, engine: Engine) -> None:
    demo = light_demo
    calls: list[str] = []

    def failing(e: Engine, image: str, *, log_file: Path) -> str:
        calls.append(image)
        result = e.run(image, ["python3", "-c", "import fastmath.nothing_here"], entrypoint=[], timeout=60)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(result.stderr)
        raise SmokeFailed("smoke: imports failed", why=result.stderr.strip().splitlines()[-1])

    t = demo.target(skip_smoke=False)
    with pytest.raises(SmokeFailed):
        demo.build([engine], skip_smoke=False, gate=failing)
    assert calls == [t.refs["assemble"]]
    assert engine.image_exists(t.refs["assemble"]) and not engine.image_exists(t.refs["entrypoint"])

    # the real gate: the smoke suite's build-host tier in a container of the assembled image
    reports = demo.config().cache.reports / "smoke"
    report = demo.build([engine], skip_smoke=False, gate=smoke.BuildGate(report_dir=reports))
    assert report.built == ["entrypoint"] and report.smoke == "passed"
    assert engine.inspect_image(report.final).labels["io.buildctl.smoke"] == "passed"
    saved = json.loads(next(reports.glob("*.build.json")).read_text())
    assert {c["name"]: c["status"] for c in saved["report"]["checks"]}["imports"] == "pass"
    assert "build tier passed" in (demo.config().cache.logs / "demo" / "default" / "smoke.log").read_text()
    # skipping the gate is another image: it does not replace the gated one
    skipped = demo.build([engine], skip_smoke=True)
    assert skipped.final != report.final and skipped.built == ["entrypoint"]


def test_a_second_engine_pulls_what_the_first_built(light_demo: Demo, engine: Engine, second_engine: Engine) -> None:
    demo = light_demo
    first = demo.build([engine])
    assert "wheel:fastmath" in first.built

    # the second engine, with its own empty cache: the final image is in the registry, nothing to build
    base_env(demo.monkeypatch, demo.root.parent / "cache-second")
    report = demo.build([second_engine])
    assert report.built == [] and outcomes(report) == {"entrypoint": "pulled"}
    assert second_engine.image_exists(report.final)

    # change the source tree: the second engine builds assemble + entrypoint and takes the compiled
    # wheel from its image in the registry instead of compiling it
    demo.drop_prs("demo-trainer",
                  "      - {number: 3, head: a0e8f9b0511cbd794f941565f63c65c62fd8f6ec}   # adds --recompute-granularity\n")
    demo.edit_manifest("    - --recompute-granularity: selective\n", "")  # the flag PR 3 adds
    base_env(demo.monkeypatch, demo.root.parent / "cache-second-2")
    report = demo.build([second_engine])
    assert sorted(report.built) == ["assemble", "entrypoint"]
    assert outcomes(report)["wheel:fastmath"] == "pulled" and outcomes(report)["python"] == "pulled"
    assert "compile-env:fastmath" not in outcomes(report)  # not even its compile environment
    out = second_engine.run(report.final, ["python3", "-c", "import fastmath; print(fastmath.clamp(9, 0, 1))"],
                            entrypoint=[], timeout=60)
    assert float(out.stdout) == 1.0


def test_two_engines_share_one_build(light_demo: Demo, engine: Engine, second_engine: Engine) -> None:
    demo = light_demo
    report = demo.build([engine, second_engine], jobs=4)
    assert sorted(report.built) == sorted(ALL)
    by = {n.name: n.engine for n in report.nodes if n.outcome == "built"}
    assert len(report.built) == len(set(report.built))  # each node built once, on one engine
    assert set(by.values()) == {engine.name, second_engine.name}  # both worked
    assert engine.image_exists(report.final)  # the user's engine has the result


def test_dry_run_writes_dockerfiles(demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "review"
    assert cli.main(["--project", str(demo.root), "build", "demo", "--dry-run", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "system.Dockerfile" in names and "wheel-fastmath.sh" in names and "graph.json" in names
    assert (out / "system.Dockerfile").read_text().startswith("# system:")
    # item 8 of issue 12: every text file of a context is written out, the launch script included
    script = out / "entrypoint.context" / "rootfs" / "usr" / "local" / "bin" / "buildctl-launch"
    assert script.read_text().startswith("#!/usr/bin/env bash\n") and script.stat().st_mode & 0o777 == 0o755
    assert "in entrypoint.context/rootfs/usr/local/bin/buildctl-launch" in (out / "entrypoint.context.txt").read_text()
    # issue 21: --dry-run is the plan plus the rendered files; its plan is `buildctl plan`'s
    dry = json.loads((out / "plan.json").read_text())
    capsys.readouterr()
    assert cli.main(["--project", str(demo.root), "plan", "demo", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(n["name"], n["action"], n["publish"]) for n in dry["nodes"]] == [
        (n["name"], n["action"], n["publish"]) for n in shown["nodes"]]
    assert dry["to_build"] == shown["to_build"]
    shutil.rmtree(out)


# Interrupts (SIGINT, SIGTERM, SIGKILL at ten moments of a build) are tested in test_interrupts.py.


def check_the_ecosystems_formats(demo: Demo, engine: Engine, registry: str, final: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The built demo image ``final``: its CycloneDX BOM validates against the 1.6 schema; its provenance
    names every locked input; `push --attest provenance` attaches the statement, read back through the
    referrers tag. (Called by the test that builds the demo: a build of its own would double its time.)"""
    from buildctl.ship import sbom
    from tests.helpers import unnamed_lock_values

    image = demo.target().refs["entrypoint"]
    lock = json.loads(demo.lock.read_text())["variants"]["default"]
    capsys.readouterr()

    assert cli.main(["--project", str(demo.root), "bom", final, "--format", "cyclonedx"]) == 0
    text = capsys.readouterr().out
    sbom.validate(text)
    doc = json.loads(text)
    purls = sbom.components_by_purl(text)
    assert "pkg:pypi/six@1.16.0" in purls and "pkg:pypi/tomli@2.0.1" in purls
    assert f"pkg:deb/debian/jq@{quote(lock['apt']['jq'], safe='')}?arch=amd64&distro=debian-12" in purls
    [base] = [c for c in doc["components"] if c["bom-ref"] == "base"]
    assert base["version"] == lock["base"]["digest"]
    [fm] = [c for c in doc["components"] if c["bom-ref"] == "component:fastmath"]
    fastmath = lock["components"]["fastmath"]
    assert fm["version"] == fastmath["tree"]
    applied = {sha for ch in fastmath["changes"] if ch["kind"] == "pr" for sha in (ch["head"], *ch["commits"])}
    assert applied and {c["uid"] for c in fm["pedigree"]["commits"]} == {fastmath["base"], fastmath["tree"], *applied}

    digest = engine.registry_digest(image)  # the build pushed every node for other builders
    assert digest is not None
    assert cli.main(["--project", str(demo.root), "provenance", image]) == 0
    stmt = json.loads(capsys.readouterr().out)
    assert stmt["subject"] == [{"name": image.rsplit(":", 1)[0], "digest": {"sha256": digest.removeprefix("sha256:")}}]
    deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert unnamed_lock_values(lock, deps) == []  # every locked input is named

    assert cli.main(["--project", str(demo.root), "-q", "push", "demo", "--attest", "provenance", "--json"]) == 0
    pushed = json.loads(capsys.readouterr().out)
    public = f"{demo.repository}:default-{demo.target(skip_smoke=True).graph.final.key[:16]}"
    final_digest = pushed["digests"][f"{registry}/{public}"]
    [attached] = pushed["attached"]
    assert (attached["subject"], attached["referrers_tag"]) == (final_digest, final_digest.replace(":", "-"))

    def get(path: str, accept: str) -> bytes:
        req = urllib.request.Request(f"http://{registry}/v2/{demo.repository}/{path}", headers={"Accept": accept})
        with urllib.request.urlopen(req, timeout=10) as r:
            return bytes(r.read())

    index = json.loads(get(f"manifests/{final_digest.replace(':', '-')}", "application/vnd.oci.image.index.v1+json"))
    [entry] = index["manifests"]
    assert entry["digest"] == attached["artifact"] and entry["artifactType"] == "application/vnd.in-toto+json"
    artifact = json.loads(get(f"manifests/{entry['digest']}", "application/vnd.oci.image.manifest.v1+json"))
    assert artifact["subject"]["digest"] == final_digest
    statement = json.loads(get(f"blobs/{artifact['layers'][0]['digest']}", "*/*"))
    assert statement["subject"] == [{"name": f"{registry}/{demo.repository}",
                                     "digest": {"sha256": final_digest.removeprefix("sha256:")}}]
    assert statement["predicate"]["buildDefinition"]["resolvedDependencies"] == deps
