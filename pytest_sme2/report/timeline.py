"""A test's profiles as one timeline in the Chrome trace-event JSON format, which Perfetto's UI
(ui.perfetto.dev, "Open trace file") and chrome://tracing open offline.

Why: the tables say how much time each operator took; a timeline shows the order, one stalled run, the gaps
between delegate calls, and SME2 on against off. The format is the JSON Object Format of Google's "Trace
Event Format" document: complete events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds) nested by time on
one thread, and metadata events (``"ph": "M"``) naming processes and threads.

Layout: each profile of the test (SME2 on, off, ...) is a process; each runner process whose runs it holds is
a thread on its own clock, from 0 at its first event; ``Program::load_method`` and ``Method::init``, then one
slice per timed run (its ``Method::execute``), with delegate calls and operators nested in it, as the ETDump
placed them. Disturbed and throttled runs say so in their name and category. Where kernel sampling ran, each
operator holds its sampled kernels, sized by their share of its samples (a share, not a position).

The axis is the ETDump's clock (nanoseconds) on hardware. On the emulated target it is counted instructions,
one instruction per nanosecond of the axis, from where the counter found each event (qemu_counts.py), and
every process says so: the emulator's time is never drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pytest_sme2.evidence.categories import classify
from pytest_sme2.evidence.etdump import EventSpans, ExecutionTrace, op_id
from pytest_sme2.system.safe_files import write_file

if TYPE_CHECKING:
    from pytest_sme2.profile.profile import Profile

TIMELINE_FILE = "timeline.json"
TICKS_PER_US = 1000.0  # ETDump ticks are nanoseconds; counted positions are drawn one instruction per nanosecond
INSTRUCTION_AXIS = "counted instructions (1 ns of the axis = 1 instruction; not time)"
TIME_AXIS = "time (the ETDump's clock, from each runner process's first event)"
LOAD, INIT, EXECUTE, DELEGATE = "Program::load_method", "Method::init", "Method::execute", "DELEGATE_CALL"


def _axis(profile: "Profile") -> tuple[ExecutionTrace | None, str, str | None]:
    """The trace whose positions are drawn, the axis it is on, and why there is none."""
    if profile.emulated:
        if profile.instructions is None:
            return None, INSTRUCTION_AXIS, "an emulated profile without counted instructions has no axis to draw"
        trace = profile.instructions.instructions
        why = (
            "its counts were written without event positions (counted by an older pytest-sme2): run the test "
            "again with --sme2-fresh"
        )
        return trace, INSTRUCTION_AXIS, None if trace.span_parts else why
    why = "it was merged from files read without their event times (pytest-sme2 report reads no ETDump positions)"
    return profile.trace, TIME_AXIS, None if profile.trace.span_parts else why


@dataclass(frozen=True)
class _Track:
    """One runner process's thread in the timeline: every slice on it carries its process and thread, is placed
    from the tick its clock starts at, and gives its length in the axis's unit."""

    pid: int
    tid: int
    t0: int
    unit: str


