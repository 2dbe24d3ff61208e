"""The entrypoint baked into an image: `docker run IMAGE --help`, `--print-command` and a real launch.

The images are the demo base plus an entrypoint fragment: that of pins/demo.yaml (with a stand-in
train.py that prints what it received, in place of the demo trainer the assemble node installs), and
that of a small manifest whose command is a python3 one-liner printing its arguments.
"""

from __future__ import annotations

import json
import shlex
import textwrap
import uuid
from pathlib import Path
from typing import Any

from buildctl.graph.entrypoint import SCRIPT_PATH, launch_argv
from buildctl.graph.launch_script import render_entrypoint_fragment
from buildctl.manifest import pins
from buildctl.manifest.model import Manifest

PROJECT = Path(__file__).resolve().parents[2]
PRINT_ARGS = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'args': sys.argv[1:]}))"

MANIFEST = """\
    stack: demo-entrypoint
    base: {alias: demo-base}
    variants:
      cpu: {image: "BASE", platform: linux/amd64, cuda: "13"}
    env:
      CUDA_DEVICE_MAX_CONNECTIONS: "1"
    entrypoint:
      workdir: /opt/train
      command: [python3, -c, "PRINT_ARGS"]
      gpus: 8
      paths:
        DATA_PATH: {default: /data/demo text_document, doc: dataset prefix}
      args:
        - --num-layers: 61
        - --moe-layer-freq: "([0]*3+[1]*58)"
        - --pipeline-model-parallel-layout: "Et|(tt|)*30L"
        - --data-path: ${DATA_PATH}
        - --cuda-graph-scope: [attn, moe_router, moe_preprocess]
        - --bf16
"""


def build(engine: Any, demo_base: str, image_cleanup: Any, tmp_path: Path, m: Manifest,
          extra: dict[str, str] | None = None) -> str:
    """An image: the demo base, ``extra`` files (image path -> text), then the entrypoint fragment."""
    fragment = render_entrypoint_fragment(m, m.default_variant)
    context = tmp_path / "context"
    context.mkdir()
    script = context / fragment.context_name
    script.write_text(fragment.script)
    script.chmod(fragment.script_mode)
    lines = [f"FROM {demo_base}"]
    for i, (dest, text) in enumerate((extra or {}).items()):
        (context / f"extra{i}").write_text(text)
        (context / f"extra{i}").chmod(0o755 if text.startswith("#!") else 0o644)  # COPY keeps the mode
        lines.append(f"COPY extra{i} {dest}")
    (context / "Dockerfile").write_text("\n".join([*lines, *fragment.dockerfile_lines()]) + "\n")
    tag = image_cleanup(f"buildctl-test-entrypoint:{uuid.uuid4().hex[:12]}")
    engine.build(context_dir=context, dockerfile="Dockerfile", tag=tag, labels={"buildctl.test": "entrypoint"})
    info = engine.inspect_image(tag)
    assert info.entrypoint == (SCRIPT_PATH,)
    assert info.labels["buildctl.entrypoint.sha256"] == fragment.script_sha256
    return str(tag)


FAKE_TORCHRUN = "#!/usr/bin/python3\n" + PRINT_ARGS + "\n"


def test_demo_image_entrypoint(engine: Any, demo_base: str, image_cleanup: Any, tmp_path: Path) -> None:
    m = pins.load(PROJECT / "pins" / "demo.yaml")
    assert m.entrypoint is not None
    # the demo base has no torch: a stand-in torchrun on PATH prints the argv it was given
    tag = build(engine, demo_base, image_cleanup, tmp_path, m, {"/usr/local/bin/torchrun": FAKE_TORCHRUN})

    helped = engine.run(tag, ["--help"], timeout=60)
    assert helped.exit_code == 0, helped.stderr
    assert f"working directory: {m.entrypoint.workdir}" in helped.stdout
    assert shlex.split(helped.stdout.split("\ncommand:\n", 1)[1]) == launch_argv(m)

    printed = engine.run(tag, ["--print-command"], timeout=60)
    assert printed.exit_code == 0, printed.stderr
    assert printed.stdout == shlex.join(launch_argv(m)) + "\n"

    launched = engine.run(tag, [], env={"CHECKPOINT_PATH": "/site/ckpt"}, timeout=60)
    assert launched.exit_code == 0, launched.stderr
    seen = json.loads(launched.stdout)
    assert seen["cwd"] == m.entrypoint.workdir
    assert seen["args"] == launch_argv(m, env={"CHECKPOINT_PATH": "/site/ckpt"})[1:]
    assert seen["args"][:4] == ["--nproc_per_node", "8", "--nnodes", "1"]
    assert seen["args"][seen["args"].index("--save") + 1] == "/site/ckpt"
    # the variant's override: --heads dropped, --precision replaced, --seq-length added
    assert "--heads" not in seen["args"] and seen["args"][-4:] == ["--save", "/site/ckpt", "--seq-length", "1024"]
    assert seen["args"][seen["args"].index("--precision") + 1] == "fp16"

    two = {"BUILDCTL_PROFILE": "two-nodes", "NODE_RANK": "1", "MASTER_ADDR": "node0"}
    launched = engine.run(tag, [], env=two, timeout=60)
    assert launched.exit_code == 0, launched.stderr
    assert json.loads(launched.stdout)["args"][:6] == ["--nproc_per_node", "4", "--nnodes", "2", "--node_rank", "1"]


def test_entrypoint_runs_in_a_real_container(engine: Any, demo_base: str, image_cleanup: Any,
                                             tmp_path: Path) -> None:
    m = pins.load_text(textwrap.dedent(MANIFEST).replace("BASE", demo_base).replace("PRINT_ARGS", PRINT_ARGS),
                       "pins/demo-entrypoint.yaml")
    tag = build(engine, demo_base, image_cleanup, tmp_path, m)
    helped = engine.run(tag, ["--help"], timeout=60)
    assert helped.exit_code == 0, helped.stderr
    assert "working directory: /opt/train" in helped.stdout
    assert "  DATA_PATH=/data/demo text_document" in helped.stdout
    assert shlex.split(helped.stdout.split("\ncommand:\n", 1)[1]) == launch_argv(m)

    printed = engine.run(tag, ["--print-command", "--lr", "1e-5"], env={"DATA_PATH": "/mnt/site data"}, timeout=60)
    assert printed.exit_code == 0, printed.stderr
    assert printed.stdout == shlex.join([*launch_argv(m, env={"DATA_PATH": "/mnt/site data"}), "--lr", "1e-5"]) + "\n"

    launched = engine.run(tag, [], timeout=60)  # `docker run IMAGE`: a real launch
    assert launched.exit_code == 0, launched.stderr
    seen = json.loads(launched.stdout)
    assert seen["cwd"] == "/opt/train"
    assert seen["args"] == launch_argv(m)[3:]
    assert seen["args"][3] == "([0]*3+[1]*58)" and seen["args"][5] == "Et|(tt|)*30L"
    assert seen["args"][7] == "/data/demo text_document"

    extra = engine.run(tag, ["--num-layers", "2"], timeout=60)  # user arguments are appended
    assert json.loads(extra.stdout)["args"][-2:] == ["--num-layers", "2"]
