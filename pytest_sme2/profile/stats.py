"""The one statistics module: sample statistics and confidence intervals.

Latency samples on shared machines are skewed and their level moves between
replicas, so verdicts compare replica medians (ReplicaShift: a t-test between
the baseline's replicas and the current ones) rather than runs of one replica;
statistics use order-statistic intervals for one median and a seeded percentile
bootstrap for ratios of medians (so the same samples always give the same interval).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 4000
DEFAULT_SEED = 20261122
# A run was disturbed by the machine (another job took the core) when it is slower than the
# fastest run of its kind by more than DISTURBANCE_FACTOR - 1 of that fastest run *and* by more
# than STALL_MIN_MS. Measured on a busy 2-core VM (docs/history.md, "Disturbed runs"): a stall is
# a scheduler slice of 4-9 ms, far above both bounds; undisturbed runs of one replica stay within
# 1.45x of the fastest and, for models of tens of microseconds (where 1.5x is a few microseconds
# of cache and timer noise), within 0.06 ms of it. Either bound alone misfires: the factor alone
# called a third of a 44-us model's quiet runs disturbed; the absolute bound alone called most of
# a 6 ms model's runs disturbed (its quiet runs wander by 1-2 ms).
DISTURBANCE_FACTOR = 1.5
STALL_MIN_MS = 0.5
# The reference run before a model run is disturbed when it was slowed more than that model run was,
# by more than REFERENCE_UNMATCHED_FACTOR (and by more than STALL_MIN_MS). Two things slow runs on a
# shared VM, and the ratio must survive one and leave out the other (docs/history.md, "Disturbed runs"):
# - the whole machine slows (a busy SMT sibling, the hypervisor): model and reference alike, 1.4-1.8x
#   for minutes beside one busy job; the ratio cancels it, and these runs must count;
# - the scheduler shares the core (three runnable tasks on two cores): the 9 ms reference reads 1.45x
#   for whole stretches, under the 1.5x stall bound, while a 0.3 ms model run between two slices is
#   untouched; the ratio then reads 30% fast and hid a +17% slowdown in 5 of 10 pairs.
# The reference's quiet runs stay within 1.2x of its fastest (95th percentile 1.15-1.29x over 2,240).
REFERENCE_UNMATCHED_FACTOR = 1.25
# Fewer undisturbed runs than this on either side and no verdict is given (it would be a guess).
MIN_CLEAN_RUNS = 10


def as_samples(values: Sequence[float] | np.ndarray, what: str = "samples") -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: samples contain NaN or infinity")
    return array


def per_run_ratio(
    samples: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray | None
) -> np.ndarray | None:
    """samples[i] / reference[i] (relative latency), or None without one reference time per sample."""
    if reference is None or len(reference) == 0 or len(reference) != len(samples):
        return None
    return np.asarray(samples, dtype=float) / np.asarray(reference, dtype=float)


def disturbed(
    samples_ms: Sequence[float] | np.ndarray, factor: float = DISTURBANCE_FACTOR, min_excess_ms: float = STALL_MIN_MS
) -> np.ndarray:
    """Which runs the machine disturbed, per run (the last axis); rows of a 2-D array are separate series
    (the operators of a program), and a run is disturbed when any of them is.

    Interference on a shared machine only ever adds time, and a deterministic
    program has a hard floor, so the fastest run is the best estimate of an
    undisturbed one and stays right however many runs stalled (a median-based
    fence fails once half the runs stall, as they do beside two busy jobs).
    """
    array = np.asarray(samples_ms, dtype=float)
    if array.size == 0:
        return np.zeros(array.shape[-1] if array.ndim else 0, dtype=bool)
    floor = np.min(array, axis=-1, keepdims=True)
    excess = array - floor
    stalled = (excess > (factor - 1) * floor) & (excess > min_excess_ms) & (floor >= 0)
    return stalled.any(axis=0) if stalled.ndim == 2 else stalled


def reference_unmatched(
    reference_ms: Sequence[float] | np.ndarray,
    samples_ms: Sequence[float] | np.ndarray,
    factor: float = REFERENCE_UNMATCHED_FACTOR,
    min_excess_ms: float = STALL_MIN_MS,
) -> np.ndarray:
    """Per run: was the reference run before it slowed by more than the run itself (each against its fastest)?

    Relative latency assumes both were measured at the same machine speed; a reference
    slowed alone (a stall, or its core shared for its whole 9 ms) breaks that, a machine
    slowed for both does not.
    """
    reference, samples = np.asarray(reference_ms, dtype=float), np.asarray(samples_ms, dtype=float)
    if reference.size == 0:
        return np.zeros(0, dtype=bool)
    ref_floor, floor = reference.min(), samples.min()
    if ref_floor <= 0 or floor <= 0:
        return np.zeros(reference.size, dtype=bool)
    slowed_alone = (reference / ref_floor) / np.maximum(samples / floor, 1.0)
    return (slowed_alone > factor) & (reference - ref_floor > min_excess_ms)


def undisturbed_runs(
    samples_ms: Sequence[float] | np.ndarray,
    reference_ms: Sequence[float] | np.ndarray | None = None,
    emulated: bool = False,
    op_ms: np.ndarray | None = None,
) -> np.ndarray:
    """The runs a verdict may read: undisturbed in their own time, in each operator's time (``op_ms``,
    operators x runs; a 5 ms stall landing in a 0.2 ms operator of a 20 ms model is invisible in the
    total) and in the reference run right before them.

    The one definition used by Profiles and by baseline records. Emulated time
    says nothing about the machine, so there every run counts.
    """
    samples = np.asarray(samples_ms, dtype=float)
    if emulated:
        return np.ones(samples.size, dtype=bool)
    mask = ~disturbed(samples)
    if op_ms is not None and np.size(op_ms) and np.shape(op_ms)[-1] == samples.size:
        mask &= ~disturbed(op_ms)
    if reference_ms is not None and len(reference_ms) == samples.size:
        mask &= ~reference_unmatched(reference_ms, samples)
    return mask


# A replica with fewer undisturbed runs than this gives no median of its own to the between-replica test.
MIN_RUNS_PER_REPLICA = 5


@dataclass(frozen=True)
class ReplicaShift:
    """Did a quantity move between the baseline's replicas and the current ones?

    The runs of one replica are not independent samples of what a later session will see: the
    program's memory layout, the delegate's overhead and the core its process lands on hold for
    all of its runs, and move the level from one process to the next (docs/history.md, "Between processes").
    So each process contributes one value, the median of its undisturbed runs, and the two sets of
    replica medians are compared with a pooled two-sample t-test: its spread is the spread between
    replicas, and its few degrees of freedom say honestly how little a handful of replicas knows.
    ``log`` compares logarithms (latency ratios); the change is then a ratio - 1.

    ``session`` is how far one session's level moves about the machine's long-run level (sd, in the test's
    units), which no set of replicas measured back to back can show: a baseline recorded in one quiet minute
    and a check an hour later beside other work differ by it. The two sides' levels differ by sqrt(2) of it,
    so it adds 2 session**2 to the variance of the difference (gate/checks/replica_stats.py, docs/gate.md
    "Between sessions"). It is given, not estimated from these replicas, so the t-test's degrees of freedom
    are Welch-Satterthwaite's for an estimated and a known variance component (``effective_df``). A change must
    be significant both ways, against the replicas alone and against replicas and sessions: a small session
    spread would otherwise raise the degrees of freedom more than the error and make the test bolder.
    """

    current: float  # mean of the current replica medians (back-transformed when log)
    baseline: float
    change: float  # current - baseline, or current / baseline - 1 when log
    p_up: float  # H1: the current replicas are higher
    p_down: float
    spread: float  # pooled standard deviation between replicas (log units when log)
    df: int
    n_current: int  # replicas
    n_baseline: int
    runs_current: int  # undisturbed runs behind the replica medians
    runs_baseline: int
    log: bool = False
    session: float = 0.0  # sd of a session's level between sessions (log units when log)

    @property
    def standard_error(self) -> float:
        return float(np.sqrt(sum(self._variances)))

    @property
    def _variances(self) -> tuple[float, float]:
        return difference_variances(self.spread, self.n_current, self.n_baseline, self.session)

    @property
    def _replica_variance(self) -> float:
        return self._variances[0]

    @property
    def effective_df(self) -> float:
        """The replicas' degrees of freedom, widened by the share of the variance the given session spread
        holds (Welch-Satterthwaite; a session spread alone would be a z-test)."""
        return effective_df(*self._variances, self.df)

    def _quantile_step(self, *quantiles: float) -> float:
        """Sum of the t quantiles times the standard error, the larger of the two tests (replicas alone;
        replicas and sessions)."""
        from scipy.stats import t as student

        alone = sum(student.ppf(q, self.df) for q in quantiles) * np.sqrt(self._replica_variance)
        both = sum(student.ppf(q, self.effective_df) for q in quantiles) * self.standard_error
        return float(max(alone, both))

    def interval(self, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
        """Two-sided confidence interval of the change (a ratio - 1 when log)."""
        half = self._quantile_step(0.5 + confidence / 2)
        centre = np.log1p(self.change) if self.log else self.change
        low, high = centre - half, centre + half
        return (float(np.expm1(low)), float(np.expm1(high))) if self.log else (float(low), float(high))

    def detectable_change(self, alpha: float, power: float = 0.95) -> float:
        """The change this design catches with probability ``power`` at ``alpha`` (one-sided), in its units:
        what a baseline must allow for its tolerance to mean anything (gate/quality.py, baseline_quality)."""
        step = self._quantile_step(1 - alpha, power)
        return float(np.expm1(step)) if self.log else float(step)

    def significant_change(self, alpha: float) -> float:
        """The smallest change this comparison could call significant at ``alpha`` (one-sided), in its units:
        the change caught half the time."""
        return self.detectable_change(alpha, power=0.5)


def replica_medians(
    values: Sequence[float] | np.ndarray,
    sizes: Sequence[int],
    keep: np.ndarray | None = None,
    min_runs: int = MIN_RUNS_PER_REPLICA,
) -> tuple[np.ndarray, int]:
    """The median of each process's kept runs (processes with fewer than ``min_runs`` left out), and the runs used.

    ``sizes`` are the run counts of the replicas in order (Profile.replica_sizes); ``keep`` masks runs
    (undisturbed and finite)."""
    array = np.asarray(values, dtype=float)
    if sum(sizes) != array.size:
        raise ValueError(f"replica sizes {list(sizes)} do not add up to the {array.size} runs")
    mask = np.isfinite(array) if keep is None else (np.asarray(keep, dtype=bool) & np.isfinite(array))
    medians, used, start = [], 0, 0
    for size in sizes:
        part = array[start : start + size][mask[start : start + size]]
        start += size
        if part.size >= min_runs:
            medians.append(float(np.median(part)))
            used += int(part.size)
    return np.asarray(medians, dtype=float), used


def difference_variances(spread: float, n_current: int, n_baseline: int, session: float) -> tuple[float, float]:
    """The variance of the difference of two sides' mean levels: (what their replicas estimate, what the given
    between-session spread adds: two sessions' levels, 2 session**2)."""
    return float(spread**2 * (1 / n_current + 1 / n_baseline)), float(2 * session**2)


