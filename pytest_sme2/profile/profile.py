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
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_sme2.evidence.categories import Category, classify, strip_instance
from pytest_sme2.evidence.etdump import ExecutionTrace, read_run
from pytest_sme2.evidence.identity import anchors_of
from pytest_sme2.evidence.kernel_sampling import KernelTime
from pytest_sme2.evidence.qemu_counts import InstructionTrace
from pytest_sme2.export.work import ProgramWork
from pytest_sme2.profile import stats
from pytest_sme2.profile.breakdown import BASES, INSTRUCTIONS, TIME, WORK, Breakdown, with_kernel_evidence
from pytest_sme2.profile.speedup import Speedup, emulated_timing, speedup_of
from pytest_sme2.system.deprecated import renamed_attribute

if TYPE_CHECKING:
    from pytest_sme2.profile.device_model import DeviceModel, ModelledTime, PricingInputs


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
    # The reference program's method load right before each load of the model's, all runner processes in order
    # (trace.startup_parts holds the model's), or None.
    reference_load_ms: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    # The same events counted in instructions (emulated target; qemu_counts.py), or None.
    instructions: "InstructionTrace | None" = None
    # Arithmetic work and bytes of the program's operators (work.py), or None.
    work: "ProgramWork | None" = None
    # Which kernels took each operator's time, from a sampled process (kernel_sampling.py); None: not sampled.
    kernel_time: "KernelTime | None" = None
    # Per run: taken while the device throttled (device_state.py), so left out like a stall; None: never.
    throttled_runs: np.ndarray | None = None

    # ------------------------------------------------------------------ build
    @classmethod
    def from_etdump(
        cls,
        etdump: str | Path,
        warmup_etdump: str | Path | None = None,
        **kwargs: Any,
    ) -> "Profile":
        """Build from the timed ETDump (and the warmup one holding load/init, if split). ``throttled``: the
        device throttled during this round, so every run of it is left out."""
        throttled = bool(kwargs.pop("throttled", False))
        trace = read_run(etdump, warmup_etdump)
        return cls(trace, **kwargs, throttled_runs=np.full(trace.runs, True) if throttled else None)

    @classmethod
    def concat(cls, profiles: "Sequence[Profile]", replicas: bool = False) -> "Profile":
        """One profile of a variant from chunks of its runs (see compare_variants and Runner.profile).

        The chunks must be the same program and variant; identity, delegation and
        metadata come from the first, artifacts of later chunks get a ``.N`` suffix.
        ``replicas``: the profiles are independent replicas of the whole measurement, each begun in a
        fresh process (a baseline update), and keep their own replica sizes; otherwise they are chunks
        of one measurement (its rounds and extra rounds), which the gate treats as one replica.
        """
        if not profiles:
            raise ValueError("Profile.concat needs at least one profile")
        head = profiles[0]
        for other in profiles[1:]:
            if (other.model, other.recipe, other.variant) != (head.model, head.recipe, head.variant):
                raise ValueError(f"cannot merge {other.label} into {head.label}: different program or variant")
        peaks = [p.peak_rss_kb for p in profiles if p.peak_rss_kb is not None]
        traces = [p.instructions for p in profiles if p.instructions is not None]
        memory = dict(head.metadata.get("memory") or {})
        if len(peaks) == len(profiles):  # every runner process's peak per run, in run order
            memory["peak_rss_kb"] = [int(kb) for peak in peaks for kb in peak]
        else:  # some chunk has none: the first chunk's peaks would pass for every run's
            memory.pop("peak_rss_kb", None)
        artifacts = dict(head.artifacts)
        for number, other in enumerate(profiles[1:], start=2):
            artifacts.update({f"{k}.{number}": v for k, v in other.artifacts.items() if v != artifacts.get(k)})
        return cls(
            ExecutionTrace.concat([p.trace for p in profiles]),
            model=head.model,
            recipe=head.recipe,
            variant=head.variant,
            delegation=head.delegation,
            wall_ms=_joined([p.wall_ms for p in profiles]),
            reference_ms=_joined([p.reference_ms for p in profiles]),
            reference_load_ms=_joined([p.reference_load_ms for p in profiles]),
            metadata={
                **head.metadata,
                "chunks": sum(int(p.metadata.get("chunks", 1)) for p in profiles),
                **({"memory": memory} if memory or "memory" in head.metadata else {}),
                "chunk_sizes": [size for p in profiles for size in p.chunk_sizes],
                "replica_sizes": [size for p in profiles for size in p.replica_sizes]
                if replicas
                else [sum(p.runs for p in profiles)],
            },
            artifacts=artifacts,
            instructions=InstructionTrace.concat(traces) if len(traces) == len(profiles) else None,
            work=head.work,
            kernel_time=next((p.kernel_time for p in profiles if p.kernel_time is not None), None),
            throttled_runs=None
            if all(p.throttled_runs is None for p in profiles)
            else np.concatenate(
                [p.throttled_runs if p.throttled_runs is not None else np.zeros(p.runs, dtype=bool) for p in profiles]
            ),
        )

    def __post_init__(self) -> None:
        trace = self.trace
        classes = with_kernel_evidence([classify(key.name) for key in trace.ops], self.instructions, trace)
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
                "median_ms": np.median(trace.op_values, axis=1) if trace.ops else [],
                "mean_ms": trace.op_values.mean(axis=1) if trace.ops else [],
                "total_ms": trace.op_values.sum(axis=1) if trace.ops else [],
            }
        )
        total_e2e = float(trace.execute_values.sum())
        self._ops["share"] = self._ops["total_ms"] / total_e2e if total_e2e > 0 else 0.0
        self._ops["runs_ms"] = list(trace.op_values)  # one array of per-run times per op (views, no copy)
        self._breakdowns = {TIME: Breakdown(trace, classes)}
        if self.work is not None:
            per_op = self.work.for_ops(trace.ops)
            for column in ("macs", "flops", "bytes_read", "bytes_written"):
                self._ops[column] = [getattr(w, column) for w in per_op]
            self._ops["work_unknown"] = [w.why_unknown for w in per_op]
            if not self.emulated:  # achieved throughput from the median time (emulated time is no time)
                seconds = self._ops["median_ms"] / 1e3
                self._ops["gflops"] = np.where(seconds > 0, self._ops["flops"] / 1e9 / seconds, np.nan)
                self._ops["gbytes_per_s"] = np.where(
                    seconds > 0, (self._ops["bytes_read"] + self._ops["bytes_written"]) / 1e9 / seconds, np.nan
                )
        counted = self.instructions
        if counted is not None:
            if counted.instructions.ops != trace.ops:
                raise ValueError(
                    f"instruction counts of {self.label} ({counted.source}) are for other events than " f"its ETDump"
                )
            self._breakdowns[INSTRUCTIONS] = Breakdown(counted.instructions, classes)
            self._ops["instructions"] = np.median(counted.instructions.op_values, axis=1) if trace.ops else []
            whole = float(np.median(counted.instructions.execute_values))
            self._ops["instruction_share"] = self._ops["instructions"] / whole if whole > 0 else 0.0
            self._ops["sme_instructions"] = np.median(counted.sme.op_values, axis=1) if trace.ops else []
            self._ops["kernels"] = counted.functions if trace.ops else []
        self._category_ms = self._breakdowns[TIME].category
        self._total_e2e = total_e2e
        self._classes = classes

    # --------------------------------------------------------------- latency
    @property
    def e2e_ms(self) -> np.ndarray:
        """Per-run Method::execute latency in ms (timed runs only, no warmup)."""
        return self.trace.execute_values

    @property
    def runs(self) -> int:
        return self.trace.runs

    @property
    def replica_sizes(self) -> list[int]:
        """How many of the runs each replica made, in order: the unit the gate compares between sessions,
        since the level of a quantity moves between processes (stats.ReplicaShift)."""
        sizes = self.metadata.get("replica_sizes")
        return [int(n) for n in sizes] if sizes and sum(sizes) == self.runs else [self.runs]

    process_sizes = renamed_attribute("Profile.process_sizes", "replica_sizes")

    @property
    def chunk_sizes(self) -> list[int]:
        """Runs of each runner process (chunk: one run() of the target) in order, however they were merged; the
        unit a between-variant interval resamples (stats.ratio_of_medians_ci)."""
        sizes = self.metadata.get("chunk_sizes")
        return [int(n) for n in sizes] if sizes and sum(sizes) == self.runs else [self.runs]

    @property
    def run_groups(self) -> np.ndarray:
        """Per run, the index of the runner process it came from (see chunk_sizes)."""
        return np.repeat(np.arange(len(self.chunk_sizes)), self.chunk_sizes)

    @property
    def relative_ms(self) -> np.ndarray | None:
        """Per-run latency divided by the reference program's time right before it, or None without one.

        Drift of the whole machine slows both alike, so this moves far less between
        processes than ``e2e_ms``; the baseline gate compares it (reference_program.py).
        """
        return stats.per_run_ratio(self.e2e_ms, self.reference_ms)

    @functools.cached_property
    def latency(self) -> stats.SampleStats:
        """E2E statistics over the runs. On an emulated profile a timing skip, as :meth:`speedup_over` is:
        emulated time is not time, so no test can read or assert it as latency."""
        if self.emulated:
            raise emulated_timing(f"latency of {self.label} not read")
        return stats.SampleStats.of(self.e2e_ms)

    @functools.cached_property
    def clean(self) -> np.ndarray:
        """Per run: True unless the machine disturbed the run (stats.disturbed). Shares, coverage, SME
        path and speedups read these runs. Emulated time says nothing about the machine: every run counts.
        Runs taken while the device throttled are disturbed too (device_state.py)."""
        return self._unthrottled(stats.undisturbed_runs(self.e2e_ms, None, self.emulated, op_ms=self.trace.op_values))

    def _unthrottled(self, mask: np.ndarray) -> np.ndarray:
        if self.throttled_runs is not None and len(self.throttled_runs) == mask.size:
            return mask & ~self.throttled_runs
        return mask

    @functools.cached_property
    def clean_relative(self) -> np.ndarray:
        """Runs undisturbed themselves *and* in the reference run right before them: what relative latency
        reads (a reference stalled by 4 ms makes its run look 2x faster)."""
        return self._unthrottled(
            stats.undisturbed_runs(self.e2e_ms, self.reference_ms, self.emulated, op_ms=self.trace.op_values)
        )

    @property
    def throttled(self) -> int:
        """How many timed runs were taken while the device throttled (counted in disturbed_runs too)."""
        return 0 if self.throttled_runs is None else int(self.throttled_runs.sum())

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

    @property
    def basis(self) -> str:
        """What shares, delegation coverage and SME path share measure unless told otherwise: ``time``
        (the ETDump's), or ``instructions`` on the emulated target, whose time is the emulator's but whose
        instruction counts are exact and repeat run to run (qemu_counts.py)."""
        return INSTRUCTIONS if self.emulated and INSTRUCTIONS in self._breakdowns else TIME

    def _breakdown(self, by: str | None) -> Breakdown:
        basis = by or self.basis
        if basis not in BASES:
            raise ValueError(f"by={basis!r}: use one of {', '.join(BASES)}")
        if basis not in self._breakdowns:
            raise ValueError(
                f"{self.label} has no {basis} counts: instructions are counted on the emulated target "
                f"(--sme2-target=emulated, counting on)"
            )
        return self._breakdowns[basis]

    def _clean_median(self, per_run: np.ndarray) -> float | None:
        """Median over undisturbed runs with a value (all runs if none is undisturbed); None if no run has one."""
        values = per_run[self.clean & np.isfinite(per_run)]
        if values.size == 0:
            values = per_run[np.isfinite(per_run)]
        return float(np.median(values)) if values.size else None

    @property
    def median_ms(self) -> float:
        """Median E2E ms; on an emulated profile a timing skip, like :attr:`latency`."""
        if self.emulated:
            raise emulated_timing(f"median latency of {self.label} not read")
        return float(np.median(self.e2e_ms))

    @property
    def load_ms(self) -> float | None:
        return self.trace.load_value

    @property
    def init_ms(self) -> float | None:
        return self.trace.init_value

    def _startup_samples(self) -> tuple[tuple[np.ndarray, np.ndarray], ...] | None:
        """Each runner process's loads and inits of the method, in ms; None on the emulated target (its load and
        init are counted: ``instructions.load``/``init``), on the host target (its Python worker serves several
        chunks, warmed by earlier tests: not a fresh process's start-up) or where a process's files had none."""
        parts = self.trace.startup_parts
        if self.emulated or self.trace.unit != "ms" or not parts or len(parts) != len(self.chunk_sizes):
            return None
        if self.metadata.get("target", {}).get("name") == "host":
            return None
        return parts

    def _startup_per_chunk(self, which: str, relative: bool = False) -> list[float | None] | None:
        """``load`` or ``init`` of each runner process: the median of its undisturbed loads after the first (the
        first is cold: the method's first page faults and allocations), or its one load. Disturbed: stalled
        against the process's fastest, or after a reference load slowed alone (stats.undisturbed_runs, as for
        runs). A process whose every warm load is disturbed gives None: it says nothing about the program (stop
        51: beside another session's export and emulation one process's loads ran 2.2-8.6 ms and its reference
        loads 1.0-7.8 ms, in no common rhythm; counting them anyway failed unchanged mobilenet init +74% and
        +110%). ``relative``: each load divided by the reference program's load right before it (None without
        those). Load and init are read from the same loads: those undisturbed in the load and in the init inside
        it (the init as an operator of the load), so a process's load median is never below its init median (CI,
        stop 73: each median from its own kept loads read load 0.03 ms under init)."""
        parts = self._startup_samples()
        if parts is None:
            return None
        references = self.reference_load_ms
        if references is not None and references.size != sum(load.size for load, _ in parts):
            references = None  # not one reference load per load: nothing to pair
        if relative and (references is None or np.any(references <= 0)):
            return None
        bounds = np.cumsum([0, *(load.size for load, _ in parts)])
        out = []
        for (load, init), a, b in zip(parts, bounds, bounds[1:]):
            reference = None if references is None else references[a:b]
            if load.size > 1:  # the warm loads
                load, init, reference = load[1:], init[1:], None if reference is None else reference[1:]
            kept = stats.undisturbed_runs(load, reference, op_ms=init[np.newaxis, :])
            value = load if which == "load" else init
            out.append(float(np.median((value / reference if relative else value)[kept])) if kept.any() else None)
        return out

    @property
    def load_ms_per_chunk(self) -> list[float | None] | None:
        """Program::load_method of each runner process, ms (the median of its warm loads)."""
        return self._startup_per_chunk("load")

    @property
    def init_ms_per_chunk(self) -> list[float | None] | None:
        """Method::init of each runner process, ms: XNNPACK creates its runtime and packs weights here."""
        return self._startup_per_chunk("init")

    @property
    def load_relative_per_chunk(self) -> list[float | None] | None:
        """Program::load_method of each runner process relative to the reference program's load: what the gate
        judges (a busy machine slows weight packing more than an inference, and both loads alike)."""
        return self._startup_per_chunk("load", relative=True)

    @property
    def init_relative_per_chunk(self) -> list[float | None] | None:
        """Method::init of each runner process relative to the reference program's load (see above)."""
        return self._startup_per_chunk("init", relative=True)

    @property
    def label(self) -> str:
        return f"{self.model} {self.recipe} [{self.variant}]"

    @property
    def emulated(self) -> bool:
        """True when the numbers come from an emulator: kernels and outputs are real, time is not."""
        return bool(self.metadata.get("target", {}).get("emulated"))

    def speedup_over(self, other: "Profile") -> Speedup:
        """median(other) / median(self) with a CI from the undisturbed per-run samples of both (speedup.py).

        On emulated profiles an EmulatedTimingError (the plugin skips the rest of the test): emulated timing is
        not hardware timing. The profiles the test built before this line are still judged against their
        baselines (their counts are exact).
        """
        return speedup_of(self, other)

    # ----------------------------------------------------------- categories
    @property
    def category_ms(self) -> pd.DataFrame:
        """Per-run time of each category (rows: runs); OTHER = E2E - named."""
        return self._category_ms.copy()

    def share_samples(self, category: str | Category, by: str | None = None) -> np.ndarray:
        """Per-run share of E2E in a category, by ``basis`` unless ``by`` says (every run; see ``clean``)."""
        return self._breakdown(by).share_samples(category)

    def share(self, category: str | Category, by: str | None = None) -> float:
        """Median over undisturbed runs of the per-run share of E2E in a category (by ``basis``: time, or
        instructions on the emulated target)."""
        return self._clean_median(self.share_samples(category, by)) or 0.0

    @property
    def shares(self) -> dict[str, float]:
        return {c.value: self.share(c) for c in Category}

    def shares_by(self, by: str) -> dict[str, float]:
        return {c.value: self.share(c, by) for c in Category}

    def delegate_outside_ops_share(self, by: str | None = None) -> float:
        """The part of OTHER that is delegate time in no delegate operator (median over undisturbed runs of
        each run's share of E2E): on mobilenet fp32 on the host about 16% of E2E, hidden in OTHER otherwise."""
        delegated = self._ops["delegated"].to_numpy(dtype=bool)
        return self._clean_median(self._breakdown(by).delegate_outside_ops_samples(delegated)) or 0.0

    def category_values(self, by: str | None = None) -> pd.DataFrame:
        """Per-run amount of each category (rows: runs) in ms or instructions (default: the basis)."""
        return self._breakdown(by).category.copy()

    def op_values(self, by: str | None = None) -> np.ndarray:
        """Per-run amount of each operator (rows: ``ops``, columns: runs) in ms or instructions."""
        return self._breakdown(by).trace.op_values

    @property
    def total_shares(self) -> dict[str, float]:
        """Category time summed over all runs / E2E summed over all runs: sums to exactly one, but one
        stalled run moves it (reports of where the time of a whole session went; never a verdict)."""
        return self._breakdowns[TIME].total_shares()

    # ------------------------------------------------------------ operators
    @property
    def ops(self) -> pd.DataFrame:
        """One row per operator instance: event, category, delegated, per-run times."""
        return self._ops.copy()

    def top_ops(self, n: int = 10, by: str | None = None) -> pd.DataFrame:
        """The ``n`` heaviest operators by time, or by instructions (default: the profile's basis)."""
        key = "instructions" if (by or self.basis) == INSTRUCTIONS else "total_ms"
        return self._ops.sort_values(key, ascending=False).head(n).reset_index(drop=True)

    @property
    def portable_ops(self) -> pd.DataFrame:
        """Operators that ran outside any delegate, heaviest first, grouped by op."""
        portable = self._ops[~self._ops["delegated"]]
        counted = "instruction_share" in portable
        extra = (
            {"instructions": ("instructions", "sum"), "instruction_share": ("instruction_share", "sum")}
            if counted
            else {}
        )
        grouped = portable.groupby("op", sort=False).agg(
            count=("event", "size"),
            kind=("kind", "first"),
            category=("category", "first"),
            total_ms=("total_ms", "sum"),
            share=("share", "sum"),
            **extra,
        )
        # Per run, the op's instances add up; the median is over those per-run sums.
        per_run = {op: self.trace.op_values[rows.index].sum(axis=0) for op, rows in portable.groupby("op", sort=False)}
        grouped["median_ms_per_run"] = [float(np.median(per_run[op])) for op in grouped.index]
        heaviest = "instructions" if self.basis == INSTRUCTIONS else "total_ms"
        return grouped.sort_values(heaviest, ascending=False).reset_index()

    @property
    def unclassified_ops(self) -> list[str]:
        """Operator names the category table does not know (counted as OTHER)."""
        return sorted({op for op, known in zip(self._ops["op"], self._ops["known"]) if not known})

    # ----------------------------------------------------------- delegation
    @property
    def coverage_samples(self) -> np.ndarray:
        """Per-run share of E2E inside delegate calls (by ``basis``)."""
        return self._breakdown(None).coverage_samples()

    def coverage(self, by: str | None = None) -> float:
        """Median over undisturbed runs of the share of E2E inside delegate calls, by time or instructions."""
        return self._clean_median(self._breakdown(by).coverage_samples()) or 0.0

    @property
    def delegation_coverage(self) -> float:
        """Median over undisturbed runs of the share of E2E spent inside delegate calls (by ``basis``)."""
        return self.coverage()

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

    def _sme_path_samples(self, by: str | None) -> np.ndarray | None:
        heavy = self._conv_gemm()
        if heavy.empty:
            return None
        if (by or self.sme_path_basis) == WORK:
            macs = heavy["macs"].to_numpy(dtype=float) if "macs" in heavy else np.full(len(heavy), np.nan)
            if np.isnan(macs).any():
                return (
                    None
                    if by == WORK
                    else self._breakdown(None).sme_path_samples(heavy.index.to_numpy(), heavy["packed"].to_numpy())
                )
            total = macs.sum()
            share = macs[heavy["packed"].to_numpy()].sum() / total if total > 0 else np.nan
            return np.full(self.runs, share)  # the same in every run: work is a property of the program
        return self._breakdown(by).sme_path_samples(heavy.index.to_numpy(), heavy["packed"].to_numpy())

    @property
    def sme_path_basis(self) -> str:
        """What the SME path share measures by default: time on hardware; on the emulated target the
        multiply-accumulates of CONV+GEMM (work), when every such operator's work is known, since
        instruction counts undercount SME kernels (one SME outer product does the work of many NEON
        instructions)."""
        if self.basis == INSTRUCTIONS and "macs" in self._ops:
            heavy = self._conv_gemm()
            if not heavy.empty and not heavy["macs"].isna().any():
                return WORK
        return self.basis

    @property
    def sme_path_samples(self) -> np.ndarray | None:
        """Per-run share of CONV+GEMM (by ``basis``) in packed-format kernels (NaN for a run without any);
        None when the program has no CONV/GEMM operator."""
        return self._sme_path_samples(None)

    def sme_path(self, by: str | None = None) -> float | None:
        """Median over undisturbed runs of the share of CONV+GEMM in packed-format (SME/SME2) kernels,
        by time, instructions or work (MACs; default ``sme_path_basis``); None without CONV/GEMM."""
        samples = self._sme_path_samples(by)
        return None if samples is None else self._clean_median(samples)

    @property
    def sme_path_share(self) -> float | None:
        """The SME path share by ``basis`` (time, or instructions on the emulated target)."""
        return self.sme_path()

    @property
    def sme_path_ops(self) -> int:
        """How many CONV/GEMM operator instances ran packed-format kernels."""
        return int(self._conv_gemm()["packed"].sum())

    # ------------------------------------------------------------------ work
    def work_by_category(self) -> dict[str, Any] | None:
        """Per category: MACs and bytes of one inference (work.py); on hardware also achieved GFLOP/s and
        GB/s from the median times. None where the program's work is unknown."""
        if "macs" not in self._ops:
            return None
        out: dict[str, Any] = {"unknown_ops": int(self._ops["work_unknown"].notna().sum())}
        for category, rows in self._ops.groupby("category", sort=False):
            macs = float(np.nansum(rows["macs"]))
            moved = float(np.nansum(rows["bytes_read"]) + np.nansum(rows["bytes_written"]))
            entry: dict[str, float | None] = {"macs": macs, "bytes": moved}
            if "gflops" in rows and not self.emulated:
                seconds = float(rows["median_ms"].sum()) / 1e3
                entry["gflops"] = 2 * macs / 1e9 / seconds if seconds > 0 and macs else None
                entry["gbytes_per_s"] = moved / 1e9 / seconds if seconds > 0 else None
            out[category] = entry
        return out

    # ---------------------------------------------------------------- memory
    @property
    def planned_memory_bytes(self) -> int | None:
        """Bytes of the program's memory-planned buffers (activations), from the .pte's execution plan: exact
        and the same on every target, so a change means the program changed."""
        buffers = (self.metadata.get("memory") or {}).get("planned_buffers")
        return None if buffers is None else int(sum(max(int(b), 0) for b in buffers))

    @property
    def peak_rss_kb(self) -> np.ndarray | None:
        """The runner process's peak resident memory during each timed run (KiB; reference program included).
        Under emulation it is qemu's own, so reported, never gated."""
        peaks = (self.metadata.get("memory") or {}).get("peak_rss_kb")
        return None if peaks is None or np.size(peaks) == 0 else np.atleast_1d(np.asarray(peaks, dtype=float))

    # ---------------------------------------------------------- instructions
    @property
    def instructions_per_inference(self) -> float | None:
        """Instructions of one inference (Method::execute; median over runs, which all count the same),
        counted under emulation; None where nothing counted them."""
        if self.instructions is None:
            return None
        return float(np.median(self.instructions.instructions.execute_values))

    @property
    def sme_instructions_per_inference(self) -> float | None:
        """How many of those were SME/SME2 instructions (SME encodings, SMSTART/SMSTOP)."""
        if self.instructions is None:
            return None
        return float(np.median(self.instructions.sme.execute_values))

    def instruction_mix(self) -> pd.DataFrame | None:
        """Per operator (the rows of ``ops``: event, op, category, delegated), the instructions of one inference
        in each instruction class (instruction_classes.py: outer products by data type, other SME, streaming
        SVE, NEON, loads and stores, scalar), median over runs, which all count the same. The classes of a row
        add up to its ``instructions``. None where nothing counted them by class (not emulated, or counts
        written before classes were counted)."""
        counted = self.instructions
        if counted is None or counted.classes is None:
            return None
        mix = self._ops[["event", "op", "category", "delegated"]].copy()
        for name, trace in counted.classes.items():
            mix[name] = np.median(trace.op_values, axis=1).astype(np.int64) if len(mix) else []
        return mix

    def pricing_inputs(self) -> "PricingInputs | None":
        """What pricing this run on a device model needs, and nothing more; None where nothing counted it by class."""
        from pytest_sme2.profile.device_model import PricingInputs

        mix = self.instruction_mix()
        if mix is None or self.instructions is None or self.instructions.classes is None:
            return None
        nodes = anchors_of(self.trace.ops, self.work) if self.work is not None else None
        return PricingInputs.counted(self.label, mix, self.instructions.classes, self.ops, nodes, self.metadata)

    def modelled(self, device: "str | Path | DeviceModel" = "apple-m4") -> "ModelledTime":
        """This profile's counted instructions priced on a device model (device_model.py, docs/device_model.md):
        per operator, per category and end to end, in modelled ms. A model, not a measurement: its label
        names the device file and how far it is validated. Only for a run counted by instruction class at the
        device's streaming vector length and with its thread count; a UsageError says what is missing."""
        from pytest_sme2.profile.device_model import price_run

        __tracebackhide__ = True
        return price_run(self.pricing_inputs(), self.label, self.emulated, device)

    @property
    def sme_instruction_share(self) -> float | None:
        """Of the CONV+GEMM operators' instructions, the share that were SME/SME2 instructions: the
        outer products and ZA traffic of SME kernels, from the instruction encodings themselves."""
        heavy = self._conv_gemm()
        if self.instructions is None or heavy.empty:
            return None
        rows = heavy.index.to_numpy()
        total = float(np.median(self.instructions.instructions.op_values[rows].sum(axis=0)))
        return float(np.median(self.instructions.sme.op_values[rows].sum(axis=0))) / total if total > 0 else None

    @property
    def executed_sme_kernels(self) -> tuple[str, ...] | None:
        """SME/SME2 kernels a traced inference really executed (None: the target traces no kernels). Stronger than
        ``sme_path_share``, which reads operator names: some kernels (the int8 dynamic QP8 GEMM) keep their name
        with and without SME. The emulated target records it from a qemu trace (see kernel_trace.py)."""
        trace = self.metadata.get("kernel_trace")
        return None if trace is None else tuple(trace["sme_kernels"])

    def inspector(self):  # noqa: ANN201 - executorch type, imported lazily
        """ExecuTorch's own Inspector on this profile's timed ETDump (and ETRecord, when known), for what the
        Profile does not cover: numerical debugging, stack traces, module hierarchy. Slower to build than a Profile."""
        from executorch.devtools import Inspector

        etdump = self.artifacts.get("timed_etdump")
        if etdump is None:
            raise ValueError(f"{self!r} has no timed ETDump artifact to inspect")
        return Inspector(etdump_path=etdump, etrecord=self.artifacts.get("etrecord"))

    # --------------------------------------------------------------- output
    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """The one JSON form of this profile (profile_json.py): the report's profile entry (summary.json, HTML,
        CSV), the history line, ``pytest-sme2 analyze --json`` and the baseline record all read it."""
        from pytest_sme2.profile.profile_json import profile_dict

        return profile_dict(self, top)

    def __repr__(self) -> str:
        if self.emulated:  # emulator time is no latency: the size of an inference is what was counted, if anything
            counted = self.instructions
            size = (
                f"{float(np.median(counted.instructions.execute_values)):,.0f} instructions per inference"
                if counted is not None
                else "not counted"
            )
            return f"Profile({self.label}: emulated, {size}, {self.runs} runs)"
        return f"Profile({self.label}: median {self.median_ms:.3f} ms over {self.runs} runs)"


def _joined(parts: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The chunks' per-run values end to end, or None when a chunk has none (its runs would be misattributed)."""
    present = [part for part in parts if part is not None]
    return np.concatenate(present) if len(present) == len(parts) else None
