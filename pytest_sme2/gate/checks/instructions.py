"""Instructions per inference against the baseline's: the emulated target's counted run (qemu), or callgrind's
count of a measured run with ``--sme2-metric=instructions``; a plain relative tolerance, since they barely vary.

On the emulated target this check also says when a side has no counts at all: every counted check then has
nothing to judge (docs/gate.md, "On the emulated target the gate is deterministic").
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair, change_short
from pytest_sme2.gate.checks.counted import counted_of
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict


def instruction_verdict(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict:
    """Instructions per inference against the baseline's, with a plain relative tolerance (they barely vary)."""
    now, then = current.instructions, baseline.instructions
    if now is None or now.per_inference is None:
        return Verdict("instructions", Status.MISSING, label, "this run has no instruction count")
    if then is None or then.per_inference is None:
        return Verdict(
            "instructions",
            Status.MISSING,
            label,
            "the baseline has no instruction count; record one with "
            "--sme2-metric=instructions --sme2-update-baselines",
        )
    cur, base = float(now.per_inference), float(then.per_inference)
    change = cur / base - 1 if base > 0 else float("inf")
    evidence = Evidence({"current": cur, "baseline": base, "change": change, "tolerance": tol.instructions})
    numbers = f"{cur:,.0f} instructions per inference vs baseline {base:,.0f} ({change:+.3%})"
    if change > tol.instructions:
        return Verdict(
            "instructions",
            Status.REGRESSION,
            label,
            f"instruction regression: {numbers}; tolerance +{tol.instructions:.2%}",
            evidence.worded(change_short("instructions per inference", cur, base)),
        )
    if change < -tol.instructions:
        return Verdict("instructions", Status.IMPROVEMENT, label, f"instruction improvement: {numbers}", evidence)
    return Verdict("instructions", Status.OK, label, f"instructions within tolerance: {numbers}", evidence)


def _counted(pair: Pair) -> list[Verdict]:
    now, then = counted_of(pair.current), counted_of(pair.baseline)
    if now is None or then is None:
        side = "this run" if now is None else "the baseline"
        return [
            Verdict(
                "instructions",
                Status.MISSING,
                pair.label,
                f"{side} has no instruction counts of the emulated target; "
                + (
                    "counting is off (--sme2-no-kernel-trace)"
                    if now is None
                    else "record the baseline again with --sme2-update-baselines on the emulated target"
                ),
            )
        ]
    return [instruction_verdict(pair.label, pair.current, pair.baseline, pair.tol)]


def _measured(pair: Pair) -> list[Verdict]:
    return (
        [instruction_verdict(pair.label, pair.current, pair.baseline, pair.tol)]
        if pair.metric == "instructions"
        else []
    )


CHECK = Check(("instructions",), "docs/gate.md#the-instruction-metric", counted=_counted, measured=_measured)
