"""A GEMM-bound MLP: batch 64 x 512 features through four Linear layers.

Batch 64 keeps it a real GEMM (not a GEMV), which is where SME2's outer
products pay off most.
"""

import torch
from torch import nn

DESCRIPTION = "GEMM-bound MLP: 64x512 -> 1024 -> 1024 -> 512 -> 256"


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Linear(512, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
        ).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(64, 512, generator=torch.Generator().manual_seed(1)),)


def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(2)
    return [(torch.randn(64, 512, generator=gen),) for _ in range(4)]
