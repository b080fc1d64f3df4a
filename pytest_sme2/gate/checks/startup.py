"""Start-up and memory: Program::load_method, Method::init and the runner's peak resident memory.

Measured on the local and adb targets (each runner process loads the method after a load of the reference
program, so a busier machine cancels out) and counted in instructions on the emulated target; the host target's
reused Python worker has no fresh start-up to time. docs/gate.md, "Load, init and peak memory", has the story
and the numbers behind the tolerances.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pytest_sme2.gate.checks.base import Check, Pair, change_short
from pytest_sme2.gate.checks.counted import counts_of
from pytest_sme2.gate.checks.replica_stats import ShiftQuantity, clean_runs, replica_medians, shift_verdict
from pytest_sme2.gate.record import Counts, GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict

# Why a hardware load/init change measured without the reference program is a note, not a failure. Measured
# (docs/gate.md, "Load, init and peak memory"): beside two busy jobs, unchanged mobilenet_v3_small's one init per
# process came out +54% against the baseline, p=2e-5, in all four check processes alike; a busy machine slows
# weight packing more than an inference. Each load divided by the reference program's load right before it stays
# within a few percent; without that reference nothing cancels the machine's speed.
STARTUP_ADVISORY = (
    "not failed: without the reference program's loads (--sme2-latency-reference=off, or a runner "
    "other than pytest-sme2's) a busy machine's slowdown of load and init is not cancelled"
)


# The method's start-up, judged apart from the inference: (check and tolerance name, ETDump event).
# Records hold ``<check>_ms_per_chunk`` (raw) and ``<check>_relative_per_chunk`` (relative to the reference load).
STARTUP = (("load", "Program::load_method"), ("init", "Method::init"))


def startup_verdicts(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[Verdict]:
    """Local and adb targets: Program::load_method and Method::init of each runner process (where XNNPACK packs
    weights; the host target's reused worker gives none, Profile._startup_samples), and the runner's peak
    resident memory per run, each against the baseline with the latency gate's statistics (a value per process;
    disturbed runs left out of the memory). The check names which one moved.

    Each runner process loads the method several times, each right after a load of the reference program
    (native_runner.STARTUP_REPEATS); a process's value is the median of its warm loads divided by those reference
    loads, so a busier or slower machine, which slows both loads alike, cancels out."""
    out = [_startup_verdict(check, event, label, current, baseline, tol) for check, event in STARTUP]
    out.append(_peak_rss_verdict(label, current, baseline, tol))
    return _load_explained_by_init(out)


def _startup_verdict(
    check: str, event: str, label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances
) -> Verdict:
    """One start-up event (load or init) of startup_verdicts: why it is not compared, or its shift_verdict."""
    what = f"{check} ({event})"
    raw_key, relative_key = f"{check}_ms_per_chunk", f"{check}_relative_per_chunk"
    now, then = getattr(current, raw_key), getattr(baseline, raw_key)
    if then is None or now is None:
        return Verdict(check, Status.SKIPPED, label, f"{what} not compared: {_unrecorded_why(now, then)}")
    raw_now, raw_then = _per_replica(current, now), _per_replica(baseline, then)
    relative = getattr(current, relative_key), getattr(baseline, relative_key)
    values = tuple(None if r is None else _per_replica(record, r) for r, record in zip(relative, (current, baseline)))
    if (
        raw_now is None
        or raw_then is None
        or (relative[0] is not None and values[0] is None)
        or (relative[1] is not None and values[1] is None)
    ):
        return Verdict(
            check,
            Status.SKIPPED,
            label,
            f"{what} not compared: its runner processes do not match the " f"record's runs (chunk_sizes)",
        )
    value_now, value_then = values
    if (value_now is None) != (value_then is None):
        why = _reference_mismatch_why(baseline_lacks=value_then is None)
        return Verdict(check, Status.SKIPPED, label, f"{what} not compared: {why}")
    if value_now is not None and value_then is not None:
        basis, advisory = "relative to the reference program's load before each load", None
        pair = (value_now, value_then)
    else:
        basis, advisory = "raw ms: neither side has reference-program loads", STARTUP_ADVISORY
        pair = (raw_now, raw_then)
    empty = [side for side, v in zip(("this run", "the baseline"), pair) if v.size == 0]
    if empty:
        return _all_disturbed(check, label, what, empty)
    kept_then, kept_now = (
        sum(size for size, value in zip(record.chunk_sizes or (), per_chunk) if value is not None)
        for record, per_chunk in ((baseline, then), (current, now))
    )  # the processes kept
    runs = (kept_then, kept_now)
    quantity = ShiftQuantity(
        check, what, "ms", getattr(tol, check), tol.alpha, tol.min_effect_ms, basis=basis, advisory=advisory
    )
    return shift_verdict(quantity, label, pair[0], pair[1], runs, {}, shown=(raw_now, raw_then))


def _unrecorded_why(now: object, then: object) -> str:
    """Why a start-up event is not compared when a side has none: the host target (neither side times it) is not
    told to record again, a baseline without one is, and a run without one is asked whether its runner is ours."""
    if then is None and now is None:  # the host target: nothing to re-record (a CI owner's trial)
        return (
            "not timed on this target (the host "
            "target's Python worker is reused, so it has no fresh start-up "
            "to time; the local and adb runners time it)"
        )
    if then is None:
        return (
            "the baseline has none (recorded by an older pytest-sme2, or on the host target, whose reused "
            "Python worker has no fresh start-up to time): record it again with --sme2-update-baselines on "
            "the local or adb target"
        )
    return (
        "none measured now: on the host target its Python worker is reused between runs and tests, so its "
        "load and init are not a fresh process's (the local and adb runners time them); on the local and "
        "adb targets a runner process's ETDump had no matching Program::load_method and Method::init "
        "events (is the runner pytest-sme2's, of this version? its ETDumps are in the test's folder)"
    )


def _reference_mismatch_why(baseline_lacks: bool) -> str:
    """Why loads relative to the reference program's on one side only are not compared, and what to do."""
    if baseline_lacks:
        return (
            "the baseline's is one load per process, not relative to the reference program's load (an older "
            "pytest-sme2, or recorded with --sme2-latency-reference=off): record it again with "
            "--sme2-update-baselines"
        )
    return (
        "this run has no reference-program loads to divide by (--sme2-latency-reference=off, or a runner "
        "other than pytest-sme2's) while the baseline has: turn the reference program back on "
        "(--sme2-latency-reference=on, pytest-sme2's runner), or record the baseline again as this runs"
    )


