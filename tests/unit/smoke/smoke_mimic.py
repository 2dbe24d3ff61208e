"""Module trees that MIMIC the layouts of torch, Transformer Engine, DeepEP and Megatron-LM, for tests.

Written into temporary folders by the tests, never into an image and never installed: they are
stand-ins with the import paths, names and return shapes the smoke probes rely on (UPSTREAM.md lists
them per TE version), and just enough behaviour to drive each branch of the checks. None of them
contains any code of the real projects.

Layouts:
- TE "old" (<= 2.8): transformer_engine.pytorch.fp8.check_mxfp8_support, fp8_autocast(fp8_recipe=).
- TE "new" (>= 2.9): transformer_engine.pytorch.is_mxfp8_available(return_reason=),
  transformer_engine.pytorch.quantization.check_mxfp8_support, autocast(recipe=), fp8.py a
  deprecated re-export.
"""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def dist_info(root: Path, name: str, version: str) -> None:
    """A minimal .dist-info so that importlib.metadata sees the distribution."""
    folder = root / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def torch(root: Path, *, available: bool = True, capability: tuple[int, int] = (9, 0),
          name: str = "NVIDIA H200", cudnn: int = 91400, version: str = "2.9.0+mimic", count: int = 1) -> None:
    """A torch mimic: just the calls the probes make (cuda queries, randn, a tensor with backward)."""
    write(root, "torch/__init__.py", f"""
        # MIMIC of torch for smoke unit tests: not torch.
        import types as _types
        __version__ = {version!r}
        bfloat16 = "bfloat16"
        float32 = "float32"

        class Tensor:
            def __init__(self, shape, requires_grad=False, value=1.0):
                self.shape = tuple(shape)
                self.requires_grad = requires_grad
                self.grad = None
                self._parents = []
                self.value = value

            def float(self):
                out = Tensor(self.shape, value=self.value)
                out._parents = [self]
                return out

            def sum(self):
                out = Tensor((), value=self.value)
                out._parents = [self]
                return out

            def backward(self):
                stack = [self]
                while stack:
                    t = stack.pop()
                    if t.requires_grad:
                        t.grad = Tensor(t.shape)
                    stack.extend(t._parents)

            def all(self):
                return self

            def item(self):
                return bool(self.value == self.value and abs(self.value) != float("inf"))

        def randn(*shape, device=None, dtype=None, requires_grad=False):
            return Tensor(shape, requires_grad=requires_grad)

        def isfinite(t):
            return t

        class _Cuda:
            @staticmethod
            def is_available():
                return {available!r}

            @staticmethod
            def device_count():
                return {count!r} if {available!r} else 0

            @staticmethod
            def get_device_name(i=0):
                return {name!r}

            @staticmethod
            def get_device_capability(i=0):
                return {capability!r}

            @staticmethod
            def current_device():
                return 0

            @staticmethod
            def synchronize():
                pass

        cuda = _Cuda()
        version = _types.SimpleNamespace(cuda="13.0")
        backends = _types.SimpleNamespace(cudnn=_types.SimpleNamespace(version=lambda: {cudnn!r}))
    """)
    dist_info(root, "torch", version)


