"""Host side of the proxy trainings: what train.sh needs besides the compile (h200-hopper's prepare.py packs
that), rendered by buildctl itself. Run from the buildctl checkout's root with it first on PYTHONPATH:

    PYTHONPATH=. python3 tests/data/gpu/h200-train/prepare_train.py DEST MLPERF_COMMON_GIT_DIR

MLPERF_COMMON_GIT_DIR is a git directory of NVIDIA/mlperf-common (a bare mirror such as
/work/mirrors/NVIDIA/mlperf-common.git, or a clone's .git); instead of the argument, the environment
variable MLPERF_COMMON_GIT may name it. Neither given, or no such git directory: status 1 with a message, before anything is written.

writes into DEST (.devcarry/train):
- buildctl-launch-<stack>: render_launch_script(manifest, variant) of deepseek-v3-gb200 / hopper and
  megatron-bert / ngc2401, the script the entrypoint node bakes (buildctl/graph/entrypoint.py);
- image-env-<stack>.sh: the image's runtime environment, manifest.env_for(variant), which is what the
  assemble node writes as ENV lines (buildctl/graph/graph.py: AssembleNodeSpec env), as `NAME='value'`;
- bindpcie: NVIDIA/mlperf-common client/bindpcie from the mirror's main (the image's download;
  its sha256 printed, the lock records the one it fetched);
- profiles.txt: `stack profile` per proxy profile found in the manifests;
- expect-<stack>.json: the smoke expectation's train check alone (graph.smoke_expect.train_section of the
  stack's smoke.train, required), its log written under /tmp/h5train/logs: train.sh runs each proxy
  training THROUGH the smoke suite's train check, so that one run is both the report and the check.
The runtime wheels (fetch_wheels.sh), the numactl .debs (`apt-get download numactl libnuma1`) and
Megatron-LM's export (prepare.py's megatron-lm.tar.gz) are put beside them by the README's commands.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from buildctl.graph.entrypoint import launches
from buildctl.graph.launch_script import render_launch_script
from buildctl.graph.smoke_expect import train_section
from buildctl.manifest.pins import load, select_variant

STACKS = {"deepseek-v3-gb200": "hopper", "megatron-bert": "ngc2401"}
PROXIES = {"deepseek-v3-gb200": "dsv3-proxy-1gpu", "megatron-bert": "bert-proxy-1gpu"}
MIRROR_ENV = "MLPERF_COMMON_GIT"
USAGE = "usage: prepare_train.py DEST MLPERF_COMMON_GIT_DIR  (or the environment variable MLPERF_COMMON_GIT)"


def mirror_dir(args: list[str]) -> str:
    """The mlperf-common git directory: the argument, else $MLPERF_COMMON_GIT; SystemExit (status 1) when neither
    names a git directory that has main:client/bindpcie."""
    mirror = args[0] if args else os.environ.get(MIRROR_ENV, "")
    if not mirror:
        raise SystemExit(f"prepare_train.py: no NVIDIA/mlperf-common git directory given (bindpcie comes from its "
                         f"main:client/bindpcie)\n{USAGE}")
    probe = subprocess.run(["git", "--git-dir", mirror, "cat-file", "-e", "main:client/bindpcie"], capture_output=True)
    if probe.returncode != 0:
        raise SystemExit(f"prepare_train.py: {mirror} is not a git directory of NVIDIA/mlperf-common with "
                         f"main:client/bindpcie ({probe.stderr.decode(errors='replace').strip()[:200]})\n{USAGE}")
    return mirror


def main(dest: Path, mirror: str) -> int:
    root = Path.cwd()
    dest.mkdir(parents=True, exist_ok=True)
    profiles = []
    for stack, vname in STACKS.items():
        m = load(root / "pins" / f"{stack}.yaml")
        v = select_variant(m, vname)
        script = render_launch_script(m, v)
        (dest / f"buildctl-launch-{stack}").write_text(script)
        (dest / f"buildctl-launch-{stack}").chmod(0o755)
        env = m.env_for(v)
        (dest / f"image-env-{stack}.sh").write_text("".join(f"{k}={shlex.quote(val)}\n" for k, val in sorted(env.items())))
        have = launches(m, v)
        want = PROXIES[stack]
        state = "present" if want in have else f"MISSING (profiles: {' '.join(have)})"
        print(f"{stack}/{vname}: launch script {len(script)} bytes, {len(env)} env, profile {want} {state}")
        if want in have:
            profiles.append(f"{stack} {want}\n")
        if m.smoke.train is not None:
            section = {**train_section(m, v, m.smoke.train), "log_dir": "/tmp/h5train/logs"}
            expect = {"schema": 1, "stack": stack, "variant": vname, "required": ["train"], "checks": {"train": section}}
            (dest / f"expect-{stack}.json").write_text(json.dumps(expect, indent=1, sort_keys=True) + "\n")
            print(f"  expect-{stack}.json: train {section}")
    (dest / "profiles.txt").write_text("".join(profiles))
    blob = subprocess.run(["git", "--git-dir", mirror, "show", "main:client/bindpcie"], check=True,
                          capture_output=True).stdout
    (dest / "bindpcie").write_bytes(blob)
    (dest / "bindpcie").chmod(0o755)
    print(f"bindpcie: {len(blob)} bytes sha256 {hashlib.sha256(blob).hexdigest()} (mlperf-common main)")
    return 0 if len(profiles) == len(PROXIES) else 1


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), mirror_dir(sys.argv[2:])))
