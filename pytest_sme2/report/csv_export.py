"""CSV exports in the reference kit's layout, so its users' downstream tools keep working.

The column names and meanings follow the SME2 ExecuTorch profiling kit's
``model_profiling/tools/etdump_to_csv.py`` (ArmDeveloperEcosystem/
sme-executorch-profiling): ``<prefix>_all_runs_timeline.csv`` has one row per
event per run, ``<prefix>_ops_stats.csv`` one row per (type, backend). Like the
kit, ``pct_total`` is relative to the sum of *all* event rows (nested events
included, so it double counts); the Profile's shares of E2E are the honest
numbers. See docs/artifacts.md for every column and the differences.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_sme2.evidence.categories import strip_instance
from pytest_sme2.evidence.etdump import EXECUTE_BLOCK, ExecuteEvents, execute_events
from pytest_sme2.system.safe_files import write_streamed

TIMELINE_COLUMNS = [
    "model_id",
    "name",
    "type",
    "delegate_backend",
    "start_us",
    "end_us",
    "duration_ms",
    "pct_total",
    "node_id",
    "run_index",
    "block",
]
OPS_STATS_COLUMNS = ["model_id", "name", "type", "delegate_backend", "count", "total_ms", "avg_ms", "pct_total"]
PORTABLE = "portable"
TICKS_PER_US = 1000.0  # ExecuTorch 1.5.1's runtimes tick in nanoseconds (checked: etdump.py)


# Rows are written this many events at a time: the memory a CSV takes is bounded by this, not by the runs.
_CHUNK_EVENTS = 1 << 16


def _row_columns(events: ExecuteEvents, backend: str) -> tuple[list[str], list[str], np.ndarray]:
    """Per label: its type (the name without its instance); per event: its backend column value's index (0:
    ``backend``, 1: portable)."""
    types = [strip_instance(label) for label in events.labels]
    return types, [backend, PORTABLE], np.where(events.delegated, 0, 1)


def _durations_ms(events: ExecuteEvents) -> np.ndarray:
    return (events.end.astype(np.int64) - events.start.astype(np.int64)).astype(np.float64) / 1e3 / TICKS_PER_US


def _timeline_chunks(
    events: ExecuteEvents, model_id: str, backend: str, runs: int | None = None
) -> Iterator[list[list[Any]]]:
    """The timeline's rows, ``_CHUNK_EVENTS`` at a time: every Execute-block event of the first ``runs`` runs (None:
    all) in file order; ``node_id`` its place in its run, ``pct_total`` per run over all of that run's event rows."""
    types, kinds, kind = _row_columns(events, backend)
    duration = _durations_ms(events)
    total = np.bincount(events.run, weights=duration, minlength=events.runs)
    first = np.searchsorted(events.run, np.arange(events.runs))  # each run's first event (runs are contiguous)
    end = events.run.size if runs is None else int(np.searchsorted(events.run, runs))
    for a in range(0, end, _CHUNK_EVENTS):
        b = min(a + _CHUNK_EVENTS, end)
        run = events.run[a:b]
        run_total = total[run]
        pct = np.divide(duration[a:b], run_total, out=np.zeros(b - a), where=run_total > 0) * 100.0
        yield [
            [model_id, events.labels[label], types[label], kinds[k], start / TICKS_PER_US, end / TICKS_PER_US, d]
            + [p, node, r, EXECUTE_BLOCK]
            for label, k, start, end, d, p, node, r in zip(
                events.label_id[a:b].tolist(),
                kind[a:b].tolist(),
                events.start[a:b].tolist(),
                events.end[a:b].tolist(),
                duration[a:b].tolist(),
                pct.tolist(),
                (np.arange(a, b) - first[run]).tolist(),
                run.tolist(),
            )
        ]


def timeline_rows(etdump: str | Path, model_id: str, backend: str = "XnnpackBackend") -> list[dict[str, Any]]:
    """Every Execute-block event of every run as a dict of TIMELINE_COLUMNS (for reading; writing streams)."""
    events = execute_events(etdump)
    return [dict(zip(TIMELINE_COLUMNS, row)) for rows in _timeline_chunks(events, model_id, backend) for row in rows]


def _ops_stats(events: ExecuteEvents, model_id: str, backend: str) -> list[dict[str, Any]]:
    """Per (type, backend): instances, total of the instances' mean ms per run, their mean, pct of all rows. An
    instance is a (label, backend, occurrence within its run) as the kit keys them."""
    types, kinds, kind = _row_columns(events, backend)
    frame = pd.DataFrame({"run": events.run, "label": events.label_id, "kind": kind, "ms": _durations_ms(events)})
    frame["occurrence"] = frame.groupby(["run", "label", "kind"], sort=False).cumcount()
    means = frame.groupby(["label", "kind", "occurrence"], sort=False)["ms"].mean().reset_index()
    means["type"] = [types[label] for label in means["label"].tolist()]
    groups = means.groupby(["type", "kind"], sort=False)["ms"].agg(["size", "sum"]).reset_index()
    grand_total = float(groups["sum"].sum())
    rows = [
        {
            "model_id": model_id,
            "name": name,
            "type": name,
            "delegate_backend": kinds[k],
            "count": int(count),
            "total_ms": float(total),
            "avg_ms": float(total) / int(count),
            "pct_total": float(total) / grand_total * 100.0 if grand_total > 0 else 0.0,
        }
        for name, k, count, total in zip(groups["type"], groups["kind"], groups["size"], groups["sum"])
    ]
    rows.sort(key=lambda row: row["total_ms"], reverse=True)
    return rows


