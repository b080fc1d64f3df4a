"""Whether a record can serve as a baseline (a power analysis of its replicas), how many replicas its checks
need, and the note a regression judged on a baseline written despite its problems carries.

Verdicts compare one session's replicas with the baseline's (stats.ReplicaShift), so a baseline needs several
replicas, few disturbed runs, and for latency and every per-run share a spread between replicas small enough
that a change of DETECT_TOLERANCES tolerances would be caught DETECT_POWER of the time. docs/gate.md, "A bad
baseline is refused".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sme2.gate.checks.replica_stats import clean_runs, median_run_ms, per_run, replica_medians
from pytest_sme2.gate.checks.startup import STARTUP
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Status, Tolerances, Verdict
from pytest_sme2.profile import stats

# A baseline is refused when more than this share of its runs was disturbed: the runs left are those the
# machine happened to spare, and a verdict on them compares with a luckier machine than later sessions get
# (17 of 40 disturbed reference runs were accepted, and unchanged reruns then failed at +22-24%).
MAX_DISTURBED_SHARE = 0.25


# Replicas a baseline needs at least, to know how far its quantities move between replicas, and how many
# an update measures by default (--sme2-baseline-replicas): with 10, one later replica against them is a
# t-test with 9 degrees of freedom, which catches a change of 6.4 replica sds 95% of the time at alpha 0.001.
MIN_BASELINE_REPLICAS = 3


BASELINE_REPLICAS = 10


# Each quantity's baseline must let the gate catch a change of this many tolerances 95% of the time (one
# replica against the baseline's, at alpha): the detection targets of the gate (+15% latency at a 10%
# tolerance; +10 points of a share at 5) are one and a half to two tolerances.
DETECT_TOLERANCES = 1.5


DETECT_POWER = 0.95


def baseline_quality(record: GateRecord, tol: Tolerances, check_replicas: int = 1) -> tuple[dict[str, Any], list[str]]:
    """How trustworthy a record is as a baseline, and what makes it unfit (empty list: fit).

    It judges what the verdicts use. Verdicts compare one session's replica with the baseline's
    replicas (stats.ReplicaShift), so a baseline needs several replicas, few disturbed runs,
    and for latency and every per-run share a spread between replicas small enough that a
    change of DETECT_TOLERANCES tolerances would be caught at least DETECT_POWER of the time by a
    check of ``check_replicas`` replicas (--sme2-replicas); a
    quantity whose replicas disagree more than that would make its verdicts noise or blind.
    Latency and shares count only above the gate's minimum effect in milliseconds (tiny models). Emulated
    records have no time to judge: their counts repeat exactly.
    """
    if record.emulated:
        return {"emulated": True}, []
    relative = stats.per_run_ratio(record.samples_ms, record.reference_ms)
    clean = clean_runs(record, with_reference=relative is not None)
    runs, kept = int(clean.size), int(clean.sum())
    quality: dict[str, Any] = {
        "runs": runs,
        "disturbed_runs": runs - kept,
        "basis": "relative" if relative is not None else "raw",
    }
    problems = _runs_problems(runs, kept)
    # What the check found unfit, by the quantity a verdict names (quality_quantity), "record" for the runs
    # themselves: a regression judged on a baseline accepted despite them names its own (forced_baseline_note).
    unfit: dict[str, str] = {"record": "; ".join(problems)} if problems else {}
    for check, text in _startup_unfit(record):
        unfit[check] = text
        problems.append(f"{text}; its checks could not judge start-up")
    latency = relative if relative is not None else np.asarray(record.samples_ms, dtype=float)
    medians, _ = replica_medians(record, latency, clean)
    quality["replicas"] = int(medians.size)
    quality["check_replicas"] = check_replicas
    if medians.size < MIN_BASELINE_REPLICAS:
        few = f"it holds {medians.size} replica(s) with {stats.MIN_RUNS_PER_REPLICA} or more undisturbed runs"
        problems.append(
            f"{few}; the gate needs {MIN_BASELINE_REPLICAS} or more to know how far each quantity moves "
            f"between replicas (--sme2-baseline-replicas, default {BASELINE_REPLICAS})"
        )
        unfit["record"] = "; ".join(filter(None, (unfit.get("record"), few)))
        return quality | {"unfit": unfit}, problems
    spreads: dict[str, float] = {}
    detectable: dict[str, float] = {}
    for quantity in _spread_quantities(record, tol, latency, clean):
        design = _check_design(quantity.medians, check_replicas, log=quantity.log)
        change = design.detectable_change(tol.alpha, DETECT_POWER)
        spreads[quantity.what] = float(np.expm1(design.spread)) if quantity.log else design.spread
        detectable[quantity.what] = change
        if quantity.blind(change):
            unfit[quantity.what], problem = _blind_text(
                quantity, design, change, check_replicas, tol, f"{quality['basis']} latency"
            )
            problems.append(problem)
    quality.update({"between_replicas": spreads, "detectable_change": detectable})
    if unfit:
        quality["unfit"] = unfit
    return quality, problems


def _runs_problems(runs: int, kept: int) -> list[str]:
    """What makes a record's runs themselves unfit for a baseline: too few undisturbed, or too many disturbed."""
    problems = []
    if kept < stats.MIN_CLEAN_RUNS:
        problems.append(f"only {kept} of {runs} runs were undisturbed (need {stats.MIN_CLEAN_RUNS})")
    if runs - kept > runs * MAX_DISTURBED_SHARE:
        problems.append(
            f"{runs - kept} of {runs} runs were disturbed by other work on the machine (the run, or the "
            f"reference run right before it); at most {MAX_DISTURBED_SHARE:.0%} may be"
        )
    return problems


