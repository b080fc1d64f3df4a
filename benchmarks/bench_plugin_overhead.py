"""What a perf test costs beyond its own runs: the plugin's overhead per test, with no report asked for.

A pytest session of N tests, each profiling one variant of a model on the host target (defaults: 40
runs, reference program on), is run in a subprocess, as a user runs it. For each test, the time pytest
spent on it (setup + call + teardown, from its JUnit XML) minus the time the target spent running the
program (``run_seconds`` in the profile's metadata: runs, reference runs, worker round trip) is the
plugin's own cost: building the Profile, the baseline gate, the report record, pytest-benchmark's result.

Target (issue 11): at most 0.3 s per test beyond its runs when no report is asked for. The first test
of a session also pays for the host worker's start (importing ExecuTorch) and is shown apart.

    python benchmarks/bench_plugin_overhead.py --tests 10 --model mobilenet_v3_small
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
from _common import REPO, machine

TEST = """
import pytest


@pytest.mark.parametrize("n", range({tests}))
@pytest.mark.model("{model}")
def test_profile(n, exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def session(root: Path, model: str, tests: int, extra: list[str]) -> dict:
    (root / "test_overhead.py").write_text(TEST.format(tests=tests, model=model))
    (root / "pytest.ini").write_text(
        textwrap.dedent(f"""
        [pytest]
        sme2_model_dirs = {REPO / 'models'}
        sme2_target = host
        sme2_cache_dir = {root / 'cache'}
        sme2_baseline_missing = warn
        filterwarnings = ignore
        """)
    )
    junit = root / "junit.xml"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra],
        cwd=root,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    durations = [float(case.get("time")) for case in ET.parse(junit).getroot().iter("testcase")]
    newest = max((root / ".sme2" / "artifacts").glob("session-*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(newest.read_text())
    run_seconds = [p["metadata"]["run_seconds"] for t in summary["tests"] for p in t["profiles"]]
    overhead = np.array(durations) - np.array(run_seconds)
    later = overhead[1:] if overhead.size > 1 else overhead
    return {
        "wall_s": wall,
        "test_s": durations,
        "run_s": run_seconds,
        "overhead_s": overhead.tolist(),
        "first_test_overhead_s": float(overhead[0]),
        "overhead_s_median_after_first": float(np.median(later)),
        "overhead_s_max_after_first": float(np.max(later)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = {"machine": machine(), "model": args.model, "tests": args.tests}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session(root, args.model, 1, [])  # export once, so no test below pays for it
        results["no_report"] = session(root, args.model, args.tests, [])
        results["with_html_report"] = session(
            root, args.model, args.tests, [f"--html={root / 'report.html'}", "--self-contained-html"]
        )
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    for key in ("no_report", "with_html_report"):
        r = results[key]
        print(
            f"{key}: overhead per test beyond its runs: median {r['overhead_s_median_after_first']:.3f} s, "
            f"max {r['overhead_s_max_after_first']:.3f} s (first test {r['first_test_overhead_s']:.2f} s, "
            f"incl. the worker's start); runs took {np.median(r['run_s']):.3f} s per test; session {r['wall_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
