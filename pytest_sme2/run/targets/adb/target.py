"""``AdbTarget``: the native runner on one claimed Android device, as a Target, and the adb entry of the target
registry (its names, options, choice checks and doctor lines).

Per session it claims the device (claim.py), reads its facts (facts.py), refuses a runner built for another
architecture, restores what a killed session left changed and sets the fixed performance mode when asked
(performance_mode.py). Per run it pushes what the run needs and starts the runner (files.py: LD_LIBRARY_PATH, plus
LD_PRELOAD of the SME2-masking library for SME2 off with one build, and ``taskset`` for an affinity mask), streams
its output (streaming.py), pulls the ETDumps and outputs, and removes the run folder.
"""

from __future__ import annotations

import os
import shlex
import signal
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.errors import RunnerError, Sme2Warning, UsageError
from pytest_sme2.run.call_plan import native_calls
from pytest_sme2.run.device_state import cores_of_mask
from pytest_sme2.run.kernel_libraries import raise_if_missing_kernels
from pytest_sme2.run.targets.adb.claim import claim_device
from pytest_sme2.run.targets.adb.connection import AdbConnection
from pytest_sme2.run.targets.adb.facts import read_facts
from pytest_sme2.run.targets.adb.files import DeviceFiles
from pytest_sme2.run.targets.adb.options import ADB, OPTIONS, AdbOptions, adb_server_address, parse_adb_target
from pytest_sme2.run.targets.adb.performance_mode import PerformanceMode
from pytest_sme2.run.targets.adb.simpleperf import device_sampler, report_samples
from pytest_sme2.run.targets.adb.streaming import DeviceCommand, signal_note, stream
from pytest_sme2.run.targets.base import (
    RUNNER_LOG,
    RUNNER_STDOUT,
    TIMED_ETDUMP,
    WARMUP_ETDUMP,
    DoctorLine,
    RegisteredTarget,
    RunResult,
    RunSpec,
    TargetInfo,
    TargetSettings,
)
from pytest_sme2.run.targets.local import check_runner, host_arch
from pytest_sme2.run.targets.native_runner import (
    INPUTS_FILE,
    OUTPUTS_FILE,
    RunnerFiles,
    build_result,
    pick_build,
    read_result,
    runner_arguments,
    tail,
    two_builds,
    usage_advice,
)
from pytest_sme2.system.elf import executable_arch

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import SimpleperfSampler
    from pytest_sme2.run.device_state import DeviceState

# What a user does when a runner cannot start on a phone (SELinux, seccomp or a vendor kernel refusing a program
# that carries its own loader): the device check, then an NDK build (docs/targets.md).
START_ADVICE = (
    "; `pytest-sme2 doctor --sme2-target=adb` checks the device, and an Android (NDK) build of the "
    "runner passed with --sme2-runner avoids the carried glibc loader (docs/targets.md, 'Building for "
    "Android')"
)


@dataclass(frozen=True)
class _RunRequest:
    """One run as AdbTarget.run was asked for it, what _prepare pushes: the program, its inputs, the spec, the
    local folder its results go to, the reference program and the kernel sampler."""

    pte: Path
    inputs: Path | None
    spec: RunSpec
    out_dir: Path
    reference: Path | None = None
    sampler: "SimpleperfSampler | None" = None


