"""The local target: runner executables on this machine, as subprocesses.

Two ways to get SME2 on and off:
- two builds, like the reference kit: ``--sme2-runner-on`` and ``--sme2-runner-off``;
- one build with SME2 masked off: on Linux the preload library hides the
  SME/SME2 bits of AT_HWCAP2 from getauxval, which is what XNNPACK's cpuinfo
  reads, so the only difference between the two runs is the kernels chosen.

Runners are checked (exists, executable, built for this CPU architecture)
before anything runs. Arguments go to the process as a list, never through a
shell, so model names and paths cannot inject commands.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.call_plan import native_calls
from pytest_sme2.run.cpu import Machine, host_cpu
from pytest_sme2.run.kernel_libraries import raise_if_missing_kernels, runner_libraries
from pytest_sme2.run.targets.base import (
    EMULATED_TIMING,
    INFO,
    MISSING,
    READY,
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
    emulated_advice,
)
from pytest_sme2.run.targets.native_runner import (  # noqa: F401
    INPUTS_FILE,
    OUTPUTS_FILE,
    RESULT_PREFIX,
    RunnerFiles,
    build_result,
    pick_build,
    read_result,
    runner_arguments,
    two_builds,
    usage_advice,
)
from pytest_sme2.run.targets.native_runner import exit_description as _exit_description
from pytest_sme2.run.targets.native_runner import tail as _tail
from pytest_sme2.system import supervised
from pytest_sme2.system.elf import executable_arch

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import PerfSampler
    from pytest_sme2.run.device_state import DeviceState

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch() -> str:
    """This machine's architecture as ELF names it (``arm64`` -> ``aarch64``, ``amd64`` -> ``x86_64``)."""
    return _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())


def check_runner(path: Path | str, role: str, arch: str | None = None) -> Path:
    """Fail clearly before anything runs if a runner cannot run here (``arch``: where it runs; default this CPU)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{role} {path} does not exist; build one with `pytest-sme2 build-runner` or fix the path")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{role} {path} is not an executable file; `chmod +x` it or point to the runner binary")
    built_for = executable_arch(path)
    if arch is not None:
        if built_for != arch:
            raise UsageError(
                f"{role} {path} is built for {built_for or 'a non-ELF format'}, but this target runs {arch} "
                f"binaries; build one with `pytest-sme2 build-runner --arch linux-{arch}`"
            )
        return path
    host = host_arch()
    if built_for is not None and built_for != host:
        raise UsageError(
            f"{role} {path} is built for {built_for}, but this machine is {host}; use a runner built for {host} "
            "(`pytest-sme2 build-runner`), or an emulated or device target for other architectures"
        )
    return path


@dataclass(frozen=True)
class RunnerLaunch:
    """How run_runner_process starts a pytest-sme2 runner: behind ``prefix`` (e.g. qemu), the runner ``binary``,
    its environment, the target it reports as, whether SME2 is active, extra runner arguments, and under
    ``sampler`` for kernel sampling.

    ``fixed_layout``: run inside ``out_dir`` with the same short relative names for the runner, the
    program and every file on every machine, so the guest's argv (and with it the stack and heap
    layout the program sees) does not depend on where the checkout or the cache lives; used by the
    emulated target's counted run, whose instruction counts must repeat across machines."""

    prefix: list[str]
    binary: Path
    env: dict[str, str]
    info: TargetInfo
    sme2_active: bool
    extra_args: tuple[str, ...] = ()
    fixed_layout: bool = False
    sampler: "PerfSampler | None" = None


