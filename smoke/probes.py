"""Questions asked inside the interpreter under test, one per probe process.

Each probe imports what it asks about (torch, Transformer Engine, DeepEP, Megatron-LM) and returns a
JSON-able dict. The suite runs each probe in a child process of the image's Python (``child_main``),
so that CUDA libraries, the driver stub and anything an import does stay out of the suite itself;
unit tests call ``run`` in-process against module trees they create.

This module must stay self-contained (standard library, no other ``smoke`` module): the child process
imports it and then takes the suite's folder off sys.path again.

The Transformer Engine API paths tried here are the ones UPSTREAM.md lists per version:
MXFP8 support through ``transformer_engine.pytorch.is_mxfp8_available(return_reason=True)`` and
``transformer_engine.pytorch.quantization.check_mxfp8_support`` (from 2.9), or
``transformer_engine.pytorch.fp8.check_mxfp8_support`` (up to 2.8); autocast through
``autocast(recipe=)`` (from 2.9) or ``fp8_autocast(fp8_recipe=)`` (before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.machinery
import importlib.metadata
import inspect
import io
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# Substrings of errors raised when code needs a GPU or a real CUDA driver rather than being broken.
# CUDA_ERROR_STUB_LIBRARY (34) is what every call into the toolkit's driver stub returns.
DEVICE_ERROR_MARKERS = (
    "libcuda.so",
    "cuda_error_stub_library",
    "stub library",
    "cuda_error_no_device",
    "no cuda-capable device",
    "cudaerrornodevice",
    "cudaerrorinsufficientdriver",
    "cuda driver version is insufficient",
    "found no nvidia driver",
    "nvidia driver on your system",
    "cudagetdevicecount",
    "torch not compiled with cuda",
    "cuda initialization",
    "no cuda gpus are available",
    "nvml",
)


def needs_device(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in DEVICE_ERROR_MARKERS)


def error_info(exc: BaseException) -> dict[str, Any]:
    """The exception as Python showed it: type, message, the `Type: message` line and the traceback tail."""
    kind = type(exc).__name__
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = f"exit status {exc.code!r}" if not isinstance(exc.code, str) else exc.code
    # importlib's own frames say nothing about the failing package: leave them out
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<frozen importlib") and not f.filename.endswith("importlib/__init__.py")]
    lines = "".join([*traceback.format_list(frames), *traceback.format_exception_only(type(exc), exc)]).splitlines()
    cause = exc.__cause__ or exc.__context__
    if cause is not None and not isinstance(exc, SystemExit):
        lines.append(f"(caused by {type(cause).__name__}: {cause})")
    return {
        "type": kind,
        "message": message,
        "text": f"{kind}: {message}" if message else kind,
        "traceback": lines[-14:],
        "needs_device": needs_device(message + "\n" + "\n".join(lines[-6:])),
    }


def failure(exc: BaseException, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "error": error_info(exc), **extra}


# --------------------------------------------------------------------------------------------- probes


def probe_distributions(args: Mapping[str, Any]) -> dict[str, Any]:
    """Every installed distribution with its version (package metadata only: nothing is imported)."""
    dists = []
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"]
        if not name:
            continue
        path = getattr(d, "_path", None)  # private, but the only way to say *which* copy it is
        dists.append({"name": str(name), "version": str(d.version), "path": str(path) if path else None})
    return {"ok": True, "distributions": dists}


def probe_import(args: Mapping[str, Any]) -> dict[str, Any]:
    module = str(args["module"])
    attr = args.get("attr")
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc)
    top = sys.modules.get(module.partition(".")[0])
    info: dict[str, Any] = {"file": getattr(mod, "__file__", None), "version": _version_of(mod),
                            "package_version": _version_of(top) if top is not None else None}
    info["libcuda"] = mapped("libcuda.so")
    if attr:
        try:
            getattr(mod, str(attr))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return failure(exc, **info)
    return {"ok": True, **info}


def probe_module_dist(args: Mapping[str, Any]) -> dict[str, Any]:
    """Import a module (with the real driver on the GPU tier), and read its distribution's metadata.

    The version comes from the distribution (``dist``, else the one that provides the module's
    top-level package), never from ``__version__``: DeepEP has none, and a module can report another
    version than the wheel that installed it. The metadata is read whether or not the import works,
    and both answers come back.
    """
    module = str(args["module"])
    top = module.partition(".")[0]
    out: dict[str, Any] = {"ok": True, "module": module}
    try:
        providers = sorted(set(importlib.metadata.packages_distributions().get(top, [])))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        providers = []
    out["provided_by"] = providers
    dist_name = str(args.get("dist") or (providers[0] if providers else ""))
    out["dist"] = dist_name or None
    dist: Any = None
    if dist_name:
        try:
            dist = importlib.metadata.distribution(dist_name)
            out["dist_version"] = str(dist.version)
        except importlib.metadata.PackageNotFoundError:
            out["dist_version"] = None
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out.update(ok=False, error=error_info(exc))
        return out
    file = getattr(mod, "__file__", None)
    out.update(file=file, module_version=_version_of(mod), libcuda=mapped("libcuda.so"))
    files = [f for f in (dist.files or ()) if f.parts and f.parts[0].partition(".")[0] == top] if dist else []
    if files and file:  # the distribution installs this package: is the imported file one of its own?
        real = os.path.realpath(file)
        out["file_in_dist"] = any(os.path.realpath(str(dist.locate_file(f))) == real for f in files)
    return out


def mapped(fragment: str) -> list[str]:
    """Files of this process whose name contains ``fragment`` (which libcuda got loaded: stub or driver)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(fragment))


