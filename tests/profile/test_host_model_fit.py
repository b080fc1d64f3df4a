"""benchmarks/host_model_validation.py's fit and leave-one-model-out check, on synthetic operators whose times
are made by known per-family rates: held-out models are predicted exactly where their families were seen, by
the category's fit where not, and the summary counts what the errors say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import host_model_validation as validation  # noqa: E402

# per family: ms per MAC, ms per byte, ms per call
TRUE = {"Convolution (NHWC, F32) IGEMM": (2e-9, 1e-8, 0.002), "Fully Connected (NC, F32) GEMM": (1e-9, 3e-8, 0.001)}
CATEGORY = {"Convolution (NHWC, F32) IGEMM": "CONV", "Fully Connected (NC, F32) GEMM": "GEMM"}


def op(family: str, macs: float, nbytes: float, number: int = 1) -> dict:
    rate, bw, call = TRUE[family]
    return {
        "event": f"{family} #{number}",
        "family": family,
        "category": CATEGORY[family],
        "median_ms": macs * rate + nbytes * bw + call,
        "macs": macs,
        "bytes": nbytes,
    }


def row(model: str, ops: list[dict], outside: float = 0.1) -> dict:
    return {
        "model": model,
        "recipe": "fp32-xnnpack",
        "e2e_ms": sum(o["median_ms"] for o in ops) / (1 - outside),
        "ops": ops,
    }


ROWS = [
    row("a", [op("Convolution (NHWC, F32) IGEMM", 1e6, 2e5), op("Fully Connected (NC, F32) GEMM", 4e5, 1e5)]),
    row("b", [op("Convolution (NHWC, F32) IGEMM", 3e6, 5e4), op("Fully Connected (NC, F32) GEMM", 1e5, 4e5)]),
    row("c", [op("Convolution (NHWC, F32) IGEMM", 5e5, 9e5), op("Fully Connected (NC, F32) GEMM", 2e6, 2e4)]),
    row("d", [op("Convolution (NHWC, F32) IGEMM", 2e6, 3e5, 2), op("Fully Connected (NC, F32) GEMM", 7e5, 6e5)]),
]


def test_the_fit_recovers_the_rates_that_made_the_times() -> None:
    fitted = validation.fit(ROWS)
    for family, coefficients in TRUE.items():
        assert fitted["family"][family] == pytest.approx(coefficients, rel=1e-6)
    assert fitted["outside_share"] == pytest.approx(0.1)


def test_each_held_out_model_is_predicted_exactly_from_the_others() -> None:
    result = validation.leave_one_model_out(ROWS)
    assert [e["model"] for e in result["e2e"]] == ["a", "b", "c", "d"]
    assert all(e["error"] == pytest.approx(0.0, abs=1e-6) for e in result["e2e"])
    assert all(o["error"] == pytest.approx(0.0, abs=1e-6) and o["level"] == "family" for o in result["ops"])
    assert "4 of 4 within +-10%" in validation.summary(result)


def test_a_family_no_other_model_has_is_priced_by_its_category_and_its_error_shows() -> None:
    odd = dict(
        op("Convolution (NHWC, F32) IGEMM", 1e6, 1e5), family="Convolution (NHWC, F32) DWConv", median_ms=0.05
    )  # a depthwise convolution 20x slower than the IGEMM rates say
    result = validation.leave_one_model_out([*ROWS, row("e", [odd])])
    [held] = [o for o in result["ops"] if o["model"] == "e"]
    assert held["level"] == "category"
    assert held["modelled_ms"] == pytest.approx(1e6 * 2e-9 + 1e5 * 1e-8 + 0.002, rel=1e-6)
    assert held["error"] == pytest.approx(held["modelled_ms"] / 0.05 - 1)
    assert "4 of 5 within +-10%" in validation.summary(result)
