"""Where programs run: the Target interface (base.py), one module (or package) per target, and the registry
(registry.py) that maps ``--sme2-target`` values to target classes registered as entry points."""

from __future__ import annotations

from pytest_sme2.run.targets.base import RegisteredTarget, RunResult, RunSpec, Target, TargetInfo, TargetSettings
from pytest_sme2.run.targets.registry import (
    check_choice,
    check_target_name,
    make_target,
    target_class,
    target_names,
    target_options,
)

__all__ = [
    "RegisteredTarget",
    "RunResult",
    "RunSpec",
    "Target",
    "TargetInfo",
    "TargetSettings",
    "check_choice",
    "check_target_name",
    "make_target",
    "target_class",
    "target_names",
    "target_options",
]
