"""ExecuTorch's own example 'resnet8', random weights:
executorch.examples.models.mlperf_tiny.resnet8.ResNet8Model.
"""

import torch
from executorch.examples.models.mlperf_tiny.resnet8 import ResNet8Model


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return ResNet8Model().get_eager_model().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the same inputs every time
        return tuple(ResNet8Model().get_example_inputs())
