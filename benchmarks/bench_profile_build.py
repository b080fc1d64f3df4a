"""Time to build a Profile from a 100-run ETDump, against the 100 runs' own time.

Target: under 10% of the runs' own time (sum of their Method::execute).
ExecuTorch's Inspector (with the ETRecord) is timed on the same files for comparison.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import MODELS, machine, session

from pytest_sme2 import Profile, Recipe
from pytest_sme2.measure.runner import Runner
from pytest_sme2.run.targets import RunSpec


def _best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    from executorch.devtools import Inspector

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sess = session(Path(tmp))
        for name in MODELS:
            exported = sess.export(name, Recipe())
            profile = Runner(sess, RunSpec(runs=args.runs, warmup=3), sess.test_dir(name)).profile(exported)
            timed, warm = profile.artifacts["timed_etdump"], profile.artifacts["warmup_etdump"]
            build = _best_of(lambda: Profile.from_etdump(timed, warm), args.repeat)
            with_summary = _best_of(lambda: Profile.from_etdump(timed, warm).to_dict(), args.repeat)
            inspector = _best_of(
                lambda: Inspector(etdump_path=timed, etrecord=str(exported.etrecord_path)).to_dataframe(), 3
            )
            runs_time = float(profile.e2e_ms.sum()) / 1000
            events = int(profile.trace.op_values.shape[0])
            rows.append((name, events, runs_time, build, build / runs_time, with_summary, inspector))
        sess.close()
    print(f"machine: {machine()}")
    print(
        f"| model (fp32) | ops per run | {args.runs} runs' E2E (s) | Profile build (s) | build / runs | "
        "build + summary() (s) | Inspector+ETRecord (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, events, runs_time, build, ratio, with_summary, inspector in rows:
        print(
            f"| {name} | {events} | {runs_time:.3f} | {build:.4f} | {ratio:.1%} | {with_summary:.4f} "
            f"| {inspector:.3f} |"
        )


if __name__ == "__main__":
    main()
