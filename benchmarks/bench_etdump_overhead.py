"""ETDump tracing overhead: timing-only runs vs ETDump runs of mobilenet_v3_small (fp32, 1 thread).

Rounds alternate the two modes in the same runtime process so drift hits both.
Two numbers per round:
- reported-latency overhead: median(Method::execute from the ETDump) /
  median(untraced wall clock) - 1. This is what tracing does to the latency a
  Profile reports. The untraced wall clock also holds the Python call, so this
  slightly understates the overhead inside Method::execute.
- wall-clock overhead: median(traced wall) / median(untraced wall) - 1, which
  adds the ETDump bookkeeping outside Method::execute.
Target: under 2% of the median latency.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _common import machine, session

from pytest_sme2 import Recipe
from pytest_sme2.measure.runner import Runner
from pytest_sme2.profile.stats import median_ci, ratio_of_medians_ci
from pytest_sme2.run.targets import RunSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--model", default="mobilenet_v3_small")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sess = session(Path(tmp))
        exported = sess.export(args.model, Recipe())
        runner = Runner(sess, RunSpec(runs=args.runs, warmup=5), sess.test_dir("overhead"))
        per_round, reported_round, timing_all, etdump_all, execute_all = [], [], [], [], []
        for _ in range(args.rounds):
            timings = runner.time(exported)
            profile = runner.profile(exported)
            per_round.append(np.median(profile.wall_ms) / np.median(timings.wall_ms) - 1)
            reported_round.append(np.median(profile.e2e_ms) / np.median(timings.wall_ms) - 1)
            timing_all.extend(timings.wall_ms)
            etdump_all.extend(profile.wall_ms)
            execute_all.extend(profile.e2e_ms)
        sess.close()
    pooled = ratio_of_medians_ci(etdump_all, timing_all)
    rounds = median_ci(per_round)
    reported = median_ci(reported_round)
    reported_pooled = ratio_of_medians_ci(execute_all, timing_all)
    print(f"machine: {machine()}")
    print(f"model {args.model} fp32, 1 thread, {args.rounds} rounds x {args.runs} runs per mode")
    print(
        f"median wall latency, timing only: {np.median(timing_all):.3f} ms; with ETDump: {np.median(etdump_all):.3f} ms"
    )
    print(f"median Method::execute from ETDump: {np.median(execute_all):.3f} ms")
    print(
        f"reported-latency overhead per round (median of {args.rounds}): {reported.value:+.2%} "
        f"[{reported.low:+.2%}, {reported.high:+.2%}]; pooled {reported_pooled.value - 1:+.2%} "
        f"[{reported_pooled.low - 1:+.2%}, {reported_pooled.high - 1:+.2%}]"
    )
    print(
        f"wall-clock overhead per round (median of {args.rounds}): {rounds.value:+.2%} "
        f"[{rounds.low:+.2%}, {rounds.high:+.2%}]"
    )
    print(
        f"wall-clock pooled overhead: {pooled.value - 1:+.2%} [{pooled.low - 1:+.2%}, {pooled.high - 1:+.2%}] (95% CI)"
    )
    print(f"per-round reported-latency overheads: {', '.join(f'{x:+.2%}' for x in reported_round)}")
    print(f"per-round wall-clock overheads: {', '.join(f'{x:+.2%}' for x in per_round)}")


if __name__ == "__main__":
    main()