def _startup_unfit(record: GateRecord) -> list[tuple[str, str]]:
    """Start-up events (check, why) with no value at all: every warm load of every runner process was disturbed
    (a review: such a baseline turned the start-up gate off without a word)."""
    out = []
    for check, event in STARTUP:
        values = getattr(record, f"{check}_relative_per_chunk") or getattr(record, f"{check}_ms_per_chunk")
        if values and all(v is None for v in values):
            out.append(
                (
                    check,
                    f"{check} ({event}) has no value: every warm load of every runner process was disturbed "
                    f"by other work on the machine",
                )
            )
    return out


def _blind_text(
    quantity: _Spread,
    design: stats.ReplicaShift,
    change: float,
    check_replicas: int,
    tol: Tolerances,
    latency_name: str,
) -> tuple[str, str]:
    """A quantity whose replicas disagree too much for a check of ``check_replicas`` to catch DETECT_TOLERANCES
    tolerances: its line in ``unfit`` and its problem, with the remedy. ``latency_name``: "relative latency" or
    "raw latency"."""
    remedy = _remedy(quantity.medians, check_replicas, quantity.tolerance, tol.alpha, quantity.name, log=quantity.log)
    if quantity.what == "latency":
        unfit = (
            f"{latency_name} moves by {float(np.expm1(design.spread)):.1%} (sd) between its "
            f"{quantity.medians.size} replicas"
        )
        return unfit, (
            f"{unfit}: a check of {check_replicas} replica(s) would catch "
            f"only slowdowns above {change:+.0%} reliably, not {DETECT_TOLERANCES * tol.latency:+.0%} "
            f"({DETECT_TOLERANCES:g} x the tolerance); " + remedy
        )
    unfit = (
        f"{quantity.what} moves by {design.spread * 100:.1f} points (sd) between its "
        f"{quantity.medians.size} replicas"
    )
    return unfit, (
        f"{unfit}: a check of {check_replicas} replica(s) would "
        f"catch only changes above {change * 100:.0f} points "
        f"reliably, not {DETECT_TOLERANCES * quantity.tolerance * 100:g} ({DETECT_TOLERANCES:g} "
        f"x the tolerance); " + remedy
    )


