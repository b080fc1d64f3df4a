"""The calibration microbenchmarks (run/native/microbench.c) run on a device and timed, kernel by kernel.

Why a module of its own: ``pytest-sme2 calibrate`` turns these rates into a device file (calibrate.py), and the
tests count what each kernel executes under qemu; both need the same kernel table (the program's ``list``,
the one source of what each kernel claims) and the same way of running it on a device (local, adb, qemu).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.evidence.instruction_classes import NAMES

# How long one timed repetition of a kernel should take: long enough that the clock's resolution and the loop's
# setup (streaming mode entered, predicates set) are below 0.1% of it, short enough that 19 kernels at 5 repetitions
# and 4 buffer sizes finish in a few seconds on a device.
TARGET_NS = 5_000_000
REPS = 5
MAX_ITERS = 1 << 34


@dataclass(frozen=True)
class Kernel:
    """One microbenchmark: the class it measures, how many of them one iteration executes, and every class's
    count per iteration (what the emulated count must find)."""

    name: str
    measures: str  # an instruction class of NAMES, or "all" (the core's width)
    count: int
    streaming: bool
    vectors: int  # vectors of SVL bytes loaded or stored per iteration (0: no buffer)
    claims: dict[str, int]

    @classmethod
    def parse(cls, line: str) -> "Kernel":
        name, measures, count, streaming, vectors, claims = line.split()
        parsed = {k: int(v) for k, v in (item.split("=") for item in claims.split(","))}
        unknown = set(parsed) - set(NAMES)
        if unknown or (measures not in NAMES and measures != "all"):
            raise RunnerError(
                f"microbench kernel {name} names classes this pytest-sme2 does not count "
                f"({', '.join(sorted(unknown)) or measures}): rebuild it from this version's source"
            )
        return cls(name, measures, int(count), streaming == "1", int(vectors), parsed)

    def bytes_per_iteration(self, svl_bits: int) -> int:
        return self.vectors * svl_bits // 8

    @property
    def instructions(self) -> int:
        """Every instruction of one iteration, the loop's included."""
        return sum(self.claims.values())


class Bench(Protocol):
    """Where the microbenchmark program runs: ``run(args)`` is its standard output."""

    where: str  # "an SME2 Mac", "adb device SERIAL (model)", "qemu-aarch64 11.1 -cpu max" ...
    emulated: bool

    def run(self, args: list[str], timeout: float = 300.0) -> str: ...


@dataclass
class LocalBench:
    """The program on this machine (an SME2 Mac, or an Arm Linux board with SME2)."""

    binary: Path
    where: str
    emulated: bool = False

    def run(self, args: list[str], timeout: float = 300.0) -> str:
        return _checked([str(self.binary), *args], timeout, self.where)


@dataclass
class QemuBench:
    """The program under qemu-aarch64 ``-cpu max`` at a streaming vector length: its times are the emulator's."""

    qemu: Path
    binary: Path
    svl_bits: int = 512
    emulated: bool = True
    where: str = field(default="")

    def __post_init__(self) -> None:
        self.where = self.where or f"qemu-aarch64 -cpu max (SVL {self.svl_bits}) on this machine"

    def command(self, args: list[str]) -> list[str]:
        from pytest_sme2.run.emulation_setup import svl_cpu

        return [str(self.qemu), "-cpu", svl_cpu(self.svl_bits), str(self.binary), *args]

    def run(self, args: list[str], timeout: float = 900.0) -> str:
        return _checked(self.command(args), timeout, self.where)


@dataclass
class AdbBench:
    """The program pushed to an Android device (statically linked: no loader needed) and run through adb shell."""

    device: Any  # an adbutils device (adbutils ships no type information)
    remote: str
    where: str
    emulated: bool = False

    def run(self, args: list[str], timeout: float = 300.0) -> str:
        result = self.device.shell2(" ".join(shlex.quote(a) for a in [self.remote, *args]), timeout=timeout, v2=True)
        if result.returncode != 0:
            raise RunnerError(
                f"the microbenchmark `{' '.join(args)}` failed on {self.where} (exit "
                f"{result.returncode}): {result.output.strip()[-400:]}"
            )
        return result.output


