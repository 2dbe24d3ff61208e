"""Hostile manifests and configurations: each is refused at load time with a precise error.

The loader table of issue 11: every case is a value an attacker (a pull request that CI builds as root) or
an unlucky operator could write, each expected to be refused with exit 3 and an error naming
file:line:col and the key that holds the value. ``BASE`` is a manifest that uses every field the cases
touch; each case replaces one text of it (or writes a configuration file).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from buildctl import cli
from buildctl.config import load_config
from buildctl.errors import ManifestError, ManifestErrors
from buildctl.manifest import pins

BASE = """\
schema: 1
stack: t
base:
  alias: demo-base
variants:
  first:
    image: "127.0.0.1:5000/demo/base:1"
    platform: linux/amd64
    cuda: "13"
apt:
  repos:
    extra:
      lines: {any: "deb [signed-by=/usr/share/keyrings/x.gpg] https://apt.example/debian bookworm main"}
      keyring: key
  packages:
    - jq
    - {name: git, version: "1:2.39*"}
downloads:
  key:
    dest: /usr/share/keyrings/x.gpg
    urls:
      any: {url: "https://example.invalid/x.gpg", sha256: compute}
  launch:
    dest: /usr/local/bin/bindpcie
    mode: "0755"
    urls:
      any: {url: "https://example.invalid/bindpcie", sha256: compute}
pip:
  requirements:
    - six==1.16.0
remove:
  pip: [old-pkg]
  paths: [/opt/old]
protect:
  packages: [torch]
cudnn: {package: libcudnn9-cuda-13, version: "9.14.0.64", repo: extra}
components:
  lib:
    repo: https://git.example/org/lib.git
    commit: 0123456789abcdef0123456789abcdef01234567
    branch: main
    prs: [7]
    build:
      env: {ARCHS: "90"}
      parallel_env: MAX_JOBS
      memory_per_job_gib: 2
  tree:
    repo: ../sources/tree.bundle
    commit: abcdef1
    install: {kind: source-tree, path: /opt/tree}
env:
  PYTHONPATH: /opt/tree
entrypoint:
  workdir: /opt/tree
  command: [python, train.py]
  launcher: {kind: srun, wrapper: launch}
  args:
    - --lr: "1e-4"
  profiles:
    small: {gpus: 8}
  default_profile: small
smoke:
  python: python3
  required: [versions]
push:
  registry: 127.0.0.1:5000
  repository: training/t
