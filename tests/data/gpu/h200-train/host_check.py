"""Host check of make_bert_data.py without torch (the host has none): Megatron-LM's real indexed_dataset.py,
tokenizer.py (_BertWordPieceTokenizer) and bert_tokenization.py run, with a stand-in `torch` module (only
torch.utils.data.Dataset and torch.Tensor are touched on these paths), megatron.core.utils reduced to
log_single_rank (the real one imports parallel_state), and the package __init__ files of
megatron, megatron.core, megatron.core.datasets and megatron.training skipped (they import the models).

    python3 host_check.py MEGATRON_TREE PREFIX   # six on PYTHONPATH (bert_tokenization imports it)

On the device none of this is needed: make_bert_data.py imports Megatron normally.
"""

from __future__ import annotations

import os
import sys
import types


def _package(name: str, path: str) -> None:
    mod = types.ModuleType(name)
    mod.__path__ = [path]
    sys.modules[name] = mod


def main(tree: str, prefix: str) -> int:
    torch = types.ModuleType("torch")
    torch.__path__ = []
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")
    data.Dataset = object  # type: ignore[attr-defined]
    utils.data = data  # type: ignore[attr-defined]
    torch.utils = utils  # type: ignore[attr-defined]
    torch.Tensor = object  # type: ignore[attr-defined]
    sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.data": data})
    for name in ("megatron", "megatron.core", "megatron.core.datasets", "megatron.training",
                 "megatron.training.tokenizer"):
        _package(name, os.path.join(tree, *name.split(".")))
    cu = types.ModuleType("megatron.core.utils")  # only log_single_rank is used by indexed_dataset.py
    cu.log_single_rank = lambda logger, level, msg, *a, **k: logger.log(level, msg)  # type: ignore[attr-defined]
    sys.modules["megatron.core.utils"] = cu
    # tokenizer.py imports these two for other tokenizer types; they pull in the multimodal models.
    for name, attrs in (("megatron.training.tokenizer.multimodal_tokenizer", ("MultimodalTokenizer",)),
                        ("megatron.training.tokenizer.sft_tokenizer", ("SFTTokenizer",))):
        mod = types.ModuleType(name)
        for a in attrs:
            setattr(mod, a, type(a, (), {}))
        sys.modules[name] = mod
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_bert_data

    return make_bert_data.main([prefix, "--documents", "2000"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
