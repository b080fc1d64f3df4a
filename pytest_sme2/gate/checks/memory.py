"""The program's planned memory (memory-planned buffers, read from the .pte) against the baseline's: exact, so
any growth beyond ``tol.memory`` fails. docs/gate.md, "Planned memory".
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair, change_short
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict


def memory_verdict(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict:
    """The program's planned memory against the baseline's: exact, so any growth beyond ``tol.memory`` fails."""
    now = None if current.memory is None else current.memory.planned_bytes
    then = None if baseline.memory is None else baseline.memory.planned_bytes
    evidence = Evidence({"current": now, "baseline": then, "tolerance": tol.memory})
    if now is None or then is None:
        return Verdict(
            "memory",
            Status.OK,
            label,
            "planned memory: "
            + ("the baseline has none (recorded by an older " "pytest-sme2)" if then is None else "not known now"),
            evidence,
        )
    change = now / then - 1 if then > 0 else (0.0 if now == 0 else float("inf"))
    numbers = f"planned memory {now:,} bytes vs baseline {then:,} ({change:+.2%})"
    if change > tol.memory:
        return Verdict(
            "memory",
            Status.REGRESSION,
            label,
            f"{numbers}; tolerance +{tol.memory:.1%}",
            evidence.worded(change_short("planned memory", now, then)),
        )
    return Verdict("memory", Status.OK if change >= 0 else Status.IMPROVEMENT, label, numbers, evidence)


def _memory(pair: Pair) -> list[Verdict]:
    return [memory_verdict(pair.label, pair.current, pair.baseline, pair.tol)]


CHECK = Check(("memory",), "docs/gate.md#planned-memory", counted=_memory, measured=_memory)
