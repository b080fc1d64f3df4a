"""Delegation coverage: the delegate's share of the run's time (measured, per run, between replicas) or of its
counted instructions (emulated target, exact). Only a drop fails. docs/gate.md, "Shares, delegation coverage and
SME path share".
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import CountedShare, counted_share, counts_of
from pytest_sme2.gate.checks.replica_stats import PerRunQuantity, per_run_verdict
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances, Verdict


def _coverage(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[Verdict]:
    """The delegate's share of each run's time (the graph nodes' share is delegated_ops.py's)."""
    return [
        per_run_verdict(
            PerRunQuantity(
                "delegation_coverage",
                "delegation coverage of E2E time",
                "delegation_coverage",
                tol.coverage,
                tol.alpha,
                two_sided=False,
                short="delegated share of the run's time",
                session=tol.session_shares,
            ),
            label,
            current,
            baseline,
        )
    ]


def _counted(pair: Pair) -> list[Verdict]:
    counts = counts_of(pair)
    if counts is None:
        return []
    now, then = counts
    return [
        counted_share(
            CountedShare(
                "delegation_coverage",
                "delegation coverage of E2E instructions",
                pair.tol.coverage,
                False,
                short="delegated share of the run's instructions",
            ),
            pair.label,
            now.delegation_coverage,
            then.delegation_coverage,
        )
    ]


def _measured(pair: Pair) -> list[Verdict]:
    return _coverage(pair.label, pair.current, pair.baseline, pair.tol)


SHARES_DOCS = "docs/gate.md#shares-delegation-coverage-and-sme-path-share-are-judged-like-latency"
CHECK = Check(("delegation_coverage",), SHARES_DOCS, counted=_counted, measured=_measured)
