"""A ViT-tiny-style transformer encoder: patch embedding, 4 pre-norm encoder
layers (multi-head attention + MLP), layer norm and a classification head.

Attention and LayerNorm exercise the operators XNNPACK does not take
(native_layer_norm, masks, expand/select copies), so this model shows the
cost of portable fallbacks.
"""

import torch
from torch import nn

DESCRIPTION = "ViT-tiny-style encoder: 64x64 image, 8x8 patches, d=192, 3 heads, 4 layers"

IMAGE, PATCH, DIM, HEADS, LAYERS = 64, 8, 192, 3, 4


class TinyViT(nn.Module):
    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        tokens = (IMAGE // PATCH) ** 2
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(
            DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        return self.head(self.norm(self.encoder(tokens)).mean(dim=1))


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return TinyViT().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1)),)


def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(2)
    return [(torch.randn(1, 3, IMAGE, IMAGE, generator=gen),) for _ in range(4)]
