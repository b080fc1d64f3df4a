"""Counts from the counting plugin against counts from qemu's execution log, run by run (issue 63).

The emulated target counts either inside the emulator (pytest-sme2's TCG plugin on the qemu setup-emulation
builds from Debian's source package) or from qemu-user 11.1's execution log. Both must give the same counts:
per ETDump event, its instructions, SME and SVE instructions, every instruction class and its top functions.
This runs each bundled model and recipe, SME2 on and off, both ways (no result cache), and compares the two
counts files field by field; it prints one line per run, the first difference where there is one, and each
way's wall and CPU seconds (qemu and its children), and exits 1 if any run differs.

    python benchmarks/counting_equality.py [--models toy_cnn,mlp] [--recipes fp32,int8] [--json OUT]

Not a timed benchmark: the counts do not depend on load. The seconds are printed for orientation only.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine

from pytest_sme2 import Recipe
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget

# The perf suite's variants (perf_tests/): model -> recipes
SUITE = {
    "toy_cnn": ("fp32", "fp16", "int8"),
    "mlp": ("fp32", "int8", "int8-dynamic"),
    "mobilenet_v3_small": ("fp32", "fp16", "int8"),
    "transformer_encoder": ("fp32", "int8"),
    "tiny_llama": ("fp32",),
    "tiny_llama_portable": ("fp32", "int8-8da4w"),
}


def recipe_of(text: str) -> Recipe:
    dtype, _, quant = text.partition("-")
    return Recipe(dtype, quant or None)


def start_offset(log: dict, plugin: dict) -> int | None:
    """How many instructions later the plugin's events begin than the log's, when that is the same for every
    event (a start-up difference before the first event: the timeline's axis moves, no count does); None if the
    offsets differ between events."""
    offsets = {
        b - a
        for part in log["files"]
        for a, b in zip(log["files"][part].get("starts", []), plugin["files"].get(part, {}).get("starts", []))
    }
    return offsets.pop() if len(offsets) == 1 else None


def log_line_noise(log: dict, plugin: dict) -> str | None:
    """When the two differ only in warmup events and only in libc's functions by under 0.01% of the warmup:
    ExecuTorch's log lines printed with a timestamp during load and init, which move by a few hundred instructions
    between any two runs, counted either way (docs/performance.md, determinism). None otherwise."""
    a, b = log["files"].get("warmup"), plugin["files"].get("warmup")
    if a is None or b is None or log["files"].get("timed") is None:
        return None
    for key in ("instructions", "sme", "sve", "classes", "functions"):
        if log["files"]["timed"].get(key) != plugin["files"]["timed"].get(key):
            return None
    moved, events = 0, 0
    for i, (x, y) in enumerate(zip(a["instructions"], b["instructions"])):
        fa, fb = a["functions"][i], b["functions"][i]
        changed = {k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)}
        if x == y and not changed:
            continue
        if not all(k.startswith("libc.so.6:") for k in changed):
            return None
        moved, events = moved + abs(x - y), events + 1
    if events == 0 or moved > 1e-4 * max(1, sum(a["instructions"])):
        return None
    return f"equal but for ExecuTorch's timestamped log lines: {moved:,} instructions in {events} warmup event(s)"


def first_difference(log: dict, plugin: dict) -> str | None:
    """Where two counts files differ first in a count (None: equal in every count: instructions, SME, SVE,
    every class and the top functions of every event; where events begin is compared by start_offset)."""
    for part in sorted(set(log["files"]) | set(plugin["files"])):
        a, b = log["files"].get(part), plugin["files"].get(part)
        if a is None or b is None:
            return f"{part}: only one way has it"
        for key in sorted((set(a) | set(b)) - {"starts"}):
            if a.get(key) != b.get(key):
                left, right = a.get(key), b.get(key)
                if isinstance(left, list) and isinstance(right, list):
                    at = next((i for i, (x, y) in enumerate(zip(left, right)) if x != y), min(len(left), len(right)))
                    shown = (left[at] if at < len(left) else None, right[at] if at < len(right) else None)
                    return f"{part}.{key}[{at}]: log {shown[0]!r}, plugin {shown[1]!r}"
                if isinstance(left, dict) and isinstance(right, dict):
                    inner = next(k for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k))
                    return f"{part}.{key}.{inner} differs"
                return f"{part}.{key} differs"
    return None


def counted(target: EmulatedTarget, pte: Path, spec: RunSpec, out: Path) -> tuple[dict, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = target.run(pte, None, spec, out)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(Path(result.evidence["instruction_counts"]).read_text()), wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--recipes", default="", help="only these recipes (default: each model's suite recipes)")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    status = emulation_setup.status()
    if not status.ready or status.plugin_header is None or status.log_qemu is None:
        print(f"needs both ways set up (`pytest-sme2 setup-emulation`): {status.problem or status.counting_note()}")
        return 2
    print(f"machine: {machine()}; plugin qemu {status.qemu}, log qemu {status.log_qemu}")
    rows, differ = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        session = Sme2Session(Settings(target="emulated", cache_dir=args.cache_dir, session_dir=work / "session"))
        session.registry.register_dir(REPO / "models")
        wanted = set(filter(None, args.recipes.split(",")))
        for model in args.models.split(","):
            for text in SUITE[model]:
                if wanted and text not in wanted:
                    continue
                pte = Path(session.export(model, recipe_of(text)))
                for sme2 in (True, False):
                    spec = RunSpec(sme2=sme2, runs=1, warmup=1, etdump=True)
                    name = f"{model} {text} sme2={'on' if sme2 else 'off'}"
                    answers = {}
                    for way in ("log", "plugin"):
                        target = EmulatedTarget(work / way, status=status, options=EmulatedOptions(counting=way))
                        answers[way] = counted(target, pte, spec, work / "runs" / name.replace(" ", "_") / way)
                    difference = first_difference(answers["log"][0], answers["plugin"][0])
                    offset = start_offset(answers["log"][0], answers["plugin"][0])
                    noise = None if difference is None else log_line_noise(answers["log"][0], answers["plugin"][0])
                    if noise is not None:
                        difference = None
                    if offset is None and difference is None and noise is None:
                        difference = "where events begin moves by different amounts"
                    differ += difference is not None
                    log_files, plugin_files = answers["log"][0]["files"], answers["plugin"][0]["files"]
                    total = sum(sum(part["instructions"]) for part in plugin_files.values())
                    row = {
                        "run": name,
                        "equal": difference is None,
                        "start_offset": offset,
                        "note": noise,
                        "difference": difference,
                        "events": sum(len(part["instructions"]) for part in log_files.values()),
                        "instructions": total,
                        "log_wall_s": round(answers["log"][1], 2),
                        "log_cpu_s": round(answers["log"][2], 2),
                        "plugin_wall_s": round(answers["plugin"][1], 2),
                        "plugin_cpu_s": round(answers["plugin"][2], 2),
                    }
                    rows.append(row)
                    print(
                        f"{name}: {(noise or 'equal') if difference is None else 'DIFFERENT: ' + difference}"
                        + (f" (events begin {-offset:,} instructions earlier); " if offset is not None else "; ")
                        + f"{row['events']} events, {total:,} instructions counted in events; log "
                        f"{row['log_wall_s']} s wall / {row['log_cpu_s']} s CPU, plugin {row['plugin_wall_s']} s / "
                        f"{row['plugin_cpu_s']} s",
                        flush=True,
                    )
    print(f"{len(rows) - differ} of {len(rows)} counted runs equal")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), "runs": rows}, indent=1) + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