def effective_df(estimated: float, given: float, df: int) -> float:
    """Welch-Satterthwaite degrees of freedom of a variance that is ``estimated`` (with ``df``) plus ``given``
    (known): df (estimated + given)**2 / estimated**2, capped at 1e6 (all of it given)."""
    if given <= 0:
        return float(df)
    if estimated <= 0:
        return 1e6
    return float(min(1e6, df * (estimated + given) ** 2 / estimated**2))


def replica_shift(
    baseline: np.ndarray,
    current: np.ndarray,
    runs: tuple[int, int] = (0, 0),
    log: bool = False,
    session: float = 0.0,
) -> ReplicaShift | None:
    """Compare replica medians (see :class:`ReplicaShift`); None when the spread between replicas
    cannot be estimated (fewer than three replicas in all). ``session``: the between-session sd allowed for."""
    from scipy.stats import t as student

    base = np.log(baseline) if log else np.asarray(baseline, dtype=float)
    cur = np.log(current) if log else np.asarray(current, dtype=float)
    k, r = base.size, cur.size
    df = k + r - 2
    if k < 1 or r < 1 or df < 1:
        return None
    pooled = float(np.sqrt((((base - base.mean()) ** 2).sum() + ((cur - cur.mean()) ** 2).sum()) / df))
    difference = float(cur.mean() - base.mean())
    estimated, given = difference_variances(pooled, r, k, session)
    if estimated + given > 0:
        # significant only if significant against the replicas alone and against replicas and sessions
        tests = [(difference / np.sqrt(estimated + given), effective_df(estimated, given, df))]
        if estimated > 0:
            tests.append((difference / np.sqrt(estimated), float(df)))
        p_up = max(float(student.sf(statistic, dof)) for statistic, dof in tests)
        p_down = max(float(student.cdf(statistic, dof)) for statistic, dof in tests)
    else:  # every replica agrees exactly: any difference is certain, none is no evidence
        p_up = 0.0 if difference > 0 else 1.0
        p_down = 0.0 if difference < 0 else 1.0
    back = np.exp if log else (lambda x: x)
    return ReplicaShift(
        current=float(back(cur.mean())),
        baseline=float(back(base.mean())),
        change=float(np.expm1(difference)) if log else difference,
        p_up=p_up,
        p_down=p_down,
        spread=pooled,
        df=df,
        n_current=r,
        n_baseline=k,
        runs_current=runs[1],
        runs_baseline=runs[0],
        log=log,
        session=session,
    )


