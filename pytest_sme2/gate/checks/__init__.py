"""The gate's checks, one module each, registered here in the order their verdicts are listed.

A check is a ``base.Check``: the verdict names it gives, its docs, and a function per kind of record it judges
(``counted``: the emulated target's exact counts; ``measured``: time, between replicas). ``judge`` (gate/judge.py)
runs every registered check on a pair of records. Adding one is its module, its docs, its tests and one line
here (docs/design.md, "Adding a gate check").
"""

from __future__ import annotations

from pytest_sme2.gate.checks import (
    change,
    coverage,
    delegated_ops,
    dominant_kernel,
    instructions,
    latency,
    memory,
    modelled,
    operators,
    provenance,
    shares,
    sme_path,
    startup,
)
from pytest_sme2.gate.checks.base import Check, Pair

CHECKS: tuple[Check, ...] = (
    provenance.CHECK,
    change.CHECK,
    memory.CHECK,
    latency.CHECK,
    instructions.CHECK,
    startup.CHECK,
    modelled.CHECK,
    operators.CHECK,
    coverage.CHECK,
    sme_path.CHECK,
    shares.CHECK,
    delegated_ops.CHECK,
    dominant_kernel.CHECK,
)

# Every name Verdict.check takes: the one list (docs/gate.md names them for users).
CHECK_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for check in CHECKS for name in check.names))

__all__ = ["CHECKS", "CHECK_NAMES", "Check", "Pair"]