def _version_of(mod: Any) -> str | None:
    v = getattr(mod, "__version__", None)
    return None if v is None else str(v)


def probe_locate(args: Mapping[str, Any]) -> dict[str, Any]:
    """Where top-level modules live on sys.path, found without importing them."""
    found: dict[str, Any] = {}
    for name in args["names"]:
        spec = importlib.machinery.PathFinder.find_spec(str(name))
        if spec is None:
            found[name] = None
        elif spec.submodule_search_locations:
            found[name] = {"kind": "package", "path": next(iter(spec.submodule_search_locations))}
        else:
            origin = spec.origin or ""
            kind = "extension" if origin.endswith((".so", ".pyd")) else "module"
            found[name] = {"kind": kind, "path": origin}
    return {"ok": True, "modules": found}


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQ_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _shared_objects(d: Any) -> list[str]:
    return sorted(os.path.realpath(str(d.locate_file(f))) for f in (d.files or ())
                  if f.name.endswith(".so") or ".so." in f.name)


def _top_folders(d: Any) -> set[str]:
    """The top-level folders a distribution installs into (its packages), from its RECORD."""
    return {f.parts[0] for f in (d.files or ()) if len(f.parts) > 1 and not f.parts[0].endswith((".dist-info", ".data"))
            and f.parts[0] != ".."}


def probe_dist_files(args: Mapping[str, Any]) -> dict[str, Any]:
    """The shared objects each named distribution installed (its RECORD), as absolute paths.

    A package can be split across distributions, as PyPI ships Transformer Engine: the
    ``transformer_engine`` wheel holds the Python code, ``transformer_engine_cu13`` the core library
    (in transformer_engine/wheel_lib/) and ``transformer_engine_torch`` the torch extension (a
    top-level module). So the parts of a named distribution are followed too: installed
    distributions that put files into its package folders, and those it requires (under any extra)
    whose name extends its own (``transformer-engine-*``). Each part is listed with its files.
    """
    wanted = {_canon(str(n)): str(n) for n in args["names"]}
    installed: dict[str, Any] = {}
    for each in importlib.metadata.distributions():
        name = each.metadata["Name"]
        if name and _canon(str(name)) not in installed:  # the first on sys.path wins, as for imports
            installed[_canon(str(name))] = each
    found: dict[str, Any] = {}
    for key, label in wanted.items():
        d = installed.get(key)
        if d is None:
            found[label] = None
            continue
        tops = _top_folders(d)
        required = set()
        for req in d.requires or ():
            m = _REQ_NAME_RE.match(req)
            if m and _canon(m.group(1)).startswith(key + "-"):
                required.add(_canon(m.group(1)))
        parts = []
        for other_key, other in sorted(installed.items()):
            if other_key == key:
                continue
            why = []
            if other_key in required:
                why.append(f"required by {label}")
            shared = sorted(tops & _top_folders(other))
            if shared:
                why.append("installs into " + ", ".join(f"{t}/" for t in shared))
            if why:
                parts.append({"dist": str(other.metadata["Name"]), "version": str(other.version), "why": "; ".join(why),
                              "files": _shared_objects(other)})
        own = _shared_objects(d)
        files = sorted(set(own).union(*(p["files"] for p in parts)))
        found[label] = {"version": str(d.version), "files": files, "own_files": own, "parts": parts}
    return {"ok": True, "dists": found}


def _torch_gpu(torch: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": str(getattr(torch, "__version__", "?")),
        "torch_cuda": str(getattr(getattr(torch, "version", None), "cuda", None)),
        "available": bool(torch.cuda.is_available()),
    }
    if info["available"]:
        info["count"] = int(torch.cuda.device_count())
        info["name"] = str(torch.cuda.get_device_name(0))
        major, minor = torch.cuda.get_device_capability(0)
        info["capability"] = f"{major}.{minor}"
    return info


def probe_gpu(args: Mapping[str, Any]) -> dict[str, Any]:
    try:
        torch = importlib.import_module("torch")
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc)
    try:
        return {"ok": True, **_torch_gpu(torch)}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc)


