"""Is the emulated target's evidence deterministic? The perf suite N times, every counted quantity compared.

Runs ``pytest perf_tests -m sme2 --sme2-target=emulated`` N times in fresh sessions (the export cache is
shared, as on a developer's machine) and, per test and variant, compares across sessions: the
instruction count of every ETDump event (load, init, every operator, DELEGATE_CALL, Method::execute),
the SME instructions of every event, shares and delegation coverage by instructions, the SME path share
by work, planned memory and the SME kernels that executed. Prints how many quantities were compared
and every one that differed, with its spread. Then times one variant with and without counting.

Each session runs against the committed baselines (the gate as a user runs it), so it also counts
how many sessions the gate passed. Run it beside background jobs to check that load moves nothing:

    ../shared/tools/with-load 2 -- python benchmarks/bench_emulated_determinism.py --sessions 5

or compare sessions that already ran, e.g. ten ``make perf`` from a fresh clone, each beside two
busy jobs (their folders are under .sme2/artifacts/):

    python benchmarks/bench_emulated_determinism.py --from CLONE/.sme2/artifacts/session-* --no-timing
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import REPO, machine


def run_suite(root: Path, index: int, tests: list[str]) -> tuple[Path, float]:
    """One session of the perf suite (or the ``tests`` given); its artifacts folder and wall time."""
    artifacts = root / f"artifacts-{index}"
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *tests,
            "-m",
            "sme2",
            "-q",
            "-p",
            "no:cacheprovider",
            "--sme2-target=emulated",
            f"--sme2-artifacts-dir={artifacts}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"session {index} could not run (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return max(artifacts.glob("session-*"), key=lambda p: p.stat().st_mtime), seconds


def outcomes(summary: dict) -> dict[str, int]:
    """How many tests of a session passed, failed and were skipped."""
    return dict(Counter(test["outcome"] for test in summary["tests"]))


def quantities(summary: dict) -> dict[str, object]:
    """Every deterministic quantity of a session (its summary.json), keyed by test, variant and name."""
    found: dict[str, object] = {}
    for test in summary["tests"]:
        for profile in test["profiles"]:
            key = f"{test['nodeid']} [{profile['variant']} {profile['recipe']}]"
            counted = profile.get("instructions") or {}
            for name in ("per_inference", "sme_per_inference", "shares", "delegation_coverage", "load", "init"):
                found[f"{key} {name}"] = counted.get(name)
            found[f"{key} sme_path_share ({profile.get('sme_path_basis')})"] = profile.get("sme_path_share")
            found[f"{key} planned memory"] = (profile.get("memory") or {}).get("planned_bytes")
            found[f"{key} SME kernels"] = profile.get("executed_sme_kernels")
            path = (profile.get("metadata") or {}).get("instruction_counts")
            if path and Path(path).exists():
                files = json.loads(Path(path).read_text())["files"]
                for file_name, counts in files.items():
                    for i, (ins, sme) in enumerate(zip(counts["instructions"], counts["sme"])):
                        found[f"{key} {file_name} event {i}"] = (ins, sme)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument(
        "--tests",
        nargs="+",
        default=["perf_tests"],
        help="test files or ids to run each session (default: the whole perf suite)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--timing-test",
        default="perf_tests/test_mobilenet_v3_small.py::test_mobilenet_structure",
        help="test whose variants are timed with and without counting",
    )
    parser.add_argument(
        "--from",
        dest="sessions_from",
        nargs="+",
        type=Path,
        default=None,
        help="compare these session folders (already run) instead of running sessions",
    )
    parser.add_argument("--no-timing", action="store_true", help="skip timing a variant with and without counting")
    args = parser.parse_args()
    result: dict[str, object] = {"machine": machine(), "load_average_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders, seconds = [], []
        if args.sessions_from:
            folders = sorted(args.sessions_from)
            unfinished = [str(f) for f in folders if not (f / "summary.json").is_file()]
            if unfinished:
                raise SystemExit(f"no summary.json (session not finished?) in: {', '.join(unfinished)}")
        else:
            for index in range(args.sessions):
                folder, took = run_suite(root, index, args.tests)
                folders.append(folder)
                seconds.append(took)
                print(f"session {index}: {took:.0f} s", flush=True)
        summaries = [json.loads((folder / "summary.json").read_text()) for folder in folders]
        sessions = [quantities(summary) for summary in summaries]
        keys = set().union(*sessions)
        differing = {
            k: [s.get(k) for s in sessions]
            for k in sorted(keys)
            if any(s.get(k) != sessions[0].get(k) for s in sessions)
        }
        result.update(
            {
                "tests": args.tests if not args.sessions_from else "as run",
                "session_folders": [str(f) for f in folders],
                "sessions": len(folders),
                "session_seconds": seconds,
                "outcomes": [outcomes(summary) for summary in summaries],
                "quantities": len(keys),
                "differing": differing,
            }
        )
        timing = {}
        for label, extra in () if args.no_timing else (("counted", []), ("not counted", ["--sme2-no-kernel-trace"])):
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    args.timing_test,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "--sme2-target=emulated",
                    "--sme2-no-baselines",
                    f"--sme2-artifacts-dir={root / 'timing'}",
                    *extra,
                ],
                cwd=REPO,
                capture_output=True,
            )
            timing[label] = time.perf_counter() - started
        if timing:
            result["timing_test"] = args.timing_test
            result["timing_seconds"] = timing
    result["load_average_at_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(
        f"{result['quantities']} quantities compared over {result['sessions']} sessions; "
        f"{len(result['differing'])} differed; outcomes per session: {result['outcomes']}"
    )
    for key, values in list(result["differing"].items())[:20]:
        print(f"  {key}: {values}")
    if timing:
        print(f"{args.timing_test}: {timing['counted']:.0f} s counted, {timing['not counted']:.0f} s not counted")


if __name__ == "__main__":
    main()
