#!/usr/bin/env python3
"""Hold `buildctl lint-args` against the real Megatron-LM's validate_args, for every seed stack and launch.

    scripts/megatron-validate.py MEGATRON_SRC [--json]

MEGATRON_SRC is a Megatron-LM tree at the pinned commit (for example
`git --git-dir MIRRORS/NVIDIA/Megatron-LM.git archive effebd81 | tar -x -C DIR`). For each stack, variant
and launch (profile, or base) it runs lint-args against that tree, and in a child process the same probe
the smoke suite's megatron-args check runs in an image (parse_args, validate_args and the
TransformerConfig built from the arguments, with the environment torchrun gives rank 0 of the launch's
world). This host has no torch: the child stands torch and the other heavy imports (TE, apex, triton...)
in with permissive stubs, answers torch.cuda's device queries from the variant's gpu_archs, and reports
the TE version as the one the lock pins. What validate_args asserts on the arguments runs for real; what it
asks of a device or a library is answered. Agreement: lint-args has errors exactly when validate_args
refuses. Exit status 0 when every launch agrees.
"""

from __future__ import annotations

import abc
import argparse
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
STACKS = ("deepseek-v3-gb200", "megatron-bert", "verl-vllm")
# Imported by Megatron-LM at effebd81 on the way to megatron.training.arguments, absent on a build host.
STUBBED = ("torch", "transformer_engine", "apex", "einops", "flash_attn", "triton", "nvidia_resiliency_ext",
           "deep_ep", "tensorstore", "zarr", "modelopt", "numpy", "wandb", "nltk", "regex", "tqdm", "onelogger",
           "multistorageclient")


# ------------------------------------------------------------------------------------ child: stubs