def _cudnn_text(encoded: int) -> str:
    # torch and TE encode cuDNN 9 as major*10000 + minor*100 + patch (8.x: major*1000 + ...)
    major, rest = divmod(encoded, 10000 if encoded >= 90000 else 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def probe_runtime(args: Mapping[str, Any]) -> dict[str, Any]:
    """Versions as the running libraries report them: torch, its cuDNN, TE and the cuDNN TE loaded."""
    out: dict[str, Any] = {"ok": True}
    try:
        torch = importlib.import_module("torch")

        out["torch"] = str(torch.__version__)
        v = torch.backends.cudnn.version()
        out["torch_cudnn"] = None if v is None else _cudnn_text(int(v))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, stage="import torch")
    if args.get("te", True):
        try:
            te = importlib.import_module("transformer_engine")
            out["te_version"] = _version_of(te)
            utils = importlib.import_module("transformer_engine.pytorch.utils")
            out["te_cudnn"] = ".".join(str(x) for x in utils.get_cudnn_version())
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return failure(exc, stage="transformer_engine", **{k: v for k, v in out.items() if k != "ok"})
    return out


# MXFP8: (module, attribute, how to call it) in the order tried. The first that exists answers.
MXFP8_APIS: tuple[tuple[str, str, str], ...] = (
    ("transformer_engine.pytorch", "is_mxfp8_available", "return_reason"),
    ("transformer_engine.pytorch.quantization", "check_mxfp8_support", "plain"),
    ("transformer_engine.pytorch.fp8", "check_mxfp8_support", "plain"),
)


def _optional_module(name: str) -> Any:
    """The module, or None when that module (not something it imports) does not exist."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def probe_mxfp8_support(args: Mapping[str, Any]) -> dict[str, Any]:
    tried: list[str] = []
    try:
        torch = importlib.import_module("torch")

        gpu = _torch_gpu(torch)
        importlib.import_module("transformer_engine.pytorch")
        answer = _ask_support(MXFP8_APIS, tried)
        if answer is not None:
            return {"ok": True, **answer, "tried": tried, "gpu": gpu}
        return {"ok": False, "tried": tried, "gpu": gpu,
                "error": {"type": "LookupError", "message": "no MXFP8 support API in this Transformer Engine",
                          "text": "LookupError: no MXFP8 support API in this Transformer Engine",
                          "traceback": [], "needs_device": False}}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, tried=tried)


# Megatron-LM's --fp8-recipe -> the TE recipe class it builds (megatron/core/fp8_utils.py at effebd81)
# and the family of TE's support question for it (transformer_engine/pytorch/quantization.py).
FP8_RECIPES: dict[str, tuple[str, str]] = {
    "delayed": ("DelayedScaling", "fp8"),
    "tensorwise": ("Float8CurrentScaling", "fp8"),
    "blockwise": ("Float8BlockScaling", "fp8_block_scaling"),
    "mxfp8": ("MXFP8BlockScaling", "mxfp8"),
}
# family -> (module, attribute, how to call it), newest API first (as MXFP8_APIS)
FP8_SUPPORT_APIS: dict[str, tuple[tuple[str, str, str], ...]] = {
    family: (("transformer_engine.pytorch", f"is_{family}_available", "return_reason"),
             ("transformer_engine.pytorch.quantization", f"check_{family}_support", "plain"),
             ("transformer_engine.pytorch.fp8", f"check_{family}_support", "plain"))
    for family in ("fp8", "fp8_block_scaling", "mxfp8")
}


def _ask_support(apis: tuple[tuple[str, str, str], ...], tried: list[str]) -> dict[str, Any] | None:
    for module, attr, style in apis:
        where = f"{module}.{attr}"
        mod = _optional_module(module)
        fn = getattr(mod, attr, None) if mod is not None else None
        if fn is None:
            tried.append(f"{where}: absent")
            continue
        answer = fn(return_reason=True) if style == "return_reason" else fn()
        if isinstance(answer, tuple) and len(answer) == 2:
            supported, reason = bool(answer[0]), str(answer[1])
        else:
            supported, reason = bool(answer), ""
        return {"api": where + ("(return_reason=True)" if style == "return_reason" else "()"),
                "supported": supported, "reason": reason}
    return None


def probe_fp8_support(args: Mapping[str, Any]) -> dict[str, Any]:
    """Whether TE can run the launch's FP8 recipe on this GPU, and its answer for every FP8 family."""
    recipe = str(args["recipe"])
    tried: list[str] = []
    try:
        torch = importlib.import_module("torch")

        gpu = _torch_gpu(torch)
        importlib.import_module("transformer_engine.pytorch")
        families: dict[str, Any] = {}
        for family, apis in FP8_SUPPORT_APIS.items():
            families[family] = _ask_support(apis, tried if family == FP8_RECIPES[recipe][1] else [])
        answer = families[FP8_RECIPES[recipe][1]]
        if answer is None:
            text = f"no {FP8_RECIPES[recipe][1]} support API in this Transformer Engine"
            return {"ok": False, "tried": tried, "gpu": gpu, "families": families,
                    "error": {"type": "LookupError", "message": text, "text": f"LookupError: {text}",
                              "traceback": [], "needs_device": False}}
        return {"ok": True, **answer, "tried": tried, "gpu": gpu, "families": families}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, tried=tried)


