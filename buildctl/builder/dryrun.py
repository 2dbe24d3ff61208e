"""`build --dry-run`: every node's rendered Dockerfile, compile script and context, written for review."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from buildctl import safepath
from buildctl.graph import render
from buildctl.graph.graph import Graph


class Renderable(Protocol):
    """What rendering a target's nodes needs (services.target.Target and inputs.BuildInput have it)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def refs(self) -> Mapping[str, str]: ...

    @property
    def base_ref(self) -> str: ...

    @property
    def templates(self) -> render.Templates: ...


def dry_run(target: Renderable, out: Path, *, wheels: Mapping[str, render.WheelFile] | None = None) -> list[Path]:
    """Write every node's rendered Dockerfile, compile script, context listing and every text file of its
    context (``<node>.context/<path>``: the launch script among them) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for n in target.graph.nodes:
        if n.kind == "base":
            continue
        parent = target.base_ref if n.parents[0] == "base" else target.refs[n.parents[0]]
        r = render.render(n, templates=target.templates, parent_ref=parent, wheels=wheels)
        df = out / f"{n.slug}.Dockerfile"
        df.write_text(r.dockerfile)
        written.append(df)
        if r.script is not None:
            sh = out / f"{n.slug}.sh"
            sh.write_text(r.script)
            written.append(sh)
        if r.context:
            # every text file of the context, at its path (the launch script, keyrings' lists, ...), so that the
            # whole image reads as text; downloads, source trees and wheels are named (they are fetched/built)
            folder = out / f"{n.slug}.context"
            for c in r.context:
                if c.text is not None:
                    f = safepath.inside(folder, c.path)
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(c.text)
                    f.chmod(int(c.mode, 8))
                    written.append(f)
            listing = out / f"{n.slug}.context.txt"
            listing.write_text("".join(f"{c.path}  mode {c.mode}  " + (
                f"download {c.download}" if c.download else f"source tree of {c.tree}" if c.tree else
                f"wheel of {c.wheel}" if c.wheel else
                f"text, {len(c.text or '')} bytes, in {folder.name}/{c.path}") + "\n" for c in r.context))
            written.append(listing)
    summary = out / "graph.json"
    summary.write_text(json.dumps({"stack": target.graph.stack, "variant": target.graph.variant, "nodes": [
        {"name": n.name, "key": n.key, "ref": target.refs[n.name], "parents": list(n.parents),
         "unlocked": list(n.unlocked)} for n in target.graph.nodes]}, indent=2) + "\n")
    written.append(summary)
    return written
