"""Silero VAD 16 kHz as the executorch wheel's example re-implements it (examples/models/silero_vad), random weights.

The example loads the official JIT weights (export_silero_vad.py --jit-model); its eager class alone needs none.
"""

import torch
from executorch.examples.models.silero_vad.export_silero_vad import HIDDEN_DIM, INPUT_SIZE, SileroVAD16k


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return SileroVAD16k().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(1, INPUT_SIZE, generator=g), torch.zeros(2, 1, HIDDEN_DIM))
