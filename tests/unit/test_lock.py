"""lock.resolve / lock_stack / check and the `buildctl lock` command, with fake resolvers (data only)."""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from buildctl.commands import lock as cmd_lock
from buildctl.config import CacheLayout, Config
from buildctl.errors import LockDrift, LockError, SourceError, UnreachableError
from buildctl.lock.lock import check, lock_stack, resolve
from buildctl.lock.lockfile import DraggedCommit, LockedChange, LockedPatch, LockedPr, PrMode
from buildctl.lock.resolvers import Applied, PipInstall, ProbeRequest, ProbeResult, Resolvers
from buildctl.manifest import pins
from buildctl.ui import UI

SHA_TE = "d2945c6a571e3978677614d1fe08779966a5a4ef"
PR_2146 = "abf4722f06885c583199cd522f325f242df0f3b3"
PR_2150 = "7e48668814ab7fa47c76e8d0d0bd37af35ed94c0"
BRANCH_MAIN = "1111111111111111111111111111111111111111"
TREE = "2222222222222222222222222222222222222222"
SUB = {"3rdparty/cutlass": "57e3cfb47a2d9e0d46eb6335c3dc411498efa198"}
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
YQ_SHA = "c" * 64
FIXED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

MANIFEST = """\
schema: 1
stack: demo
description: test stack
base:
  alias: demo-base
variants:
  cuda13:
    image: nvcr.io/nvidia/pytorch:25.09-py3
    platform: linux/amd64
    cuda: "13"
    python: "3.11"
  cuda12:
    image: nvcr.io/nvidia/pytorch:25.06-py3
    platform: linux/amd64
    cuda: "12"
    python: "3.11"
apt:
  packages:
    - jq=1.6*
    - curl
cudnn:
  package: libcudnn9-cuda-13
  version: 9.14.0.64
downloads:
  yq:
    dest: /usr/local/bin/yq
    mode: "0755"
    urls:
      linux/amd64: {url: "https://example.invalid/yq_amd64", sha256: compute}
pip:
  constraint: keep
  requirements:
    - black==24.4.2
    - pyyaml
protect:
  packages: ["torch", "nvidia-*"]
components:
  te:
    repo: https://github.com/NVIDIA/TransformerEngine.git
    commit: d2945c6
    branch: main
    prs: [2146, {number: 2150, head: 7e48668}]
    patches:
      - {file: fix.patch, sha256: PATCH_SHA}
    build:
      requires: [nvidia-mathdx==25.1.1]
      apt: [cmake]
"""
PATCH = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


# ------------------------------------------------------------------------------------------ fakes


@dataclass
class FakeRegistry:
    digests: dict[str, str | None]
    unreachable: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def registry_digest(self, ref: str) -> str | None:
        self.asked.append(ref)
        if ref.split("/")[0] in self.unreachable:
            raise UnreachableError(f"registry {ref.split('/')[0]} cannot be reached (looking up {ref})",
                                   why="dial tcp: lookup nvcr.io: no such host")
        return self.digests.get(ref)


