"""One fully connected layer, 100 x 640 -> 1280, fp32: the layer of a published LiteRT SME2 measurement.

Published (LiteRT, XNNPACK, one thread, an SME2 Android phone): 1.269 ms without SME2 and 0.382 ms with it,
129 -> 429 GFLOPS for its 164 MFLOP (docs/device_model.md, "The fully connected layer"). Random weights; the
work does not depend on them.
"""

from __future__ import annotations

import torch

DESCRIPTION = "one fully connected layer, 100x640 -> 1280, fp32, random weights (benchmarks/models)"


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Linear(640, 1280).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(100, 640, generator=torch.Generator().manual_seed(1)),)
