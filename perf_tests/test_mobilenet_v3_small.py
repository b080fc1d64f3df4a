"""mobilenet_v3_small: depthwise-heavy CNN; after SME2 speeds up the 1x1
convolutions, data movement and the portable dim-order copies are what is left."""

import pytest

from pytest_sme2 import (
    assert_delegation,
    assert_outputs_match,
    assert_portable_ops,
    assert_share,
    assert_sme2_kernel_path,
)

pytestmark = pytest.mark.sme2

# hardsigmoid's 0-dim constants stay outside XNNPACK (FACTS.md); nothing else may.
KNOWN_PORTABLE = {"_to_dim_order_copy"}


@pytest.mark.latency
@pytest.mark.model("mobilenet_v3_small", dtype="fp16")
def test_mobilenet(exported_pte, runner, etdump_profile):
    on = etdump_profile(exported_pte, runner(sme2=True))
    off = etdump_profile(exported_pte, runner(sme2=False))
    assert on.speedup_over(off).low >= 2.0  # confidence bound, not a lucky median
    assert on.share("data_movement") <= 0.45
    assert on.delegation_coverage >= 0.95


@pytest.mark.parametrize(
    ("dtype", "at_least"),
    [
        # Depthwise convolutions have no SME kernels; the 1x1 and dense convolutions
        # and the classifier do (PF32 / PQS8), about 85% of CONV+GEMM time.
        ("fp32", 0.7),
        ("int8", 0.7),
        # fp16: XNNPACK 1.5.1 packs only a few layers (PF16); most 1x1 convolutions
        # stay on F16 GEMM kernels even with SME2 (seen under emulation).
        ("fp16", 0.05),
    ],
)
def test_mobilenet_sme2_kernel_path(export_pte, runner, etdump_profile, dtype, at_least):
    exported = export_pte("mobilenet_v3_small", dtype=dtype)
    on = etdump_profile(exported, runner(sme2=True))
    off = etdump_profile(exported, runner(sme2=False))
    assert_sme2_kernel_path(on, off, at_least=at_least)
    assert_outputs_match(on, exported)
    assert_outputs_match(off, exported)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_mobilenet_structure(export_pte, runner, etdump_profile, dtype):
    profile = etdump_profile(export_pte("mobilenet_v3_small", dtype=dtype), runner())
    assert_delegation(profile, at_least=0.95)
    assert_portable_ops(profile, allowed=KNOWN_PORTABLE)
    assert_share(profile, "data_movement", at_most=0.45)
    assert_share(profile, "conv", at_least=0.1)


@pytest.mark.model("mobilenet_v3_small", dtype="int8")
def test_mobilenet_int8_structure(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_delegation(profile, at_least=0.95)
    assert_portable_ops(profile, allowed=KNOWN_PORTABLE)
    assert_share(profile, "data_movement", at_most=0.45)
