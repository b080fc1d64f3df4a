"""SqueezeSAM (Varadarajan et al., 2023), the model of the published SME2 on/off results, random weights.

Written for pytest-sme2 from the architecture of the ``squeeze_sam`` package of yformer/EfficientSAM
(commit 3477a43), which is not installable; no code is taken from it. Same layers and sizes as its
``build_squeeze_sam_base``: prompts fused into the image as two extra channels (a box mask and point
discs of radius 5), a 2x2 patch embedding to 64 channels at 256x256 from a 512x512 encoder input, a
U-Net of eight levels (64, 128, 128, 128, 128, 164, 256, 256 channels; two 3x3 convolutions, ReLU then
BatchNorm, per level; 2x2 max pooling down), a two-way transformer (depth 2, 8 heads, MLP 256, attention
downsampled 2x) between four mask tokens, an IoU token and the 2x2 bottleneck, the decoder's upsampling
by a linear layer on NHWC pixels (4x the channels, then rearranged into 2x2 pixels: the transposes the
published report found most of the data movement in), and a hypernetwork product giving 4 masks, of
which the last 3 are returned, upsampled to the input size.

Differences, said where a comparison uses this model (docs/device_model.md): random weights with
identity BatchNorm statistics (the published runs used the trained checkpoint; XNNPACK's work does not
depend on the values); the final upsampling is bilinear, as in the published "FP16 bilinear" export
(the original is bicubic); a 512x512 input image with one box prompt (the published input size is not
stated; only the final upsampling and the prompt channels depend on it); no quantization stubs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

DESCRIPTION = "SqueezeSAM, 1x3x512x512 image and a box prompt, random weights (benchmarks/models)"
ENCODER_SIZE = 512
IMAGE_SIZE = 512
UNET_DIMS = (64, 128, 128, 128, 128, 164, 256, 256)
EMBED_DIM = 64
POINT_RADIUS = 5.0
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    """Two 3x3 convolutions, each followed by ReLU and then BatchNorm (the original's order)."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.ReLU(),
        nn.BatchNorm2d(cout),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.ReLU(),
        nn.BatchNorm2d(cout),
    )


class PromptFusion(nn.Module):
    """Normalised image plus two channels: inside the box (labels 2, 3: corners) and within POINT_RADIUS
    of a positive point (label 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, image: torch.Tensor, points: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        _, _, height, width = image.shape
        image = F.interpolate(image, (ENCODER_SIZE, ENCODER_SIZE), mode="bilinear")
        image = (image - self.mean) / self.std
        scale = torch.tensor([ENCODER_SIZE / width, ENCODER_SIZE / height], dtype=image.dtype)
        pts = torch.where(points >= 0, points * scale, torch.full_like(points, -1.0))  # [B, Q, N, 2]
        ys = torch.arange(ENCODER_SIZE, dtype=image.dtype).view(1, 1, ENCODER_SIZE, 1)
        xs = torch.arange(ENCODER_SIZE, dtype=image.dtype).view(1, 1, 1, ENCODER_SIZE)
        is_box = (labels[:, :, 0] != 1).to(image.dtype)  # [B, Q]
        corners = pts[:, :, :2, :]
        x0 = is_box * corners[..., 0].min(dim=-1).values
        y0 = is_box * corners[..., 1].min(dim=-1).values
        x1 = is_box * corners[..., 0].max(dim=-1).values + (1 - is_box) * ENCODER_SIZE
        y1 = is_box * corners[..., 1].max(dim=-1).values + (1 - is_box) * ENCODER_SIZE
        box = (
            (ys >= y0[..., None, None])
            & (ys <= y1[..., None, None])
            & (xs >= x0[..., None, None])
            & (xs <= x1[..., None, None])
        )  # [B, Q, H, W]
        dx = xs[..., None] - pts[:, :, None, None, :, 0]  # [B, Q, 1, W, N] with broadcasting
        dy = ys[..., None] - pts[:, :, None, None, :, 1]
        positive = (labels == 1).to(image.dtype)[:, :, None, None, :]
        far = POINT_RADIUS * POINT_RADIUS + 1
        distance = (dx * dx + dy * dy) * positive + (1 - positive) * far
        near_point = distance.min(dim=-1).values <= POINT_RADIUS * POINT_RADIUS
        queries = points.shape[1]
        image = image[:, None].expand(-1, queries, -1, -1, -1)
        fused = torch.cat([image, box[:, :, None].to(image.dtype), near_point[:, :, None].to(image.dtype)], dim=2)
        return fused.reshape(-1, 5, ENCODER_SIZE, ENCODER_SIZE)


class Encoder(nn.Module):
    """Patch embedding, then the U-Net's contracting path; returns every level's output."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Sequential(nn.Conv2d(5, EMBED_DIM, 2, stride=2), nn.GroupNorm(1, EMBED_DIM))
        levels = [_conv_block(EMBED_DIM, UNET_DIMS[0])]
        levels += [
            nn.Sequential(nn.MaxPool2d(2), _conv_block(cin, cout)) for cin, cout in zip(UNET_DIMS, UNET_DIMS[1:])
        ]
        self.levels = nn.ModuleList(levels)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.patch(x)
        outputs = [x]
        for level in self.levels:
            x = level(x)
            outputs.append(x)
        return outputs


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, downsample: int = 1) -> None:
        super().__init__()
        inner = dim // downsample
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.out = nn.Linear(inner, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        return x.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.q(q)), self._split(self.k(k)), self._split(self.v(v))
        weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(q.shape[-1]), dim=-1)
        out = (weights @ v).transpose(1, 2)
        return self.out(out.reshape(out.shape[0], out.shape[1], -1))


