"""ExecuTorch's own example 'mobilenet_v1_025', random weights:
executorch.examples.models.mlperf_tiny.mobilenet_v1_025.MobileNetV1025Model.
"""

import torch
from executorch.examples.models.mlperf_tiny.mobilenet_v1_025 import MobileNetV1025Model


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return MobileNetV1025Model().get_eager_model().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the same inputs every time
        return tuple(MobileNetV1025Model().get_example_inputs())
