"""Where programs run. ``make_target`` maps ``--sme2-target`` values to targets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_sme2.errors import UsageError
from pytest_sme2.run.emulation_setup import DEFAULT_SVL_BITS
from pytest_sme2.run.result_cache import ResultCache
from pytest_sme2.run.targets.adb import AdbOptions, AdbTarget, is_adb_target, parse_adb_target
from pytest_sme2.run.targets.base import RunResult, RunSpec, Target, TargetInfo
from pytest_sme2.run.targets.emulated import EmulatedTarget, check_svl
from pytest_sme2.run.targets.host import HostTarget
from pytest_sme2.run.targets.local import LocalTarget

TARGET_NAMES = ("auto", "host", "local", "emulated", "adb", "adb:SERIAL")


def check_target_name(name: str) -> str:
    """``name`` if it is a --sme2-target value, else a UsageError listing the choices."""
    if is_adb_target(name):
        parse_adb_target(name)
        return name
    if name not in TARGET_NAMES:
        raise UsageError(f"--sme2-target={name!r} is not a known target; choose one of {', '.join(TARGET_NAMES)}")
    return name


def check_choice(name: str, svl_bits: int, svl_source: str, runners: dict[str, Path | None]) -> None:
    """Everything about a target choice that can be wrong before any test runs, as a UsageError: the
    target's name, the emulated streaming vector length, and runner binaries (by their option) that
    cannot run on the target (the local one runs host binaries, the emulated one aarch64 ones)."""
    check_target_name(name)
    check_svl(svl_bits, svl_source)
    if name in ("local", "emulated"):
        from pytest_sme2.run.targets.local import check_runner

        for role, path in runners.items():
            if path is not None:
                check_runner(path, f"runner ({role})", arch="aarch64" if name == "emulated" else None)


def make_target(name: str, log_dir: Path, runner: Path | None = None, runner_on: Path | None = None,
                runner_off: Path | None = None, svl_bits: int = DEFAULT_SVL_BITS, adb: AdbOptions | None = None,
                kernel_trace: bool = True, results: ResultCache | None = None, fresh: bool = False) -> Target:
    """Build the target named by ``--sme2-target``; "auto" is decided in ``auto.py``. ``results``/``fresh``:
    the emulated target's result cache, and whether to emulate again anyway (--sme2-fresh)."""
    if name == "auto":
        from pytest_sme2.run.targets.auto import make_auto_target

        return make_auto_target(log_dir, svl_bits, kernel_trace, runner=runner, runner_on=runner_on,
                                runner_off=runner_off, results=results, fresh=fresh)
    if name == "host":
        return HostTarget(log_dir)
    if name == "emulated":
        return EmulatedTarget(log_dir, svl_bits, runner=runner, trace_kernels=kernel_trace, results=results,
                              fresh=fresh)
    if name == "local":
        return LocalTarget(log_dir, runner=runner, runner_on=runner_on, runner_off=runner_off)
    if is_adb_target(name):
        options = replace(adb or AdbOptions(), serial=parse_adb_target(name))
        return AdbTarget(log_dir, options, runner=runner, runner_on=runner_on, runner_off=runner_off)
    raise UsageError(
        f"--sme2-target={name!r} is not a known target; choose one of: {', '.join(TARGET_NAMES)}"
    )


__all__ = ["RunResult", "RunSpec", "Target", "TargetInfo", "HostTarget", "LocalTarget", "EmulatedTarget", "AdbTarget",
           "AdbOptions", "make_target", "check_target_name", "TARGET_NAMES"]
