"""benchmarks/models/squeeze_sam.py, the model the device model is compared with published results on:
it loads through the registry, runs, and has the architecture's work (counted here from the layers, by hand:
not from the module's own numbers)."""

from __future__ import annotations

from pathlib import Path

import torch

from pytest_sme2.model.registry import ModelRegistry

REPO = Path(__file__).resolve().parents[2]


def _macs_by_hand() -> int:
    """Multiply-accumulates of the convolutions of SqueezeSAM's U-Net at a 512x512 encoder input (patch 2 ->
    256x256), from its published sizes: encoder levels 64, 128, 128, 128, 128, 164, 256, 256 (each level two
    3x3 convolutions, halving the side from the second level on), decoder levels joining the upsampled
    level below (half its channels) with the skip connection."""
    dims = [64, 128, 128, 128, 128, 164, 256, 256]
    side = [256 >> i for i in range(8)]
    macs = 256 * 256 * 64 * 5 * 2 * 2  # the 2x2 patch embedding, 5 input channels
    macs += side[0] ** 2 * 9 * (64 * dims[0] + dims[0] * dims[0])
    for i in range(1, 8):
        macs += side[i] ** 2 * 9 * (dims[i - 1] * dims[i] + dims[i] * dims[i])
    previous = dims[-1]
    for i in range(6, -1, -1):  # decoder: upsample linear (previous -> 4 * previous/2 per input pixel), convs
        macs += side[i + 1] ** 2 * previous * 4 * (previous // 2)
        cin = previous // 2 + dims[i]
        macs += side[i] ** 2 * 9 * (cin * dims[i] + dims[i] * dims[i])
        previous = dims[i]
    return macs


def test_squeeze_sam_loads_runs_and_does_the_architectures_convolution_work() -> None:
    registry = ModelRegistry()
    registry.register_dir(REPO / "benchmarks" / "models")
    model = registry.get("squeeze_sam")
    eager, inputs = model.get_eager_model(), model.get_example_inputs()
    counted = {"macs": 0}

    def count(module: torch.nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(module, torch.nn.Conv2d):
            counted["macs"] += output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]
        else:  # a linear layer of the decoder's upsampling
            counted["macs"] += output.numel() * module.in_features

    for name, module in eager.named_modules():
        if isinstance(module, torch.nn.Conv2d) or (isinstance(module, torch.nn.Linear) and name.startswith("decoder.")):
            module.register_forward_hook(count)
    with torch.no_grad():
        masks, iou = eager(*inputs)
    assert masks.shape == (1, 1, 3, 512, 512) and iou.shape == (1, 1, 3)
    assert torch.isfinite(masks).all()
    assert counted["macs"] == _macs_by_hand()
    assert 25e9 < counted["macs"] < 27e9  # about 26 GMAC: 52 GFLOP, 180 GFLOPS for the published 277.6 ms NEON CONV
