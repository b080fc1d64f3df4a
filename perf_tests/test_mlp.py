"""mlp: GEMM-bound, the best case for SME2 outer-product kernels."""

import pytest

from pytest_sme2 import (
    assert_delegation,
    assert_outputs_match,
    assert_portable_ops,
    assert_share,
    assert_sme2_kernel_path,
    assert_speedup,
)

pytestmark = pytest.mark.sme2


@pytest.mark.model("mlp", dtype="fp32")
def test_mlp_is_gemm_bound_and_fully_delegated(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_share(profile, "gemm", at_least=0.8)
    assert_delegation(profile, at_least=0.98)
    assert_portable_ops(profile, allowed=set())


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_mlp_sme2_kernel_path(export_pte, runner, etdump_profile, dtype):
    """Every GEMM runs a packed SME kernel with SME2 on, none with it off; outputs equal eager."""
    exported = export_pte("mlp", dtype=dtype)
    on = etdump_profile(exported, runner(sme2=True))
    off = etdump_profile(exported, runner(sme2=False))
    assert_sme2_kernel_path(on, off, at_least=0.95)
    assert_outputs_match(on, exported)
    assert_outputs_match(off, exported)


@pytest.mark.latency
@pytest.mark.model("mlp", dtype="fp32")
def test_mlp_fp32_sme2_speedup(exported_pte, runner, compare_variants):
    # Alternating chunks of SME2-on and SME2-off runs, so drift of the machine hits both alike.
    on, off = compare_variants(exported_pte, runner(sme2=True), runner(sme2=False))
    assert_speedup(on, off, at_least=2.0)


@pytest.mark.latency
@pytest.mark.model("mlp", dtype="int8", quant="dynamic")
def test_mlp_int8_dynamic_sme2_speedup(exported_pte, runner, compare_variants):
    # int8 dynamic GEMMs are named "(NC, QP8, F32, QC8W)" with SME on and off (NEON KleidiAI kernels exist too):
    # on hardware only the time tells whether SME2 helped.
    # Alternating chunks of SME2-on and SME2-off runs, so drift of the machine hits both alike.
    on, off = compare_variants(exported_pte, runner(sme2=True), runner(sme2=False))
    assert_speedup(on, off, at_least=1.2)


@pytest.mark.model("mlp", dtype="int8", quant="dynamic")
def test_mlp_int8_dynamic_runs_sme2_kernels(exported_pte, runner, etdump_profile):
    # Operator names cannot tell here (QP8 either way); the emulated target's qemu trace names
    # the kernels that executed: KleidiAI's qai8dx x qsi8cx SME2 MOPA with SME2 on, no SME code off.
    on = etdump_profile(exported_pte, runner(sme2=True))
    off = etdump_profile(exported_pte, runner(sme2=False))
    if on.executed_sme_kernels is None:
        pytest.skip("naming the kernels that ran needs a kernel trace (the emulated target records one)")
    assert any("sme2" in kernel for kernel in on.executed_sme_kernels)
    assert off.executed_sme_kernels == ()
    # The counted SME multiply-accumulates put every GEMM on the SME path, whatever their names say.
    assert_sme2_kernel_path(on, off, at_least=0.95)
    assert_outputs_match(on, exported_pte)
