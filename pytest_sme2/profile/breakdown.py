"""Per-run category, delegation and SME-path arithmetic of one measure of a run's events (time or counted
instructions): one code path for both, so a share by instructions means exactly what a share by time means."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pytest_sme2.evidence.categories import NAMED_CATEGORIES, Category
from pytest_sme2.evidence.etdump import ExecutionTrace

if TYPE_CHECKING:
    from pytest_sme2.evidence.qemu_counts import InstructionTrace

# The measures a breakdown (and a Profile's shares) can be by: the ETDump's time, counted instructions, and
# multiply-accumulates (work, from the export's graph; the SME path share only).
TIME, INSTRUCTIONS, WORK = "time", "instructions", "work"
BASES = (TIME, INSTRUCTIONS)


def per_run(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole per run; NaN where the whole is zero."""
    part, whole = np.asarray(part, dtype=float), np.asarray(whole, dtype=float)
    out = np.full(part.shape, np.nan)
    np.divide(part, whole, out=out, where=whole > 0)
    return out


class Breakdown:
    """Per-run category, delegation and SME-path arithmetic of one measure of the same events:
    milliseconds (the ETDump's time) or instructions (counted under emulation). One code path for
    both, so a share by instructions means exactly what a share by time means."""

    def __init__(self, trace: ExecutionTrace, classes: list):
        self.trace = trace
        per_run = {}
        for category in NAMED_CATEGORIES:
            mask = np.array([c.category is category for c in classes], dtype=bool)
            per_run[category.value] = trace.op_values[mask].sum(axis=0) if mask.any() else np.zeros(trace.runs)
        per_run[Category.OTHER.value] = trace.execute_values - sum(per_run.values())
        self.category = pd.DataFrame(per_run)
        self.total = float(trace.execute_values.sum())

    def share_samples(self, category: str | Category) -> np.ndarray:
        return per_run(self.category[Category.parse(category).value].to_numpy(), self.trace.execute_values)

    def coverage_samples(self) -> np.ndarray:
        return per_run(self.trace.delegate_values, self.trace.execute_values)

    def delegate_outside_ops_samples(self, delegated: np.ndarray) -> np.ndarray:
        """Per run: share of E2E inside delegate calls but in none of the delegate's operators (XNNPACK
        setting up inputs and outputs, its reshape), part of OTHER."""
        inside_ops = self.trace.op_values[delegated].sum(axis=0) if delegated.any() else np.zeros(self.trace.runs)
        return per_run(np.maximum(self.trace.delegate_values - inside_ops, 0.0), self.trace.execute_values)

    def sme_path_samples(self, heavy: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Per run: of the CONV+GEMM rows ``heavy`` (operator indices), the share in ``packed`` ones."""
        op_values = self.trace.op_values[heavy]
        return per_run(op_values[packed].sum(axis=0), op_values.sum(axis=0))

    def total_shares(self) -> dict[str, float]:
        if self.total <= 0:
            return {c.value: 0.0 for c in Category}
        return {c.value: float(self.category[c.value].sum() / self.total) for c in Category}


def with_kernel_evidence(classes: list, counted: "InstructionTrace | None", trace: ExecutionTrace) -> list:
    """Each operator's class, on the SME path also where its counted instructions hold SME multiply-accumulates
    (outer products, multiply-accumulates into ZA). An operator's name shows a packed format only for kernels that
    exist only for SME; XNNPACK names a dynamically quantized GEMM ("QP8, F32, QC8W") alike whether a KleidiAI SME2
    kernel or a NEON one ran it, so where the run was counted the instructions decide."""
    if counted is None or counted.classes is None or not classes or counted.instructions.ops != trace.ops:
        return classes
    from pytest_sme2.evidence.instruction_classes import SME_MULTIPLY_ACCUMULATES

    rows = [counted.classes[name].op_values for name in SME_MULTIPLY_ACCUMULATES if name in counted.classes]
    if not rows:
        return classes
    ran = np.median(np.sum(rows, axis=0), axis=1) > 0
    return [c if c.packed or not r else replace(c, packed=True) for c, r in zip(classes, ran)]
