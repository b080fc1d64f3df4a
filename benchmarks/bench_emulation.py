"""Cost of the emulated SME2 target: setup, and the SME2 on+off pair per bundled model.

Setup: `pytest-sme2 setup-emulation --force` into an empty runner cache (qemu
download from Debian, aarch64 executorch wheel, cross build), timed, with the
disk it leaves. Pairs: for each bundled model and the recipes the perf tests
use, one SME2-on and one SME2-off profile at the emulated target's default run
count (2 timed runs, no warmup) plus the kernel trace, exports taken from a
warm cache (export cost is the host's and is measured by bench_export_cache.py).
Target: the whole `pytest perf_tests/ -m sme2` on a 2-core machine under 10 minutes;
run that separately with `time` (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine

from pytest_sme2 import Recipe
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run.targets import RunSpec

PAIRS = [
    ("toy_cnn", Recipe("fp32")),
    ("toy_cnn", Recipe("fp16")),
    ("toy_cnn", Recipe("int8")),
    ("mlp", Recipe("fp32")),
    ("mlp", Recipe("int8")),
    ("mlp", Recipe("int8", "dynamic")),
    ("mobilenet_v3_small", Recipe("fp32")),
    ("mobilenet_v3_small", Recipe("fp16")),
    ("mobilenet_v3_small", Recipe("int8")),
    ("transformer_encoder", Recipe("fp32")),
    ("transformer_encoder", Recipe("int8")),
]


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_setup() -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "PYTEST_SME2_RUNNER_CACHE": scratch}
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pytest_sme2.cli import main; " "sys.exit(main(['setup-emulation']))",
            ],
            env=env,
            check=True,
        )
        seconds = time.perf_counter() - start
        cache = Path(scratch)
        return {
            "seconds": seconds,
            "total_mb": _disk(cache) / 1e6,
            "qemu_mb": _disk(cache / "qemu") / 1e6,
            "wheel_and_runner_mb": (_disk(cache) - _disk(cache / "qemu")) / 1e6,
        }


def bench_pairs(cache_dir: Path) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        session = Sme2Session(Settings(target="emulated", cache_dir=cache_dir, session_dir=Path(scratch)))
        session.registry.register_dir(REPO / "models")
        runs, warmup = session.default_runs()
        for model, recipe in PAIRS:
            exported = session.export(model, recipe)
            row = {"model": model, "recipe": recipe.label, "runs": runs}
            for sme2 in (True, False):
                runner = Runner(
                    session, RunSpec(sme2=sme2, runs=runs, warmup=warmup), session.test_dir(f"{model}-{recipe.label}")
                )
                start = time.perf_counter()
                profile = runner.profile(exported)
                row[f"{'on' if sme2 else 'off'}_s"] = time.perf_counter() - start
                row[f"{'on' if sme2 else 'off'}_sme_kernels"] = len(profile.executed_sme_kernels or ())
            row["pair_s"] = row["on_s"] + row["off_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=REPO / ".sme2" / "cache",
        help="export cache to take the programs from (exported first if missing)",
    )
    parser.add_argument("--skip-setup", action="store_true")
    args = parser.parse_args()
    print(machine())
    if not args.skip_setup:
        setup = bench_setup()
        print(
            f"setup: {setup['seconds']:.0f} s, {setup['total_mb']:.0f} MB on disk "
            f"(qemu {setup['qemu_mb']:.0f} MB, aarch64 wheel parts + runner {setup['wheel_and_runner_mb']:.0f} MB)"
        )
    rows = bench_pairs(args.cache_dir)
    print("\n| model | recipe | SME2 on (s) | SME2 off (s) | pair (s) | SME kernels named on / off |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['recipe']} | {r['on_s']:.1f} | {r['off_s']:.1f} | {r['pair_s']:.1f} | "
            f"{r['on_sme_kernels']} / {r['off_sme_kernels']} |"
        )
    print(f"| all | | | | {sum(r['pair_s'] for r in rows):.1f} | |")


if __name__ == "__main__":
    main()
