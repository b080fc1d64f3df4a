"""What the counted checks (emulated target) share: a record's qemu counts, and a share judged exactly.

Every quantity of a counted run repeats exactly run to run (evidence/qemu_counts.py), so a change beyond its
tolerance is a change of the program or of the kernels XNNPACK picked, never noise: no statistics are needed
and none of it reads emulated time.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sme2.gate.checks.base import Pair, pct, points_short
from pytest_sme2.gate.record import Counts, GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Verdict

# An operator's count moves by tens of instructions when the address layout the program sees changes
# (alignment-dependent copies in tiny transposes; the emulated determinism study in benchmarks/results/notebook.md
# saw warmup events move by 98-490 instructions between sessions): an operator is only
# judged on its own when its count moved by more than this too. Its share of the whole inference is
# judged anyway through the instructions per inference.
MIN_OP_INSTRUCTIONS = 1000


def counted_of(record: GateRecord) -> Counts | None:
    """The record's counts of the emulated target (qemu); None for callgrind's, or without counts."""
    return record.counts


@dataclass(frozen=True)
class CountedShare:
    """A share of the counted run (coverage, SME path, a category) and how counted_share judges it: the check,
    its name in verdicts (``what``; ``short`` in a failing test's message: ``what`` without its basis), the
    tolerance in points, whether a rise fails too (``two_sided``) and the share's category."""

    check: str
    what: str
    tolerance: float
    two_sided: bool
    category: str | None = None
    short: str = ""


def counted_share(share: CountedShare, label: str, now: float | None, then: float | None) -> Verdict:
    """A share of the counted run against the baseline's, in exact points."""
    check, what, tolerance, two_sided = share.check, share.what, share.tolerance, share.two_sided
    evidence = Evidence(
        {"current": now, "baseline": then, "tolerance": tolerance, "basis": "counted"}, category=share.category
    )
    if then is None:
        return Verdict(check, Status.OK, label, f"{what}: the baseline had none", evidence)
    if now is None:
        return Verdict(check, Status.REGRESSION, label, f"{what}: {pct(then)} in the baseline, none now", evidence)
    change = now - then
    numbers = f"{what} {pct(then)} -> {pct(now)} ({change * 100:+.2f} points; counted, exact)"
    if abs(change) > tolerance and (two_sided or change < 0):
        bound = f"+-{tolerance * 100:g}" if two_sided else f"-{tolerance * 100:g}"
        return Verdict(
            check,
            Status.REGRESSION,
            label,
            f"{numbers}; tolerance {bound} points",
            evidence.worded(points_short(share.short or what, now, then)),
        )
    return Verdict(
        check,
        Status.OK,
        label,
        f"{numbers}: within tolerance" if abs(change) <= tolerance else f"{numbers}: improved",
        evidence,
    )


def counts_of(pair: Pair) -> tuple[Counts, Counts] | None:
    """Both sides' counts (this run's, the baseline's), or None when either has none (the instructions check
    then says so, and no other counted check has anything to judge)."""
    now, then = counted_of(pair.current), counted_of(pair.baseline)
    return None if now is None or then is None else (now, then)
