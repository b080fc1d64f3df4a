"""The samplers kernel time is taken with: Linux perf around a local runner, simpleperf on an Android device.

Each records one runner process with a software clock event (``cpu-clock``: hardware counters are
missing in most VMs) stamped with the steady clock, and hands back its samples
(``perf_samples.Sample``); kernel_sampling.py places and names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.evidence.perf_samples import (
    DEFAULT_PERIOD_NS,
    Sample,
    parse_simpleperf_samples,
    perf_executable,
    permission_problem,
    read_samples,
    sampling_event,
    wrap_command,
)

PERF_DATA = "perf.data"


class Sampler(Protocol):
    """A sampling profiler around one runner process: what a target needs to run its sampled process.

    ``library_copies``: folders on this machine holding the libraries the runner mapped where it ran
    (a device), so kernels can be named from them.
    """

    # read-only (properties): the samplers are frozen dataclasses
    @property
    def description(self) -> str: ...

    @property
    def library_copies(self) -> tuple[Path, ...]: ...

    def samples(self, out_dir: Path) -> list[Sample]: ...


@dataclass(frozen=True)
class PerfSampler:
    """Linux ``perf record`` around a runner on this machine; the data stays in the run's folder."""

    executable: str
    period_ns: int = DEFAULT_PERIOD_NS
    library_copies: tuple[Path, ...] = ()

    @classmethod
    def here(cls, period_ns: int) -> "PerfSampler":
        """The sampler of this machine, or a UsageError saying what to install or allow."""
        executable = perf_executable()
        problem = permission_problem()
        if problem is not None:
            raise UsageError(f"kernel sampling cannot use perf here: {problem}")
        return cls(executable, period_ns)

    @property
    def description(self) -> str:
        return f"perf record -e {sampling_event()} -c {self.period_ns} -k CLOCK_MONOTONIC"

    def wrap(self, command: list[str], out_dir: Path) -> list[str]:
        return wrap_command(self.executable, command, out_dir / PERF_DATA, self.period_ns)

    def samples(self, out_dir: Path) -> list[Sample]:
        data = out_dir / PERF_DATA
        if not data.is_file() or data.stat().st_size == 0:
            raise RunnerError(f"perf wrote no samples to {data}; see the run's log in {out_dir}")
        try:
            return read_samples(self.executable, data)
        except RuntimeError as exc:
            raise RunnerError(str(exc)) from None


SIMPLEPERF_SAMPLES = "samples.txt"


@dataclass(frozen=True)
class SimpleperfSampler:
    """Android's ``simpleperf`` (on devices since Android 9) around the runner on the device.

    Recorded with ``--clockid monotonic`` (the steady clock of the runner's ``clock_offset_ns``), reported on
    the device with ``report-sample`` (text: time, thread, ``vaddr_in_file``, file, symbol per sample), both
    files pulled into the run's folder.
    """

    executable: str = "simpleperf"
    period_ns: int = DEFAULT_PERIOD_NS
    library_copies: tuple[Path, ...] = ()

    @property
    def description(self) -> str:
        return f"simpleperf record -e cpu-clock -c {self.period_ns} --clockid monotonic"

    def device_argv(self, argv: list[str], run_dir: str) -> list[str]:
        return [
            self.executable,
            "record",
            "-e",
            "cpu-clock",
            "-c",
            str(self.period_ns),
            "--clockid",
            "monotonic",
            "-o",
            f"{run_dir}/{PERF_DATA}",
            *argv,
        ]

    def report_argv(self, run_dir: str) -> list[str]:
        return [
            self.executable,
            "report-sample",
            "-i",
            f"{run_dir}/{PERF_DATA}",
            "-o",
            f"{run_dir}/{SIMPLEPERF_SAMPLES}",
        ]

    def samples(self, out_dir: Path) -> list[Sample]:
        report = out_dir / SIMPLEPERF_SAMPLES
        try:
            return parse_simpleperf_samples(report.read_text(errors="replace"))
        except OSError as exc:
            raise RunnerError(f"simpleperf's report {report} cannot be read: {exc.strerror}") from None
        except RuntimeError as exc:
            raise RunnerError(f"{report}: {exc}") from None