def _all_disturbed(check: str, label: str, what: str, empty: list[str]) -> Verdict:
    """Sides (``empty``) none of whose runner processes kept a warm load: inconclusive (not a regression), saying
    which side, the first, to run or record again."""
    side = empty[0]
    again = (
        "run again when the machine is quieter"
        if side == "this run"
        else "record the baseline again on a quieter machine (--sme2-update-baselines)"
    )
    return Verdict(
        check,
        Status.INCONCLUSIVE,
        label,
        f"{what} not judged: every warm load of every runner "
        f"process of {side} was disturbed (slowed against the process's fastest load, or "
        f"after a reference-program load slowed alone): other work on the machine came and "
        f"went faster than a load; {again}",
        Evidence({"disturbed_processes": empty}),
    )


def _load_explained_by_init(out: list[Verdict]) -> list[Verdict]:
    """``Method::init`` runs inside ``Program::load_method`` (its ETDump event nests in the load's; the load outside
    it is a few microseconds, docs/gate.md), so a regressed init moves the load by as much: with both regressed the
    load is a note naming init, one cause failing once (a CI owner's trial: one added layer read as two start-up
    regressions). A load that regressed while init did not still fails."""
    by_check = {v.check: v for v in out}
    load, init = by_check.get("load"), by_check.get("init")
    if load is None or init is None or load.status != Status.REGRESSION or init.status != Status.REGRESSION:
        return out
    note = Verdict(
        "load",
        Status.NOTE,
        load.label,
        f"{load.message.replace(' regression: ', ': ', 1)} (it includes init "
        "(Method::init), which regressed: one cause, judged there)",
        load.evidence.with_numbers(explained_by="init"),
    )
    return [note if v is load else v for v in out]


