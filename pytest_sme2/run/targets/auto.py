"""What ``--sme2-target=auto`` runs on, and why: one decision, used by the target factory and ``doctor``.

- A CPU with SME2 (Apple M4, Armv9.2 Linux board): the **native runner** (local
  target), one build, SME2 off by the masking library (``LD_PRELOAD`` on Linux,
  ``DYLD_INSERT_LIBRARIES`` on macOS), so SME2 on and off both run. The runner
  and the library are built once (``make perf`` does it; otherwise the first
  session does). Without a compiler or CMake it falls back to the host target,
  whose SME2-off skips say what to install.
- A CPU without SME2: the emulated target when it is set up, else the host.

Why the native runner and not the Python binding with the masking library
preloaded into its worker: on macOS ``DYLD_INSERT_LIBRARIES`` is dropped for
SIP-protected interpreters (``/usr/bin/python3``) and ignored by binaries signed
with the hardened runtime, which many Python distributions are, while a runner
built on the machine is neither; on and off then run the same binary in the same
kind of fresh process (a preloaded binding would time SME2 on in the long-lived
worker and SME2 off in another process); and the path can be checked end to end
here under qemu with an aarch64 runner, without an aarch64 Python and torch
under emulation. The cost is a C/C++ compiler and CMake on the user's machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_sme2.run.cpu import CpuInfo, Machine, host_cpu
from pytest_sme2.run.native.build import mask_preload_variable
from pytest_sme2.run.targets.base import INFO, MISSING, READY, DoctorLine, RegisteredTarget, TargetSettings

if TYPE_CHECKING:
    from pytest_sme2.run.emulation_setup import EmulationStatus
    from pytest_sme2.run.targets.base import Target


def this_machine() -> Machine:
    return Machine(host_cpu())


@dataclass(frozen=True)
class AutoPlan:
    """The target ``auto`` picks, and for SME2 on and off either None (runs) or why not and the fix."""

    target: str  # "local", "emulated" or "host"
    why: str
    sme2_on: str | None
    sme2_off: str | None

    @property
    def modes(self) -> str:
        runs = [name for name, problem in (("SME2 on", self.sme2_on), ("SME2 off", self.sme2_off)) if problem is None]
        return " and ".join(runs) + (" only" if len(runs) == 1 else "") if runs else "neither SME2 on nor off"


def plan(cpu: CpuInfo, native_problem: str | None, emulation: EmulationStatus | None) -> AutoPlan:
    """The choice itself, from facts only (no building, no processes): see the module docstring.

    ``native_problem``: what stops the native runner and masking library from being built (None: ready);
    ``emulation``: the emulated target's status (only asked about on CPUs without SME2).
    """
    name = f"'{cpu.name}' ({cpu.arch}, {cpu.system})"
    if cpu.has_sme2:
        if native_problem is None:
            hidden_by = mask_preload_variable(cpu.system)
            return AutoPlan(
                "local",
                f"{name} has SME2; the native runner runs SME2 on, and SME2 off with SME and "
                f"SME2 hidden from XNNPACK's cpuinfo by {hidden_by}",
                None,
                None,
            )
        return AutoPlan(
            "host",
            f"{name} has SME2, but the native runner cannot be built here: {native_problem}",
            None,
            f"SME2 off needs the native runner: {native_problem}",
        )
    if emulation is not None and emulation.ready:
        return AutoPlan(
            "emulated",
            f"{name} has no SME2; the emulated target (qemu -cpu max) runs SME2 on and off "
            "(kernels and outputs are real, time is not compared)",
            None,
            None,
        )
    return AutoPlan(
        "host",
        f"{name} has no SME2 and the emulated target is not ready: {_problem(emulation)}",
        f"this CPU has no SME2; {_EMULATION_ADVICE.format(problem=_problem(emulation))}",
        None,
    )


_EMULATION_ADVICE = "use the emulated SME2 target (qemu), which is not ready here: {problem}"


def _problem(emulation: EmulationStatus | None) -> str:
    return (emulation.problem or "ready") if emulation is not None else "not checked"


def _facts(machine: Machine) -> tuple[str | None, EmulationStatus | None]:
    """What ``plan`` needs to know about ``machine``, found without building anything."""
    from pytest_sme2.run import emulation_setup
    from pytest_sme2.run.native.build import build_problem

    if machine.cpu.has_sme2:
        return build_problem(machine.runner_arch), None
    return None, emulation_setup.status()


def current_plan(machine: Machine | None = None) -> AutoPlan:
    """The plan for ``machine`` (default: this computer) without building anything: what ``doctor`` shows."""
    return plan((machine or this_machine()).cpu, *_facts(machine or this_machine()))


def make_auto_target(settings: TargetSettings, machine: Machine | None = None) -> Target:
    """The target ``plan`` names, with the native runner and masking library built (cached) when it is local.

    The runner options (``--sme2-runner*``) replace the built runner when the choice is local. A build that fails
    although compiler and CMake are there is an error, not a silent fallback.
    """
    from pytest_sme2.run.targets.emulated import EmulatedTarget
    from pytest_sme2.run.targets.host import HostTarget
    from pytest_sme2.run.targets.local import LocalTarget

    machine = machine or this_machine()
    native_problem, emulation_status = _facts(machine)
    chosen = plan(machine.cpu, native_problem, emulation_status)
    log_dir = settings.log_dir
    if chosen.target == "local":
        from pytest_sme2.run.native.build import build_mask_library, build_runner

        if settings.runner_on is not None or settings.runner_off is not None:
            return LocalTarget(log_dir, runner_on=settings.runner_on, runner_off=settings.runner_off, machine=machine)
        return LocalTarget(
            log_dir,
            runner=settings.runner or build_runner(machine.runner_arch),
            mask_library=build_mask_library(machine.runner_arch),
            machine=machine,
        )
    if chosen.target == "emulated":  # pytest-sme2's own aarch64 runner: the runner options are for local
        return EmulatedTarget.create("emulated", replace(settings, runner=None), emulation_status)
    advice = None if machine.cpu.has_sme2 else _EMULATION_ADVICE.format(problem=_problem(emulation_status))
    return HostTarget(log_dir, cpu=machine.cpu, sme2_advice=advice, sme2_off_advice=chosen.sme2_off)


def doctor_check() -> DoctorLine:
    """Which target the default command (``--sme2-target=auto``) will use, what SME2 settings it runs, and why."""
    try:
        chosen = current_plan()
    except Exception as exc:  # no executorch, unreadable cache: the other checks name the fix
        return DoctorLine("default target (auto)", MISSING, f"cannot decide: {type(exc).__name__}: {exc}")
    detail = f"{chosen.target}: runs {chosen.modes}; {chosen.why}"
    problems = [
        f"SME2 {side} skips: {problem}"
        for side, problem in (("on", chosen.sme2_on), ("off", chosen.sme2_off))
        if problem is not None
    ]
    if not problems:
        return DoctorLine("default target (auto)", READY, detail)
    # A missing half of the headline comparison is something to fix, except SME2 on where no SME2 can be had.
    return DoctorLine("default target (auto)", MISSING if chosen.sme2_off else INFO, detail, "; ".join(problems))


class AutoTarget(RegisteredTarget):
    """``--sme2-target=auto``: not a target of its own, but the choice of one (``plan``), made when the session
    first needs its target."""

    names = ("auto",)

    @classmethod
    def create(cls, name: str, settings: TargetSettings) -> "Target":
        return make_auto_target(settings)

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        return [doctor_check()]
