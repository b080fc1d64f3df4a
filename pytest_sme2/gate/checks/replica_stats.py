"""The statistics the measured checks share: which runs a verdict may read, and a quantity judged between replicas.

Time-based quantities (relative latency, category shares, delegation coverage, SME path share, start-up) fail
only when they moved more than their tolerance *and* a t-test between the baseline's and this run's replica
medians calls the move significant (stats.ReplicaShift; one-sided, shares either way): the runs of one replica
are not independent. Latency and shares must also have moved by more than ``min_effect_ms`` of the run.
Disturbed runs never decide; too few undisturbed ones make a verdict ``inconclusive``. docs/gate.md has the
whole story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_sme2.gate.checks.base import pct, points_short
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Verdict
from pytest_sme2.profile import stats


def replica_shift_of(
    records: tuple[GateRecord, GateRecord],
    values: Sequence[np.ndarray],
    keep: Sequence[np.ndarray],
    log: bool = False,
    session: float = 0.0,
) -> "stats.ReplicaShift | str":
    """The between-replica comparison of one quantity (current, baseline order), or why there is none.
    ``session``: how far the quantity moves between sessions beyond its replicas (Tolerances.session_latency
    or session_shares, in the test's units), allowed for in the t-test."""
    medians, used = [], []
    for record, series, mask in zip(records, values, keep):
        found, runs = replica_medians(record, series, mask)
        medians.append(found)
        used.append(runs)
    if log and any(np.any(m <= 0) for m in medians):
        return "a replica median is not positive"
    test = stats.replica_shift(medians[1], medians[0], (used[1], used[0]), log=log, session=session)
    if test is None:
        return (
            f"the baseline holds {medians[1].size} replica(s) with {stats.MIN_RUNS_PER_REPLICA} or more "
            f"undisturbed runs, and this run {medians[0].size}: with fewer than three in all, how far the "
            f"level moves between processes is unknown, and runs of one process cannot stand in for it; "
            f"record the baseline again with --sme2-update-baselines (it runs --sme2-baseline-replicas "
            f"replicas)"
        )
    return test


def replicas_text(test: "stats.ReplicaShift") -> str:
    """How the replica comparison was made, for a verdict's numbers."""

    def amount(value: float) -> str:
        return f"{np.expm1(value):.1%}" if test.log else f"{value * 100:.1f} points"

    sessions = f", sessions by {amount(test.session)} (allowed)" if test.session else ""
    return (
        f"{test.n_current} vs {test.n_baseline} replica(s) of {test.runs_current} vs {test.runs_baseline} "
        f"undisturbed runs, replicas differ by {amount(test.spread)} (sd){sessions}"
    )


def clean_runs(record: GateRecord, with_reference: bool = False) -> np.ndarray:
    """Which runs of a record a verdict may read (stats.undisturbed_runs, the Profile's own definition):
    undisturbed runs, and for relative latency also an undisturbed reference run before each."""
    reference = record.reference_ms if with_reference else None
    mask = stats.undisturbed_runs(record.samples_ms, reference, bool(record.emulated))
    indices = record.disturbed_run_indices
    if indices and not record.emulated:  # stalls inside one operator, seen by the Profile
        mask[[i for i in indices if 0 <= i < mask.size]] = False
    return mask


def left_out(clean: Sequence[np.ndarray]) -> str:
    counts = [int((~mask).sum()) for mask in clean]
    return f"; {counts[0]} vs {counts[1]} disturbed runs left out" if any(counts) else ""


def too_few(clean: Sequence[np.ndarray]) -> str:
    """Why no verdict can be given (empty if it can): too few undisturbed runs on a side."""
    for side, mask in zip(("this run", "the baseline"), clean):
        if int(mask.sum()) < stats.MIN_CLEAN_RUNS:
            return (
                f"{side} has {int(mask.sum())} undisturbed of {mask.size} runs, fewer than "
                f"{stats.MIN_CLEAN_RUNS}; the machine was too busy or the device throttled (run again on a "
                f"quieter or cooler machine, wait for it with --sme2-cooldown-temp, or make more runs: --sme2-runs)"
            )
    return ""


def per_run(record: GateRecord, key: str, category: str | None = None) -> np.ndarray | None:
    """The record's per-run values of one quantity (its ``per_run`` field ``key``; NaN where a run has none);
    None if it has none."""
    values: Any = None if record.per_run is None else getattr(record.per_run, key)
    if category is not None:
        values = (values or {}).get(category)
    if values is None:
        return None
    return np.array([np.nan if v is None else v for v in values], dtype=float)


@dataclass(frozen=True)
class PerRunQuantity:
    """One per-run quantity and how per_run_verdict judges it: the check it belongs to, its name in verdicts
    (``what``; ``short`` in a failing test's message, default ``what``), the record's ``per_run`` key (and
    ``category`` within it, for shares), the tolerance in points, alpha, whether a rise fails too
    (``two_sided``), ``min_effect_ms`` (for shares of the run's time: a change must be more than that many ms of
    the baseline's median run) and ``session``: the points it moves between sessions beyond its replicas,
    allowed for in the t-test."""

    check: str
    what: str
    key: str
    tolerance: float
    alpha: float
    two_sided: bool
    category: str | None = None
    min_effect_ms: float = 0.0
    short: str = ""
    session: float = 0.0

    def evidence(self, numbers: Mapping[str, Any] | None = None, judged: bool = False) -> Evidence:
        """A verdict's evidence: the tolerance, alpha and ``numbers``, with the share's category; ``judged``: the
        t-test between replicas decided."""
        found = {"tolerance": self.tolerance, "alpha": self.alpha, **(numbers or {})}
        return Evidence(found, category=self.category, statistical=judged)


def per_run_verdict(quantity: PerRunQuantity, label: str, current: GateRecord, baseline: GateRecord) -> Verdict:
    """One per-run quantity judged like latency: median change beyond ``quantity.tolerance`` points *and*
    significant, and (``quantity.min_effect_ms``) a change of more than that many ms of the baseline's median
    run."""
    q = quantity
    now, then = (per_run(r, q.key, q.category) for r in (current, baseline))
    if now is None or then is None:
        return _per_run_missing(q, label, baseline, now, then)
    values = (now, then)
    clean = tuple(clean_runs(r) for r in (current, baseline))
    if len(values[0]) != clean[0].size or len(values[1]) != clean[1].size:
        return Verdict(
            q.check,
            Status.INCONCLUSIVE,
            label,
            f"{q.what} not judged: per-run values do not match the runs",
            q.evidence(),
        )
    keep = tuple(m & np.isfinite(v) for v, m in zip(values, clean))
    few = too_few(keep)
    if few:
        return Verdict(q.check, Status.INCONCLUSIVE, label, f"{q.what} not judged: {few}", q.evidence())
    test = replica_shift_of((current, baseline), values, keep, session=q.session)
    if isinstance(test, str):
        return Verdict(q.check, Status.INCONCLUSIVE, label, f"{q.what} not judged: {test}", q.evidence())
    return _per_run_judged(q, label, baseline, test, clean)


def _per_run_missing(
    q: PerRunQuantity,
    label: str,
    baseline: GateRecord,
    now: np.ndarray | None,
    then: np.ndarray | None,
) -> Verdict:
    """per_run_verdict where a side has no values: OK when neither has, inconclusive for a baseline older than
    per-run values, and a regression when the other side has (a new one only when a rise fails too)."""
    if now is None and then is None:
        return Verdict(q.check, Status.OK, label, f"{q.what}: neither side has any", q.evidence())
    side = "the baseline" if then is None else "this run"
    if side == "the baseline" and baseline.per_run is None:
        return Verdict(
            q.check,
            Status.INCONCLUSIVE,
            label,
            f"{q.what} not judged: the baseline was recorded by an older pytest-sme2 without per-run "
            f"values; record it again with --sme2-update-baselines",
            q.evidence(),
        )
    if q.two_sided or side == "this run":
        return Verdict(
            q.check, Status.REGRESSION, label, f"{q.what}: {side} has none, the other side has", q.evidence()
        )
    return Verdict(q.check, Status.OK, label, f"{q.what}: the baseline had none", q.evidence())


def _per_run_judged(
    q: PerRunQuantity,
    label: str,
    baseline: GateRecord,
    test: stats.ReplicaShift,
    clean: tuple[np.ndarray, ...],
) -> Verdict:
    """per_run_verdict once the t-test between replicas decided: a regression beyond the tolerance, alpha and
    the minimum effect in a failing direction, otherwise OK saying why."""
    change = test.change
    p = test.p_up if change > 0 else test.p_down
    low, high = test.interval()
    numbers: dict[str, Any] = {
        "current": test.current,
        "baseline": test.baseline,
        "change": change,
        "p": p,
        "current_runs": test.runs_current,
        "baseline_runs": test.runs_baseline,
        "current_replicas": test.n_current,
        "baseline_replicas": test.n_baseline,
        "between_replicas": test.spread,
        "between_sessions": test.session,
        "current_disturbed": int((~clean[0]).sum()),
        "baseline_disturbed": int((~clean[1]).sum()),
        "change_low": low,
        "change_high": high,
    }
    text = (
        f"{q.what} {pct(test.baseline)} -> {pct(test.current)} ({change * 100:+.1f} points, 95% CI "
        f"[{low * 100:+.1f}, {high * 100:+.1f}]; {replicas_text(test)}{left_out(clean)}; "
        f"t-test p={p:.2g})"
    )
    bad_direction = q.two_sided or change < 0
    effect_ms = abs(change) * median_run_ms(baseline, clean[1])
    big_enough = not q.min_effect_ms or effect_ms > q.min_effect_ms  # coverage and SME path have no floor
    if q.min_effect_ms:
        numbers.update({"effect_ms": effect_ms, "min_effect_ms": q.min_effect_ms})
    if abs(change) > q.tolerance and p < q.alpha and bad_direction and big_enough:
        bound = f"+-{q.tolerance * 100:g}" if q.two_sided else f"-{q.tolerance * 100:g}"
        floor = f" and {q.min_effect_ms:g} ms of the run ({effect_ms:.3g} ms)" if q.min_effect_ms else ""
        return Verdict(
            q.check,
            Status.REGRESSION,
            label,
            f"{text}; tolerance {bound} points{floor}, alpha {q.alpha:g}",
            q.evidence(numbers, True).worded(points_short(q.short or q.what, test.current, test.baseline)),
        )
    why = _per_run_why_ok(q, test, p, effect_ms, big_enough, bad_direction)
    return Verdict(q.check, Status.OK, label, f"{text}: {why}", q.evidence(numbers, True))


def _per_run_why_ok(
    q: PerRunQuantity, test: stats.ReplicaShift, p: float, effect_ms: float, big_enough: bool, bad_direction: bool
) -> str:
    """Why a judged per-run quantity is OK: within tolerance, below the minimum effect, not significant, or
    improved."""
    change = test.change
    if abs(change) <= q.tolerance:
        return "within tolerance"
    if not big_enough and bad_direction:
        return (
            f"below the minimum effect: {abs(change) * 100:.1f} points of a {effect_ms / abs(change):.3g} ms run "
            f"are {effect_ms:.3g} ms, not more than {q.min_effect_ms:g} ms (min_effect_ms)"
        )
    if p >= q.alpha:
        return (
            f"not significant (only changes beyond {test.significant_change(q.alpha) * 100:.1f} points can be told "
            f"from how far replicas{' and sessions' if test.session else ''} move it)"
        )
    return "improved"


def median_run_ms(record: GateRecord, clean: np.ndarray) -> float:
    """The record's median undisturbed run in ms (0 without one): what min_effect_ms weighs a share's points by."""
    return float(np.median(np.asarray(record.samples_ms, dtype=float)[clean])) if clean.any() else 0.0


def replica_medians(record: GateRecord, values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, int]:
    sizes = record.replica_sizes or [len(values)]
    try:
        return stats.replica_medians(values, sizes, keep)
    except ValueError:  # sizes of another run count (an older record): one replica
        return stats.replica_medians(values, [len(values)], keep)


@dataclass(frozen=True)
class ShiftQuantity:
    """One quantity with a value per replica and how shift_verdict judges it: the check, its name in verdicts
    (``what``; ``short`` in a failing test's message, default ``what``), its unit, the tolerance, alpha and the
    minimum effect (in ``unit``). ``basis``: what the values are relative to (empty: raw). ``advisory``: why a
    change beyond the tolerance is a note here, never a failure (it is named with its numbers all the same)."""

    check: str
    what: str
    unit: str
    tolerance: float
    alpha: float
    min_effect: float
    basis: str = ""
    advisory: str | None = None
    short: str = ""


def shift_verdict(
    quantity: ShiftQuantity,
    label: str,
    now: np.ndarray,
    then: np.ndarray,
    runs: tuple[int, int],
    evidence: dict[str, Any],
    shown: tuple[np.ndarray, np.ndarray] | None = None,
) -> Verdict:
    """One quantity with a value per replica on each side, judged as latency is: a change beyond the tolerance
    that the spread between replicas cannot explain (stats.ReplicaShift on logs, alpha) and above the minimum
    effect. ``shown``: the raw values per replica when ``now``/``then`` are relative (``quantity.basis`` says to
    what). ``evidence``: numbers of the caller's, added to."""
    q = quantity
    raw_now, raw_then = shown if shown is not None else (now, then)
    if np.any(now <= 0) or np.any(then <= 0):
        return Verdict(
            q.check,
            Status.INCONCLUSIVE,
            label,
            f"{q.what} not judged: a replica's value is not positive",
            Evidence(evidence),
        )
    test = stats.replica_shift(then, now, runs, log=True)
    if test is None:
        return Verdict(
            q.check,
            Status.INCONCLUSIVE,
            label,
            f"{q.what} not judged: {then.size} baseline and {now.size} current replica(s); with fewer than "
            f"three in all, how far it moves between processes is unknown (record the baseline again with "
            f"--sme2-update-baselines)",
            Evidence(evidence),
        )
    ratio = 1 + test.change
    low, high = (1 + bound for bound in test.interval())
    before, after = float(np.median(raw_then)), float(np.median(raw_now))
    evidence.update(
        {
            "current": after,
            "baseline": before,
            "ratio": ratio,
            "ratio_low": low,
            "ratio_high": high,
            "p_larger": test.p_up,
            "p_smaller": test.p_down,
            "tolerance": q.tolerance,
            "alpha": q.alpha,
            "current_replicas": int(now.size),
            "baseline_replicas": int(then.size),
            "basis": q.basis or "raw",
        }
    )
    numbers = (
        f"{q.what} {ratio - 1:+.1%} ({q.basis + '; ' if q.basis else ''}median {after:.4g} {q.unit} vs baseline "
        f"{before:.4g} {q.unit}; {replicas_text(test)}, 95% CI of the ratio [{low:.3f}, {high:.3f}])"
    )
    return _shift_decided(q, label, test, evidence, numbers)


def _shift_decided(
    q: ShiftQuantity, label: str, test: stats.ReplicaShift, evidence: dict[str, Any], numbers: str
) -> Verdict:
    """shift_verdict once the t-test between replicas could be made: a regression (a note with an advisory) or
    an improvement beyond the tolerance, alpha and the minimum effect, otherwise OK saying why."""
    ratio, before = evidence["ratio"], evidence["baseline"]
    big_enough = abs(ratio - 1) * before > q.min_effect
    if ratio > 1 + q.tolerance and big_enough and test.p_up < q.alpha:
        headline = f"{q.what} beyond its tolerance ({q.advisory})" if q.advisory else f"{q.what} regression"
        worded = f"{q.short or q.what} {ratio - 1:+.1%}" if before else None
        return Verdict(
            q.check,
            Status.NOTE if q.advisory else Status.REGRESSION,
            label,
            f"{headline}: {numbers}; tolerance "
            f"+{q.tolerance:.0%}, t-test between replicas p={test.p_up:.2g} < alpha {q.alpha:g}",
            Evidence(evidence, statistical=True, short=worded),
        )
    if ratio < 1 / (1 + q.tolerance) and big_enough and test.p_down < q.alpha:
        return Verdict(
            q.check, Status.IMPROVEMENT, label, f"{q.what} improvement: {numbers}", Evidence(evidence, statistical=True)
        )
    why = (
        "within tolerance"
        if abs(ratio - 1) <= q.tolerance
        else (
            f"below the minimum effect of {q.min_effect:g} {q.unit}"
            if not big_enough
            else f"not significant (p={min(test.p_up, test.p_down):.2g})"
        )
    )
    return Verdict(
        q.check,
        Status.OK,
        label,
        f"{q.what} {why}: {numbers}; tolerance {q.tolerance:.0%}",
        Evidence(evidence, statistical=True),
    )
