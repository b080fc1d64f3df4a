"""The tiny Llama with ExecuTorch's reference attention instead of its custom ops (ExecuTorch's LLM export with
``use_sdpa_with_kv_cache=False``): the KV cache written with index_put, attention as XNNPACK matmuls and portable
kernels, so it runs on every target, the emulated one included.
"""

from ._llama import PREFILL, SHAPE, build, get_dynamic_shapes, get_example_inputs  # noqa: F401

DESCRIPTION = f"Llama (ExecuTorch's definition, reference attention): {SHAPE}"


def get_eager_model():  # noqa: ANN201 - torch type
    return build(custom_ops=False)