@dataclass
class FakeGit:
    shas: dict[str, str] = field(default_factory=lambda: {"d2945c6": SHA_TE})
    branches: dict[str, str] = field(default_factory=lambda: {"main": BRANCH_MAIN})
    prs: dict[int, str] = field(default_factory=lambda: {2146: PR_2146, 2150: PR_2150})
    trees: list[tuple[str, tuple[tuple[int, str], ...], tuple[str, ...]]] = field(default_factory=list)

    def resolve_commit(self, repo: str, commit: str, *, branch: str | None = None) -> str:
        if commit not in self.shas:
            raise SourceError(f"{commit} is ambiguous in {repo}", why="candidates: d2945c6aaa..., d2945c6bbb...")
        assert branch == "main"
        return self.shas[commit]

    def branch_head(self, repo: str, branch: str) -> str:
        return self.branches[branch]

    def pr_head(self, repo: str, number: int) -> str:
        return self.prs[number]

    def pr_change(self, repo: str, base: str, number: int, head: str, *, target: str = "main",
                  mode: PrMode = "own-commits") -> tuple[LockedPr, tuple[DraggedCommit, ...]]:
        own = (f"{number:04d}" + "a" * 36, f"{number:04d}" + "b" * 36)
        return LockedPr(number=number, head=head, mode=mode, target=target, commits=own), ()

    def apply(self, repo: str, commit: str, changes: Sequence[LockedChange], patch_paths: Mapping[str, Path]
              ) -> Applied:
        assert all(f.read_bytes() == PATCH for f in patch_paths.values())
        assert all(c.sha256 == hashlib.sha256(PATCH).hexdigest() for c in changes if isinstance(c, LockedPatch))
        self.trees.append((commit, tuple((c.number, c.head) for c in changes if isinstance(c, LockedPr)),
                           tuple(c.file for c in changes if isinstance(c, LockedPatch))))
        return Applied(tree=TREE, gitlinks=SUB)


@dataclass
class FakeFetch:
    shas: dict[str, str] = field(default_factory=lambda: {"https://example.invalid/yq_amd64": YQ_SHA})

    def sha256(self, url: str) -> str:
        if url not in self.shas:
            raise UnreachableError(f"cannot reach {url}")
        return self.shas[url]

    def content(self, url: str) -> bytes:
        raise AssertionError("no keyrings in this manifest")


@dataclass
class FakeIndex:
    hashes: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=lambda: {
        ("black", "24.4.2"): ("sha256:" + "1" * 64, "sha256:" + "2" * 64),
        ("click", "8.1.7"): ("sha256:" + "3" * 64,),
        ("nvidia-mathdx", "25.1.1"): ("sha256:" + "4" * 64,),
    })

    def file_hashes(self, name: str, version: str, tags: Sequence[str]) -> tuple[str, ...]:
        assert tags == ("cp311-cp311-manylinux_2_36_x86_64", "py3-none-any")
        return self.hashes.get((name, version), ())


def probe_result(**over: object) -> ProbeResult:
    base = ProbeResult(
        python="3.11.2",
        tags=("cp311-cp311-manylinux_2_36_x86_64", "py3-none-any"),
        installed={"pyyaml": "6.0", "torch": "2.2.0", "pip": "23.0.1"},
        installed_after_remove={"pyyaml": "6.0", "torch": "2.2.0", "pip": "23.0.1"},
        pip=(PipInstall(name="black", version="24.4.2", sha256="1" * 64, requested=True),
             PipInstall(name="Click", version="8.1.7")),
        build_pip={"te": (PipInstall(name="nvidia-mathdx", version="25.1.1", requested=True),)},
        apt={"jq": ("1.6-2.1", "1.6-2.1+deb12u1", "1.7.1-1"), "curl": ("7.88.1-10+deb12u5", "7.88.1-10"),
             "libcudnn9-cuda-13": ("9.13.0.50-1", "9.14.0.64-1"), "cmake": ("3.25.1-1",)},
    )
    return replace(base, **over)  # type: ignore[arg-type]


@dataclass
class FakeInBase:
    result: ProbeResult = field(default_factory=probe_result)
    requests: list[tuple[str, str, ProbeRequest]] = field(default_factory=list)

    def probe(self, *, image: str, platform: str, request: ProbeRequest) -> ProbeResult:
        self.requests.append((image, platform, request))
        return self.result


def resolvers(**over: object) -> Resolvers:
    parts: dict[str, object] = {
        "registry": FakeRegistry({"nvcr.io/nvidia/pytorch:25.09-py3": DIGEST_A,
                                  "nvcr.io/nvidia/pytorch:25.06-py3": DIGEST_B}),
        "git": FakeGit(), "in_base": FakeInBase(), "index": FakeIndex(), "fetch": FakeFetch(),
    }
    parts.update(over)
    return Resolvers(**parts)  # type: ignore[arg-type]


