"""``pytest-sme2 doctor``: what this machine can do, and the command that fixes each missing piece.

Checks only look; they never install, build or start anything here (not even the
adb server: a closed port 5037 is reported with the command to start it). Asked
for a device (``--sme2-target=adb[:SERIAL]``), they claim it like a session does,
read its facts, push the runner the session would push and start it there with
``--version``, SME2 on and off: whether a run can start is only known by starting one.
"""

from __future__ import annotations

import importlib.metadata
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sme2.run.targets.adb import AdbTarget

READY, MISSING, INFO = "ok", "MISSING", "info"
ADB_PORT = 5037


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # READY, MISSING (exit code 1) or INFO (a fact, not something to fix)
    detail: str
    fix: str = ""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _packages() -> list[Check]:
    checks = []
    for package, fix in (("torch", "pip install torch==2.13.0 (the CPU build; install it before executorch)"),
                         ("executorch", "pip install executorch==1.5.1"),
                         ("matplotlib", "pip install 'matplotlib>=3.8,<4' (report charts)"),
                         ("pytest-html", "pip install 'pytest-html>=4.1'")):
        version = _version(package)
        checks.append(Check(package, READY if version else MISSING, version or "not installed", "" if version else fix))
    return checks


def _host() -> Check:
    from pytest_sme2.run.cpu import host_cpu

    cpu = host_cpu()
    if cpu.has_sme2:
        return Check("SME2 on this host", READY, f"{cpu.name} ({cpu.arch}) has SME2")
    # the fix points at the two other places SME2 runs; the emulated target's own line says whether it is ready
    return Check("SME2 on this host", INFO, f"{cpu.name} ({cpu.arch}) has no SME2: SME2-on tests skip on the host target",
                 "SME2 runs on the emulated target (see its line below) or an SME2 device over adb")


def _runner() -> Check:
    from pytest_sme2.run.native.build import runner_binary

    try:
        binary = runner_binary("host")
    except Exception as exc:  # no executorch, unsupported platform
        return Check("native runner (local target)", MISSING, f"cannot locate: {exc}", "pytest-sme2 build-runner")
    if binary.exists():
        return Check("native runner (local target)", READY, str(binary))
    return Check("native runner (local target)", MISSING, f"not built ({binary})", "pytest-sme2 build-runner")


def _emulation() -> Check:
    from pytest_sme2.run import emulation_setup

    try:
        status = emulation_setup.status()
    except Exception as exc:
        return Check("emulated SME2 target", MISSING, f"{type(exc).__name__}: {exc}", emulation_setup.SETUP_COMMAND)
    if status.ready:
        return Check("emulated SME2 target", READY, f"qemu {status.version} at {status.qemu}, runner {status.runner}")
    return Check("emulated SME2 target", MISSING, status.problem or "not ready", emulation_setup.SETUP_COMMAND)


def _adb() -> Check:
    try:
        with socket.create_connection(("127.0.0.1", ADB_PORT), timeout=1.0):
            pass
    except OSError:
        return Check("adb devices", INFO, f"no adb server on port {ADB_PORT}",
                     "adb start-server (Debian: apt-get install adb), then connect an SME2 device with USB debugging")
    try:
        import adbutils

        devices = adbutils.AdbClient(host="127.0.0.1", port=ADB_PORT, socket_timeout=5).device_list()
    except Exception as exc:
        return Check("adb devices", INFO, f"adb server did not answer: {type(exc).__name__}: {exc}", "adb kill-server; adb start-server")
    if not devices:
        return Check("adb devices", INFO, "adb server running, no device attached",
                     "connect a device with USB debugging on (adb devices should list it)")
    return Check("adb devices", READY, ", ".join(d.serial for d in devices))


def _default_target() -> Check:
    """Which target the default command (``--sme2-target=auto``) will use, what SME2 settings it runs, and why."""
    from pytest_sme2.run.targets.auto import current_plan

    try:
        chosen = current_plan()
    except Exception as exc:  # no executorch, unreadable cache: the other checks name the fix
        return Check("default target (auto)", MISSING, f"cannot decide: {type(exc).__name__}: {exc}")
    detail = f"{chosen.target}: runs {chosen.modes}; {chosen.why}"
    problems = [f"SME2 {side} skips: {problem}" for side, problem in (("on", chosen.sme2_on), ("off", chosen.sme2_off))
                if problem is not None]
    if not problems:
        return Check("default target (auto)", READY, detail)
    # A missing half of the headline comparison is something to fix, except SME2 on where no SME2 can be had.
    return Check("default target (auto)", MISSING if chosen.sme2_off else INFO, detail, "; ".join(problems))