def run_runner_process(
    launch: RunnerLaunch,
    pte: Path,
    inputs: Path | None,
    spec: RunSpec,
    out_dir: Path,
    reference: Path | None = None,
) -> RunResult:
    """Run a pytest-sme2 runner as ``launch`` says and collect its artifacts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    program_name = Path(pte).name  # before fixed_layout renames it: what the user's errors name
    files, binary, cwd = _runner_files(launch, pte, inputs, out_dir, reference)
    command = [*launch.prefix, *runner_arguments(str(binary), files, spec), *launch.extra_args]
    if launch.sampler is not None:  # kernel_sampling.py: the sampled process runs under the profiler
        command = launch.sampler.wrap(command, out_dir)
    log = out_dir / RUNNER_LOG
    stdout_path = out_dir / RUNNER_STDOUT
    shown = shlex.join(command)
    code = _supervised_run(command, launch.env, cwd, spec, out_dir)
    if code != 0:
        raise_if_missing_kernels(log, program_name, launch.info.name)
        raise RunnerError(
            f"`{shown}` {_exit_description(code)}{usage_advice(code, log)}; log kept at {log}. Last "
            f"lines:\n{_tail(log)}"
        )
    answer = read_result(stdout_path, shown, str(binary))
    return build_result(answer, spec, launch.info, out_dir, log, launch.sme2_active, reference=reference is not None)


def _runner_files(
    launch: RunnerLaunch, pte: Path, inputs: Path | None, out_dir: Path, reference: Path | None
) -> tuple[RunnerFiles, Path, Path | None]:
    """The files the runner reads and writes, the runner's path and the folder it runs in: the real paths, or
    with ``launch.fixed_layout`` short relative names inside ``out_dir`` (links to the runner, program and
    kernel kits)."""
    binary = launch.binary
    timed, warmup = out_dir / TIMED_ETDUMP, out_dir / WARMUP_ETDUMP
    calls = None if inputs is None else native_calls(inputs, out_dir / INPUTS_FILE)
    inputs_file = None if calls is None else calls.inputs
    warmup_file = None if calls is None else calls.warmup_inputs
    cwd = None
    kernels = [str(k) for k in runner_libraries(pte, executable_arch(binary))]
    if launch.fixed_layout:
        cwd = out_dir
        binary = Path(".") / _link(out_dir / "runner", binary).name
        pte = Path(_link(out_dir / "program.pte", Path(pte)).name)
        timed, warmup = Path(TIMED_ETDUMP), Path(WARMUP_ETDUMP)
        inputs_file = None if inputs_file is None else Path(INPUTS_FILE)
        warmup_file = None if warmup_file is None else Path(warmup_file.name)
        kernels = [_linked_kit(out_dir, index, Path(k)) for index, k in enumerate(kernels)]
    files = RunnerFiles(
        pte=str(pte),
        timed_etdump=str(timed),
        warmup_etdump=str(warmup),
        outputs=OUTPUTS_FILE if launch.fixed_layout else str(out_dir / OUTPUTS_FILE),
        inputs=None if inputs_file is None else str(inputs_file),
        reference=None if reference is None else str(reference),
        warmup_inputs=None if warmup_file is None else str(warmup_file),
        call_flags=() if calls is None else calls.flags,
        kernel_libraries=tuple(kernels),
    )
    return files, binary, cwd


def _supervised_run(command: list[str], env: dict[str, str], cwd: Path | None, spec: RunSpec, out_dir: Path) -> int:
    """Run the runner's ``command`` supervised, its stderr to RUNNER_LOG (after the command line) and stdout to
    RUNNER_STDOUT in ``out_dir``; its exit code, or a RunnerError when it timed out and was killed."""
    log = out_dir / RUNNER_LOG
    shown = shlex.join(command)
    preload = "".join(f"{name}={env[name]} " for name in ("LD_PRELOAD", "DYLD_INSERT_LIBRARIES") if name in env)
    with open(log, "wb") as err, open(out_dir / RUNNER_STDOUT, "wb") as out:
        err.write(f"$ {preload}{shown}\n".encode())
        err.flush()
        process = supervised.start(command, limit_s=spec.timeout_s, stdout=out, stderr=err, env=env, cwd=cwd)
        try:
            return supervised.wait(process, timeout=spec.timeout_s)  # ends the runner on any interruption
        except subprocess.TimeoutExpired:
            raise RunnerError(
                f"`{shown}` {spec.timed_out()} and was killed; raise it there if the model "
                f"is that slow. Log: {log}\n{_tail(log)}"
            ) from None


def _linked_kit(out_dir: Path, index: int, library: Path) -> str:
    """``library``'s path through a link to its kernel kit in ``out_dir`` ("kernels0/..."): the same short name
    on every machine, and the kit's own layout under it, where the library finds its stand-ins."""
    from pytest_sme2.run.native.kernel_kit import kit_root

    root = kit_root(library)
    link = _link(out_dir / f"kernels{index}", root)
    return str(Path(link.name) / library.relative_to(root))


