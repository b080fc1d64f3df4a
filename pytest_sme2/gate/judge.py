"""Every verdict for one profile record against its baseline record: each registered check (gate/checks) in turn.

Records of the emulated target are judged on their instruction counts (each check's ``counted`` function), never
on emulated time; other records on latency (or callgrind instructions) and per-run statistics (``measured``).
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.checks import Pair
from pytest_sme2.gate.checks.registered import registered_checks
from pytest_sme2.gate.naming import comparable_baseline
from pytest_sme2.gate.quality import forced_baseline_note
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import METRICS, Tolerances, Verdict


def judge(
    label: str,
    current: GateRecord | Mapping[str, Any],
    baseline: GateRecord | Mapping[str, Any],
    tolerances: Tolerances | None = None,
    metric: str = "latency",
) -> list[Verdict]:
    """Every registered check's verdicts (pytest-sme2's own, then other distributions', checks/registered.py), in
    that order; a regression of a time-based quantity judged on a
    baseline written despite its quality check says so (quality.forced_baseline_note). A record given in its JSON
    form (a dict, as a baseline file holds it: tests, scripts) is read into its ``GateRecord`` first."""
    if metric not in METRICS:
        raise UsageError(f"metric {metric!r} is unknown; use one of {', '.join(METRICS)}")
    now, then = _typed(current), _typed(baseline)
    pair = Pair(label, now, comparable_baseline(now, then), tolerances or Tolerances(), metric)
    return [forced_baseline_note(v, then) for check in registered_checks() for v in check.judge(pair)]


def _typed(record: GateRecord | Mapping[str, Any]) -> GateRecord:
    return record if isinstance(record, GateRecord) else GateRecord.from_json(record)
