"""The reference program: a fixed workload run next to every timed run, so latency can be gated relative to it.

Why: on a shared or virtual machine the whole CPU gets slower and faster over
seconds (other jobs, the hypervisor's neighbours): mobilenet_v3_small's
median moved 3.2-8.6 ms between processes here, far more than the 15%
slowdowns a regression gate must catch. Such drift slows any work running at
the same moment about alike, so the runners run one inference of this fixed
program right before each timed inference of the model under test, and the
baseline gate compares ``model time / reference time`` per run pair. Measured
here (benchmarks/results/notebook.md, "Regression gate"): that ratio's spread between
processes was a few percent where raw medians spread by a factor of two.

The program is a GEMM-bound MLP (batch 64, 512 -> 1024 -> 1024 -> 512 -> 256,
fp32, XNNPACK), about as long as mobilenet_v3_small on an x86 core (3-4 ms).
It is part of pytest-sme2, not of the user's models, so a model change never
changes it; a different torch/executorch re-exports it, and baselines from
another version are flagged anyway. Its definition must stay fixed: changing
it changes every relative latency in every stored baseline.
"""

from __future__ import annotations

NAME = "pytest_sme2.reference_mlp"
DESCRIPTION = "pytest-sme2's fixed reference workload: fp32 MLP 64x512 -> 1024 -> 1024 -> 512 -> 256 (XNNPACK)"


def get_eager_model():  # noqa: ANN201 - torch type, imported lazily
    import torch
    from torch import nn

    with torch.random.fork_rng():
        torch.manual_seed(20261123)
        return nn.Sequential(
            nn.Linear(512, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
        ).eval()


def get_example_inputs() -> tuple:
    import torch

    return (torch.randn(64, 512, generator=torch.Generator().manual_seed(20261123)),)
