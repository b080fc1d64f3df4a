"""Kernel sampling (issue 14): what the sampled process costs, how much sampling slows a run, how well it attributes.

On the local target (the native runner under Linux perf), per round: one normal profile
(timed runs, ETDump on, no reference program between runs) and its sampled process (same runner,
program and settings, under ``perf record -e cpu-clock``). Rounds repeat, so machine drift
hits both alike. Reported:
- slowdown by sampling: median Method::execute of the sampled processes' runs over the
  normal rounds' runs (both from their ETDumps), with a bootstrap interval;
- cost: seconds of a profile with sampling on and off (the extra round, perf's start and
  ``perf script``);
- attribution: per category, sampled ms per run over ETDump ms per run; the mean share of
  the top kernel in convolutions and GEMMs with at least 20 samples.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import REPO, machine

from pytest_sme2 import Recipe
from pytest_sme2.evidence.etdump import read_run
from pytest_sme2.evidence.kernel_sampling import SamplingSettings
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.profile.stats import ratio_of_medians_ci
from pytest_sme2.run.targets import RunSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--hz", type=float, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    sampling = SamplingSettings(period_ns=int(round(1e9 / args.hz)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # No reference program between runs: it slows the model's next run by a few percent (cache), and the
        # sampled process runs none, so with it the comparison would mix the two effects.
        sess = Sme2Session(
            Settings(
                target="local",
                cache_dir=REPO / ".sme2" / "cache",
                session_dir=root / "artifacts",
                latency_reference=False,
            )
        )
        sess.registry.register_dir(REPO / "models")
        exported = sess.export(args.model, Recipe(dtype=args.dtype))
        runner = Runner(sess, RunSpec(runs=args.runs, warmup=3, max_rounds=1), sess.test_dir("sampling"))
        plain_ms, sampled_ms, seconds_off, seconds_on, ratios, purity = [], [], [], [], {}, []
        for _ in range(args.rounds):
            sess.settings = replace(sess.settings, kernel_sampling=None)
            started = time.perf_counter()
            runner.profile(exported)
            seconds_off.append(time.perf_counter() - started)
            sess.settings = replace(sess.settings, kernel_sampling=sampling)
            started = time.perf_counter()
            profile = runner.profile(exported)
            seconds_on.append(time.perf_counter() - started)
            kernels = profile.kernel_time
            if kernels is None or not kernels.available:
                raise SystemExit(f"no kernel time: {kernels.problem if kernels else 'sampling off'}")
            plain_ms.extend(profile.e2e_ms)
            sampled_ms.extend(read_run(kernels.artifacts["etdump"]).execute_values)
            by_category = kernels.ops.groupby("category")[["sampled_ms_per_run", "etdump_ms_per_run"]].sum()
            for category, row in by_category.iterrows():
                ratios.setdefault(category, []).append(row["sampled_ms_per_run"] / row["etdump_ms_per_run"])
            heavy = kernels.ops[kernels.ops["category"].isin(["CONV", "GEMM"]) & (kernels.ops["samples"] >= 20)]
            purity.append(float(np.mean([kernels.kernels_of(op).iloc[0]["share"] for op in heavy["op"]])))
        sess.close()
    slowdown = ratio_of_medians_ci(sampled_ms, plain_ms)
    result = {
        "machine": machine(),
        "model": f"{args.model} {args.dtype}",
        "rounds": args.rounds,
        "runs": args.runs,
        "rate_hz": args.hz,
        "median_execute_ms": {"normal": float(np.median(plain_ms)), "sampled": float(np.median(sampled_ms))},
        "slowdown_by_sampling": {"ratio": slowdown.value, "low": slowdown.low, "high": slowdown.high},
        "profile_seconds": {"sampling_off": float(np.median(seconds_off)), "sampling_on": float(np.median(seconds_on))},
        "sampled_over_etdump_by_category": {
            c: [float(min(v)), float(np.median(v)), float(max(v))] for c, v in ratios.items()
        },
        "top_kernel_share_conv_gemm": [float(min(purity)), float(np.median(purity)), float(max(purity))],
    }
    print(f"machine: {result['machine']}")
    print(f"{result['model']}, local target, {args.rounds} rounds x {args.runs} runs, {args.hz:g} Hz")
    print(
        f"median Method::execute: normal {result['median_execute_ms']['normal']:.3f} ms, "
        f"sampled {result['median_execute_ms']['sampled']:.3f} ms; sampling slows a run by "
        f"{slowdown.value - 1:+.2%} [{slowdown.low - 1:+.2%}, {slowdown.high - 1:+.2%}]"
    )
    print(
        f"one profile: {result['profile_seconds']['sampling_off']:.2f} s with sampling off, "
        f"{result['profile_seconds']['sampling_on']:.2f} s on"
    )
    for category, (low, mid, high) in sorted(result["sampled_over_etdump_by_category"].items()):
        print(f"  {category:14s} sampled / ETDump per run: median {mid:.3f} (rounds {low:.3f}-{high:.3f})")
    low, mid, high = result["top_kernel_share_conv_gemm"]
    print(f"mean top-kernel share of CONV/GEMM operators: median {mid:.3f} (rounds {low:.3f}-{high:.3f})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
