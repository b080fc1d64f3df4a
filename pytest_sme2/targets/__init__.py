"""Where programs run. ``make_target`` maps ``--sme2-target`` values to targets."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import RunResult, RunSpec, Target, TargetInfo
from .host import HostTarget

TARGET_NAMES = ("auto", "host")


def make_target(name: str, log_dir: Path) -> Target:
    """Build the target named by ``--sme2-target``; "auto" is the host for now."""
    if name in ("auto", "host"):
        return HostTarget(log_dir)
    raise UsageError(
        f"--sme2-target={name!r} is not a known target; choose one of: {', '.join(TARGET_NAMES)}"
    )


__all__ = ["RunResult", "RunSpec", "Target", "TargetInfo", "HostTarget", "make_target", "TARGET_NAMES"]
