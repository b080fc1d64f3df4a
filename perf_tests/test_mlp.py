"""mlp: GEMM-bound, the best case for SME2 outer-product kernels."""

import pytest

from pytest_sme2 import assert_delegation, assert_portable_ops, assert_share, assert_speedup

pytestmark = pytest.mark.sme2


@pytest.mark.model("mlp", dtype="fp32")
def test_mlp_is_gemm_bound_and_fully_delegated(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_share(profile, "gemm", at_least=0.8)
    assert_delegation(profile, at_least=0.98)
    assert_portable_ops(profile, allowed=set())


@pytest.mark.model("mlp", dtype="fp32")
def test_mlp_fp32_sme2_speedup(exported_pte, runner, etdump_profile):
    on_runner, off_runner = runner(sme2=True), runner(sme2=False)
    on = etdump_profile(exported_pte, on_runner)
    off = etdump_profile(exported_pte, off_runner)
    assert on.sme_path_share >= 0.9
    assert off.sme_path_share == 0.0
    assert_speedup(on, off, at_least=2.0)


@pytest.mark.model("mlp", dtype="int8", quant="dynamic")
def test_mlp_int8_dynamic_sme2_path(exported_pte, runner, etdump_profile):
    on_runner, off_runner = runner(sme2=True), runner(sme2=False)
    on = etdump_profile(exported_pte, on_runner)
    off = etdump_profile(exported_pte, off_runner)
    assert on.sme_path_share >= 0.9  # QP8 packed-activation GEMMs
    assert off.sme_path_share == 0.0
    assert_speedup(on, off, at_least=1.2)
