"""MobileNetV3-Small (Howard et al., 2019) in pure PyTorch, random weights.

Same architecture as torchvision's mobilenet_v3_small (inverted residuals,
squeeze-excitation, hardswish/hardsigmoid, 576 -> 1024 -> 1000 classifier),
defined here because torchvision is not installable next to torch 2.13 CPU.
"""

import torch
from torch import nn

DESCRIPTION = "MobileNetV3-Small, 1x3x224x224, random weights"

# input channels, kernel, expanded channels, output channels, squeeze-excite, activation, stride
_BLOCKS = [
    (16, 3, 16, 16, True, "RE", 2),
    (16, 3, 72, 24, False, "RE", 2),
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1),
    (48, 5, 144, 48, True, "HS", 1),
    (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1),
    (96, 5, 576, 96, True, "HS", 1),
]


def _make_divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, activation: type[nn.Module] | None = None
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=0.001, momentum=0.01),
    ]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _make_divisible(channels // 4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn(cin, expanded, 1, activation=activation))
        layers.append(_conv_bn(expanded, expanded, kernel, stride, groups=expanded, activation=activation))
        if se:
            layers.append(SqueezeExcitation(expanded))
        layers.append(_conv_bn(expanded, cout, 1))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.residual else out


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, 2, activation=nn.Hardswish)]
        layers += [InvertedResidual(*cfg) for cfg in _BLOCKS]
        layers.append(_conv_bn(96, 576, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, num_classes)
        )
        for m in self.modules():  # torchvision's initialisation scheme
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _calibrate_batchnorm(model: nn.Module, samples: int = 4) -> None:
    """Set BatchNorm running statistics from one pass over random images.

    With torchvision's initialisation and identity BatchNorm statistics, the
    activations of an untrained network shrink about tenfold per block and the
    logits end up near 1e-15: fp16 underflows and int8 quantizes everything to
    zero. Statistics taken from a batch (as a trained network would have) keep
    every layer near unit scale, so all dtypes see realistic values.

    The pass runs on one thread: a float reduction's result depends on how many
    threads share it, and these statistics become weights of the program, whose
    bytes are the export cache key. With the machine's thread count, a 1-thread
    and a 2-thread process built different weights (and so different keys).
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: after one batch, exactly its statistics
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            model(torch.randn(samples, 3, 224, 224))
    finally:
        torch.set_num_threads(threads)
    for bn in bns:
        bn.momentum = 0.01
    model.eval()


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = MobileNetV3Small()
        _calibrate_batchnorm(model)
        return model.eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(2)
    return [(torch.randn(1, 3, 224, 224, generator=gen),) for _ in range(4)]