cleanup: [/tmp/x]
"""

FILE = "pins/t.yaml"

# (case, (text in BASE, replacement), "line:col", key, words the message holds)
MANIFEST_CASES: list[tuple[str, tuple[str, str], str, str, str]] = [
    # defect 1: options and transports as repository locations
    ("repo --upload-pack", ("repo: https://git.example/org/lib.git", 'repo: "--upload-pack=touch PWNED;false:x ://"'),
     "39:11", "components.lib.repo", "must not start with '-'"),
    ("repo -c option", ("repo: https://git.example/org/lib.git", "repo: -cprotocol.ext.allow=always"),
     "39:11", "components.lib.repo", "must not start with '-'"),
    ("repo ext:: transport", ("repo: https://git.example/org/lib.git", "repo: \"ext::sh -c touch% /tmp/pwned\""),
     "39:11", "components.lib.repo", "whitespace"),
    ("repo remote helper", ("repo: https://git.example/org/lib.git", "repo: fd::17"),
     "39:11", "components.lib.repo", "remote helper"),
    ("repo scheme", ("repo: https://git.example/org/lib.git", "repo: ftp://git.example/lib.git"),
     "39:11", "components.lib.repo", "scheme 'ftp'"),
    ("repo absolute host path", ("repo: https://git.example/org/lib.git", "repo: /root/private.git"),
     "39:11", "components.lib.repo", "relative to the manifest"),
    ("repo scp path an option", ("repo: https://git.example/org/lib.git", "repo: git@host:-oProxyCommand=x"),
     "39:11", "components.lib.repo", "git@host:path"),
    ("branch an option", ("branch: main", "branch: --orphan"), "41:13", "components.lib.branch", "branch name"),
    ("branch with ..", ("branch: main", "branch: a..b"), "41:13", "components.lib.branch", "branch name"),
    # defect 2: paths that leave the tree
    ("download dest ..", ("dest: /usr/local/bin/bindpcie", 'dest: "/../../../../../../tmp/x"'),
     "24:11", "downloads.launch.dest", "'..'"),
    ("download dest relative", ("dest: /usr/local/bin/bindpcie", "dest: bin/x"),
     "24:11", "downloads.launch.dest", "absolute path"),
    ("download dest not normalised", ("dest: /usr/local/bin/bindpcie", "dest: /usr//bin/x"),
     "24:11", "downloads.launch.dest", "not normalised"),
    ("install.path ..", ("path: /opt/tree}", "path: /opt/../../etc}"),
     "50:40", "components.tree.install.path", "'..'"),
    ("patch file outside the manifest folder", ("    prs: [7]\n", "    prs: [7]\n    patches: [{file: ../../etc/shadow, sha256: "
                                                + "0" * 64 + "}]\n"), "43:22", "components.lib.patches[0].file",
     "inside the manifest's folder"),
    ("remove.paths relative", ("paths: [/opt/old]", "paths: [opt/old]"), "33:11", "remove.paths[0]", "absolute"),
    ("cleanup ..", ("cleanup: [/tmp/x]", "cleanup: [/tmp/../x]"), "68:11", "cleanup[0]", "'..'"),
    ("workdir relative", ("workdir: /opt/tree", "workdir: opt/tree"), "54:12", "entrypoint.workdir", "absolute"),
    # defect 3: line breaks and NULs that would become instructions or shell lines
    ("workdir newline RUN", ("workdir: /opt/tree", 'workdir: "/opt/x\\nRUN touch /pwned"'),
     "54:12", "entrypoint.workdir", "control character '\\n'"),
    ("profile name newline", ("    small: {gpus: 8}", '    "small\\ntouch /pwned": {gpus: 8}'),
     "60:5", "entrypoint.profiles.small\ntouch /pwned", "control character"),
    ("smoke.python command", ("  python: python3", '  python: "python3; touch /pwned"'),
     "63:11", "smoke.python", "interpreter"),
    ("build.env key", ('env: {ARCHS: "90"}', 'env: {"A=1; touch /pwned; B": "90"}'),
     "44:13", "components.lib.build.env.A=1; touch /pwned; B", "environment variable name"),
    ("parallel_env", ("parallel_env: MAX_JOBS", 'parallel_env: "X=1 touch /pwned #"'),
     "45:21", "components.lib.build.parallel_env", "environment variable name"),
    ("apt mapping name", ("{name: git, version:", "{name: 'git; touch /pwned', version:"),
     "17:14", "apt.packages[1].name", "apt package name"),
    ("variant image newline", ('image: "127.0.0.1:5000/demo/base:1"', 'image: "127.0.0.1:5000/demo/base:1\\nRUN id"'),
     "7:12", "variants.first.image", "control character"),
    ("variant image space", ('image: "127.0.0.1:5000/demo/base:1"', 'image: "base:1 AS x"'),
     "7:12", "variants.first.image", "image reference"),
    ("push.registry newline", ("registry: 127.0.0.1:5000", 'registry: "127.0.0.1:5000\\nx"'),
     "66:13", "push.registry", "control character"),
    ("push.repository upper case", ("repository: training/t", "repository: Training/T"),
     "67:15", "push.repository", "registry repository"),
    ("env value newline", ("PYTHONPATH: /opt/tree", 'PYTHONPATH: "/opt/tree\\nRUN id"'),
     "52:15", "env.PYTHONPATH", "control character"),
    ("env name", ("PYTHONPATH: /opt/tree", '"PATH; id": /opt/tree'), "52:3", "env.PATH; id",
     "environment variable name"),
    ("apt repo line newline", ('lines: {any: "deb [', 'lines: {any: "deb\\nRUN id [', ),
     "13:20", "apt.repos.extra.lines.any", "control character"),
    ("apt repo line quote", ('lines: {any: "deb [', 'lines: {any: "deb \'$(id)\' ['),
     "13:20", "apt.repos.extra.lines.any", "sources.list line"),
    ("remove.paths newline", ("paths: [/opt/old]", 'paths: ["/opt/old\\nid"]'), "33:11", "remove.paths[0]",
     "control character"),
    ("remove.pip option", ("pip: [old-pkg]", "pip: [--index-url=http://evil]"), "32:9", "remove.pip[0]",
     "pip distribution name"),
    ("argument value NUL", ('- --lr: "1e-4"', '- --lr: "1e-4\\0"'), "58:13", "entrypoint.args[0]", "control character"),
    ("argument flag newline", ('- --lr: "1e-4"', '- "--lr\\nid": "1e-4"'), "58:7", "entrypoint.args[0]",
     "control character"),
    ("command word newline", ("command: [python, train.py]", 'command: [python, "train.py\\nid"]'),
     "55:21", "entrypoint.command[1]", "control character"),
    # item 9: values the loader used to accept
    ("PR number 1e29", ("prs: [7]", "prs: [100000000000000000000000000000]"), "42:11", "components.lib.prs[0]",
     "between 1 and"),
    ("PR number in a mapping", ("prs: [7]", "prs: [{number: 100000000000000000000000000000}]"), "42:20",
     "components.lib.prs[0].number", "at most"),
    ("memory_per_job_gib nan", ("memory_per_job_gib: 2", "memory_per_job_gib: .nan"), "46:27",
     "components.lib.build.memory_per_job_gib", "finite"),
    ("memory_per_job_gib inf", ("memory_per_job_gib: 2", "memory_per_job_gib: .inf"), "46:27",
     "components.lib.build.memory_per_job_gib", "finite"),
    ("memory_per_job_gib zero", ("memory_per_job_gib: 2", "memory_per_job_gib: 0"), "46:27",
     "components.lib.build.memory_per_job_gib", "more than 0"),
    ("file:// download", ('{url: "https://example.invalid/bindpcie"', '{url: "file:///etc/shadow"'), "27:18",
     "downloads.launch.urls.any.url", "scheme 'file'"),
    ("pip environment marker", ("    - six==1.16.0", "    - six==1.16.0; python_version < '3.11'"), "30:7",
     "pip.requirements[0]", "environment marker"),
    ("cudnn repo unknown (points at the key)", ("repo: extra}", "repo: extar}"), "36:65", "cudnn.repo",
     "did you mean 'extra'"),
    ("keyring unknown (points at the key)", ("keyring: key", "keyring: kye"), "14:16", "apt.repos.extra.keyring",
     "did you mean 'key'"),
    ("launcher wrapper unknown (points at the key)", ("wrapper: launch}", "wrapper: lanch}"), "56:35",
     "entrypoint.launcher.wrapper", "launcher.wrapper 'lanch' is not a download"),
    ("sha256 neither hex nor compute", ('/x.gpg", sha256: compute}', '/x.gpg", sha256: COMPUTE}'), "22:59",
     "downloads.key.urls.any.sha256", "64 lower-case hex digits"),
    ("mode not octal", ('mode: "0755"', 'mode: "0799"'), "25:11", "downloads.launch.mode", "octal mode"),
]


def _load(text: str) -> None:
    pins.load_text(text, FILE, base_dir=Path("/nonexistent"))


def test_base_manifest_is_valid() -> None:
    _load(BASE)


@pytest.mark.parametrize(("case", "edit", "where", "key", "words"), MANIFEST_CASES, ids=[c[0] for c in MANIFEST_CASES])
def test_hostile_manifest_is_refused_with_file_line_col_and_key(case: str, edit: tuple[str, str], where: str,
                                                                key: str, words: str) -> None:
    old, new = edit
    assert BASE.count(old) == 1, f"{case}: the edit does not apply once"
    with pytest.raises(ManifestErrors) as info:
        _load(BASE.replace(old, new))
    assert info.value.exit_code == 3
    messages = [str(e) for e in info.value.errors]
    prefix = f"{FILE}:{where}: {key}: "
    assert any(m.startswith(prefix) and words in m for m in messages), (
        f"{case}: expected an error starting {prefix!r} with {words!r}, got {messages}")


def test_hostile_manifest_through_the_cli_exits_3_and_writes_nothing(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pins").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "pins" / "t.yaml").write_text(
        BASE.replace("repo: https://git.example/org/lib.git", 'repo: "--upload-pack=touch PWNED;false:x ://"'))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert cli.main(["--project", str(tmp_path), "pins", "check", "t"]) == 3
    err = capsys.readouterr().err
    assert "pins/t.yaml:39:11: components.lib.repo:" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


# ------------------------------------------------------------------------------------------- aliases


def _alias_bomb(items: int, uses: int) -> str:
    anchor = "[" + ", ".join(["x"] * items) + "]"
    refs = "\n".join(f"    k{i}: *big" for i in range(uses))
    return BASE.replace("  alias: demo-base\n", f"  alias: demo-base\n  contract:\n    env_present: &big {anchor}\n") \
        + f"repro:\n  levels:\n{refs}\n"


def test_defect7_yaml_alias_expansion_is_bounded() -> None:
    """Issue 11 defect 7: one anchored 10,000-item list aliased 10,000 times (about 114 KB) cost `pins check`
    8.6 s and 826 MB; it is now refused after counting, in well under a second, naming the anchor."""
    text = _alias_bomb(10_000, 10_000)
    assert len(text) < 200_000
    start = time.monotonic()
    with pytest.raises(ManifestErrors) as info:
        _load(text)
    elapsed = time.monotonic() - start
    (err,) = info.value.errors
    assert str(err).startswith(f"{FILE}:6:18: ") and "expands to more than 200,000 values" in str(err)
    assert elapsed < 5, elapsed  # not a timing claim: a guard against the old minutes-long walk


def test_a_few_aliases_are_still_fine() -> None:
    text = BASE.replace("  packages: [torch]", "  packages: &p [torch]\n  replace: *p")
    m = pins.load_text(text, FILE, base_dir=Path("/nonexistent"))
    assert m.protect.replace == ("torch",)


# ------------------------------------------------------------------------------------------- configuration

# (case, config.toml text, "line:col", key, words)
CONFIG_CASES: list[tuple[str, str, str, str, str]] = [
    ("git mirror an option", '[git_mirrors]\n"https://github.com/" = "--upload-pack=touch /tmp/pwned"\n',
     "2:1", "git_mirrors.https://github.com/", "must not start with '-'"),
    ("git mirror with '=' (splits git -c)", 'git_mirrors = { "https://x/" = "file:///m=core.sshCommand" }\n',
     "1:17", "git_mirrors.https://x/", "'='"),
    ("git mirror key with a newline", '[git_mirrors]\n"https://x/\\nfoo" = "file:///srv/m/"\n',
     "0:0", "git_mirrors.https://x/\nfoo", "control character"),
    ("git mirror ext transport", '[git_mirrors]\n"https://x/" = "ext::sh"\n', "2:1", "git_mirrors.https://x/",
     "'::'"),
    ("network_timeout nan", "network_timeout = nan\n", "1:1", "network_timeout", "finite"),
    ("network_timeout inf", "network_timeout = inf\n", "1:1", "network_timeout", "finite"),
    ("network_timeout negative", "network_timeout = -5\n", "1:1", "network_timeout", "more than 0"),
    ("network_timeout a string", 'network_timeout = "soon"\n', "1:1", "network_timeout", "number of seconds"),
    ("registry with a space", 'registry = "a b"\n', "1:1", "registry", "host[:port]"),
    ("registry mirror value newline", '[registry_mirrors]\n"nvcr.io" = "m:5000\\nx"\n', "2:1",
     "registry_mirrors.nvcr.io", "control character"),
    ("ca_bundle relative", 'ca_bundle = "certs/ca.pem"\n', "1:1", "ca_bundle", "absolute path"),
    ("pip index file://", 'pip_index_url = "file:///etc"\n', "1:1", "pip_index_url", "scheme 'file'"),
    ("default_stack path", 'default_stack = "../../etc"\n', "1:1", "default_stack", "a name"),
    ("unknown key", 'regsitry = "x"\n', "1:1", "regsitry", "unknown configuration key"),
    ("TOML syntax", 'registry = "x\n', "1:14", "", "invalid TOML"),
]


@pytest.mark.parametrize(("case", "text", "where", "key", "words"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_hostile_configuration_is_refused_with_file_line_and_key(tmp_path: Path, case: str, text: str, where: str,
                                                                 key: str, words: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(path), "HOME": str(tmp_path)})
    assert info.value.exit_code == 3
    loc = f"{path}:{where}" if where != "0:0" else str(path)
    prefix = f"{loc}: {key}: " if key else f"{loc}: "
    assert str(info.value).startswith(prefix) and words in str(info.value), (case, str(info.value))


def test_configuration_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(tmp_path / "none.toml"), "HOME": str(tmp_path),
                     "BUILDCTL_NETWORK_TIMEOUT": "nan"})
    assert str(info.value).startswith("$BUILDCTL_NETWORK_TIMEOUT: network_timeout: ") and "finite" in str(info.value)
    with pytest.raises(ManifestError) as info:
        load_config({"BUILDCTL_CONFIG": str(tmp_path / "none.toml"), "HOME": str(tmp_path),
                     "BUILDCTL_GIT_MIRRORS": "https://github.com/=--upload-pack=x"})
    assert str(info.value).startswith("$BUILDCTL_GIT_MIRRORS: git_mirrors.https://github.com/: ")


def test_the_table_holds_at_least_forty_hostile_inputs() -> None:
    assert len(MANIFEST_CASES) + len(CONFIG_CASES) >= 40
    assert len({c[0] for c in MANIFEST_CASES} | {c[0] for c in CONFIG_CASES}) == len(MANIFEST_CASES) + len(CONFIG_CASES)


SEMANTIC = ["cudnn repo unknown (points at the key)", "keyring unknown (points at the key)",
            "launcher wrapper unknown (points at the key)", "PR number in a mapping", "sha256 neither hex nor compute",
            "mode not octal", "install.path ..", "branch an option"]


def test_defect9_semantic_errors_point_at_the_key_not_the_mapping() -> None:
    """Issue 11, item 9: about 12 semantic errors pointed at the first line of the enclosing mapping. Each of these
    is reported at the line and column of the value itself, under its own key."""
    cases = {c[0]: c for c in MANIFEST_CASES}
    for name in SEMANTIC:
        _, (old, new), where, key, _ = cases[name]
        text = BASE.replace(old, new)
        line = int(where.split(":")[0])
        value_line = next(i for i, t in enumerate(text.splitlines(), 1) if new.strip().splitlines()[-1] in t)
        assert line == value_line, name
        with pytest.raises(ManifestErrors) as info:
            _load(text)
        assert any(str(e).startswith(f"{FILE}:{where}: {key}: ") for e in info.value.errors), name
    # and a mapping's own problems (a source-tree install without a path) name the key that decides it
    with pytest.raises(ManifestErrors) as info:
        _load(BASE.replace("install: {kind: source-tree, path: /opt/tree}", "install: {kind: source-tree}"))
    assert any(str(e).startswith(f"{FILE}:50:21: components.tree.install.kind: ") for e in info.value.errors)
