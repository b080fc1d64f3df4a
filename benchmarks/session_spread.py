"""How far an unchanged program's time-based quantities move between sessions, beyond their spread between the
processes of one session: the between-session spread the gate allows for (gate/session_spread.py).

A baseline's processes are measured back to back, so their spread says how much a fresh process moves the
level, not how much the machine moves it between the baseline's minute and a check an hour later under other
work. This reads what the false-alarm study recorded (study_false_alarms.py: baseline folders and unchanged
sessions per target and condition), takes each session's level of each quantity (the mean of its process
medians, as the gate's t-test does) and splits the variance of those levels into the part the processes
explain and the rest: a one-way random-effects estimate (method of moments; sessions unbalanced),

    between-session variance = var(session levels) - mean(within-session variance / processes),

clipped at zero. Latency is the relative latency's log (a ratio); shares are in points.

    python benchmarks/session_spread.py [--work .sme2/false-alarms] [--json] [--before TIME]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO  # noqa: E402

from pytest_sme2.gate.checks.replica_stats import clean_runs, per_run, replica_medians  # noqa: E402
from pytest_sme2.gate.record import upgraded  # noqa: E402
from pytest_sme2.profile import stats  # noqa: E402

WORK = REPO / ".sme2" / "false-alarms"


def _test_name(text: str) -> str:
    return text.split("[", 1)[1].rstrip("]") if "[" in text else text


def sessions(root: Path, before: str | None) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(session id, test, record) of every session's profiles (summary.json) under ``root``: the baseline
    updates' sessions (their processes are what the baseline files keep) and the unchanged sessions."""
    for summary in sorted((root / ".sme2" / "artifacts").glob("session-*/summary.json")):
        stamp = summary.parent.name.split("-", 1)[1][:15]
        if before and stamp >= before:
            continue
        for test in json.loads(summary.read_text()).get("tests") or []:
            for profile in test.get("profiles") or []:
                if profile.get("emulated") or not profile.get("e2e_ms"):
                    continue
                record = upgraded({**profile, "samples_ms": profile["e2e_ms"]}, 1)  # an older session's keys too
                yield summary.parent.name, _test_name(test["nodeid"]), record


def quantities(record: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Quantity -> this record's process medians (latency: the log of the relative latency; shares: points)."""
    relative = stats.per_run_ratio(record["samples_ms"], record.get("reference_ms"))
    clean = clean_runs(record, with_reference=relative is not None)
    latency = relative if relative is not None else np.asarray(record["samples_ms"], dtype=float)
    sizes = record.get("replica_sizes") or [len(latency)]
    found: dict[str, np.ndarray] = {}
    medians, _ = stats.replica_medians(latency, sizes, clean)
    if medians.size and np.all(medians > 0):
        found["latency"] = np.log(medians)
    for category in sorted(record.get("shares") or {}):
        values = per_run(record, "shares", category)
        if values is not None:
            shares, _ = replica_medians(record, values, clean & np.isfinite(values))
            if shares.size:
                found[f"share of {category}"] = shares * 100
    return found


def spread(levels: list[np.ndarray]) -> dict[str, Any] | None:
    """The between-session and within-session spread of one quantity from its sessions' process medians."""
    levels = [v for v in levels if v.size]
    if len(levels) < 3:
        return None
    means = np.array([v.mean() for v in levels])
    within = [v.var(ddof=1) for v in levels if v.size >= 2]
    pooled = float(np.mean(within)) if within else 0.0
    explained = float(np.mean([pooled / v.size for v in levels]))
    between = max(0.0, float(means.var(ddof=1)) - explained)
    return {
        "sessions": len(levels),
        "processes": int(sum(v.size for v in levels)),
        "within_sd": float(np.sqrt(pooled)),
        "between_sd": float(np.sqrt(between)),
        "largest_step": float(means.max() - means.min()),
    }


def table(work: Path, before: str | None) -> list[dict[str, Any]]:
    rows = []
    for root in sorted(p for p in work.iterdir() if p.is_dir()):
        target, _, condition = root.name.partition("-")
        per: dict[tuple[str, str], list[np.ndarray]] = defaultdict(list)
        for _session, test, record in sessions(root, before):
            for what, medians in quantities(record).items():
                per[(test, what)].append(medians)
        for (test, what), levels in sorted(per.items()):
            found = spread(levels)
            if found:
                rows.append({"target": target, "condition": condition, "test": test, "quantity": what, **found})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=WORK, help="the study's work folders (target-condition)")
    parser.add_argument("--before", help="only sessions started before this time (YYYYMMDD-HHMMSS, UTC)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = table(args.work, args.before)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| target | condition | test | quantity | sessions (processes) | within sd | between sd | largest step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        unit = "%" if r["quantity"] == "latency" else " pts"
        scale = 100 if r["quantity"] == "latency" else 1
        print(
            f"| {r['target']} | {r['condition']} | {r['test']} | {r['quantity']} | {r['sessions']} "
            f"({r['processes']}) | {r['within_sd'] * scale:.2f}{unit} | {r['between_sd'] * scale:.2f}{unit} | "
            f"{r['largest_step'] * scale:.2f}{unit} |"
        )


if __name__ == "__main__":
    main()
