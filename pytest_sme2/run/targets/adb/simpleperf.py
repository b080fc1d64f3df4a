"""Kernel sampling on the device: its simpleperf (kernel_sampling.py's sampler for the adb target), and its
``report-sample`` run beside the perf.data a sampled process left."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.targets.adb.connection import AdbConnection
from pytest_sme2.run.targets.adb.facts import DeviceFacts
from pytest_sme2.system.elf import bundled_libraries

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import SimpleperfSampler

REPORT_TIMEOUT_S = 300.0  # simpleperf report-sample of one sampled process


def device_sampler(
    connection: AdbConnection, facts: DeviceFacts, runners: Iterable[Path], period_ns: int
) -> "SimpleperfSampler":
    """The device's simpleperf, naming the libraries of ``runners``, or a UsageError saying how to get one onto it."""
    from pytest_sme2.evidence.samplers import SimpleperfSampler

    found = connection.shell(
        "command -v simpleperf || { test -x /data/local/tmp/simpleperf && " "echo /data/local/tmp/simpleperf; }"
    ).stdout.strip()
    if not found:
        raise UsageError(
            f"{facts.described} has no simpleperf (Android 9 and later ship "
            "/system/bin/simpleperf); push the NDK's simpleperf/bin/android/arm64/simpleperf to "
            "/data/local/tmp/simpleperf"
        )
    libraries = {library.parent for binary in set(runners) for library in bundled_libraries(binary).values()}
    return SimpleperfSampler(found.splitlines()[-1], period_ns, tuple(sorted(libraries)))


def report_samples(
    connection: AdbConnection, facts: DeviceFacts, sampler: "SimpleperfSampler", run_dir: str, log: Path
) -> None:
    """``simpleperf report-sample`` on the device, next to its perf.data; a RunnerError if it fails."""
    command = " ".join(shlex.quote(word) for word in sampler.report_argv(run_dir))
    done = connection.shell(command, timeout=REPORT_TIMEOUT_S)
    if done.returncode != 0:
        raise RunnerError(
            f"`adb -s {facts.serial} shell {command}` exited with status {done.returncode}: "
            f"{(done.stderr or done.stdout or '').strip()[-500:]}; run log: {log}"
        )
