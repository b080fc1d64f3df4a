"""SME path share: the share of CONV and GEMM time (measured, per run) or instructions and multiply-accumulates
(emulated, counted) that ran SME/SME2 kernels. Only a drop fails. docs/gate.md, "Shares, delegation coverage and
SME path share".
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import CountedShare, counted_share, counts_of
from pytest_sme2.gate.checks.replica_stats import PerRunQuantity, per_run_verdict
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances, Verdict


def _sme_path(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict:
    return per_run_verdict(
        PerRunQuantity(
            "sme_path",
            "SME path share of CONV+GEMM time",
            "sme_path_share",
            tol.sme_path,
            tol.alpha,
            two_sided=False,
            short="SME path share",
            session=tol.session_shares,
        ),
        label,
        current,
        baseline,
    )


def _counted(pair: Pair) -> list[Verdict]:
    counts = counts_of(pair)
    if counts is None:
        return []
    now, then = counts
    basis = {"work": "multiply-accumulates"}.get(now.sme_path_basis or "", "instructions")
    return [
        counted_share(
            CountedShare(
                "sme_path", f"SME path share of CONV+GEMM {basis}", pair.tol.sme_path, False, short="SME path share"
            ),
            pair.label,
            now.sme_path_share,
            then.sme_path_share,
        )
    ]


def _measured(pair: Pair) -> list[Verdict]:
    return [_sme_path(pair.label, pair.current, pair.baseline, pair.tol)]


SHARES_DOCS = "docs/gate.md#shares-delegation-coverage-and-sme-path-share-are-judged-like-latency"
CHECK = Check(("sme_path",), SHARES_DOCS, counted=_counted, measured=_measured)
