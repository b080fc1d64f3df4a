"""The adb target's lines of ``pytest-sme2 doctor``: whether an adb server answers and lists devices, and, asked
for a device (``--sme2-target=adb[:SERIAL]``), the device as a session would use it: claimed, its facts read, the
runner the session would push started there with ``--version``, SME2 on and off (whether a run can start is only
known by starting one). Nothing here starts an adb server: a closed port is reported with the command."""

from __future__ import annotations

import socket
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from pytest_sme2.errors import Sme2Error
from pytest_sme2.run.targets.adb.facts import DeviceFacts
from pytest_sme2.run.targets.adb.options import DEFAULT_SERVER
from pytest_sme2.run.targets.base import INFO, MISSING, READY, DoctorLine, TargetSettings

ADB_PORT = DEFAULT_SERVER[1]


def server_check() -> DoctorLine:
    """The adb server on this machine's default port, and the devices it lists."""
    try:
        with socket.create_connection(("127.0.0.1", ADB_PORT), timeout=1.0):
            pass
    except OSError:
        return DoctorLine(
            "adb devices",
            INFO,
            f"no adb server on port {ADB_PORT}",
            "adb start-server (Debian: apt-get install adb), then connect an SME2 device with USB debugging",
        )
    try:
        import adbutils

        devices = adbutils.AdbClient(host="127.0.0.1", port=ADB_PORT, socket_timeout=5).device_list()
    except Exception as exc:
        return DoctorLine(
            "adb devices",
            INFO,
            f"adb server did not answer: {type(exc).__name__}: {exc}",
            "adb kill-server; adb start-server",
        )
    if not devices:
        return DoctorLine(
            "adb devices",
            INFO,
            "adb server running, no device attached",
            "connect a device with USB debugging on (adb devices should list it)",
        )
    return DoctorLine("adb devices", READY, ", ".join(d.serial for d in devices))


class CheckedDevice(Protocol):
    """What doctor asks of a claimed device (AdbTarget has it): its facts, kernel, and whether the runner starts."""

    facts: DeviceFacts

    def kernel_release(self) -> str: ...

    def start_check(self, sme2: bool) -> str: ...

    def close(self) -> None: ...


class DeviceClaim(Protocol):
    """How doctor claims one (AdbTarget.create)."""

    def create(self, name: str, settings: TargetSettings) -> CheckedDevice: ...


def device_checks(target: DeviceClaim, name: str, settings: TargetSettings) -> list[DoctorLine]:
    """The device ``name`` (adb or adb:SERIAL) as a session would use it: its ABI, kernel and SME2, and whether
    the runner the session would push starts there, SME2 on and off."""
    try:
        with tempfile.TemporaryDirectory(prefix="pytest-sme2-doctor-") as logs:
            device = target.create(name, replace(settings, log_dir=Path(logs)))
            try:
                return _on_device(device)
            finally:
                device.close()
    except Sme2Error as exc:
        return [DoctorLine(f"device ({name})", MISSING, str(exc))]


def _on_device(device: CheckedDevice) -> list[DoctorLine]:
    facts = device.facts
    checks = [
        DoctorLine("device", READY, facts.described),
        DoctorLine(
            "device ABI",
            READY if facts.arch == "aarch64" else INFO,
            f"{facts.abi} ({facts.arch})",
            "" if facts.arch == "aarch64" else "SME2 needs an arm64 (aarch64) device",
        ),
        DoctorLine("device kernel", INFO, device.kernel_release()),
        DoctorLine(
            "device SME2",
            READY if facts.has_sme2 else INFO,
            "sme2 in /proc/cpuinfo" if facts.has_sme2 else "no sme2 in /proc/cpuinfo: SME2-on tests skip",
            "" if facts.has_sme2 else "use a device with an Armv9.2 CPU (Arm C1, Cortex-X925 class)",
        ),
    ]
    for sme2, label in ((True, "SME2 on"), (False, "SME2 off")):
        if sme2 and not facts.has_sme2:
            continue
        try:
            checks.append(DoctorLine(f"runner starts ({label})", READY, device.start_check(sme2)))
        except Sme2Error as exc:
            checks.append(DoctorLine(f"runner starts ({label})", MISSING, str(exc)))
    return checks