def _bootstrap_medians(samples: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, samples.size, size=(resamples, samples.size))
    return np.median(samples[idx], axis=1)


def _cluster_bootstrap_medians(
    samples: np.ndarray, groups: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Medians of a two-stage bootstrap: the groups (runner processes) drawn with replacement, then the runs
    within each drawn group. Runs of one process share its level, which moves between processes; resampling
    runs alone treats them as independent and gives intervals far too narrow (measured: identical variants
    "significantly" different in 7 of 14 alternated comparisons at 95%; docs/history.md, "Intervals between
    variants")."""
    _, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    ordered = samples[order]
    sizes = np.bincount(inverse)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    k, width = sizes.size, int(sizes.max())
    picks = rng.integers(0, k, size=(resamples, k))
    picked_sizes = sizes[picks][..., None]
    offsets = np.floor(rng.random(size=(resamples, k, width)) * picked_sizes).astype(int)
    values = ordered[starts[picks][..., None] + offsets]
    values = np.where(np.arange(width)[None, None, :] < picked_sizes, values, np.nan)
    return np.nanmedian(values.reshape(resamples, k * width), axis=1)


def _side_medians(
    samples: np.ndarray, groups: Sequence[int] | np.ndarray | None, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    if groups is not None:
        groups = np.asarray(groups)
        if groups.size != samples.size:
            raise ValueError(f"{groups.size} group labels for {samples.size} samples")
        if np.unique(groups).size >= 2:
            return _cluster_bootstrap_medians(samples, groups, resamples, rng)
    return _bootstrap_medians(samples, resamples, rng)


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval."""

    value: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        return f"{self.value:.3g} [{self.low:.3g}, {self.high:.3g}] ({self.confidence:.0%} CI)"

    def as_dict(self) -> dict[str, float]:
        """The JSON form every report and table reads: value, low, high, confidence."""
        return {"value": self.value, "low": self.low, "high": self.high, "confidence": self.confidence}


def median_ci(values: Sequence[float] | np.ndarray, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Median with a distribution-free confidence interval from order statistics.

    The number of samples below the true median is Binomial(n, 1/2), so
    [x_(l), x_(n-l+1)] covers it with probability >= ``confidence`` for the
    largest such l. Exact, deterministic and needs no resampling (which keeps
    building many Profiles cheap); too few samples give [min, max].
    """
    from scipy.stats import binom

    samples = np.sort(as_samples(values))
    n = samples.size
    alpha = (1.0 - confidence) / 2.0
    lower_rank = int(binom.ppf(alpha, n, 0.5))  # P(B <= lower_rank - 1) <= alpha
    if lower_rank >= 1 and binom.cdf(lower_rank - 1, n, 0.5) > alpha:
        lower_rank -= 1
    if lower_rank < 1:
        low, high = samples[0], samples[-1]
    else:
        low, high = samples[lower_rank - 1], samples[n - lower_rank]
    return Interval(float(np.median(samples)), float(low), float(high), confidence)


def ratio_of_medians_ci(
    numerator: Sequence[float] | np.ndarray,
    denominator: Sequence[float] | np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    numerator_groups: Sequence[int] | np.ndarray | None = None,
    denominator_groups: Sequence[int] | np.ndarray | None = None,
) -> Interval:
    """median(numerator) / median(denominator) with a bootstrap CI.

    The two sample sets are resampled independently (they come from different
    runs), which is what makes the interval honest about noise on both sides.
    ``*_groups``: which runner process (chunk) each sample came from; a side with two or more is resampled by
    process first, then by run within it (_cluster_bootstrap_medians), so the process-to-process movement
    of the level is in the interval. A side from one process can only show run-to-run noise.
    """
    num = as_samples(numerator, "numerator")
    den = as_samples(denominator, "denominator")
    if np.median(den) <= 0:
        raise ValueError("denominator median is not positive; cannot form a ratio")
    rng = np.random.default_rng(seed)
    boot_num = _side_medians(num, numerator_groups, resamples, rng)
    boot_den = _side_medians(den, denominator_groups, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = boot_num / boot_den
    ratios = ratios[np.isfinite(ratios)]
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return Interval(float(np.median(num) / np.median(den)), float(low), float(high), confidence)


@dataclass(frozen=True)
class SampleStats:
    """Statistics of one sample of runs: latency in milliseconds, or a unitless ratio (relative latency)."""

    n: int
    median: float
    mean: float
    stdev: float
    min: float
    max: float
    p10: float
    p90: float
    cv: float  # coefficient of variation: stdev / mean
    median_ci: Interval

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> "SampleStats":
        samples = as_samples(values)
        mean = float(samples.mean())
        stdev = float(samples.std(ddof=1)) if samples.size > 1 else 0.0
        p10, p90 = np.quantile(samples, [0.1, 0.9])
        return cls(
            n=int(samples.size),
            median=float(np.median(samples)),
            mean=mean,
            stdev=stdev,
            min=float(samples.min()),
            max=float(samples.max()),
            p10=float(p10),
            p90=float(p90),
            cv=stdev / mean if mean > 0 else 0.0,
            median_ci=median_ci(samples),
        )

    def as_dict(self, unit: str = "ms") -> dict[str, float]:
        """Keys carry the unit (``median_ms``); ``unit=""`` for unitless samples such as relative latency."""
        u = f"_{unit}" if unit else ""
        return {
            "n": self.n,
            f"median{u}": self.median,
            f"mean{u}": self.mean,
            f"stdev{u}": self.stdev,
            f"min{u}": self.min,
            f"max{u}": self.max,
            f"p10{u}": self.p10,
            f"p90{u}": self.p90,
            "cv": self.cv,
            f"median_ci_low{u}": self.median_ci.low,
            f"median_ci_high{u}": self.median_ci.high,
        }


def mann_whitney_p(
    first: Sequence[float] | np.ndarray,
    second: Sequence[float] | np.ndarray,
    alternative: str = "greater",
    method: str = "auto",
) -> float:
    """One- or two-sided Mann-Whitney U p-value that ``first`` tends to be larger than ``second``.

    Rank-based, so one slow outlier run cannot make or break a verdict; exact
    for small tie-free samples, normal approximation with tie correction otherwise.
    """
    from scipy.stats import mannwhitneyu

    a = as_samples(first, "first")
    b = as_samples(second, "second")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative={alternative!r}: use 'greater', 'less' or 'two-sided'")
    if np.all(a == a[0]) and np.all(b == b[0]) and a[0] == b[0]:
        return 1.0  # identical constant samples: no evidence either way (scipy would return NaN)
    return float(mannwhitneyu(a, b, alternative=alternative, method=method).pvalue)


CHANGE_ALPHA = 0.001
CHANGE_MIN_SEGMENT = 5


def change_points(
    values: Sequence[float] | np.ndarray,
    *,
    min_effect: float = 0.0,
    relative: bool = True,
    alpha: float = CHANGE_ALPHA,
    min_segment: int = CHANGE_MIN_SEGMENT,
) -> list[int]:
    """Indices where a new level of a series begins (a history of one quantity, one value per session).

    Binary segmentation with the two-sided Mann-Whitney U test: of every split leaving at least
    ``min_segment`` values on each side, take the one with the smallest p-value; it is a change
    point when p < ``alpha`` and the medians on its two sides differ by more than ``min_effect``
    (relative to the earlier median when ``relative``, else absolute); then each side is
    searched the same way. Rank-based, so one odd session is not a change, and exact values
    (instruction counts, planned memory: ``min_effect`` 0) change wherever they change. The
    smallest p-value of 5 vs 5 values (about 0.009 two-sided) is above alpha: a level must hold
    for more sessions than that before it can be told from noise. Binary segmentation finds
    steps; a level that leaves and comes back within a few sessions can be missed.
    """
    series = np.asarray(values, dtype=float)
    found: list[int] = []

    def search(start: int, end: int) -> None:
        best: tuple[float, int] | None = None
        for split in range(start + min_segment, end - min_segment + 1):
            before, after = series[start:split], series[split:end]
            # one method for every split (the normal approximation with tie correction): "auto" would be exact
            # for small sides only, and p-values of different methods do not rank splits fairly
            p = mann_whitney_p(after, before, "two-sided", method="asymptotic")
            if best is None or p < best[0]:
                best = (p, split)
        if best is None or not best[0] < alpha:
            return
        split = best[1]
        then, now = float(np.median(series[start:split])), float(np.median(series[split:end]))
        effect = abs(now - then) / abs(then) if relative and then != 0 else abs(now - then)
        if not effect > min_effect:
            return
        found.append(split)
        search(start, split)
        search(split, end)

    if np.isfinite(series).all():
        search(0, series.size)
    return sorted(found)
