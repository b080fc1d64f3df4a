"""Compare a profile's record with its baseline: Verdict objects with their evidence.

Time-based quantities (relative latency, category shares, delegation coverage, SME path share) fail only
when they moved more than their tolerance *and* a t-test between the baseline's and this run's process
medians calls the move significant (stats.ProcessShift; one-sided, shares either way): the runs of one process
are not independent. Latency and shares must also have moved by more than ``min_effect_ms`` of the run.
Disturbed runs never decide; too few undisturbed ones make a verdict ``inconclusive``.
Structure needs no statistics; emulated time is never compared (the counts are). docs/gate.md has the
whole story. Records are the dicts of baselines.record_of, so unit tests judge synthetic numbers.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import classify, strip_instance
from pytest_sme2.gate import structure
from pytest_sme2.profile import stats
from pytest_sme2.profile.device_model import time_text

REGRESSION = "regression"
IMPROVEMENT = "improvement"
OK = "ok"
SKIPPED = "skipped"
INCONCLUSIVE = "inconclusive"  # too few undisturbed runs to judge: shown, never failed
NOTE = "note"
MISSING = "missing"
FAILING = (REGRESSION, MISSING)
METRICS = ("latency", "instructions")


@dataclass(frozen=True)
class Tolerances:
    """How much change is allowed before a verdict fails.

    ``latency``, ``instructions``, ``op_instructions`` (one operator's counted instructions, emulated
    target), ``modelled`` (modelled device time end to end, emulated target with a device model) and
    ``memory`` (the program's planned memory; exact, so 0 by default), ``load`` and ``init``
    (Program::load_method and Method::init: per runner process on the local and adb targets, counted
    instructions on the emulated target) and ``peak_rss`` (the runner's peak resident memory per run,
    hardware) are relative (0.10 = 10% slower);
    ``shares``, ``coverage`` and ``sme_path`` are absolute share points
    (0.05 = five percentage points); ``alpha`` is the significance level
    of every per-run test; ``min_effect_ms`` is the smallest change of the
    median latency in milliseconds that can fail a test, and of a share
    (its points times the baseline's median run): for a model of tens
    of microseconds a relative tolerance alone is a few microseconds, less
    than where a fresh process happens to place its memory moves it.
    """

    latency: float = 0.10
    op_instructions: float = 0.02
    memory: float = 0.0
    min_effect_ms: float = 0.02
    shares: float = 0.05
    coverage: float = 0.02
    sme_path: float = 0.05
    alpha: float = 0.001
    instructions: float = 0.005
    modelled: float = 0.02
    # Relative start-up moved by up to 24% between a baseline's session and later unchanged ones on the local
    # target (docs/performance.md, "Load and init relative to the reference load"); a doubled init is +94-115%
    load: float = 0.40
    init: float = 0.40
    peak_rss: float = 0.10

    def __post_init__(self) -> None:
        bad = []  # every wrong value at once: fixing one at a time costs a run each
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                bad.append(f"{f.name}={value!r} (use a number >= 0)")
            elif f.name == "alpha" and not 0 < value < 1:
                bad.append(f"alpha={value!r} (use a p-value between 0 and 1)")
        if bad:
            raise UsageError(f"baseline tolerance{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
                             f"{'are' if len(bad) > 1 else 'is'} invalid")

    def replace(self, **changes: Any) -> "Tolerances":
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise UsageError(f"unknown baseline tolerance(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return Tolerances(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


@dataclass(frozen=True)
class Verdict:
    """One check of one profile against its baseline."""

    check: str  # latency | instructions | delegation_coverage | delegated_ops | sme_path | share | provenance
    status: str  # regression | improvement | ok | skipped | note | missing
    label: str  # the profile's label: model, recipe and variant
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    def __str__(self) -> str:
        return f"[{self.status}] {self.label}: {self.message}"


def status_of(line: str) -> str:
    """The status of a verdict line as ``Verdict.__str__`` writes it ("[inconclusive] label: ..."); "" for a line
    of another form. The outcome keeps verdicts as these lines; the summaries count them by status."""
    return line[1:line.find("]")] if line.startswith("[") and "]" in line else ""


def _pct(value: float) -> str:
    return f"{value:.1%}"


def latency_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    """Regression only if latency moved more than the tolerance and more than processes move it.

    What is compared is the relative latency (each run divided by the reference program's run right
    before it) when both sides have it, because drift of the whole machine cancels there; raw
    milliseconds otherwise, with a note saying so and how to get the relative gate. Each process
    gives one value, the median of its undisturbed runs, and the significance test is between the
    baseline's processes and this run's (stats.ProcessShift): the 40 runs of one process share its
    level, so testing them as independent samples called unchanged code slower at p=1e-9.
    """
    if current.get("emulated") or baseline.get("emulated"):
        return Verdict("latency", SKIPPED, label, "emulated timing is not hardware timing: latency not compared")
    relative = tuple(stats.per_run_ratio(r["samples_ms"], r.get("reference_ms")) for r in (current, baseline))
    judged_relative = relative[0] is not None and relative[1] is not None
    clean = tuple(clean_runs(r, with_reference=judged_relative) for r in (current, baseline))
    raw = tuple(np.asarray(r["samples_ms"], dtype=float)[mask] for r, mask in zip((current, baseline), clean))
    left_out = _left_out(clean)
    too_few = _too_few(clean)
    if too_few:
        return Verdict("latency", INCONCLUSIVE, label, f"latency not judged: {too_few}",
                       {"disturbed": [int((~m).sum()) for m in clean]})
    values = relative if judged_relative else tuple(np.asarray(r["samples_ms"], dtype=float) for r in (current, baseline))
    test = _process_shift((current, baseline), values, clean, log=True)
    if isinstance(test, str):
        return Verdict("latency", INCONCLUSIVE, label, f"latency not judged: {test}")
    if judged_relative:
        basis, how = "relative latency", "each run / the reference program's run right before it; "
        raw_note = ""
    else:
        which = " and ".join(side for side, r in (("this run", relative[0]), ("the baseline", relative[1])) if r is None)
        basis, how = "raw latency", ""
        raw_note = (f"; judged on raw milliseconds because {which} has no reference-program times, so drift of "
                    f"the machine is not cancelled (record the baseline again with --sme2-update-baselines and "
                    f"keep --sme2-latency-reference on)")
    ratio = 1 + test.change
    low, high = (1 + bound for bound in test.interval())
    medians = [float(np.median(side)) for side in raw]
    evidence = {
        "basis": "relative" if judged_relative else "raw",
        "current_median_ms": medians[0],
        "baseline_median_ms": medians[1],
        "ratio": ratio, "ratio_low": low, "ratio_high": high,
        "p_slower": test.p_up, "p_faster": test.p_down,
        "tolerance": tol.latency, "alpha": tol.alpha, "min_effect_ms": tol.min_effect_ms,
        "current_runs": test.runs_current, "baseline_runs": test.runs_baseline,
        "current_processes": test.n_current, "baseline_processes": test.n_baseline,
        "between_processes": float(np.expm1(test.spread)),
        "current_disturbed": int((~clean[0]).sum()), "baseline_disturbed": int((~clean[1]).sum()),
    }
    numbers = (
        f"{basis} {ratio - 1:+.1%} ({how}{_processes_text(test)}, 95% CI of the ratio [{low:.3f}, {high:.3f}]"
        f"{left_out}; raw median {medians[0]:.4g} ms vs baseline {medians[1]:.4g} ms){raw_note}"
    )
    # The change in milliseconds the ratio stands for, measured on the baseline's median.
    effect_ms = abs(ratio - 1) * medians[1]
    big_enough = effect_ms > tol.min_effect_ms
    if ratio > 1 + tol.latency and big_enough and test.p_up < tol.alpha:
        return Verdict("latency", REGRESSION, label,
                       f"latency regression: {numbers}; tolerance +{tol.latency:.0%} and {tol.min_effect_ms:g} ms, "
                       f"t-test between processes p={test.p_up:.2g} < alpha {tol.alpha:g}", evidence)
    if ratio < 1 / (1 + tol.latency) and big_enough and test.p_down < tol.alpha:
        return Verdict("latency", IMPROVEMENT, label,
                       f"latency improvement: {numbers}; t-test between processes p={test.p_down:.2g} < alpha "
                       f"{tol.alpha:g}", evidence)
    p = test.p_up if ratio >= 1 else test.p_down
    if abs(ratio - 1) <= tol.latency:
        why = "within tolerance"
    elif not big_enough:
        why = (f"change of about {effect_ms * 1000:.3g} us per run is below the minimum effect of "
               f"{tol.min_effect_ms:g} ms (min_effect_ms)")
    else:
        why = (f"not significant (p={p:.2g}; processes move it by {np.expm1(test.spread):.1%}, so only changes "
               f"beyond {test.significant_change(tol.alpha):+.1%} can be told from that)")
    return Verdict("latency", OK, label, f"latency {why}: {numbers}; tolerance {tol.latency:.0%}", evidence)


def _process_shift(records: tuple[Mapping[str, Any], Mapping[str, Any]], values: tuple[np.ndarray, np.ndarray],
                   keep: tuple[np.ndarray, np.ndarray], log: bool = False) -> "stats.ProcessShift | str":
    """The between-process comparison of one quantity (current, baseline order), or why there is none."""
    medians, used = [], []
    for record, series, mask in zip(records, values, keep):
        found, runs = _medians(record, series, mask)
        medians.append(found)
        used.append(runs)
    if log and any(np.any(m <= 0) for m in medians):
        return "a process median is not positive"
    test = stats.process_shift(medians[1], medians[0], (used[1], used[0]), log=log)
    if test is None:
        return (f"the baseline holds {medians[1].size} process(es) with {stats.MIN_RUNS_PER_PROCESS} or more "
                f"undisturbed runs, and this run {medians[0].size}: with fewer than three in all, how far the "
                f"level moves between processes is unknown, and runs of one process cannot stand in for it; "
                f"record the baseline again with --sme2-update-baselines (it runs --sme2-baseline-processes "
                f"processes)")
    return test


def _processes_text(test: "stats.ProcessShift") -> str:
    """How the process comparison was made, for a verdict's numbers."""
    spread = f"{np.expm1(test.spread):.1%}" if test.log else f"{test.spread * 100:.1f} points"
    return (f"{test.n_current} vs {test.n_baseline} process(es) of {test.runs_current} vs {test.runs_baseline} "
            f"undisturbed runs, processes differ by {spread} (sd)")


def instruction_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                        tol: Tolerances) -> Verdict:
    """Instructions per inference against the baseline's, with a plain relative tolerance (they barely vary)."""
    now, then = current.get("instructions"), baseline.get("instructions")
    if not now:
        return Verdict("instructions", MISSING, label, "this run has no instruction count")
    if not then:
        return Verdict("instructions", MISSING, label,
                       "the baseline has no instruction count; record one with "
                       "--sme2-metric=instructions --sme2-update-baselines")
    cur, base = float(now["per_inference"]), float(then["per_inference"])
    change = cur / base - 1 if base > 0 else float("inf")
    evidence = {"current": cur, "baseline": base, "change": change, "tolerance": tol.instructions}
    numbers = f"{cur:,.0f} instructions per inference vs baseline {base:,.0f} ({change:+.3%})"
    if change > tol.instructions:
        return Verdict("instructions", REGRESSION, label,
                       f"instruction regression: {numbers}; tolerance +{tol.instructions:.2%}", evidence)
    if change < -tol.instructions:
        return Verdict("instructions", IMPROVEMENT, label, f"instruction improvement: {numbers}", evidence)
    return Verdict("instructions", OK, label, f"instructions within tolerance: {numbers}", evidence)


def clean_runs(record: Mapping[str, Any], with_reference: bool = False) -> np.ndarray:
    """Which runs of a record a verdict may read (stats.undisturbed_runs, the Profile's own definition):
    undisturbed runs, and for relative latency also an undisturbed reference run before each."""
    reference = record.get("reference_ms") if with_reference else None
    mask = stats.undisturbed_runs(record["samples_ms"], reference, bool(record.get("emulated")))
    indices = record.get("disturbed_run_indices")
    if indices and not record.get("emulated"):  # stalls inside one operator, seen by the Profile
        mask[[i for i in indices if 0 <= i < mask.size]] = False
    return mask


def _left_out(clean: tuple[np.ndarray, np.ndarray]) -> str:
    counts = [int((~mask).sum()) for mask in clean]
    return f"; {counts[0]} vs {counts[1]} disturbed runs left out" if any(counts) else ""


def _too_few(clean: tuple[np.ndarray, np.ndarray]) -> str:
    """Why no verdict can be given (empty if it can): too few undisturbed runs on a side."""
    for side, mask in zip(("this run", "the baseline"), clean):
        if int(mask.sum()) < stats.MIN_CLEAN_RUNS:
            return (f"{side} has {int(mask.sum())} undisturbed of {mask.size} runs, fewer than "
                    f"{stats.MIN_CLEAN_RUNS}; the machine was too busy or the device throttled (run again on a "
                    f"quieter or cooler machine, wait for it with --sme2-cooldown-temp, or make more runs: --sme2-runs)")
    return ""


def _per_run(record: Mapping[str, Any], key: str, category: str | None = None) -> np.ndarray | None:
    """The record's per-run values of one quantity (NaN where a run has none); None if it has none."""
    per_run = record.get("per_run") or {}
    values = per_run.get(key)
    if category is not None:
        values = (values or {}).get(category)
    if values is None:
        return None
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _per_run_verdict(check: str, label: str, what: str, key: str, current: Mapping[str, Any],
                     baseline: Mapping[str, Any], tolerance: float, alpha: float, two_sided: bool,
                     category: str | None = None, min_effect_ms: float = 0.0) -> Verdict:
    """One per-run quantity judged like latency: median change beyond ``tolerance`` points *and* significant,
    and (``min_effect_ms``, for shares of the run's time) a change of more than that many ms of the baseline's
    median run."""
    evidence: dict[str, Any] = {"tolerance": tolerance, "alpha": alpha}
    if category is not None:
        evidence["category"] = category
    values = tuple(_per_run(r, key, category) for r in (current, baseline))
    if values[0] is None and values[1] is None:
        return Verdict(check, OK, label, f"{what}: neither side has any", evidence)
    if values[1] is None or values[0] is None:
        side = "the baseline" if values[1] is None else "this run"
        if side == "the baseline" and baseline.get("per_run") is None:
            return Verdict(check, INCONCLUSIVE, label,
                           f"{what} not judged: the baseline was recorded by an older pytest-sme2 without per-run "
                           f"values; record it again with --sme2-update-baselines", evidence)
        if two_sided or side == "this run":
            return Verdict(check, REGRESSION, label, f"{what}: {side} has none, the other side has", evidence)
        return Verdict(check, OK, label, f"{what}: the baseline had none", evidence)
    clean = tuple(clean_runs(r) for r in (current, baseline))
    if len(values[0]) != clean[0].size or len(values[1]) != clean[1].size:
        return Verdict(check, INCONCLUSIVE, label, f"{what} not judged: per-run values do not match the runs", evidence)
    keep = tuple(m & np.isfinite(v) for v, m in zip(values, clean))
    too_few = _too_few(keep)
    if too_few:
        return Verdict(check, INCONCLUSIVE, label, f"{what} not judged: {too_few}", evidence)
    test = _process_shift((current, baseline), values, keep)
    if isinstance(test, str):
        return Verdict(check, INCONCLUSIVE, label, f"{what} not judged: {test}", evidence)
    change = test.change
    p = test.p_up if change > 0 else test.p_down
    evidence.update({"current": test.current, "baseline": test.baseline, "change": change, "p": p,
                     "current_runs": test.runs_current, "baseline_runs": test.runs_baseline,
                     "current_processes": test.n_current, "baseline_processes": test.n_baseline,
                     "between_processes": test.spread,
                     "current_disturbed": int((~clean[0]).sum()), "baseline_disturbed": int((~clean[1]).sum())})
    low, high = test.interval()
    evidence.update({"change_low": low, "change_high": high})
    numbers = (f"{what} {_pct(test.baseline)} -> {_pct(test.current)} ({change * 100:+.1f} points, 95% CI "
               f"[{low * 100:+.1f}, {high * 100:+.1f}]; {_processes_text(test)}{_left_out(clean)}; "
               f"t-test p={p:.2g})")
    bad_direction = two_sided or change < 0
    effect_ms = abs(change) * _median_run_ms(baseline, clean[1])
    big_enough = not min_effect_ms or effect_ms > min_effect_ms  # coverage and SME path have no floor
    if min_effect_ms:
        evidence.update({"effect_ms": effect_ms, "min_effect_ms": min_effect_ms})
    if abs(change) > tolerance and p < alpha and bad_direction and big_enough:
        bound = f"+-{tolerance * 100:g}" if two_sided else f"-{tolerance * 100:g}"
        floor = f" and {min_effect_ms:g} ms of the run ({effect_ms:.3g} ms)" if min_effect_ms else ""
        return Verdict(check, REGRESSION, label, f"{numbers}; tolerance {bound} points{floor}, alpha {alpha:g}",
                       evidence)
    if abs(change) <= tolerance:
        why = "within tolerance"
    elif not big_enough and bad_direction:
        why = (f"below the minimum effect: {abs(change) * 100:.1f} points of a {effect_ms / abs(change):.3g} ms run "
               f"are {effect_ms:.3g} ms, not more than {min_effect_ms:g} ms (min_effect_ms)")
    elif p >= alpha:
        why = f"not significant (only changes beyond {test.significant_change(alpha) * 100:.1f} points can be told " \
              f"from how far processes move it)"
    else:
        why = "improved"
    return Verdict(check, OK, label, f"{numbers}: {why}", evidence)


# Stored fractions keep six significant digits (baselines.dumps): a fraction read back from a file can
# differ from the same fraction computed now by half a unit in the sixth digit.
_STORED_PRECISION = 1e-6


def _node_coverage(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[Verdict]:
    """The export-time graph's delegated share: judged on the node counts where both sides have them
    (exact), else on the stored fraction, up to its rounding."""
    nodes_now, nodes_then = current.get("node_delegation_coverage"), baseline.get("node_delegation_coverage")
    if nodes_now is None or nodes_then is None:
        return []
    counts_now, counts_then = (_node_counts(r) for r in (current, baseline))
    if counts_now is not None and counts_then is not None:
        dropped = counts_now[0] * sum(counts_then) < counts_then[0] * sum(counts_now)
    else:
        dropped = nodes_now < nodes_then - _STORED_PRECISION
    if dropped:
        counts = (f" ({counts_then[0]} of {sum(counts_then)} nodes -> {counts_now[0]} of {sum(counts_now)})"
                  if counts_now is not None and counts_then is not None else "")
        return [Verdict("delegation_coverage", REGRESSION, label,
                        f"delegated share of graph nodes dropped from {_pct(nodes_then)} to {_pct(nodes_now)}{counts}",
                        {"current": nodes_now, "baseline": nodes_then, "basis": "nodes"})]
    return []


def _node_counts(record: Mapping[str, Any]) -> tuple[int, int] | None:
    """(delegated, not delegated) graph nodes of a record, None if it does not say."""
    delegation = record.get("delegation") or {}
    delegated, other = delegation.get("delegated_nodes"), delegation.get("non_delegated_nodes")
    if isinstance(delegated, int) and isinstance(other, int) and delegated + other > 0:
        return delegated, other
    return None


def _coverage(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> list[Verdict]:
    out = [_per_run_verdict("delegation_coverage", label, "delegation coverage of E2E time", "delegation_coverage",
                            current, baseline, tol.coverage, tol.alpha, two_sided=False)]
    out += _node_coverage(label, current, baseline)
    return out


def _delegated_ops(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> Verdict:
    """Nodes that left the delegate. With both sides' graph nodes (structure.nodes_of) a node fell out only when
    it was delegated in the baseline and is not now; a new node outside the delegate fails too, unless the
    baseline's blocks ran the same node outside it (a layer added to a stack brings its own portable nodes).
    Records without graph nodes are compared by counts per operator type."""
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    new_portable = sorted(set(current.get("portable_ops") or []) - set(baseline.get("portable_ops") or []))
    if nodes_then is not None and nodes_now is not None:
        found = structure.align(nodes_then, nodes_now)
        fell_out = structure.fell_out(nodes_then, nodes_now, found)
        added = structure.new_outside(nodes_then, nodes_now, found)
        kernels = f" (portable kernel(s) new to the program: {', '.join(new_portable)})" if new_portable else ""
        parts = ([f"node(s) fell out of the delegate: {', '.join(fell_out)}"] if fell_out else []) + (
            [f"new node(s) run outside the delegate: {', '.join(added)}"] if added else [])
        evidence = {"fell_out": fell_out, "new_outside": added}
        if parts:
            return Verdict("delegated_ops", REGRESSION, label, "; ".join(parts) + kernels, evidence)
        return Verdict("delegated_ops", OK, label, "no node left the delegate", evidence)
    fell: list[str] = []
    ops_now = (current.get("delegation") or {}).get("ops") or {}
    ops_then = (baseline.get("delegation") or {}).get("ops") or {}
    for op, (_, outside_now) in sorted(ops_now.items()):
        outside_then = ops_then.get(op, [0, 0])[1]
        if outside_now > outside_then:
            fell.append(f"{op} ({outside_now - outside_then} more node(s) outside the delegate)")
    fell += [f"{op} (now runs as a portable kernel)" for op in new_portable]
    if fell:
        return Verdict("delegated_ops", REGRESSION, label,
                       "operator(s) fell out of the delegate: " + "; ".join(fell), {"fell_out": fell})
    return Verdict("delegated_ops", OK, label, "no operator left the delegate", {"fell_out": fell})


# A heavy operator's growth is the same across blocks ("each") when its block instances grew within this much.
SAME_GROWTH = 0.05


def change_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                   tol: Tolerances) -> Verdict | None:
    """The change a person made, in their terms, from the two programs' paired graph nodes (structure.changes)
    and the counted GEMM and convolution operators that grew ("layers.*.up GEMMs +49% instructions each"): a
    note the failing test's headline leads with (findings.py). None when neither shows a change."""
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    parts = [] if nodes_then is None or nodes_now is None else structure.changes(
        nodes_then, nodes_now, structure.align(nodes_then, nodes_now))
    parts += _grown_heavy_ops(current, baseline, tol)
    if not parts:
        return None
    evidence: dict[str, Any] = {"changes": parts}
    counts = [((record.get("instructions") or {}).get("per_inference")) for record in (current, baseline)]
    if all(isinstance(count, (int, float)) for count in counts) and counts[1]:
        # what the change cost, said with it even where it made the whole smaller and something else failed
        evidence["moved"] = f"instructions per inference {counts[0] / counts[1] - 1:+.1%}"
    return Verdict("change", NOTE, label, "; ".join(parts), evidence)


def _grown_heavy_ops(current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> list[str]:
    """The counted GEMM and convolution operators of resized graph nodes (a node's output shape changed: a wider
    FFN), by the node they implement with its block's index taken out, one phrase per category ("layers.*.up,
    layers.*.down GEMMs +36% to +44% instructions"). Without both sides' graph nodes, those that grew beyond
    the operator tolerance. An operator whose node kept its shape is left out: a layer removed before it moves
    it to the front of the program, where the first call's setup is counted in it, and that is no change of it.
    A block counts as resized when any of its nodes changed shape: the second linear of a wider FFN keeps its
    output's shape, its input grew."""
    now, then = _counted(current), _counted(baseline)
    if now is None or then is None or not then.get("op_identity") or not now.get("op_identity"):
        return []
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    resized = None if nodes_then is None or nodes_now is None else {
        (structure.instance_of(nodes_then[i].name) or (None, nodes_then[i].name))[1]
        for i, j in structure.align(nodes_then, nodes_now).pairs if nodes_then[i].detail != nodes_now[j].detail}
    grown: dict[str, dict[str, list[float]]] = {}
    for before, after in _op_pairs(current, baseline)[0]:
        base, cur = float(then["ops"][before][1]), float(now["ops"][after][1])
        category = classify(before).category.value
        node_then = then["op_identity"].get(before, before)
        grew = base > 0 and cur / base - 1 > tol.op_instructions
        if resized is not None:
            moved = grew and (structure.instance_of(node_then) or (None, node_then))[1] in resized
        else:
            moved = grew and cur - base > MIN_OP_INSTRUCTIONS
        if category in ("GEMM", "CONV") and moved:
            where = structure.generic(node_then.split(": ", 1)[0])
            grown.setdefault(category, {}).setdefault(where, []).append(cur / base - 1)
    out = []
    for category, by_node in grown.items():
        changes = [change for found in by_node.values() for change in found]
        low, high = min(changes), max(changes)
        amount = (f"{high:+.0%} instructions" + (" each" if len(changes) > 1 else "")
                  if high - low <= SAME_GROWTH else f"{low:+.0%} to {high:+.0%} instructions")
        out.append(f"{', '.join(by_node)} {category}s {amount}")
    return out


def _sme_path(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    return _per_run_verdict("sme_path", label, "SME path share of CONV+GEMM time", "sme_path_share", current,
                            baseline, tol.sme_path, tol.alpha, two_sided=False)


def _shares(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> list[Verdict]:
    categories = sorted(set(current.get("shares") or {}) | set(baseline.get("shares") or {}))
    # A share of a sub-millisecond run moves with the machine between sessions by more than its tolerance (toy_cnn,
    # 0.1 ms: CONV 0.50-0.72 within minutes, docs/performance.md); like latency, a change of less than
    # min_effect_ms of the run's time never fails.
    return [_per_run_verdict("share", label, f"share of {category}", "shares", current, baseline, tol.shares,
                             tol.alpha, two_sided=True, category=category, min_effect_ms=tol.min_effect_ms)
            for category in categories]


def _changed_files(then: Mapping[str, str] | None, now: Mapping[str, str] | None, shown: int = 5) -> str:
    """`` (files changed: a.py, b.py (new))`` between two registry.source_files; "" when either is unknown (a
    baseline from before they were kept)."""
    if not then or not now:
        return ""
    changed = [f"{name} (new)" if name not in then else f"{name} (gone)" if name not in now else name
               for name in sorted(set(then) | set(now)) if then.get(name) != now.get(name)]
    if not changed:
        return " (none of its own files changed: code it imports from elsewhere, its weights or its input values did)"
    more = f" and {len(changed) - shown} more" if len(changed) > shown else ""
    return f" (files changed: {', '.join(changed[:shown])}{more})"


def _provenance(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[Verdict]:
    """Version and model changes: flagged (not failed), since they explain a change rather than cause a failure."""
    now, then = current.get("provenance") or {}, baseline.get("provenance") or {}
    notes = []
    for key in ("executorch", "torch"):
        if then.get(key) and now.get(key) and then[key] != now[key]:
            notes.append(f"{key} {then[key]} then, {now[key]} now")
    if then.get("model_source_hash") and now.get("model_source_hash") and then["model_source_hash"] != now["model_source_hash"]:
        notes.append("the model's traced program changed" + _changed_files(then.get("model_files"),
                                                                             now.get("model_files")))
    if then.get("inputs") and now.get("inputs") and then["inputs"] != now["inputs"]:
        notes.append(f"example inputs {', '.join(then['inputs'])} then, {', '.join(now['inputs'])} now")
    if then.get("recipe") and now.get("recipe") and then["recipe"] != now["recipe"]:
        def text(recipe: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(recipe.items()))

        notes.append(f"recipe {text(then['recipe'])} then, {text(now['recipe'])} now")
    return [Verdict("provenance", NOTE, label, "since the baseline was recorded: " + "; ".join(notes),
                    {"current": now, "baseline": then})] if notes else []


# A baseline is refused when more than this share of its runs was disturbed: the runs left are those the
# machine happened to spare, and a verdict on them compares with a luckier machine than later sessions get
# (17 of 40 disturbed reference runs were accepted, and unchanged reruns then failed at +22-24%).
MAX_DISTURBED_SHARE = 0.25
# Processes a baseline needs at least, to know how far its quantities move between processes, and how many
# an update measures by default (--sme2-baseline-processes): with 10, one later process against them is a
# t-test with 9 degrees of freedom, which catches a change of 6.4 process sds 95% of the time at alpha 0.001.
MIN_BASELINE_PROCESSES = 3
BASELINE_PROCESSES = 10
# Each quantity's baseline must let the gate catch a change of this many tolerances 95% of the time (one
# process against the baseline's, at alpha): the detection targets of the gate (+15% latency at a 10%
# tolerance; +10 points of a share at 5) are one and a half to two tolerances.
DETECT_TOLERANCES = 1.5
DETECT_POWER = 0.95


def baseline_quality(record: Mapping[str, Any], tol: Tolerances,
                     check_processes: int = 1) -> tuple[dict[str, Any], list[str]]:
    """How trustworthy a record is as a baseline, and what makes it unfit (empty list: fit).

    It judges what the verdicts use. Verdicts compare one session's process with the baseline's
    processes (stats.ProcessShift), so a baseline needs several processes, few disturbed runs,
    and for latency and every per-run share a spread between processes small enough that a
    change of DETECT_TOLERANCES tolerances would be caught at least DETECT_POWER of the time by a
    check of ``check_processes`` processes (--sme2-processes); a
    quantity whose processes disagree more than that would make its verdicts noise or blind.
    Latency and shares count only above the gate's minimum effect in milliseconds (tiny models). Emulated
    records have no time to judge: their counts repeat exactly.
    """
    if record.get("emulated"):
        return {"emulated": True}, []
    relative = stats.per_run_ratio(record["samples_ms"], record.get("reference_ms"))
    clean = clean_runs(record, with_reference=relative is not None)
    runs, kept = int(clean.size), int(clean.sum())
    quality: dict[str, Any] = {"runs": runs, "disturbed_runs": runs - kept,
                               "basis": "relative" if relative is not None else "raw"}
    problems: list[str] = []
    # What the check found unfit, by the quantity a verdict names (quality_quantity), "record" for the runs
    # themselves: a regression judged on a baseline accepted despite them names its own (_forced_baseline_note).
    unfit: dict[str, str] = {}
    if kept < stats.MIN_CLEAN_RUNS:
        problems.append(f"only {kept} of {runs} runs were undisturbed (need {stats.MIN_CLEAN_RUNS})")
    if runs - kept > runs * MAX_DISTURBED_SHARE:
        problems.append(f"{runs - kept} of {runs} runs were disturbed by other work on the machine (the run, or the "
                        f"reference run right before it); at most {MAX_DISTURBED_SHARE:.0%} may be")
    if problems:
        unfit["record"] = "; ".join(problems)
    for check, event in STARTUP:  # a review: such a baseline turned the start-up gate off without a word
        values = record.get(f"{check}_relative_per_chunk") or record.get(f"{check}_ms_per_chunk")
        if values and all(v is None for v in values):
            unfit[check] = (f"{check} ({event}) has no value: every warm load of every runner process was disturbed "
                            f"by other work on the machine")
            problems.append(f"{unfit[check]}; its checks could not judge start-up")
    latency = relative if relative is not None else np.asarray(record["samples_ms"], dtype=float)
    medians, _ = _medians(record, latency, clean)
    quality["processes"] = int(medians.size)
    quality["check_processes"] = check_processes
    if medians.size < MIN_BASELINE_PROCESSES:
        few = f"it holds {medians.size} process(es) with {stats.MIN_RUNS_PER_PROCESS} or more undisturbed runs"
        problems.append(f"{few}; the gate needs {MIN_BASELINE_PROCESSES} or more to know how far each quantity moves "
                        f"between processes (--sme2-baseline-processes, default {BASELINE_PROCESSES})")
        unfit["record"] = "; ".join(filter(None, (unfit.get("record"), few)))
        return quality | {"unfit": unfit}, problems
    spreads: dict[str, float] = {}
    detectable: dict[str, float] = {}
    for quantity in _spread_quantities(record, tol, latency, clean):
        design = _check_design(quantity.medians, check_processes, log=quantity.log)
        change = design.detectable_change(tol.alpha, DETECT_POWER)
        spreads[quantity.what] = float(np.expm1(design.spread)) if quantity.log else design.spread
        detectable[quantity.what] = change
        if not quantity.blind(change):
            continue
        remedy = _remedy(quantity.medians, check_processes, quantity.tolerance, tol.alpha, quantity.name,
                         log=quantity.log)
        if quantity.what == "latency":
            unfit["latency"] = (f"{quality['basis']} latency moves by {spreads['latency']:.1%} (sd) between its "
                                f"{medians.size} processes")
            problems.append(f"{unfit['latency']}: a check of {check_processes} process(es) would catch "
                            f"only slowdowns above {change:+.0%} reliably, not {DETECT_TOLERANCES * tol.latency:+.0%} "
                            f"({DETECT_TOLERANCES:g} x the tolerance); " + remedy)
        else:
            unfit[quantity.what] = (f"{quantity.what} moves by {design.spread * 100:.1f} points (sd) between its "
                                    f"{quantity.medians.size} processes")
            problems.append(f"{unfit[quantity.what]}: a check of {check_processes} process(es) would "
                            f"catch only changes above {change * 100:.0f} points "
                            f"reliably, not {DETECT_TOLERANCES * quantity.tolerance * 100:g} ({DETECT_TOLERANCES:g} "
                            f"x the tolerance); " + remedy)
    quality.update({"between_processes": spreads, "detectable_change": detectable})
    if unfit:
        quality["unfit"] = unfit
    return quality, problems


_TOLERANCE_NAMES = {"share": "shares", "delegation coverage": "coverage", "SME path share": "sme_path"}
MAX_SUGGESTED_PROCESSES = 10


@dataclass(frozen=True)
class _Spread:
    """One time-based quantity of a baseline, as its process medians: what a check's power depends on."""

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


def _median_run_ms(record: Mapping[str, Any], clean: np.ndarray) -> float:
    """The record's median undisturbed run in ms (0 without one): what min_effect_ms weighs a share's points by."""
    return float(np.median(np.asarray(record["samples_ms"], dtype=float)[clean])) if clean.any() else 0.0


def _spread_quantities(record: Mapping[str, Any], tol: Tolerances, latency: np.ndarray,
                       clean: np.ndarray) -> list[_Spread]:
    """Latency and every per-run quantity the verdicts judge, with enough processes to know their spread."""
    out = []
    medians, _ = _medians(record, latency, clean)
    median_ms = _median_run_ms(record, clean)
    if medians.size >= MIN_BASELINE_PROCESSES and np.all(medians > 0):
        out.append(_Spread("latency", np.log(medians), tol.latency, True, median_ms, tol.min_effect_ms))
    for what, values, tolerance in _per_run_quantities(record, tol):
        found, _ = _medians(record, values, clean & np.isfinite(values))
        if found.size >= MIN_BASELINE_PROCESSES:
            floor = tol.min_effect_ms if what.startswith("share of ") else 0.0  # as _shares judges them
            out.append(_Spread(what, found, tolerance, False, median_ms, floor))
    return out


def processes_needed(record: Mapping[str, Any], tol: Tolerances) -> int | None:
    """The fewest check processes (at most MAX_SUGGESTED_PROCESSES) that see DETECT_TOLERANCES tolerances of
    every time-based quantity of this baseline record with DETECT_POWER; None when even that many do not
    (``sme2_processes = auto`` measures each test's checks in this many processes). 1 for a record without
    time to judge (emulated) or without enough processes to know its spread."""
    if record.get("emulated") or not record.get("samples_ms"):
        return 1
    relative = stats.per_run_ratio(record["samples_ms"], record.get("reference_ms"))
    clean = clean_runs(record, with_reference=relative is not None)
    latency = relative if relative is not None else np.asarray(record["samples_ms"], dtype=float)
    quantities = _spread_quantities(record, tol, latency, clean)
    for processes in range(1, MAX_SUGGESTED_PROCESSES + 1):
        if not any(q.blind(_check_design(q.medians, processes, q.log).detectable_change(tol.alpha, DETECT_POWER))
                   for q in quantities):
            return processes
    return None


def _remedy(medians: np.ndarray, processes: int, tolerance: float, alpha: float, name: str,
            log: bool = False) -> str:
    """What would make this baseline usable: the fewest check processes that catch 1.5 tolerances, and the
    tolerance that checks of the current count could meet (so the refusal names settings, not a vague hope)."""
    needed = next((r for r in range(processes + 1, MAX_SUGGESTED_PROCESSES + 1)
                   if _check_design(medians, r, log).detectable_change(alpha, DETECT_POWER)
                   <= DETECT_TOLERANCES * tolerance), None)
    meetable = _check_design(medians, processes, log).detectable_change(alpha, DETECT_POWER) / DETECT_TOLERANCES
    parts = [f"checks of {needed} processes would catch it (ini sme2_processes = {needed}, or auto: each test "
             f"as many as its baseline needs; then record again)"] if needed else []
    parts.append(f"a tolerance of {meetable:.2f} would be met (@pytest.mark.baseline({name}={meetable:.2f}))")
    return " or ".join(parts)


def _medians(record: Mapping[str, Any], values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, int]:
    sizes = record.get("process_sizes") or [len(values)]
    try:
        return stats.process_medians(values, sizes, keep)
    except ValueError:  # sizes of another run count (an older record): one process
        return stats.process_medians(values, [len(values)], keep)


def _check_design(medians: np.ndarray, processes: int, log: bool) -> "stats.ProcessShift":
    """The comparison a later check of ``processes`` processes makes with this baseline (no change); the
    spread between processes is the baseline's."""
    spread = float(np.std(medians, ddof=1))
    centre = float(np.mean(medians))
    return stats.ProcessShift(current=centre, baseline=centre, change=0.0, p_up=1.0, p_down=1.0, spread=spread,
                              df=int(medians.size) + processes - 2, n_current=processes,
                              n_baseline=int(medians.size),
                              runs_current=0, runs_baseline=0, log=log)


def _per_run_quantities(record: Mapping[str, Any], tol: Tolerances) -> list[tuple[str, np.ndarray, float]]:
    """The per-run quantities the verdicts judge, with their tolerances: shares, coverage, SME path."""
    out = []
    for category in sorted(record.get("shares") or {}):
        values = _per_run(record, "shares", category)
        if values is not None:
            out.append((f"share of {category}", values, tol.shares))
    for key, what, tolerance in (("delegation_coverage", "delegation coverage", tol.coverage),
                                 ("sme_path_share", "SME path share", tol.sme_path)):
        values = _per_run(record, key)
        if values is not None:
            out.append((what, values, tolerance))
    return [(what, values, tolerance) for what, values, tolerance in out if values.size == len(record["samples_ms"])]


# An operator's count moves by tens of instructions when the address layout the program sees changes
# (alignment-dependent copies in tiny transposes; measured in docs/performance.md): an operator is only
# judged on its own when its count moved by more than this too. Its share of the whole inference is
# judged anyway through the instructions per inference.
MIN_OP_INSTRUCTIONS = 1000
QEMU = "qemu (emulated target)"


def _counted(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    counts = record.get("instructions")
    return counts if isinstance(counts, Mapping) and counts.get("source") == QEMU else None


def counted_verdicts(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                     tol: Tolerances) -> list[Verdict]:
    """The emulated target's gate: what the counted run says, compared with plain tolerances.

    Every quantity here repeats exactly run to run (qemu_counts.py), so a change beyond its
    tolerance is a change of the program or of the kernels XNNPACK picked, never noise; no
    statistics are needed and none of it reads emulated time.
    """
    now, then = _counted(current), _counted(baseline)
    if now is None or then is None:
        side = "this run" if now is None else "the baseline"
        return [Verdict("instructions", MISSING, label,
                        f"{side} has no instruction counts of the emulated target; "
                        + ("counting is off (--sme2-no-kernel-trace)" if now is None else
                           "record the baseline again with --sme2-update-baselines on the emulated target"))]
    out = [instruction_verdict(label, current, baseline, tol)]
    out += _counted_startup(label, now, then, tol)
    out += modelled_verdicts(label, current, baseline, tol)
    out += _op_instructions(label, current, baseline, tol)
    out += _sme_kernels(label, now, then)
    sme_basis = {"work": "multiply-accumulates"}.get(now.get("sme_path_basis"), "instructions")
    for check, what, key, tolerance, two_sided in (
            ("delegation_coverage", "delegation coverage of E2E instructions", "delegation_coverage", tol.coverage, False),
            ("sme_path", f"SME path share of CONV+GEMM {sme_basis}", "sme_path_share", tol.sme_path, False)):
        out.append(_counted_share(check, label, what, now.get(key), then.get(key), tolerance, two_sided))
    for category in sorted(set(now.get("shares") or {}) | set(then.get("shares") or {})):
        out.append(_counted_share("share", label, f"share of {category} in instructions",
                                  (now.get("shares") or {}).get(category, 0.0),
                                  (then.get("shares") or {}).get(category, 0.0), tol.shares, True, category))
    return out


def _counted_share(check: str, label: str, what: str, now: float | None, then: float | None, tolerance: float,
                   two_sided: bool, category: str | None = None) -> Verdict:
    evidence: dict[str, Any] = {"current": now, "baseline": then, "tolerance": tolerance}
    if category is not None:
        evidence["category"] = category
    if then is None:
        return Verdict(check, OK, label, f"{what}: the baseline had none", evidence)
    if now is None:
        return Verdict(check, REGRESSION, label, f"{what}: {_pct(then)} in the baseline, none now", evidence)
    change = now - then
    numbers = f"{what} {_pct(then)} -> {_pct(now)} ({change * 100:+.2f} points; counted, exact)"
    if abs(change) > tolerance and (two_sided or change < 0):
        bound = f"+-{tolerance * 100:g}" if two_sided else f"-{tolerance * 100:g}"
        return Verdict(check, REGRESSION, label, f"{numbers}; tolerance {bound} points", evidence)
    return Verdict(check, OK, label, f"{numbers}: within tolerance" if abs(change) <= tolerance else
                   f"{numbers}: improved", evidence)


def _op_kind(name: str) -> str:
    """An operator's identity without its position: the event name without " #N" and " @instruction"."""
    return strip_instance(name.rsplit(" @", 1)[0])


def _align_ops(ops_then: Mapping[str, Any], ops_now: Mapping[str, Any],
               ids_then: Mapping[str, str] | None = None, ids_now: Mapping[str, str] | None = None,
               shapes: tuple[Mapping[str, Any], Mapping[str, Any]] = ({}, {})
               ) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Pairs (baseline op, current op), and the ops only one side has (each list in execution order).

    With both sides' identities (``op_identity``, identity.py: the graph node an operator implements)
    operators are paired by what they are in the graph (structure.align): by identity with a block's index
    taken out, whole blocks aligned as units, so an inserted layer is that layer's operators new and
    nothing after it, though every later layer is renamed and every later operator renumbered.
    ``shapes``: each side's graph node name -> output shape (_shapes), which tells layers of different widths
    apart. An operator that changed kind on the same node (a convolution now depthwise) stays paired, so a
    kernel-path change reads "X is now Y".

    Records of an older pytest-sme2 have no identities: their operators are paired as before, by aligning
    the two execution orders (difflib, on names without numbers) and pairing operators replaced one for
    one; a delegate split can pair the wrong operators there (counted_verdicts says so in a note).
    """
    then, now = (sorted(ops, key=lambda name: ops[name][0]) for ops in (ops_then, ops_now))
    if ids_then and ids_now:
        def items(names: list[str], ids: Mapping[str, str], shape: Mapping[str, Any]) -> list[structure.Node]:
            return [structure.Node(ids.get(n, n), detail=(_op_kind(n), shape.get(ids.get(n, n)))) for n in names]

        found = structure.align(items(then, ids_then, shapes[0]), items(now, ids_now, shapes[1]))
        pairs = [(then[i], now[j]) for i, j in found.pairs]
        return _pair_anchorless(pairs, [then[i] for i in found.gone], [now[j] for j in found.new], ids_then,
                                ids_now)
    matcher = difflib.SequenceMatcher(None, [_op_kind(n) for n in then], [_op_kind(n) for n in now], autojunk=False)
    pairs, gone, new = [], [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs += list(zip(then[i1:i2], now[j1:j2]))
        else:
            gone += then[i1:i2]
            new += now[j1:j2]
    return pairs, gone, new


def _pair_anchorless(pairs: list[tuple[str, str]], gone: list[str], new: list[str], ids_then: Mapping[str, str],
                     ids_now: Mapping[str, str]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Operators with no graph node of their own are named after the last named operator before them
    (identity.py: "Mean (ND) Reduce2 after b2.conv: ..."), so a layer inserted before them renames them though
    they did not change. Left unpaired they read as gone and new under the same name and lose their own
    instruction check (a user's trial). Such operators are paired kind by kind, in execution order, when the
    baseline's unpaired ones of that kind are as many as the new ones now named after a node the baseline does
    not have (an inserted layer): an inserted block that brings its own operator of that kind makes the counts
    differ, and then nothing of that kind is paired (a wrong pair would judge one operator by another's
    instructions). A boundary transpose after a delegate split, named after a node both sides have, stays new."""
    nodes_then = set(ids_then.values())

    def anchor(identity: str) -> str | None:
        return identity.split(" after ", 1)[1] if " after " in identity else None

    by_kind_then: dict[str, list[str]] = {}
    by_kind_now: dict[str, list[str]] = {}
    for name in gone:
        if anchor(ids_then.get(name, "")) is not None:
            by_kind_then.setdefault(_op_kind(name), []).append(name)
    for name in new:
        now_anchor = anchor(ids_now.get(name, ""))
        if now_anchor is not None and now_anchor not in nodes_then:
            by_kind_now.setdefault(_op_kind(name), []).append(name)
    matched = [pair for kind, names in by_kind_then.items() if len(names) == len(by_kind_now.get(kind, []))
               for pair in zip(names, by_kind_now[kind])]
    if not matched:
        return pairs, gone, new
    paired_then, paired_now = {a for a, _ in matched}, {b for _, b in matched}
    return ([*pairs, *matched], [n for n in gone if n not in paired_then], [n for n in new if n not in paired_now])


LEGACY_PAIRING = ("operators paired by execution order: the baseline was recorded by an older pytest-sme2 without "
                  "operator identities, so after a delegate split or an inserted operator some pairs can be wrong; "
                  "record the baseline again with --sme2-update-baselines to pair them by graph node")


def _shapes(record: Mapping[str, Any]) -> dict[str, Any]:
    """Graph node name -> its output shape, of a record with graph nodes (empty for one without)."""
    return {node.name: node.detail for node in structure.nodes_of(record) or ()}


def _op_pairs(current: Mapping[str, Any], baseline: Mapping[str, Any], keep_now: Any = None,
              keep_then: Any = None) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """The counted operators of two records paired (_align_ops); ``keep_*``: only operators named there."""
    now, then = (record.get("instructions") or {} for record in (current, baseline))
    ops_now = {k: v for k, v in (now.get("ops") or {}).items() if keep_now is None or k in keep_now}
    ops_then = {k: v for k, v in (then.get("ops") or {}).items() if keep_then is None or k in keep_then}
    return _align_ops(ops_then, ops_now, then.get("op_identity"), now.get("op_identity"),
                      (_shapes(baseline), _shapes(current)))


def _op_instructions(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                     tol: Tolerances) -> list[Verdict]:
    """Each operator's instructions against the baseline's, operators paired by identity (_align_ops): which
    got more expensive, which lost their SME kernels, and which appeared or disappeared."""
    now, then = _counted(current) or {}, _counted(baseline) or {}
    ops_now, ops_then = now.get("ops") or {}, then.get("ops") or {}
    ids_now, ids_then = now.get("op_identity"), then.get("op_identity")
    pairs, gone, new = _op_pairs(current, baseline)
    out = []
    if ops_now and ops_then and not (ids_now and ids_then):
        out.append(Verdict("op_instructions", NOTE, label, LEGACY_PAIRING, {"pairing": "execution order"}))
    grown = []

    def node(op: str) -> str:
        """ " (b1.conv: aten.convolution.default)": the graph node, in the user's code, this operator implements."""
        name = (ids_then or {}).get(op)
        return f" ({name})" if name and " after " not in name else ""

    for before, after in pairs:
        base, cur = float(ops_then[before][1]), float(ops_now[after][1])
        if ops_then[before][2] > 0 and ops_now[after][2] == 0:
            renamed = f" (now {after})" if _op_kind(after) != _op_kind(before) else ""
            out.append(Verdict("sme_path", REGRESSION, label,
                               f"operator {before}{node(before)}{renamed} ran {ops_then[before][2]:,} SME "
                               f"instructions in the baseline and none now: its SME kernel path is lost",
                               {"op": before, "now": after, "baseline_sme": ops_then[before][2]}))
        if base > 0 and cur / base - 1 > tol.op_instructions and cur - base > MIN_OP_INSTRUCTIONS:
            grown.append((cur - base, before, after, cur, base))
    for _, before, after, cur, base in sorted(grown, reverse=True):
        renamed = f" (now {after})" if after != before else ""
        out.append(Verdict("op_instructions", REGRESSION, label,
                           f"operator {before}{node(before)}{renamed}: {cur:,.0f} instructions vs baseline "
                           f"{base:,.0f} ({cur / base - 1:+.2%}; tolerance +{tol.op_instructions:.1%} and "
                           f"{MIN_OP_INSTRUCTIONS} instructions)",
                           {"op": before, "now": after, "current": cur, "baseline": base,
                            "tolerance": tol.op_instructions, "node": (ids_then or {}).get(before)}))
    if gone or new:
        # an SME operator of a block removed whole went with its block: no kernel path was lost
        def block(op: str) -> tuple[str, str] | None:
            return structure.instance_of((ids_then or {}).get(op, op))

        kept = {block(before) for before, _ in pairs}
        lost_sme = [n for n in gone if ops_then[n][2] > 0 and (block(n) is None or block(n) in kept)]
        def named(names: list[str], ids: Mapping[str, str] | None) -> str:
            """Operators by the graph node they implement, where they have one (identity.py), and their kind: their
            keys' positions ("#5 @16") shift with anything inserted before them and say nothing to a reader."""
            shown = [n if not ids or n not in ids else ids[n] if " after " in ids[n] else f"{ids[n]} ({_op_kind(n)})"
                     for n in names[:6]]
            return ", ".join(shown) + (" ..." if len(names) > 6 else "")

        text = "; ".join(part for part in (f"gone: {named(gone, ids_then)}" if gone else "",
                                           f"new: {named(new, ids_now)}" if new else "") if part)
        why = f"operators that ran SME instructions are gone: {', '.join(lost_sme)}; " if lost_sme else ""
        out.append(Verdict("op_instructions", REGRESSION if lost_sme else NOTE, label,
                           f"{why}the program's operators changed ({text})",
                           {"gone": gone, "new": new, "lost_sme": lost_sme,
                            "gone_identity": [(ids_then or {}).get(n) for n in gone],
                            "new_identity": [(ids_now or {}).get(n) for n in new]}))
    if all("pairing" in v.evidence for v in out):  # nothing found (the legacy-pairing note aside)
        out.append(Verdict("op_instructions", OK, label, f"every operator within +{tol.op_instructions:.1%} "
                                                         f"instructions ({len(ops_now)} operators)"))
    return out


MODELLED_OPS_NAMED = 3  # operators whose modelled time grew most, named in a failing modelled verdict


MODELLED_NOT_JUDGED = "modelled device time not judged"  # the terminal counts such skipped verdicts, by why
NO_DEVICE_THIS_SESSION = "this session models no device"
_JUDGE_WITH = re.compile(NO_DEVICE_THIS_SESSION + r" \(.*; set --sme2-device (.+) to judge it\)")


def device_option(modelled: Mapping[str, Any]) -> str:
    """The --sme2-device value a record's modelled time was priced with: its ``option``, or its device's name in
    records written before options were kept."""
    return str(modelled.get("option") or modelled.get("device"))


def device_to_judge_with(line: str) -> str | None:
    """The --sme2-device value a verdict line skipped for :data:`NO_DEVICE_THIS_SESSION` advises (None: another
    line): the one reader of the text modelled_verdicts writes."""
    found = _JUDGE_WITH.search(line)
    return found.group(1) if found else None


def modelled_verdicts(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                      tol: Tolerances) -> list[Verdict]:
    """Modelled device time (``--sme2-device``) against the baseline's, where both sides were priced by the same
    device numbers: end to end beyond ``tol.modelled`` fails, naming the operators whose modelled time grew
    most with their ms before and after (paired like the counted operators, by graph node).

    Modelled time is a deterministic function of the counts, so there is no noise to allow for; it is judged
    only against a baseline priced by the same numbers (``pricing_digest``), and where it cannot be (no
    device this session, a baseline without modelled time, another device file, a refused profile) a skipped
    verdict says why and how to record it: the counted verdicts gate the same change exactly anyway."""
    now, then = current.get("modelled"), baseline.get("modelled")
    if not now and not then:
        return []

    def skipped(why: str) -> list[Verdict]:
        return [Verdict("modelled", SKIPPED, label, f"{MODELLED_NOT_JUDGED}: {why}")]

    def option(side: Mapping[str, Any]) -> str:
        return shlex.quote(device_option(side))

    record_again = f"record the baseline again with --sme2-update-baselines --sme2-device {option(now or then)}"
    if not now or not then:
        return skipped(f"{NO_DEVICE_THIS_SESSION} (the baseline was modelled on {then.get('device')}; set "
                       f"--sme2-device {option(then)} to judge it)" if not now else
                       f"the baseline has no modelled time on {now.get('device')}; {record_again}")
    if (now.get("device"), now.get("pricing_digest")) != (then.get("device"), then.get("pricing_digest")):
        same = now.get("device") == then.get("device")
        return skipped(f"the baseline was priced by {'another version of ' if same else ''}{then.get('device')}'s "
                       f"numbers{' or pricing method' if same else ''}, this run by {now.get('device')}'s; "
                       f"{record_again}")
    refused = now.get("refused") or then.get("refused")
    if refused:
        return skipped(str(refused))
    if not all(isinstance(side.get("e2e_ms"), (int, float)) and isinstance(side.get("ops"), Mapping)
               for side in (now, then)):
        return skipped(f"the {'baseline' if now.get('ops') is not None else 'run'}'s modelled time is incomplete; "
                       f"{record_again}")
    cur, base = float(now["e2e_ms"]), float(then["e2e_ms"])
    change = cur / base - 1 if base > 0 else (0.0 if cur == 0 else float("inf"))
    pairs, gone, new = _op_pairs(current, baseline, now["ops"], then["ops"])
    moved = [(now["ops"][after] - then["ops"][before], before, after, then["ops"][before], now["ops"][after])
             for before, after in pairs]
    moved += [(now["ops"][after], None, after, 0.0, now["ops"][after]) for after in new]
    moved += [(-then["ops"][before], before, None, then["ops"][before], 0.0) for before in gone]
    # named: the operators that grew most, where the growth shows at the four digits written (a model author's
    # trial: "0.0047 -> 0.0047 ms" was named as grown most)
    grown = sorted((m for m in moved if m[0] > 0 and time_text(m[3]) != time_text(m[4])), key=lambda m: m[0],
                   reverse=True)[:MODELLED_OPS_NAMED]
    device = now["device"]
    evidence = {"current": cur, "baseline": base, "change": change, "tolerance": tol.modelled, "device": device,
                "ops": [{"op": before or after, "now": after, "baseline_ms": b, "current_ms": c}
                        for _, before, after, b, c in grown]}
    numbers = (f"modelled on {device} ({now.get('validation', '')}; a model, not a measurement): "
               f"{time_text(base)} -> {time_text(cur)} end to end ({change:+.2%})")
    if change > tol.modelled:
        named = "; ".join(f"{_modelled_op(before, after)} {time_text(b)} -> {time_text(c)}"
                          for _, before, after, b, c in grown)
        return [Verdict("modelled", REGRESSION, label,
                        f"modelled device time regression: {numbers}; tolerance +{tol.modelled:.1%}"
                        + (f"; grew most: {named}" if named else ""), evidence)]
    if change < -tol.modelled:
        return [Verdict("modelled", IMPROVEMENT, label, f"modelled device time improvement: {numbers}", evidence)]
    return [Verdict("modelled", OK, label, f"modelled device time within tolerance: {numbers}", evidence)]


def _modelled_op(before: str | None, after: str | None) -> str:
    """An operator of a modelled verdict: the baseline's name, the current one where it changed or is new."""
    if before is None:
        return f"new operator {after}"
    if after is None:
        return f"operator {before} (gone)"
    return f"operator {before}" + (f" (now {after})" if after != before else "")


def _sme_kernels(label: str, now: Mapping[str, Any], then: Mapping[str, Any]) -> list[Verdict]:
    lost = sorted(set(then.get("sme_kernels") or ()) - set(now.get("sme_kernels") or ()))
    if lost:
        return [Verdict("sme_path", REGRESSION, label,
                        f"SME/SME2 kernel(s) executed in the baseline but not now: {', '.join(lost)}",
                        {"lost": lost})]
    return []


def memory_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    """The program's planned memory against the baseline's: exact, so any growth beyond ``tol.memory`` fails."""
    now = (current.get("memory") or {}).get("planned_bytes")
    then = (baseline.get("memory") or {}).get("planned_bytes")
    evidence = {"current": now, "baseline": then, "tolerance": tol.memory}
    if now is None or then is None:
        return Verdict("memory", OK, label, "planned memory: " + ("the baseline has none (recorded by an older "
                                                                  "pytest-sme2)" if then is None else "not known now"),
                       evidence)
    change = now / then - 1 if then > 0 else (0.0 if now == 0 else float("inf"))
    numbers = f"planned memory {now:,} bytes vs baseline {then:,} ({change:+.2%})"
    if change > tol.memory:
        return Verdict("memory", REGRESSION, label, f"{numbers}; tolerance +{tol.memory:.1%}", evidence)
    return Verdict("memory", OK if change >= 0 else IMPROVEMENT, label, numbers, evidence)


# Why a hardware load/init change measured without the reference program is a note, not a failure. Measured
# (docs/gate.md, "Load, init and peak memory"): beside two busy jobs, unchanged mobilenet_v3_small's one init per
# process came out +54% against the baseline, p=2e-5, in all four check processes alike; a busy machine slows
# weight packing more than an inference. Each load divided by the reference program's load right before it stays
# within a few percent; without that reference nothing cancels the machine's speed.
STARTUP_ADVISORY = ("not failed: without the reference program's loads (--sme2-latency-reference=off, or a runner "
                    "other than pytest-sme2's) a busy machine's slowdown of load and init is not cancelled")

# The method's start-up, judged apart from the inference: (check and tolerance name, ETDump event).
# Records hold ``<check>_ms_per_chunk`` (raw) and ``<check>_relative_per_chunk`` (relative to the reference load).
STARTUP = (("load", "Program::load_method"), ("init", "Method::init"))


def _per_gate_process(record: Mapping[str, Any], per_chunk: Sequence[float | None]) -> np.ndarray | None:
    """One value per process the gate compares (``process_sizes``: a baseline replica, or one check), the median
    of its runner processes' values (``chunk_sizes``: alternated chunks run in processes of their own). A runner
    process whose every warm load was disturbed has None (Profile._startup_per_chunk) and is left out; a process
    left with none is not compared."""
    chunks = record.get("chunk_sizes")
    if not chunks or len(chunks) != len(per_chunk):
        return None
    processes = record.get("process_sizes") or [sum(chunks)]
    owner = np.searchsorted(np.cumsum(processes), np.cumsum(chunks), side="left")
    values = np.array([np.nan if v is None else v for v in per_chunk], dtype=float)
    usable = ~np.isnan(values)
    return np.array([float(np.median(values[(owner == k) & usable])) for k in range(len(processes))
                     if ((owner == k) & usable).any()])


def _shift_verdict(check: str, label: str, what: str, unit: str, now: np.ndarray, then: np.ndarray, runs: tuple[int, int],
                   tolerance: float, tol: Tolerances, min_effect: float, evidence: dict[str, Any],
                   shown: tuple[np.ndarray, np.ndarray] | None = None, basis: str = "",
                   advisory: str | None = None) -> Verdict:
    """One quantity with a value per process on each side, judged as latency is: a change beyond the tolerance
    that the spread between processes cannot explain (stats.ProcessShift on logs, alpha) and above ``min_effect``.
    ``shown``: the raw values per process when ``now``/``then`` are relative (``basis`` says to what).
    ``advisory``: why such a change is a note here, never a failure (it is named with its numbers all the same)."""
    raw_now, raw_then = shown if shown is not None else (now, then)
    if np.any(now <= 0) or np.any(then <= 0):
        return Verdict(check, INCONCLUSIVE, label, f"{what} not judged: a process's value is not positive", evidence)
    test = stats.process_shift(then, now, runs, log=True)
    if test is None:
        return Verdict(check, INCONCLUSIVE, label,
                       f"{what} not judged: {then.size} baseline and {now.size} current process(es); with fewer than "
                       f"three in all, how far it moves between processes is unknown (record the baseline again with "
                       f"--sme2-update-baselines)", evidence)
    ratio = 1 + test.change
    low, high = (1 + bound for bound in test.interval())
    before, after = float(np.median(raw_then)), float(np.median(raw_now))
    evidence.update({"current": after, "baseline": before, "ratio": ratio, "ratio_low": low, "ratio_high": high,
                     "p_larger": test.p_up, "p_smaller": test.p_down, "tolerance": tolerance, "alpha": tol.alpha,
                     "current_processes": int(now.size), "baseline_processes": int(then.size),
                     "basis": basis or "raw"})
    numbers = (f"{what} {ratio - 1:+.1%} ({basis + '; ' if basis else ''}median {after:.4g} {unit} vs baseline "
               f"{before:.4g} {unit}; {_processes_text(test)}, 95% CI of the ratio [{low:.3f}, {high:.3f}])")
    big_enough = abs(ratio - 1) * before > min_effect
    if ratio > 1 + tolerance and big_enough and test.p_up < tol.alpha:
        headline = f"{what} beyond its tolerance ({advisory})" if advisory else f"{what} regression"
        return Verdict(check, NOTE if advisory else REGRESSION, label, f"{headline}: {numbers}; tolerance "
                       f"+{tolerance:.0%}, t-test between processes p={test.p_up:.2g} < alpha {tol.alpha:g}", evidence)
    if ratio < 1 / (1 + tolerance) and big_enough and test.p_down < tol.alpha:
        return Verdict(check, IMPROVEMENT, label, f"{what} improvement: {numbers}", evidence)
    why = "within tolerance" if abs(ratio - 1) <= tolerance else (
        f"below the minimum effect of {min_effect:g} {unit}" if not big_enough else
        f"not significant (p={min(test.p_up, test.p_down):.2g})")
    return Verdict(check, OK, label, f"{what} {why}: {numbers}; tolerance {tolerance:.0%}", evidence)


def startup_verdicts(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any],
                     tol: Tolerances) -> list[Verdict]:
    """Local and adb targets: Program::load_method and Method::init of each runner process (where XNNPACK packs
    weights; the host target's reused worker gives none, Profile._startup_samples), and the runner's peak
    resident memory per run, each against the baseline with the latency gate's statistics (a value per process;
    disturbed runs left out of the memory). The check names which one moved.

    Each runner process loads the method several times, each right after a load of the reference program
    (native_runner.STARTUP_REPEATS); a process's value is the median of its warm loads divided by those reference
    loads, so a busier or slower machine, which slows both loads alike, cancels out."""
    out = []
    for check, event in STARTUP:
        what = f"{check} ({event})"
        raw_key, relative_key = f"{check}_ms_per_chunk", f"{check}_relative_per_chunk"
        now, then = current.get(raw_key), baseline.get(raw_key)
        if then is None and now is None:  # the host target: nothing to re-record (a CI owner's trial)
            out.append(Verdict(check, SKIPPED, label, f"{what} not compared: not timed on this target (the host "
                                                       "target's Python worker is reused, so it has no fresh start-up "
                                                       "to time; the local and adb runners time it)"))
            continue
        if then is None or now is None:
            why = ("the baseline has none (recorded by an older pytest-sme2, or on the host target, whose reused "
                   "Python worker has no fresh start-up to time): record it again with --sme2-update-baselines on "
                   "the local or adb target") if then is None else (
                "none measured now: on the host target its Python worker is reused between runs and tests, so its "
                "load and init are not a fresh process's (the local and adb runners time them); on the local and "
                "adb targets a runner process's ETDump had no matching Program::load_method and Method::init "
                "events (is the runner pytest-sme2's, of this version? its ETDumps are in the test's folder)")
            out.append(Verdict(check, SKIPPED, label, f"{what} not compared: {why}"))
            continue
        raw = _per_gate_process(current, now), _per_gate_process(baseline, then)
        relative = current.get(relative_key), baseline.get(relative_key)
        values = tuple(None if r is None else _per_gate_process(record, r)
                       for r, record in zip(relative, (current, baseline)))
        if raw[0] is None or raw[1] is None or (relative[0] is not None and values[0] is None) or (
                relative[1] is not None and values[1] is None):
            out.append(Verdict(check, SKIPPED, label, f"{what} not compared: its runner processes do not match the "
                                                       f"record's runs (chunk_sizes)"))
            continue
        if (values[0] is None) != (values[1] is None):
            why = ("the baseline's is one load per process, not relative to the reference program's load (an older "
                   "pytest-sme2, or recorded with --sme2-latency-reference=off): record it again with "
                   "--sme2-update-baselines") if values[1] is None else (
                "this run has no reference-program loads to divide by (--sme2-latency-reference=off, or a runner "
                "other than pytest-sme2's) while the baseline has: turn the reference program back on "
                "(--sme2-latency-reference=on, pytest-sme2's runner), or record the baseline again as this runs")
            out.append(Verdict(check, SKIPPED, label, f"{what} not compared: {why}"))
            continue
        if values[0] is not None:
            basis, advisory = "relative to the reference program's load before each load", None
        else:
            basis, values, advisory = "raw ms: neither side has reference-program loads", raw, STARTUP_ADVISORY
        empty = [side for side, v in zip(("this run", "the baseline"), values) if v.size == 0]
        if empty:
            again = ("run again when the machine is quieter" if empty[0] == "this run" else
                     "record the baseline again on a quieter machine (--sme2-update-baselines)")
            out.append(Verdict(check, INCONCLUSIVE, label, f"{what} not judged: every warm load of every runner "
                               f"process of {empty[0]} was disturbed (slowed against the process's fastest load, or "
                               f"after a reference-program load slowed alone): other work on the machine came and "
                               f"went faster than a load; {again}", {"disturbed_processes": empty}))
            continue
        runs = tuple(sum(size for size, value in zip(record["chunk_sizes"], per_chunk) if value is not None)
                     for record, per_chunk in ((baseline, then), (current, now)))  # the processes kept
        out.append(_shift_verdict(check, label, what, "ms", values[0], values[1], runs, getattr(tol, check), tol,
                                  tol.min_effect_ms, {}, shown=raw, basis=basis, advisory=advisory))
    out.append(_peak_rss_verdict(label, current, baseline, tol))
    return _load_explained_by_init(out)


def _load_explained_by_init(out: list[Verdict]) -> list[Verdict]:
    """``Method::init`` runs inside ``Program::load_method`` (its ETDump event nests in the load's; the load outside
    it is a few microseconds, docs/gate.md), so a regressed init moves the load by as much: with both regressed the
    load is a note naming init, one cause failing once (a CI owner's trial: one added layer read as two start-up
    regressions). A load that regressed while init did not still fails."""
    by_check = {v.check: v for v in out}
    load, init = by_check.get("load"), by_check.get("init")
    if load is None or init is None or load.status != REGRESSION or init.status != REGRESSION:
        return out
    note = Verdict("load", NOTE, load.label, f"{load.message.replace(' regression: ', ': ', 1)} (it includes init "
                   "(Method::init), which regressed: one cause, judged there)", {**load.evidence, "explained_by": "init"})
    return [note if v is load else v for v in out]


def _peak_rss_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    what = "peak resident memory (the runner's, per run)"
    peaks = [(r.get("memory") or {}).get("peak_rss_kb") for r in (current, baseline)]
    if peaks[0] is None or peaks[1] is None:
        where = "this run" if peaks[0] is None else "the baseline"
        return Verdict("peak_rss", SKIPPED, label, f"{what} not compared: {where} has none (the host target's "
                       f"Python worker and emulated runs report none; the local and adb runners do)")
    clean = tuple(clean_runs(r) for r in (current, baseline))
    values = tuple(np.asarray(p, dtype=float) for p in peaks)
    if any(v.size != m.size for v, m in zip(values, clean)):
        return Verdict("peak_rss", SKIPPED, label, f"{what} not compared: one value per run is needed")
    medians = [_medians(record, series, mask) for record, series, mask in zip((current, baseline), values, clean)]
    return _shift_verdict("peak_rss", label, what, "KiB", medians[0][0], medians[1][0], (medians[1][1], medians[0][1]),
                          tol.peak_rss, tol, 0.0, {"current_disturbed": int((~clean[0]).sum()),
                                                   "baseline_disturbed": int((~clean[1]).sum())})


def _counted_startup(label: str, now: Mapping[str, Any], then: Mapping[str, Any], tol: Tolerances) -> list[Verdict]:
    """Emulated target: the counted instructions of load_method and init, exact, against the tolerance."""
    out = []
    for check, event in STARTUP:
        after, before = now.get(check), then.get(check)
        what = f"{check} ({event})"
        if after is None or before is None:
            out.append(Verdict(check, SKIPPED, label, f"{what} not compared: "
                               + ("the baseline has no counted start-up" if before is None else "none counted now")))
            continue
        change = after / before - 1 if before > 0 else (0.0 if after == 0 else float("inf"))
        evidence = {"current": after, "baseline": before, "tolerance": getattr(tol, check)}
        numbers = f"{what} {before:,} -> {after:,} instructions ({change:+.2%}; counted, exact)"
        if change > getattr(tol, check):
            out.append(Verdict(check, REGRESSION, label, f"{what} regression: {numbers}; tolerance "
                               f"+{getattr(tol, check):.0%}", evidence))
        else:
            out.append(Verdict(check, IMPROVEMENT if change < -getattr(tol, check) else OK, label, numbers, evidence))
    return _load_explained_by_init(out)


def judge(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tolerances: Tolerances | None = None,
          metric: str = "latency") -> list[Verdict]:
    """Every verdict for one profile record against its baseline record.

    Records of the emulated target are judged on their instruction counts (counted_verdicts), never on
    emulated time; other records on latency (or callgrind instructions) and per-run statistics.
    """
    tol = tolerances or Tolerances()
    if metric not in METRICS:
        raise UsageError(f"metric {metric!r} is unknown; use one of {', '.join(METRICS)}")
    verdicts = _provenance(label, current, baseline)
    change = change_verdict(label, current, baseline, tol)
    verdicts += [change] if change is not None else []
    verdicts.append(memory_verdict(label, current, baseline, tol))
    if current.get("emulated") or baseline.get("emulated"):
        verdicts += counted_verdicts(label, current, baseline, tol)
        verdicts.append(_delegated_ops(label, current, baseline))
        verdicts += _node_coverage(label, current, baseline)
        return verdicts
    verdicts.append(latency_verdict(label, current, baseline, tol) if metric == "latency"
                    else instruction_verdict(label, current, baseline, tol))
    verdicts += startup_verdicts(label, current, baseline, tol)
    verdicts += _coverage(label, current, baseline, tol)
    verdicts.append(_delegated_ops(label, current, baseline))
    verdicts.append(_sme_path(label, current, baseline, tol))
    verdicts += _shares(label, current, baseline, tol)
    verdicts += _dominant_kernels(label, current, baseline)
    return [_forced_baseline_note(v, baseline) for v in verdicts]


def quality_quantity(verdict: Verdict) -> str | None:
    """The name baseline_quality files a verdict's quantity under in ``quality.unfit`` ("latency", "share of
    CONV", "delegation coverage", "SME path share"); None for a verdict it does not judge."""
    if verdict.check == "share":
        return f"share of {verdict.evidence['category']}" if "category" in verdict.evidence else None
    return {"latency": "latency", "delegation_coverage": "delegation coverage",
            "sme_path": "SME path share"}.get(verdict.check)


def _forced_baseline_note(verdict: Verdict, baseline: Mapping[str, Any]) -> Verdict:
    """A regression of a time-based quantity against a baseline written with --sme2-accept-noisy-baselines
    says so, with what its quality check found: the user then knows the verdict stands on a baseline the gate
    called unfit, and that a level seen in one session is no promise for later ones (docs/gate.md, "Between
    sessions"). Every other verdict is returned as it is."""
    quality = baseline.get("quality") or {}
    quantity = quality_quantity(verdict)
    statistical = "p" in verdict.evidence or "p_slower" in verdict.evidence  # not an exact count (graph nodes)
    if verdict.status != REGRESSION or quantity is None or not quality.get("accepted_despite") or not statistical:
        return verdict
    unfit = quality.get("unfit")
    if unfit is None:  # written before the check kept its findings by quantity: say only that it was forced
        found = "problems (quality.accepted_despite in the file)"
    else:
        found = unfit.get(quantity) or unfit.get("record")
        if found is None:  # the check passed this quantity
            return verdict
        found += " (quality.accepted_despite in the file)"
    note = (f"; this baseline was written with --sme2-accept-noisy-baselines although its quality check "
            f"found: {found}: a level measured in one session moves "
            f"further in later ones on a busy or shared machine (docs/gate.md, 'Between sessions'); record it "
            f"again where the check passes, or judge this model by instructions (--sme2-metric=instructions, or "
            f"the emulated target)")
    return Verdict(verdict.check, verdict.status, verdict.label, verdict.message + note, verdict.evidence)


# An operator's dominant kernel counts as replaced when it took at least DOMINANT of the operator's samples
# in the baseline and now takes under GONE, each side with at least KERNEL_SAMPLES samples: two kernels
# sharing an operator (a main and a remainder tile) trade places by chance, a replaced one does not come back.
DOMINANT, GONE, KERNEL_SAMPLES = 0.6, 0.2, 20


def _dominant_kernels(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[Verdict]:
    """Operators whose dominant kernel (sampled, kernel_sampling.py) was replaced; nothing when either side
    was not sampled."""
    now, then = current.get("kernel_time"), baseline.get("kernel_time")
    if not now or not then:
        return []
    replaced = []
    for op, before in sorted(then.items()):
        after = now.get(op)
        if not before["kernels"] or after is None or min(before["samples"], after["samples"]) < KERNEL_SAMPLES:
            continue
        kernel, share = max(before["kernels"].items(), key=lambda item: item[1])
        if share >= DOMINANT and after["kernels"].get(kernel, 0.0) < GONE:
            new_kernel, new_share = max(after["kernels"].items(), key=lambda item: item[1], default=("none", 0.0))
            replaced.append(f"{op}: {kernel} ({share:.0%} of its samples) -> {new_kernel} ({new_share:.0%})")
    evidence = {"replaced": replaced}
    if replaced:
        return [Verdict("dominant_kernel", REGRESSION, label,
                        "operator(s) run another kernel than in the baseline: " + "; ".join(replaced), evidence)]
    return [Verdict("dominant_kernel", OK, label, "every sampled operator runs the baseline's dominant kernel",
                    evidence)]
