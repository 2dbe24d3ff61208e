"""The launch fields of a manifest: profiles' GPUs and nodes, the launcher, a variant's entrypoint override.

Good values load; each bad one is an error naming file, line and key (strict syntax: these values reach
the launch script and the image's environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from buildctl.errors import ManifestErrors
from buildctl.graph.entrypoint import launch_argv, launches, variant_entrypoint
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest

BASE = """\
stack: t
base: {alias: demo-base}
variants:
  first:
    image: "127.0.0.1:5000/demo/base:1"
    platform: linux/amd64
    cuda: "13"
    entrypoint:
      env: {DOMAIN: "8"}
      drop: [--bare]
      args: [--lr: "1e-4", --extra: x]
      gpus: 16
      nodes: 2
  second: {image: "127.0.0.1:5000/demo/base:1", platform: linux/amd64, cuda: "13"}
downloads:
  wrap:
    dest: /usr/local/bin/wrap
    mode: "0755"
    urls: {any: {url: "https://example.invalid/wrap", sha256: compute}}
env: {DOMAIN: "72", KEEP: "1"}
entrypoint:
  workdir: /opt/t
  command: [python, train.py]
  launcher: {kind: torchrun, master_port: 7000}
  gpus: 8
  args:
    - --bare
    - --lr: "3e-4"
  profiles:
    wide: {gpus: 32, nodes: 4, args: [--lr: "1e-3"]}
"""


def load(text: str = BASE) -> Manifest:
    return pins.load_text(text, "pins/t.yaml", base_dir=Path("/nonexistent"))


def errors_of(text: str) -> list[str]:
    with pytest.raises(ManifestErrors) as info:
        load(text)
    return [str(e) for e in info.value.errors]


def test_a_variant_overrides_env_arguments_and_topology() -> None:
    m = load()
    first, second = m.variants
    assert m.env_for(first) == {"DOMAIN": "8", "KEEP": "1"} and m.env_for(second) == {"DOMAIN": "72", "KEEP": "1"}
    e = variant_entrypoint(m, first)
    assert [a.argv() for a in e.args] == [["--lr", "1e-4"], ["--extra", "x"]] and (e.gpus, e.nodes) == (16, 2)
    assert variant_entrypoint(m, second) is m.entrypoint
    assert launch_argv(m, variant=first)[:5] == ["torchrun", "--nproc_per_node", "8", "--nnodes", "2"]
    assert launch_argv(m, variant=second)[:5] == ["torchrun", "--nproc_per_node", "8", "--nnodes", "1"]
    wide = launches(m, first)["wide"]
    assert (wide.gpus, wide.nodes, wide.gpus_per_node) == (32, 4, 8)
    assert [a.argv() for a in wide.args] == [["--lr", "1e-3"], ["--extra", "x"]]  # the profile over the variant
    assert launch_argv(m, "wide", variant=first)[:11] == [
        "torchrun", "--nproc_per_node", "8", "--nnodes", "4", "--node_rank", "0", "--master_addr", "localhost",
        "--master_port", "7000"]


@pytest.mark.parametrize(("edit", "message", "line"), [
    (("gpus: 32, nodes: 4", "gpus: 30, nodes: 4"), "profile wide: 30 GPUs do not spread evenly over 4 nodes", 30),
    (("gpus: 32, nodes: 4", "gpus: 32, nodes: 0"), "entrypoint.profiles.wide.nodes: must be more than 0", 30),
    (("    wide:", "    base:"), "invalid profile name 'base'", 30),
    (("    wide:", "    Wide$:"), "the key 'Wide$' is not a name", 30),
    (("{kind: torchrun, master_port: 7000}", "{kind: torchrun, args: [--nnodes=2]}"),
     "launcher.args: --nnodes=2 comes from the profile", 24),
    (("{kind: torchrun, master_port: 7000}", "{kind: srun, args: [--x]}"),
     "launcher.args are torchrun options; a srun launcher takes none", 24),
    (("{kind: torchrun, master_port: 7000}", "{kind: torchrun, master_port: 70000}"),
     "launcher.master_port: must be more than 0 and at most 65535, got 70000", 24),
    (("{kind: torchrun, master_port: 7000}", "{kind: none, wrapper: wrapp}"),
     "launcher.wrapper 'wrapp' is not a download", 24),
    (("{kind: torchrun, master_port: 7000}", "{kind: torchrun, kind2: x}"), "unknown key 'kind2'", 24),
    (("drop: [--bare]", "drop: [--bar]"), "variant first: entrypoint.drop: --bar is not in entrypoint.args", 10),
    (("drop: [--bare]", "drop: ['--bare; rm -rf /']"), "is not an option such as '--fp8-recipe'", 10),
    (('env: {DOMAIN: "8"}', 'env: {"DO MAIN": "8"}'), "the key 'DO MAIN' is not an environment variable name", 9),
    (("      gpus: 16\n", "      gpus: 15\n"), "variant first entrypoint: 15 GPUs do not spread evenly over 2", 12),
    (("      nodes: 2\n", "      nodes: 2\n      default_profile: narrow\n"),
     "variant first: default_profile 'narrow' is not in profiles", 14),
])
def test_bad_launch_fields_name_file_line_and_key(edit: tuple[str, str], message: str, line: int) -> None:
    assert edit[0] in BASE
    errors = errors_of(BASE.replace(*edit))
    assert any(message in e for e in errors), errors
    assert any(e.startswith(f"pins/t.yaml:{line}:") for e in errors if message in e), errors


def test_a_variant_cannot_override_an_entrypoint_the_stack_lacks() -> None:
    text = BASE[:BASE.index("entrypoint:\n  workdir")]
    assert any("overrides the entrypoint, but the stack has none" in e for e in errors_of(text))
