"""EfficientSAM ViT-T as the executorch wheel's example builds it, random weights, at 128x128.

The example's build_efficient_sam_vitt() downloads its checkpoint from Hugging Face; build_efficient_sam(...,
checkpoint=None) is the same model without it. Its image size is fixed at 1024 (an input of another size is
resized to it), so the three fields that hold it are set to 128 (about 0.5 GMAC instead of 105 GMAC).
"""

import torch
from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam import build_efficient_sam

SIZE = 128


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        sam = build_efficient_sam(encoder_patch_embed_dim=192, encoder_num_heads=3, checkpoint=None)
    sam.image_encoder.img_size = SIZE
    sam.image_encoder.image_embedding_size = SIZE // 16
    sam.prompt_encoder.image_embedding_size = (SIZE // 16, SIZE // 16)
    sam.prompt_encoder.input_image_size = (SIZE, SIZE)
    return sam.eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(1, 3, SIZE, SIZE, generator=g), torch.rand(1, 1, 1, 2, generator=g) * SIZE, torch.ones(1, 1, 1))
