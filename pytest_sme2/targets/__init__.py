"""Where programs run. ``make_target`` maps ``--sme2-target`` values to targets."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import RunResult, RunSpec, Target, TargetInfo
from .host import HostTarget
from .emulated import EmulatedTarget
from .local import LocalTarget

TARGET_NAMES = ("auto", "host", "local", "emulated")


def make_target(name: str, log_dir: Path, runner: Path | None = None, runner_on: Path | None = None,
                runner_off: Path | None = None, svl_bits: int = 512) -> Target:
    """Build the target named by ``--sme2-target``.

    "auto": the host when its CPU has SME2; otherwise the emulated target when
    it is set up (so SME2 on/off really runs); otherwise the host.
    """
    if name == "auto":
        from .. import emulation
        from ..cpu import host_cpu

        if not host_cpu().has_sme2:
            status = emulation.status()
            if status.ready:
                return EmulatedTarget(log_dir, svl_bits, status)
        return HostTarget(log_dir)
    if name == "host":
        return HostTarget(log_dir)
    if name == "emulated":
        return EmulatedTarget(log_dir, svl_bits)
    if name == "local":
        return LocalTarget(log_dir, runner=runner, runner_on=runner_on, runner_off=runner_off)
    raise UsageError(
        f"--sme2-target={name!r} is not a known target; choose one of: {', '.join(TARGET_NAMES)}"
    )


__all__ = ["RunResult", "RunSpec", "Target", "TargetInfo", "HostTarget", "LocalTarget", "EmulatedTarget", "make_target", "TARGET_NAMES"]
