"""A tiny Llama exported as ExecuTorch ships LLMs for XNNPACK: ExecuTorch's Llama definition with its custom SDPA
(``llama::custom_sdpa``) and KV-cache update (``llama::update_cache``) ops, a dynamic number of tokens per call.

Its custom kernels load in ExecuTorch's Python binding (the host target); runner binaries have none
(pytest_sme2/run/kernel_libraries.py says why): gate it on the emulated target as tiny_llama_portable.
"""

from ._llama import PREFILL, SHAPE, build, get_dynamic_shapes, get_example_inputs  # noqa: F401

DESCRIPTION = f"Llama (ExecuTorch's definition, custom SDPA + KV-cache ops): {SHAPE}"


def get_eager_model():  # noqa: ANN201 - torch type
    return build(custom_ops=True)
