"""What one run of a program means: the Profile.

A Profile is built from an ExecutionTrace (see etdump.py) plus what export
recorded about delegation. It owns the performance semantics used by tests,
reports and (later) baselines:

- E2E latency per run is Method::execute only; load and init are separate.
- Category time per run is the sum of its operators; OTHER is E2E minus the
  named categories, so the shares of all categories sum to exactly one.
- Shares are ratios of totals over all runs (sum of category time / sum of
  E2E), which weights runs by their length and also sums to one.
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
    this_runs: int
    other_runs: int

    def __repr__(self) -> str:
        return (
            f"Speedup({self.value:.2f}x, {self.confidence:.0%} CI [{self.low:.2f}, {self.high:.2f}]: "
            f"{self.this} (median {self.this_median_ms:.3f} ms, {self.this_runs} runs) over "
            f"{self.other} (median {self.other_median_ms:.3f} ms, {self.other_runs} runs))"
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
        """median(other) / median(self) with a CI from all per-run samples of both.

        On emulated profiles the test is skipped: emulated timing is not hardware timing.
        """
        if self.emulated or other.emulated:
            import pytest

            from .targets.base import EMULATED_TIMING

            raise pytest.skip.Exception(
                f"{EMULATED_TIMING}: speedup of {self.label} over {other.label} not checked",
                _use_item_location=True,
            )
        interval = stats.ratio_of_medians_ci(other.e2e_ms, self.e2e_ms)
        return Speedup(
            value=interval.value,
            low=interval.low,
            high=interval.high,
            confidence=interval.confidence,
            this=self.label,
            other=other.label,
            this_median_ms=self.median_ms,
            other_median_ms=other.median_ms,
            this_runs=self.runs,
            other_runs=other.runs,
        )

    # ----------------------------------------------------------- categories
    @property
    def category_ms(self) -> pd.DataFrame:
        """Per-run time of each category (rows: runs); OTHER = E2E - named."""
        return self._category_ms.copy()

    def share(self, category: str | Category) -> float:
        """Share of total E2E time spent in a category (all categories sum to 1)."""
        name = Category.parse(category).value
        if self._total_e2e <= 0:
            return 0.0
        return float(self._category_ms[name].sum() / self._total_e2e)

    @property
    def shares(self) -> dict[str, float]:
        return {c.value: self.share(c) for c in Category}

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
    def delegation_coverage(self) -> float:
        """Share of E2E time spent inside delegate calls."""
        if self._total_e2e <= 0:
            return 0.0
        return float(self.trace.delegate_ms.sum() / self._total_e2e)

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
    def sme_path_share(self) -> float | None:
        """Share of CONV+GEMM time in packed-format (SME/SME2) kernels; None without CONV/GEMM."""
        heavy = self._conv_gemm()
        total = float(heavy["total_ms"].sum())
        if heavy.empty or total <= 0:
            return None
        return float(heavy.loc[heavy["packed"], "total_ms"].sum() / total)

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
            "shares": self.shares,
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
