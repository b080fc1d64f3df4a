"""Modelled device time (``--sme2-device``, emulated target): end to end against the baseline's where both were
priced by the same device numbers, naming the operators that grew most. docs/gate.md, "Modelled device time";
the device model itself is docs/device_model.md.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import counts_of
from pytest_sme2.gate.checks.pairing import op_pairs
from pytest_sme2.gate.record import GateRecord, Modelled
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict
from pytest_sme2.profile.device_model import time_text

MODELLED_OPS_NAMED = 3  # operators whose modelled time grew most, named in a failing modelled verdict
MODELLED_NOT_JUDGED = "modelled device time not judged"
NO_DEVICE_THIS_SESSION = "this session models no device"
# A skipped modelled verdict's evidence: the --sme2-device value (shell-quoted) that would judge it when the
# baseline holds modelled time and this session models no device; the terminal's summary advises it.
JUDGE_WITH = "judge_with"


def device_option(modelled: Modelled) -> str:
    """The --sme2-device value a record's modelled time was priced with: its ``option``, or its device's name in
    records written before options were kept."""
    return str(modelled.option or modelled.device)


def modelled_verdicts(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[Verdict]:
    """Modelled device time (``--sme2-device``) against the baseline's, where both sides were priced by the same
    device numbers: end to end beyond ``tol.modelled`` fails, naming the operators whose modelled time grew
    most with their ms before and after (paired like the counted operators, by graph node).

    Modelled time is a deterministic function of the counts, so there is no noise to allow for; it is judged
    only against a baseline priced by the same numbers (``pricing_digest``), and where it cannot be (no
    device this session, a baseline without modelled time, another device file, a refused profile) a skipped
    verdict says why and how to record it: the counted verdicts gate the same change exactly anyway."""
    now, then = current.modelled, baseline.modelled
    if now is None and then is None:
        return []
    not_judged = _why_not_judged(now, then)
    if not_judged is not None or now is None or then is None:
        why, judge_with = not_judged or ("", None)
        return [
            Verdict(
                "modelled",
                Status.SKIPPED,
                label,
                f"{MODELLED_NOT_JUDGED}: {why}",
                Evidence({JUDGE_WITH: judge_with} if judge_with else {}),
            )
        ]
    cur, base = float(now.e2e_ms or 0.0), float(then.e2e_ms or 0.0)
    change = cur / base - 1 if base > 0 else (0.0 if cur == 0 else float("inf"))
    grown = _grown_most(current, baseline, now.ops or {}, then.ops or {})
    device = now.device
    evidence = Evidence(
        {
            "current": cur,
            "baseline": base,
            "change": change,
            "tolerance": tol.modelled,
            "device": device,
            "ops": [
                {"op": before or after, "now": after, "baseline_ms": b, "current_ms": c}
                for _, before, after, b, c in grown
            ],
        }
    )
    numbers = (
        f"modelled on {device} ({now.validation if now.validation is not None else ''}; a model, not a measurement): "
        f"{time_text(base)} -> {time_text(cur)} end to end ({change:+.2%})"
    )
    if change > tol.modelled:
        named = "; ".join(
            f"{_modelled_op(before, after)} {time_text(b)} -> {time_text(c)}" for _, before, after, b, c in grown
        )
        most = "".join(
            f", most {before or after} {time_text(b)} -> {time_text(c)}" for _, before, after, b, c in grown[:1]
        )
        return [
            Verdict(
                "modelled",
                Status.REGRESSION,
                label,
                f"modelled device time regression: {numbers}; tolerance +{tol.modelled:.1%}"
                + (f"; grew most: {named}" if named else ""),
                evidence.worded(f"modelled time on {device} {change:+.1%}{most}"),
            )
        ]
    if change < -tol.modelled:
        return [
            Verdict("modelled", Status.IMPROVEMENT, label, f"modelled device time improvement: {numbers}", evidence)
        ]
    return [Verdict("modelled", Status.OK, label, f"modelled device time within tolerance: {numbers}", evidence)]


def _why_not_judged(now: Modelled | None, then: Modelled | None) -> tuple[str, str | None] | None:
    """Why modelled time cannot be judged (no device this session, a baseline without modelled time, other
    pricing, a refused or incomplete side), with the --sme2-device value that would judge it; None if it can."""

    def option(side: Modelled) -> str:
        return shlex.quote(device_option(side))

    if now is None:
        if then is None:  # neither side was modelled: nothing to judge
            return None
        return (
            f"{NO_DEVICE_THIS_SESSION} (the baseline was modelled on {then.device}; set "
            f"--sme2-device {option(then)} to judge it)",
            option(then),
        )
    record_again = f"record the baseline again with --sme2-update-baselines --sme2-device {option(now)}"
    if then is None:
        return f"the baseline has no modelled time on {now.device}; {record_again}", None
    if (now.device, now.pricing_digest) != (then.device, then.pricing_digest):
        same = now.device == then.device
        return (
            f"the baseline was priced by {'another version of ' if same else ''}{then.device}'s "
            f"numbers{' or pricing method' if same else ''}, this run by {now.device}'s; "
            f"{record_again}",
            None,
        )
    refused = now.refused or then.refused
    if refused:
        return str(refused), None
    if not all(isinstance(side.e2e_ms, (int, float)) and isinstance(side.ops, Mapping) for side in (now, then)):
        return (
            f"the {'baseline' if now.ops is not None else 'run'}'s modelled time is incomplete; " f"{record_again}",
            None,
        )
    return None


def _grown_most(
    current: GateRecord, baseline: GateRecord, ops_now: Mapping[str, Any], ops_then: Mapping[str, Any]
) -> list[tuple[float, str | None, str | None, float, float]]:
    """The MODELLED_OPS_NAMED operators whose modelled time grew most, paired by graph node (new and gone ones
    too), as (growth, baseline name, current name, baseline ms, current ms)."""
    pairs, gone, new = op_pairs(current, baseline, ops_now, ops_then)
    moved: list[tuple[float, str | None, str | None, float, float]] = [
        (ops_now[after] - ops_then[before], before, after, ops_then[before], ops_now[after]) for before, after in pairs
    ]
    moved += [(ops_now[after], None, after, 0.0, ops_now[after]) for after in new]
    moved += [(-ops_then[before], before, None, ops_then[before], 0.0) for before in gone]
    # named: the operators that grew most, where the growth shows at the four digits written (a model author's
    # trial: "0.0047 -> 0.0047 ms" was named as grown most)
    return sorted(
        (m for m in moved if m[0] > 0 and time_text(m[3]) != time_text(m[4])), key=lambda m: m[0], reverse=True
    )[:MODELLED_OPS_NAMED]


def _modelled_op(before: str | None, after: str | None) -> str:
    """An operator of a modelled verdict: the baseline's name, the current one where it changed or is new."""
    if before is None:
        return f"new operator {after}"
    if after is None:
        return f"operator {before} (gone)"
    return f"operator {before}" + (f" (now {after})" if after != before else "")


def _counted(pair: Pair) -> list[Verdict]:
    return [] if counts_of(pair) is None else modelled_verdicts(pair.label, pair.current, pair.baseline, pair.tol)


CHECK = Check(("modelled",), "docs/gate.md#modelled-device-time", counted=_counted)