def probe_mxfp8_linear(args: Mapping[str, Any]) -> dict[str, Any]:
    """A tiny te.Linear forward and backward under this TE version's autocast with the MXFP8 recipe.

    ``recipe`` names another class of transformer_engine.common.recipe (Float8CurrentScaling runs on
    Hopper), which is how this code path was tried against real TE on an H200.
    """
    stage = "import"
    try:
        torch = importlib.import_module("torch")

        tep = importlib.import_module("transformer_engine.pytorch")
        recipe_mod = importlib.import_module("transformer_engine.common.recipe")
        name = str(args.get("recipe", "MXFP8BlockScaling"))
        fmt = args.get("format")  # Megatron's --fp8-format: e4m3 -> Format.E4M3, hybrid -> Format.HYBRID
        if fmt:
            recipe = getattr(recipe_mod, name)(fp8_format=getattr(recipe_mod.Format, str(fmt).upper()))
            made = f"{name}(fp8_format=Format.{str(fmt).upper()})"
        else:
            recipe = getattr(recipe_mod, name)()
            made = f"{name}()"
        if hasattr(tep, "autocast"):  # TE >= 2.9
            api = f"transformer_engine.pytorch.autocast(recipe={made})"
            ctx = tep.autocast(enabled=True, recipe=recipe)
        else:  # TE <= 2.8
            api = f"transformer_engine.pytorch.fp8_autocast(fp8_recipe={made})"
            ctx = tep.fp8_autocast(enabled=True, fp8_recipe=recipe)
        n_in, n_out, tokens = int(args.get("in", 128)), int(args.get("out", 128)), int(args.get("tokens", 32))
        stage = "te.Linear"
        layer = tep.Linear(n_in, n_out, params_dtype=torch.bfloat16, device="cuda")
        x = torch.randn(tokens, n_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        stage = "forward"
        with ctx:
            y = layer(x)
        stage = "backward"
        y.float().sum().backward()
        torch.cuda.synchronize()
        finite = bool(torch.isfinite(y).all().item())
        grads = x.grad is not None and layer.weight.grad is not None
        return {"ok": finite and grads, "autocast": api, "shape": list(y.shape), "finite": finite,
                "gradients": grads}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, stage=stage)


# Where get_attention_backend / AttentionParams live, newest first.
ATTENTION_MODULES = (
    "transformer_engine.pytorch.attention.dot_product_attention.utils",  # 2.x
    "transformer_engine.pytorch.attention",  # 1.x: one module
)
SELECTED_RE = re.compile(r"Selected backend = (.+)$")
AVAILABLE_RE = re.compile(r"Available backends = \{(.+)\}$")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _selected(lines: list[str]) -> str | None:
    for line in reversed(lines):
        m = SELECTED_RE.search(line)
        if m:
            return m.group(1).strip()
    return None


