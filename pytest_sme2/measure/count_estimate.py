"""What a counted run is expected to cost before it starts: guest instructions and emulator seconds, and whether
it can finish inside its timeout.

Why: a counted run of a real model takes minutes, and a 208 GFLOP model's run once went 16 minutes with nothing
said before the timeout killed it (issue 63). Two sources, best first:

- the last counted run of the same model, recipe and variant in this cache (count_records.py): its
  instructions scaled by the program's multiply-accumulates now against then and by the inferences asked, its
  seconds where it ran on this machine. A changed model is estimated by its work's ratio, so the range is kept
  at 2/3 to 3/2 of the estimate.
- modelled from the program's work: its MACs (work.py) times guest instructions per MAC measured on the
  bundled models (:data:`PER_MAC`), plus its bytes times what load and the first inference's weight packing
  cost per byte (:data:`PER_PROGRAM_BYTE`). Instructions per MAC span 400x with SME2 on (a GEMM-bound MLP runs
  143 MACs an instruction, EfficientSAM at 128x128 one), so this range is wide and says so.

Seconds are instructions over the emulation rate of this machine's earlier counted runs, or over the range
measured on a 2-core Xeon when none ran here yet. Both are the emulator's cost, not the program's time on any
CPU, and a modelled count is a model: :meth:`CountEstimate.line` says which it is.

A run is refused only when its work alone cannot be done inside its timeout: its MACs at the most one
instruction can do (an SME outer product or SVE FMA at the largest vector length, :data:`MOST_MACS`), at the
fastest rate measured anywhere. That bound holds whatever the model, so a refusal never stops a run that would
have finished; the estimate's own range (from records or bundled models) only warns.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from pytest_sme2.export.work import ProgramWork
from pytest_sme2.measure.count_records import CountRecord

# Guest instructions per MAC of one inference, (fewest, typical, most) per dtype and SME2 setting: each bundled
# model's counted instructions per inference over its program's MACs (benchmarks/count_coefficients.py prints
# them from baselines/ and the export cache; 2026-12-02, qemu 10.2.2 with pytest-sme2's counting plugin, SVL
# 512). Typical: their geometric mean. "any": a program whose dtype is not known (an external .pte).
PER_MAC: dict[tuple[str, bool], tuple[float, float, float]] = {
    ("fp32", True): (0.007, 0.15, 1.07),  # mlp 0.007 ... efficient_sam (128x128) 1.07
    ("fp32", False): (0.34, 0.56, 1.39),  # mlp 0.34 ... efficient_sam 1.39
    ("fp16", True): (0.11, 0.18, 0.31),  # toy_cnn, mobilenet_v3_small
    ("fp16", False): (0.25, 0.28, 0.31),
    ("int8", True): (0.0028, 0.04, 0.19),  # mlp int8-static 0.0028 ... mobilenet 0.19
    ("int8", False): (0.063, 0.13, 0.29),
}
# The most MACs one guest instruction can do, per dtype and SME2 setting, at SVL 2048 (the largest; the vector
# length is a target setting): SME2 on, an outer product (fp32 FMOPA (SVL/32)^2, fp16 widening twice that,
# int8 SMOPA 4-way four times); SME2 off, SVE at the same length (fp32 FMLA SVL/32 lanes, fp16 twice, int8
# SMMLA 8 times). The refusal's bound: no program does its MACs in fewer instructions.
MOST_MACS: dict[tuple[str, bool], float] = {
    ("fp32", True): 64 * 64,
    ("fp16", True): 2 * 64 * 64,
    ("int8", True): 4 * 64 * 64,
    ("fp32", False): 64,
    ("fp16", False): 128,
    ("int8", False): 512,
}
# Instructions per byte of the program for its load and its first inference's weight packing, once a run:
# Qwen3-0.6B's shape at 2 layers 0.1 (the whole counted run of a 1.37 GB program: 144 M), mobilenet_v3_small fp32
# 0.4 (load), wav2letter 10 (load and first-inference packing, 137 MB).
PER_PROGRAM_BYTE = (0.02, 1.0, 12.0)
# Instructions of the runner's own start-up before it loads the program (the runtime's set-up, reading the
# inputs): a bundled tiny model's whole counted run is 2 M instructions
STARTUP = (0.5e6, 1.5e6, 4e6)
# Guest instructions a second of counted runs when none ran on this machine yet: 71 M (EfficientSAM 1024x1024
# SME2 off) to 249 M (wav2letter SME2 off) on a 2-core Xeon (docs/performance.md), widened both ways.
RATE_ELSEWHERE = (50e6, 120e6, 300e6)
RATE_ELSEWHERE_TEXT = "no counted run measured here yet; 71-249 M a second on a 2-core Xeon (docs/performance.md)"
_RECORD_RANGE = (2 / 3, 3 / 2)
# A rate is taken from runs of at least this many instructions: a smaller one is mostly qemu's start-up
# (mobilenet_v3_small's 35 M ran at 26 M a second, EfficientSAM's 40 G at 139 M).
_RATE_FROM = 500_000_000


@dataclass(frozen=True)
class CountEstimate:
    """Expected guest instructions of one counted run (the whole process), low/typical/high, the emulator
    seconds they take at this machine's rate, and where both come from."""

    instructions: tuple[float, float, float]
    seconds: tuple[float, float, float]
    basis: str
    rate_basis: str
    # the fewest instructions its MACs can take (MOST_MACS) and their seconds at the fastest rate measured anywhere
    floor_instructions: float = 0.0
    floor_seconds: float = 0.0

    def line(self) -> str:
        """The progress line said before the run starts."""
        low, typical, high = self.instructions
        slow, stypical, shigh = self.seconds
        return (
            f"expect about {_count(typical)} guest instructions ({_count(low)}-{_count(high)}; {self.basis}), "
            f"about {_duration(stypical)} of emulation ({_duration(slow)}-{_duration(shigh)}; {self.rate_basis}); "
            "emulated seconds are the emulator's cost, not the program's time"
        )

    def refusal(self, timeout_s: float, timeout_source: str) -> str | None:
        """Why the run cannot finish inside ``timeout_s``, with the numbers and the fix; None when it may."""
        if self.floor_seconds <= timeout_s:
            return None
        return (
            f"this counted run cannot finish inside its timeout of {_duration(timeout_s)} ({timeout_source}): its "
            f"MACs alone take at least {_count(self.floor_instructions)} guest instructions (at the most MACs one "
            f"instruction can do), {_duration(self.floor_seconds)} at the fastest rate measured anywhere "
            f"({RATE_ELSEWHERE[2] / 1e6:.0f} M a second); {_count(self.instructions[1])} and about "
            f"{_duration(self.seconds[1])} are expected ({self.basis}). Raise the timeout "
            f"(@pytest.mark.perf(timeout={_suggested(self.seconds[2])}) or "
            f"--sme2-timeout={_suggested(self.seconds[2])}), or count less: fewer warmup and timed runs "
            "(@pytest.mark.perf(warmup=0, runs=1)) or a smaller input"
        )

    def warning(self, timeout_s: float) -> str | None:
        """A sentence when the typical estimate does not fit the timeout (the run still starts: it is a model)."""
        if self.seconds[1] <= timeout_s:
            return None
        return (
            f"this counted run may not finish inside its timeout of {_duration(timeout_s)}: about "
            f"{_duration(self.seconds[1])} is expected (up to {_duration(self.seconds[2])}); raise it with "
            f"@pytest.mark.perf(timeout={_suggested(self.seconds[2])}) if it is killed"
        )


