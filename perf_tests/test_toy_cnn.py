"""toy_cnn: the smallest model; everything must be delegated and SME2 must not hurt."""

import pytest

from pytest_sme2 import assert_delegation, assert_portable_ops, assert_speedup

pytestmark = [pytest.mark.sme2, pytest.mark.model("toy_cnn", dtype="fp32")]


def test_toy_cnn_is_fully_delegated(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_delegation(profile, at_least=0.95)
    assert_delegation(profile, at_least=1.0, by="nodes")
    assert_portable_ops(profile, allowed=set())


def test_toy_cnn_sme2_on_vs_off(exported_pte, runner, etdump_profile):
    on_runner, off_runner = runner(sme2=True), runner(sme2=False)
    on = etdump_profile(exported_pte, on_runner)
    off = etdump_profile(exported_pte, off_runner)
    assert off.sme_path_share == 0.0
    assert on.sme_path_share >= 0.5  # IGEMM convolutions take packed SME2 kernels; DWConv does not exist here
    assert_speedup(on, off, at_least=0.9)  # a 30 us model: SME2 must at least not make it slower
