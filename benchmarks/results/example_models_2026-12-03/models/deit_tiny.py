"""DeiT-tiny as the executorch wheel's example deit_tiny builds it (timm's deit_tiny_patch16_224, 1x3x224x224),
random weights, defined here in plain PyTorch: the example imports timm, which is not installable beside the CPU
torch 2.13 (pip would replace torch with 2.14.1 and 15 nvidia-* packages), and asks for pretrained weights.
timm's layers: 16x16 patches, a class token, 12 blocks of width 192 with 3 heads and a 768-wide MLP (GELU),
LayerNorm eps 1e-6, the head on the class token (5.72 M parameters).
"""

import torch
from torch import nn

WIDTH, HEADS, DEPTH, PATCH, SIZE = 192, 3, 12, 16, 224


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH, eps=1e-6)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH, eps=1e-6)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        a = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class DeiTTiny(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, WIDTH) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (SIZE // PATCH) ** 2 + 1, WIDTH) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(WIDTH, eps=1e-6)
        self.head = nn.Linear(WIDTH, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return DeiTTiny().eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)),)