def config(tmp_path: Path, **over: object) -> Config:
    return Config(path=None, cache=CacheLayout(root=tmp_path / "cache"), **over)  # type: ignore[arg-type]


def write_manifest(tmp_path: Path, text: str = MANIFEST) -> Path:
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir(exist_ok=True)
    (pins_dir / "fix.patch").write_bytes(PATCH)
    path = pins_dir / "demo.yaml"
    path.write_text(text.replace("PATCH_SHA", hashlib.sha256(PATCH).hexdigest()))
    return path


def now() -> datetime:
    return FIXED


# ------------------------------------------------------------------------------------------ resolve


def test_resolve_pins_every_floating_value(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    r = resolvers()
    v = resolve(m, m.variant("cuda13"), r, config(tmp_path), now=now)

    assert v.base is not None
    assert (v.base.ref, v.base.digest, v.base.platform) == ("nvcr.io/nvidia/pytorch:25.09-py3", DIGEST_A, "linux/amd64")
    te = v.components["te"]
    assert te.commit == SHA_TE
    assert te.branch_head == BRANCH_MAIN
    assert dict(te.prs) == {"2146": PR_2146, "2150": PR_2150}
    assert dict(te.patches) == {"fix.patch": hashlib.sha256(PATCH).hexdigest()}
    assert dict(te.submodules) == SUB
    assert te.tree == TREE
    assert r.git.trees == [(SHA_TE, ((2146, PR_2146), (2150, PR_2150)), ("fix.patch",))]  # type: ignore[attr-defined]
    assert v.downloads["yq"].sha256 == YQ_SHA and v.downloads["yq"].computed
    assert [(p.name, p.version, p.in_base, len(p.hashes)) for p in v.pip] == [
        ("black", "24.4.2", False, 2), ("click", "8.1.7", False, 1), ("pyyaml", "6.0", True, 0)]
    assert [(p.name, p.version) for p in v.build_pip["te"]] == [("nvidia-mathdx", "25.1.1")]
    # jq=1.6*: the highest 1.6 (a Debian security update sorts after the plain revision)
    assert dict(v.apt) == {"jq": "1.6-2.1+deb12u1", "curl": "7.88.1-10+deb12u5", "libcudnn9-cuda-13": "9.14.0.64-1"}
    assert dict(v.build_apt) == {"te": {"cmake": "3.25.1-1"}}
    assert v.resolved_at == "2025-01-02T03:04:05Z"


def test_probe_request_carries_pip_apt_and_constraint_policy(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path, MANIFEST.replace("constraint: keep", "constraint: unset")))
    inb = FakeInBase()
    resolve(m, m.variant("cuda13"), resolvers(in_base=inb), config(tmp_path), now=now)
    [(image, platform, req)] = inb.requests
    assert image == f"nvcr.io/nvidia/pytorch@{DIGEST_A}"  # pulled by digest, never by the moving tag
    assert platform == "linux/amd64"
    assert req.pip == ("black==24.4.2", "pyyaml")
    assert dict(req.build_pip) == {"te": ("nvidia-mathdx==25.1.1",)}
    assert req.apt == ("jq", "curl", "libcudnn9-cuda-13", "cmake")
    assert req.unset_constraint


