"""EfficientSAM (ViT-T) as the executorch wheel's own example builds it, with random weights, at any resolution.

Why a builder of our own: ``build_efficient_sam_vitt()`` (executorch/examples/models/efficient_sam) downloads its
checkpoint from Hugging Face, and its image size is fixed at 1024. This calls the same
``build_efficient_sam(encoder_patch_embed_dim=192, encoder_num_heads=3)`` with ``checkpoint=None`` (seeded random
weights: the work and the kernels are the model's, the numbers are not), then sets the one image size the
encoder, the prompt encoder and the point rescaling read (the positional embedding is interpolated to the grid, as
the model does for any size). The reference kit (ArmDeveloperEcosystem/sme-executorch-profiling) onboards it at
1024x1024: about 208 GFLOP a prediction (10.2 M parameters).
"""

from __future__ import annotations

import torch

PATCH = 16


def build(resolution: int) -> torch.nn.Module:
    from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam import build_efficient_sam

    if resolution % PATCH:
        raise ValueError(f"EfficientSAM's resolution must be a multiple of its {PATCH}-pixel patches, not {resolution}")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        sam = build_efficient_sam(encoder_patch_embed_dim=192, encoder_num_heads=3, checkpoint=None)
    grid = resolution // PATCH
    sam.image_encoder.img_size = resolution
    sam.image_encoder.image_embedding_size = grid
    sam.prompt_encoder.image_embedding_size = (grid, grid)
    sam.prompt_encoder.input_image_size = (resolution, resolution)
    return sam.eval()


def example_inputs(resolution: int) -> tuple[torch.Tensor, ...]:
    """One image, one query of one point (as the wheel's example model gives them), seeded."""
    generator = torch.Generator().manual_seed(1)
    images = torch.randn((1, 3, resolution, resolution), generator=generator)
    points = torch.rand((1, 1, 1, 2), generator=generator) * resolution
    return images, points, torch.ones((1, 1, 1))