def _link(link: Path, target: Path) -> Path:
    """``link`` pointing at ``target`` (replaced if it exists)."""
    link.unlink(missing_ok=True)
    link.symlink_to(Path(target).resolve())
    return link


class LocalTarget(RegisteredTarget):
    """Runs runner executables on this machine's CPU."""

    names = ("local",)

    @classmethod
    def check(cls, name: str, settings: TargetSettings) -> None:
        """Runner binaries given by option must run on this machine."""
        for role, path in settings.runners.items():
            if path is not None:
                check_runner(path, f"runner ({role})")

    @classmethod
    def create(cls, name: str, settings: TargetSettings) -> "LocalTarget":
        return cls(
            settings.log_dir, runner=settings.runner, runner_on=settings.runner_on, runner_off=settings.runner_off
        )

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        return [_runner_check(), _kernel_sampling_check()]

    def __init__(
        self,
        log_dir: Path,
        runner: Path | None = None,
        runner_on: Path | None = None,
        runner_off: Path | None = None,
        mask_library: Path | None = None,
        machine: Machine | None = None,
    ):
        # ``machine`` (targets/auto.py; None: this computer): its CPU, and in its ``launcher`` and ``env`` an
        # emulator that runs that CPU's programs here (the tests' qemu SME2 machine); runners must then be built
        # for ``machine.cpu.arch``, and times are not hardware times.
        launcher = machine.launcher if machine is not None else ()
        self._cpu = machine.cpu if machine is not None else host_cpu()
        self._log_dir = log_dir
        self._launcher = list(launcher)
        self._launcher_env = dict(machine.env if machine is not None else {})
        arch = self._cpu.arch if launcher else None
        first = self.device_state()
        self._governor = first.governor() if first is not None else None  # in the fingerprint
        self.two_builds = two_builds(runner_on, runner_off)
        if runner_on is not None and runner_off is not None:  # two_builds: both or neither
            self._on = check_runner(runner_on, "SME2-on runner (--sme2-runner-on)", arch)
            self._off = check_runner(runner_off, "SME2-off runner (--sme2-runner-off)", arch)
            self._mask = None
        else:
            if runner is None:
                from pytest_sme2.run.native.build import build_runner

                runner = build_runner()
            self._on = self._off = check_runner(runner, "runner (--sme2-runner)", arch)
            self._mask = mask_library

    @property
    def info(self) -> TargetInfo:
        cpu = self._cpu
        mode = "two builds" if self.two_builds else "one build, SME2 masked by preload"
        details = {
            "system": cpu.system,
            "runtime": "native runner",
            "sme2_off_mode": mode,
            "runner_on": str(self._on),
            "runner_off": str(self._off),
            "governor": self._governor,
        }
        if self._launcher:
            details.update(launcher=shlex.join(self._launcher), timing=EMULATED_TIMING)
        return TargetInfo(
            name="local",
            cpu=cpu.name,
            arch=cpu.arch,
            has_sme2=cpu.has_sme2,
            emulated=bool(self._launcher),
            details=details,
        )

    def unsupported(self, sme2: bool | None) -> str | None:
        cpu = self._cpu
        if sme2 is True and not cpu.has_sme2:
            return (
                f"SME2 requested but this CPU '{cpu.name}' ({cpu.arch}) has no SME2; run the local target on a CPU "
                "that has it (Apple M4 Mac, Armv9.2 Linux board), or use a device with SME2 (--sme2-target=adb)"
                + emulated_advice(cpu.system)
            )
        if sme2 is False and not self.two_builds and cpu.system not in ("Linux", "Darwin"):
            return (
                f"SME2 off with one runner build needs the Linux or macOS masking library; on {cpu.system} pass two "
                "builds with --sme2-runner-on and --sme2-runner-off"
            )
        return None

    def _command(self, sme2: bool | None) -> tuple[Path, dict[str, str]]:
        env = {**os.environ, **self._launcher_env}
        if sme2 is False and not self.two_builds:
            if self._mask is None:
                from pytest_sme2.run.native.build import build_mask_library

                self._mask = build_mask_library()
            from pytest_sme2.run.native.build import mask_preload_variable

            variable = mask_preload_variable(self._cpu.system)
            separator = ":" if variable == "DYLD_INSERT_LIBRARIES" else " "
            env[variable] = separator.join(p for p in (str(self._mask), env.get(variable, "")) if p)
        binary = pick_build(sme2, self._cpu.has_sme2, self._on, self._off)
        return binary, env

    def kernel_sampler(self, period_ns: int) -> "PerfSampler":
        """Linux perf around the runner on this machine, or a UsageError saying what is missing."""
        from pytest_sme2.evidence.samplers import PerfSampler

        system = self.info.details.get("system")
        if system != "Linux":
            raise UsageError(
                f"kernel sampling on {system} is not supported yet (Linux perf and Android simpleperf "
                "are); docs/kernel_time.md says what is known of macOS samplers"
            )
        return PerfSampler.here(period_ns)

    def run(
        self,
        pte: Path,
        inputs: Path | None,
        spec: RunSpec,
        out_dir: Path,
        reference: Path | None = None,
        sampler: "PerfSampler | None" = None,
    ) -> RunResult:
        binary, env = self._command(spec.sme2)
        sme2_active = self._cpu.has_sme2 and spec.sme2 is not False
        launch = RunnerLaunch(self._launcher, binary, env, self.info, sme2_active, sampler=sampler)
        return run_runner_process(launch, pte, inputs, spec, out_dir, reference=reference)

    def device_state(self) -> "DeviceState | None":
        """This machine's governors, frequencies and temperatures (device_state.py); None under an emulator."""
        if self._launcher:
            return None
        from pytest_sme2.run.device_state import read_local_state

        return read_local_state()

    def close(self) -> None:
        return None


