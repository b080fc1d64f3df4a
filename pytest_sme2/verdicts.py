"""Compare a profile's record with its baseline: Verdict objects with their evidence.

Two kinds of checks, because they fail for different reasons:

- Latency is noisy (raw medians moved by a factor of two between processes
  on this shared machine), so the gate compares relative latency: each run
  divided by the run of pytest-sme2's fixed reference program right before it
  (reference_program.py), which cancels drift of the whole machine. A
  regression needs a change both larger than the tolerance and statistically
  significant over all per-run samples (one-sided Mann-Whitney U at a strict
  alpha). Improvements are reported the
  same way. Emulated timing is not hardware timing and is never compared.
  ``metric="instructions"`` replaces latency by instructions per inference
  counted under callgrind, which repeat to about 1e-6, so a plain relative
  tolerance is enough.
- Structure needs no statistics: delegation coverage dropped, an operator
  fell out of the delegate, the SME path share dropped, a category share moved
  more than its tolerance.

Records are the dicts of :func:`pytest_sme2.baselines.record_of`, so the same
code judges a live Profile and synthetic numbers in unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from . import stats
from .errors import UsageError

REGRESSION = "regression"
IMPROVEMENT = "improvement"
OK = "ok"
SKIPPED = "skipped"
NOTE = "note"
MISSING = "missing"
FAILING = (REGRESSION, MISSING)
METRICS = ("latency", "instructions")


@dataclass(frozen=True)
class Tolerances:
    """How much change is allowed before a verdict fails.

    ``latency`` and ``instructions`` are relative (0.10 = 10% slower);
    ``shares``, ``coverage`` and ``sme_path`` are absolute share points
    (0.05 = five percentage points); ``alpha`` is the significance level
    of the latency test.
    """

    latency: float = 0.10
    shares: float = 0.05
    coverage: float = 0.02
    sme_path: float = 0.05
    alpha: float = 0.001
    instructions: float = 0.005

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise UsageError(f"baseline tolerance {f.name}={value!r} is invalid: use a number >= 0")
        if not 0 < self.alpha < 1:
            raise UsageError(f"baseline tolerance alpha={self.alpha!r} is invalid: use a p-value between 0 and 1")

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


def _pct(value: float) -> str:
    return f"{value:.1%}"


def latency_verdict(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    """Regression only if the median moved more than the tolerance and Mann-Whitney U says it is not noise.

    What is compared is the relative latency (each run divided by the reference program's run right
    before it) when both sides have it, because drift of the whole machine cancels there; raw
    milliseconds otherwise, with a note saying so and how to get the relative gate.
    """
    if current.get("emulated") or baseline.get("emulated"):
        return Verdict("latency", SKIPPED, label, "emulated timing is not hardware timing: latency not compared")
    relative = tuple(stats.per_run_ratio(r["samples_ms"], r.get("reference_ms")) for r in (current, baseline))
    judged_relative = relative[0] is not None and relative[1] is not None
    if judged_relative:
        test = stats.shift_test(relative[1], relative[0])
        basis, how = "relative latency", "each run / the reference program's run right before it; "
        raw_note = ""
    else:
        test = stats.shift_test(baseline["samples_ms"], current["samples_ms"])
        which = " and ".join(side for side, r in (("this run", relative[0]), ("the baseline", relative[1])) if r is None)
        basis, how = "raw latency", ""
        raw_note = (f"; judged on raw milliseconds because {which} has no reference-program times, so drift of "
                    f"the machine is not cancelled (record the baseline again with --sme2-update-baselines and "
                    f"keep --sme2-latency-reference on)")
    ratio = test.ratio
    evidence = {
        "basis": "relative" if judged_relative else "raw",
        "current_median_ms": current["latency"]["median_ms"],
        "baseline_median_ms": baseline["latency"]["median_ms"],
        "ratio": ratio.value, "ratio_low": ratio.low, "ratio_high": ratio.high,
        "p_slower": test.p_slower, "p_faster": test.p_faster,
        "tolerance": tol.latency, "alpha": tol.alpha,
        "current_runs": test.n_current, "baseline_runs": test.n_baseline,
    }
    numbers = (
        f"{basis} {ratio.value - 1:+.1%} ({how}{ratio.confidence:.0%} CI of the ratio [{ratio.low:.3f}, {ratio.high:.3f}], "
        f"{test.n_current} vs {test.n_baseline} runs; raw median {evidence['current_median_ms']:.4g} ms vs baseline "
        f"{evidence['baseline_median_ms']:.4g} ms){raw_note}"
    )
    if ratio.value > 1 + tol.latency and test.p_slower < tol.alpha:
        return Verdict("latency", REGRESSION, label,
                       f"latency regression: {numbers}; tolerance +{tol.latency:.0%}, "
                       f"Mann-Whitney U p={test.p_slower:.2g} < alpha {tol.alpha:g}", evidence)
    if ratio.value < 1 / (1 + tol.latency) and test.p_faster < tol.alpha:
        return Verdict("latency", IMPROVEMENT, label,
                       f"latency improvement: {numbers}; Mann-Whitney U p={test.p_faster:.2g} < alpha {tol.alpha:g}",
                       evidence)
    p = test.p_slower if ratio.value >= 1 else test.p_faster
    why = "within tolerance" if abs(ratio.value - 1) <= tol.latency else f"not significant (p={p:.2g})"
    floor = stats.mann_whitney_floor(test.n_current, test.n_baseline)
    if floor >= tol.alpha:
        why += f"; with {test.n_current} vs {test.n_baseline} runs p cannot go below {floor:.2g}, so no " \
               f"latency verdict is possible at alpha {tol.alpha:g}: use more runs"
    return Verdict("latency", OK, label, f"latency {why}: {numbers}; tolerance {tol.latency:.0%}", evidence)


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


def _coverage(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> list[Verdict]:
    out = []
    now, then = float(current["delegation_coverage"]), float(baseline["delegation_coverage"])
    evidence = {"current": now, "baseline": then, "tolerance": tol.coverage}
    if then - now > tol.coverage:
        out.append(Verdict("delegation_coverage", REGRESSION, label,
                           f"delegation coverage dropped from {_pct(then)} to {_pct(now)} of E2E time "
                           f"(tolerance {tol.coverage * 100:g} points)", evidence))
    else:
        out.append(Verdict("delegation_coverage", OK, label, f"delegation coverage {_pct(now)} (baseline {_pct(then)})",
                           evidence))
    nodes_now, nodes_then = current.get("node_delegation_coverage"), baseline.get("node_delegation_coverage")
    if nodes_now is not None and nodes_then is not None and nodes_now < nodes_then - 1e-9:
        out.append(Verdict("delegation_coverage", REGRESSION, label,
                           f"delegated share of graph nodes dropped from {_pct(nodes_then)} to {_pct(nodes_now)}",
                           {"current": nodes_now, "baseline": nodes_then}))
    return out


def _delegated_ops(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> Verdict:
    fell_out: list[str] = []
    ops_now = (current.get("delegation") or {}).get("ops") or {}
    ops_then = (baseline.get("delegation") or {}).get("ops") or {}
    for op, (_, outside_now) in sorted(ops_now.items()):
        outside_then = ops_then.get(op, [0, 0])[1]
        if outside_now > outside_then:
            fell_out.append(f"{op} ({outside_now - outside_then} more node(s) outside the delegate)")
    new_portable = sorted(set(current.get("portable_ops") or []) - set(baseline.get("portable_ops") or []))
    fell_out += [f"{op} (now runs as a portable kernel)" for op in new_portable]
    evidence = {"fell_out": fell_out}
    if fell_out:
        return Verdict("delegated_ops", REGRESSION, label,
                       "operator(s) fell out of the delegate: " + "; ".join(fell_out), evidence)
    return Verdict("delegated_ops", OK, label, "no operator left the delegate", evidence)


def _sme_path(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> Verdict:
    now, then = current.get("sme_path_share"), baseline.get("sme_path_share")
    evidence = {"current": now, "baseline": then, "tolerance": tol.sme_path}
    if then is not None and (now is None or then - now > tol.sme_path):
        shown = "no CONV/GEMM time" if now is None else _pct(now)
        return Verdict("sme_path", REGRESSION, label,
                       f"SME path share of CONV+GEMM time dropped from {_pct(then)} to {shown} "
                       f"(tolerance {tol.sme_path * 100:g} points)", evidence)
    return Verdict("sme_path", OK, label, f"SME path share {now if now is None else _pct(now)}", evidence)


def _shares(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances) -> list[Verdict]:
    out = []
    now, then = current.get("shares") or {}, baseline.get("shares") or {}
    for category in sorted(set(now) | set(then)):
        a, b = float(now.get(category, 0.0)), float(then.get(category, 0.0))
        if abs(a - b) > tol.shares:
            out.append(Verdict("share", REGRESSION, label,
                               f"share of {category} moved from {_pct(b)} to {_pct(a)} of E2E time "
                               f"({(a - b) * 100:+.1f} points, tolerance +-{tol.shares * 100:g} points)",
                               {"category": category, "current": a, "baseline": b, "tolerance": tol.shares}))
    if not out:
        out.append(Verdict("share", OK, label, f"category shares within +-{tol.shares * 100:g} points", {}))
    return out


def _provenance(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[Verdict]:
    """Version and model changes: flagged (not failed), since they explain a change rather than cause a failure."""
    now, then = current.get("provenance") or {}, baseline.get("provenance") or {}
    notes = []
    for key in ("executorch", "torch"):
        if then.get(key) and now.get(key) and then[key] != now[key]:
            notes.append(f"{key} {then[key]} when the baseline was recorded, {now[key]} now")
    if then.get("model_source_hash") and now.get("model_source_hash") and then["model_source_hash"] != now["model_source_hash"]:
        notes.append("the model's source changed since the baseline was recorded")
    if then.get("recipe") and now.get("recipe") and then["recipe"] != now["recipe"]:
        def text(recipe: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(recipe.items()))

        notes.append(f"recipe {text(then['recipe'])} in the baseline, {text(now['recipe'])} now")
    return [Verdict("provenance", NOTE, label, "baseline from another setup: " + "; ".join(notes),
                    {"current": now, "baseline": then})] if notes else []


def judge(label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tolerances: Tolerances | None = None,
          metric: str = "latency") -> list[Verdict]:
    """Every verdict for one profile record against its baseline record."""
    tol = tolerances or Tolerances()
    if metric not in METRICS:
        raise UsageError(f"metric {metric!r} is unknown; use one of {', '.join(METRICS)}")
    verdicts = _provenance(label, current, baseline)
    verdicts.append(latency_verdict(label, current, baseline, tol) if metric == "latency"
                    else instruction_verdict(label, current, baseline, tol))
    verdicts += _coverage(label, current, baseline, tol)
    verdicts.append(_delegated_ops(label, current, baseline))
    verdicts.append(_sme_path(label, current, baseline, tol))
    verdicts += _shares(label, current, baseline, tol)
    return verdicts
