"""What one run of a program means: the Profile.

A Profile is built from an ExecutionTrace (see etdump.py) plus what export
recorded about delegation. It owns the performance semantics used by tests,
reports and (later) baselines:

- E2E latency per run is Method::execute only; load and init are separate.
- Category time per run is the sum of its operators; OTHER is E2E minus the
  named categories, so the shares of all categories sum to exactly one.
- Runs the machine disturbed (a stall in the run or in one of its operators:
  stats.disturbed) are counted and kept out of every statistic a verdict
  reads; relative latency also leaves out runs whose reference run was
  disturbed. On a busy machine one 4-8 ms stall lands in one operator of a
  1 ms model: a total over runs then moves a share by tens of points, a
  median over undisturbed runs by none.
- Shares, delegation coverage and SME path share are computed per run and
  summarised by their median over the undisturbed runs, so one stalled run
  cannot move them. Medians of shares need not sum to exactly one; per-run
  category times (``category_ms``, totals over runs) do.
- Delegation coverage by time is the share of E2E inside DELEGATE_CALL events;
  by nodes it comes from the export-time graph (getitem nodes excluded).
- SME path share: of the CONV+GEMM time, how much ran packed-format kernels,
  which XNNPACK only picks when it uses SME/SME2 (KleidiAI) kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from . import stats
from .categories import NAMED_CATEGORIES, Category, classify, strip_instance
from .etdump import ExecutionTrace, read_run


@dataclass(frozen=True)
class Speedup:
    """How many times faster one profile is than another, with a bootstrap CI."""

    value: float
    low: float
    high: float
    confidence: float
    this: str
    other: str
    this_median_ms: float
    other_median_ms: float
    this_runs: int  # undisturbed runs the interval is computed from
    other_runs: int
    this_disturbed: int = 0  # runs the machine disturbed, left out
    other_disturbed: int = 0

    def __repr__(self) -> str:
        def runs(count: int, disturbed: int) -> str:
            return f"{count} runs" + (f", {disturbed} disturbed left out" if disturbed else "")

        return (
            f"Speedup({self.value:.2f}x, {self.confidence:.0%} CI [{self.low:.2f}, {self.high:.2f}]: "
            f"{self.this} (median {self.this_median_ms:.3f} ms, {runs(self.this_runs, self.this_disturbed)}) over "
            f"{self.other} (median {self.other_median_ms:.3f} ms, {runs(self.other_runs, self.other_disturbed)}))"
        )

    __str__ = __repr__

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "this": self.this,
            "other": self.other,
        }


@dataclass
class Profile:
    """Latency, operator mix, delegation and SME-path evidence of one run."""

    trace: ExecutionTrace
    model: str = "?"
    recipe: str = "?"
    variant: str = "?"
    delegation: Mapping[str, Any] | None = None
    wall_ms: np.ndarray | None = None
    # The reference program's time right before each timed run (reference_program.py), or None.
    reference_ms: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_etdump(
        cls,
        etdump: str | Path,
        warmup_etdump: str | Path | None = None,
        **kwargs: Any,
    ) -> "Profile":
        """Build from the timed ETDump (and the warmup one holding load/init, if split)."""
        return cls(read_run(etdump, warmup_etdump), **kwargs)

    @classmethod
    def concat(cls, profiles: "Sequence[Profile]") -> "Profile":
        """One profile of a variant from chunks of its runs in separate processes (see compare_variants).

        The chunks must be the same program and variant; identity, delegation and
        metadata come from the first, artifacts of later chunks get a ``.N`` suffix.
        """
        if not profiles:
            raise ValueError("Profile.concat needs at least one profile")
        head = profiles[0]
        for other in profiles[1:]:
            if (other.model, other.recipe, other.variant) != (head.model, head.recipe, head.variant):
                raise ValueError(f"cannot merge {other.label} into {head.label}: different program or variant")
        walls = [p.wall_ms for p in profiles]
        references = [p.reference_ms for p in profiles]
        artifacts = dict(head.artifacts)
        for number, other in enumerate(profiles[1:], start=2):
            artifacts.update({f"{k}.{number}": v for k, v in other.artifacts.items() if v != artifacts.get(k)})
        return cls(
            ExecutionTrace.concat([p.trace for p in profiles]),
            model=head.model,
            recipe=head.recipe,
            variant=head.variant,
            delegation=head.delegation,
            wall_ms=np.concatenate(walls) if all(w is not None for w in walls) else None,
            reference_ms=np.concatenate(references) if all(r is not None for r in references) else None,
            metadata={**head.metadata, "chunks": len(profiles)},
            artifacts=artifacts,
        )

    def __post_init__(self) -> None:
        trace = self.trace
        classes = [classify(key.name) for key in trace.ops]
        self._ops = pd.DataFrame(
            {
                "event": [key.name for key in trace.ops],
                "op": [strip_instance(key.name) for key in trace.ops],
                "kind": [c.kind for c in classes],
                "category": [c.category.value for c in classes],
                "delegated": np.array([key.delegated for key in trace.ops], dtype=bool),
                "packed": np.array([c.packed for c in classes], dtype=bool),
                "known": np.array([c.known for c in classes], dtype=bool),
                "instruction_id": [key.instruction_id for key in trace.ops],
                "median_ms": np.median(trace.op_ms, axis=1) if trace.ops else [],
                "mean_ms": trace.op_ms.mean(axis=1) if trace.ops else [],
                "total_ms": trace.op_ms.sum(axis=1) if trace.ops else [],
            }
        )
        total_e2e = float(trace.execute_ms.sum())
        self._ops["share"] = self._ops["total_ms"] / total_e2e if total_e2e > 0 else 0.0
        self._ops["runs_ms"] = list(trace.op_ms)  # one array of per-run times per op (views, no copy)
        per_run = {}
        for category in NAMED_CATEGORIES:
            mask = np.array([c.category is category for c in classes], dtype=bool)
            per_run[category.value] = trace.op_ms[mask].sum(axis=0) if mask.any() else np.zeros(trace.runs)
        named = sum(per_run.values())
        per_run[Category.OTHER.value] = trace.execute_ms - named
        self._category_ms = pd.DataFrame(per_run)
        self._total_e2e = total_e2e
        self._classes = classes

    # --------------------------------------------------------------- latency
    @property
    def e2e_ms(self) -> np.ndarray:
        """Per-run Method::execute latency in ms (timed runs only, no warmup)."""
        return self.trace.execute_ms

    @property
    def runs(self) -> int:
        return self.trace.runs

    @property
    def relative_ms(self) -> np.ndarray | None:
        """Per-run latency divided by the reference program's time right before it, or None without one.

        Drift of the whole machine slows both alike, so this moves far less between
        processes than ``e2e_ms``; the baseline gate compares it (reference_program.py).
        """
        return stats.per_run_ratio(self.e2e_ms, self.reference_ms)

    @functools.cached_property
    def latency(self) -> stats.Summary:
        return stats.Summary.of(self.e2e_ms)

    @functools.cached_property
    def clean(self) -> np.ndarray:
        """Per run: True unless the machine disturbed the run (stats.disturbed). Shares, coverage, SME
        path and speedups read these runs. Emulated time says nothing about the machine: every run counts."""
        return stats.undisturbed_runs(self.e2e_ms, None, self.emulated, op_ms=self.trace.op_ms)

    @functools.cached_property
    def clean_relative(self) -> np.ndarray:
        """Runs undisturbed themselves *and* in the reference run right before them: what relative latency
        reads (a reference stalled by 4 ms makes its run look 2x faster)."""
        return stats.undisturbed_runs(self.e2e_ms, self.reference_ms, self.emulated, op_ms=self.trace.op_ms)

    @property
    def disturbed_run_indices(self) -> list[int]:
        """Which timed runs (0-based) the machine disturbed in their own or an operator's time."""
        return [int(i) for i in np.flatnonzero(~self.clean)]

    @property
    def disturbed_runs(self) -> int:
        """How many timed runs the machine disturbed (kept out of shares, coverage and verdicts)."""
        return int(self.runs - self.clean.sum())

    @property
    def disturbed_references(self) -> int:
        """How many runs were left out of relative latency because their reference run was disturbed."""
        return int(self.clean.sum() - self.clean_relative.sum())

    def _per_run(self, part: np.ndarray, whole: np.ndarray) -> np.ndarray:
        """part / whole per run; NaN where the whole is zero."""
        part, whole = np.asarray(part, dtype=float), np.asarray(whole, dtype=float)
        out = np.full(part.shape, np.nan)
        np.divide(part, whole, out=out, where=whole > 0)
        return out

    def _clean_median(self, per_run: np.ndarray) -> float | None:
        """Median over undisturbed runs with a value (all runs if none is undisturbed); None if no run has one."""
        values = per_run[self.clean & np.isfinite(per_run)]
        if values.size == 0:
            values = per_run[np.isfinite(per_run)]
        return float(np.median(values)) if values.size else None

    @property
    def median_ms(self) -> float:
        return float(np.median(self.e2e_ms))

    @property
    def load_ms(self) -> float | None:
        return self.trace.load_ms

    @property
    def init_ms(self) -> float | None:
        return self.trace.init_ms

    @property
    def label(self) -> str:
        return f"{self.model} {self.recipe} [{self.variant}]"

    @property
    def emulated(self) -> bool:
        """True when the numbers come from an emulator: kernels and outputs are real, time is not."""
        return bool(self.metadata.get("target", {}).get("emulated"))

    def speedup_over(self, other: "Profile") -> Speedup:
        """median(other) / median(self) with a CI from the undisturbed per-run samples of both.

        On emulated profiles the test is skipped: emulated timing is not hardware timing.
        """
        if self.emulated or other.emulated:
            import pytest

            from .targets.base import EMULATED_TIMING

            raise pytest.skip.Exception(
                f"{EMULATED_TIMING}: speedup of {self.label} over {other.label} not checked",
                _use_item_location=True,
            )
        mine, theirs = self.e2e_ms[self.clean], other.e2e_ms[other.clean]
        interval = stats.ratio_of_medians_ci(theirs, mine)
        return Speedup(
            value=interval.value,
            low=interval.low,
            high=interval.high,
            confidence=interval.confidence,
            this=self.label,
            other=other.label,
            this_median_ms=float(np.median(mine)),
            other_median_ms=float(np.median(theirs)),
            this_runs=int(mine.size),
            other_runs=int(theirs.size),
            this_disturbed=self.disturbed_runs,
            other_disturbed=other.disturbed_runs,
        )

    # ----------------------------------------------------------- categories
    @property
    def category_ms(self) -> pd.DataFrame:
        """Per-run time of each category (rows: runs); OTHER = E2E - named."""
        return self._category_ms.copy()

    def share_samples(self, category: str | Category) -> np.ndarray:
        """Per-run share of E2E time in a category (every run; see ``clean`` for which to trust)."""
        return self._per_run(self._category_ms[Category.parse(category).value].to_numpy(), self.e2e_ms)

    def share(self, category: str | Category) -> float:
        """Median over undisturbed runs of the per-run share of E2E time in a category."""
        return self._clean_median(self.share_samples(category)) or 0.0

    @property
    def shares(self) -> dict[str, float]:
        return {c.value: self.share(c) for c in Category}

    @property
    def total_shares(self) -> dict[str, float]:
        """Category time summed over all runs / E2E summed over all runs: sums to exactly one, but one
        stalled run moves it (reports of where the time of a whole session went; never a verdict)."""
        if self._total_e2e <= 0:
            return {c.value: 0.0 for c in Category}
        return {c.value: float(self._category_ms[c.value].sum() / self._total_e2e) for c in Category}

    # ------------------------------------------------------------ operators
    @property
    def ops(self) -> pd.DataFrame:
        """One row per operator instance: event, category, delegated, per-run times."""
        return self._ops.copy()

    def top_ops(self, n: int = 10) -> pd.DataFrame:
        return self._ops.sort_values("total_ms", ascending=False).head(n).reset_index(drop=True)

    @property
    def portable_ops(self) -> pd.DataFrame:
        """Operators that ran outside any delegate, heaviest first, grouped by op."""
        portable = self._ops[~self._ops["delegated"]]
        grouped = portable.groupby("op", sort=False).agg(
            count=("event", "size"), kind=("kind", "first"), category=("category", "first"),
            total_ms=("total_ms", "sum"), share=("share", "sum")
        )
        # Per run, the op's instances add up; the median is over those per-run sums.
        per_run = {op: self.trace.op_ms[rows.index].sum(axis=0) for op, rows in portable.groupby("op", sort=False)}
        grouped["median_ms_per_run"] = [float(np.median(per_run[op])) for op in grouped.index]
        return grouped.sort_values("total_ms", ascending=False).reset_index()

    @property
    def unclassified_ops(self) -> list[str]:
        """Operator names the category table does not know (counted as OTHER)."""
        return sorted({op for op, known in zip(self._ops["op"], self._ops["known"]) if not known})

    # ----------------------------------------------------------- delegation
    @property
    def coverage_samples(self) -> np.ndarray:
        """Per-run share of E2E time inside delegate calls."""
        return self._per_run(self.trace.delegate_ms, self.e2e_ms)

    @property
    def delegation_coverage(self) -> float:
        """Median over undisturbed runs of the share of E2E time spent inside delegate calls."""
        return self._clean_median(self.coverage_samples) or 0.0

    @property
    def node_delegation_coverage(self) -> float | None:
        """Delegated share of the export-time graph's operator nodes (None if unknown)."""
        if not self.delegation:
            return None
        delegated = self.delegation.get("delegated_nodes", 0)
        total = delegated + self.delegation.get("non_delegated_nodes", 0)
        return delegated / total if total else None

    # ------------------------------------------------------------- SME path
    def _conv_gemm(self) -> pd.DataFrame:
        mask = self._ops["category"].isin([Category.CONV.value, Category.GEMM.value])
        return self._ops[mask]

    @property
    def sme_path_samples(self) -> np.ndarray | None:
        """Per-run share of CONV+GEMM time in packed-format kernels (NaN for a run without CONV/GEMM time);
        None when the program has no CONV/GEMM operator."""
        heavy = self._conv_gemm()
        if heavy.empty:
            return None
        op_ms = self.trace.op_ms[heavy.index.to_numpy()]
        packed = op_ms[heavy["packed"].to_numpy()].sum(axis=0)
        return self._per_run(packed, op_ms.sum(axis=0))

    @property
    def sme_path_share(self) -> float | None:
        """Median over undisturbed runs of the share of CONV+GEMM time in packed-format (SME/SME2) kernels;
        None without CONV/GEMM time."""
        samples = self.sme_path_samples
        return None if samples is None else self._clean_median(samples)

    @property
    def sme_path_ops(self) -> int:
        """How many CONV/GEMM operator instances ran packed-format kernels."""
        return int(self._conv_gemm()["packed"].sum())

    @property
    def executed_sme_kernels(self) -> tuple[str, ...] | None:
        """SME/SME2 kernels a traced inference really executed (None: the target traces no kernels).

        Stronger than ``sme_path_share``, which reads operator names: some kernels
        (the int8 dynamic QP8 GEMM) keep their name with and without SME. The
        emulated target records it from a qemu trace (see kernel_trace.py).
        """
        trace = self.metadata.get("kernel_trace")
        return None if trace is None else tuple(trace["sme_kernels"])

    def inspector(self):  # noqa: ANN201 - executorch type, imported lazily
        """ExecuTorch's own Inspector on this profile's timed ETDump (and ETRecord, when known).

        For what the Profile does not cover: numerical debugging, stack traces,
        module hierarchy. Slower to build than the Profile (see docs/performance.md).
        """
        from executorch.devtools import Inspector

        etdump = self.artifacts.get("timed_etdump")
        if etdump is None:
            raise ValueError(f"{self!r} has no timed ETDump artifact to inspect")
        return Inspector(etdump_path=etdump, etrecord=self.artifacts.get("etrecord"))

    # --------------------------------------------------------------- output
    def summary(self, top: int = 10) -> dict[str, Any]:
        """A JSON-serialisable digest for reports and baselines."""
        top_ops = self.top_ops(top)
        portable = self.portable_ops
        return {
            "model": self.model,
            "recipe": self.recipe,
            "emulated": self.emulated,
            "variant": self.variant,
            "runs": self.runs,
            "latency": self.latency.as_dict(),
            "wall_latency": stats.Summary.of(self.wall_ms).as_dict() if self.wall_ms is not None and len(self.wall_ms) else None,
            "relative_latency": stats.Summary.of(self.relative_ms).as_dict(unit="") if self.relative_ms is not None else None,
            "load_ms": self.load_ms,
            "init_ms": self.init_ms,
            "disturbed_runs": self.disturbed_runs,
            "disturbed_references": self.disturbed_references,
            "shares": self.shares,
            "total_shares": self.total_shares,
            "delegation_coverage": self.delegation_coverage,
            "node_delegation_coverage": self.node_delegation_coverage,
            "sme_path_share": self.sme_path_share,
            "sme_path_ops": self.sme_path_ops,
            "top_ops": [
                {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items() if k != "runs_ms"}
                for row in top_ops.to_dict("records")
            ],
            "portable_ops": [
                {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in portable.to_dict("records")
            ],
            "unclassified_ops": self.unclassified_ops,
            "metadata": self.metadata,
            "artifacts": self.artifacts,
        }

    def __repr__(self) -> str:
        return f"Profile({self.label}: median {self.median_ms:.3f} ms over {self.runs} runs)"


def samples_of(profile_or_samples: "Profile | Sequence[float] | np.ndarray") -> np.ndarray:
    """Per-run latencies of a Profile or a plain sample list."""
    if isinstance(profile_or_samples, Profile):
        return profile_or_samples.e2e_ms
    return stats.as_samples(profile_or_samples)
