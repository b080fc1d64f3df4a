"""What counting costs: a counted run's start-up and a counted inference, against the same run emulated uncounted.

Counting runs the program under qemu's execution log (`-d in_asm,exec,nochain`) piped to exec_counter, and
the log costs about a microsecond per executed block (a formatted line and a write(2) each). This times the
same runner command, SME2 on, under qemu with:

  plain     no logging (what an uncounted emulated run costs)
  nochain   `-d nochain`: every translated block returns to qemu's main loop (no log written)
  exec      `-d exec,nochain -D /dev/null`: one log line per executed block, thrown away
  logged    `-d in_asm,exec,nochain -D /dev/null`: the whole log, thrown away
  pipe      the whole log into a FIFO read by a reader that discards it (no parsing)
  lazy      the log into a FIFO read by exec_counter, symbols bound lazily and the loader logged (counting
            before issue 56)
  counted   the emulated target's counted run: every symbol bound at start-up and the loader left out of the
            log (run/guest_loader.py), into a FIFO read by exec_counter

Per mode and repeat: the start-up is the runner started with `--version` (it answers after the dynamic loader
and every library's static constructors ran, which is all the runner does before its first counted event but
runtime_init); then the program runs twice, with 1 and with 1 + --more timed inferences after one warmup, and a
counted inference costs the difference over the extra inferences. Each figure is given in CPU seconds (user +
system of qemu and the log reader, the operating system's accounting: a busy machine inflates it far less than
the wall clock) and in wall seconds. Repeats interleave the modes, so load falls on all of them alike; the
minimum per mode is kept. The counted modes also report how many blocks the log carried (exec_counter's count:
exact, not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, machine

from pytest_sme2 import Recipe
from pytest_sme2.evidence.qemu_counts import QEMU_LOG_FLAGS
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.native.build import build_count_plugin, build_exec_counter
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget

MODES = ("plain", "plugin", "plugin_other", "plain11", "nochain", "exec", "logged", "pipe", "lazy", "counted")
_READ_BY_COUNTER = ("lazy", "counted")
# what each counted mode is measured against: the same qemu, uncounted
_BASELINE = {"plugin": "plain", "plugin_other": "plain", "lazy": "plain11", "counted": "plain11"}
# mode plugin_other: another build of the counting plugin (--other-plugin), e.g. the previous source's, timed in the
# same repeats as this source's (mode plugin), so a change to count_plugin.c is measured A against B
OTHER_PLUGIN: list[Path] = []


def _command(
    target: EmulatedTarget, status: emulation_setup.EmulationStatus, pte: Path, work: Path, mode: str, runs: int
) -> list[str]:
    """The runner under qemu in ``mode``; ``runs`` 0: the runner's start-up alone (`--version`)."""
    setarch = shutil.which("setarch") or "setarch"
    qemu = target.emulator_command(RunSpec(sme2=True))
    fifo = str(work / "log.fifo")
    if mode == "counted":
        prefix, _ = target.counted_prefix(qemu, setarch, fifo)
    elif mode == "plugin":
        prefix, _, _ = target.plugin_prefix(qemu, setarch, build_count_plugin(status.plugin_header), work)
    elif mode == "plugin_other":
        prefix, _, _ = target.plugin_prefix(qemu, setarch, OTHER_PLUGIN[0], work)
    elif mode == "plain":
        prefix = [setarch, "-R", *qemu]
    else:
        logging = {
            "plain11": [],
            "nochain": ["-d", "nochain"],
            "exec": ["-d", "exec,nochain", "-D", "/dev/null"],
            "logged": [*QEMU_LOG_FLAGS, "-D", "/dev/null"],
            "pipe": [*QEMU_LOG_FLAGS, "-D", fifo],
            "lazy": [*QEMU_LOG_FLAGS, "-D", fifo],
        }[mode]
        prefix = [setarch, "-R", *qemu, *logging]
    if runs == 0:
        return [*prefix, str(status.runner), "--version"]
    return [
        *prefix,
        str(status.runner),
        f"--model_path={pte}",
        f"--num_executions={runs}",
        "--warmup=1",
        "--cpu_threads=1",
        f"--outputs_path={work / 'outputs.bin'}",
        f"--etdump_path={work / 'timed.etdp'}",
        f"--warmup_etdump_path={work / 'warmup.etdp'}",
    ]


