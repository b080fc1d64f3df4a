"""A real model through the emulated target as a session runs it: export, then counted runs SME2 on and off.

Prints and writes (JSON) each step's wall and CPU seconds, the peak memory of the exporting process and of each
counted run's qemu, the size of the session's folder and the export cache entry, the program's work (MACs) and the
instructions counted. Run it alone on an idle machine for figures that mean anything (`uptime` is printed).

    python benchmarks/bench_real_model.py --model efficient_sam_1024 [--warmup 1] [--runs 1] [--json OUT]
    python benchmarks/bench_real_model.py --model wav2letter --json OUT     (benchmarks/models/wav2letter.py)

A step that fails or exceeds --timeout is recorded as such and the next one still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

from _common import REPO, machine

from pytest_sme2 import Recipe
from pytest_sme2.export.work import program_work
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def children_usage() -> tuple[float, int]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime, used.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficient_sam_1024")
    parser.add_argument("--recipe", default="fp32")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3000)
    parser.add_argument("--counting", default="plugin")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-real-model"))
    parser.add_argument("--variants", default="on,off", help="SME2 settings to count: on,off (default), on, off")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    status = emulation_setup.status()
    record: dict = {
        "machine": machine(),
        "load_average_at_start": os.getloadavg(),
        "model": args.model,
        "recipe": args.recipe,
        "warmup": args.warmup,
        "runs": args.runs,
        "counting": args.counting,
        "steps": {},
    }

    def save() -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(record, indent=1) + "\n")

    print(f"{record['machine']}; load average {os.getloadavg()[0]:.1f}", flush=True)
    session = Sme2Session(Settings(target="emulated", cache_dir=args.cache_dir, session_dir=args.work / "session"))
    session.registry.register_dir(REPO / "models")
    session.registry.register_dir(REPO / "benchmarks" / "models")  # wav2letter, squeeze_sam: benchmark models only
    started = time.perf_counter()
    cpu0 = time.process_time()
    try:
        exported = session.export(args.model, Recipe(args.recipe))
    except Exception as exc:  # noqa: BLE001
        record["steps"]["export"] = {"error": f"{type(exc).__name__}: {exc}"}
        save()
        raise
    record["steps"]["export"] = {
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(time.process_time() - cpu0, 1),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "from_cache": exported.from_cache,
        "pte_bytes": exported.path.stat().st_size,
        "entry_bytes": folder_size(exported.path.parent),
    }
    work = program_work(exported.path)
    macs = sum(w.macs for nodes in work.delegate_nodes.values() for _, w in nodes if w.macs == w.macs)
    macs += sum(w.macs for w in work.portable.values() if w.macs == w.macs)
    record["macs"] = macs
    print(f"export: {record['steps']['export']}; {macs / 1e9:.2f} GMAC", flush=True)
    save()
    for sme2 in [{"on": True, "off": False}[v] for v in args.variants.split(",")]:
        name = f"sme2_{'on' if sme2 else 'off'}"
        target = EmulatedTarget(
            args.work / "logs", status=status, options=EmulatedOptions(counting=args.counting, fresh=True)
        )
        last = [0]
        target.progress = lambda done, *_: last.__setitem__(0, done)
        cpu_before, _ = children_usage()
        began = time.perf_counter()
        out = args.work / name
        spec = RunSpec(sme2=sme2, runs=args.runs, warmup=args.warmup, timeout_s=args.timeout)
        step: dict = {}
        try:
            result = target.run(exported.path, exported.inputs_path, spec, out)
            counts = json.loads(Path(result.evidence["instruction_counts"]).read_text())
            step["instructions_in_events"] = {k: sum(v["instructions"]) for k, v in counts["files"].items()}
        except Exception as exc:  # noqa: BLE001 - recorded; the next step still runs
            step["error"] = f"{type(exc).__name__}: {str(exc)[-600:]}"
            traceback.print_exc()
        cpu_after, peak = children_usage()
        step.update(
            wall_s=round(time.perf_counter() - began, 1),
            cpu_s=round(cpu_after - cpu_before, 1),
            peak_child_rss_bytes=peak,
            last_progress_instructions=last[0],
            folder_bytes=folder_size(out) if out.exists() else 0,
        )
        record["steps"][name] = step
        print(f"{name}: {step}", flush=True)
        save()
    record["session_folder_bytes"] = folder_size(args.work)
    record["load_average_at_end"] = os.getloadavg()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
