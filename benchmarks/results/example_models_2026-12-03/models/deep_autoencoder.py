"""ExecuTorch's own example 'deep_autoencoder', random weights:
executorch.examples.models.mlperf_tiny.deep_autoencoder.DeepAutoEncoderModel.
"""

import torch
from executorch.examples.models.mlperf_tiny.deep_autoencoder import DeepAutoEncoderModel


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return DeepAutoEncoderModel().get_eager_model().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the same inputs every time
        return tuple(DeepAutoEncoderModel().get_example_inputs())
