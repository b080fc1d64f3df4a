"""Bootstrap intervals and summaries on known samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_sme2.errors import OneProcessIntervalWarning
from pytest_sme2.profile import stats
from pytest_sme2.profile.stats import Interval, SampleStats, as_samples, median_ci, ratio_of_medians_ci

NARROW = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.00, 1.03, 0.97, 1.00]
WIDE = [0.5, 1.6, 0.7, 1.3, 0.6, 1.0, 1.5, 0.8, 1.0, 1.9, 0.4, 1.1]


# ---------------------------------------------------------------- median_ci


def test_constant_samples_have_zero_width() -> None:
    ci = median_ci([2.5] * 20)
    assert ci.value == ci.low == ci.high == 2.5


def test_median_ci_value_is_the_median() -> None:
    ci = median_ci(WIDE)
    assert ci.value == pytest.approx(float(np.median(WIDE)), abs=1e-15)
    assert ci.low <= ci.value <= ci.high
    assert min(WIDE) <= ci.low and ci.high <= max(WIDE)
    assert ci.confidence == 0.95


def test_wider_spread_gives_wider_interval() -> None:
    narrow = median_ci(NARROW)
    wide = median_ci(WIDE)
    assert (wide.high - wide.low) > 5 * (narrow.high - narrow.low)
    assert narrow.high > narrow.low  # not degenerate


def test_higher_confidence_is_not_narrower() -> None:
    c80 = median_ci(WIDE, confidence=0.80)
    c99 = median_ci(WIDE, confidence=0.99)
    assert c99.low <= c80.low and c80.high <= c99.high
    assert c99.confidence == 0.99


def test_same_samples_same_interval() -> None:
    assert median_ci(WIDE) == median_ci(list(WIDE))
    assert ratio_of_medians_ci(WIDE, NARROW, seed=3) == ratio_of_medians_ci(WIDE, NARROW, seed=3)


def test_median_ci_uses_the_textbook_order_statistics() -> None:
    # For n = 100 the distribution-free 95% interval of the median runs from
    # the 40th to the 61st order statistic (binomial tables).
    ci = median_ci(np.arange(1.0, 101.0)[::-1])
    assert (ci.low, ci.high) == (40.0, 61.0)
    # n = 5 is too few for 95% (P(all on one side) = 1/16 > 2.5%): min and max.
    ci = median_ci([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (ci.low, ci.value, ci.high) == (1.0, 3.0, 5.0)


def test_different_seed_moves_ratio_interval_not_value() -> None:
    a = ratio_of_medians_ci(WIDE, NARROW, seed=1, resamples=200)
    b = ratio_of_medians_ci(WIDE, NARROW, seed=2, resamples=200)
    assert a.value == b.value
    assert (a.low, a.high) != (b.low, b.high)


def test_single_sample() -> None:
    ci = median_ci([3.0])
    assert (ci.value, ci.low, ci.high) == (3.0, 3.0, 3.0)


# ------------------------------------------------------------ ratio of medians


def test_ratio_value_exact_and_inside_interval() -> None:
    num = [3.0, 3.1, 2.9, 3.05, 2.95, 3.0, 3.2]
    den = [1.0, 1.1, 0.9, 1.02, 0.98, 1.0, 1.05]
    ci = ratio_of_medians_ci(num, den)
    assert ci.value == pytest.approx(3.0 / 1.0, abs=1e-15)
    assert ci.low <= ci.value <= ci.high
    assert min(num) / max(den) <= ci.low and ci.high <= max(num) / min(den)


def test_ratio_of_constants_is_exact() -> None:
    ci = ratio_of_medians_ci([6.0] * 5, [2.0] * 9)
    assert (ci.value, ci.low, ci.high) == (3.0, 3.0, 3.0)


def test_ratio_value_uses_medians_not_means() -> None:
    num = [1.0, 1.0, 1.0, 100.0]  # median 1.0, mean 25.75
    den = [0.5, 0.5, 0.5]
    assert ratio_of_medians_ci(num, den).value == pytest.approx(2.0, abs=1e-15)


def test_str_of_interval() -> None:
    text = str(Interval(1.5, 1.25, 1.75, 0.95))
    assert "1.5" in text and "1.25" in text and "1.75" in text and "95%" in text


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf"), 1.0]])
def test_median_ci_rejects_bad_samples(bad) -> None:
    with pytest.raises(ValueError, match="no samples|NaN"):
        median_ci(bad)


@pytest.mark.parametrize("bad", [[], [float("nan")]])
def test_ratio_rejects_bad_numerator_and_denominator(bad) -> None:
    with pytest.raises(ValueError, match="numerator"):
        ratio_of_medians_ci(bad, [1.0])
    with pytest.raises(ValueError, match="denominator"):
        ratio_of_medians_ci([1.0], bad)


@pytest.mark.parametrize("den", [[0.0, 0.0, 0.0], [-1.0, -2.0], [0.0, 0.0, 1.0]])
def test_ratio_rejects_non_positive_denominator(den) -> None:
    with pytest.raises(ValueError, match="denominator"):
        ratio_of_medians_ci([1.0, 2.0], den)


def test_as_samples_flattens() -> None:
    assert as_samples([[1, 2], [3, 4]]).tolist() == [1.0, 2.0, 3.0, 4.0]


# ----------------------------------------------------------------- SampleStats


def test_summary_fields_match_numpy() -> None:
    values = np.array(WIDE)
    s = SampleStats.of(WIDE)
    assert s.n == len(WIDE)
    assert s.median == pytest.approx(np.median(values), abs=1e-15)
    assert s.mean == pytest.approx(values.mean(), abs=1e-15)
    assert s.stdev == pytest.approx(values.std(ddof=1), abs=1e-15)
    assert s.min == values.min() and s.max == values.max()
    assert s.p10 == pytest.approx(np.percentile(values, 10), abs=1e-15)
    assert s.p90 == pytest.approx(np.percentile(values, 90), abs=1e-15)
    assert s.cv == pytest.approx(values.std(ddof=1) / values.mean(), abs=1e-15)
    assert s.median_ci == median_ci(WIDE)


def test_summary_known_small_sample() -> None:
    s = SampleStats.of([1.0, 2.0, 3.0, 4.0])
    assert s.median == 2.5 and s.mean == 2.5
    assert s.stdev == pytest.approx(math.sqrt(5.0 / 3.0), abs=1e-15)  # sum sq dev 5, n-1 = 3
    assert s.p10 == pytest.approx(1.3, abs=1e-12)  # linear interpolation: 1 + 0.3 * (2 - 1)
    assert s.p90 == pytest.approx(3.7, abs=1e-12)


def test_summary_of_one_sample_has_zero_spread() -> None:
    s = SampleStats.of([4.0])
    assert (s.n, s.median, s.stdev, s.cv, s.p10, s.p90) == (1, 4.0, 0.0, 0.0, 4.0, 4.0)


def test_summary_as_dict_keys_and_values() -> None:
    s = SampleStats.of(NARROW)
    d = s.as_dict()
    assert d["n"] == len(NARROW)
    assert d["median_ms"] == s.median and d["p90_ms"] == s.p90
    assert d["median_ci_low_ms"] == s.median_ci.low and d["median_ci_high_ms"] == s.median_ci.high


def test_summary_rejects_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        SampleStats.of([1.0, float("nan")])


# --------------------------------------------------------------------- disturbed runs


def test_a_stall_is_both_far_above_the_fastest_run_and_long() -> None:
    # 1.1 ms program: the 2.0 ms run is 0.9 ms (> 0.5 ms) and 82% (> 50%) above the fastest.
    assert stats.disturbed([1.1, 1.2, 2.0, 1.15]).tolist() == [False, False, True, False]


def test_quiet_jitter_of_a_tiny_model_is_not_a_stall() -> None:
    # A 44 us model: 66 us is 1.5x the fastest but only 22 us slower, cache and timer noise, not a stall.
    assert not stats.disturbed([0.044, 0.066, 0.050, 0.071]).any()
    # A 4.5 ms scheduler slice landing in it is one.
    assert stats.disturbed([0.044, 4.544, 0.050]).tolist() == [False, True, False]


def test_quiet_wander_of_a_long_model_is_not_a_stall() -> None:
    # A 6 ms model whose quiet runs wander by 1-2 ms (seen on this VM): above 0.5 ms, below 1.5x.
    assert not stats.disturbed([5.2, 6.3, 7.1, 6.0]).any()


def test_a_stall_inside_one_operator_of_a_long_model_is_seen_by_the_operator() -> None:
    e2e = np.array([20.0, 20.1, 24.6, 20.05])  # +4.5 ms: 23% of E2E, below 1.5x
    ops = np.array(
        [
            [0.2, 0.21, 4.7, 0.2],  # the stall landed in this 0.2 ms operator
            [19.8, 19.89, 19.9, 19.85],
        ]
    )
    assert not stats.disturbed(e2e).any()
    assert stats.disturbed(ops).tolist() == [False, False, True, False]
    assert stats.undisturbed_runs(e2e, op_ms=ops).tolist() == [True, True, False, True]


def test_runs_after_a_stalled_reference_run_are_left_out_and_emulated_runs_all_count() -> None:
    e2e, reference = [1.0, 1.0, 1.0], [3.0, 9.0, 3.1]
    assert stats.undisturbed_runs(e2e, reference).tolist() == [True, False, True]
    assert stats.undisturbed_runs([1.0, 9.0], emulated=True).tolist() == [True, True]


def test_reference_runs_slowed_alone_are_left_out_though_below_the_stall_bound() -> None:
    # Beside two busy jobs on 2 cores the 9 ms reference runs whole stretches at about 1.45x its fastest
    # (three tasks on two cores) while the short model between two slices is untouched: the 1.5x stall
    # bound misses them; slowed 1.25x more than the model run after it, they are left out. Its quiet
    # 1.1x wander stays in.
    reference = [9.0, 9.9, 13.05, 13.0, 9.1, 17.2]
    assert stats.disturbed(reference).tolist() == [False, False, False, False, False, True]
    assert stats.undisturbed_runs([0.3] * 6, reference).tolist() == [True, True, False, False, True, False]


def test_a_machine_slowed_for_model_and_reference_alike_keeps_its_runs() -> None:
    # Beside one busy job the whole VM ran 1.4-1.6x slower for minutes, model and reference alike:
    # the ratio cancels that, so those runs count (a 1.25x bound on the reference alone called 89 of
    # 120 such runs disturbed and refused the baseline).
    model = [0.28, 0.42, 0.43, 0.29, 0.45, 0.28]
    reference = [9.0, 13.3, 13.0, 9.1, 13.6, 9.05]
    assert stats.reference_unmatched(reference, model).tolist() == [False] * 6
    assert stats.undisturbed_runs(model, reference).all()
    # The same reference times beside a model run that was not slowed: left out.
    assert stats.reference_unmatched(reference, [0.28] * 6).tolist() == [False, True, True, False, True, False]


def _chunked(levels: list[float], runs: int = 10, noise: float = 0.005, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Runs of several processes: each process at its own level (the machine's state when it started), its
    runs scattered tightly around it, as measured on this VM (docs/history.md, "Intervals between variants")."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([level * (1 + rng.normal(0, noise, runs)) for level in levels])
    return values, np.repeat(np.arange(len(levels)), runs)


def test_process_levels_are_not_a_difference_when_resampled_by_process() -> None:
    """Two variants of one program: the same process-to-process levels (+-6%), in another order. Resampling runs
    as if independent calls them different at 95%; resampling processes, then runs, does not."""
    a, groups_a = _chunked([1.00, 1.06, 0.97, 1.03], seed=1)
    b, groups_b = _chunked([1.06, 1.03, 1.06, 0.97], seed=2)
    by_run = ratio_of_medians_ci(a, b)
    by_process = ratio_of_medians_ci(a, b, numerator_groups=groups_a, denominator_groups=groups_b)
    assert by_run.high < 1.0  # the old, overconfident answer: "significantly faster"
    assert by_process.low < 1.0 < by_process.high
    assert by_process.value == by_run.value  # the estimate is the same; only its interval is honest


def test_a_real_difference_stays_significant_when_resampled_by_process() -> None:
    a, groups_a = _chunked([1.30, 1.36, 1.27, 1.33], seed=3)  # 30% slower, same process spread
    b, groups_b = _chunked([1.00, 1.06, 0.97, 1.03], seed=4)
    interval = ratio_of_medians_ci(a, b, numerator_groups=groups_a, denominator_groups=groups_b)
    assert 1.1 < interval.low < interval.value < interval.high and 1.25 < interval.value < 1.35


def test_one_process_a_side_falls_back_to_runs_and_labels_must_match() -> None:
    a, _ = _chunked([1.0], seed=5)
    b, _ = _chunked([1.1], seed=6)
    one = np.zeros(a.size, dtype=int)
    assert ratio_of_medians_ci(a, b, numerator_groups=one, denominator_groups=one) == ratio_of_medians_ci(a, b)
    with pytest.raises(ValueError, match="9 group labels for 10 samples"):
        ratio_of_medians_ci(a, b, numerator_groups=one[:9])


def test_profiles_merged_from_chunks_resample_by_chunk(tmp_path) -> None:  # noqa: ANN001
    """compare_variants merges each variant's chunks (separate runner processes): the merged Profile keeps
    their sizes, and speedup_over resamples by them and says from how many processes it came."""
    from helpers_etdump import execute_only

    from pytest_sme2.profile.profile import Profile

    def merged(name: str, levels: list[float], seed: int) -> Profile:
        values, _ = _chunked(levels, runs=12, seed=seed)
        chunks = [
            Profile.from_etdump(
                execute_only(tmp_path / f"{name}{i}.etdp", [int(v * 1e6) for v in values[i * 12 : (i + 1) * 12]]),
                model="m",
                recipe="r",
                variant=name,
            )
            for i in range(len(levels))
        ]
        return Profile.concat(chunks)

    a = merged("a", [1.00, 1.06, 0.97, 1.03], seed=1)
    b = merged("b", [1.06, 1.03, 1.06, 0.97], seed=2)
    assert a.chunk_sizes == [12, 12, 12, 12] and list(a.run_groups[:13]) == [0] * 12 + [1]
    assert Profile.concat([a, merged("a", [1.0, 1.0], seed=3)]).chunk_sizes == [12] * 6  # merged again: kept
    speedup = b.speedup_over(a)
    assert speedup.this_chunks == speedup.other_chunks == 4
    assert speedup.low < 1.0 < speedup.high and "48 runs in 4 processes" in repr(speedup)
    single = Profile.from_etdump(
        execute_only(tmp_path / "one.etdp", [1_000_000] * 12), model="m", recipe="r", variant="a"
    )
    with pytest.warns(OneProcessIntervalWarning, match="one runner process a side: the interval is run-to-run noise"):
        one = single.speedup_over(single)
    assert single.chunk_sizes == [12] and "in 1 process" in repr(one) and one.within_one_process
    assert repr(one).endswith("in 1 process); 1-process CI)")
    assert not speedup.within_one_process and "1-process CI" not in repr(speedup)


def test_a_speedup_from_several_processes_a_side_gives_no_one_process_warning(tmp_path) -> None:  # noqa: ANN001
    import warnings

    from helpers_etdump import execute_only

    from pytest_sme2.profile.profile import Profile
    from pytest_sme2.report.table import speedup as shown

    chunks = [
        Profile.from_etdump(
            execute_only(tmp_path / f"c{i}.etdp", [1_000_000 + 1000 * i] * 8), model="m", recipe="r", variant="a"
        )
        for i in range(2)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", OneProcessIntervalWarning)
        two = Profile.concat(chunks).speedup_over(Profile.concat(chunks))
    assert shown(two.as_dict()) == "1.00x [1.00, 1.00]"
    with pytest.warns(OneProcessIntervalWarning):
        one = chunks[0].speedup_over(chunks[1])
    assert shown(one.as_dict()).endswith(" (1-process CI)")


# ---------------------------------------------------------------- between sessions

# Ten baseline processes recorded back to back (they agree within 1%) and one check process 13.2% slower: the
# local target's false alarm beside busy jobs (benchmarks/results/false_alarms.jsonl).
QUIET_BASELINE = np.array([1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.0, 1.0, 1.01, 0.99])


def test_a_session_spread_widens_the_test_by_two_sessions_variance() -> None:
    from scipy.stats import norm

    session = math.log1p(0.03)
    shifted = stats.replica_shift(QUIET_BASELINE, np.array([1.132]), log=True, session=session)
    alone = stats.replica_shift(QUIET_BASELINE, np.array([1.132]), log=True)
    assert alone.p_up < 1e-6  # the processes alone call it certain
    spread = np.std(np.log(QUIET_BASELINE), ddof=1)  # pooled: the one check process adds no sum of squares
    variance = spread**2 * (1 + 1 / 10) + 2 * session**2
    assert shifted.standard_error == pytest.approx(math.sqrt(variance))
    # nearly all of the variance is given, so the test is nearly a z-test on it
    assert shifted.p_up == pytest.approx(norm.sf(math.log(1.132) / math.sqrt(variance)), rel=0.05)
    assert shifted.p_up > 0.001  # not a regression at the gate's alpha


def test_a_session_spread_never_makes_a_change_more_significant() -> None:
    rng = np.random.default_rng(4)
    for _ in range(200):
        base = np.exp(rng.normal(0, rng.uniform(0.001, 0.05), size=rng.integers(2, 11)))
        current = np.exp(rng.normal(rng.uniform(-0.3, 0.3), 0.02, size=rng.integers(1, 5)))
        session = rng.uniform(0, 0.04)
        without = stats.replica_shift(base, current, log=True)
        with_session = stats.replica_shift(base, current, log=True, session=session)
        assert with_session.p_up >= without.p_up and with_session.p_down >= without.p_down
        assert with_session.significant_change(0.001) >= without.significant_change(0.001)
        low, high = with_session.interval()
        low0, high0 = without.interval()
        assert low <= low0 + 1e-12 and high >= high0 - 1e-12


def test_a_large_change_is_still_caught_beside_a_session_spread() -> None:
    caught = stats.replica_shift(QUIET_BASELINE, np.array([1.30, 1.31]), log=True, session=math.log1p(0.02))
    assert caught.p_up < 0.001


def test_effective_degrees_of_freedom() -> None:
    assert stats.effective_df(1.0, 0.0, 9) == 9
    assert stats.effective_df(0.0, 1.0, 9) == 1e6
    assert stats.effective_df(1.0, 1.0, 9) == pytest.approx(9 * 4)
