"""ExecuTorch's own example 'conv1d', random weights:
executorch.examples.models.toy_model.Conv1dModule.
"""

import torch
from executorch.examples.models.toy_model import Conv1dModule


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return Conv1dModule().get_eager_model().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)  # the same inputs every time
        return tuple(Conv1dModule().get_example_inputs())
