"""tiny_llama: a language model as ExecuTorch ships it, prefill then decode over a filled KV cache.

ExecuTorch's own Llama definition (models/_llama.py): tiny_llama with ExecuTorch's LLM custom ops (the graph
its LLM export ships for XNNPACK: their kernels come from the executorch wheel on every target), and
tiny_llama_portable with the reference attention.
"""

import pytest

from pytest_sme2 import assert_sme2_kernel_path

pytestmark = pytest.mark.sme2

PREFILL, DECODE = 16, 8


@pytest.mark.model("tiny_llama_portable", dtype="fp32")
def test_llm_prefill_and_decode_sme2(exported_pte, runner, llm_profile):
    on = llm_profile(exported_pte, runner(sme2=True), prefill=PREFILL, decode=DECODE)
    off = llm_profile(exported_pte, runner(sme2=False), prefill=PREFILL, decode=DECODE)
    # The projections, the FFN and the attention matmuls are GEMMs: with SME2 the packed SME2 kernels take them,
    # in the prefill (16 rows) and in decode (one row: XNNPACK's SME2 GEMV path).
    assert_sme2_kernel_path(on.prefill, off.prefill, at_least=0.9)
    assert_sme2_kernel_path(on.decode, off.decode, at_least=0.9)
    # Writing each step's keys and values into the cache is data movement, not OTHER.
    cache_writes = on.decode.portable_ops.set_index("kind").loc["index_put"]
    assert cache_writes["category"] == "DATA_MOVEMENT" and cache_writes["count"] == 4  # K and V of 2 layers
    # A prompt token shares each weight read with 15 others; a decode step reads every weight for one token.
    if on.prefill.emulated:
        assert on.prefill_rates.instructions_per_token < on.decode_rates.instructions_per_token


@pytest.mark.model("tiny_llama_portable", dtype="int8", quant="8da4w")
def test_llm_8da4w_linears_take_no_sme2_kernel(exported_pte, runner, llm_profile):
    """ExecuTorch's quantized LLM recipe (int8 dynamic activations, int4 weights in groups of 32): executorch
    1.5.1's XNNPACK has SME2 kernels for channelwise int4 and int8 weights but only NEON ones for blockwise int4
    ("QP8, F32, QB4W"), so with SME2 on only the attention's float matmuls take SME2. When this fails, XNNPACK
    has gained blockwise SME2 kernels: raise the bound."""
    on = llm_profile(exported_pte, runner(sme2=True), prefill=PREFILL, decode=DECODE)
    heavy = on.prefill.ops[on.prefill.ops["category"] == "GEMM"]
    blockwise = heavy[heavy["op"].str.contains("QB4W")]
    assert len(blockwise) > 0 and not blockwise["packed"].any()
    assert on.prefill.sme_path_share < 0.5


@pytest.mark.model("tiny_llama", dtype="fp32")
def test_llm_with_executorch_custom_ops(exported_pte, runner, llm_profile):
    """The graph ExecuTorch ships for XNNPACK: custom SDPA and KV-cache update kernels (llama::custom_sdpa,
    llama::update_cache), ExecuTorch's own from the wheel, on every target with no step from the user."""
    on = llm_profile(exported_pte, runner(sme2=True), prefill=PREFILL, decode=DECODE)
    off = llm_profile(exported_pte, runner(sme2=False), prefill=PREFILL, decode=DECODE)
    kinds = dict(zip(on.decode.portable_ops["kind"], on.decode.portable_ops["category"]))
    assert kinds["llama::update_cache"] == "DATA_MOVEMENT" and kinds["llama::custom_sdpa"] == "GEMM"
    # The projections and the FFN are XNNPACK's GEMMs, each on a packed SME2 kernel with SME2 on and none off. The
    # attention's matmuls are inside custom_sdpa, a portable kernel (NEON) that SME2 does not change.
    for phase_on, phase_off in ((on.prefill, off.prefill), (on.decode, off.decode)):
        gemms_on = phase_on.ops[(phase_on.ops["category"] == "GEMM") & phase_on.ops["delegated"]]
        assert len(gemms_on) > 0 and gemms_on["packed"].all()
        assert not phase_off.ops["packed"].any() and phase_off.sme_path_share == 0.0
        sdpa = phase_on.ops[phase_on.ops["kind"] == "llama::custom_sdpa"]
        assert not sdpa["delegated"].any() and not sdpa["packed"].any()
