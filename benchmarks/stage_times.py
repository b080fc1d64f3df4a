"""Where a finished pytest-sme2 session spent its time, by stage, from its progress.log (issue 25).

    python benchmarks/stage_times.py .sme2/artifacts/session-*/ [--wall SECONDS] [--json OUT]

Every export (or export-cache lookup, whose time is the trace that keys the cache) and every run the
plugin announces ends with a line saying how long it took; this adds them up per stage, and per pytest-xdist
worker where there were several. With ``--wall`` (the session's wall time, e.g. pytest's "in N s") the rest
(pytest and torch start-up, collection, gating, reports) is what is left of the workers' time. On the
emulated target a run's seconds are emulation and instruction counting together (the log reader runs
beside qemu, on its output as it is written); a run answered from the result cache is counted apart.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

_WORKER = r"(?:\[(?P<worker>gw\d+)\] )?"
_EXPORTED = re.compile(_WORKER + r"sme2: .+ exported \(key [0-9a-f]+\) in (?P<s>[\d.]+) s")
_EXPORT_CACHED = re.compile(_WORKER + r"sme2: .+ from cache \(key [0-9a-f]+\) in (?P<s>[\d.]+) s")
_RUN = re.compile(
    _WORKER + r"sme2: .+\[(?P<target>\w+) sme2=\w+ threads=\d+\] done: .*?"
    r"(?P<cached> from the result cache)?(?: \(key [0-9a-f]+\))? in (?P<s>[\d.]+) s"
)


def stage_times(progress_log: Path) -> dict[str, dict[str, float]]:
    """{stage: {"count": n, "seconds": s}} over the session, and per worker under "workers"."""
    stages: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "seconds": 0.0})
    workers: dict[str, float] = defaultdict(float)
    for line in progress_log.read_text(errors="replace").splitlines():
        line = line.split(" ", 1)[1] if re.match(r"\d\d:\d\d:\d\d ", line) else line
        for stage, pattern in (("export", _EXPORTED), ("export from cache", _EXPORT_CACHED), ("run", _RUN)):
            match = pattern.search(line)
            if match is None:
                continue
            if stage == "run":
                kind = "counted run" if match.group("target") == "emulated" else "timed run"
                stage = kind + (" from the result cache" if match.group("cached") else "")
            seconds = float(match.group("s"))
            stages[stage]["count"] += 1
            stages[stage]["seconds"] += seconds
            workers[match.group("worker") or "main"] += seconds
            break
    return {**{k: dict(v) for k, v in stages.items()}, "workers": dict(workers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session", type=Path, help="a session folder (holding progress.log)")
    parser.add_argument("--wall", type=float, help="the session's wall time in seconds")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    times = stage_times(args.session / "progress.log")
    workers = times.pop("workers")
    for stage, value in sorted(times.items()):
        print(f"{stage:38s} {int(value['count']):4d} x  {value['seconds']:8.1f} s")
    busy = sum(workers.values())
    print(f"{'announced work, all workers':38s}        {busy:8.1f} s  ({len(workers)} worker(s))")
    if args.wall:
        rest = args.wall * len(workers) - busy
        print(f"{'the rest (start-up, gate, reports)':38s}        {rest:8.1f} s  (wall {args.wall:.1f} s x workers)")
    if args.json:
        args.json.write_text(json.dumps({"stages": times, "workers": workers, "wall": args.wall}, indent=1))


if __name__ == "__main__":
    main()