class _Meta(abc.ABCMeta):
    """Attributes of a stub are stub classes: usable as values, callables, decorators and base classes."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _cls(name)

    def __bool__(cls) -> bool:
        return False

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __getitem__(cls, key: Any) -> Any:
        return cls


class _Stub(metaclass=_Meta):
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name == "__file__":
            return "/nonexistent/stub.so"
        if name.startswith("__"):
            raise AttributeError(name)
        return _cls(name)

    def __call__(self, *a: Any, **k: Any) -> Any:
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Stub()

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


def _cls(name: str) -> Any:
    return _Meta(name, (_Stub,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _cls(name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in STUBBED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__spec__ = spec
        m.__file__ = "/nonexistent/stub.py"
        m.__version__ = "3.4.0"  # what Megatron's version gates compare against (triton >= 3.4 and the like)
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def child(megatron: str, te_version: str, request: dict[str, Any]) -> dict[str, Any]:
    sys.meta_path.insert(0, _Finder())
    real_version = importlib.metadata.version
    answers = {"transformer-engine": te_version, "torch": "2.9.0"}
    importlib.metadata.version = lambda n: answers.get(n) or real_version(n)  # type: ignore[assignment]
    sys.path.insert(0, megatron)
    sys.path.insert(0, str(PROJECT))
    import torch  # type: ignore[import-not-found]  # the stub

    torch.__version__ = "2.9.0"
    torch.is_grad_enabled = lambda: True  # training: validate_args reads it for --fp8-param-gather
    os.environ.update(request.pop("env", {}))  # the image's runtime environment (ENV), as in the image
    from smoke import probes

    return probes.probe_megatron_validate(request)


# ---------------------------------------------------------------------------------------- parent


def probe(a: argparse.Namespace, m: Any, v: Any, prof: dict[str, Any], script: str) -> dict[str, Any]:
    """The real parse_args + validate_args + TransformerConfig of one launch, in a child process."""
    archs = [x for x in v.gpu_archs]
    cap = [int(p) for p in archs[0].split(".")] if archs else [9, 0]
    request = {"args": prof["args"], "argv0": os.path.basename(script), "world_size": prof["world_size"],
               "gpus_per_node": prof["gpus_per_node"], "answer_capability": cap, "env": m.env_for(v)}
    p = subprocess.run([sys.executable, __file__, str(a.megatron), "--te-version", a.te_version,
                        "--child", json.dumps(request)], capture_output=True, text=True, timeout=300, check=False)
    tail = p.stdout.rpartition("@@RESULT@@")[2]
    try:
        res: dict[str, Any] = json.loads(tail)
    except json.JSONDecodeError:
        res = {"ok": False, "error": {"text": (p.stderr or p.stdout)[-400:]}}
    return res


def _message(res: dict[str, Any]) -> str:
    text = res.get("argparse_error") or (res.get("error") or {}).get("text") or ""
    return " ".join(str(text).split())[:160]


def run_mutations(a: argparse.Namespace) -> int:
    """Each mutation through the real validate_args and through lint-args; a table of both verdicts."""
    import datetime

    import yaml  # a script of the project: it reads the mutation set as the tests do

    sys.path.insert(0, str(PROJECT))
    from buildctl.graph import smoke_expect
    from buildctl.manifest import pins
    from buildctl.megatron import lintargs, mutations

    muts = mutations.parse(yaml.safe_load(a.mutations.read_text(encoding="utf-8")), str(a.mutations))
    manifests: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for mu in muts:
        if mu.stack not in manifests:
            manifests[mu.stack] = pins.load(PROJECT / "pins" / f"{mu.stack}.yaml")
        m = mutations.apply(manifests[mu.stack], mu)
        v = next(x for x in m.variants if x.name == mu.variant)
        assert m.entrypoint is not None
        script = next((w for w in m.entrypoint.command if w.endswith(".py")), "pretrain_gpt.py")
        prof = next(p for p in smoke_expect.megatron_profiles(m, v) if p["name"] == mutations.MUTATION)
        res = probe(a, m, v, prof, script)
        report = lintargs.lint(m, v, a.megatron, mutations.MUTATION)
        lint_errors = [f for f in report.errors if f.check not in lintargs.HARDWARE_CHECKS]
        real = "accept" if res.get("ok") else "refuse"
        lint = "refuse" if lint_errors else "accept"
        rows.append({"id": mu.id, "launch": f"{mu.stack}/{mu.variant}/{mu.profile}", "edit": mu.edit,
                     "expect": mu.expect, "real": real, "stage": res.get("stage"), "message": _message(res),
                     "lint": lint, "lint_rules": sorted({f"{f.check} {f.source}" for f in lint_errors})})
    missed = [r for r in rows if r["real"] == "refuse" and r["lint"] == "accept"]
    false = [r for r in rows if r["real"] == "accept" and r["lint"] == "refuse"]
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| mutation | real validate_args / TransformerConfig | lint-args |")
        print("|---|---|---|")
        for r in rows:
            real = "passes" if r["real"] == "accept" else f"refuses ({r['stage']}): {r['message']}"
            lint = "passes" if r["lint"] == "accept" else "refuses: " + "; ".join(r["lint_rules"])
            mark = " **MISSED**" if r in missed else (" **FALSE REFUSAL**" if r in false else "")
            print(f"| {r['id']}{mark} | {real} | {lint} |")
        print(f"\n{len(rows)} mutations: the real code refuses {sum(r['real'] == 'refuse' for r in rows)}, "
              f"lint-args refuses {sum(r['lint'] == 'refuse' for r in rows)}; {len(missed)} refused by the real "
              f"code and passed by lint-args, {len(false)} refused by lint-args only")
    if a.write_results:
        commit = "effebd81f410bc6566fffee6c320b6f8f762e06d"
        doc = {"megatron_commit": commit, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
               "command": "scripts/megatron-validate.py MEGATRON_SRC --mutations tests/data/megatron-mutations.yaml "
                          "--write-results tests/data/megatron-mutations.results.json",
               "results": [{"id": r["id"], "real": r["real"], "stage": r["stage"], "message": r["message"]}
                           for r in rows]}
        a.write_results.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 1 if missed or false else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("megatron", type=Path, help="a Megatron-LM tree at the pinned commit")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--manifest", action="append", type=Path, default=[],
                    help="a manifest to check instead of the seed stacks' (repeatable)")
    ap.add_argument("--te-version", default="2.9.0", help="the TE version Megatron's version gates see")
    ap.add_argument("--mutations", type=Path,
                    help="run the mutation set (tests/data/megatron-mutations.yaml) instead of the shipped launches")
    ap.add_argument("--write-results", type=Path, help="with --mutations: record the real verdicts in this JSON file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        out = child(str(a.megatron), a.te_version, json.loads(a.child))
        print("\n@@RESULT@@" + json.dumps(out, default=str))
        return 0
    if a.mutations:
        return run_mutations(a)
    sys.path.insert(0, str(PROJECT))
    from buildctl.graph import smoke_expect
    from buildctl.manifest import pins
    from buildctl.megatron import lintargs

    rows = []
    for path in a.manifest or [PROJECT / "pins" / f"{stack}.yaml" for stack in STACKS]:
        m = pins.load(path)
        stack = m.stack
        if m.entrypoint is None or m.entrypoint.megatron is None:
            continue
        script = next((w for w in m.entrypoint.command if w.endswith(".py")), "pretrain_gpt.py")
        for v in m.variants:
            for prof in smoke_expect.megatron_profiles(m, v):
                report = lintargs.lint(m, v, a.megatron, prof["name"])
                res = probe(a, m, v, prof, script)
                real_ok = bool(res.get("ok"))
                # What the hardware refuses (TE's recipes, HybridEP's domain) is beyond validate_args.
                megatron_errors = [f for f in report.errors if f.check not in lintargs.HARDWARE_CHECKS]
                lint_ok = not megatron_errors
                rows.append({
                    "stack": stack, "variant": v.name, "profile": prof["name"], "world_size": prof["world_size"],
                    "upstream_defect": bool(prof["upstream_defect"]),
                    "lint_errors": [f"{f.check}: {f.message}" for f in megatron_errors],
                    "hardware_errors": [f"{f.check}: {f.message}" for f in report.errors
                                        if f.check in lintargs.HARDWARE_CHECKS],
                    "validate_ok": real_ok, "validate_stage": res.get("stage"),
                    "validate_error": res.get("argparse_error") or (res.get("error") or {}).get("text"),
                    "answered": sorted(set(res.get("answered", []))), "agree": real_ok == lint_ok,
                })
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            head = f"{r['stack']}/{r['variant']}/{r['profile']} (world {r['world_size']})"
            verdict = "agree" if r["agree"] else "DISAGREE"
            real = "validate_args passes" if r["validate_ok"] else f"validate_args refuses: {r['validate_error']}"
            lint = f"lint-args: {len(r['lint_errors'])} error(s)" + (
                "".join(f"\n      - {e}" for e in r["lint_errors"]))
            if r["hardware_errors"]:
                lint += "\n    hardware (beyond validate_args):" + "".join(f"\n      - {e}" for e in r["hardware_errors"])
            print(f"{verdict}: {head}{' [upstream defect]' if r['upstream_defect'] else ''}\n    {real}\n    {lint}")
        print(f"{sum(r['agree'] for r in rows)} of {len(rows)} launches agree")
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
