"""A history of the gate's quantities across sessions, and where they changed.

Baselines answer "is this run worse than the recorded one"; a history answers "when did it
get worse". Opt-in (``--sme2-history PATH``, ini ``sme2_history``): every perf test appends
one line per profile to a JSON Lines file: session, time, commit, target fingerprint, test,
variant and the quantities the gate reads. ``pytest-sme2 history PATH`` draws each series
and flags change points (``stats.change_points``).

Why JSON Lines: appends are one line each under an inter-process lock (safe under
pytest-xdist and concurrent jobs on one machine), files from separate CI jobs concatenate
into one history (``cat a.jsonl b.jsonl``), a history kept in a git branch diffs and merges
line by line, and pandas reads it directly (``pd.read_json(path, lines=True)``). SQLite
would lock better but is a binary file that merges in no branch and no artifact store.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from pytest_sme2.errors import UsageError
from pytest_sme2.profile import stats
from pytest_sme2.system.locks import locked
from pytest_sme2.system.regular_files import HISTORY, not_regular, open_checked
from pytest_sme2.system.safe_files import append_lines
from pytest_sme2.system.writable_folders import Place, check_writable

HISTORY_VERSION = 1
# Quantity -> (relative?, smallest change that counts): latencies and instructions relative, shares absolute.
# Counted quantities (instructions, memory) are exact, so any change counts; measured ones need 5% or 2 points.
QUANTITIES: dict[str, tuple[bool, float]] = {
    "median_ms": (True, 0.05),
    "relative_latency": (True, 0.05),
    "instructions_per_inference": (True, 0.0),
    "planned_memory_bytes": (True, 0.0),
    "delegation_coverage": (False, 0.02),
    "sme_path_share": (False, 0.05),
    "share_CONV": (False, 0.02),
    "share_GEMM": (False, 0.02),
    "share_DATA_MOVEMENT": (False, 0.02),
    "share_ELEMENTWISE": (False, 0.02),
    "share_OTHER": (False, 0.02),
}


def digest(test: str, entry: Mapping[str, Any], session: Mapping[str, Any]) -> dict[str, Any]:
    """One history line: a test's profile entry (the profile's one JSON form, Profile.to_dict) and its session's
    facts."""
    counted = entry.get("instructions") if entry.get("basis") == "instructions" else None
    emulated = bool(entry.get("emulated"))
    quantities: dict[str, float | None] = {
        # emulated time is the emulator's: never kept as latency
        "median_ms": None if emulated else (entry.get("latency") or {}).get("median_ms"),
        # a ratio (model / reference program per run pair): its summary keys carry no unit (stats.SampleStats.as_dict)
        "relative_latency": None if emulated else (entry.get("relative_latency") or {}).get("median"),
        "instructions_per_inference": (counted or {}).get("per_inference"),
        "planned_memory_bytes": (entry.get("memory") or {}).get("planned_bytes"),
        "delegation_coverage": entry.get("delegation_coverage"),
        "sme_path_share": entry.get("sme_path_share"),
    }
    quantities.update({f"share_{name}": value for name, value in (entry.get("shares") or {}).items()})
    return {
        "version": HISTORY_VERSION,
        **session,
        "test": test,
        "model": entry.get("model"),
        "recipe": entry.get("recipe"),
        "variant": entry.get("variant"),
        "emulated": emulated,
        "quantities": {k: v for k, v in quantities.items() if v is not None},
    }


def session_facts(rootdir: Path, session_dir: Path, target_fingerprint: str) -> dict[str, Any]:
    """What every line of one session shares: its id, time, the commit it tested, the target."""
    return {
        "session": session_dir.name,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(rootdir),
        "target": target_fingerprint,
    }


def _commit(rootdir: Path) -> str | None:
    """The checked-out commit of the project under test (with ``+dirty`` for local changes), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=rootdir, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=rootdir,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def check_path(path: Path) -> None:
    """UsageError before the first test if the history file could not be appended to, so a session
    never runs to the end and then drops its history line."""
    setting = "--sme2-history (or ini sme2_history)"
    if path.is_dir():
        raise UsageError(
            f"the history file {path} is a folder; point {setting} at a file, e.g. {path / 'history.jsonl'}"
        )
    kind = not_regular(path)
    if kind:  # a FIFO or a device: appending to one would fail only at the session's end
        raise UsageError(
            f"the history file {path} is {kind}, not a regular file; point {setting} at a regular "
            f"file (created if missing), e.g. {path.with_name('history.jsonl')}"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"the history file {path} is not writable; point {setting} at a file you can write")
    check_writable(Place("history file's folder", path.parent, setting))


