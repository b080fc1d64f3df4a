"""A validator of the Trace Event Format's JSON Object Format (Google's "Trace Event Format" document, the
format Perfetto's UI and chrome://tracing import), for the parts pytest-sme2 writes.

Why our own: Perfetto's trace_processor Python package downloads its trace_processor_shell binary on first
use, which a machine without internet (CI here) cannot do. What is checked is what those importers need:
the top-level object, each event's required fields and types per phase, metadata names, and that complete
events on one thread nest (a slice that partly overlaps another is dropped or misdrawn by the importers).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = {"X", "M", "B", "E", "i", "I", "C"}
METADATA_NAMES = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
DISPLAY_UNITS = {"ms", "ns"}


class TraceFormatError(AssertionError):
    pass


def _number(event: dict[str, Any], key: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceFormatError(f"{key} of {event} is not a number")
    if value != value or value < 0:
        raise TraceFormatError(f"{key} of {event} is negative or NaN")
    return float(value)


def validate(document: Any) -> list[dict[str, Any]]:
    """The complete ("X") events of a valid document; TraceFormatError names the first problem."""
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TraceFormatError("the JSON Object Format needs an object with a traceEvents list")
    if document.get("displayTimeUnit", "ms") not in DISPLAY_UNITS:
        raise TraceFormatError(f"displayTimeUnit {document['displayTimeUnit']!r} is not ms or ns")
    slices = []
    for event in document["traceEvents"]:
        if not isinstance(event, dict) or event.get("ph") not in PHASES:
            raise TraceFormatError(f"{event} has no known phase")
        for key in ("pid",) + (("tid",) if event["ph"] != "M" or event.get("name", "").startswith("thread") else ()):
            if isinstance(event.get(key), bool) or not isinstance(event.get(key), int):
                raise TraceFormatError(f"{key} of {event} is not an integer")
        if not isinstance(event.get("name"), str):
            raise TraceFormatError(f"{event} has no name")
        if "args" in event and not isinstance(event["args"], dict):
            raise TraceFormatError(f"args of {event} is not an object")
        if event["ph"] == "M":
            if event["name"] not in METADATA_NAMES or not isinstance(event.get("args"), dict):
                raise TraceFormatError(f"metadata event {event} is not one the format defines")
        elif event["ph"] == "X":
            _number(event, "ts")
            _number(event, "dur")
            slices.append(event)
    _check_nesting(slices)
    return slices


def _check_nesting(slices: list[dict[str, Any]]) -> None:
    """On each thread, slices sorted by start (longer first on ties) must each end inside the open parent."""
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in slices:
        tracks[(event["pid"], event["tid"])].append(event)
    eps = 1e-6  # microseconds: float rounding of nanosecond positions
    for track in tracks.values():
        stack: list[tuple[float, dict[str, Any]]] = []
        for event in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            begin, end = event["ts"], event["ts"] + event["dur"]
            while stack and stack[-1][0] <= begin + eps:
                stack.pop()
            if stack and end > stack[-1][0] + eps:
                raise TraceFormatError(
                    f"{event['name']} [{begin}, {end}] overlaps {stack[-1][1]['name']} "
                    f"ending at {stack[-1][0]} without nesting in it"
                )
            stack.append((end, event))
