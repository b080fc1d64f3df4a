"""Dominant kernels: an operator whose most-sampled kernel (evidence/kernel_sampling.py) was replaced by another.
Measured records with kernel samples only; docs/kernel_time.md.
"""

from __future__ import annotations

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Verdict

# An operator's dominant kernel counts as replaced when it took at least DOMINANT of the operator's samples
# in the baseline and now takes under GONE, each side with at least KERNEL_SAMPLES samples: two kernels
# sharing an operator (a main and a remainder tile) trade places by chance, a replaced one does not come back.
DOMINANT, GONE, KERNEL_SAMPLES = 0.6, 0.2, 20


def _dominant_kernels(label: str, current: GateRecord, baseline: GateRecord) -> list[Verdict]:
    """Operators whose dominant kernel (sampled, kernel_sampling.py) was replaced; nothing when either side
    was not sampled."""
    now, then = current.kernel_time, baseline.kernel_time
    if not now or not then:
        return []
    replaced = []
    for op, before in sorted(then.items()):
        after = now.get(op)
        if (
            not before.kernels
            or after is None
            or min(before.samples or 0, after.samples or 0) < KERNEL_SAMPLES
            or after.kernels is None
        ):
            continue
        kernel, share = max(before.kernels.items(), key=lambda item: item[1] or 0.0)
        share = share or 0.0
        if share >= DOMINANT and (after.kernels.get(kernel) or 0.0) < GONE:
            new_kernel, new_share = max(after.kernels.items(), key=lambda item: item[1] or 0.0, default=("none", 0.0))
            replaced.append(f"{op}: {kernel} ({share:.0%} of its samples) -> {new_kernel} ({new_share:.0%})")
    evidence = Evidence({"replaced": replaced})
    if replaced:
        return [
            Verdict(
                "dominant_kernel",
                Status.REGRESSION,
                label,
                "operator(s) run another kernel than in the baseline: " + "; ".join(replaced),
                evidence,
            )
        ]
    return [
        Verdict(
            "dominant_kernel", Status.OK, label, "every sampled operator runs the baseline's dominant kernel", evidence
        )
    ]


def _kernels(pair: Pair) -> list[Verdict]:
    return _dominant_kernels(pair.label, pair.current, pair.baseline)


CHECK = Check(("dominant_kernel",), "docs/kernel_time.md", measured=_kernels)
