"""Which kernels took each operator's time on real hardware: a sampling profiler's samples placed in ETDump events.

Why one more, sampled process instead of sampling the timed runs: a verdict must not
depend on whether sampling was on, so the timed runs are never sampled. The sampled
process runs the same runner, program and SME2 setting with its own ETDump; what it
costs and how much sampling slows a run is in docs/performance.md.

Alignment: ETDump ticks count from the runtime's init. The runner reports the
steady clock minus the ETDump clock, read back to back (``clock_offset_ns``), and
the sampler stamps samples with the steady clock (``perf -k CLOCK_MONOTONIC``), so
a sample at ``t`` lies at ``t - offset`` on the ETDump's clock.

Placement, innermost first: an operator event inside the delegate (XNNPACK writes
these back to back from the start of the delegate call with its own per-operator
times in microseconds, so their edges are good to a few microseconds), else the
delegate call itself (``DELEGATE_OUTSIDE_OPS``: XNNPACK setting up inputs and
outputs, time the ETDump leaves in OTHER), else an operator outside the delegate,
else the run (``BETWEEN_OPS``). Samples outside the timed runs are dropped.

Naming: a symbol where there is one (from an unstripped copy of the library
given with ``--sme2-symfs`` first, then the profiler's own), else the library and
the function's address range from its unwind tables (``lib.so@0x1f000-0x1f3a0``),
stable for one build of the library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_sme2.evidence.categories import classify
from pytest_sme2.evidence.etdump import EventSpans, ExecutionTrace, op_id
from pytest_sme2.evidence.kernel_trace import KERNEL_KINDS, UNNAMED_MARK, kernel_kind
from pytest_sme2.evidence.perf_samples import DEFAULT_PERIOD_NS, Sample
from pytest_sme2.system.elf import FunctionSymbols, function_symbols, unwind_function_ranges

DELEGATE_OUTSIDE_OPS = "(delegate, no operator)"
BETWEEN_OPS = "(runtime, between operators)"
_PLACES = {-1: DELEGATE_OUTSIDE_OPS, -2: BETWEEN_OPS}
_OUTSIDE_RUNS = -3
SME_KINDS = ("SME2", "SME")
# Operator categories whose kernels SME2 is for (categories.py names them).
SME_CATEGORIES = ("CONV", "GEMM")
KERNEL_TIME_VERSION = 1


@dataclass(frozen=True)
class SamplingSettings:
    """How kernels are sampled: the period (``--sme2-kernel-sampling-hz``) and unstripped library copies."""

    period_ns: int = DEFAULT_PERIOD_NS
    symfs: tuple[Path, ...] = ()

    @property
    def rate_hz(self) -> float:
        return 1e9 / self.period_ns


class KernelNamer:
    """Names sampled code: symbol, else library and function range. Each library is read once."""

    def __init__(self, symfs: Sequence[Path] = (), copies: Sequence[Path] = ()):
        # symfs: unstripped copies (names); copies: the very libraries a device mapped, kept on this machine
        self._symfs = tuple(Path(p) for p in symfs)
        self._copies = tuple(Path(p) for p in copies)
        self._tables: dict[str, tuple[FunctionSymbols | None, FunctionSymbols | None, list[tuple[int, int]]]] = {}
        self._names: dict[tuple[str, str | None, int | None], str] = {}

    def name(self, library: str, symbol: str | None, offset: int | None, vaddr: int | None = None) -> str:
        """The kernel at ``offset`` in ``library`` (or at ``vaddr``, its own address, where the profiler gives that)."""
        key = (library, symbol, offset if vaddr is None else -vaddr - 1)
        if key not in self._names:
            self._names[key] = self._name(library, symbol, offset, vaddr)
        return self._names[key]

    def _name(self, library: str, symbol: str | None, offset: int | None, vaddr: int | None) -> str:
        base = PurePosixPath(library).name or library
        if offset is None and vaddr is None:
            return symbol or f"{base}{UNNAMED_MARK}?"
        unstripped, own, ranges = self._library(library)
        if vaddr is None and offset is not None and own is not None:  # offset: not None when vaddr is (above)
            vaddr = own.vaddr_at(offset)
        for table in (unstripped, None if symbol else own):
            named = table.at_vaddr(vaddr) if table is not None and vaddr is not None else None
            if named:
                return named
        if symbol:
            return symbol
        if vaddr is not None and ranges:
            index = int(np.searchsorted([start for start, _ in ranges], vaddr, side="right")) - 1
            if index >= 0 and vaddr < ranges[index][1]:
                return f"{base}{UNNAMED_MARK}{ranges[index][0]:x}-0x{ranges[index][1]:x}"
            if 0 <= index < len(ranges) - 1:
                # Code without an unwind entry (hand-written assembly kernels have none: on x86_64 mobilenet
                # fp32, 37% of XNNPACK's samples): named by the gap between the functions around it, as stable
                # for one build as a function's range, instead of one "?" for all such kernels.
                return f"{base}{UNNAMED_MARK}{ranges[index][1]:x}-0x{ranges[index + 1][0]:x}"
        return f"{base}{UNNAMED_MARK}?"

    def _library(self, library: str) -> tuple[FunctionSymbols | None, FunctionSymbols | None, list[tuple[int, int]]]:
        if library not in self._tables:
            copy = self._copy(library, self._symfs)
            local = Path(library) if Path(library).is_file() else self._copy(library, self._copies)
            self._tables[library] = (
                _symbols(copy) if copy is not None else None,
                _symbols(local) if local is not None else None,
                _ranges(local) if local is not None else [],
            )
        return self._tables[library]

    @staticmethod
    def _copy(library: str, folders: Sequence[Path]) -> Path | None:
        """``DIR/<path as mapped>`` or ``DIR/<file name>`` under one of ``folders``, like simpleperf's --symfs."""
        for folder in folders:
            for candidate in (folder / library.lstrip("/"), folder / PurePosixPath(library).name):
                if candidate.is_file():
                    return candidate
        return None


