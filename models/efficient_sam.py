"""EfficientSAM ViT-T, from the executorch wheel's example code (random weights), at 128x128: the real model of
`make perf` (12 ViT blocks, the mask decoder's two-way transformer; about 0.94 GFLOP). `make perf-real` gates it at
1024x1024 (efficient_sam_1024)."""

from ._efficient_sam import build, example_inputs

RESOLUTION = 128
DESCRIPTION = f"EfficientSAM ViT-T (executorch's example code, random weights), {RESOLUTION}x{RESOLUTION}"


def get_eager_model():  # noqa: ANN201 - torch type
    return build(RESOLUTION)


def get_example_inputs():  # noqa: ANN201
    return example_inputs(RESOLUTION)