class AdbTarget(RegisteredTarget):
    """Runs the native runner on one claimed Android device."""

    names = (ADB, f"{ADB}:SERIAL")
    options = OPTIONS
    checks_a_target = True

    @classmethod
    def check_name(cls, name: str) -> str:
        parse_adb_target(name)
        return name

    @classmethod
    def check(cls, name: str, settings: TargetSettings) -> None:
        AdbOptions.of(name, settings)

    @classmethod
    def create(cls, name: str, settings: TargetSettings) -> "AdbTarget":
        return cls(
            settings.log_dir,
            AdbOptions.of(name, settings),
            runner=settings.runner,
            runner_on=settings.runner_on,
            runner_off=settings.runner_off,
        )

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        from pytest_sme2.run.targets.adb.doctor import server_check

        return [server_check()]

    @classmethod
    def doctor_target(cls, name: str, settings: TargetSettings) -> list[DoctorLine]:
        from pytest_sme2.run.targets.adb.doctor import device_checks

        return device_checks(cls, name, settings)

    def __init__(
        self,
        log_dir: Path,
        options: AdbOptions | None = None,
        runner: Path | None = None,
        runner_on: Path | None = None,
        runner_off: Path | None = None,
    ):
        self._options = options or AdbOptions()
        self._log_dir = log_dir
        self.two_builds = two_builds(runner_on, runner_off)
        self._mask: Path | None = self._options.mask_library
        # The build of pytest-sme2's own runner (and masking library) used when no runner is given: chosen for
        # the device's architecture once its facts are read (None: the user gave the runner).
        self._own_build: str | None = None
        self._runs = 0
        self._server = adb_server_address(self._options.server)
        self._connection = AdbConnection(self._server)
        self._claim = claim_device(
            self._server, self._connection.states, self._options.serial, self._options.claim_timeout_s
        )
        self._performance: PerformanceMode | None = None
        try:
            self._connection.attach(self._claim.serial)
            self.facts = read_facts(self._connection)
            arch = self.facts.arch
            if runner_on is not None and runner_off is not None:  # two_builds: both or neither
                self._on = self._check(runner_on, "SME2-on runner (--sme2-runner-on)", arch)
                self._off = self._check(runner_off, "SME2-off runner (--sme2-runner-off)", arch)
            else:
                if runner is None:
                    runner = self._own_runner(arch)
                self._on = self._off = self._check(runner, "runner (--sme2-runner)", arch)
            if self._mask is not None:
                self._check(self._mask, "SME2-masking library (--sme2-adb-mask-library)", arch, executable=False)
            self._performance = PerformanceMode(self._connection, self.facts, self._options.device_dir)
            self._restored = self._performance.restore()  # an earlier session died with a setting changed
            if self._restored:
                warnings.warn(Sme2Warning(f"sme2: on {self.facts.described}: {self._restored}"), stacklevel=2)
            if self._options.performance_mode:
                self._performance.enter()
            self._performance.active = self._performance.on_device()  # what the fingerprint records
            first = self.device_state()
            self._governor = first.governor(cores_of_mask(self._options.affinity))  # in the fingerprint
        except BaseException:
            try:
                if self._performance is not None:
                    self._performance.leave()  # turned on above, before what failed
            except Exception:  # noqa: BLE001 - the device may be what failed; supervised.end_all tries again
                pass
            finally:
                self._claim.release()
            raise
        self._files = DeviceFiles(
            self._connection,
            f"{self._options.device_dir.rstrip('/')}/pytest-sme2-" f"{os.getpid()}-{uuid.uuid4().hex[:8]}",
        )

    # --- setup -------------------------------------------------------------------------------------

    def _own_runner(self, arch: str) -> Path:
        """pytest-sme2's own runner for a device of ``arch``: this machine's build when it is of that
        architecture, else the linux-aarch64 one (Debian's cross compiler, the aarch64 executorch wheel: the
        emulated target's runner). Both are glibc programs; they are pushed with their loader and libraries
        (carried_loader.py), so a phone needs no NDK build."""
        import platform

        from pytest_sme2.run.native.build import build_runner

        host = host_arch()
        if platform.system() == "Linux" and host == arch:
            self._own_build = "host"
        elif arch == "aarch64":
            self._own_build = "linux-aarch64"
        else:
            raise UsageError(
                f"{self.facts.described} runs {self.facts.abi} ({arch}) binaries, and pytest-sme2 builds "
                f"its runner for this machine ({host}) and for aarch64 only: pass a runner built for "
                "the device with --sme2-runner (see 'Building for Android' in docs/targets.md)"
            )
        return build_runner(self._own_build)

    def _check(self, path: Path, role: str, arch: str, executable: bool = True) -> Path:
        where = f"{self.facts.described} runs {self.facts.abi} ({arch}) binaries"
        if executable:
            try:
                return check_runner(path, role, arch=arch)
            except UsageError as exc:
                raise UsageError(
                    f"{exc}. The {where}: pass an Android build of the runner with --sme2-runner "
                    "(see 'Building for Android' in docs/targets.md)"
                ) from None
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"{role} {path} does not exist; build libsme2_mask.so for the device or fix the path")
        built_for = executable_arch(path)
        if built_for != arch:
            raise UsageError(f"{role} {path} is built for {built_for or 'a non-ELF format'}, but the {where}")
        return path

    # --- Target protocol ------------------------------------------------------------------------------

    @property
    def info(self) -> TargetInfo:
        f = self.facts
        mode = "two builds" if self.two_builds else "one build, SME2 masked by preload"
        return TargetInfo(
            name=f"adb:{f.serial}",
            cpu=f"{f.cpu} x{f.cores}" if f.cores else f.cpu,
            arch=f.arch,
            has_sme2=f.has_sme2,
            details={
                "serial": f.serial,
                "device_model": f.model,
                "manufacturer": f.manufacturer,
                "soc": f.soc,
                "android_version": f.android,
                "sdk": f.sdk,
                "abi": f.abi,
                "kernel_arch": f.kernel_arch,
                "cpuinfo_sme2": f.has_sme2,
                "adb_server": f"{self._server[0]}:{self._server[1]}",
                "runtime": "native runner over adb",
                "sme2_off_mode": mode,
                "runner_on": str(self._on),
                "runner_off": str(self._off),
                "affinity": self._options.affinity,
                "governor": self._governor,
                "fixed_performance_mode": self._performance is not None and self._performance.active,
                **({"restored_settings": self._restored} if self._restored else {}),
            },
        )

    def unsupported(self, sme2: bool | None) -> str | None:
        f = self.facts
        if sme2 is True and not f.has_sme2:
            return (
                f"SME2 requested but {f.described} has no sme2 in /proc/cpuinfo; run on a device whose CPU has "
                "SME2 (Armv9.2 cores such as Arm C1 / Cortex-X925 class)"
            )
        if sme2 is False and not self.two_builds and self._mask is None and self._own_build is None:
            return (
                "SME2 off with one runner build on a device needs the SME2-masking library built for it: pass "
                "--sme2-adb-mask-library PATH (libsme2_mask.so built with the NDK), or two builds with "
                "--sme2-runner-on / --sme2-runner-off"
            )
        return None

    def kernel_sampler(self, period_ns: int) -> "SimpleperfSampler":
        """The device's simpleperf (kernel_sampling.py), or a UsageError saying how to get one onto it."""
        return device_sampler(self._connection, self.facts, (self._on, self._off), period_ns)

    def run(
        self,
        pte: Path,
        inputs: Path | None,
        spec: RunSpec,
        out_dir: Path,
        reference: Path | None = None,
        sampler: "SimpleperfSampler | None" = None,
    ) -> RunResult:
        reason = self.unsupported(spec.sme2)
        if reason is not None and spec.sme2 is False:
            raise UsageError(reason)
        out_dir.mkdir(parents=True, exist_ok=True)
        log, stdout_path = out_dir / RUNNER_LOG, out_dir / RUNNER_STDOUT
        binary = pick_build(spec.sme2, self.facts.has_sme2, self._on, self._off)
        self._runs += 1
        run_dir = f"{self._files.session_dir}/run-{self._runs:03d}"
        try:
            request = _RunRequest(Path(pte), inputs, spec, out_dir, reference, sampler)
            command = self._prepare(binary, request, run_dir)
            shown = f"adb -s {self.facts.serial} shell {shlex.quote(command)}"
            with open(log, "wb") as err, open(stdout_path, "wb") as out:
                err.write(f"$ {shown}\n".encode())
                err.flush()
                device_command = DeviceCommand(command, shown, run_dir, log, self.facts.described)
                code = stream(self._connection, device_command, out, err, spec)
            if code != 0:
                # 126/127: the shell could not execute it; SIGSYS: seccomp refused a system call
                raise_if_missing_kernels(log, pte, self.info.name)
                advice = START_ADVICE if code in (126, 127, 128 + signal.SIGSYS) else usage_advice(code, log)
                raise RunnerError(
                    f"`{shown}` exited with status {code}{signal_note(code)} on "
                    f"{self.facts.described}; log kept at {log}{advice}. Last lines:\n{tail(log)}"
                )
            answer = read_result(stdout_path, shown, str(binary))
            if sampler is not None:
                report_samples(self._connection, self.facts, sampler, run_dir, log)
            self._files.pull(run_dir, spec, out_dir, log, self.facts.described, sampled=sampler is not None)
        finally:
            self._connection.remove(run_dir)
        return build_result(
            answer,
            spec,
            self.info,
            out_dir,
            log,
            sme2_active=self.facts.has_sme2 and spec.sme2 is not False,
            reference=reference is not None,
        )

    def device_state(self) -> "DeviceState":
        """Governors, frequencies, temperatures, thermal status and battery of the device now (device_state.py)."""
        from pytest_sme2.run.device_state import STATE_SCRIPT, DeviceState

        return DeviceState.parse(self._connection.shell(STATE_SCRIPT).stdout or "")

    def close(self) -> None:
        try:
            try:
                if self._files.pushed:
                    self._connection.remove(self._files.session_dir)
            finally:
                if self._performance is not None:
                    self._performance.leave()
        finally:
            self._claim.release()

    # --- the steps of a run ---------------------------------------------------------------------------

    def _prepare(self, binary: Path, run: _RunRequest, run_dir: str) -> str:
        """Push what the run needs and return the device shell command, every word quoted."""
        pte, inputs, spec, reference = run.pte, run.inputs, run.spec, run.reference
        files, connection = self._files, self._connection
        folder = files.push_binary(binary)
        device_reference = files.push_reference(reference) if reference is not None else None
        connection.shell(f"mkdir -p {shlex.quote(run_dir)}")
        device_pte = f"{run_dir}/{pte.name}"
        connection.push(pte, device_pte)
        device_inputs = device_warmup = None
        calls = None if inputs is None else native_calls(inputs, run.out_dir / INPUTS_FILE)
        if calls is not None:
            device_inputs = f"{run_dir}/{INPUTS_FILE}"
            connection.push(calls.inputs, device_inputs)
            if calls.warmup_inputs is not None:
                device_warmup = f"{run_dir}/{calls.warmup_inputs.name}"
                connection.push(calls.warmup_inputs, device_warmup)
        runner_files = RunnerFiles(
            pte=device_pte,
            timed_etdump=f"{run_dir}/{TIMED_ETDUMP}",
            warmup_etdump=f"{run_dir}/{WARMUP_ETDUMP}",
            outputs=f"{run_dir}/{OUTPUTS_FILE}",
            inputs=device_inputs,
            reference=device_reference,
            warmup_inputs=device_warmup,
            call_flags=() if calls is None else calls.flags,
            kernel_libraries=files.push_kits(pte, binary),
        )
        argv = runner_arguments(f"{folder}/{binary.name}", runner_files, spec)
        launch = files.launch(
            binary, folder, argv, self._options.affinity, self._preload(spec.sme2 is False), run_dir, run.sampler
        )
        return f"cd {shlex.quote(run_dir)} && echo $$ > runner.pid && {launch}"

    def _preload(self, sme2_off: bool) -> str | None:
        """The device path of the SME2-masking library a run preloads (SME2 off with one build), pushed once."""
        if not sme2_off or self.two_builds:
            return None
        if self._mask is None:
            from pytest_sme2.run.native.build import build_mask_library

            assert self._own_build is not None  # set: unsupported() refused this otherwise
            self._mask = build_mask_library(self._own_build)
        return f"{self._files.push_binary(self._mask)}/{self._mask.name}"

    # --- what doctor asks of a device -------------------------------------------------------------------

    def kernel_release(self) -> str:
        """``uname -r -v`` on the device (doctor)."""
        return (self._connection.shell("uname -r -v").stdout or "").strip() or "unknown"

    def start_check(self, sme2: bool) -> str:
        """Push the runner for ``sme2`` (on, or off: with the masking library) and start it with ``--version``
        the way runs start it; its answer, or a RunnerError with what the device said (``pytest-sme2 doctor``)."""
        reason = self.unsupported(sme2)
        if reason is not None:
            raise UsageError(reason)
        binary = self._off if sme2 is False else self._on
        folder = self._files.push_binary(binary)
        command = self._files.launch(
            binary,
            folder,
            [f"{folder}/{binary.name}", "--version"],
            self._options.affinity,
            self._preload(sme2 is False),
        )
        done = self._connection.shell(command)
        answer = (done.stdout or "").strip()
        if done.returncode != 0 or "pytest-sme2 runner" not in answer:
            said = ((done.stderr or "") + answer).strip()[-500:] or "nothing"
            raise RunnerError(
                f"the runner did not start on {self.facts.described} (`adb shell {command}` exited "
                f"with status {done.returncode}{signal_note(done.returncode)}; it said: {said})"
                f"{START_ADVICE}"
            )
        return answer.splitlines()[-1]
