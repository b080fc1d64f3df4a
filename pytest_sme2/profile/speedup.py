"""How many times faster one profile is than another: the Speedup and its interval between processes.

Profile.speedup_over is the public entry; the arithmetic lives here so the Profile stays what one run means. The
interval resamples runner processes, then runs within them (stats.ratio_of_medians_ci): runs of one process
share its level, and one process a side gives an interval of run-to-run noise only, which is warned about.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pytest_sme2.errors import EmulatedTimingError, OneProcessIntervalWarning, RunnerError
from pytest_sme2.profile import stats
from pytest_sme2.system.deprecated import renamed_attribute

ONE_PROCESS_CAVEAT = (
    "one runner process a side: the interval is run-to-run noise only, not how the level moves "
    "between processes (compare_variants alternates processes and gives the interval to assert on)"
)


@dataclass(frozen=True)
class Speedup:
    """How many times faster one profile is than another, with a bootstrap CI."""

    value: float
    low: float
    high: float
    confidence: float
    this: str
    other: str
    this_median_ms: float
    other_median_ms: float
    this_runs: int  # undisturbed runs the interval is computed from
    other_runs: int
    this_disturbed: int = 0  # runs the machine disturbed, left out
    other_disturbed: int = 0
    # Chunks (runner processes) each side's runs came from: with two or more the interval holds the movement
    # between processes (stats.ratio_of_medians_ci); with one it shows run-to-run noise only.
    this_chunks: int = 1
    other_chunks: int = 1

    @property
    def within_one_process(self) -> bool:
        """A side holds one runner process's runs: the interval is run-to-run noise only (see
        errors.OneProcessIntervalWarning)."""
        return min(self.this_chunks, self.other_chunks) < 2

    this_processes = renamed_attribute("Speedup.this_processes", "this_chunks")
    other_processes = renamed_attribute("Speedup.other_processes", "other_chunks")

    def __repr__(self) -> str:
        def runs(count: int, disturbed: int, processes: int) -> str:
            return (
                f"{count} runs"
                + (f" in {processes} processes" if processes > 1 else " in 1 process")
                + (f", {disturbed} disturbed left out" if disturbed else "")
            )

        caveat = "; 1-process CI" if self.within_one_process else ""  # short: pytest cuts long reprs mid-way
        return (
            f"Speedup({self.value:.2f}x, {self.confidence:.0%} CI [{self.low:.2f}, {self.high:.2f}]: "
            f"{self.this} (median {self.this_median_ms:.3f} ms, "
            f"{runs(self.this_runs, self.this_disturbed, self.this_chunks)}) over {self.other} (median "
            f"{self.other_median_ms:.3f} ms, {runs(self.other_runs, self.other_disturbed, self.other_chunks)})"
            f"{caveat})"
        )

    __str__ = __repr__

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "this": self.this,
            "other": self.other,
            "this_chunks": self.this_chunks,
            "other_chunks": self.other_chunks,
        }


def emulated_timing(what: str) -> EmulatedTimingError:
    """The error of one timing read (``what`` was not read or checked) on an emulated profile."""
    from pytest_sme2.run.targets.base import EMULATED_TIMING

    return EmulatedTimingError(f"{EMULATED_TIMING}: {what}")


class Timed(Protocol):
    """What a speedup reads of a profile (Profile has it): its runs' times, which ones may be read, and which
    runner process each came from."""

    @property
    def label(self) -> str: ...

    @property
    def emulated(self) -> bool: ...

    @property
    def e2e_ms(self) -> np.ndarray: ...

    @property
    def clean(self) -> np.ndarray: ...

    @property
    def run_groups(self) -> np.ndarray: ...

    @property
    def disturbed_runs(self) -> int: ...


def speedup_of(this: Timed, other: Timed) -> Speedup:
    """median(other) / median(this) with a CI from the undisturbed per-run samples of both; an
    EmulatedTimingError on emulated profiles (emulated timing is not hardware timing), a RunnerError when every
    run of either side was disturbed."""
    if this.emulated or other.emulated:
        raise emulated_timing(f"speedup of {this.label} over {other.label} not checked")
    mine_clean, their_clean = this.clean, other.clean  # each a pass over the runs: read once
    mine, theirs = this.e2e_ms[mine_clean], other.e2e_ms[their_clean]
    for profile, kept in ((this, mine), (other, theirs)):
        if kept.size == 0:
            raise RunnerError(
                f"speedup of {this.label} over {other.label} not computed: every one of the {profile.e2e_ms.size} "
                f"timed runs of {profile.label} was disturbed (other work on its core or a throttled device), so "
                "no run says how fast it is; run it again on a quieter machine, or with more runs (--sme2-runs)"
            )
    mine_groups, their_groups = this.run_groups[mine_clean], other.run_groups[their_clean]
    interval = stats.ratio_of_medians_ci(theirs, mine, numerator_groups=their_groups, denominator_groups=mine_groups)
    speedup = Speedup(
        value=interval.value,
        low=interval.low,
        high=interval.high,
        confidence=interval.confidence,
        this=this.label,
        other=other.label,
        this_median_ms=float(np.median(mine)),
        other_median_ms=float(np.median(theirs)),
        this_runs=int(mine.size),
        other_runs=int(theirs.size),
        this_disturbed=this.disturbed_runs,
        other_disturbed=other.disturbed_runs,
        this_chunks=int(np.unique(mine_groups).size),
        other_chunks=int(np.unique(their_groups).size),
    )
    if speedup.within_one_process:
        warnings.warn(
            OneProcessIntervalWarning(f"speedup of {this.label} over {other.label}: {ONE_PROCESS_CAVEAT}"),
            stacklevel=3,
        )
    return speedup
