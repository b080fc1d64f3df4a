"""``pytest-sme2 doctor``: what this machine can do, and the command that fixes each missing piece.

Checks only look; they never install, build or start anything here (not even the adb server: a closed port 5037
is reported with the command to start it). Each registered target contributes its own lines (its class's
``doctor``, run/targets/registry.py); asked for a target with ``--sme2-target`` that checks one as a session would
(a device over adb), its class's ``doctor_target`` adds the lines of that target: whether a run can start is only
known by starting one.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any, Mapping

from pytest_sme2.run.targets.base import INFO, MISSING, READY, DoctorLine, TargetSettings

__all__ = ["DoctorLine", "INFO", "MISSING", "READY", "check_device_target", "device_checks", "run_checks"]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _packages() -> list[DoctorLine]:
    from pytest_sme2.system.version_pairs import pair_for, pairs_text

    checks = []
    pair = pair_for(_version("executorch"))  # the installed executorch's tested torch, or the newest pair
    for package, fix in (
        ("torch", f"pip install torch=={pair.torch} (the CPU build; install it before executorch)"),
        ("executorch", f"pip install executorch=={pair.executorch} (tested: {pairs_text()})"),
        ("matplotlib", "pip install 'matplotlib>=3.8,<4' (report charts)"),
        ("pytest-html", "pip install 'pytest-html>=4.1'"),
    ):
        version = _version(package)
        checks.append(
            DoctorLine(package, READY if version else MISSING, version or "not installed", "" if version else fix)
        )
    return checks


def _checked_targets() -> list[str]:
    """How the targets doctor can check one of are written (``adb``, ``adb:SERIAL``)."""
    from pytest_sme2.run.targets.registry import target_classes

    return [name for target in target_classes().values() if target.checks_a_target for name in target.names]


def check_device_target(target: str) -> None:
    """``doctor --sme2-target`` names a target whose class checks one as a session would (adb or adb:SERIAL). Any
    other value is a UsageError saying that the machine's own targets are what plain ``pytest-sme2 doctor``
    checks (a valid name such as emulated would otherwise read as a missing device, and so would a typo)."""
    from pytest_sme2.errors import UsageError
    from pytest_sme2.run.targets.registry import target_class, target_classes, target_names

    checked = " or ".join(_checked_targets())
    if target.split(":", 1)[0] not in target_classes():
        raise UsageError(
            f"doctor --sme2-target={target}: {target!r} is not a target (targets: "
            f"{', '.join(target_names())}); --sme2-target here checks a device: {checked}"
        )
    if target_class(target).checks_a_target:  # a malformed argument (an adb serial) says so
        return
    raise UsageError(
        f"doctor --sme2-target={target}: {target!r} is this machine's own target, which `pytest-sme2 "
        "doctor` without --sme2-target checks (the 'default target', 'native runner' and 'emulated SME2 "
        f"target' lines); --sme2-target here checks a device: {checked}"
    )


def device_checks(target: str, runner: str | None = None, options: Mapping[str, Any] | None = None) -> list[DoctorLine]:
    """The target ``target`` as a session would use it (its class's ``doctor_target``), with ``runner`` and the
    target's doctor options (``options``, by option name)."""
    import tempfile

    from pytest_sme2.run.targets.registry import target_class

    with tempfile.TemporaryDirectory(prefix="pytest-sme2-doctor-") as logs:
        settings = TargetSettings(Path(logs), runner=Path(runner) if runner else None, options=dict(options or {}))
        return target_class(target).doctor_target(target, settings)


def run_checks(
    target: str | None = None, runner: str | None = None, options: Mapping[str, Any] | None = None
) -> list[DoctorLine]:
    """The packages, every registered target's lines (the default target's first, the one a plain ``pytest`` uses;
    then by name), and (``target``) that target as a session would use it."""
    from pytest_sme2.plugin.options import BY_NAME
    from pytest_sme2.run.targets.registry import target_classes

    default = BY_NAME["target"].default
    checks = [*_packages()]
    for _, registered in sorted(target_classes().items(), key=lambda item: item[0] != default):
        checks += registered.doctor()
    if target is not None:
        checks += device_checks(target, runner, options)
    return checks
