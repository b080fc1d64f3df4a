"""Where programs run. ``make_target`` maps ``--sme2-target`` values to targets."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import RunResult, RunSpec, Target, TargetInfo
from .host import HostTarget
from .local import LocalTarget

TARGET_NAMES = ("auto", "host", "local")


def make_target(name: str, log_dir: Path, runner: Path | None = None, runner_on: Path | None = None,
                runner_off: Path | None = None) -> Target:
    """Build the target named by ``--sme2-target``; "auto" is the host for now."""
    if name in ("auto", "host"):
        return HostTarget(log_dir)
    if name == "local":
        return LocalTarget(log_dir, runner=runner, runner_on=runner_on, runner_off=runner_off)
    raise UsageError(
        f"--sme2-target={name!r} is not a known target; choose one of: {', '.join(TARGET_NAMES)}"
    )


__all__ = ["RunResult", "RunSpec", "Target", "TargetInfo", "HostTarget", "LocalTarget", "make_target", "TARGET_NAMES"]