def _runner_check() -> DoctorLine:
    """Whether pytest-sme2's own runner for this machine is built (``pytest-sme2 build-runner`` builds it)."""
    from pytest_sme2.run.native.build import runner_binary, runtime_problem

    try:
        binary = runner_binary("host")
        unavailable = runtime_problem()
    except Exception as exc:  # no executorch, unsupported platform
        return DoctorLine("native runner (local target)", MISSING, f"cannot locate: {exc}", "pytest-sme2 build-runner")
    if unavailable:
        return DoctorLine("native runner (local target)", MISSING, unavailable, "pip install executorch==1.5.1")
    if binary.exists():
        return DoctorLine("native runner (local target)", READY, str(binary))
    return DoctorLine("native runner (local target)", MISSING, f"not built ({binary})", "pytest-sme2 build-runner")


def _kernel_sampling_check() -> DoctorLine:
    """Whether ``--sme2-kernel-sampling`` can sample the local target here (adb devices bring their own simpleperf).

    Reported, not required: without it the tests run and profiles have no kernel time."""
    from pytest_sme2.evidence.perf_samples import perf_executable, permission_problem, sampling_event

    name = "kernel sampling (local target)"
    if platform.system() != "Linux":
        return DoctorLine(name, INFO, f"not supported on {platform.system()} (Linux perf and Android simpleperf are)")
    try:
        executable = perf_executable()
    except UsageError as exc:
        return DoctorLine(name, INFO, "no Linux perf", str(exc).split(": ", 1)[-1])
    problem = permission_problem()
    if problem is not None:
        return DoctorLine(name, INFO, f"{executable} may not sample this user's processes", problem)
    return DoctorLine(name, READY, f"{executable} record -e {sampling_event()} (--sme2-kernel-sampling=on)")