def _peak_rss_verdict(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict:
    what = "peak resident memory (the runner's, per run)"
    peaks = [None if r.memory is None else r.memory.peak_rss_kb for r in (current, baseline)]
    if peaks[0] is None or peaks[1] is None:
        where = "this run" if peaks[0] is None else "the baseline"
        return Verdict(
            "peak_rss",
            Status.SKIPPED,
            label,
            f"{what} not compared: {where} has none (the host target's "
            f"Python worker and emulated runs report none; the local and adb runners do)",
        )
    clean = tuple(clean_runs(r) for r in (current, baseline))
    values = tuple(np.asarray(p, dtype=float) for p in peaks)
    if any(v.size != m.size for v, m in zip(values, clean)):
        return Verdict("peak_rss", Status.SKIPPED, label, f"{what} not compared: one value per run is needed")
    medians = [
        replica_medians(record, series, mask) for record, series, mask in zip((current, baseline), values, clean)
    ]
    quantity = ShiftQuantity("peak_rss", what, "KiB", tol.peak_rss, tol.alpha, 0.0, short="peak resident memory")
    return shift_verdict(
        quantity,
        label,
        medians[0][0],
        medians[1][0],
        (medians[1][1], medians[0][1]),
        {"current_disturbed": int((~clean[0]).sum()), "baseline_disturbed": int((~clean[1]).sum())},
    )


def _counted_startup(label: str, now: Counts, then: Counts, tol: Tolerances) -> list[Verdict]:
    """Emulated target: the counted instructions of load_method and init, exact, against the tolerance."""
    out = []
    for check, event in STARTUP:
        after, before = getattr(now, check), getattr(then, check)
        what = f"{check} ({event})"
        if after is None or before is None:
            out.append(
                Verdict(
                    check,
                    Status.SKIPPED,
                    label,
                    f"{what} not compared: "
                    + ("the baseline has no counted start-up" if before is None else "none counted now"),
                )
            )
            continue
        change = after / before - 1 if before > 0 else (0.0 if after == 0 else float("inf"))
        evidence = Evidence({"current": after, "baseline": before, "tolerance": getattr(tol, check)})
        numbers = f"{what} {before:,} -> {after:,} instructions ({change:+.2%}; counted, exact)"
        if change > getattr(tol, check):
            out.append(
                Verdict(
                    check,
                    Status.REGRESSION,
                    label,
                    f"{what} regression: {numbers}; tolerance " f"+{getattr(tol, check):.0%}",
                    evidence.worded(change_short(what, after, before)),
                )
            )
        else:
            out.append(
                Verdict(
                    check, Status.IMPROVEMENT if change < -getattr(tol, check) else Status.OK, label, numbers, evidence
                )
            )
    return _load_explained_by_init(out)


def _per_replica(record: GateRecord, per_chunk: Sequence[float | None]) -> np.ndarray | None:
    """One value per process the gate compares (``replica_sizes``: a baseline replica, or one check), the median
    of its runner processes' values (``chunk_sizes``: alternated chunks run in processes of their own). A runner
    process whose every warm load was disturbed has None (Profile._startup_per_chunk) and is left out; a process
    left with none is not compared."""
    chunks = record.chunk_sizes
    if not chunks or len(chunks) != len(per_chunk):
        return None
    processes = record.replica_sizes or [sum(chunks)]
    owner = np.searchsorted(np.cumsum(processes), np.cumsum(chunks), side="left")
    values = np.array([np.nan if v is None else v for v in per_chunk], dtype=float)
    usable = ~np.isnan(values)
    return np.array(
        [
            float(np.median(values[(owner == k) & usable]))
            for k in range(len(processes))
            if ((owner == k) & usable).any()
        ]
    )


def _counted(pair: Pair) -> list[Verdict]:
    counts = counts_of(pair)
    return [] if counts is None else _counted_startup(pair.label, *counts, pair.tol)


def _measured(pair: Pair) -> list[Verdict]:
    return startup_verdicts(pair.label, pair.current, pair.baseline, pair.tol)


CHECK = Check(
    ("load", "init", "peak_rss"), "docs/gate.md#load-init-and-peak-memory", counted=_counted, measured=_measured
)