def ops_stats_rows(etdump: str | Path, model_id: str, backend: str = "XnnpackBackend") -> list[dict[str, Any]]:
    """Per (type, backend): instances, total of the instances' mean ms per run, their mean, pct of all rows."""
    return _ops_stats(execute_events(etdump), model_id, backend)


def _write(path: Path, columns: list[str], rows: Iterable[Sequence[Any]]) -> Path:
    """A CSV of ``columns`` then ``rows`` (each a sequence in column order), streamed to the file."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def fill(out: BinaryIO) -> None:
        text = io.TextIOWrapper(out, encoding="utf-8", newline="")
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows(rows)
        text.flush()
        text.detach()

    return write_streamed(path, fill)


def write_csvs(
    etdump: str | Path,
    out_dir: Path,
    prefix: str,
    model_id: str,
    backend: str = "XnnpackBackend",
    emulated: bool = False,
    timeline_runs: int = 0,
) -> dict[str, str]:
    """Write ``<prefix>_all_runs_timeline.csv`` and ``<prefix>_ops_stats.csv``; returns their paths, and
    ``timeline_runs`` as "written of all" when the timeline holds fewer runs than the ETDump.

    ``emulated``: the times are the emulator's, so the files are named ``_emulated_events.csv`` and
    ``_emulated_ops.csv``, which the reference kit's tools do not pick up and draw as latency. ``timeline_runs``:
    the timeline holds the first that many runs (0: all; the option ``sme2_kit_timeline_runs``); the ops stats
    every run.
    """
    names = ("emulated_events", "emulated_ops") if emulated else ("all_runs_timeline", "ops_stats")
    events = execute_events(etdump)  # read once for both files
    cut = timeline_runs if 0 < timeline_runs < events.runs else None
    chunks = _timeline_chunks(events, model_id, backend, cut)
    timeline = _write(out_dir / f"{prefix}_{names[0]}.csv", TIMELINE_COLUMNS, (r for rows in chunks for r in rows))
    stats_rows = [[row[c] for c in OPS_STATS_COLUMNS] for row in _ops_stats(events, model_id, backend)]
    stats = _write(out_dir / f"{prefix}_{names[1]}.csv", OPS_STATS_COLUMNS, stats_rows)
    written = {"timeline_csv": str(timeline), "ops_stats_csv": str(stats)}
    return written if cut is None else {**written, "timeline_runs": f"{cut} of {events.runs}"}


# One row per (operator, kernel) of a profile's sampled process (kernel_sampling.py): which kernels took each
# operator's time, like the reference kit's kernel view but measured in time rather than logged at setup.
KERNELS_COLUMNS = [
    "model_id",
    "variant",
    "op",
    "event",
    "category",
    "delegated",
    "kernel",
    "library",
    "kind",
    "has_sme2",
    "samples",
    "ms_per_run",
    "share_of_op",
]


def kernel_rows(kernel_time: Mapping[str, Any], model_id: str, variant: str) -> list[dict[str, Any]]:
    """The rows of ``<prefix>_kernels.csv`` from a profile's ``kernel_time`` (summary.json form)."""
    return [
        {
            "model_id": model_id,
            "variant": variant,
            "op": op["op"],
            "event": op["event"],
            "category": op["category"],
            "delegated": op["delegated"],
            "kernel": kernel["kernel"],
            "library": kernel["library"],
            "kind": kernel["kind"],
            "has_sme2": 1 if kernel["kind"] == "SME2" else 0,
            "samples": kernel["samples"],
            "ms_per_run": kernel["ms_per_run"],
            "share_of_op": kernel["share"],
        }
        for op in kernel_time.get("ops", [])
        for kernel in op["kernels"]
    ]


def write_kernels_csv(
    kernel_time: Mapping[str, Any], out_dir: Path, prefix: str, model_id: str, variant: str
) -> dict[str, str]:
    """``<prefix>_kernels.csv`` when the profile's kernels were sampled; else nothing."""
    if not kernel_time or not kernel_time.get("available"):
        return {}
    rows = [[row[c] for c in KERNELS_COLUMNS] for row in kernel_rows(kernel_time, model_id, variant)]
    path = _write(out_dir / f"{prefix}_kernels.csv", KERNELS_COLUMNS, rows)
    return {"kernels_csv": str(path)}
