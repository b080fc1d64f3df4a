"""transformer_encoder: attention + LayerNorm; the portable fallbacks are the story."""

import pytest

from pytest_sme2 import assert_delegation, assert_portable_ops, assert_speedup

pytestmark = [pytest.mark.sme2, pytest.mark.model("transformer_encoder", dtype="fp32")]

# What XNNPACK 1.5.1 leaves to portable kernels in this model (FACTS.md).
# A new entry here means an operator fell out of the delegate: look before you add it.
KNOWN_PORTABLE = {
    "native_layer_norm", "mul", "expand_copy", "select_copy", "squeeze_copy", "unsqueeze_copy",
    "where", "eq", "any", "logical_not", "full_like", "mean",
}


def test_transformer_fallbacks_are_the_known_ones(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_portable_ops(profile, allowed=KNOWN_PORTABLE)
    assert_delegation(profile, at_least=0.5)  # about a quarter to a third of the time is portable
    assert profile.share("gemm") >= 0.2


def test_transformer_sme2_on_vs_off(exported_pte, runner, etdump_profile):
    on_runner, off_runner = runner(sme2=True), runner(sme2=False)
    on = etdump_profile(exported_pte, on_runner)
    off = etdump_profile(exported_pte, off_runner)
    assert on.sme_path_share >= 0.5
    assert_speedup(on, off, at_least=1.2)
    # SME2 shrinks GEMM time, so the portable (non-delegated) share must grow.
    assert on.delegation_coverage <= off.delegation_coverage
