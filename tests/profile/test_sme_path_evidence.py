"""The SME path of a dynamically quantized program, from the kernels that ran (counted runs).

XNNPACK names an int8 dynamic GEMM "Fully Connected (NC, QP8, F32, QC8W) GEMM" with SME on and off: NEON KleidiAI
kernels exist for it too, so the name proves nothing. Under emulation the counted instructions do: with SME2 on
the bundled MLP's four GEMMs run KleidiAI's SME2 kernels (outer products into ZA), with SME off none can.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_emulated import counted_profiles

from pytest_sme2 import Recipe, assert_sme2_kernel_path


@pytest.fixture(scope="module")
def int8_dynamic_mlp(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> list:
    return counted_profiles(
        tmp_path_factory.mktemp("qp8"),
        "mlp",
        (True, False),
        recipe=Recipe("int8", "dynamic"),
        cache=shared_export_cache,
    )


def test_int8_dynamic_gemms_are_on_the_sme_path_by_their_counted_kernels(int8_dynamic_mlp: list) -> None:
    on, off = int8_dynamic_mlp
    gemms = on.ops[on.ops["category"] == "GEMM"]
    # The names carry no packed format: only the kernel evidence can put them on the SME path.
    assert gemms["op"].str.contains("QP8").all() and len(gemms) == 4
    assert gemms["packed"].all()
    assert (gemms["sme_instructions"] > 0).all()
    off_gemms = off.ops[off.ops["category"] == "GEMM"]
    assert not off_gemms["packed"].any() and (off_gemms["sme_instructions"] == 0).all()
    assert on.sme_path_share == 1.0 and off.sme_path_share == 0.0
    assert_sme2_kernel_path(on, off, at_least=0.95)
