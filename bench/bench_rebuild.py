#!/usr/bin/env python3
"""Rebuild cost of the demo stack: buildctl's content-keyed nodes against one multi-stage Dockerfile.

Side by side in one process, on one engine, from one lock:

  (a) nothing changed: `buildctl build` again, against `docker build` of an equivalent single
      multi-stage Dockerfile whose layer cache is warm (it was just built);
  (b) one component's pin changed (fastmath without its PR 7): the nodes buildctl rebuilds and its wall
      time, against the same monolithic Dockerfile rebuilt with its warm cache.

The monolithic Dockerfile is made from the same rendered fragments (each node a stage; the compile a
stage that COPYs the source in; assemble COPYs the wheel from that stage), so both do the same work.
Neither pushes: buildctl runs without a registry (--local), like `docker build`.

    python3 bench/bench_rebuild.py [--registry HOST:PORT] [--keep]

Needs the engine and the demo base in the registry pins/demo.yaml names (`make demo` sets both up);
--registry points the copy of the manifest at another one. Prints the figures and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from buildctl import cli, lockfile, pipeline, render, target, wheelhouse  # noqa: E402
from buildctl.config import load_config  # noqa: E402
from buildctl.engine import Engine  # noqa: E402
from buildctl.graph import Graph  # noqa: E402
from buildctl.sources import Sources  # noqa: E402

PR7 = "    prs:\n      - {number: 7, head: 639a2e3db57db370ff716cec8923ea5bea2e9003}   # adds clamp()\n"


class Quiet:
    def node(self, name: str, state: str, detail: str = "") -> None:
        pass

    def log(self, name: str, line: str) -> None:
        pass


@dataclass
class Bench:
    root: Path
    engine: Engine
    repository: str
    run_id: str

    def target(self) -> target.Target:
        return target.load(self.root, load_config(os.environ), "demo", None, local_only=True, skip_smoke=True)

    def buildctl(self) -> tuple[float, list[str], pipeline.Report]:
        config = load_config(os.environ)
        t = self.target()
        start = time.monotonic()
        report = pipeline.run(t, engines=[self.engine], config=config, progress=Quiet(), project=self.root,
                              sources=Sources.from_config(config, base_dir=self.root),
                              options=pipeline.Options(jobs=2, skip_smoke=True))
        return time.monotonic() - start, report.built, report

    def monolithic(self, tag: str, url: str) -> float:
        """`docker build` of the whole stack as one multi-stage Dockerfile (the engine's layer cache applies)."""
        t = self.target()
        ctx = Path(tempfile.mkdtemp(prefix="bench-mono-"))
        try:
            write_monolithic(t, ctx, self.run_id)
            start = time.monotonic()
            self.engine.build(context_dir=ctx, dockerfile="Dockerfile", tag=tag, labels={"io.buildctl.bench": "1"},
                              buildargs={render.WHEELHOUSE_ARG: url}, network_mode="host",
                              log_file=ctx.parent / f"{ctx.name}.log")
            return time.monotonic() - start
        finally:
            shutil.rmtree(ctx, ignore_errors=True)
            (ctx.parent / f"{ctx.name}.log").unlink(missing_ok=True)


def stage(name: str) -> str:
    return name.replace(":", "-")


def write_monolithic(t: target.Target, ctx: Path, run_id: str) -> None:
    """Every node of ``t`` as a stage of one Dockerfile in ``ctx`` (contexts under per-stage folders)."""
    config = load_config(os.environ)
    sources = Sources.from_config(config, base_dir=t.manifest_path.parent)
    assert t.vlock is not None
    g: Graph = t.graph
    lines: list[str] = []
    for n in g.nodes:
        if n.kind == "base":
            continue
        parent = t.base_ref if n.parents[0] == "base" else stage(n.parents[0])
        if n.kind == "wheel":
            assert n.component
            c = t.manifest.component(n.component)
            tree = sources.exported(sources.prepare_component(c, t.vlock.components[c.name]))
            shutil.copytree(tree, ctx / stage(n.name) / "src", symlinks=True)
            r = render.render(n, templates=t.templates, parent_ref=parent)
            assert r.script is not None
            (ctx / stage(n.name) / "wheel.sh").write_text(r.script)
            lines += [f"FROM {parent} AS {stage(n.name)}", f"LABEL io.buildctl.bench={run_id}",
                      f"COPY {stage(n.name)}/src/ /src/",
                      f"COPY {stage(n.name)}/wheel.sh /buildctl/wheel.sh",
                      "RUN mkdir -p /out /ccache && BUILDCTL_JOBS=2 sh /buildctl/wheel.sh", ""]
            continue
        wheels = {w.component: render.WheelFile(filename="WHEEL", sha256="HASH")
                  for w in getattr(n.spec, "wheels", ())}
        r = render.render(n, templates=t.templates, parent_ref=parent, wheels=wheels)
        text = r.dockerfile.replace("COPY rootfs/", f"COPY {stage(n.name)}/rootfs/")
        # the label marks every stage's images, so that the bench can remove what it made
        text = re.sub(r"(?m)^FROM .*$", f"FROM {parent} AS {stage(n.name)}\nLABEL io.buildctl.bench={run_id}",
                      text, count=1)
        for component in wheels:
            # the wheel from its compile stage instead of the wheelhouse
            first = f"FROM {parent} AS {stage(n.name)}\nLABEL io.buildctl.bench={run_id}\n"
            text = text.replace(first, f"{first}COPY --from=wheel-{component} /out/ /tmp/components/{component}/\n", 1)
            text = text.replace(f'"${{{render.WHEELHOUSE_ARG}}}components/{component}/WHEEL --hash=sha256:HASH"',
                                f'"$(ls /tmp/components/{component}/*.whl)"')
        text = text.replace(" --require-hashes -r /tmp/buildctl-requirements.txt; \\\n    rm -f /tmp/buildctl-req",
                            " -r /tmp/buildctl-requirements.txt; \\\n    rm -f /tmp/buildctl-req") if wheels else text
        lines.append(text)
        for cf in r.context:
            dest = ctx / stage(n.name) / cf.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            if cf.tree:
                assert t.vlock is not None
                c = t.manifest.component(cf.tree)
                shutil.copytree(sources.exported(sources.prepare_component(c, t.vlock.components[c.name])), dest,
                                symlinks=True)
            elif cf.download:
                shutil.copyfile(config.cache.downloads / "files" / _sha(n, cf.download), dest)
                os.chmod(dest, int(cf.mode, 8))
            else:
                dest.write_text(cf.text or "")
                os.chmod(dest, int(cf.mode, 8))
    (ctx / "Dockerfile").write_text("\n".join(lines))


def _sha(node: Any, name: str) -> str:
    return next(f.sha256 for f in node.spec.files if f.name == name)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        raise SystemExit(f"bench: {path} no longer holds the text to change:\n{old}")
    path.write_text(text.replace(old, new))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", help="registry holding the demo base (default: the one pins/demo.yaml names)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary project, cache and images")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="buildctl-bench-"))
    repository = f"bench-{uuid.uuid4().hex[:8]}/demo"
    root = work / "project"
    (root / "pins").mkdir(parents=True)
    (root / "images").symlink_to(ROOT / "images")
    (root / "demo").symlink_to(ROOT / "demo")  # the manifest's repos are relative: ../demo/sources/
    text = (ROOT / "pins" / "demo.yaml").read_text()
    text = re.sub(r"(?m)^  repository: .*$", f"  repository: {repository}", text)
    if args.registry:
        text = text.replace("127.0.0.1:5000", args.registry)
    (root / "pins" / "demo.yaml").write_text(text)
    lock = ROOT / "pins" / "demo.lock.json"
    os.environ["BUILDCTL_CACHE"] = str(work / "cache")
    if lock.is_file() and not args.registry:
        shutil.copy(lock, root / "pins" / "demo.lock.json")
    elif cli.main(["--project", str(root), "-q", "lock", "demo"]) != 0:
        return 1

    engine = Engine(network_timeout=load_config(os.environ).network_timeout)
    run_id = uuid.uuid4().hex[:12]
    bench = Bench(root=root, engine=engine, repository=repository, run_id=run_id)
    mono_tag = f"buildctl-bench-mono:{uuid.uuid4().hex[:8]}"
    made: list[str] = [mono_tag]
    results: dict[str, Any] = {}
    total = 0
    try:
        total = len(bench.target().graph.nodes) - 1  # the base is not built
        cold, built, report = bench.buildctl()
        made += [report.final, *bench.target().refs.values()]
        print(f"cold build (buildctl): {cold:.1f}s, {len(built)} nodes", flush=True)
        pip_dir = Path(tempfile.mkdtemp(prefix="bench-wh-", dir=work))
        wheelhouse.link_tree(pip_dir, {f.name: f for f in (work / "cache" / "downloads" / "pip").glob("*.whl")})
        with wheelhouse.serve(pip_dir) as url:
            mono_cold = bench.monolithic(mono_tag, url)
            print(f"cold build (one Dockerfile): {mono_cold:.1f}s", flush=True)

            # (a) nothing changed
            a_ours, a_built, _ = bench.buildctl()
            a_mono = bench.monolithic(mono_tag, url)
            results["a"] = {"buildctl_s": a_ours, "buildctl_built": a_built, "monolithic_s": a_mono}

            # (b) one component's pin: fastmath without PR 7
            edit(root / "pins" / "demo.yaml", PR7, "")
            def drop_pr7(data: dict[str, Any]) -> None:
                c = data["variants"]["default"]["components"]["fastmath"]
                c["changes"], c["tree"] = [], c["base"]  # nothing applied: the tree is the base commit

            lockfile.edit(root / "pins" / "demo.lock.json", drop_pr7)  # checked and rehashed
            b_ours, b_built, _ = bench.buildctl()
            made += list(bench.target().refs.values())
            b_mono = bench.monolithic(mono_tag, url)
            results["b"] = {"buildctl_s": b_ours, "buildctl_built": b_built, "monolithic_s": b_mono}
    finally:
        if not args.keep:
            base = bench.target().base_ref
            for ref in reversed(made):
                if ref != base:
                    engine.remove_image(ref, force=True)
            # the monolithic build's stage images (untagged, marked by the label): ours to remove; an image
            # with children cannot go before them, so remove in passes until none is left
            docker = shutil.which("docker") or "/usr/bin/docker"
            for _ in range(20):
                ids = subprocess.run([docker, "images", "-aq", "--filter", f"label=io.buildctl.bench={run_id}"],
                                     capture_output=True, text=True, check=False).stdout.split()
                if not ids:
                    break
                subprocess.run([docker, "rmi", *dict.fromkeys(ids)], capture_output=True, check=False)
            shutil.rmtree(work, ignore_errors=True)
        engine.close()

    a, b = results["a"], results["b"]
    print()
    print("demo stack rebuild, one engine, no push        buildctl    one Dockerfile   ratio (Dockerfile / buildctl)")
    print(f"(a) nothing changed                           {a['buildctl_s']:7.2f}s   {a['monolithic_s']:9.2f}s"
          f"       {a['monolithic_s'] / a['buildctl_s']:6.1f}x")
    print(f"    nodes rebuilt                             {len(a['buildctl_built'])} of {total}")
    print(f"(b) fastmath pin changed (PR 7 dropped)       {b['buildctl_s']:7.2f}s   {b['monolithic_s']:9.2f}s"
          f"       {b['monolithic_s'] / b['buildctl_s']:6.1f}x")
    print(f"    nodes rebuilt                             {len(b['buildctl_built'])} of {total}: "
          f"{', '.join(b['buildctl_built'])}")
    print(json.dumps({"a": a, "b": b}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