def time_mode(
    target: EmulatedTarget, status: emulation_setup.EmulationStatus, pte: Path, mode: str, runs: int
) -> tuple[float, float, int | None]:
    """(wall seconds, CPU seconds, blocks the log carried or None) of one runner start in ``mode``."""
    arena = {"MALLOC_ARENA_MAX": "1"} if mode.startswith("plugin") else {}
    env = {"QEMU_LD_PREFIX": str(emulation_setup.SYSROOT), **arena}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        command = _command(target, status, pte, work, mode, runs)  # outside the timing: the loader probe
        counter = None
        if mode in ("pipe", *_READ_BY_COUNTER):
            os.mkfifo(work / "log.fifo")
            reader = (
                [str(build_exec_counter()), str(work / "blocks.tsv"), str(work / "seq.u32"), str(work / "log.fifo")]
                if mode in _READ_BY_COUNTER
                else ["dd", "bs=1M", "of=/dev/null", "status=none", f"if={work / 'log.fifo'}"]
            )
            counter = subprocess.Popen(reader, stderr=subprocess.PIPE)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work)
        blocks = None
        if mode.startswith("plugin"):  # the plugin's last line: "count_plugin: N blocks, M executions, complete"
            found = re.search(r"count_plugin: \d+ blocks, (\d+) executions", done.stderr.decode(errors="replace"))
            blocks = int(found.group(1)) if found else None
        if counter is not None:
            _, errors = counter.communicate(timeout=600)
            if counter.returncode != 0:
                raise SystemExit(f"the log reader failed: {errors.decode()}")
            found = re.search(r"(\d+) executions", errors.decode())
            blocks = int(found.group(1)) if found else None
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime, blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--recipe", default="fp32")
    parser.add_argument("--more", type=int, default=2, help="extra timed inferences of the second run")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--other-plugin", type=Path, help="mode plugin_other's counting plugin library (a .so)")
    args = parser.parse_args()
    print(machine(), f"load average {os.getloadavg()[0]:.1f}", flush=True)
    status = emulation_setup.status(build=True)
    if not status.ready:
        raise SystemExit(f"emulated target not ready: {status.problem}")
    with tempfile.TemporaryDirectory() as scratch:
        session = Sme2Session(Settings(target="emulated", cache_dir=args.cache_dir, session_dir=Path(scratch)))
        session.registry.register_dir(REPO / "models")
        pte = Path(session.export(args.model, Recipe(args.recipe)))
        in_emulator = status.plugin_header is not None
        by_log = EmulatedTarget(Path(scratch) / "logs", status=status, options=EmulatedOptions(counting="log"))
        by_plugin = (
            EmulatedTarget(Path(scratch) / "logs", status=status, options=EmulatedOptions(counting="plugin"))
            if in_emulator
            else None
        )
        modes = args.modes.split(",")
        if "plugin_other" in modes:
            if args.other_plugin is None or not args.other_plugin.is_file():
                raise SystemExit("mode plugin_other needs --other-plugin PATH, a built counting plugin library")
            OTHER_PLUGIN.append(args.other_plugin)
        if by_plugin is None and {"plain", "plugin", "plugin_other"} & set(modes):
            raise SystemExit(f"modes plain and plugin need the qemu built with plugins: {status.counting_note()}")
        counts = (0, 1, 1 + args.more)
        wall: dict[str, dict[int, list[float]]] = {m: {n: [] for n in counts} for m in modes}
        cpu: dict[str, dict[int, list[float]]] = {m: {n: [] for n in counts} for m in modes}
        blocks: dict[str, dict[int, int | None]] = {m: {} for m in modes}
        loads = []
        for _ in range(args.repeat):
            for mode in modes:
                for runs in counts:
                    loads.append(os.getloadavg()[0])
                    in_plugin_qemu = mode in ("plain", "plugin", "plugin_other") and by_plugin is not None
                    target = by_plugin if in_plugin_qemu else by_log
                    seconds, used, logged = time_mode(target, status, pte, mode, runs)
                    wall[mode][runs].append(seconds)
                    cpu[mode][runs].append(used)
                    blocks[mode][runs] = logged
    rows = {}
    for mode in modes:
        row: dict[str, object] = {"blocks_logged": blocks[mode], "wall_s": wall[mode], "cpu_s": cpu[mode]}
        for clock, measured in (("cpu", cpu[mode]), ("wall", wall[mode])):
            row[f"startup_{clock}_s"] = min(measured[0])
            row[f"inference_{clock}_s"] = max(min(measured[1 + args.more]) - min(measured[1]), 0.0) / args.more
        rows[mode] = row
        logged = blocks[mode].get(0)
        print(
            f"{mode:8s} start-up {row['startup_cpu_s']:6.2f} s cpu {row['startup_wall_s']:6.2f} s wall   "
            f"inference {row['inference_cpu_s']:6.2f} s cpu {row['inference_wall_s']:6.2f} s wall"
            + (
                f"   blocks logged: start-up {logged:,}, inference "
                f"{(blocks[mode][1 + args.more] - blocks[mode][1]) // args.more:,}"
                if logged is not None
                else ""
            ),
            flush=True,
        )
    for clock in ("cpu", "wall"):
        for mode, against in _BASELINE.items():
            plain = rows.get(against)
            if plain and mode in rows and plain[f"inference_{clock}_s"] > 0 and plain[f"startup_{clock}_s"] > 0:
                print(
                    f"{mode}: a counted inference costs "
                    f"{rows[mode][f'inference_{clock}_s'] / plain[f'inference_{clock}_s']:.2f}x "
                    f"the uncounted one ({against}), its start-up "
                    f"{rows[mode][f'startup_{clock}_s'] / plain[f'startup_{clock}_s']:.2f}x ({clock})",
                    flush=True,
                )
        if "lazy" in rows and "counted" in rows and rows["counted"][f"startup_{clock}_s"] > 0:
            print(
                f"start-up ({clock}): counted {rows['counted'][f'startup_{clock}_s']:.2f} s against "
                f"{rows['lazy'][f'startup_{clock}_s']:.2f} s lazily bound with the loader logged "
                f"({rows['lazy'][f'startup_{clock}_s'] / rows['counted'][f'startup_{clock}_s']:.1f}x less)"
            )
    print(f"load average during the runs: {min(loads):.1f}-{max(loads):.1f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "model": args.model,
                    "recipe": args.recipe,
                    "more": args.more,
                    "load_average": [min(loads), max(loads)],
                    "modes": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