def _slice(
    name: str, cat: str, begin: float, end: float, track: _Track, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    event = {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": (begin - track.t0) / TICKS_PER_US,
        "dur": (end - begin) / TICKS_PER_US,
        "pid": track.pid,
        "tid": track.tid,
    }
    if args:
        event["args"] = args
    return event


def _meta(kind: str, pid: int, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _kernels_by_op(profile: "Profile") -> dict[str, list[dict[str, Any]]]:
    """Per operator id, its sampled kernels (most samples first); empty where sampling did not run."""
    kernel_time = profile.kernel_time
    if profile.emulated or kernel_time is None or not kernel_time.available or kernel_time.kernels.empty:
        return {}
    rows = kernel_time.kernels.sort_values("samples", ascending=False, kind="stable")
    by_op: dict[str, list[dict[str, Any]]] = {}
    for row in rows.itertuples(index=False):
        by_op.setdefault(str(row.op), []).append(
            {"kernel": str(row.kernel), "share": float(row.share), "samples": int(row.samples), "kind": str(row.kind)}
        )
    return by_op


def _start_of(part: EventSpans) -> int:
    firsts = [int(part.execute_start.min())] if part.execute_start.size else []
    firsts += [span[0] for span in (part.load, part.init) if span is not None]
    return min(firsts) if firsts else 0


def _part_events(
    profile: "Profile",
    trace: ExecutionTrace,
    part: EventSpans,
    track: _Track,
    first_run: int,
    kernels: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Every slice of one runner process: load and init, its timed runs, delegate calls and operators."""
    unit = track.unit
    events: list[dict[str, Any]] = []
    for name, cat, span in ((LOAD, "load", part.load), (INIT, "init", part.init)):
        if span is not None:
            events.append(_slice(name, cat, span[0], span[1], track, {unit: span[1] - span[0]}))
    events += _run_events(profile, part, track, first_run)
    for begin, end in zip(part.delegate_start.tolist(), part.delegate_end.tolist()):
        events.append(_slice(DELEGATE, "delegate", begin, end, track, {unit: end - begin}))
    return events + _operator_events(trace, part, track, kernels)


def _run_events(profile: "Profile", part: EventSpans, track: _Track, first_run: int) -> list[dict[str, Any]]:
    """One slice per timed run (its Method::execute), in start order, named disturbed or throttled where it was."""
    events: list[dict[str, Any]] = []
    disturbed = set(profile.disturbed_run_indices)
    throttled = profile.throttled_runs
    order = np.argsort(part.execute_start, kind="stable")
    for local, index in enumerate(order.tolist()):
        run = first_run + local
        marks = [
            label
            for label, on in (
                ("disturbed", run in disturbed),
                ("throttled", throttled is not None and bool(throttled[run])),
            )
            if on
        ]
        name = f"run {run + 1}" + (f" ({', '.join(marks)})" if marks else "")
        begin, end = int(part.execute_start[index]), int(part.execute_end[index])
        args: dict[str, Any] = {
            "event": EXECUTE,
            "run_index": run,
            track.unit: end - begin,
            "disturbed": "disturbed" in marks,
            "throttled": "throttled" in marks,
        }
        events.append(_slice(name, ",".join(["run", *marks]), begin, end, track, args))
    return events


def _operator_events(
    trace: ExecutionTrace, part: EventSpans, track: _Track, kernels: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One slice per operator call, holding its sampled kernels sized by their share of its samples."""
    events: list[dict[str, Any]] = []
    for op, run, delegated, begin, end in zip(
        part.op.tolist(), part.op_run.tolist(), part.op_delegated.tolist(), part.op_start.tolist(), part.op_end.tolist()
    ):
        key = trace.ops[op]
        name = op_id(key)
        category = classify(key.name).category.value
        args: dict[str, Any] = {
            "category": category,
            "delegated": bool(delegated),
            "run_index": run,
            track.unit: end - begin,
        }
        events.append(_slice(name, category, begin, end, track, args))
        at = float(begin)
        for kernel in kernels.get(name, []):
            length = kernel["share"] * (end - begin)
            note: dict[str, Any] = {
                "samples": kernel["samples"],
                "share_of_operator": kernel["share"],
                "kind": kernel["kind"],
                "note": "a sampled share of the operator, drawn from its start; not a position",
            }
            events.append(_slice(kernel["kernel"], "kernel (sampled share)", at, at + length, track, note))
            at += length
    return events


def timeline_document(test_id: str, profiles: Sequence["Profile"]) -> dict[str, Any]:
    """The trace-event JSON object of one test's profiles (see the module docstring)."""
    events: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    axes = set()
    for number, profile in enumerate(profiles, start=1):
        trace, axis, why = _axis(profile)
        axes.add(axis)
        label = f"{profile.variant} · {profile.model} {profile.recipe}"
        if trace is None or why is not None:
            missing[profile.label] = why or ""
            events.append(_meta("process_name", number, None, {"name": f"{label} · no timeline: {why}"}))
            continue
        unit = "instructions" if axis == INSTRUCTION_AXIS else "ns"
        axis_note = " · axis: counted instructions (1 ns = 1 instruction)" if axis == INSTRUCTION_AXIS else ""
        events.append(_meta("process_name", number, None, {"name": label + axis_note}))
        events.append(_meta("process_sort_index", number, None, {"sort_index": number}))
        kernels = _kernels_by_op(profile)
        # the host target's Python worker serves several chunks; every other runner is a process per chunk
        chunk = "worker request" if profile.metadata.get("target", {}).get("name") == "host" else "runner process"
        first_run = 0
        for tid, part in enumerate(trace.span_parts, start=1):
            runs = int(part.execute_start.size)
            events.append(
                _meta("thread_name", number, tid, {"name": f"{chunk} {tid}: runs {first_run + 1}-{first_run + runs}"})
            )
            events.append(_meta("thread_sort_index", number, tid, {"sort_index": tid}))
            track = _Track(number, tid, _start_of(part), unit)
            events.extend(_part_events(profile, trace, part, track, first_run, kernels))
            first_run += runs
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    # parents before their children: by track, start, then the longer first
    slices.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    return {
        "traceEvents": meta + slices,
        "displayTimeUnit": "ns",
        "otherData": {
            "test": test_id,
            "axis": " / ".join(sorted(axes)),
            "generator": "pytest-sme2",
            **({"no_timeline": missing} if missing else {}),
        },
    }


def write_timeline(path: str | Path, test_id: str, profiles: Sequence["Profile"]) -> Path:
    """Write the test's timeline (never through a link: safe_files)."""
    return write_file(Path(path), json.dumps(timeline_document(test_id, profiles), separators=(",", ":")) + "\n")