def _kernel_sampling() -> Check:
    """Whether ``--sme2-kernel-sampling`` can sample the local target here (adb devices bring their own simpleperf).

    Reported, not required: without it the tests run and profiles have no kernel time."""
    import platform

    from pytest_sme2.errors import UsageError
    from pytest_sme2.evidence.perf_samples import perf_executable, permission_problem, sampling_event

    name = "kernel sampling (local target)"
    if platform.system() != "Linux":
        return Check(name, INFO, f"not supported on {platform.system()} (Linux perf and Android simpleperf are)")
    try:
        executable = perf_executable()
    except UsageError as exc:
        return Check(name, INFO, "no Linux perf", str(exc).split(": ", 1)[-1])
    problem = permission_problem()
    if problem is not None:
        return Check(name, INFO, f"{executable} may not sample this user's processes", problem)
    return Check(name, READY, f"{executable} record -e {sampling_event()} (--sme2-kernel-sampling=on)")


def check_device_target(target: str) -> None:
    """``doctor --sme2-target`` names a device: adb or adb:SERIAL. Any other value is a UsageError saying that
    the machine's own targets are what plain ``pytest-sme2 doctor`` checks (a user's trial read "MISSING device
    (emulated)" with exit 1 for the valid target name emulated, and the same for a typo)."""
    from pytest_sme2.errors import UsageError
    from pytest_sme2.run.targets import TARGET_NAMES
    from pytest_sme2.run.targets.adb import is_adb_target, parse_adb_target

    if is_adb_target(target):
        parse_adb_target(target)  # a malformed serial says so
        return
    known = [name for name in TARGET_NAMES if not name.startswith("adb")]
    what = (f"{target!r} is this machine's own target, which `pytest-sme2 doctor` without --sme2-target checks (the "
            f"'default target', 'native runner' and 'emulated SME2 target' lines)" if target in known else
            f"{target!r} is not a target (targets: {', '.join(TARGET_NAMES)})")
    raise UsageError(f"doctor --sme2-target={target}: {what}; --sme2-target here checks a device: adb or adb:SERIAL")


def device_checks(target: str, server: str | None = None, runner: str | None = None,
                  mask_library: str | None = None) -> list[Check]:
    """The device ``target`` (adb or adb:SERIAL) as a session would use it: its ABI, kernel and SME2, and whether
    the runner the session would push starts there, SME2 on and off."""
    import tempfile
    from pathlib import Path

    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.run.targets.adb import AdbOptions, AdbTarget, parse_adb_target

    name = f"device ({target})"
    try:
        options = AdbOptions(serial=parse_adb_target(target), server=server,
                             mask_library=Path(mask_library) if mask_library else None)
        with tempfile.TemporaryDirectory(prefix="pytest-sme2-doctor-") as logs:
            device = AdbTarget(Path(logs), options, runner=Path(runner) if runner else None)
            try:
                return _on_device(device)
            finally:
                device.close()
    except Sme2Error as exc:
        return [Check(name, MISSING, str(exc))]


def _on_device(device: "AdbTarget") -> list[Check]:
    from pytest_sme2.errors import Sme2Error

    facts = device.facts
    checks = [Check("device", READY, facts.described),
              Check("device ABI", READY if facts.arch == "aarch64" else INFO, f"{facts.abi} ({facts.arch})",
                    "" if facts.arch == "aarch64" else "SME2 needs an arm64 (aarch64) device"),
              Check("device kernel", INFO, device.kernel_release()),
              Check("device SME2", READY if facts.has_sme2 else INFO,
                    "sme2 in /proc/cpuinfo" if facts.has_sme2 else "no sme2 in /proc/cpuinfo: SME2-on tests skip",
                    "" if facts.has_sme2 else "use a device with an Armv9.2 CPU (Arm C1, Cortex-X925 class)")]
    for sme2, label in ((True, "SME2 on"), (False, "SME2 off")):
        if sme2 and not facts.has_sme2:
            continue
        try:
            checks.append(Check(f"runner starts ({label})", READY, device.start_check(sme2)))
        except Sme2Error as exc:
            checks.append(Check(f"runner starts ({label})", MISSING, str(exc)))
    return checks


def run_checks(target: str | None = None, server: str | None = None, runner: str | None = None,
               mask_library: str | None = None) -> list[Check]:
    checks = [*_packages(), _host(), _default_target(), _runner(), _emulation(), _kernel_sampling(), _adb()]
    if target is not None:
        checks += device_checks(target, server, runner, mask_library)
    return checks