def probe_attention(args: Mapping[str, Any]) -> dict[str, Any]:
    """Which TE attention backends a small configuration allows, which TE selects, and a forward with it.

    Runs with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 (set by the caller before TE is imported), so TE logs
    its reasons on the "DotProductAttention" logger; those lines are returned verbatim.
    """
    records = _Records()
    logger = logging.getLogger("DotProductAttention")
    # Attached before TE's own: TE adds its stream handler only when none is present.
    logger.addHandler(records)
    stage = "import"
    out: dict[str, Any] = {"ok": False, "log": records.lines}
    try:
        torch = importlib.import_module("torch")

        tep = importlib.import_module("transformer_engine.pytorch")
        utils = None
        for name in ATTENTION_MODULES:
            utils = _optional_module(name)
            if utils is not None and hasattr(utils, "get_attention_backend"):
                out["api"] = f"{name}.get_attention_backend"
                break
        if utils is None or not hasattr(utils, "get_attention_backend"):
            raise LookupError(f"get_attention_backend not found in {', '.join(ATTENTION_MODULES)}")
        heads, dim, seq, batch = (int(args.get(k, d)) for k, d in
                                  (("heads", 16), ("head_dim", 64), ("seq", 128), ("batch", 2)))
        config = {"qkv_dtype": "bfloat16", "qkv_layout": "sbhd_sbhd_sbhd", "batch_size": batch,
                  "num_heads": heads, "num_gqa_groups": heads, "max_seqlen_q": seq, "max_seqlen_kv": seq,
                  "head_dim": dim, "attn_mask_type": "causal", "is_training": True}
        out["config"] = config
        wanted: dict[str, Any] = {"qkv_type": torch.Tensor, "qkv_dtype": torch.bfloat16,
                                  "qkv_layout": "sbhd_sbhd_sbhd", "batch_size": batch, "num_heads": heads,
                                  "num_gqa_groups": heads, "max_seqlen_q": seq, "max_seqlen_kv": seq,
                                  "head_dim_qk": dim, "head_dim_v": dim, "head_dim": dim,
                                  "attn_mask_type": "causal", "is_training": True}
        params_cls = utils.AttentionParams
        names = {f.name for f in dataclasses.fields(params_cls)}
        stage = "get_attention_backend"
        result = utils.get_attention_backend(params_cls(**{k: v for k, v in wanted.items() if k in names}))
        available = list(result[-1])
        out["allowed"] = {"flash": bool(available[0]), "fused": bool(available[1]),
                          "unfused": bool(available[2])}
        if len(result) >= 6:  # 2.x: (flash, flash_backend, fused, fused_backend, unfused, available)
            chosen = {"flash": result[0], "fused": result[2], "unfused": result[4]}
        else:  # 1.x: (flash, fused, fused_backend, unfused, available)
            chosen = {"flash": result[0], "fused": result[1], "unfused": result[3]}
        out["chosen"] = [k for k, v in chosen.items() if v]
        out["selected"] = _selected(records.lines)
        stage = "DotProductAttention forward/backward"
        n_before = len(records.lines)
        dpa = tep.DotProductAttention(heads, dim, attn_mask_type="causal", qkv_format="sbhd")
        q, k, v = (torch.randn(seq, batch, heads, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        o = dpa(q, k, v)
        o.float().sum().backward()
        torch.cuda.synchronize()
        out["forward_selected"] = _selected(records.lines[n_before:]) or out["selected"]
        out["ok"] = True
        return out
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out.update(failure(exc, stage=stage))
        return out
    finally:
        logger.removeHandler(records)


def probe_hybridep(args: Mapping[str, Any]) -> dict[str, Any]:
    """`from deep_ep import HybridEPBuffer`, where deep_ep lives, and Megatron's HAVE_HYBRIDEP."""
    out: dict[str, Any] = {"ok": True}
    try:
        deep_ep = importlib.import_module("deep_ep")
        out["deep_ep_file"] = getattr(deep_ep, "__file__", None)
        out["deep_ep_version"] = _version_of(deep_ep)
        deep_ep.HybridEPBuffer  # noqa: B018 - the attribute access is the check
        out["hybridep_buffer"] = {"ok": True}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["ok"] = False
        out["hybridep_buffer"] = failure(exc)
    if args.get("megatron", False):
        name = "megatron.core.transformer.moe.fused_a2a"
        try:
            mod = importlib.import_module(name)
            have = getattr(mod, "HAVE_HYBRIDEP", None)
            out["megatron"] = {"ok": have is True, "module": name, "HAVE_HYBRIDEP": have}
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            out["megatron"] = failure(exc, module=name)
        out["ok"] = out["ok"] and out["megatron"]["ok"]
    return out


def _jit_files(folder: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for d, _dirs, files in os.walk(folder):
        for f in files:
            path = os.path.join(d, f)
            try:
                out[os.path.relpath(path, folder)] = os.path.getsize(path)
            except OSError:
                continue
    return out


def probe_hybridep_roundtrip(args: Mapping[str, Any]) -> dict[str, Any]:
    """One rank of the HybridEP round trip: HybridEPBuffer built as Megatron's flex dispatcher builds it,
    one dispatch and one combine on random tokens, combine(dispatch(x)) == x as Megatron's test checks it.

    Mirrors megatron/core/transformer/moe/fused_a2a.py (init_hybrid_ep_buffer, HybridEPDispatch,
    HybridEPCombine) and tests/unit_tests/transformer/moe/test_token_dispatcher.py
    (dispatcher_dropless_test: probs of 1/topk, the permuted tokens scaled by their probs, the
    combined tokens compared with torch.testing.assert_close at bf16's default tolerance) at
    Megatron-LM effebd81, against deep_ep/hybrid_ep_buffer.py of DeepEP 3f601f7. The first round
    JIT-compiles HybridEP's kernels (into <deep_ep>/build/jit); a second round on the same routing
    shows what is left once they are cached, so the difference is the compile time.
    Started by the suite's launcher (prober.probe_ranks): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* set.
    """
    import datetime
    import time

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    out: dict[str, Any] = {"ok": False, "rank": rank, "world_size": world}
    stage = "import torch"
    try:
        torch = importlib.import_module("torch")
        dist = importlib.import_module("torch.distributed")
        torch.cuda.set_device(local)
        out["device"] = {"index": local, "name": str(torch.cuda.get_device_name(local))}
        stage = "init_process_group(nccl)"
        t = time.monotonic()
        dist.init_process_group(backend="nccl", init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=float(args.get("timeout_s", 300))))
        group = dist.new_group(ranks=list(range(world)))
        out["init_s"] = round(time.monotonic() - t, 3)
        stage = "from deep_ep import HybridEPBuffer"
        deep_ep = importlib.import_module("deep_ep")
        jit_dir = os.path.join(os.path.dirname(os.path.abspath(str(deep_ep.__file__))), "build", "jit")
        before = _jit_files(jit_dir)
        hidden, tokens = int(args["hidden_size"]), int(args["tokens"])
        experts_per_rank, topk = int(args["experts_per_rank"]), int(args["topk"])
        num_experts = experts_per_rank * world
        sms = int(torch.cuda.get_device_properties(local).multi_processor_count)
        num_sms = min(int(args["num_sms"]), sms)
        out["config"] = {"hidden_size": hidden, "tokens_per_rank": tokens, "experts_per_rank": experts_per_rank,
                         "num_experts": num_experts, "topk": topk, "num_sms": num_sms, "device_sms": sms,
                         "dtype": "bfloat16", "probs": "float32", "pad_multiple": None}
        stage = "HybridEPBuffer(...)"
        t = time.monotonic()
        # as init_hybrid_ep_buffer: seq_len is the tokens per rank, fp8 dispatch off
        buffer = deep_ep.HybridEPBuffer(group=group, hidden_dim=hidden, max_num_of_tokens_per_rank=tokens,
                                        num_local_experts=experts_per_rank, use_fp8=False,
                                        num_sms_dispatch_api=num_sms, num_sms_combine_api=num_sms)
        torch.cuda.synchronize()
        out["buffer_s"] = round(time.monotonic() - t, 3)
        stage = "random tokens and routing"
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1000 + rank)
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        scores = torch.rand(tokens, num_experts, device="cuda", generator=gen)
        chosen = torch.topk(scores, topk, dim=-1).indices
        routing_map = torch.zeros(tokens, num_experts, device="cuda", dtype=torch.bool).scatter(1, chosen, True)
        probs = torch.ones(tokens, num_experts, device="cuda", dtype=torch.float32) / topk

        def round_trip() -> tuple[Any, dict[str, Any]]:
            t0 = time.monotonic()
            dispatched, dispatched_probs, _, tokens_per_expert, handle = buffer.dispatch_with_permute(
                hidden=x, routing_map=routing_map, probs=probs, scaling_factor=None,
                num_of_experts_per_rank=experts_per_rank, pad_multiple=None, num_dispatched_tokens=None,
                num_permuted_tokens=None, use_host_meta=True)
            torch.cuda.synchronize()
            t1 = time.monotonic()
            permuted = (dispatched * dispatched_probs.unsqueeze(-1)).to(torch.bfloat16)
            combined, _ = buffer.combine_with_unpermute(hidden=permuted, handle=handle, pad_multiple=None,
                                                        num_dispatched_tokens=None)
            torch.cuda.synchronize()
            t2 = time.monotonic()
            return combined, {"dispatch_s": round(t1 - t0, 3), "combine_s": round(t2 - t1, 3),
                              "received_tokens": int(dispatched.shape[0]),
                              "tokens_per_expert": [int(v) for v in tokens_per_expert.tolist()]}

        stage = "first dispatch + combine (JIT-compiles HybridEP's kernels)"
        combined, first = round_trip()
        after = _jit_files(jit_dir)
        stage = "second dispatch + combine (kernels cached)"
        combined2, second = round_trip()
        stage = "combine(dispatch(x)) == x"
        diff = (combined.float() - x.float()).abs()
        out["check"] = {"how": "torch.testing.assert_close(combined, x) (bf16 defaults: rtol 1.6e-2, atol 1e-5), "
                               "as Megatron's dispatcher_dropless_test",
                        "max_abs_diff": float(diff.max().item()), "mean_abs_diff": float(diff.mean().item()),
                        "second_round_equal": bool(torch.equal(combined, combined2))}
        try:
            torch.testing.assert_close(combined, x)
            out["check"]["ok"] = True
        except AssertionError as exc:
            out["check"].update(ok=False, message=str(exc).strip().splitlines()[:6])
        new = {k: v for k, v in after.items() if before.get(k) != v}
        out["timing"] = {"first": first, "second": second,
                         "jit_s": round(first["dispatch_s"] + first["combine_s"]
                                        - second["dispatch_s"] - second["combine_s"], 3)}
        out["jit"] = {"dir": jit_dir, "files_before": len(before), "files_after": len(after),
                      "new_files": sorted(new)[:40], "new_bytes": sum(new.values()),
                      "writable": os.access(jit_dir if os.path.isdir(jit_dir) else os.path.dirname(jit_dir), os.W_OK)}
        stage = "barrier"
        dist.barrier(group=group)
        out["ok"] = bool(out["check"]["ok"])
        try:
            dist.destroy_process_group()
        except BaseException as exc:  # tearing down is not what is checked
            if isinstance(exc, KeyboardInterrupt):
                raise
        return out
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out.update(failure(exc, stage=stage))
        out["rank"] = rank
        return out


def _launch(args: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The parser module and argv (the script's name, then the baked arguments) a megatron probe runs."""
    module = str(args.get("module", "megatron.training.arguments"))
    return module, [str(args.get("argv0", "pretrain_gpt.py")), *(str(a) for a in args["args"])]


def _import_parser(module: str) -> tuple[Any, dict[str, Any] | None]:
    """The parser's module, or None and the import's failure."""
    try:
        return importlib.import_module(module), None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, failure(exc, stage=f"import {module}")


@contextlib.contextmanager
def _argv(argv: list[str], err: io.StringIO) -> Iterator[None]:
    """``sys.argv`` as the launch gives it and stderr captured, for the length of one parse."""
    saved = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stderr(err):
            yield
    finally:
        sys.argv = saved


def _argparse_exit(err: io.StringIO, exc: SystemExit, stage: str) -> dict[str, Any]:
    """argparse's way of refusing an argument: usage and "prog: error: ..." printed, then exit 2."""
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    message = next((ln for ln in reversed(lines) if ": error:" in ln), lines[-1] if lines else "")
    return {"ok": False, "stage": stage, "argparse_error": message, "exit_code": exc.code, "stderr": lines[-10:]}


def probe_megatron_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Parse the baked arguments with the pinned Megatron-LM's own parser (parse_args, no validation).

    Answers also ``legacy_models`` (whether the launch builds Megatron's legacy models; None when the
    namespace has neither use_legacy_models nor use_mcore_models) and ``legacy_models_from`` (that dest).
    """
    module, argv = _launch(args)
    mod, failed = _import_parser(module)
    if failed is not None:
        return failed
    try:
        parse: Callable[..., Any] = mod.parse_args
    except AttributeError as exc:
        return failure(exc, stage=f"import {module}")
    err = io.StringIO()
    try:
        with _argv(argv, err):
            kwargs = {"ignore_unknown_args": False} if "ignore_unknown_args" in inspect.signature(parse).parameters else {}
            ns = parse(**kwargs)
    except SystemExit as exc:
        return _argparse_exit(err, exc, "parse")
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, stage="parse")
    values = vars(ns) if hasattr(ns, "__dict__") else {}
    legacy, legacy_from = _legacy_models(values)
    return {"ok": True, "parser": f"{module}.parse_args", "arguments": len(argv) - 1, "namespace_size": len(values),
            "attention_backend": str(values.get("attention_backend")) if "attention_backend" in values else None,
            "legacy_models": legacy, "legacy_models_from": legacy_from}


def _legacy_models(values: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """Whether the parsed launch builds Megatron's legacy models, and the dest that decided it.

    effebd81: Megatron-Core models are the default and ``--use-legacy-models`` (use_legacy_models) selects
    the legacy ones (``--use-mcore-models`` is a deprecated no-op). Older Megatron-LM (early 2024) had no
    use_legacy_models: legacy models were the default and ``--use-mcore-models`` (use_mcore_models) opted
    in. Neither dest: not known (None, None).
    """
    if "use_legacy_models" in values:
        return bool(values["use_legacy_models"]), "use_legacy_models"
    if "use_mcore_models" in values:
        return not bool(values["use_mcore_models"]), "use_mcore_models"
    return None, None


class _AnsweredProps:
    """What ``torch.cuda.get_device_properties`` answers on a build host: the variant's compute capability."""

    def __init__(self, major: int, minor: int) -> None:
        self.major, self.minor = major, minor
        self.name = f"(no GPU: answered from the variant's gpu_archs, {major}.{minor})"
        self.multi_processor_count = 132
        self.total_memory = 80 * 2**30


def probe_megatron_validate(args: Mapping[str, Any]) -> dict[str, Any]:
    """The pinned Megatron-LM's parse_args, validate_args and the TransformerConfig it builds from them,
    with the environment torchrun gives rank 0 of a world of ``world_size`` (``gpus_per_node`` per node).

    ``answer_capability`` [major, minor]: on a host without a GPU, torch.cuda's device queries that
    validate_args makes (effebd81: get_device_capability under --moe-grouped-gemm, get_device_properties
    for the architecture) are answered with it, and every answer given is listed in ``answered``.
    """
    module, argv = _launch(args)
    world = int(args.get("world_size", 1))
    per_node = int(args.get("gpus_per_node", world) or world)
    saved_env = dict(os.environ)
    os.environ.update(RANK="0", LOCAL_RANK="0", GROUP_RANK="0", WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    try:
        return _megatron_validate(args, module, argv, world)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


def _megatron_validate(args: Mapping[str, Any], module: str, argv: list[str], world: int) -> dict[str, Any]:
    mod, failed = _import_parser(module)
    if failed is not None:
        return failed
    try:
        parse: Callable[..., Any] = mod.parse_args
        validate: Callable[..., Any] = mod.validate_args
    except AttributeError as exc:
        return failure(exc, stage=f"import {module}")
    answered: list[str] = []
    restore: list[tuple[Any, str, Any]] = []
    cap = args.get("answer_capability")
    if cap:
        major, minor = int(cap[0]), int(cap[1])
        try:
            import torch  # type: ignore[import-not-found]
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return failure(exc, stage="import torch")

        def capability(device: Any = None) -> tuple[int, int]:
            answered.append(f"torch.cuda.get_device_capability() -> ({major}, {minor})")
            return (major, minor)

        def properties(device: Any = None) -> _AnsweredProps:
            answered.append(f"torch.cuda.get_device_properties() -> major {major}, minor {minor}")
            return _AnsweredProps(major, minor)

        for name, fn in (("get_device_capability", capability), ("get_device_properties", properties)):
            restore.append((torch.cuda, name, getattr(torch.cuda, name, None)))
            setattr(torch.cuda, name, fn)
    err = io.StringIO()
    stage = "parse"
    try:
        with _argv(argv, err), contextlib.redirect_stdout(io.StringIO()):
            ns = parse()
            stage = "validate"
            validate(ns)
            stage = "config"
            build_config = getattr(mod, "core_transformer_config_from_args", None)
            if build_config is not None:
                build_config(ns)
    except SystemExit as exc:
        out = _argparse_exit(err, exc, stage)
        del out["stderr"]
        return {**out, "answered": answered, "world_size": world}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, stage=stage, answered=answered, world_size=world)
    finally:
        for obj, name, old in restore:
            setattr(obj, name, old)
    values = vars(ns) if hasattr(ns, "__dict__") else {}
    derived = {k: values.get(k) for k in ("data_parallel_size", "virtual_pipeline_model_parallel_size",
                                          "transformer_pipeline_model_parallel_size") if k in values}
    return {"ok": True, "stage": "config" if "core_transformer_config_from_args" in dir(mod) else "validate",
            "answered": answered, "world_size": world, "derived": {k: v for k, v in derived.items()
                                                                   if isinstance(v, int | None)}}


def probe_pip_check(args: Mapping[str, Any]) -> dict[str, Any]:
    """``python -m pip check`` of this interpreter, and the base's run recorded in the image (``baseline``)."""
    import subprocess

    baseline_file = str(args.get("baseline") or "")
    baseline = None
    if baseline_file:
        try:
            with open(baseline_file, encoding="utf-8", errors="replace") as f:
                baseline = f.read()
        except OSError:
            baseline = None
    p = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                       capture_output=True, text=True, timeout=float(args.get("timeout", 120)), check=False)
    return {"ok": True, "returncode": p.returncode, "output": p.stdout + p.stderr, "baseline": baseline,
            "baseline_file": baseline_file}


PROBES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "distributions": probe_distributions,
    "pip_check": probe_pip_check,
    "megatron_validate": probe_megatron_validate,
    "import": probe_import,
    "module_dist": probe_module_dist,
    "locate": probe_locate,
    "dist_files": probe_dist_files,
    "gpu": probe_gpu,
    "runtime": probe_runtime,
    "mxfp8_support": probe_mxfp8_support,
    "mxfp8_linear": probe_mxfp8_linear,
    "fp8_support": probe_fp8_support,
    "attention": probe_attention,
    "hybridep": probe_hybridep,
    "hybridep_roundtrip": probe_hybridep_roundtrip,
    "megatron_args": probe_megatron_args,
}


def run(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return PROBES[name](args)
    except BaseException as exc:  # a probe must answer, whatever the code under test does
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failure(exc, stage="probe")


def child_main(argv: list[str]) -> int:
    """Entry of a probe process: ``NAME ARGS_JSON_FILE RESULT_JSON_FILE``."""
    name, args_path, out_path = argv
    with open(args_path, encoding="utf-8") as f:
        args = json.load(f)
    result = run(name, args)
    tmp = out_path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)
    os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running atexit hooks or destructors of what the probe imported: a CUDA
    # library tearing down after the answer is written must not turn the answer into a crash.
    os._exit(0)