def append(path: Path, lines: Iterable[Mapping[str, Any]]) -> None:
    """Append lines to the history under its lock, each whole and flushed to disk before the lock is released;
    never through a link (safe_files)."""
    text = [json.dumps(line, sort_keys=True) for line in lines]
    if not text:
        return
    with locked(path.with_name(path.name + ".lock")):
        append_lines(path, text)


@dataclass(frozen=True)
class Change:
    """A change point: from ``session`` on (its time and commit), ``quantity`` of one series moved."""

    test: str
    variant: str
    target: str
    quantity: str
    session: str
    time: str
    commit: str | None
    before: float
    after: float
    index: int  # position of the session in the series

    def __str__(self) -> str:
        commit = self.commit[:12] if self.commit else "unknown commit"
        return (
            f"{self.test} [{self.variant}, {self.target}] {self.quantity}: {self.before:.6g} -> {self.after:.6g} "
            f"from session {self.session} ({self.time}, {commit})"
        )


def load(path: Path, damaged: list[int] | None = None) -> list[dict[str, Any]]:
    """Every line of a history file. A damaged line (not JSON, nested too deeply, or not a history line)
    is an error naming the file and the line; given a ``damaged`` list, its number goes there instead
    and the rest of the file is still read (``pytest-sme2 history``: one bad line blocks nothing)."""
    if path.is_dir():
        raise UsageError(f"history {path} is a folder; give the JSON Lines file sessions write with --sme2-history")
    kind = not_regular(path)
    if kind:
        raise UsageError(
            f"history {path} is {kind}, not a regular file; give the JSON Lines file sessions write "
            "with --sme2-history"
        )
    if not path.is_file():
        raise UsageError(f"history {path} does not exist; sessions write it with --sme2-history {path}")
    rows = []
    with io.TextIOWrapper(open_checked(path, HISTORY), encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            problem = None
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                problem = f"is not JSON ({exc.msg}); remove or fix that line"
            except RecursionError:
                problem = "is nested too deeply to be a history line; remove that line"
            else:
                if (
                    not isinstance(row, dict)
                    or row.get("version") != HISTORY_VERSION
                    or not isinstance(row.get("quantities"), dict)
                    or not all(isinstance(row.get(k), str) for k in ("session", "test"))
                ):
                    problem = (
                        f"is not a pytest-sme2 history line (version {HISTORY_VERSION} with session, test and "
                        "quantities)"
                    )
            if problem is None:
                rows.append(row)
            elif damaged is not None:
                damaged.append(number)
            else:
                raise UsageError(f"history {path} line {number} {problem}")
    return rows


def series(
    rows: list[dict[str, Any]], dropped: list[str] | None = None
) -> dict[tuple[str, str, str, str], list[tuple[dict[str, Any], float]]]:
    """(test, variant, target, quantity) -> [(line, value)] in session order (time, then file order).
    Non-finite values (NaN, infinities: a broken run) are left out of their series, so they hide no
    change; each is described in ``dropped`` when given."""
    out: dict[tuple[str, str, str, str], list[tuple[dict[str, Any], float]]] = {}
    for row in sorted(rows, key=lambda r: str(r.get("time", ""))):
        for quantity, value in row["quantities"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                key = (row["test"], str(row.get("variant")), str(row.get("target")), quantity)
                if not np.isfinite(value):
                    if dropped is not None:
                        dropped.append(f"{quantity} = {value} of {row['test']} [{key[1]}] in session {row['session']}")
                    continue
                out.setdefault(key, []).append((row, float(value)))
    return out


def changes(rows: list[dict[str, Any]], dropped: list[str] | None = None) -> list[Change]:
    """Every change point of every series (the method: stats.change_points; effects per QUANTITIES)."""
    found = []
    for (test, variant, target, quantity), points in series(rows, dropped).items():
        relative, min_effect = QUANTITIES.get(quantity, (True, 0.05))
        values = np.array([value for _, value in points])
        cuts = stats.change_points(values, min_effect=min_effect, relative=relative)
        bounds = [0, *cuts, len(values)]
        for i, cut in enumerate(cuts):
            row = points[cut][0]
            found.append(
                Change(
                    test,
                    variant,
                    target,
                    quantity,
                    str(row["session"]),
                    str(row.get("time", "?")),
                    row.get("commit"),
                    float(np.median(values[bounds[i] : cut])),
                    float(np.median(values[cut : bounds[i + 2]])),
                    cut,
                )
            )
    return found