def _mlp(dim_in: int, hidden: int, dim_out: int, layers: int) -> nn.Sequential:
    parts: list[nn.Module] = []
    for index in range(layers):
        parts += [nn.Linear(dim_in if index == 0 else hidden, hidden), nn.ReLU()]
    return nn.Sequential(*parts, nn.Linear(hidden, dim_out))


class TwoWayBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int, first: bool) -> None:
        super().__init__()
        self.first = first
        self.self_attention = Attention(dim, heads)
        self.token_to_image = Attention(dim, heads, 2)
        self.image_to_token = Attention(dim, heads, 2)
        self.mlp = _mlp(dim, mlp_dim, dim, 1)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))

    def forward(self, tokens: torch.Tensor, image: torch.Tensor, pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = tokens if self.first else tokens + pe  # the first block's queries carry no positional term
        tokens = self.norms[0](q + self.self_attention(q, q, q))
        tokens = self.norms[1](tokens + self.token_to_image(tokens + pe, image, image))
        tokens = self.norms[2](tokens + self.mlp(tokens))
        image = self.norms[3](image + self.image_to_token(image, tokens + pe, tokens))
        return tokens, image


class TokenTransformer(nn.Module):
    """IoU and mask tokens attending to the bottleneck and back (two-way), then a final token-to-image pass."""

    def __init__(self, dim: int = UNET_DIMS[-1], masks: int = 4) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.randn(1 + masks, dim) * 0.02)
        self.blocks = nn.ModuleList(TwoWayBlock(dim, 8, 256, first=i == 0) for i in range(2))
        self.final = Attention(dim, 8, 2)
        self.norm = nn.LayerNorm(dim)

    def forward(self, bottleneck: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, h, w = bottleneck.shape
        pe = torch.cat([self.tokens, self.tokens.new_zeros(1, c)], dim=0)[None].expand(
            b, -1, -1
        )  # + an empty prompt token
        image = bottleneck.flatten(2).permute(0, 2, 1)
        tokens = pe
        for block in self.blocks:
            tokens, image = block(tokens, image, pe)
        tokens = self.norm(tokens + self.final(tokens + pe, image, image))
        return tokens, image.transpose(1, 2).reshape(b, c, h, w)


class LinearUpsample(nn.Module):
    """2x upsampling as a linear layer on each NHWC pixel to 4x the channels, rearranged into 2x2 pixels."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cout = cout
        self.linear = nn.Sequential(nn.Linear(cin, 4 * cout), nn.ReLU())
        self.norm = nn.BatchNorm2d(4 * cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        x = self.linear(x.permute(0, 2, 3, 1).reshape(b * h * w, c))
        x = self.norm(x.reshape(b, h, w, 4 * self.cout).permute(0, 3, 1, 2))
        x = x.reshape(b, self.cout, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
        return x.reshape(b, self.cout, 2 * h, 2 * w)


class Decoder(nn.Module):
    """The U-Net's expanding path: upsample, join the skip connection, two convolutions, per level."""

    def __init__(self) -> None:
        super().__init__()
        self.ups = nn.ModuleList()
        self.convs = nn.ModuleList()
        previous = UNET_DIMS[-1]
        for dim in reversed(UNET_DIMS[:-1]):
            self.ups.append(LinearUpsample(previous, previous // 2))
            self.convs.append(_conv_block(previous // 2 + dim, dim))
            previous = dim

    def forward(self, levels: list[torch.Tensor]) -> torch.Tensor:
        x, skips = levels[-1], levels[:-1]
        for index, (up, conv) in enumerate(zip(self.ups, self.convs)):
            x = conv(torch.cat([skips[len(skips) - 1 - index], up(x)], dim=1))
        return x


class SqueezeSam(nn.Module):
    def __init__(self, masks: int = 4) -> None:
        super().__init__()
        self.fusion = PromptFusion()
        self.encoder = Encoder()
        self.transformer = TokenTransformer(masks=masks)
        self.decoder = Decoder()
        self.hyper = nn.ModuleList(_mlp(UNET_DIMS[-1], UNET_DIMS[-1], UNET_DIMS[0], 2) for _ in range(masks))
        self.iou = _mlp(UNET_DIMS[-1], 256, masks, 2)

    def forward(self, image: torch.Tensor, points: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, queries = points.shape[:2]
        height, width = image.shape[-2:]
        levels = self.encoder(self.fusion(image, points, labels))
        tokens, bottleneck = self.transformer(levels[-1])
        features = self.decoder([*levels[:-1], bottleneck])
        b, c, h, w = features.shape
        hyper = torch.stack([mlp(tokens[:, 1 + i]) for i, mlp in enumerate(self.hyper)], dim=1)
        masks = (hyper @ features.reshape(b, c, h * w)).reshape(b, -1, h, w)[:, 1:]
        iou = self.iou(tokens[:, 0])[:, 1:]
        masks = F.interpolate(masks, (height, width), mode="bilinear")
        return masks.reshape(batch, queries, -1, height, width), iou.reshape(batch, queries, -1)


def get_eager_model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return SqueezeSam().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    image = torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    box = torch.tensor([[[[120.0, 96.0], [380.0, 410.0]]]])  # one query: a box by its corners
    return image, box, torch.tensor([[[2, 3]]], dtype=torch.int64)
