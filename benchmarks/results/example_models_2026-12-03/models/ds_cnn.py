"""ExecuTorch's own example 'ds_cnn', random weights:
executorch.examples.models.mlperf_tiny.ds_cnn.DSCNNKWSModel.
"""

import torch
from executorch.examples.models.mlperf_tiny.ds_cnn import DSCNNKWSModel


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return DSCNNKWSModel().get_eager_model().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the same inputs every time
        return tuple(DSCNNKWSModel().get_example_inputs())
