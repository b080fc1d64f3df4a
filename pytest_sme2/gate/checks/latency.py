"""Latency: this run's per-replica medians against the baseline's (measured records, ``--sme2-metric=latency``).

docs/gate.md, "How a regression is decided", says how the relative latency, the test between replicas and the
minimum effect combine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.replica_stats import clean_runs, left_out, replica_shift_of, replicas_text, too_few
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict
from pytest_sme2.profile import stats


def latency_verdict(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict:
    """Regression only if latency moved more than the tolerance and more than replicas move it.

    What is compared is the relative latency (each run divided by the reference program's run right
    before it) when both sides have it, because drift of the whole machine cancels there; raw
    milliseconds otherwise, with a note saying so and how to get the relative gate. Each replica
    gives one value, the median of its undisturbed runs, and the significance test is between the
    baseline's replicas and this run's (stats.ReplicaShift): the 40 runs of one replica share its
    level, so testing them as independent samples called unchanged code slower at p=1e-9.
    """
    if current.emulated or baseline.emulated:
        return Verdict("latency", Status.SKIPPED, label, "emulated timing is not hardware timing: latency not compared")
    relative = tuple(stats.per_run_ratio(r.samples_ms, r.reference_ms) for r in (current, baseline))
    judged_relative = relative[0] is not None and relative[1] is not None
    clean = tuple(clean_runs(r, with_reference=judged_relative) for r in (current, baseline))
    raw = tuple(np.asarray(r.samples_ms, dtype=float)[mask] for r, mask in zip((current, baseline), clean))
    disturbed = left_out(clean)
    few = too_few(clean)
    if few:
        return Verdict(
            "latency",
            Status.INCONCLUSIVE,
            label,
            f"latency not judged: {few}",
            Evidence({"disturbed": [int((~m).sum()) for m in clean]}),
        )
    rel_now, rel_then = relative
    values = (
        (rel_now, rel_then)
        if rel_now is not None and rel_then is not None
        else tuple(np.asarray(r.samples_ms, dtype=float) for r in (current, baseline))
    )
    test = replica_shift_of((current, baseline), values, clean, log=True, session=float(np.log1p(tol.session_latency)))
    if isinstance(test, str):
        return Verdict("latency", Status.INCONCLUSIVE, label, f"latency not judged: {test}")
    basis, how, raw_note = _basis(rel_now, rel_then)
    medians = [float(np.median(side)) for side in raw]
    evidence = _latency_evidence(test, judged_relative, medians, clean, tol)
    numbers = (
        f"{basis} {evidence['ratio'] - 1:+.1%} ({how}{replicas_text(test)}, 95% CI of the ratio "
        f"[{evidence['ratio_low']:.3f}, {evidence['ratio_high']:.3f}]"
        f"{disturbed}; raw median {medians[0]:.4g} ms vs baseline {medians[1]:.4g} ms){raw_note}"
    )
    return _decided(label, tol, test, evidence, numbers)


def _basis(rel_now: np.ndarray | None, rel_then: np.ndarray | None) -> tuple[str, str, str]:
    """What latency_verdict compares (relative latency when both sides have reference-program times), how, and
    when it falls back to raw milliseconds the note saying which side lacks them and how to get them."""
    if rel_now is not None and rel_then is not None:
        return "relative latency", "each run / the reference program's run right before it; ", ""
    which = " and ".join(side for side, r in (("this run", rel_now), ("the baseline", rel_then)) if r is None)
    raw_note = (
        f"; judged on raw milliseconds because {which} has no reference-program times, so drift of "
        f"the machine is not cancelled (record the baseline again with --sme2-update-baselines and "
        f"keep --sme2-latency-reference on)"
    )
    return "raw latency", "", raw_note


def _latency_evidence(
    test: stats.ReplicaShift,
    judged_relative: bool,
    medians: list[float],
    clean: tuple[np.ndarray, ...],
    tol: Tolerances,
) -> dict[str, Any]:
    """The numbers of a judged latency verdict, for its evidence (and read back by _decided)."""
    low, high = (1 + bound for bound in test.interval())
    return {
        "basis": "relative" if judged_relative else "raw",
        "current_median_ms": medians[0],
        "baseline_median_ms": medians[1],
        "ratio": 1 + test.change,
        "ratio_low": low,
        "ratio_high": high,
        "p_slower": test.p_up,
        "p_faster": test.p_down,
        "tolerance": tol.latency,
        "alpha": tol.alpha,
        "min_effect_ms": tol.min_effect_ms,
        "current_runs": test.runs_current,
        "baseline_runs": test.runs_baseline,
        "current_replicas": test.n_current,
        "baseline_replicas": test.n_baseline,
        "between_replicas": float(np.expm1(test.spread)),
        "between_sessions": float(np.expm1(test.session)),
        "current_disturbed": int((~clean[0]).sum()),
        "baseline_disturbed": int((~clean[1]).sum()),
    }


def _decided(label: str, tol: Tolerances, test: stats.ReplicaShift, evidence: dict[str, Any], numbers: str) -> Verdict:
    """The judged latency verdict: a regression or an improvement beyond the tolerance, the minimum effect and
    alpha, otherwise OK saying which of the three held it back."""
    ratio, low, high = evidence["ratio"], evidence["ratio_low"], evidence["ratio_high"]
    # The change in milliseconds the ratio stands for, measured on the baseline's median.
    effect_ms = abs(ratio - 1) * evidence["baseline_median_ms"]
    big_enough = effect_ms > tol.min_effect_ms
    if ratio > 1 + tol.latency and big_enough and test.p_up < tol.alpha:
        short = (
            f"{evidence['basis']} latency {ratio - 1:+.1%} (95% CI {low - 1:+.1%} to {high - 1:+.1%}, tolerance "
            f"{tol.latency:+.0%}, p={test.p_up:.2g})"
        )
        return Verdict(
            "latency",
            Status.REGRESSION,
            label,
            f"latency regression: {numbers}; tolerance +{tol.latency:.0%} and {tol.min_effect_ms:g} ms, "
            f"t-test between replicas p={test.p_up:.2g} < alpha {tol.alpha:g}",
            Evidence(evidence, statistical=True, short=short),
        )
    if ratio < 1 / (1 + tol.latency) and big_enough and test.p_down < tol.alpha:
        return Verdict(
            "latency",
            Status.IMPROVEMENT,
            label,
            f"latency improvement: {numbers}; t-test between replicas p={test.p_down:.2g} < alpha " f"{tol.alpha:g}",
            Evidence(evidence, statistical=True),
        )
    p = test.p_up if ratio >= 1 else test.p_down
    if abs(ratio - 1) <= tol.latency:
        why = "within tolerance"
    elif not big_enough:
        why = (
            f"change of about {effect_ms * 1000:.3g} us per run is below the minimum effect of "
            f"{tol.min_effect_ms:g} ms (min_effect_ms)"
        )
    else:
        why = (
            f"not significant (p={p:.2g}; replicas move it by {np.expm1(test.spread):.1%}"
            f"{f' and sessions by {np.expm1(test.session):.1%}' if test.session else ''}, so only changes "
            f"beyond {test.significant_change(tol.alpha):+.1%} can be told from that)"
        )
    return Verdict(
        "latency",
        Status.OK,
        label,
        f"latency {why}: {numbers}; tolerance {tol.latency:.0%}",
        Evidence(evidence, statistical=True),
    )


def _latency(pair: Pair) -> list[Verdict]:
    return [latency_verdict(pair.label, pair.current, pair.baseline, pair.tol)] if pair.metric == "latency" else []


CHECK = Check(("latency",), "docs/gate.md#a-latency-regression", measured=_latency)
