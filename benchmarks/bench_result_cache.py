"""The perf suite with a cold and a warm result cache (issue 25): what an unchanged counted run costs.

Runs ``pytest perf_tests/ -m sme2`` on the emulated target three times against one fresh cache folder:
cold (every export and counted run computed), warm (exports and counted runs answered from the caches),
and warm with ``--sme2-fresh`` (exports cached, every counted run emulated again), and records each
session's wall time, outcome counts and how many counted runs came from the result cache (progress.log).
Results go to --out as JSON; docs/performance.md has the current figures. ``--workers N`` runs each session
in N pytest-xdist workers, as ``make perf`` does on the emulated target (one per core up to 4): the figure issue
56 holds to 3 minutes cold.

    python benchmarks/bench_result_cache.py --out benchmarks/results/result_cache_<date>.json [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine


def _session(cache: Path, artifacts: Path, extra: list[str], workers: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "perf_tests/",
        "-m",
        "sme2",
        "-q",
        "-p",
        "no:cacheprovider",
        "--sme2-target=emulated",
        f"--sme2-cache-dir={cache}",
        f"--sme2-artifacts-dir={artifacts}",
        *(["-n", str(workers)] if workers > 1 else []),
        *extra,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    logs = sorted(artifacts.glob("session-*/progress.log"), key=lambda p: p.stat().st_mtime)
    progress = logs[-1].read_text() if logs else ""
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return {
        "command": " ".join(command[1:]),
        "exit": done.returncode,
        "seconds": round(seconds, 1),
        "result": last,
        "counted_runs": len(re.findall(r"\] done: ", progress)),
        "from_result_cache": len(re.findall(r"from the result cache \(key ", progress)),
        "exports_from_cache": len(re.findall(r" from cache \(key ", progress)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (1: one process)")
    parser.add_argument(
        "--keep", type=Path, help="an empty folder to keep the caches and sessions in (progress.log per session)"
    )
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists() and not args.keep.is_dir():
        parser.error(f"--keep {args.keep}: not a folder; name an empty or new folder")
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        parser.error(f"--keep {args.keep}: not empty (the cold session needs empty caches)")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)  # the sessions' folders go inside it
    with tempfile.TemporaryDirectory(prefix="sme2-result-cache-") as temporary:
        scratch = args.keep or temporary
        cache, artifacts = Path(scratch) / "cache", Path(scratch) / "artifacts"
        result = {"machine": machine(), "workers": args.workers, "sessions": {}}
        for name, extra in (("cold", []), ("warm", []), ("warm_fresh", ["--sme2-fresh"])):
            result["sessions"][name] = _session(cache, artifacts, extra, args.workers)
            print(name, result["sessions"][name], flush=True)
            args.out.write_text(json.dumps(result, indent=1))  # saved as it comes


if __name__ == "__main__":
    main()
