"""A session of very many runs (issue 64): its peak memory, its artifacts' size, and the synthetic ETDump writer.

A review ran mlp with 150,000 timed runs on the local target: 5 minutes, 2.2 GB peak, 350 MB of artifacts (the
86 MB ETDump stored twice, a 178 MB timeline CSV), and the tests' ETDump writer took 121 s for 200,000 events.
This runs such a session on toy_cnn (``pytest perf_tests/test_toy_cnn.py::test_toy_cnn_is_fully_delegated
--sme2-target=local --sme2-runs=N --sme2-max-rounds=1``; mlp takes about 8 ms a run here) in a fresh artifacts
folder under ``/usr/bin/time -v`` and records wall time, the session's peak resident memory, the artifacts' bytes
on disk (a hard link counted once, as ``du`` counts it) and the largest files; then times the synthetic writer
on 200,000 and 1,000,000 events.

    python benchmarks/bench_many_runs.py --runs 150000 --out benchmarks/results/many_runs_<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine


def _session(runs: int, root: Path) -> dict:
    command = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "pytest",
        "perf_tests/test_toy_cnn.py::test_toy_cnn_is_fully_delegated",
        "-q",
        "-p",
        "no:cacheprovider",
        "--sme2-target=local",
        f"--sme2-runs={runs}",
        f"--sme2-cache-dir={root / 'cache'}",
        f"--sme2-artifacts-dir={root / 'artifacts'}",
        "--sme2-timeout=3600",
        "--sme2-max-rounds=1",  # one process of N runs: a busy machine must not add extra rounds
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    files = [p for p in (root / "artifacts").rglob("*") if p.is_file() and not p.is_symlink()]
    inodes: dict[tuple[int, int], Path] = {}
    for path in files:
        st = path.stat()
        inodes.setdefault((st.st_dev, st.st_ino), path)
    largest = sorted(inodes.values(), key=lambda p: p.stat().st_size, reverse=True)[:5]
    return {
        "runs": runs,
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(int(peak.group(1)) / 1024, 1) if peak else None,
        "artifacts_mb": round(sum(p.stat().st_size for p in inodes.values()) / 2**20, 1),
        "largest": {str(p.relative_to(root / "artifacts")): round(p.stat().st_size / 2**20, 1) for p in largest},
        "tail": done.stdout.strip().splitlines()[-1:] if done.stdout else [],
    }


def _writer(events: int, folder: Path) -> dict:
    from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump

    per_run = [SyntheticEvent(10 + i, 20 + i, delegate_name=f"GEMM #{i}", instruction_id=1) for i in range(9)]
    per_run.append(SyntheticEvent(5, 40, name="Method::execute"))
    blocks = [("Execute", per_run)] * (events // len(per_run))
    started = time.perf_counter()
    path = write_synthetic_etdump(folder / f"w{events}.etdp", blocks)
    seconds = round(time.perf_counter() - started, 2)
    return {"events": events, "seconds": seconds, "mb": round(path.stat().st_size / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="many-runs-") as folder:
        root = Path(folder)
        result = {"machine": machine(), "session": _session(args.runs, root)}
        print(json.dumps(result["session"], indent=1), flush=True)
        result["writer"] = [_writer(n, root) for n in (200_000, 1_000_000)]
        print(json.dumps(result["writer"], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    os.sync()


if __name__ == "__main__":
    main()