def transformer_engine(root: Path, *, layout: str, version: str, dist: str = "transformer_engine",
                       cudnn: tuple[int, int, int] = (9, 14, 0), fused_ok: bool = True,
                       linear_nan: bool = False, recipe: bool = True) -> None:
    """A TE mimic in the 'old' (<= 2.8) or 'new' (>= 2.9) layout; see the module docstring."""
    assert layout in ("old", "new")
    dist_info(root, dist, version)
    write(root, "transformer_engine/__init__.py", f"""
        # MIMIC of Transformer Engine's layout ({layout}) for smoke unit tests: not Transformer Engine.
        from importlib import metadata
        import transformer_engine.common
        __version__ = str(metadata.version({dist!r}))
    """)
    write(root, "transformer_engine/common/__init__.py", "")
    recipes = ("import enum\n\n\nclass Format(enum.Enum):\n    E4M3 = 'e4m3'\n    HYBRID = 'hybrid'\n\n\n"
               "class _Recipe:\n    def __init__(self, fp8_format=Format.HYBRID, **kw):\n"
               "        self.fp8_format = fp8_format\n\n\n"
               "class DelayedScaling(_Recipe):\n    pass\n\n\nclass Float8CurrentScaling(_Recipe):\n    pass\n\n\n"
               "class Float8BlockScaling(_Recipe):\n    pass\n")
    if recipe:
        recipes += "\n\nclass MXFP8BlockScaling(_Recipe):\n    pass\n"
    write(root, "transformer_engine/common/recipe.py", recipes)
    support = """
        import torch

        def check_fp8_support():
            if torch.cuda.get_device_capability() >= (9, 0):
                return True, ""
            return False, "Device compute capability 8.9 or higher required for FP8 execution."

        def check_fp8_block_scaling_support():
            if torch.cuda.get_device_capability() >= (9, 0) and float(torch.version.cuda) >= 12.9:
                return True, ""
            return False, "FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9."

        def check_mxfp8_support():
            cc = torch.cuda.get_device_capability()
            if cc >= (12, 0):
                return False, "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet."
            if cc >= (10, 0):
                return True, ""
            return False, "Device compute capability 10.0 or higher required for MXFP8 execution."
    """
    state = """
        ACTIVE = []

        class _Autocast:
            def __init__(self, recipe):
                self.recipe = recipe

            def __enter__(self):
                ACTIVE.append(self.recipe)

            def __exit__(self, *exc):
                ACTIVE.pop()
    """
    linear = f"""
        import torch
        from transformer_engine.pytorch import _state

        class Linear:
            def __init__(self, n_in, n_out, params_dtype=None, device=None):
                self.weight = torch.Tensor((n_out, n_in), requires_grad=True)

            def __call__(self, x):
                if not _state.ACTIVE:
                    raise RuntimeError("mimic Linear called outside autocast")
                out = torch.Tensor((x.shape[0], self.weight.shape[0]), value={"float('nan')" if linear_nan else "1.0"})
                out._parents = [x, self.weight]
                return out
    """
    write(root, "transformer_engine/pytorch/_state.py", state)
    write(root, "transformer_engine/pytorch/module.py", linear)
    write(root, "transformer_engine/pytorch/utils.py", f"""
        def get_cudnn_version():
            return {cudnn!r}
    """)
    attention_utils(root, "transformer_engine/pytorch/attention/dot_product_attention/utils.py", fused_ok=fused_ok)
    write(root, "transformer_engine/pytorch/attention/__init__.py", "")
    write(root, "transformer_engine/pytorch/attention/dot_product_attention/__init__.py", "")
    if layout == "new":
        write(root, "transformer_engine/pytorch/quantization.py", support)
        write(root, "transformer_engine/pytorch/fp8.py", """
            import warnings
            warnings.warn("transformer_engine.pytorch.fp8 is deprecated", DeprecationWarning, stacklevel=2)
            from transformer_engine.pytorch.quantization import check_mxfp8_support
        """)
        write(root, "transformer_engine/pytorch/__init__.py", """
            import torch
            from transformer_engine.pytorch.module import Linear
            from transformer_engine.pytorch.quantization import (
                check_fp8_block_scaling_support, check_fp8_support, check_mxfp8_support)
            from transformer_engine.pytorch import _state
            from transformer_engine.pytorch.attention.dot_product_attention.utils import DotProductAttention

            def is_mxfp8_available(return_reason=False):
                ok, reason = check_mxfp8_support()
                return (ok, reason) if return_reason else ok

            def is_fp8_available(return_reason=False):
                ok, reason = check_fp8_support()
                return (ok, reason) if return_reason else ok

            def is_fp8_block_scaling_available(return_reason=False):
                ok, reason = check_fp8_block_scaling_support()
                return (ok, reason) if return_reason else ok

            def autocast(enabled=True, calibrating=False, recipe=None, amax_reduction_group=None):
                return _state._Autocast(recipe)
        """)
    else:
        write(root, "transformer_engine/pytorch/fp8.py", support)
        write(root, "transformer_engine/pytorch/__init__.py", """
            import torch
            from transformer_engine.pytorch.module import Linear
            from transformer_engine.pytorch import _state
            from transformer_engine.pytorch.attention.dot_product_attention.utils import DotProductAttention

            def fp8_autocast(enabled=True, calibrating=False, fp8_recipe=None, fp8_group=None):
                return _state._Autocast(fp8_recipe)
        """)


