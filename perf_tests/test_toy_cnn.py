"""toy_cnn: the smallest model; everything must be delegated and SME2 must not hurt."""

import pytest

from pytest_sme2 import (
    assert_delegation,
    assert_outputs_match,
    assert_portable_ops,
    assert_sme2_kernel_path,
    assert_speedup,
)

pytestmark = [pytest.mark.sme2, pytest.mark.model("toy_cnn", dtype="fp32")]


def test_toy_cnn_is_fully_delegated(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_delegation(profile, at_least=0.95)
    assert_delegation(profile, at_least=1.0, by="nodes")
    assert_portable_ops(profile, allowed=set())


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "int8"])
def test_toy_cnn_sme2_kernel_path(export_pte, runner, etdump_profile, dtype):
    """Runs on hardware and under emulation: which kernels ran, and were the outputs right."""
    exported = export_pte("toy_cnn", dtype=dtype)
    on = etdump_profile(exported, runner(sme2=True))
    off = etdump_profile(exported, runner(sme2=False))
    # every IGEMM convolution and the classifier take packed SME kernels (PF32/PF16/PQS8)
    assert_sme2_kernel_path(on, off, at_least=0.9)
    assert_outputs_match(on, exported)
    assert_outputs_match(off, exported)


@pytest.mark.latency
def test_toy_cnn_sme2_speedup(exported_pte, runner, compare_variants):
    # Alternating chunks of SME2-on and SME2-off runs, so drift of the machine hits both alike.
    on, off = compare_variants(exported_pte, runner(sme2=True), runner(sme2=False))
    assert_speedup(on, off, at_least=0.9)  # a 30 us model: SME2 must at least not make it slower