def test_base_through_a_mirror(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    reg = FakeRegistry({"mirror.local:5000/nvidia/pytorch:25.09-py3": DIGEST_B})
    inb = FakeInBase()
    cfg = config(tmp_path, registry_mirrors={"nvcr.io": "mirror.local:5000"})
    v = resolve(m, m.variant("cuda13"), resolvers(registry=reg, in_base=inb), cfg, now=now)
    assert reg.asked == ["mirror.local:5000/nvidia/pytorch:25.09-py3"]
    assert v.base is not None
    # The lock records the manifest's reference; the digest is the same content wherever it is pulled.
    assert (v.base.ref, v.base.digest) == ("nvcr.io/nvidia/pytorch:25.09-py3", DIGEST_B)
    assert inb.requests[0][0] == f"mirror.local:5000/nvidia/pytorch@{DIGEST_B}"


def test_unreachable_base_says_it_cannot_lock_here_and_how_to_mirror(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    reg = FakeRegistry({}, unreachable={"nvcr.io"})
    with pytest.raises(UnreachableError) as exc:
        resolve(m, m.variant("cuda13"), resolvers(registry=reg), config(tmp_path), now=now)
    text = str(exc.value)
    assert "cannot lock demo/cuda13 here: the base image nvcr.io/nvidia/pytorch:25.09-py3 cannot be reached" in text
    assert "(registry nvcr.io)" in text
    assert "no such host" in text
    assert 'registry_mirrors = { "nvcr.io" = "HOST:PORT" }' in text
    assert "BUILDCTL_REGISTRY_MIRRORS=nvcr.io=HOST:PORT" in text


def test_missing_tag_is_a_lock_error(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    with pytest.raises(LockError, match=r"base image nvcr.io/nvidia/pytorch:25.09-py3 does not exist"):
        resolve(m, m.variant("cuda13"), resolvers(registry=FakeRegistry({})), config(tmp_path), now=now)


def test_pr_head_pin_that_moved_is_drift(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    moved = "9" * 40
    git = FakeGit(prs={2146: PR_2146, 2150: moved})
    with pytest.raises(LockDrift) as exc:
        resolve(m, m.variant("cuda13"), resolvers(git=git), config(tmp_path), now=now)
    text = str(exc.value)
    assert "component te (" in text and "demo.yaml:" in text
    assert f"PR #2150 has moved: its head is now {moved}, the manifest reviewed 7e48668" in text


def test_ambiguous_short_sha_error_names_the_component(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    with pytest.raises(SourceError) as exc:
        resolve(m, m.variant("cuda13"), resolvers(git=FakeGit(shas={})), config(tmp_path), now=now)
    assert "component te (" in str(exc.value)
    assert "d2945c6 is ambiguous" in str(exc.value) and "candidates: d2945c6aaa..., d2945c6bbb..." in str(exc.value)


def test_replacing_a_protected_base_package_is_refused(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    inb = FakeInBase(probe_result(pip=(PipInstall(name="black", version="24.4.2"),
                                       PipInstall(name="torch", version="2.6.0"))))
    with pytest.raises(LockError, match=r"would replace the base's protected torch 2.2.0 with 2.6.0"):
        resolve(m, m.variant("cuda13"), resolvers(in_base=inb), config(tmp_path), now=now)
    allowed = pins.load(write_manifest(tmp_path, MANIFEST.replace(
        'packages: ["torch", "nvidia-*"]', 'packages: ["torch", "nvidia-*"]\n  replace: [torch]')))
    idx = FakeIndex(hashes={**FakeIndex().hashes, ("torch", "2.6.0"): ("sha256:" + "5" * 64,)})
    v = resolve(allowed, allowed.variant("cuda13"), resolvers(in_base=inb, index=idx), config(tmp_path), now=now)
    assert ("torch", "2.6.0") in [(p.name, p.version) for p in v.pip]


def test_python_of_the_base_must_match_the_variant(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    inb = FakeInBase(probe_result(python="3.12.3"))
    with pytest.raises(LockError, match=r"the base's python is 3.12.3, the variant says 3.11"):
        resolve(m, m.variant("cuda13"), resolvers(in_base=inb), config(tmp_path), now=now)


def test_pip_file_without_any_hash_is_an_error(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    with pytest.raises(LockError, match=r"no file hash for click==8.1.7"):
        resolve(m, m.variant("cuda13"), resolvers(index=FakeIndex(hashes={})), config(tmp_path), now=now)


def test_apt_pattern_without_a_match_lists_what_is_offered(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path, MANIFEST.replace("jq=1.6*", "jq=1.5*")))
    with pytest.raises(LockError) as exc:
        resolve(m, m.variant("cuda13"), resolvers(), config(tmp_path), now=now)
    assert "no version of apt package jq matches '1.5*'" in str(exc.value)
    assert "offered versions: 1.7.1-1, 1.6-2.1+deb12u1, 1.6-2.1" in str(exc.value)


def test_no_probe_when_nothing_needs_the_base(tmp_path: Path) -> None:
    text = MANIFEST.split("apt:\n")[0] + "components: {}\n"
    m = pins.load(write_manifest(tmp_path, text))
    inb = FakeInBase()
    v = resolve(m, m.variant("cuda13"), resolvers(in_base=inb), config(tmp_path), now=now)
    assert inb.requests == [] and v.pip == () and dict(v.apt) == {}


# ------------------------------------------------------------------------------------------ the file


def test_lock_stack_keeps_other_variants_and_unchanged_times(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    m = pins.load(path)
    sha = pins.manifest_sha256(path)
    first = lock_stack(m, sha, ["cuda13", "cuda12"], resolvers(), config(tmp_path), None, now=now)
    assert sorted(first.lock.variants) == ["cuda12", "cuda13"]

    later = lambda: datetime(2026, 6, 1, tzinfo=UTC)  # noqa: E731
    again = lock_stack(m, sha, ["cuda13"], resolvers(), config(tmp_path), first.lock, now=later)
    assert again.unchanged == ("cuda13",)
    assert again.lock == first.lock  # nothing changed: the same file, the same times

    moved = resolvers(registry=FakeRegistry({"nvcr.io/nvidia/pytorch:25.09-py3": DIGEST_B}))
    third = lock_stack(m, sha, ["cuda13"], moved, config(tmp_path), first.lock, now=later)
    third_base = third.lock.variants["cuda13"].base
    assert third_base is not None and third_base.digest == DIGEST_B
    assert third.lock.variants["cuda13"].resolved_at == "2026-06-01T00:00:00Z"
    assert third.lock.variants["cuda12"] == first.lock.variants["cuda12"]
    assert third.stale == ()

    edited = lock_stack(m, "0" * 64, ["cuda13"], resolvers(), config(tmp_path), first.lock, now=now)
    assert edited.stale == ("cuda12",)


def test_lock_stack_drops_variants_gone_from_the_manifest(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    m = pins.load(path)
    first = lock_stack(m, "x", ["cuda13", "cuda12"], resolvers(), config(tmp_path), None, now=now)
    only13 = pins.load(write_manifest(tmp_path, MANIFEST.replace(
        '  cuda12:\n    image: nvcr.io/nvidia/pytorch:25.06-py3\n    platform: linux/amd64\n    cuda: "12"\n'
        '    python: "3.11"\n', "")))
    out = lock_stack(only13, "y", ["cuda13"], resolvers(), config(tmp_path), first.lock, now=now)
    assert out.dropped == ("cuda12",) and list(out.lock.variants) == ["cuda13"]


def test_check_without_lock_says_how_to_make_one(tmp_path: Path) -> None:
    m = pins.load(write_manifest(tmp_path))
    with pytest.raises(LockError, match=r"demo has no lock to check") as exc:
        check(m, "pins/demo.yaml", "x", ["cuda13"], resolvers(), config(tmp_path), None, now=now)
    assert "buildctl lock demo" in str(exc.value)


def test_check_reports_manifest_edit_and_unlocked_variant(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    m = pins.load(path)
    first = lock_stack(m, "1" * 64, ["cuda13"], resolvers(), config(tmp_path), None, now=now)
    drift = check(m, "pins/demo.yaml", "2" * 64, ["cuda13", "cuda12"], resolvers(), config(tmp_path),
                  first.lock, now=now)
    assert [d.message() for d in drift] == [
        "the manifest pins/demo.yaml was edited since locking (sha256 111111111111 -> 222222222222)",
        "variant cuda12 is not in the lock",
    ]


# ------------------------------------------------------------------------------------------ command


def make_ui() -> tuple[UI, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return UI(out=Console(file=out, width=200), err=Console(file=err, width=200)), out, err


def run_cmd(path: Path, r: Resolvers, *, variants: Sequence[str] = ("cuda13",), do_check: bool = False,
            as_json: bool = False) -> tuple[int, str, str]:
    ui, out, err = make_ui()
    m = pins.load(path)
    rc = cmd_lock.run(path=path, manifest=m, variants=variants, do_check=do_check, as_json=as_json, resolvers=r,
                      config=config(path.parent.parent), terminal=ui, project=path.parent.parent)
    return rc, out.getvalue(), err.getvalue()


def test_command_writes_canonical_lock_with_manifest_hash(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    rc, out, _ = run_cmd(path, resolvers())
    assert rc == 0 and "wrote pins/demo.lock.json" in out
    text = (tmp_path / "pins" / "demo.lock.json").read_text()
    data = json.loads(text)
    assert data["manifest_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    te_json = data["variants"]["cuda13"]["components"]["te"]
    assert [(c["number"], c["head"], c["mode"]) for c in te_json["changes"] if c["kind"] == "pr"] == [
        (2146, PR_2146, "own-commits"), (2150, PR_2150, "own-commits")]
    assert te_json["changes"][0]["commits"] == ["2146" + "a" * 36, "2146" + "b" * 36]


def test_command_failure_leaves_the_lock_file_untouched(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    assert run_cmd(path, resolvers(), variants=("cuda13", "cuda12"))[0] == 0
    lock_file = tmp_path / "pins" / "demo.lock.json"
    before = lock_file.read_bytes()
    # cuda13 would resolve (a moved tag), then cuda12 fails: nothing at all may be written.
    reg = FakeRegistry({"nvcr.io/nvidia/pytorch:25.09-py3": DIGEST_B}, unreachable=set())
    with pytest.raises(LockError):
        run_cmd(path, resolvers(registry=reg), variants=("cuda13", "cuda12"))
    assert lock_file.read_bytes() == before
    with pytest.raises(UnreachableError):
        run_cmd(path, resolvers(registry=FakeRegistry({}, unreachable={"nvcr.io"})))
    assert lock_file.read_bytes() == before
    assert [p.name for p in lock_file.parent.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_command_check_is_quiet_when_current_and_writes_nothing(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    run_cmd(path, resolvers())
    lock_file = tmp_path / "pins" / "demo.lock.json"
    before = lock_file.stat().st_mtime_ns, lock_file.read_bytes()
    rc, out, _ = run_cmd(path, resolvers(), do_check=True)
    assert rc == 0 and out.strip() == "pins/demo.lock.json is current for demo: cuda13"
    assert (lock_file.stat().st_mtime_ns, lock_file.read_bytes()) == before


def test_command_check_names_each_drift_and_exits_with_lock_drift(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    run_cmd(path, resolvers())
    lock_file = tmp_path / "pins" / "demo.lock.json"
    before = lock_file.read_bytes()
    new_2146 = "8" * 40
    new_main = "7" * 40
    r = resolvers(registry=FakeRegistry({"nvcr.io/nvidia/pytorch:25.09-py3": DIGEST_B}),
                  git=FakeGit(prs={2146: new_2146, 2150: PR_2150}, branches={"main": new_main}))
    with pytest.raises(LockDrift) as exc:
        run_cmd(path, r, do_check=True)
    assert exc.value.exit_code == 5
    assert str(exc.value).splitlines()[:4] == [
        "pins/demo.lock.json is out of date (3 difference(s)):",
        f"  - cuda13: base image nvcr.io/nvidia/pytorch:25.09-py3 moved: {DIGEST_A} -> {DIGEST_B}",
        f"  - cuda13: component te: branch moved: {BRANCH_MAIN} -> {new_main}",
        f"  - cuda13: component te: PR #2146 head changed: {PR_2146} -> {new_2146}",
    ]
    assert "accept them with `buildctl lock demo --variant cuda13`" in str(exc.value)
    assert lock_file.read_bytes() == before


def test_command_check_json(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    run_cmd(path, resolvers())
    r = resolvers(registry=FakeRegistry({"nvcr.io/nvidia/pytorch:25.09-py3": DIGEST_B}))
    ui, out, _ = make_ui()
    with pytest.raises(LockDrift):
        cmd_lock.run(path=path, manifest=pins.load(path), variants=["cuda13"], do_check=True, as_json=True,
                     resolvers=r, config=config(tmp_path), terminal=ui, project=tmp_path)
    data = json.loads(out.getvalue())
    assert data["ok"] is False
    assert data["drift"] == [{"variant": "cuda13", "kind": "base", "subject": "nvcr.io/nvidia/pytorch:25.09-py3",
                              "old": DIGEST_A, "new": DIGEST_B,
                              "message": f"cuda13: base image nvcr.io/nvidia/pytorch:25.09-py3 moved: "
                                         f"{DIGEST_A} -> {DIGEST_B}"}]


def test_command_lock_json_and_existing_lock_of_another_stack_is_an_error(tmp_path: Path) -> None:
    path = write_manifest(tmp_path)
    rc, out, _ = run_cmd(path, resolvers(), as_json=True)
    data = json.loads(out)
    assert rc == 0 and data["lock_file"] == "pins/demo.lock.json" and list(data["variants"]) == ["cuda13"]
    lock_file = tmp_path / "pins" / "demo.lock.json"
    lock_file.write_text('{"schema": 99}')
    with pytest.raises(LockError, match=r"lock schema 99 is not supported"):
        run_cmd(path, resolvers())
    assert lock_file.read_text() == '{"schema": 99}'


def test_pins_show_displays_locked_values(tmp_path: Path) -> None:
    import argparse

    from buildctl.commands import pins as cmd_pins
    from buildctl.commands.context import Context

    path = write_manifest(tmp_path)
    run_cmd(path, resolvers())
    ui, out, _ = make_ui()
    ctx = Context(project=tmp_path, config=config(tmp_path), ui=ui)
    assert cmd_pins.show(argparse.Namespace(stack="demo", variant="cuda13", json=False), ctx) == 0
    text = out.getvalue()
    assert re.search(r"^lock: locked \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; matches the manifest$", text, re.M)
    for value in (DIGEST_A, SHA_TE, PR_2146, PR_2150, f"tree {TREE}", f"on main (head {BRANCH_MAIN})",
                  f"submodule 3rdparty/cutlass {SUB['3rdparty/cutlass']}", "nvidia-mathdx==25.1.1",
                  "cmake=3.25.1-1", "jq", "1.6-2.1+deb12u1", "already in the base", "click"):
        assert value in text, value

    ui, out, _ = make_ui()
    assert cmd_pins.show(argparse.Namespace(stack="demo", variant="cuda13", json=True),
                         Context(project=tmp_path, config=config(tmp_path), ui=ui)) == 0
    info = json.loads(out.getvalue())
    assert info["lock"]["matches_manifest"] is True
    assert [(p["name"], p["version"], p["in_base"]) for p in info["pip"]["locked"]] == [
        ("black", "24.4.2", False), ("click", "8.1.7", False), ("pyyaml", "6.0", True)]
    assert info["components"][0]["prs"] == [{"number": 2146, "head": PR_2146}, {"number": 2150, "head": PR_2150}]

    path.write_text(path.read_text() + "\n# edited\n")
    ui, out, _ = make_ui()
    cmd_pins.show(argparse.Namespace(stack="demo", variant="cuda13", json=False),
                  Context(project=tmp_path, config=config(tmp_path), ui=ui))
    assert "the manifest changed since (`buildctl lock demo --check` says what drifted)" in out.getvalue()
