"""EfficientSAM ViT-T at 128x128 (models/efficient_sam.py) with its output masks resized bilinearly, not bicubically.

Why: the wheel's ``EfficientSam`` resizes its low-resolution masks to the image with ``F.interpolate(...,
mode="bicubic")``. Exported, a bicubic resize is portable ``aten.index.Tensor`` gathers (16 taps, none delegated),
most of an inference's instructions. A bilinear resize lowers to XNNPACK. The copy of the wheel's module that this
model uses reads ``F`` through a shim that asks for bilinear where the code asks for bicubic: what a model author
would do by editing that one line of their copy (other numbers, a what-if for the docs, not the model itself).
"""

from __future__ import annotations

import types

import torch.nn.functional as functional

from models._efficient_sam import build, example_inputs

RESOLUTION = 128
DESCRIPTION = f"EfficientSAM ViT-T, {RESOLUTION}x{RESOLUTION}, output masks resized bilinearly"


def _bilinear_interpolate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - F.interpolate's signature
    if kwargs.get("mode") == "bicubic":
        kwargs["mode"] = "bilinear"
    return functional.interpolate(*args, **kwargs)


def get_eager_model():  # noqa: ANN201 - torch type
    from executorch.examples.models.efficient_sam.efficient_sam_core import efficient_sam

    shim = types.SimpleNamespace(**{k: getattr(functional, k) for k in dir(functional) if not k.startswith("__")})
    shim.interpolate = _bilinear_interpolate
    efficient_sam.F = shim  # this process exports only this model
    return build(RESOLUTION)


def get_example_inputs():  # noqa: ANN201
    return example_inputs(RESOLUTION)
