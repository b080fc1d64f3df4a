"""How trustworthy is the baseline gate on this machine? False alarms and detection rate.

Three programs: mobilenet_v3_small fp32 as bundled; the same with a real extra
layers costing about 15% of its latency (copies of two of the network's own
inverted-residual blocks, as a model author adding layers would); and the same with one costing about 1% of
instructions (a slice and a 500 x 1000 linear layer added to the logits). Every gate decision is
``checks.latency.latency_verdict`` / ``checks.instructions.instruction_verdict``, what the plugin runs
after a test.

Latency (the default metric): M independent processes per program on the host
target at the default run count, each with pytest-sme2's reference program run
before every timed run. Every ordered pair (baseline process i, current
process j != i) of the unchanged model is one gate run that should pass: a
regression verdict there is a false alarm. Every pair (unchanged i, slowed j)
should fail: the share that does is the detection rate. Pairs share processes,
so they are not independent trials; the process counts are given. The same
records are judged twice: on relative latency (the plugin's gate) and with
the reference times dropped (raw milliseconds, the gate without the
reference), and again with the first n runs and other tolerances, to show what
run count and tolerance the targets need. ``--load K`` runs K background
processes (GEMMs and 32 MB copies) during the study, as other CI jobs would.

Instructions: K callgrind counts per program (``--sme2-metric=instructions``);
every pair of unchanged counts should pass and every (unchanged, +1%) pair
should fail.

Targets: latency at the default run count, false alarms <= 1% and a 15%
slowdown caught >= 95%; instructions, a 1% increase caught every time and no
false alarms.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import machine, session

from pytest_sme2 import Recipe
from pytest_sme2.gate import baselines
from pytest_sme2.gate.checks.instructions import instruction_verdict
from pytest_sme2.gate.checks.latency import latency_verdict
from pytest_sme2.gate.verdict import Tolerances
from pytest_sme2.measure.runner import Runner
from pytest_sme2.profile import stats
from pytest_sme2.run.callgrind import count_instructions
from pytest_sme2.run.targets import RunSpec

_VARIANT = '''
"""mobilenet_v3_small plus real extra layers, for the regression-gate study."""
import copy
import importlib.util

import torch

_spec = importlib.util.spec_from_file_location("_mobilenet_v3_small_base", {base!r})
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


class Slowed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = _base.get_eager_model()
        # The slowdown's knob: copies of the network's own shape-keeping inverted-residual blocks,
        # inserted after the originals (what a model author adding layers does).
        features = list(self.base.features)
        for index in sorted({extra_blocks}, reverse=True):
            features.insert(index + 1, copy.deepcopy(features[index]))
        self.base.features = torch.nn.Sequential(*features)
        self.head = torch.nn.Linear(500, 1000) if {head} else None

    def forward(self, x):
        y = self.base(x)
        return y + self.head(y[:, :500]) if self.head is not None else y


def get_eager_model():
    torch.manual_seed(1)
    return Slowed().eval()


def get_example_inputs():
    return _base.get_example_inputs()
'''
# plus15: copies of blocks 5 (40 channels at 14 x 14) and 10 (96 channels at 7 x 7); plus1: a 500 x 1000 linear
# layer on the logits.
SLOWED = {
    "mobilenet_v3_small_plus15": {"extra_blocks": [5, 10], "head": False},
    "mobilenet_v3_small_plus1": {"extra_blocks": [], "head": True},
}


def _session(root: Path):  # noqa: ANN202
    """A fresh session (and so a fresh host worker process) with the slowed variants registered."""
    sess = session(root)
    folder = root / "models"
    folder.mkdir(parents=True, exist_ok=True)
    base = str(Path(__file__).resolve().parent.parent / "models" / "mobilenet_v3_small.py")
    for name, params in SLOWED.items():
        (folder / f"{name}.py").write_text(_VARIANT.format(base=base, **params))
    sess.registry.register_dir(folder)
    return sess


def _load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f}/{five:.1f}/{fifteen:.1f}"


def _rates(
    base: list[dict], slow: list[dict], runs: int, tol: Tolerances, relative: bool
) -> tuple[float, float, int, int]:
    """``relative=False`` judges the same records with their reference times dropped: the raw-latency gate."""

    def cut(record: dict) -> dict:
        reference = record["reference_ms"][:runs] if relative and record.get("reference_ms") else None
        return {**record, "samples_ms": record["samples_ms"][:runs], "reference_ms": reference}

    def regressed(current: dict, baseline: dict) -> bool:
        return latency_verdict("m", cut(current), cut(baseline), tol).failed

    null = [(i, j) for i, j in itertools.permutations(range(len(base)), 2)]
    alarms = sum(regressed(base[j], base[i]) for i, j in null)
    caught = sum(regressed(s, b) for b in base for s in slow)
    return alarms / len(null), caught / (len(base) * len(slow)), len(null), len(base) * len(slow)


def _start_load(count: int) -> list[subprocess.Popen]:
    """``count`` single-threaded processes doing GEMMs and 32 MB copies: other CI jobs on the machine."""
    code = (
        "import numpy as np\na = np.random.rand(600, 600); b = np.random.rand(4_000_000)\n"
        "while True:\n    a @ a; b.copy()\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(count)]


def latency_study(root: Path, processes: int, runs: int, warmup: int, load: int = 0) -> dict:
    """Each profile in its own session, so in its own host worker process, as in separate CI jobs."""
    records: dict[str, list[dict]] = {"base": [], "slow": []}
    background = _start_load(load)
    names = {"base": "mobilenet_v3_small", "slow": "mobilenet_v3_small_plus15"}
    seconds: list[float] = []
    loads = [_load_average()]
    try:
        for i in range(processes):  # alternate the programs so machine drift hits both alike
            for key, name in names.items():
                sess = _session(root)
                try:
                    pte = sess.export(name, Recipe())
                    runner = Runner(sess, RunSpec(runs=runs, warmup=warmup), sess.test_dir(f"{key}-{i}"))
                    started = time.perf_counter()
                    records[key].append(baselines.record_of(runner.profile(pte)).to_json())
                    seconds.append(time.perf_counter() - started)
                finally:
                    sess.close()
            loads.append(_load_average())
    finally:
        for process in background:
            process.kill()
            process.wait()
    medians = {k: [float(np.median(r["samples_ms"])) for r in v] for k, v in records.items()}
    relative = {
        k: [float(np.median(stats.per_run_ratio(r["samples_ms"], r["reference_ms"]))) for r in v]
        for k, v in records.items()
    }
    table = []
    for n in sorted({5, 10, 20, runs}):
        if n > runs:
            continue
        for latency in (0.05, 0.10, 0.15):
            for basis in ("relative", "raw"):
                fa, det, n_null, n_alt = _rates(
                    records["base"], records["slow"], n, Tolerances(latency=latency), relative=basis == "relative"
                )
                table.append(
                    {
                        "runs": n,
                        "tolerance": latency,
                        "basis": basis,
                        "false_alarms": fa,
                        "detected": det,
                        "null_pairs": n_null,
                        "slowed_pairs": n_alt,
                    }
                )
    return {
        "processes_per_program": processes,
        "runs": runs,
        "warmup": warmup,
        "background_load_processes": load,
        "seconds_per_profile_median": float(np.median(seconds)),  # worker start + warmup + runs
        "true_slowdown_raw": float(np.median(medians["slow"]) / np.median(medians["base"]) - 1),
        "true_slowdown_relative": float(np.median(relative["slow"]) / np.median(relative["base"]) - 1),
        "replica_medians_ms": medians,
        "process_relative_medians": relative,
        "between_process_spread_ms": {k: [float(min(v)), float(max(v))] for k, v in medians.items()},
        "between_process_spread_relative": {k: [float(min(v)), float(max(v))] for k, v in relative.items()},
        "load_averages": loads,
        "table": table,
    }


def instruction_study(root: Path, counts: int, inferences: int, tolerance: float) -> dict:
    sess = _session(root)
    results: dict[str, list[float]] = {}
    seconds = []
    for name in ("mobilenet_v3_small", "mobilenet_v3_small_plus1"):
        pte = sess.export(name, Recipe())
        results[name] = []
        for k in range(counts):
            count = count_instructions(
                pte.path, pte.inputs_path, sess.settings.session_dir / f"ir-{name}-{k}", inferences=inferences
            )
            results[name].append(count.per_inference)
            seconds.append(count.seconds)
    base, slow = results["mobilenet_v3_small"], results["mobilenet_v3_small_plus1"]
    tol = Tolerances(instructions=tolerance)

    def regressed(current: float, baseline: float) -> bool:
        return instruction_verdict(
            "m", {"instructions": {"per_inference": current}}, {"instructions": {"per_inference": baseline}}, tol
        ).failed

    null = list(itertools.permutations(range(len(base)), 2))
    return {
        "counts_per_program": counts,
        "inferences": inferences,
        "tolerance": tolerance,
        "per_inference": results,
        "max_relative_spread_unchanged": float((max(base) - min(base)) / min(base)),
        "increase": float(np.median(slow) / np.median(base) - 1),
        "false_alarms": sum(regressed(base[j], base[i]) for i, j in null) / len(null),
        "detected": sum(regressed(s, b) for b in base for s in slow) / (len(base) * len(slow)),
        "seconds_per_count_median": float(np.median(seconds)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=25, help="latency: profiles (processes) per program")
    parser.add_argument("--runs", type=int, default=20, help="latency: timed runs per profile (the host default)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--counts", type=int, default=3, help="instructions: callgrind counts per program")
    parser.add_argument("--inferences", type=int, default=5, help="instructions: N of (Ir(N) - Ir(1)) / (N - 1)")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(".sme2/bench-regression-gate"),
        help="work folder (export cache kept between runs)",
    )
    parser.add_argument("--skip", choices=("latency", "instructions"), default=None)
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="latency: background processes (GEMMs and memory copies) running during the study",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    out = {"machine": machine(), "load_average_at_start": _load_average()}
    if args.skip != "latency":
        out["latency"] = latency_study(args.work, args.processes, args.runs, args.warmup, args.load)
    if args.skip != "instructions":
        out["instructions"] = instruction_study(args.work, args.counts, args.inferences, Tolerances().instructions)
    out["seconds"] = time.perf_counter() - started
    out["load_average_at_end"] = _load_average()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