def _count(value: float) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min"


def _suggested(seconds: float) -> int:
    return int(math.ceil(seconds * 1.5 / 60) * 60)


def known_macs(work: ProgramWork) -> float:
    """The program's multiply-accumulates of one inference, over the operators whose work is known."""
    every = [w for nodes in work.delegate_nodes.values() for _, w in nodes] + list(work.portable.values())
    return float(sum(w.macs for w in every if not math.isnan(w.macs)))


def dtype_of(recipe: str) -> str:
    """The PER_MAC dtype of a recipe label ("fp32-xnnpack", "int8-static-xnnpack"), "any" when none."""
    first = recipe.split("-")[0]
    return first if any(first == d for d, _ in PER_MAC) else "any"


def _most_macs(dtype: str, sme2: bool) -> float:
    if dtype != "any":
        return MOST_MACS[(dtype, sme2)]
    return max(v for (_, on), v in MOST_MACS.items() if on == sme2)


def _per_mac(dtype: str, sme2: bool) -> tuple[float, float, float]:
    if dtype != "any":
        return PER_MAC[(dtype, sme2)]
    rows = [v for (_, on), v in PER_MAC.items() if on == sme2]
    return min(r[0] for r in rows), statistics.geometric_mean(r[1] for r in rows), max(r[2] for r in rows)


