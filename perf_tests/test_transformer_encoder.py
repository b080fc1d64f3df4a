"""transformer_encoder: attention + LayerNorm; the portable fallbacks are the story."""

import pytest

from pytest_sme2 import (
    assert_delegation,
    assert_outputs_match,
    assert_portable_ops,
    assert_sme2_kernel_path,
    assert_speedup,
)

pytestmark = pytest.mark.sme2

# What XNNPACK 1.5.1 leaves to portable kernels in this model (FACTS.md).
# A new entry here means an operator fell out of the delegate: look before you add it.
KNOWN_PORTABLE = {
    "native_layer_norm",
    "mul",
    "expand_copy",
    "select_copy",
    "squeeze_copy",
    "unsqueeze_copy",
    "where",
    "eq",
    "any",
    "logical_not",
    "full_like",
    "mean",
}


@pytest.mark.model("transformer_encoder", dtype="fp32")
def test_transformer_fallbacks_are_the_known_ones(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_portable_ops(profile, allowed=KNOWN_PORTABLE)
    # Portable kernels take about a third of the time on an x86 host; with SME2 the delegated GEMMs get far
    # cheaper, and on the emulated target (SME2 on, by counted instructions) they are about two thirds.
    assert_delegation(profile, at_least=0.3)
    # The arithmetic is GEMM's (projections, MLPs, attention), whatever the time or instructions say.
    work = profile.work_by_category()
    assert work["GEMM"]["macs"] >= 0.9 * sum(v["macs"] for k, v in work.items() if isinstance(v, dict))


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_transformer_sme2_kernel_path(export_pte, runner, etdump_profile, dtype):
    """Patch embedding, projections, MLPs and attention matmuls all take packed SME kernels."""
    exported = export_pte("transformer_encoder", dtype=dtype)
    on = etdump_profile(exported, runner(sme2=True))
    off = etdump_profile(exported, runner(sme2=False))
    assert_sme2_kernel_path(on, off, at_least=0.9)
    assert_portable_ops(on, allowed=KNOWN_PORTABLE)
    assert_outputs_match(on, exported)
    assert_outputs_match(off, exported)


@pytest.mark.latency
@pytest.mark.model("transformer_encoder", dtype="fp32")
def test_transformer_sme2_speedup(exported_pte, runner, compare_variants):
    # Alternating chunks of SME2-on and SME2-off runs, so drift of the machine hits both alike.
    on, off = compare_variants(exported_pte, runner(sme2=True), runner(sme2=False))
    assert_speedup(on, off, at_least=1.2)
    # SME2 shrinks GEMM time, so the portable (non-delegated) share must grow.
    assert on.delegation_coverage <= off.delegation_coverage
