"""Category shares: each operator category's share of the run's time (measured, per run, between replicas, above
the minimum effect) or of its counted instructions (emulated, exact), either way. docs/gate.md, "Shares,
delegation coverage and SME path share".
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import CountedShare, counted_share, counts_of
from pytest_sme2.gate.checks.replica_stats import PerRunQuantity, per_run_verdict
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances, Verdict


def _shares(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[Verdict]:
    categories = sorted(set(current.shares or {}) | set(baseline.shares or {}))
    # A share of a sub-millisecond run moves with the machine between sessions by more than its tolerance (toy_cnn,
    # 0.1 ms: CONV 0.50-0.72 within minutes, benchmarks/results/notebook.md); like latency, a change of less than
    # min_effect_ms of the run's time never fails.
    return [
        per_run_verdict(
            PerRunQuantity(
                "share",
                f"share of {category}",
                "shares",
                tol.shares,
                tol.alpha,
                two_sided=True,
                category=category,
                min_effect_ms=tol.min_effect_ms,
                session=tol.session_shares,
            ),
            label,
            current,
            baseline,
        )
        for category in categories
    ]


def _counted(pair: Pair) -> list[Verdict]:
    counts = counts_of(pair)
    if counts is None:
        return []
    now, then = (c.shares or {} for c in counts)
    return [
        counted_share(
            CountedShare(
                "share", f"share of {category} in instructions", pair.tol.shares, True, category, f"share of {category}"
            ),
            pair.label,
            now.get(category, 0.0),
            then.get(category, 0.0),
        )
        for category in sorted(set(now) | set(then))
    ]


def _measured(pair: Pair) -> list[Verdict]:
    return _shares(pair.label, pair.current, pair.baseline, pair.tol)


SHARES_DOCS = "docs/gate.md#shares-delegation-coverage-and-sme-path-share-are-judged-like-latency"
CHECK = Check(("share",), SHARES_DOCS, counted=_counted, measured=_measured)
