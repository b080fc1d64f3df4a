"""Where the cost of counting goes: one emulated inference under qemu, with each part of counting added.

Issue 25 item 3 asks whether counting can cost less. Counting runs the inference under qemu's
execution log (`-d in_asm,exec,nochain`) piped to exec_counter. This times, for one exported
program and SME2 on, the same runner command under qemu with:

  plain     no logging (what an uncounted emulated run costs)
  nochain   `-d nochain`: every translated block returns to qemu's main loop (no log written)
  exec      `-d exec,nochain -D /dev/null`: one log line per executed block, thrown away
  logged    `-d in_asm,exec,nochain -D /dev/null`: today's log, thrown away
  pipe      today's log into a FIFO read by a reader that discards it (no parsing)
  counted   today's log into a FIFO read by exec_counter (today's counting)

so the price of each ingredient (unchained execution, formatting the log, moving it through a
pipe, parsing it) is the difference of two rows. qemu flushes its log after every line (one
write(2) per executed block: `strace -c` counts 3.3 million for one mobilenet inference), which is
why the pipe row costs what it does. Minimum of --repeat runs each; machine and date printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pytest_sme2 import Recipe
from pytest_sme2.evidence.qemu_counts import QEMU_LOG_FLAGS
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.native.build import build_exec_counter

from _common import REPO, machine

MODES = ("plain", "nochain", "exec", "logged", "pipe", "counted")


def _command(status: emulation_setup.EmulationStatus, pte: Path, work: Path, mode: str, runs: int) -> list[str]:
    qemu = [str(status.qemu), "-cpu", emulation_setup.svl_cpu(emulation_setup.DEFAULT_SVL_BITS)]
    logging = {"plain": [], "nochain": ["-d", "nochain"], "exec": ["-d", "exec,nochain", "-D", "/dev/null"],
               "logged": [*QEMU_LOG_FLAGS, "-D", "/dev/null"],
               "pipe": [*QEMU_LOG_FLAGS, "-D", str(work / "log.fifo")],
               "counted": [*QEMU_LOG_FLAGS, "-D", str(work / "log.fifo")]}[mode]
    return [shutil.which("setarch") or "setarch", "-R", *qemu, *logging, str(status.runner),
            f"--model_path={pte}", f"--num_executions={runs}", "--warmup=0", "--cpu_threads=1",
            f"--outputs_path={work / 'outputs.bin'}", f"--etdump_path={work / 'timed.etdp'}",
            f"--warmup_etdump_path={work / 'warmup.etdp'}"]


def time_mode(status: emulation_setup.EmulationStatus, pte: Path, mode: str, runs: int) -> float:
    env = {"QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        counter = None
        if mode in ("pipe", "counted"):
            os.mkfifo(work / "log.fifo")
            reader = [str(build_exec_counter()), str(work / "blocks.tsv"), str(work / "seq.u32")] \
                if mode == "counted" else ["dd", "bs=1M", "of=/dev/null", "status=none"]
            counter = subprocess.Popen([*reader, str(work / "log.fifo")] if mode == "counted"
                                       else [*reader, f"if={work / 'log.fifo'}"], stderr=subprocess.PIPE)
        start = time.perf_counter()
        subprocess.run(_command(status, pte, work, mode, runs), env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if counter is not None:
            _, errors = counter.communicate(timeout=600)
            if counter.returncode != 0:
                raise SystemExit(f"the log reader failed: {errors.decode()}")
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--recipe", default="fp32")
    parser.add_argument("--runs", type=int, default=1, help="timed inferences per runner start")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    print(machine(), flush=True)
    status = emulation_setup.status(build=True)
    if not status.ready:
        raise SystemExit(f"emulated target not ready: {status.problem}")
    with tempfile.TemporaryDirectory() as scratch:
        session = Sme2Session(Settings(target="emulated", cache_dir=args.cache_dir, session_dir=Path(scratch)))
        session.registry.register_dir(REPO / "models")
        pte = Path(session.export(args.model, Recipe(args.recipe)))
    rows = {}
    for mode in args.modes.split(","):
        seconds = [time_mode(status, pte, mode, args.runs) for _ in range(args.repeat)]
        rows[mode] = {"min_s": min(seconds), "all_s": seconds}
        print(f"{mode:8s} min {min(seconds):6.1f} s  ({', '.join(f'{s:.1f}' for s in seconds)})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "model": args.model, "recipe": args.recipe,
                                         "runs": args.runs, "modes": rows}, indent=1))


if __name__ == "__main__":
    main()