def _symbols(path: Path) -> FunctionSymbols | None:
    try:
        return function_symbols(path)
    except (OSError, ValueError, IndexError):  # not an ELF file we can read: no names from it
        return None


def _ranges(path: Path) -> list[tuple[int, int]]:
    try:
        return unwind_function_ranges(path)
    except (OSError, ValueError, IndexError):
        return []


@dataclass
class KernelTime:
    """Per operator event, the kernels that took its time, from samples of one sampled process.

    ``kernels``: one row per (operator, kernel): op (etdump.op_id: event name and instruction,
    unique where event names repeat), event, category, delegated, kernel, library, kind
    (kernel_trace.KERNEL_KINDS), samples, ms_per_run, share (of the operator's samples).
    ``ops``: one row per operator that got samples, in program order: op, event, category,
    delegated, samples, sampled_ms_per_run (samples x period / runs) and etdump_ms_per_run
    (the sampled process's own ETDump). The two leftover places (DELEGATE_OUTSIDE_OPS, BETWEEN_OPS) come last.
    ``problem``: why there is no attribution (perf missing, not permitted, ...); the tables are then empty.
    """

    kernels: pd.DataFrame
    ops: pd.DataFrame
    runs: int = 0
    period_ns: int = DEFAULT_PERIOD_NS
    sampler: str = ""
    samples_total: int = 0
    samples_placed: int = 0
    runs_left_out: int = 0  # runs in which the runner lost its core (_runs_on_cpu)
    problem: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)

    _KERNEL_COLUMNS = (
        "op",
        "event",
        "category",
        "delegated",
        "kernel",
        "library",
        "kind",
        "samples",
        "ms_per_run",
        "share",
    )
    _OP_COLUMNS = ("op", "event", "category", "delegated", "samples", "sampled_ms_per_run", "etdump_ms_per_run")

    @classmethod
    def unavailable(cls, problem: str, sampler: str = "") -> "KernelTime":
        return cls(
            pd.DataFrame(columns=list(cls._KERNEL_COLUMNS)),
            pd.DataFrame(columns=list(cls._OP_COLUMNS)),
            sampler=sampler,
            problem=problem,
        )

    @property
    def available(self) -> bool:
        return self.problem is None

    def kernels_of(self, op: str) -> pd.DataFrame:
        """The kernels of one operator (its ``op`` id, or an event name that occurs once), most samples first."""
        rows = self.kernels[self.kernels["op"] == op]
        if rows.empty:
            matches = sorted(set(self.kernels.loc[self.kernels["event"] == op, "op"]))
            if len(matches) > 1:
                raise ValueError(f"event {op!r} is several operators ({', '.join(matches)}); name one by its op id")
            if not matches:
                known = sorted(set(self.kernels["op"]) - set(_PLACES.values()))
                raise ValueError(
                    f"no operator {op!r} was sampled; name one by its event name or op id (the op "
                    f"column of kernel_time.ops): {', '.join(known[:8])}"
                    + (f" and {len(known) - 8} more" if len(known) > 8 else "")
                )
            rows = self.kernels[self.kernels["op"].isin(matches)]
        return rows.sort_values(["samples", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)

    def dominant_kernels(self, min_samples: int = 5) -> dict[str, str]:
        """Per operator (op id) with at least ``min_samples`` samples: the kernel with the most samples."""
        real = self.kernels[~self.kernels["op"].isin(list(_PLACES.values()))]
        dominant: dict[str, str] = {}
        for op, rows in real.groupby("op", sort=False):
            if int(rows["samples"].sum()) >= min_samples:
                dominant[str(op)] = str(
                    rows.sort_values(["samples", "kernel"], ascending=[False, True]).iloc[0]["kernel"]
                )
        return dominant

    def kind_share(
        self, kinds: Sequence[str] = SME_KINDS, categories: Sequence[str] | None = SME_CATEGORIES
    ) -> float | None:
        """Share of the samples of ``categories``' operators (all, for None) that fell in kernels of ``kinds``.

        None when those operators got no samples. On SME2 hardware with SME2 on, the
        default (SME and SME2 kernels in CONV and GEMM time) is the strongest evidence
        there is that the time went to SME2.
        """
        unknown = set(kinds) - set(KERNEL_KINDS)
        if unknown:
            raise ValueError(f"unknown kernel kinds {sorted(unknown)}; use some of {list(KERNEL_KINDS)}")
        rows = self.kernels
        if categories is not None:
            rows = rows[rows["category"].isin([c.upper() for c in categories])]
        total = int(rows["samples"].sum())
        if total == 0:
            return None
        return float(rows.loc[rows["kind"].isin(list(kinds)), "samples"].sum()) / total

    def kind_ms(self) -> dict[str, float]:
        """Sampled milliseconds per run in each kind of kernel, over every placed sample."""
        sums = self.kernels.groupby("kind")["ms_per_run"].sum()
        return {kind: float(sums.get(kind, 0.0)) for kind in KERNEL_KINDS if kind in sums.index}

    def top_kernels(self, n: int = 8) -> list[dict[str, Any]]:
        """The kernels that took the most time over all operators: kernel, library, kind, ms_per_run, share."""
        if self.kernels.empty:
            return []
        total = float(self.kernels["ms_per_run"].sum())
        grouped = (
            self.kernels.groupby(["kernel", "library", "kind"], as_index=False)["ms_per_run"]
            .sum()
            .sort_values(["ms_per_run", "kernel"], ascending=[False, True])
            .head(n)
        )
        return [
            {
                "kernel": row.kernel,
                "library": row.library,
                "kind": row.kind,
                "ms_per_run": _round(row.ms_per_run),
                "share": _round(row.ms_per_run / total) if total > 0 else None,
            }
            for row in grouped.itertuples(index=False)
        ]

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        """The ``kernel_time`` of summary.json (``top``: kernels kept per event, None for all)."""
        if not self.available:
            return {
                "version": KERNEL_TIME_VERSION,
                "available": False,
                "problem": self.problem,
                "sampler": self.sampler,
            }
        ops = []
        for row in self.ops.itertuples(index=False):
            kernels = self.kernels_of(row.op)
            if top is not None:
                kernels = kernels.head(top)
            ops.append(
                {
                    "op": row.op,
                    "event": row.event,
                    "category": row.category,
                    "delegated": bool(row.delegated),
                    "samples": int(row.samples),
                    "sampled_ms_per_run": _round(row.sampled_ms_per_run),
                    "etdump_ms_per_run": _round(row.etdump_ms_per_run),
                    "kernels": [
                        {
                            "kernel": k.kernel,
                            "library": k.library,
                            "kind": k.kind,
                            "samples": int(k.samples),
                            "ms_per_run": _round(k.ms_per_run),
                            "share": _round(k.share),
                        }
                        for k in kernels.itertuples(index=False)
                    ],
                }
            )
        return {
            "version": KERNEL_TIME_VERSION,
            "available": True,
            "sampler": self.sampler,
            "period_ns": self.period_ns,
            "runs": self.runs,
            "samples_total": self.samples_total,
            "samples_placed": self.samples_placed,
            "runs_left_out": self.runs_left_out,
            "sme_kernel_share_conv_gemm": self.kind_share(),
            "kind_ms_per_run": {k: _round(v) for k, v in self.kind_ms().items()},
            "dominant_kernels": self.dominant_kernels(),
            "top_kernels": self.top_kernels(),
            "ops": ops,
            "artifacts": dict(self.artifacts),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelTime":
        """Back from ``as_dict`` (summary.json), e.g. for reports made outside the session."""
        if not data.get("available"):
            return cls.unavailable(str(data.get("problem") or "no kernel samples"), str(data.get("sampler", "")))
        kernel_rows, op_rows = [], []
        for op in data["ops"]:
            op_rows.append({k: op[k] for k in cls._OP_COLUMNS})
            for kernel in op["kernels"]:
                kernel_rows.append(
                    {
                        "op": op["op"],
                        "event": op["event"],
                        "category": op["category"],
                        "delegated": op["delegated"],
                        **kernel,
                    }
                )
        return cls(
            pd.DataFrame(kernel_rows, columns=list(cls._KERNEL_COLUMNS)),
            pd.DataFrame(op_rows, columns=list(cls._OP_COLUMNS)),
            runs=int(data["runs"]),
            period_ns=int(data["period_ns"]),
            sampler=str(data["sampler"]),
            samples_total=int(data["samples_total"]),
            samples_placed=int(data["samples_placed"]),
            runs_left_out=int(data.get("runs_left_out", 0)),
            artifacts=dict(data.get("artifacts") or {}),
        )

    def __repr__(self) -> str:
        if not self.available:
            return f"KernelTime(unavailable: {self.problem})"
        share = self.kind_share()
        sme = "no CONV/GEMM samples" if share is None else f"SME/SME2 kernels {share:.1%} of CONV+GEMM samples"
        return (
            f"KernelTime({self.samples_placed} of {self.samples_total} samples in {self.runs} runs, "
            f"{len(self.ops)} events; {sme})"
        )


def _round(value: float) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else round(float(value), 6)


def attribute(
    samples: Sequence[Sample],
    trace: ExecutionTrace,
    clock_offset_ns: int,
    namer: KernelNamer,
    period_ns: int = DEFAULT_PERIOD_NS,
    sampler: str = "",
    ns_per_tick: float = 1.0,
) -> KernelTime:
    """Place each sample in the innermost ETDump event of ``trace`` it falls in (module docstring) and name its code.

    ``trace`` must be read from one run's files (it carries ``spans``); ``clock_offset_ns`` is the
    runner's steady clock minus ETDump clock.
    """
    spans = trace.spans
    if spans is None:
        raise ValueError("attribute() needs a trace read from one run's ETDump (its spans), not a merged one")
    times = np.array([s.time_ns for s in samples], dtype=np.int64)
    ticks = (times - clock_offset_ns) / ns_per_tick
    place = _places(spans, ticks, ns_per_tick)
    periods_ms = np.array([s.period_ns for s in samples], dtype=float) / 1e6
    clean = _runs_on_cpu(ticks, periods_ms, place, spans, trace.execute_values)
    runs = int(clean.sum())
    run_of = np.searchsorted(spans.execute_start, ticks, side="right") - 1
    placed = np.flatnonzero((place != _OUTSIDE_RUNS) & clean[np.clip(run_of, 0, None)])
    ms_per_sample = periods_ms / max(runs, 1)
    rows: dict[tuple[int, str, str], list[float]] = {}
    for i in placed.tolist():
        sample = samples[i]
        kernel = namer.name(sample.library, sample.symbol, sample.file_offset, sample.vaddr)
        key = (int(place[i]), kernel, PurePosixPath(sample.library).name or sample.library)
        entry = rows.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += ms_per_sample[i]
    kernel_rows, per_place = _kernel_and_op_rows(rows, trace, _etdump_ms_per_place(trace, clean))
    kernels = pd.DataFrame(kernel_rows, columns=list(KernelTime._KERNEL_COLUMNS[:-1]))
    place_order = sorted(per_place, key=lambda w: (w < 0, w))  # program order, then the two leftover places
    ops = pd.DataFrame([per_place[w] for w in place_order], columns=list(KernelTime._OP_COLUMNS))
    event_samples = kernels.groupby("op")["samples"].transform("sum") if len(kernels) else pd.Series(dtype=float)
    kernels["share"] = kernels["samples"] / event_samples if len(kernels) else []
    kernels = kernels.sort_values(["samples", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return KernelTime(
        kernels,
        ops,
        runs=runs,
        period_ns=period_ns,
        sampler=sampler,
        samples_total=int(times.size),
        samples_placed=int(placed.size),
        runs_left_out=int(trace.runs - runs),
    )


def _places(spans: EventSpans, ticks: np.ndarray, ns_per_tick: float) -> np.ndarray:
    """Each sample's place (an operator's index, or one of _PLACES): the innermost event it falls in, searched
    from the innermost level (delegated operators) out to the whole execute; _OUTSIDE_RUNS for none."""
    place = np.full(ticks.size, _OUTSIDE_RUNS, dtype=np.int64)
    delegated = spans.op_delegated.astype(bool)
    delegated_start, delegated_end = _true_positions(spans, delegated, ticks_per_us=1000 / ns_per_tick)
    levels = (
        (delegated_start, delegated_end, spans.op[delegated]),
        (spans.delegate_start, spans.delegate_end, np.full(spans.delegate_start.size, -1)),
        (spans.op_start[~delegated], spans.op_end[~delegated], spans.op[~delegated]),
        (spans.execute_start, spans.execute_end, np.full(spans.execute_start.size, -2)),
    )
    for starts, ends, values in levels:
        if starts.size == 0:
            continue
        order = np.argsort(starts, kind="stable")
        starts, ends, values = starts[order], ends[order], values[order]
        index = np.searchsorted(starts, ticks, side="right") - 1
        inside = (index >= 0) & (place == _OUTSIDE_RUNS)
        inside[inside] &= ticks[inside] < ends[index[inside]]
        place[inside] = values[index[inside]]
    return place


def _kernel_and_op_rows(
    rows: Mapping[tuple[int, str, str], list[float]], trace: ExecutionTrace, etdump_ms: Mapping[int, float]
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The samples counted by (place, kernel, library) as KernelTime's rows: one per kernel of a place, and one
    per place with its samples and sampled ms summed beside its ETDump ms."""
    ids = [op_id(key) for key in trace.ops]
    kernel_rows: list[dict[str, Any]] = []
    per_place: dict[int, dict[str, Any]] = {}
    for (where, kernel, library), (count, ms) in rows.items():
        op = _PLACES.get(where) or ids[where]
        event = _PLACES.get(where) or trace.ops[where].name
        category = "OTHER" if where < 0 else classify(event).category.value
        is_delegated = where == -1 or (where >= 0 and trace.ops[where].delegated)
        kernel_rows.append(
            {
                "op": op,
                "event": event,
                "category": category,
                "delegated": is_delegated,
                "kernel": kernel,
                "library": library,
                "kind": kernel_kind(kernel),
                "samples": count,
                "ms_per_run": ms,
            }
        )
        total = per_place.setdefault(
            where,
            {
                "op": op,
                "event": event,
                "category": category,
                "delegated": is_delegated,
                "samples": 0,
                "sampled_ms_per_run": 0.0,
                "etdump_ms_per_run": etdump_ms.get(where, float("nan")),
            },
        )
        total["samples"] += count
        total["sampled_ms_per_run"] += ms
    return kernel_rows, per_place


# A run whose samples add up to less than this share of its ETDump time lost its core part of the time
# (the runner waited while another job ran: samples count CPU time, the ETDump wall time). Judged only where
# a run is long enough to carry MIN_SAMPLES_PER_RUN samples; shorter runs cannot tell and are all kept.
ON_CPU_SHARE = 0.8
MIN_SAMPLES_PER_RUN = 20


def _runs_on_cpu(
    ticks: np.ndarray, periods_ms: np.ndarray, place: np.ndarray, spans: EventSpans, execute_values: np.ndarray
) -> np.ndarray:
    """Per run: whether the runner had its core (its samples cover its ETDump time), so its samples are kept.

    Like the gate's disturbed runs: on a busy machine a run that was descheduled has too few samples for its
    time, and its operators' sampled milliseconds would read low; such runs are left out of kernel time.
    """
    runs = execute_values.size
    keep = np.ones(runs, dtype=bool)
    if runs == 0 or periods_ms.size == 0 or np.median(execute_values) < MIN_SAMPLES_PER_RUN * np.median(periods_ms):
        return keep
    run_of = np.searchsorted(spans.execute_start, ticks, side="right") - 1
    inside = (place != _OUTSIDE_RUNS) & (run_of >= 0)
    sampled = np.bincount(run_of[inside], weights=periods_ms[inside], minlength=runs)[:runs]
    keep = sampled >= ON_CPU_SHARE * execute_values
    return keep if keep.any() else np.ones(runs, dtype=bool)


def _true_positions(spans: EventSpans, delegated: np.ndarray, ticks_per_us: float) -> tuple[np.ndarray, np.ndarray]:
    """Where the delegate's operator events really were: XNNPACK reports each operator's time truncated to
    whole microseconds and ExecuTorch lays them back to back, so the k-th operator of a delegate call
    really starts about k / 2 microseconds later than written (the mean truncation of the k before it).

    Measured on mobilenet_v3_small fp32 (benchmarks/results/notebook.md, "Kernel sampling"): placed as
    written, the median convolution or GEMM had 87% of its samples in one kernel; corrected, 100%, with
    neighbouring operators' kernels no longer bleeding in. Applied only when every such duration is whole
    microseconds, i.e. XNNPACK's.
    """
    start = spans.op_start[delegated].astype(np.float64)
    end = spans.op_end[delegated].astype(np.float64)
    if start.size == 0 or spans.delegate_start.size == 0 or np.any(np.mod(end - start, ticks_per_us) != 0):
        return start, end
    order = np.argsort(start, kind="stable")
    call = np.searchsorted(np.sort(spans.delegate_start), start[order], side="right")  # which delegate call
    first_of_call = np.r_[True, call[1:] != call[:-1]]
    position = np.arange(order.size)
    rank = position - np.maximum.accumulate(np.where(first_of_call, position, 0))
    half = ticks_per_us / 2
    start[order] += rank * half
    end[order] += (rank + 1) * half
    return start, end


def _etdump_ms_per_place(trace: ExecutionTrace, clean: np.ndarray) -> dict[int, float]:
    """Per operator (its index) and per leftover place (-1, -2): ETDump milliseconds per run (``clean`` runs)."""
    runs = max(int(clean.sum()), 1)
    per_op = trace.op_values[:, clean].sum(axis=1) / runs if trace.ops else np.zeros(0)
    delegated = np.array([key.delegated for key in trace.ops], dtype=bool)
    inside_delegate = float(per_op[delegated].sum()) if per_op.size else 0.0
    outside_delegate = float(per_op[~delegated].sum()) if per_op.size else 0.0
    delegate = float(trace.delegate_values[clean].sum()) / runs
    execute = float(trace.execute_values[clean].sum()) / runs
    places = {i: float(v) for i, v in enumerate(per_op.tolist())}
    places[-1] = max(delegate - inside_delegate, 0.0)
    places[-2] = max(execute - delegate - outside_delegate, 0.0)
    return places