_TOLERANCE_NAMES = {"share": "shares", "delegation coverage": "coverage", "SME path share": "sme_path"}


MAX_SUGGESTED_REPLICAS = 10


@dataclass(frozen=True)
class _Spread:
    """One time-based quantity of a baseline, as its replica medians: what a check's power depends on."""

    what: str
    medians: np.ndarray
    tolerance: float
    log: bool
    median_ms: float = 0.0  # latency and shares: the median run, for the gate's minimum effect in milliseconds
    min_effect_ms: float = 0.0  # 0: no minimum effect (coverage, SME path)

    @property
    def name(self) -> str:
        """The tolerance's name (@pytest.mark.baseline argument)."""
        return "latency" if self.what == "latency" else _TOLERANCE_NAMES.get(self.what.split(" of ")[0], "shares")

    def blind(self, detectable: float) -> bool:
        """True when a check that can only see changes above ``detectable`` misses DETECT_TOLERANCES tolerances
        (latency and shares: and the change would be above the minimum effect in milliseconds, below which the
        verdict passes it anyway)."""
        if detectable <= DETECT_TOLERANCES * self.tolerance:
            return False
        return not self.min_effect_ms or detectable * self.median_ms > self.min_effect_ms


def _spread_quantities(record: GateRecord, tol: Tolerances, latency: np.ndarray, clean: np.ndarray) -> list[_Spread]:
    """Latency and every per-run quantity the verdicts judge, with enough replicas to know their spread."""
    out = []
    medians, _ = replica_medians(record, latency, clean)
    median_ms = median_run_ms(record, clean)
    if medians.size >= MIN_BASELINE_REPLICAS and np.all(medians > 0):
        out.append(_Spread("latency", np.log(medians), tol.latency, True, median_ms, tol.min_effect_ms))
    for what, values, tolerance in _per_run_quantities(record, tol):
        found, _ = replica_medians(record, values, clean & np.isfinite(values))
        if found.size >= MIN_BASELINE_REPLICAS:
            floor = tol.min_effect_ms if what.startswith("share of ") else 0.0  # as _shares judges them
            out.append(_Spread(what, found, tolerance, False, median_ms, floor))
    return out


def replicas_needed(record: GateRecord, tol: Tolerances) -> int | None:
    """The fewest check replicas (at most MAX_SUGGESTED_REPLICAS) that see DETECT_TOLERANCES tolerances of
    every time-based quantity of this baseline record with DETECT_POWER; None when even that many do not
    (``sme2_replicas = auto`` measures each test's checks in this many replicas). 1 for a record without
    time to judge (emulated) or without enough replicas to know its spread."""
    if record.emulated or not record.samples_ms:
        return 1
    relative = stats.per_run_ratio(record.samples_ms, record.reference_ms)
    clean = clean_runs(record, with_reference=relative is not None)
    latency = relative if relative is not None else np.asarray(record.samples_ms, dtype=float)
    quantities = _spread_quantities(record, tol, latency, clean)
    for replicas in range(1, MAX_SUGGESTED_REPLICAS + 1):
        if not any(
            q.blind(_check_design(q.medians, replicas, q.log).detectable_change(tol.alpha, DETECT_POWER))
            for q in quantities
        ):
            return replicas
    return None


def _remedy(medians: np.ndarray, replicas: int, tolerance: float, alpha: float, name: str, log: bool = False) -> str:
    """What would make this baseline usable: the fewest check replicas that catch 1.5 tolerances, and the
    tolerance that checks of the current count could meet (so the refusal names settings, not a vague hope)."""
    needed = next(
        (
            r
            for r in range(replicas + 1, MAX_SUGGESTED_REPLICAS + 1)
            if _check_design(medians, r, log).detectable_change(alpha, DETECT_POWER) <= DETECT_TOLERANCES * tolerance
        ),
        None,
    )
    meetable = _check_design(medians, replicas, log).detectable_change(alpha, DETECT_POWER) / DETECT_TOLERANCES
    parts = (
        [
            f"checks of {needed} replicas would catch it (ini sme2_replicas = {needed}, or auto: each test "
            f"as many as its baseline needs; then record again)"
        ]
        if needed
        else []
    )
    parts.append(f"a tolerance of {meetable:.2f} would be met (@pytest.mark.baseline({name}={meetable:.2f}))")
    return " or ".join(parts)


