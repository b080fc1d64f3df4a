"""Exact verdict logic on synthetic records (the dicts baselines.record_of makes)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_sme2 import stats
from pytest_sme2.errors import UsageError
from pytest_sme2.verdicts import Tolerances, judge

RNG_SEED = 5


def record(samples: np.ndarray | list[float], **changes: object) -> dict:
    samples = [float(x) for x in samples]
    base = {
        "latency": {"median_ms": float(np.median(samples))},
        "samples_ms": samples,
        "emulated": False,
        "shares": {"CONV": 0.5, "GEMM": 0.2, "DATA_MOVEMENT": 0.1, "ELEMENTWISE": 0.05, "OTHER": 0.15},
        "delegation_coverage": 0.98,
        "node_delegation_coverage": 1.0,
        "delegation": {"delegated_nodes": 10, "non_delegated_nodes": 0, "ops": {"aten.convolution.default": [5, 0]}},
        "portable_ops": [],
        "sme_path_share": 0.9,
        "provenance": {"torch": "2.13.0", "executorch": "1.5.1", "model_source_hash": "a" * 64,
                       "recipe": {"dtype": "fp32", "quant": None, "partitioner": "xnnpack"}},
    }
    base.update(changes)
    return base


def noisy(median: float, n: int = 20, cv: float = 0.03, seed: int = RNG_SEED) -> np.ndarray:
    return median * (1 + cv * np.random.default_rng(seed).standard_normal(n))


def by_check(verdicts: list, check: str) -> list:
    return [v for v in verdicts if v.check == check]


def test_identical_records_pass_every_check() -> None:
    verdicts = judge("m", record(noisy(2.0)), record(noisy(2.0)))
    assert not [v for v in verdicts if v.failed]
    assert {v.check for v in verdicts} == {"latency", "delegation_coverage", "delegated_ops", "sme_path", "share"}


def test_latency_regression_needs_size_and_significance() -> None:
    base = record(noisy(2.0, seed=1))
    slow = record(noisy(2.0 * 1.25, seed=2))
    [verdict] = by_check(judge("m", slow, base), "latency")
    assert verdict.status == "regression"
    ratio = np.median(slow["samples_ms"]) / np.median(base["samples_ms"])
    assert verdict.evidence["ratio"] == pytest.approx(ratio)
    assert verdict.evidence["p_slower"] == pytest.approx(stats.mann_whitney_p(slow["samples_ms"], base["samples_ms"]))
    assert verdict.evidence["p_slower"] < 0.001
    for text in ("latency regression", "tolerance +10%", "Mann-Whitney U p=", "20 vs 20 runs", f"{ratio - 1:+.1%}"):
        assert text in verdict.message
    # the same 25% within a 30% tolerance is no regression
    [lenient] = by_check(judge("m", slow, base, Tolerances(latency=0.30)), "latency")
    assert lenient.status == "ok" and "within tolerance" in lenient.message


def test_big_but_insignificant_change_is_not_a_regression() -> None:
    base = record([1.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0, 1.0])  # bimodal noise
    cur = record([3.0, 1.0, 3.0, 1.0, 3.0, 3.0, 1.0, 1.0])
    [verdict] = by_check(judge("m", cur, base), "latency")
    assert np.median(cur["samples_ms"]) / np.median(base["samples_ms"]) == 2.0
    assert verdict.status == "ok" and "not significant" in verdict.message


def test_too_few_runs_say_so() -> None:
    [verdict] = by_check(judge("m", record([2.0] * 4 + [2.1]), record([1.0] * 4 + [1.1])), "latency")
    assert verdict.status == "ok"
    assert "p cannot go below 0.004" in verdict.message and "use more runs" in verdict.message


def test_improvement_is_reported() -> None:
    [verdict] = by_check(judge("m", record(noisy(1.5, seed=3)), record(noisy(2.0, seed=4))), "latency")
    assert verdict.status == "improvement" and not verdict.failed and "latency improvement" in verdict.message


def with_reference(samples: np.ndarray, reference: np.ndarray) -> dict:
    """A record whose runs each followed a reference-program run of the given time."""
    return record(samples, reference_ms=[float(x) for x in reference])


def test_drift_of_the_whole_machine_is_not_a_regression_on_relative_latency() -> None:
    # The machine is 60% slower for the current run: model and reference alike.
    reference, model = noisy(3.0, seed=6), noisy(2.0, seed=7)
    base = with_reference(model, reference)
    drifted = with_reference(model * 1.6, reference * 1.6)
    [verdict] = by_check(judge("m", drifted, base), "latency")
    assert verdict.status == "ok", verdict.message
    assert verdict.evidence["basis"] == "relative" and verdict.evidence["ratio"] == pytest.approx(1.0)
    assert "relative latency" in verdict.message and "raw median" in verdict.message
    # Judged on raw milliseconds the same data is a 60% "regression": what the reference prevents.
    [raw] = by_check(judge("m", record(drifted["samples_ms"]), record(base["samples_ms"])), "latency")
    assert raw.status == "regression" and raw.evidence["basis"] == "raw"


def test_model_slower_than_its_reference_is_a_regression() -> None:
    reference, model = noisy(3.0, seed=8), noisy(2.0, seed=9)
    base = with_reference(model, reference)
    slowed = with_reference(model * 1.2, reference * 0.97)  # the machine even got a little faster
    [verdict] = by_check(judge("m", slowed, base), "latency")
    assert verdict.status == "regression", verdict.message
    expected = np.median(model * 1.2 / (reference * 0.97)) / np.median(model / reference)
    assert verdict.evidence["ratio"] == pytest.approx(expected)
    assert "latency regression: relative latency +" in verdict.message


def test_a_side_without_reference_times_is_judged_raw_and_says_how_to_fix_it() -> None:
    reference, model = noisy(3.0, seed=10), noisy(2.0, seed=11)
    for current, baseline, missing in ((record(model), with_reference(model, reference), "this run"),
                                       (with_reference(model, reference), record(model), "the baseline")):
        [verdict] = by_check(judge("m", current, baseline), "latency")
        assert verdict.evidence["basis"] == "raw"
        assert f"because {missing} has no reference-program times" in verdict.message
        assert "--sme2-update-baselines" in verdict.message


def test_emulated_latency_is_skipped_but_structure_is_checked() -> None:
    base = record(noisy(2.0), emulated=True)
    cur = record(noisy(9.0), emulated=True, delegation_coverage=0.5)
    verdicts = judge("m", cur, base)
    [latency] = by_check(verdicts, "latency")
    assert latency.status == "skipped" and "emulated timing is not hardware timing" in latency.message
    [coverage] = [v for v in by_check(verdicts, "delegation_coverage") if v.failed]
    assert "dropped from 98.0% to 50.0%" in coverage.message


def test_structural_regressions() -> None:
    base = record(noisy(2.0))
    cur = record(
        noisy(2.0),
        delegation_coverage=0.97,  # within 2 points: fine
        node_delegation_coverage=0.9,
        delegation={"ops": {"aten.convolution.default": [4, 1]}},
        portable_ops=["native_call_convolution.out"],
        sme_path_share=0.5,
        shares={"CONV": 0.40, "GEMM": 0.2, "DATA_MOVEMENT": 0.14, "ELEMENTWISE": 0.05, "OTHER": 0.21},
    )
    verdicts = judge("m", cur, base)
    failed = {v.check: v.message for v in verdicts if v.failed}
    assert "delegated share of graph nodes dropped from 100.0% to 90.0%" == failed["delegation_coverage"]
    assert "aten.convolution.default (1 more node(s) outside the delegate)" in failed["delegated_ops"]
    assert "native_call_convolution.out (now runs as a portable kernel)" in failed["delegated_ops"]
    assert "SME path share of CONV+GEMM time dropped from 90.0% to 50.0%" in failed["sme_path"]
    shares = [v for v in by_check(verdicts, "share") if v.failed]
    assert [v.evidence["category"] for v in shares] == ["CONV", "OTHER"]  # DATA_MOVEMENT moved 4 points only
    assert "-10.0 points, tolerance +-5 points" in shares[0].message


def test_sme_path_lost_entirely_fails() -> None:
    [verdict] = by_check(judge("m", record(noisy(2.0), sme_path_share=None), record(noisy(2.0))), "sme_path")
    assert verdict.failed and "no CONV/GEMM time" in verdict.message


def test_other_versions_are_flagged_without_failing() -> None:
    base = record(noisy(2.0))
    cur = record(noisy(2.0), provenance={**base["provenance"], "executorch": "1.6.0", "model_source_hash": "b" * 64})
    [note] = by_check(judge("m", cur, base), "provenance")
    assert note.status == "note" and not note.failed
    assert "executorch 1.5.1 when the baseline was recorded, 1.6.0 now" in note.message
    assert "model's source changed" in note.message


def test_instruction_metric() -> None:
    base = record(noisy(2.0), instructions={"per_inference": 1_000_000})
    same = record(noisy(3.0), instructions={"per_inference": 1_004_000})  # latency ignored; +0.4% within 0.5%
    more = record(noisy(2.0), instructions={"per_inference": 1_010_000})
    [ok] = by_check(judge("m", same, base, metric="instructions"), "instructions")
    assert ok.status == "ok" and not by_check(judge("m", same, base, metric="instructions"), "latency")
    [bad] = by_check(judge("m", more, base, metric="instructions"), "instructions")
    assert bad.failed and "1,010,000 instructions per inference vs baseline 1,000,000 (+1.000%)" in bad.message
    [missing] = by_check(judge("m", more, record(noisy(2.0)), metric="instructions"), "instructions")
    assert missing.status == "missing" and "--sme2-metric=instructions --sme2-update-baselines" in missing.message


def test_bad_tolerances_and_metric_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="latency=-0.1"):
        Tolerances(latency=-0.1)
    with pytest.raises(UsageError, match="alpha=1.5"):
        Tolerances(alpha=1.5)
    with pytest.raises(UsageError, match="unknown baseline tolerance"):
        Tolerances().replace(latncy=0.2)
    with pytest.raises(UsageError, match="metric 'cycles'"):
        judge("m", record([1.0]), record([1.0]), metric="cycles")


def test_shift_test_and_mann_whitney_floor() -> None:
    assert stats.mann_whitney_floor(5, 5) == pytest.approx(1 / 252)
    assert stats.mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    test = stats.shift_test([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
    assert test.p_slower == pytest.approx(1 / 70) and test.p_faster == pytest.approx(1.0)
    assert test.ratio.value == pytest.approx(6.5 / 2.5)
