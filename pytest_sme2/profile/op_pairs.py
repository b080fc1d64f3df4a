"""The operators of an SME2-on and an SME2-off profile of one program, paired, and those SME2 made slower.

Pairing is by name with the per-delegate " #N" suffix stripped; an operator whose kernel path changed (``F32``
off, ``PF32`` on) has a different name in each variant, so what is left unmatched is paired once more by
operator kind and kernel when that pairing is unique. Reports (report/entries.py) and assertions
(gate/assertions.py) read the same pairs.

SME2 is not always faster: at batch 1, XNNPACK's packed SME2 GEMV kernels lose to NEON (XNNPACK #10719). An
operator is *slower with SME2* when its time with SME2 on over its time off, as a ratio of medians over the
runs neither side's machine disturbed, has a confidence interval wholly above 1 + ``min_slowdown``; the
intervals are Bonferroni-corrected over the operators compared, so the list as a whole holds at 95%. On the
emulated target time is not time: there the device model's ``slower_than`` says it (device_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import classify
from pytest_sme2.profile import stats
from pytest_sme2.profile.breakdown import TIME
from pytest_sme2.profile.profile import Profile

# Slower by at least this much before it is named: runs of one process are not independent, so a bootstrap over
# them calls a 1-2% shift between two processes "significant"; 5% is above what two processes of one program
# differ by on a quiet machine (docs/history.md, "Disturbed runs").
MIN_SLOWDOWN = 0.05


def per_run_by_op(profile: Profile, by: str, runs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-run time (or instructions) of each operator, its instances added up (keys: names without " #N");
    ``runs``: a mask of the runs to keep (default all)."""
    values = profile.op_values(by)
    if runs is not None:
        values = values[:, runs]
    return {op: values[rows.index.to_numpy()].sum(axis=0) for op, rows in profile.ops.groupby("op", sort=False)}


def match_ops(on: dict[str, np.ndarray], off: dict[str, np.ndarray]) -> list[tuple[str | None, str | None]]:
    """Pairs of (off name, on name): by name first, then by unique (kind, kernel, portable)."""
    pairs: list[tuple[str | None, str | None]] = [(name, name) for name in off if name in on]
    rest_off = [n for n in off if n not in on]
    rest_on = [n for n in on if n not in off]

    def shape(name: str) -> tuple[str, str, bool]:
        c = classify(name)
        return c.kind, c.kernel, c.portable

    for name in list(rest_off):
        candidates = [n for n in rest_on if shape(n) == shape(name)]
        if len(candidates) == 1 and sum(shape(n) == shape(name) for n in rest_off) == 1:
            pairs.append((name, candidates[0]))
            rest_off.remove(name)
            rest_on.remove(candidates[0])
    pairs += [(name, None) for name in rest_off] + [(None, name) for name in rest_on]
    return pairs


@dataclass(frozen=True)
class Slowdown:
    """One operator SME2 made slower: its median ms on and off, and on/off as a ratio with its interval."""

    op: str
    on_op: str
    category: str
    on_ms: float
    off_ms: float
    slowdown: stats.Interval  # median(on) / median(off): above 1 is slower with SME2

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "on_op": self.on_op,
            "category": self.category,
            "on_ms": self.on_ms,
            "off_ms": self.off_ms,
            "slowdown": self.slowdown.as_dict(),
        }

    def __str__(self) -> str:
        s = self.slowdown
        return (
            f"{self.op} ({self.category}): {self.off_ms * 1e3:.1f} us off -> {self.on_ms * 1e3:.1f} us on, "
            f"{s.value:.2f}x slower [{s.low:.2f}, {s.high:.2f}] at {s.confidence:.0%}"
        )


def sme2_slowdowns(on: Profile, off: Profile, min_slowdown: float = MIN_SLOWDOWN) -> list[Slowdown]:
    """The operators significantly slower with SME2 on than off in measured time, slowest first.

    A UsageError for emulated profiles (their time is the emulator's; use the device model). Operators are
    paired by name (match_ops), so ``on`` and ``off`` should be one program; the reports pair them so.
    """
    if on.emulated or off.emulated:
        raise UsageError(
            f"{on.label} / {off.label}: emulated time is not time, so no operator can be measured "
            "slower with SME2 here; on the emulated target ask the device model "
            "(assert_no_modelled_sme2_slowdown, --sme2-device)"
        )
    on_ops, off_ops = per_run_by_op(on, TIME, on.clean), per_run_by_op(off, TIME, off.clean)
    on_groups, off_groups = on.run_groups[on.clean], off.run_groups[off.clean]
    compared = [
        (off_name, on_name)
        for off_name, on_name in match_ops(on_ops, off_ops)
        if off_name is not None
        and on_name is not None
        and min(len(on_ops[on_name]), len(off_ops[off_name])) >= stats.MIN_CLEAN_RUNS
    ]
    # Every compared operator is a chance of a false alarm: each interval is at 1 - 5%/N (Bonferroni), so the
    # whole list is wrong at most 5% of the time (measured: one operator named on unchanged kernels in a busy run).
    confidence = 1 - (1 - stats.DEFAULT_CONFIDENCE) / max(1, len(compared))
    found = []
    for off_name, on_name in compared:
        on_runs, off_runs = on_ops[on_name], off_ops[off_name]
        on_ms, off_ms = float(np.median(on_runs)), float(np.median(off_runs))
        if off_ms <= 0 or on_ms <= off_ms * (1 + min_slowdown):  # the bootstrap only where the medians say so
            continue
        ratio = stats.ratio_of_medians_ci(
            on_runs, off_runs, confidence=confidence, numerator_groups=on_groups, denominator_groups=off_groups
        )
        if ratio.low > 1 + min_slowdown:
            found.append(Slowdown(off_name, on_name, classify(off_name).category.value, on_ms, off_ms, ratio))
    return sorted(found, key=lambda s: s.slowdown.value, reverse=True)
