"""The one interface of a gate check: what it is given (a Pair) and what it is (a Check).

A check is a function from a Pair (one profile's record, its baseline's, the tolerances and the metric) to its
verdicts, registered once in gate/checks/__init__.py. A record is judged on one of two kinds of evidence, so a
check gives a function for each kind it applies to: ``counted`` for records of the emulated target (exact
instruction counts; emulated time is never compared) and ``measured`` for every other record (time, with the
statistics of replica_stats.py). Records are typed ``GateRecord``s (gate/record.py, the one declaration of
what a profile means to the gate): a check reads their attributes, and unit tests judge synthetic numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances, Verdict


@dataclass(frozen=True)
class Pair:
    """What every check reads: one profile's record against its baseline's, and the rules."""

    label: str  # the profile's label: model, recipe and variant
    current: GateRecord  # this run's record
    baseline: GateRecord  # the stored baseline's
    tol: Tolerances
    metric: str = "latency"  # measured records: "latency" or callgrind "instructions" (verdict.METRICS)

    @property
    def counted(self) -> bool:
        """Judged on counts (either side from the emulated target), never on time."""
        return bool(self.current.emulated or self.baseline.emulated)


Judging = Callable[[Pair], "list[Verdict]"]


@dataclass(frozen=True)
class Check:
    """One registered check: the verdict names it gives, where it is documented, and how it judges each kind of
    record (None: it does not apply to that kind). Its functions return an empty list where they find nothing
    to say (no modelled time on either side, an unsampled run)."""

    names: tuple[str, ...]  # every Verdict.check this check may give
    # Where a user reads about it: a page, and after "#" the slug of its section's heading or of its bullet's bold
    # lead ("docs/gate.md#load-init-and-peak-memory"); that page names each of ``names`` in backticks.
    docs: str
    counted: Judging | None = None
    measured: Judging | None = None

    def judge(self, pair: Pair) -> list[Verdict]:
        """This check's verdicts for ``pair``; a verdict under a name it did not declare is a programming error."""
        run = self.counted if pair.counted else self.measured
        found = run(pair) if run is not None else []
        wrong = sorted({v.check for v in found} - set(self.names))
        if wrong:
            raise TypeError(
                f"check {self.names[0]!r} gave verdicts named {wrong}, which it does not declare in "
                f"its names {list(self.names)}: add them there (gate/checks/__init__.py lists them)"
            )
        return found


def pct(value: float) -> str:
    return f"{value:.1%}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def points_short(what: str, now: Any, then: Any) -> str | None:
    """A share's few words for a failing test's message: "share of CONV 50.0% -> 62.0%" (None without both)."""
    return f"{what} {then:.1%} -> {now:.1%}" if _number(now) and _number(then) else None


def change_short(what: str, now: Any, then: Any) -> str | None:
    """An amount's few words for a failing test's message: "planned memory +12.0%" (None without both, or from 0,
    where the two shares are shown instead)."""
    if _number(now) and _number(then) and then:
        return f"{what} {now / then - 1:+.1%}"
    return points_short(what, now, then)
