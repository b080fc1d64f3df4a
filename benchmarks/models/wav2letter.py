"""wav2letter (Collobert et al., 2016) as the executorch wheel's example builds it (`examples/models/wav2letter`:
torchaudio's `Wav2Letter(num_classes=4096)` on a waveform, batch 10 x 1 x 700 samples), random weights.

Written for pytest-sme2 from torchaudio's layer list, because importing torchaudio from the index replaces the CPU
torch with a CUDA build (and then breaks `import transformers`); no code is taken from it. The same eleven 1-D
convolutions (34.5 M parameters, about 1.9 GFLOP an inference), each followed by ReLU, and the log-softmax over the
classes. What this model tests: XNNPACK packs 34 M weights at load, which is most of a counted run's instructions.
"""

import torch
from torch import nn

DESCRIPTION = "wav2letter (the wheel's example: 4096 classes, batch 10 x 1 x 700 waveform), random weights"
CLASSES = 4096


def _layers() -> list[nn.Module]:
    shapes = [(1, 250, 250, 160, 45), (250, 250, 48, 2, 23)] + [(250, 250, 7, 1, 3)] * 7
    shapes += [(250, 2000, 32, 1, 16), (2000, 2000, 1, 1, 0), (2000, CLASSES, 1, 1, 0)]
    layers: list[nn.Module] = []
    for channels_in, channels_out, kernel, stride, padding in shapes:
        layers += [nn.Conv1d(channels_in, channels_out, kernel, stride=stride, padding=padding), nn.ReLU()]
    return layers


class Wav2Letter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.acoustic_model = nn.Sequential(*_layers())

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return nn.functional.log_softmax(self.acoustic_model(waveform), dim=1)


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Wav2Letter().eval()


def get_example_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(10, 1, 700, generator=torch.Generator().manual_seed(0)),)
