"""A tiny Llama as ExecuTorch ships language models, shared by the bundled tiny_llama models: ExecuTorch's own
Llama definition (executorch.examples.models.llama), a KV cache carried between calls in the program's mutable
buffers, and ``forward(tokens, input_pos)`` with a dynamic number of tokens; with ExecuTorch's source
transformations for XNNPACK (the custom SDPA op ``llama::custom_sdpa`` and the custom KV-cache update
``llama::update_cache``) or with its reference attention (portable kernels only).

Random weights (seeded): the graph, not the text, is what the gate measures. Two layers of width 64 export
in seconds and count in seconds under emulation. The example inputs are a prefill of PREFILL tokens at
position 0; the KV cache's first call fills it.
"""

import torch
from torch import nn

SHAPE = "2 layers, d=64, 4 heads (2 KV), vocab 256, context 64"

DIM, LAYERS, HEADS, KV_HEADS, VOCAB, MAX_LEN, PREFILL = 64, 2, 4, 2, 256, 64, 8


class TokensAndPosition(nn.Module):
    """``forward(tokens, input_pos)`` over ExecuTorch's Transformer, whose forward takes the position in a dict:
    the signature ExecuTorch's llama runner calls."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.transformer(tokens, {"input_pos": input_pos})


def build(custom_ops: bool) -> nn.Module:
    """ExecuTorch's Llama with a KV cache; ``custom_ops``: with ExecuTorch's custom SDPA and KV-cache update."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.examples.models.llama.source_transformation.custom_kv_cache import (
        replace_kv_cache_with_custom_kv_cache,
    )
    from executorch.examples.models.llama.source_transformation.sdpa import replace_sdpa_with_custom_op

    args = ModelArgs(
        dim=DIM,
        n_layers=LAYERS,
        n_heads=HEADS,
        n_kv_heads=KV_HEADS,
        vocab_size=VOCAB,
        multiple_of=32,
        max_seq_len=MAX_LEN,
        max_context_len=MAX_LEN,
        use_kv_cache=True,
        use_sdpa_with_kv_cache_op=custom_ops,
        enable_dynamic_shape=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transformer = construct_transformer(args).eval()
    if custom_ops:
        transformer = replace_kv_cache_with_custom_kv_cache(transformer)
        transformer = replace_sdpa_with_custom_op(transformer)
    return TokensAndPosition(transformer).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    tokens = torch.randint(0, VOCAB, (1, PREFILL), generator=torch.Generator().manual_seed(1), dtype=torch.long)
    return (tokens, torch.tensor([0], dtype=torch.long))


def get_dynamic_shapes() -> tuple:
    """Any number of tokens per call, 1 (a decode step) up to the context length (a prefill), as ExecuTorch's LLM
    export makes it: one program serves both phases."""
    seq = torch.export.Dim("seq_len", min=1, max=MAX_LEN - 1)
    return ({1: seq}, None)
