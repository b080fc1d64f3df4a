"""SME2 on against off at several thread counts: does the speedup hold as threads are added? (issue 27, item 3)

SME2's matrix unit is shared: one per cluster on Apple M4 (four threads reach the same 2 TFLOPS as one), so
published speedups fall with threads (SqueezeSAM FP16 on M4: 4.41x at 1 thread, 1.95x at 4), and contention
can make SME2 slower than NEON at 8 (onnxruntime #27633, llama.cpp #11390). ``thread_scaling`` profiles one
program with SME2 on and off at each listed thread count, on and off alternating in chunks at each count
(measure.runner.alternate, as compare_variants does), and tabulates the speedup per thread count with its
interval, end to end and per category. Time on the emulated target is the emulator's, so there it refuses:
the device models price one thread only (docs/device_model.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import Category
from pytest_sme2.measure.runner import Runner, alternate
from pytest_sme2.profile import stats
from pytest_sme2.profile.profile import Profile
from pytest_sme2.profile.speedup import Speedup
from pytest_sme2.run.targets.base import EMULATED_TIMING


@dataclass(frozen=True)
class ScalingRow:
    """One thread count: both profiles, the end-to-end speedup (median off / median on) and per category."""

    threads: int
    on: Profile
    off: Profile
    speedup: Speedup
    categories: dict[str, stats.Interval | None]  # None: the category takes no time on one side

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "speedup": self.speedup.as_dict(),
            "on_median_ms": self.on.median_ms,
            "off_median_ms": self.off.median_ms,
            "categories": {name: None if v is None else v.as_dict() for name, v in self.categories.items()},
        }


@dataclass(frozen=True)
class ThreadScaling:
    """SME2 on against off per thread count, in the order asked."""

    model: str
    recipe: str
    rows: tuple[ScalingRow, ...]

    def table(self) -> list[dict[str, Any]]:
        """One row per thread count: threads, speedup with its interval, and each category's speedup."""
        return [row.as_dict() for row in self.rows]

    def slower(self) -> list[ScalingRow]:
        """Thread counts where SME2 on is significantly slower than off (the speedup's interval wholly below 1)."""
        return [row for row in self.rows if row.speedup.high < 1.0]

    def __str__(self) -> str:
        lines = [f"SME2 speedup by threads, {self.model} {self.recipe} (median off / median on, 95% bootstrap CI):"]
        for row in self.rows:
            s = row.speedup
            lines.append(
                f"  {row.threads} thread(s): {s.value:.2f}x [{s.low:.2f}, {s.high:.2f}]  "
                f"(off {row.off.median_ms:.3f} ms, on {row.on.median_ms:.3f} ms)"
            )
        return "\n".join(lines)


def _category_speedups(on: Profile, off: Profile) -> dict[str, stats.Interval | None]:
    on_values, off_values = on.category_values("time"), off.category_values("time")
    found: dict[str, stats.Interval | None] = {}
    for category in Category:
        a = off_values[category.value].to_numpy()[off.clean]
        b = on_values[category.value].to_numpy()[on.clean]
        found[category.value] = (
            stats.ratio_of_medians_ci(
                a, b, numerator_groups=off.run_groups[off.clean], denominator_groups=on.run_groups[on.clean]
            )
            if a.size and b.size and np.median(a) > 0 and np.median(b) > 0
            else None
        )
    return found


def thread_scaling(
    pte: Any, runner: Callable[..., Runner], threads: Sequence[int] = (1, 2, 4), rounds: int = 4
) -> tuple[ThreadScaling, list[Profile]]:
    """Profile ``pte`` with SME2 on and off at each of ``threads`` (``runner``: the runner fixture's factory,
    called as ``runner(sme2, threads=n)``); the table and every profile made, in order."""
    counts = list(threads)
    if (
        not counts
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts)
        or len(set(counts)) != len(counts)
    ):
        raise UsageError(f"threads={threads!r} is not a list of distinct thread counts >= 1, e.g. (1, 2, 4)")
    rows, profiles = [], []
    for count in counts:
        on_runner, off_runner = runner(True, threads=count), runner(False, threads=count)
        if on_runner.session.target.info.emulated:
            raise UsageError(
                f"{EMULATED_TIMING}: SME2 speedup by threads needs measured time (the local target on "
                "an SME2 CPU, or a phone over adb); the device models price one thread only"
            )
        on, off = alternate(pte, on_runner, off_runner, rounds)
        profiles += [on, off]
        rows.append(ScalingRow(count, on, off, on.speedup_over(off), _category_speedups(on, off)))
    return ThreadScaling(rows[0].on.model, rows[0].on.recipe, tuple(rows)), profiles