def _rates(records: Sequence[CountRecord], sme2: bool, machine: str) -> tuple[tuple[float, float, float], str]:
    """(slowest, typical, fastest) guest instructions a second: this machine's counted runs with this SME2
    setting, else all of this machine's, else the figures measured elsewhere."""
    here = [r for r in records if r.machine == machine and r.seconds > 0 and r.instructions >= _RATE_FROM]
    same = [r for r in here if r.sme2 == sme2] or here
    if not same:
        return RATE_ELSEWHERE, RATE_ELSEWHERE_TEXT
    rates = sorted(r.instructions / r.seconds for r in same)
    return (min(rates), statistics.median(rates), max(rates)), (
        f"the rate of {len(rates)} earlier counted run{'s' if len(rates) > 1 else ''} on this machine"
    )


@dataclass(frozen=True)
class CountHistory:
    """What the cache remembers of earlier counted runs (count_records.py), as an estimate reads it.

    ``same_model``: the last counted run of this model, recipe and variant, or None; ``records``: every
    counted run recorded, whose rates on ``machine`` (this one, ``this_machine()``) give the seconds. They
    travel together because they are one reading of the cache, taken for one machine: the records are only
    rates where they ran on ``machine``."""

    same_model: CountRecord | None
    records: Sequence[CountRecord]
    machine: str


def estimate(
    work: ProgramWork,
    program_bytes: int,
    recipe: str,
    sme2: bool,
    inferences: int,
    history: CountHistory,
) -> CountEstimate:
    """The estimate of one counted run of ``inferences`` inferences (warmup and timed) of this program: from
    ``history``'s last count of the same model where there is one, else modelled from its work."""
    macs = known_macs(work)
    same_model = history.same_model
    rates, rate_basis = _rates(history.records, sme2, history.machine)
    if same_model is not None and same_model.instructions > 0:
        scale = macs / same_model.macs if macs > 0 and same_model.macs > 0 else 1.0
        typical = same_model.instructions * scale * (inferences + 1) / (same_model.inferences + 1)
        low, high = typical * _RECORD_RANGE[0], typical * _RECORD_RANGE[1]
        basis = f"the last count of this model here, {_count(same_model.instructions)} on {same_model.recorded}"
        if scale != 1.0:
            basis += f", scaled by its MACs now against then ({scale:.2f}x)"
    else:
        per_mac = _per_mac(dtype_of(recipe), sme2)
        low, typical, high = (
            start + program_bytes * per_byte + inferences * macs * coefficient
            for start, per_byte, coefficient in zip(STARTUP, PER_PROGRAM_BYTE, per_mac)
        )
        basis = (
            f"modelled from its work, {macs / 1e9:,.2f} GMAC an inference at {per_mac[0]:g}-{per_mac[2]:g} "
            f"instructions a MAC as the bundled models count with SME2 {'on' if sme2 else 'off'}"
        )
    seconds = (low / rates[2], typical / rates[1], high / rates[0])
    floor = inferences * macs / _most_macs(dtype_of(recipe), sme2)
    return CountEstimate((low, typical, high), seconds, basis, rate_basis, floor, floor / RATE_ELSEWHERE[2])