def _check_design(medians: np.ndarray, replicas: int, log: bool) -> "stats.ReplicaShift":
    """The comparison a later check of ``replicas`` replicas makes with this baseline (no change); the
    spread between replicas is the baseline's."""
    spread = float(np.std(medians, ddof=1))
    centre = float(np.mean(medians))
    return stats.ReplicaShift(
        current=centre,
        baseline=centre,
        change=0.0,
        p_up=1.0,
        p_down=1.0,
        spread=spread,
        df=int(medians.size) + replicas - 2,
        n_current=replicas,
        n_baseline=int(medians.size),
        runs_current=0,
        runs_baseline=0,
        log=log,
    )


def _per_run_quantities(record: GateRecord, tol: Tolerances) -> list[tuple[str, np.ndarray, float]]:
    """The per-run quantities the verdicts judge, with their tolerances: shares, coverage, SME path."""
    out = []
    for category in sorted(record.shares or {}):
        values = per_run(record, "shares", category)
        if values is not None:
            out.append((f"share of {category}", values, tol.shares))
    for key, what, tolerance in (
        ("delegation_coverage", "delegation coverage", tol.coverage),
        ("sme_path_share", "SME path share", tol.sme_path),
    ):
        values = per_run(record, key)
        if values is not None:
            out.append((what, values, tolerance))
    return [(what, values, tolerance) for what, values, tolerance in out if values.size == len(record.samples_ms)]


def quality_quantity(verdict: Verdict) -> str | None:
    """The name baseline_quality files a verdict's quantity under in ``quality.unfit`` ("latency", "share of
    CONV", "delegation coverage", "SME path share"); None for a verdict it does not judge."""
    if verdict.check == "share":
        return f"share of {verdict.evidence.category}" if verdict.evidence.category is not None else None
    return {"latency": "latency", "delegation_coverage": "delegation coverage", "sme_path": "SME path share"}.get(
        verdict.check
    )


def forced_baseline_note(verdict: Verdict, baseline: GateRecord) -> Verdict:
    """A regression of a time-based quantity against a baseline written with --sme2-accept-noisy-baselines
    says so, with what its quality check found: the user then knows the verdict stands on a baseline the gate
    called unfit, and that a level seen in one session is no promise for later ones (docs/gate.md, "Between
    sessions"). Every other verdict is returned as it is."""
    quality = baseline.quality or {}
    quantity = quality_quantity(verdict)
    if (
        verdict.status != Status.REGRESSION
        or quantity is None
        or not quality.get("accepted_despite")
        or not verdict.evidence.statistical
    ):  # an exact count (graph nodes) is no level of one session
        return verdict
    unfit = quality.get("unfit")
    if unfit is None:  # written before the check kept its findings by quantity: say only that it was forced
        found = "problems (quality.accepted_despite in the file)"
    else:
        found = unfit.get(quantity) or unfit.get("record")
        if found is None:  # the check passed this quantity
            return verdict
        found += " (quality.accepted_despite in the file)"
    note = (
        f"; this baseline was written with --sme2-accept-noisy-baselines although its quality check "
        f"found: {found}: a level measured in one session moves "
        f"further in later ones on a busy or shared machine (docs/gate.md, 'Between sessions'); record it "
        f"again where the check passes, or judge this model by instructions (--sme2-metric=instructions, or "
        f"the emulated target)"
    )
    return Verdict(verdict.check, verdict.status, verdict.label, verdict.message + note, verdict.evidence)