def attention_utils(root: Path, rel: str, *, fused_ok: bool) -> None:
    """get_attention_backend + AttentionParams with TE 2.x's return shape and debug log lines."""
    write(root, rel, f"""
        # MIMIC of TE's backend selection for smoke unit tests.
        import dataclasses
        import logging
        import os
        import torch

        @dataclasses.dataclass
        class AttentionParams:
            qkv_type: object = None
            qkv_dtype: object = None
            qkv_layout: str = "sbh3d"
            batch_size: int = 1
            num_heads: int = 16
            num_gqa_groups: int = 16
            max_seqlen_q: int = 128
            max_seqlen_kv: int = 128
            head_dim_qk: int = 64
            head_dim_v: int = 64
            attn_mask_type: str = "no_mask"
            is_training: bool = True

        def get_attention_backend(params):
            logger = logging.getLogger("DotProductAttention")
            if os.getenv("NVTE_DEBUG") == "1" and os.getenv("NVTE_DEBUG_LEVEL") == "2":
                logger.setLevel(logging.DEBUG)
            flash = os.getenv("NVTE_FLASH_ATTN", "1") == "1" and False  # flash-attn not installed
            fused = os.getenv("NVTE_FUSED_ATTN", "1") == "1" and {fused_ok!r}
            unfused = os.getenv("NVTE_UNFUSED_ATTN", "1") == "1"
            logger.debug("Disabling FlashAttention 2 as flash-attn is not installed")
            logger.debug("Available backends = {{FlashAttention=%s, FusedAttention=%s%s, UnfusedDotProductAttention=%s}}",
                         flash, fused, " (sub-backend 1)" if fused else "", unfused)
            sel_fused = fused
            sel_unfused = unfused and not fused
            selected = "FusedAttention (sub-backend 1)" if sel_fused else ("UnfusedDotProductAttention" if sel_unfused else "NoBackend")
            logger.debug("Selected backend = %s", selected)
            return (False, None, sel_fused, 1 if sel_fused else None, sel_unfused, [flash, fused, unfused])

        class DotProductAttention:
            def __init__(self, heads, dim, attn_mask_type="causal", qkv_format="sbhd"):
                self.params = AttentionParams(num_heads=heads, head_dim_qk=dim, head_dim_v=dim)

            def __call__(self, q, k, v):
                result = get_attention_backend(self.params)
                if not any(result[-1]):
                    raise ValueError("No dot product attention backend is available for the provided inputs.")
                out = torch.Tensor(q.shape)
                out._parents = [q, k, v]
                return out
    """)


def deep_ep(root: Path, *, hybrid: bool, version: str = "1.2.1+3f601f7", broken_extension: str | None = None) -> None:
    """DeepEP's package shape: deep_ep exporting Buffer (and HybridEPBuffer on the hybrid-ep branch)."""
    dist_info(root, "deep_ep", version)
    body = "# MIMIC of DeepEP's layout for smoke unit tests: not DeepEP.\n"
    if broken_extension:
        body += f"raise ImportError({broken_extension!r})\n"
    body += "class Buffer:\n    pass\n"
    if hybrid:
        body += "\n\nclass HybridEPBuffer:\n    pass\n"
    write(root, "deep_ep/__init__.py", body)


def megatron(root: Path, *, flags: tuple[str, ...] = ("--num-layers", "--attention-backend"),
             have_hybridep: bool = True) -> None:
    """Megatron-LM's paths: megatron.training.arguments.parse_args and moe.fused_a2a.HAVE_HYBRIDEP."""
    write(root, "megatron/__init__.py", "# MIMIC of Megatron-LM's layout for smoke unit tests: not Megatron-LM.\n")
    write(root, "megatron/training/__init__.py", "")
    adds = "\n".join(f"    parser.add_argument({f!r})" for f in flags)
    write(root, "megatron/training/arguments.py", "import argparse\n\n\n"
          "def parse_args(extra_args_provider=None, ignore_unknown_args=False):\n"
          "    parser = argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)\n"
          f"{adds}\n"
          "    if ignore_unknown_args:\n"
          "        return parser.parse_known_args()[0]\n"
          "    return parser.parse_args()\n")
    write(root, "megatron/core/__init__.py", "")
    write(root, "megatron/core/transformer/__init__.py", "")
    write(root, "megatron/core/transformer/moe/__init__.py", "")
    write(root, "megatron/core/transformer/moe/fused_a2a.py", """
        try:
            from deep_ep import HybridEPBuffer
            HAVE_HYBRIDEP = True
        except ImportError:
            HAVE_HYBRIDEP = False
    """ if have_hybridep else "HAVE_HYBRIDEP = False\n")
