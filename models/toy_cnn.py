"""A small CNN (conv, ReLU, max-pool, global pool, linear): the fastest model, for smoke tests."""

import torch
from torch import nn

DESCRIPTION = "toy CNN: 3 conv blocks + linear, 1x3x32x32"


class ToyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ToyCNN().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)),)


def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(2)
    return [(torch.randn(1, 3, 32, 32, generator=gen),) for _ in range(8)]
