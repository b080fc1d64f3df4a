"""ExecuTorch's own example LSTM (executorch.examples.models.lstm), random weights.

The example's inputs are (x, (h0, c0)); they are flattened to (x, h0, c0) because the runner's input file takes
a flat list of tensors (nested inputs fail there: AttributeError: 'tuple' object has no attribute 'detach').
"""

import torch
from executorch.examples.models.lstm import LSTMModel


class FlatLSTM(torch.nn.Module):
    def __init__(self, lstm: torch.nn.Module) -> None:
        super().__init__()
        self.lstm = lstm

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor):
        return self.lstm(x, (h0, c0))


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights every time
        return FlatLSTM(LSTMModel().get_eager_model()).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    with torch.random.fork_rng():
        torch.manual_seed(1)
        x, (h0, c0) = LSTMModel().get_example_inputs()
        return (x, h0, c0)
