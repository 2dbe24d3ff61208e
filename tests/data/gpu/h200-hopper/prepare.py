"""Host side of the H200 run: what buildctl prepares and renders for deepseek-v3-gb200 / hopper, packed for
the device (run with the buildctl checkout to use first on PYTHONPATH, from that checkout's root):

    BUILDCTL_CACHE=... BUILDCTL_GIT_MIRRORS='https://github.com/=/work/mirrors/' \\
      python3 prepare.py PROJECT OUT_C1 OUT_C2 WHEELS_C1 WHEELS_C2

- the prepared trees of transformer-engine, deepep-hybridep and megatron-lm, exported by buildctl's
  Sources (prepare_component + exported: the trees the wheel and assemble nodes get), each as a .tar.gz
  (cutlass's media/, docs/, test/ and examples/ left out of TE's to fit the device's 64 MiB a call; the
  picture the cutlass mirror lacks is declared in the manifest's missing_objects, so nothing needs seeding:
  its export holds a placeholder, and media/ is not packed anyway);
- the rendered compile scripts (pipeline.dry_run), the compile-env's build requirements, the job
  count buildctl computes for the device (16 cores, 128 GiB, both compiles at once);
- the assemble node's ENV lines as a shell file, and the smoke expectation (smoke_expect.expect_for) of the
  locked hopper variant.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

from buildctl.builder import pipeline
from buildctl.config import load_config
from buildctl.graph import smoke_expect
from buildctl.graph.specs import CompileEnvNodeSpec, WheelNodeSpec
from buildctl.services import target
from buildctl.sources.sources import Sources

STACK, VARIANT = "deepseek-v3-gb200", "hopper"
DEVICE_CORES, DEVICE_MEMORY_GIB, BUILD_JOBS = 16, 128, 2  # the device; buildctl build's default --jobs
DROP = ("3rdparty/cutlass/media", "3rdparty/cutlass/docs", "3rdparty/cutlass/test", "3rdparty/cutlass/examples")


def pack(src: Path, dest: Path, drop: tuple[str, ...] = ()) -> None:
    def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = ti.name.removeprefix("./")
        return None if any(rel == d or rel.startswith(d + "/") for d in drop) else ti
    with tarfile.open(dest, "w:gz", compresslevel=9) as tf:
        tf.add(src, arcname=".", filter=keep)


def main(project: Path, c1: Path, c2: Path) -> None:
    config = load_config()
    t = target.load(project, config, STACK, VARIANT, local_only=True)
    assert t.vlock is not None, "the hopper variant is not locked"
    sources = Sources.from_config(config, base_dir=t.manifest_path.parent)
    facts: dict[str, object] = {"project": str(project), "components": {}}
    for c in t.manifest.components:
        locked = t.vlock.components[c.name]
        prepared = sources.prepare_component(c, locked)
        tree = sources.exported(prepared)
        dest = (c1 if c.install.kind.value == "wheel" else c2) / f"{c.name}.tar.gz"
        pack(tree, dest, DROP if c.name == "transformer-engine" else ())
        facts["components"][c.name] = {"commit": getattr(prepared, "commit", None), "tree": prepared.tree,  # type: ignore[index]
                                        "short": getattr(prepared, "short", None), "export": str(tree),
                                        "packed": dest.name, "packed_bytes": dest.stat().st_size}
    rendered = c1 / "rendered"
    pipeline.dry_run(t, rendered)
    jobs = []
    wheels = [n for n in t.graph.nodes if n.kind == "wheel"]
    for n in wheels:
        spec = n.spec
        assert isinstance(spec, WheelNodeSpec) and n.component
        j = pipeline.compile_jobs(cores=DEVICE_CORES, memory_gib=DEVICE_MEMORY_GIB, per_job_gib=spec.memory_per_job_gib,
                                  concurrent=min(BUILD_JOBS, len(wheels)))
        jobs.append(f"{n.component}={j}")
        (c1 / f"wheel-{n.component}.sh").write_text((rendered / f"{n.slug}.sh").read_text())
    (c1 / "jobs.txt").write_text(" ".join(jobs) + "\n")
    for n in t.graph.nodes:
        if isinstance(n.spec, CompileEnvNodeSpec) and n.component == "transformer-engine":
            text = (rendered / f"{n.slug}.Dockerfile").read_text()
            reqs = re.findall(r"^\s+(\S+==\S+) \\$", text, flags=re.M)
            (c1 / "requirements-transformer-engine.txt").write_text("\n".join(reqs) + "\n")
            facts["compile_env_requirements"] = reqs
    assemble = next(n for n in t.graph.nodes if n.kind == "assemble")
    env_lines = re.findall(r"^ENV (\w+)=(.*)$", (rendered / f"{assemble.slug}.Dockerfile").read_text(), flags=re.M)
    (c2 / "image-env.sh").write_text("".join(f"{k}={v}\n" for k, v in env_lines))
    exp = smoke_expect.expect_for(t.manifest, t.vlock, t.variant)
    (c2 / "expect.json").write_text(json.dumps(exp.suite_json(), indent=1, sort_keys=True) + "\n")
    facts["jobs"] = jobs
    facts["lock_stale"] = t.lock_stale
    (c2 / "host-facts.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]), Path(sys.argv[3]))