def _checked(command: list[str], timeout: float, where: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunnerError(f"the microbenchmark `{' '.join(command[-6:])}` took over {timeout:g} s on {where}") from None
    if done.returncode != 0:
        raise RunnerError(
            f"the microbenchmark `{' '.join(command[-6:])}` failed on {where} (exit "
            f"{done.returncode}): {(done.stderr or done.stdout).strip()[-400:]}"
        )
    return done.stdout


def kernels(bench: Bench) -> list[Kernel]:
    return [Kernel.parse(line) for line in bench.run(["list"]).splitlines() if line.strip()]


@dataclass(frozen=True)
class DeviceInfo:
    svl_bits: int
    sme2: bool
    l1d_bytes: int
    l2_bytes: int


def device_info(bench: Bench) -> DeviceInfo:
    fields = dict(item.split("=") for item in bench.run(["info"]).split())
    return DeviceInfo(int(fields["svl_bits"]), fields["sme2"] == "1", int(fields["l1d_bytes"]), int(fields["l2_bytes"]))


@dataclass(frozen=True)
class Rate:
    """One kernel timed: instructions of its class per ns (all instructions for "all"), bytes per ns."""

    kernel: str
    measures: str
    buffer_bytes: int
    iterations: int
    ns: int
    per_ns: float
    gb_per_s: float


def time_kernel(
    bench: Bench, kernel: Kernel, svl_bits: int, buffer_bytes: int = 0, target_ns: int = TARGET_NS, reps: int = REPS
) -> Rate:
    """The fastest of ``reps`` repetitions of ``kernel``, each of enough iterations to take about ``target_ns``
    (found by doubling from a short probe), after one warm repetition."""
    step = kernel.bytes_per_iteration(svl_bits)
    if step:
        buffer_bytes = max(step, buffer_bytes // step * step)
    iters = max(64, buffer_bytes // step if step else 0)
    while True:
        ns = _ns(bench.run(["run", kernel.name, str(iters), str(buffer_bytes), "1", "0"]))
        if ns >= target_ns // 8 or iters >= MAX_ITERS:
            break
        iters *= 8 if ns < target_ns // 64 else 2
    iters = max(iters, int(iters * target_ns / max(ns, 1)))
    best = _ns(bench.run(["run", kernel.name, str(iters), str(buffer_bytes), str(reps), str(iters)]))
    counted = kernel.instructions if kernel.measures == "all" else kernel.count
    return Rate(
        kernel.name,
        kernel.measures,
        buffer_bytes,
        iters,
        best,
        counted * iters / best,
        step * iters / best if step else 0.0,
    )


def _ns(output: str) -> int:
    found = re.search(r"ns=(\d+)", output)
    if found is None:
        raise RunnerError(f"the microbenchmark printed no time: {output.strip()[-200:]!r}")
    return max(1, int(found.group(1)))


def count_classes(qemu: Path, binary: Path, args: list[str], svl_bits: int = 512) -> dict[str, int]:
    """Every instruction ``binary args`` executes under qemu, by class of NAMES (the emulated target's counter:
    qemu's execution log through exec_counter.c, the guest's first thread)."""

    from pytest_sme2.evidence.qemu_counts import QEMU_LOG_FLAGS, ExecutedBlocks
    from pytest_sme2.run.emulation_setup import svl_cpu
    from pytest_sme2.run.native.build import build_exec_counter

    counter = build_exec_counter()
    with tempfile.TemporaryDirectory(prefix="sme2-microbench-") as folder:
        out = Path(folder)
        fifo, blocks, sequence = out / "log.fifo", out / "blocks.tsv", out / "blocks.u32"
        os.mkfifo(fifo)
        reader = subprocess.Popen(
            [str(counter), str(blocks), str(sequence), str(fifo)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            done = subprocess.run(
                [str(qemu), "-cpu", svl_cpu(svl_bits), *QEMU_LOG_FLAGS, "-D", str(fifo), str(binary), *args],
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            _, errors = reader.communicate(timeout=120)
        if done.returncode != 0:
            raise RunnerError(f"{binary.name} {' '.join(args)} failed under qemu: {done.stderr.strip()[-300:]}")
        if reader.returncode != 0 or " 0 unbound" not in errors.decode(errors="replace"):
            raise RunnerError(f"the instruction counter failed: {errors.decode(errors='replace').strip()[-300:]}")
        executed = ExecutedBlocks.from_files(blocks, sequence)
        totals = executed.sequence.executed(len(executed.pcs)) @ executed.classes
    return {name: int(n) for name, n in zip(NAMES, totals)}


def require_sme2(info: DeviceInfo, where: str) -> None:
    if not info.sme2 or not info.svl_bits:
        raise UsageError(
            f"{where} reports no SME2: calibrate measures an SME2 CPU's rates (an SME2 Mac, an Arm "
            f"Linux board or phone with SME2; `pytest-sme2 doctor` says what this machine has)"
        )
