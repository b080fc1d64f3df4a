"""EfficientSAM ViT-T, from the executorch wheel's example code (random weights), at 1024x1024 as the reference kit
onboards it (about 208 GFLOP a prediction): the model of `make perf-real`."""

from ._efficient_sam import build, example_inputs

RESOLUTION = 1024
DESCRIPTION = f"EfficientSAM ViT-T (executorch's example code, random weights), {RESOLUTION}x{RESOLUTION}"


def get_eager_model():  # noqa: ANN201 - torch type
    return build(RESOLUTION)


def get_example_inputs():  # noqa: ANN201
    return example_inputs(RESOLUTION)
