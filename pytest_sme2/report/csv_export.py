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
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from pytest_sme2.evidence.categories import strip_instance
from pytest_sme2.evidence.etdump import EXECUTE_BLOCK, read_blocks
from pytest_sme2.system.safe_files import write_file

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


def _events(etdump: str | Path, backend: str) -> list[list[dict[str, Any]]]:
    """Execute-block events per run: name, type, backend, times, and the instance key across runs."""
    runs = []
    for block in read_blocks(etdump):
        if block.name != EXECUTE_BLOCK:
            continue
        seen: dict[tuple[str, str], int] = defaultdict(int)
        events = []
        for event in block.events:
            name = event.label
            kind = backend if event.is_delegate_op else PORTABLE
            occurrence = seen[(name, kind)]
            seen[(name, kind)] += 1
            events.append(
                {
                    "name": name,
                    "type": strip_instance(name),
                    "delegate_backend": kind,
                    "start": event.start,
                    "end": event.end,
                    "key": (name, kind, occurrence),
                }
            )
        runs.append(events)
    return runs


def timeline_rows(etdump: str | Path, model_id: str, backend: str = "XnnpackBackend") -> list[dict[str, Any]]:
    """Every Execute-block event of every run; pct_total is per run, over all of that run's event rows."""
    rows = []
    for run_index, events in enumerate(_events(etdump, backend)):
        total_ms = sum((e["end"] - e["start"]) / 1e3 / TICKS_PER_US for e in events)
        for node_id, event in enumerate(events):
            duration_ms = (event["end"] - event["start"]) / 1e3 / TICKS_PER_US
            rows.append(
                {
                    "model_id": model_id,
                    "name": event["name"],
                    "type": event["type"],
                    "delegate_backend": event["delegate_backend"],
                    "start_us": event["start"] / TICKS_PER_US,
                    "end_us": event["end"] / TICKS_PER_US,
                    "duration_ms": duration_ms,
                    "pct_total": duration_ms / total_ms * 100.0 if total_ms > 0 else 0.0,
                    "node_id": node_id,
                    "run_index": run_index,
                    "block": EXECUTE_BLOCK,
                }
            )
    return rows


def ops_stats_rows(etdump: str | Path, model_id: str, backend: str = "XnnpackBackend") -> list[dict[str, Any]]:
    """Per (type, backend): instances, total of the instances' mean ms per run, their mean, pct of all rows."""
    per_instance: dict[tuple, list[float]] = defaultdict(list)
    kind_of: dict[tuple, tuple[str, str]] = {}
    for events in _events(etdump, backend):
        for event in events:
            per_instance[event["key"]].append((event["end"] - event["start"]) / 1e3 / TICKS_PER_US)
            kind_of[event["key"]] = (event["type"], event["delegate_backend"])
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, durations in per_instance.items():
        groups[kind_of[key]].append(sum(durations) / len(durations))
    grand_total = sum(sum(means) for means in groups.values())
    rows = [
        {
            "model_id": model_id,
            "name": kind,
            "type": kind,
            "delegate_backend": backend_name,
            "count": len(means),
            "total_ms": sum(means),
            "avg_ms": sum(means) / len(means),
            "pct_total": sum(means) / grand_total * 100.0 if grand_total > 0 else 0.0,
        }
        for (kind, backend_name), means in groups.items()
    ]
    rows.sort(key=lambda row: row["total_ms"], reverse=True)
    return rows


def _write(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return write_file(path, text.getvalue())


def write_csvs(
    etdump: str | Path,
    out_dir: Path,
    prefix: str,
    model_id: str,
    backend: str = "XnnpackBackend",
    emulated: bool = False,
) -> dict[str, str]:
    """Write ``<prefix>_all_runs_timeline.csv`` and ``<prefix>_ops_stats.csv``; returns their paths.

    ``emulated``: the times are the emulator's, so the files are named ``_emulated_events.csv`` and
    ``_emulated_ops.csv``, which the reference kit's tools do not pick up and draw as latency.
    """
    names = ("emulated_events", "emulated_ops") if emulated else ("all_runs_timeline", "ops_stats")
    timeline = _write(out_dir / f"{prefix}_{names[0]}.csv", TIMELINE_COLUMNS, timeline_rows(etdump, model_id, backend))
    stats = _write(out_dir / f"{prefix}_{names[1]}.csv", OPS_STATS_COLUMNS, ops_stats_rows(etdump, model_id, backend))
    return {"timeline_csv": str(timeline), "ops_stats_csv": str(stats)}


# One row per (operator, kernel) of a profile's sampled round (kernel_sampling.py): which kernels took each
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
    path = _write(out_dir / f"{prefix}_kernels.csv", KERNELS_COLUMNS, kernel_rows(kernel_time, model_id, variant))
    return {"kernels_csv": str(path)}
