"""EfficientSAM ViT-T at 128x128 (models/efficient_sam.py) with its positional embedding resized once, at build.

Why: the wheel's encoder keeps a 14x14 embedding (its pretraining size, 224 pixels) and resizes it to the token grid
with a bicubic ``F.interpolate`` on every inference (``get_abs_pos``). Exported, that resize is 32 portable
``aten.index.Tensor`` gathers over a constant: most of an SME2-on inference's instructions. Here the parameter is
replaced by its resized value, so ``get_abs_pos`` only reshapes it: the same numbers, the model's way out.
"""

from __future__ import annotations

import torch

from models._efficient_sam import PATCH, build, example_inputs

RESOLUTION = 128
DESCRIPTION = f"EfficientSAM ViT-T, {RESOLUTION}x{RESOLUTION}, positional embedding resized once at build"


def get_eager_model():  # noqa: ANN201 - torch type
    from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam_encoder import get_abs_pos

    sam = build(RESOLUTION)
    encoder = sam.image_encoder
    grid = RESOLUTION // PATCH
    with torch.no_grad():
        resized = get_abs_pos(encoder.pos_embed, encoder.pretrain_use_cls_token, [grid, grid])  # 1 x H x W x C
    encoder.pos_embed = torch.nn.Parameter(resized.reshape(1, grid * grid, -1).contiguous(), requires_grad=False)
    encoder.pretrain_use_cls_token = False  # the resized embedding has no class token row
    return sam


def get_example_inputs():  # noqa: ANN201
    return example_inputs(RESOLUTION)
