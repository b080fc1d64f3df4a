"""Published shapes of small LLM families as params files of ExecuTorch's llama model class: what ``export_llm``
exports with random weights when the family's own model class cannot be used here.

Why: the executorch wheel ships no params files for smollm2 or qwen3, and ExecuTorch's smollm2 and qwen model
classes import torchtune even without a checkpoint (torchtune 0.6.1 does not import beside torchao 0.18; issue
65). Their transformers are the llama one with other shapes and switches (grouped-query attention, QK-norm,
QKV bias), which ExecuTorch's own llama ``ModelArgs`` expresses, so ``base.model_class='llama3'`` with these
params exports the same graph of operators, with random weights. Each shape is the family's published model
configuration (Hugging Face ``config.json``), written in ModelArgs' names; weight tying is not expressed (the
output projection is its own weight: the same work, more memory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_sme2.errors import UsageError
from pytest_sme2.system.safe_files import write_file

FAMILIES: dict[str, dict[str, Any]] = {
    # HuggingFaceTB/SmolLM2-135M: hidden 576, 30 layers, 9 heads, 3 KV heads, MLP 1536, vocab 49152, theta 1e5
    "smollm2_135m": {
        "dim": 576,
        "n_layers": 30,
        "n_heads": 9,
        "n_kv_heads": 3,
        "hidden_dim": 1536,
        "vocab_size": 49152,
        "norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "use_scaled_rope": False,
    },
    # Qwen/Qwen2.5-0.5B: hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocab 151936, QKV bias
    "qwen2_5_0_5b": {
        "dim": 896,
        "n_layers": 24,
        "n_heads": 14,
        "n_kv_heads": 2,
        "hidden_dim": 4864,
        "vocab_size": 151936,
        "norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "use_scaled_rope": False,
        "attention_qkv_bias": True,
        "use_hf_rope": True,
    },
    # Qwen/Qwen3-0.6B: hidden 1024, 28 layers, 16 heads of 128, 8 KV heads, MLP 3072, vocab 151936, QK-norm
    "qwen3_0_6b": {
        "dim": 1024,
        "n_layers": 28,
        "n_heads": 16,
        "head_dim": 128,
        "n_kv_heads": 8,
        "hidden_dim": 3072,
        "vocab_size": 151936,
        "norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "use_scaled_rope": False,
        "use_hf_rope": True,
        "use_qk_norm": True,
        "qk_norm_before_rope": True,
    },
}


# ExecuTorch's model classes (base.model_class) whose transformer one of FAMILIES is, for the error of an export
# whose model class needs a package this environment lacks (llm_export.py)
FAMILY_OF_CLASS = {"smollm2": "smollm2_135m", "qwen2_5_0_5b": "qwen2_5_0_5b", "qwen3_0_6b": "qwen3_0_6b"}


def llm_params(family: str, folder: str | Path, n_layers: int | None = None) -> Path:
    """Write ``<folder>/<family>.json``, the family's published shape as params of ExecuTorch's llama model class
    (``n_layers``: fewer layers for a quicker first test; every layer is alike), and return its path for
    ``export_llm({"base.model_class": "llama3", "base.params": str(path), ...})``."""
    if family not in FAMILIES:
        raise UsageError(f"llm_params(): no published shape of {family!r} here; known: {', '.join(FAMILIES)}")
    params = dict(FAMILIES[family])
    if n_layers is not None:
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise UsageError(f"llm_params(): n_layers={n_layers!r} must be a whole number of at least 1")
        params["n_layers"] = n_layers
    path = Path(folder) / f"{family}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file(path, json.dumps(params, indent=1) + "\n")
