"""The adb target: the native runner on an Android device, through adbutils.

Per session, the target claims one device (a file lock per adb server and
serial, so each pytest-xdist worker gets its own phone and no two tests run
on one device at once), reads its facts (model, SoC, Android version, ABI,
whether /proc/cpuinfo lists sme2), refuses a runner built for another
architecture, and makes a folder under /data/local/tmp. Per run it pushes the
runner with its bundled shared libraries (once), the .pte and the inputs,
runs the runner with LD_LIBRARY_PATH (plus LD_PRELOAD of the SME2-masking
library for SME2 off with one build, and ``taskset`` for an affinity mask),
streams stdout and stderr into the local artifacts as they come (so a device
lost mid-run still leaves its partial log), pulls the ETDumps and outputs,
and removes the run folder. Every word of a device shell command goes
through ``shlex.quote``; serials are checked against adb's serial alphabet.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import signal
import socket
import tempfile
import time
import warnings
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_sme2.errors import EtdumpError, RunnerError, Sme2Warning, UsageError
from pytest_sme2.run.cpu import parse_proc_cpuinfo
from pytest_sme2.run.call_plan import native_calls
from pytest_sme2.run.device_settings import FIXED_PERFORMANCE_MODE, DeviceSettings
from pytest_sme2.run.device_state import cores_of_mask
from pytest_sme2.run.kernel_libraries import raise_if_missing_kernels, runner_libraries
from pytest_sme2.run.targets.base import (
    DEFAULT_TIMEOUT_S,
    RUNNER_LOG,
    RUNNER_STDOUT,
    TIMED_ETDUMP,
    WARMUP_ETDUMP,
    RunResult,
    RunSpec,
    TargetInfo,
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
from pytest_sme2.system.carried_loader import carried_loader, needs_carried_loader
from pytest_sme2.system.elf import bundled_libraries, executable_arch
from pytest_sme2.system.safe_files import open_no_follow, private_folder

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import SimpleperfSampler
    from pytest_sme2.run.device_state import DeviceState

ADB = "adb"
DEFAULT_DEVICE_DIR = "/data/local/tmp"
DEFAULT_SERVER = ("127.0.0.1", 5037)
_SERIAL = re.compile(r"[A-Za-z0-9._:@+\-]+")
_AFFINITY = re.compile(r"(0x)?[0-9A-Fa-f]+")
_ABI_ARCH = {"arm64-v8a": "aarch64", "armeabi-v7a": "arm", "armeabi": "arm", "x86_64": "x86_64", "x86": "i386"}
_FACTS_TIMEOUT_S = 30.0
_CLEANUP_TIMEOUT_S = 15.0
_REPORT_TIMEOUT_S = 300.0  # simpleperf report-sample of one sampled round
# What a user does when a runner cannot start on a phone (SELinux, seccomp or a vendor kernel refusing a program
# that carries its own loader): the device check, then an NDK build (docs/targets.md).
_START_ADVICE = ("; `pytest-sme2 doctor --sme2-target=adb` checks the device, and an Android (NDK) build of the "
                 "runner passed with --sme2-runner avoids the carried glibc loader (docs/targets.md, 'Building for "
                 "Android')")


def parse_adb_target(value: str) -> str | None:
    """``adb`` -> None (any free device, or ANDROID_SERIAL), ``adb:SERIAL`` -> SERIAL; else a UsageError."""
    if value == ADB:
        return None
    if value.startswith(ADB + ":"):
        serial = value[len(ADB) + 1:]
        if _SERIAL.fullmatch(serial):
            return serial
        raise UsageError(
            f"--sme2-target={value!r}: {serial!r} is not a device serial (letters, digits and . _ : @ + - only, "
            "as `adb devices` prints them); use --sme2-target=adb:SERIAL or --sme2-target=adb"
        )
    raise UsageError(f"--sme2-target={value!r} is not an adb target; use --sme2-target=adb or adb:SERIAL")


def is_adb_target(value: str) -> bool:
    return value == ADB or value.startswith(ADB + ":")


def adb_server_address(configured: str | None = None, environ: dict[str, str] | None = None) -> tuple[str, int]:
    """Where the adb server listens: --sme2-adb-server, else ADB_SERVER_SOCKET / ANDROID_ADB_SERVER_HOST|PORT as adb reads them."""
    env = os.environ if environ is None else environ
    text, origin = configured, "--sme2-adb-server / sme2_adb_server"
    if not text and env.get("ADB_SERVER_SOCKET"):
        text, origin = env["ADB_SERVER_SOCKET"], "ADB_SERVER_SOCKET"
        if not text.startswith("tcp:"):
            raise UsageError(f"ADB_SERVER_SOCKET={text!r} is not supported; use tcp:HOST:PORT or tcp:PORT")
        text = text[len("tcp:"):]
    if not text:
        host = env.get("ANDROID_ADB_SERVER_HOST") or DEFAULT_SERVER[0]
        port_text = env.get("ANDROID_ADB_SERVER_PORT") or str(DEFAULT_SERVER[1])
        text, origin = f"{host}:{port_text}", "ANDROID_ADB_SERVER_HOST/PORT"
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = DEFAULT_SERVER[0], text
    try:
        port = int(port_text)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise UsageError(f"adb server address {text!r} (from {origin}) is not HOST:PORT with a port 1-65535") from None
    return host or DEFAULT_SERVER[0], port


@dataclass(frozen=True)
class AdbOptions:
    """The adb target's settings, from --sme2-target=adb[:SERIAL] and the --sme2-adb-* options."""

    serial: str | None = None
    server: str | None = None
    affinity: str | None = None
    device_dir: str = DEFAULT_DEVICE_DIR
    mask_library: Path | None = None
    claim_timeout_s: float = DEFAULT_TIMEOUT_S  # as long as one run may take: a claimed device frees by then
    performance_mode: bool = False  # Android 11+ fixed performance mode for the session (--sme2-adb-performance-mode)

    def __post_init__(self) -> None:
        if self.serial is not None and not _SERIAL.fullmatch(self.serial):
            raise UsageError(f"serial {self.serial!r} is not a device serial (letters, digits and . _ : @ + -)")
        if self.affinity is not None and not (_AFFINITY.fullmatch(self.affinity) and int(self.affinity, 16)):
            raise UsageError(
                f"--sme2-adb-affinity={self.affinity!r} is not a CPU mask; give a non-zero hex mask as taskset takes "
                "it, e.g. f0 for CPUs 4-7"
            )
        if not self.device_dir.startswith("/"):
            raise UsageError(f"--sme2-adb-dir={self.device_dir!r} must be an absolute path on the device")
        if not self.claim_timeout_s >= 0:
            raise UsageError(f"--sme2-adb-claim-timeout={self.claim_timeout_s!r} must be >= 0 seconds")


@dataclass(frozen=True)
class DeviceFacts:
    """What the target knows about its device; goes into every profile's metadata."""

    serial: str
    model: str
    manufacturer: str
    soc: str
    android: str
    sdk: str
    abi: str
    kernel_arch: str
    cpu: str
    cores: int
    has_sme2: bool

    @property
    def arch(self) -> str:
        return _ABI_ARCH.get(self.abi, self.kernel_arch)

    @property
    def described(self) -> str:
        return f"device {self.serial} ({self.manufacturer} {self.model}, SoC {self.soc}, Android {self.android})"


class _DeviceClaim:
    """An exclusive, process-lifetime lock on one device of one adb server (fcntl, so it dies with the process)."""

    def __init__(self, server: tuple[str, int], serial: str, handle: IO[str]):
        self.server, self.serial, self._handle = server, serial, handle

    @staticmethod
    def path(server: tuple[str, int], serial: str) -> Path:
        """The claim's lock file, in a folder of this user's own under the temp folder: a shared /tmp
        lets anyone create a shared claims folder first and plant links where we would write."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{server[0]}_{server[1]}_{serial}")
        return Path(tempfile.gettempdir()) / f"pytest-sme2-adb-claims-{os.getuid()}" / f"{name}.lock"

    @classmethod
    def try_claim(cls, server: tuple[str, int], serial: str) -> "_DeviceClaim | None":
        path = cls.path(server, serial)
        private_folder(path.parent)
        handle = os.fdopen(open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o600), "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} worker {os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")
        handle.flush()
        return cls(server, serial, handle)

    def release(self) -> None:
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


def _signal_note(code: int) -> str:
    """adbd reports a process killed by signal N as exit status 128+N."""
    if 128 < code < 128 + 65:
        try:
            return f" (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            return f" (killed by signal {code - 128})"
    return ""


class _Lost(Exception):
    """The shell stream ended before the runner's exit status arrived."""


class AdbTarget:
    """Runs the native runner on one claimed Android device."""

    def __init__(self, log_dir: Path, options: AdbOptions | None = None, runner: Path | None = None,
                 runner_on: Path | None = None, runner_off: Path | None = None):
        import adbutils

        self._options = options or AdbOptions()
        self._log_dir = log_dir
        self.two_builds = two_builds(runner_on, runner_off)
        self._mask: Path | None = self._options.mask_library
        # The build of pytest-sme2's own runner (and masking library) used when no runner is given: chosen for
        # the device's architecture once its facts are read (None: the user gave the runner).
        self._own_build: str | None = None
        self._pushed: dict[Path, str] = {}  # local binary or reference program -> its folder on the device
        self._loaders: dict[Path, str] = {}  # pushed glibc program -> its carried loader's file name
        self._runs = 0
        self._server = adb_server_address(self._options.server)
        self._require_server()
        self._client = adbutils.AdbClient(host=self._server[0], port=self._server[1], socket_timeout=60)
        self._claim = self._claim_device()
        try:
            self._device = self._client.device(self._claim.serial)
            self.facts = self._read_facts()
            arch = self.facts.arch
            if not self.two_builds and runner is None:
                runner = self._own_runner(arch)
            if self.two_builds:
                self._on = self._check(runner_on, "SME2-on runner (--sme2-runner-on)", arch)
                self._off = self._check(runner_off, "SME2-off runner (--sme2-runner-off)", arch)
            else:
                self._on = self._off = self._check(runner, "runner (--sme2-runner)", arch)
            if self._mask is not None:
                self._check(self._mask, "SME2-masking library (--sme2-adb-mask-library)", arch, executable=False)
            self._performance_mode = False
            self._settings = DeviceSettings(self._options.device_dir, self._shell, self._apply_setting,
                                            self.facts.described)
            self._restored = self._settings.restore()  # an earlier session died with a setting changed
            if self._restored:
                warnings.warn(Sme2Warning(f"sme2: on {self.facts.described}: {self._restored}"), stacklevel=2)
            if self._options.performance_mode:
                self._enter_performance_mode()
            self._performance_mode = self._performance_mode_on_device()  # what the fingerprint records
            first = self.device_state()
            self._governor = first.governor(cores_of_mask(self._options.affinity))  # in the fingerprint
        except BaseException:
            try:
                self._leave_performance_mode()  # turned on above, before what failed
            except Exception:  # noqa: BLE001 - the device may be what failed; supervised.end_all tries again
                pass
            finally:
                self._claim.release()
            raise
        self._session_dir = f"{self._options.device_dir.rstrip('/')}/pytest-sme2-{os.getpid()}-{uuid.uuid4().hex[:8]}"

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
            raise UsageError(f"{self.facts.described} runs {self.facts.abi} ({arch}) binaries, and pytest-sme2 builds "
                             f"its runner for this machine ({host}) and for aarch64 only: pass a runner built for "
                             "the device with --sme2-runner (see 'Building for Android' in docs/targets.md)")
        return build_runner(self._own_build)

    def _require_server(self) -> None:
        """adbutils would start an adb server on a refused connection; say what is missing instead."""
        try:
            socket.create_connection(self._server, timeout=3).close()
        except OSError as exc:
            host, port = self._server
            raise RunnerError(
                f"no adb server answers at {host}:{port} ({exc}); start it with `adb start-server`, or point "
                "--sme2-adb-server / ANDROID_ADB_SERVER_PORT / ADB_SERVER_SOCKET at the one you use"
            ) from None

    def _states(self) -> dict[str, str]:
        import adbutils

        try:
            return {info.serial: info.state for info in self._client.list()}
        except (adbutils.AdbError, OSError) as exc:
            raise RunnerError(f"the adb server at {self._server[0]}:{self._server[1]} failed to list devices: {exc}")

    def _claim_device(self) -> _DeviceClaim:
        wanted = self._options.serial or os.environ.get("ANDROID_SERIAL") or None
        deadline = time.monotonic() + self._options.claim_timeout_s
        server = f"{self._server[0]}:{self._server[1]}"
        while True:
            states = self._states()
            if wanted is not None:
                if wanted not in states:
                    seen = ", ".join(f"{s} ({st})" for s, st in sorted(states.items())) or "none"
                    raise RunnerError(f"device {wanted} is not attached to the adb server at {server}; "
                                      f"`adb devices` shows: {seen}")
                if states[wanted] != "device":
                    raise RunnerError(f"device {wanted} is {states[wanted]}, not ready; reconnect it or authorise "
                                      "this computer on the phone")
                candidates = [wanted]
            else:
                candidates = sorted(s for s, state in states.items() if state == "device")
                if not candidates:
                    raise RunnerError(f"no Android device is ready at the adb server {server} (`adb devices` shows: "
                                      f"{', '.join(f'{s} ({st})' for s, st in sorted(states.items())) or 'none'}); "
                                      "connect one and enable USB debugging")
            for serial in candidates:
                claim = _DeviceClaim.try_claim(self._server, serial)
                if claim is not None:
                    return claim
            if time.monotonic() >= deadline:
                raise RunnerError(
                    f"every ready device ({', '.join(candidates)}) at {server} is claimed by another pytest worker or "
                    f"session for {self._options.claim_timeout_s:g} s; run with at most as many xdist workers as "
                    "devices (-n), or raise --sme2-adb-claim-timeout"
                )
            time.sleep(0.2)

    def _shell(self, command: str, timeout: float = _FACTS_TIMEOUT_S) -> Any:
        import adbutils

        try:
            return self._device.shell2(command, timeout=timeout, v2=True)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self._device_error(f"`{command}`", exc) from None

    def _read_facts(self) -> DeviceFacts:
        props: dict[str, str] = {}
        for line in self._shell("getprop").stdout.splitlines():
            match = re.fullmatch(r"\[([^\]]*)\]: \[(.*)\]", line.strip())
            if match:
                props[match.group(1)] = match.group(2)
        cpuinfo = self._shell("cat /proc/cpuinfo").stdout
        kernel_arch = self._shell("uname -m").stdout.strip()
        abi = props.get("ro.product.cpu.abi", "")
        cpu_name, features = parse_proc_cpuinfo(cpuinfo, _ABI_ARCH.get(abi, kernel_arch))
        cores = sum(1 for line in cpuinfo.splitlines() if re.match(r"processor\s*:\s*\d+", line))
        soc = props.get("ro.soc.model") or props.get("ro.board.platform") or props.get("ro.hardware") or "unknown SoC"
        return DeviceFacts(
            serial=self._claim.serial, model=props.get("ro.product.model", "unknown model"),
            manufacturer=props.get("ro.product.manufacturer", ""), soc=soc,
            android=props.get("ro.build.version.release", "?"), sdk=props.get("ro.build.version.sdk", "?"),
            abi=abi or kernel_arch, kernel_arch=kernel_arch, cores=cores,
            cpu=cpu_name if cpu_name not in (soc, kernel_arch, abi) else f"{abi or kernel_arch} CPU",
            has_sme2="sme2" in features,
        )

    def _check(self, path: Path, role: str, arch: str, executable: bool = True) -> Path:
        where = f"{self.facts.described} runs {self.facts.abi} ({arch}) binaries"
        if executable:
            try:
                return check_runner(path, role, arch=arch)
            except UsageError as exc:
                raise UsageError(f"{exc}. The {where}: pass an Android build of the runner with --sme2-runner "
                                 "(see 'Building for Android' in docs/targets.md)") from None
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
            name=f"adb:{f.serial}", cpu=f"{f.cpu} x{f.cores}" if f.cores else f.cpu, arch=f.arch,
            has_sme2=f.has_sme2,
            details={"serial": f.serial, "device_model": f.model, "manufacturer": f.manufacturer, "soc": f.soc,
                     "android_version": f.android, "sdk": f.sdk, "abi": f.abi, "kernel_arch": f.kernel_arch,
                     "cpuinfo_sme2": f.has_sme2, "adb_server": f"{self._server[0]}:{self._server[1]}",
                     "runtime": "native runner over adb", "sme2_off_mode": mode, "runner_on": str(self._on),
                     "runner_off": str(self._off), "affinity": self._options.affinity, "governor": self._governor,
                     "fixed_performance_mode": self._performance_mode,
                     **({"restored_settings": self._restored} if self._restored else {})},
        )

    def unsupported(self, sme2: bool | None) -> str | None:
        f = self.facts
        if sme2 is True and not f.has_sme2:
            return (f"SME2 requested but {f.described} has no sme2 in /proc/cpuinfo; run on a device whose CPU has "
                    "SME2 (Armv9.2 cores such as Arm C1 / Cortex-X925 class)")
        if sme2 is False and not self.two_builds and self._mask is None and self._own_build is None:
            return ("SME2 off with one runner build on a device needs the SME2-masking library built for it: pass "
                    "--sme2-adb-mask-library PATH (libsme2_mask.so built with the NDK), or two builds with "
                    "--sme2-runner-on / --sme2-runner-off")
        return None

    def kernel_sampler(self, period_ns: int) -> "SimpleperfSampler":
        """The device's simpleperf (kernel_sampling.py), or a UsageError saying how to get one onto it."""
        from pytest_sme2.evidence.samplers import SimpleperfSampler

        found = self._shell("command -v simpleperf || { test -x /data/local/tmp/simpleperf && "
                            "echo /data/local/tmp/simpleperf; }").stdout.strip()
        if not found:
            raise UsageError(f"{self.facts.described} has no simpleperf (Android 9 and later ship "
                             "/system/bin/simpleperf); push the NDK's simpleperf/bin/android/arm64/simpleperf to "
                             "/data/local/tmp/simpleperf")
        libraries = {library.parent for binary in {self._on, self._off} for library in bundled_libraries(binary).values()}
        return SimpleperfSampler(found.splitlines()[-1], period_ns, tuple(sorted(libraries)))

    def run(self, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path,
            reference: Path | None = None, sampler: "SimpleperfSampler | None" = None) -> RunResult:
        reason = self.unsupported(spec.sme2)
        if reason is not None and spec.sme2 is False:
            raise UsageError(reason)
        out_dir.mkdir(parents=True, exist_ok=True)
        log, stdout_path = out_dir / RUNNER_LOG, out_dir / RUNNER_STDOUT
        binary = pick_build(spec.sme2, self.facts.has_sme2, self._on, self._off)
        self._runs += 1
        run_dir = f"{self._session_dir}/run-{self._runs:03d}"
        try:
            command = self._prepare(binary, Path(pte), inputs, spec, out_dir, run_dir, reference, sampler)
            shown = f"adb -s {self.facts.serial} shell {shlex.quote(command)}"
            with open(log, "wb") as err, open(stdout_path, "wb") as out:
                err.write(f"$ {shown}\n".encode())
                err.flush()
                code = self._stream(command, out, err, spec, run_dir, shown, log)
            if code != 0:
                # 126/127: the shell could not execute it; SIGSYS: seccomp refused a system call
                raise_if_missing_kernels(log, pte, self.info.name)
                advice = _START_ADVICE if code in (126, 127, 128 + signal.SIGSYS) else usage_advice(code, log)
                raise RunnerError(f"`{shown}` exited with status {code}{_signal_note(code)} on "
                                  f"{self.facts.described}; log kept at {log}{advice}. Last lines:\n{tail(log)}")
            answer = read_result(stdout_path, shown, str(binary))
            if sampler is not None:
                self._report_samples(sampler, run_dir, log)
            self._pull(run_dir, spec, out_dir, log, sampled=sampler is not None)
        finally:
            self._cleanup(run_dir)
        return build_result(answer, spec, self.info, out_dir, log,
                            sme2_active=self.facts.has_sme2 and spec.sme2 is not False,
                            reference=reference is not None)

    def close(self) -> None:
        try:
            try:
                if self._pushed:
                    self._cleanup(self._session_dir)
            finally:
                self._leave_performance_mode()
        finally:
            self._claim.release()

    def _set_performance_mode(self, enabled: bool) -> None:
        command = f"cmd power set-fixed-performance-mode-enabled {'true' if enabled else 'false'}"
        done = self._shell(command)
        said = ((done.stdout or "") + (done.stderr or "")).strip()
        if done.returncode != 0 or "Unknown command" in said or "Exception" in said:
            raise RunnerError(f"`adb -s {self.facts.serial} shell {command}` failed on {self.facts.described} "
                              f"(exit {done.returncode}): {said[-300:] or 'no output'}")

    def _apply_setting(self, name: str, value: str) -> None:
        """Set a device setting a marker names (device_settings.py) to ``value``."""
        if name == FIXED_PERFORMANCE_MODE:
            self._set_performance_mode(value == "true")

    def _performance_mode_on_device(self) -> bool:
        """Whether the device's marker says the fixed performance mode is on now (Android has no getter for it)."""
        marker = self._settings.read()
        return marker is not None and marker.changed.get(FIXED_PERFORMANCE_MODE) == "true"

    def _enter_performance_mode(self) -> None:
        """Android's fixed performance mode (Android 11+: ``cmd power set-fixed-performance-mode-enabled``), on
        for the session: the CPU and GPU clocks stay at fixed levels, so runs do not ride the governor's ramps.
        The device's marker records it first (device_settings.py: the next session turns it off if this one is
        SIGKILLed); turned off again at close, and by supervised.end_all when the session is killed (SIGTERM,
        SIGHUP)."""
        if not self.facts.sdk.isdigit() or int(self.facts.sdk) < 30:
            raise UsageError(f"--sme2-adb-performance-mode needs Android 11 (SDK 30) or later; {self.facts.described} "
                             f"reports SDK {self.facts.sdk}: leave the option off")
        from pytest_sme2.system import supervised

        self._settings.record(FIXED_PERFORMANCE_MODE, "true")
        self._performance_mode = True  # from here on, close and failures turn it off
        self._set_performance_mode(True)
        supervised.on_end(id(self), self._turn_performance_mode_off)

    def _turn_performance_mode_off(self) -> None:
        self._set_performance_mode(False)
        self._settings.clear()

    def _leave_performance_mode(self) -> None:
        if not getattr(self, "_performance_mode", False):
            return
        from pytest_sme2.system import supervised

        self._turn_performance_mode_off()  # if this fails, supervised.end_all tries again at exit
        supervised.forget_end(id(self))
        self._performance_mode = False

    # --- the steps of a run ---------------------------------------------------------------------------

    def _device_error(self, what: str, exc: BaseException, log: Path | None = None) -> RunnerError:
        """An adb failure, named by serial; says when the device went away."""
        serial = self._claim.serial
        try:
            state = self._states().get(serial, "not attached")
        except RunnerError as listing:
            state = f"unknown ({listing})"
        kept = f"; partial log kept at {log}" if log is not None else ""
        if state != "device":
            self._pushed.clear()  # a reconnected device gets everything pushed again
            return RunnerError(f"device {serial} went {state} during {what}{kept}; "
                               f"check the cable or `adb -s {serial} reconnect` (adb said: {exc})")
        return RunnerError(f"adb failed on device {serial} during {what}{kept}: {type(exc).__name__}: {exc}")

    def _push(self, local: Path, remote: str, mode: int = 0o644) -> None:
        import adbutils

        try:
            self._device.sync.push(local, remote, mode=mode)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self._device_error(f"pushing {local} to {remote}", exc) from None

    def _push_binary(self, binary: Path) -> str:
        """Push a runner (or the mask library) with its bundled libraries once; returns its folder. A glibc
        runner also gets its loader and the C and C++ libraries, which a phone does not have."""
        if binary in self._pushed:
            return self._pushed[binary]
        folder = f"{self._session_dir}/bin-{len(self._pushed)}"
        self._shell(f"mkdir -p {shlex.quote(folder)}")
        self._push(binary, f"{folder}/{binary.name}", 0o755)
        if needs_carried_loader(binary):
            carried = carried_loader(binary)
            libraries = carried.libraries
            self._push(carried.loader, f"{folder}/{carried.loader_name}", 0o755)
            self._loaders[binary] = carried.loader_name
        else:
            libraries = bundled_libraries(binary)
        for name, library in libraries.items():
            self._push(library, f"{folder}/{name}", 0o644)
        self._pushed[binary] = folder
        return folder

    def _push_kits(self, pte: Path, binary: Path) -> tuple[str, ...]:
        """Push the kernel kits the program needs (kernel_libraries.runner_libraries) once per session, each in
        its own layout, where its library finds its stand-ins; returns the libraries' device paths."""
        from pytest_sme2.run.native.kernel_kit import kit_files, kit_root

        paths = []
        for library in runner_libraries(pte, executable_arch(binary)):
            root = kit_root(library)
            if root not in self._pushed:
                folder = f"{self._session_dir}/kit-{len(self._pushed)}"
                for file in kit_files(library):
                    remote = f"{folder}/{file.relative_to(root).as_posix()}"
                    self._shell(f"mkdir -p {shlex.quote(remote.rsplit('/', 1)[0])}")
                    self._push(file, remote)
                self._pushed[root] = folder
            paths.append(f"{self._pushed[root]}/{library.relative_to(root).as_posix()}")
        return tuple(paths)

    def _push_reference(self, reference: Path) -> str:
        """Push the reference program once per session (it is megabytes and the same for every run)."""
        if reference not in self._pushed:
            folder = f"{self._session_dir}/reference-{len(self._pushed)}"
            self._shell(f"mkdir -p {shlex.quote(folder)}")
            self._push(reference, f"{folder}/{reference.name}")
            self._pushed[reference] = folder
        return f"{self._pushed[reference]}/{reference.name}"

    def _report_samples(self, sampler: "SimpleperfSampler", run_dir: str, log: Path) -> None:
        """``simpleperf report-sample`` on the device, next to its perf.data; a RunnerError if it fails."""
        command = " ".join(shlex.quote(word) for word in sampler.report_argv(run_dir))
        done = self._shell(command, timeout=_REPORT_TIMEOUT_S)
        if done.returncode != 0:
            raise RunnerError(f"`adb -s {self.facts.serial} shell {command}` exited with status {done.returncode}: "
                              f"{(done.stderr or done.stdout or '').strip()[-500:]}; run log: {log}")

    def _prepare(self, binary: Path, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path,
                 run_dir: str, reference: Path | None = None, sampler: "SimpleperfSampler | None" = None) -> str:
        """Push what the run needs and return the device shell command, every word quoted."""
        folder = self._push_binary(binary)
        device_reference = self._push_reference(reference) if reference is not None else None
        self._shell(f"mkdir -p {shlex.quote(run_dir)}")
        device_pte = f"{run_dir}/{pte.name}"
        self._push(pte, device_pte)
        device_inputs = device_warmup = None
        calls = None if inputs is None else native_calls(inputs, out_dir / INPUTS_FILE)
        if calls is not None:
            device_inputs = f"{run_dir}/{INPUTS_FILE}"
            self._push(calls.inputs, device_inputs)
            if calls.warmup_inputs is not None:
                device_warmup = f"{run_dir}/{calls.warmup_inputs.name}"
                self._push(calls.warmup_inputs, device_warmup)
        files = RunnerFiles(pte=device_pte, timed_etdump=f"{run_dir}/{TIMED_ETDUMP}",
                            warmup_etdump=f"{run_dir}/{WARMUP_ETDUMP}", outputs=f"{run_dir}/{OUTPUTS_FILE}",
                            inputs=device_inputs, reference=device_reference, warmup_inputs=device_warmup,
                            call_flags=() if calls is None else calls.flags,
                            kernel_libraries=self._push_kits(pte, binary))
        argv = runner_arguments(f"{folder}/{binary.name}", files, spec)
        return (f"cd {shlex.quote(run_dir)} && echo $$ > runner.pid && "
                f"{self._launch(binary, folder, argv, spec.sme2 is False, run_dir, sampler)}")

    def _launch(self, binary: Path, folder: str, argv: list[str], sme2_off: bool, run_dir: str | None = None,
                sampler: "SimpleperfSampler | None" = None) -> str:
        """``export ... && exec ...``: the runner ``argv`` started the way every run starts it (through its carried
        loader, under simpleperf and taskset when asked, with the masking library preloaded for SME2 off)."""
        if binary in self._loaders:  # started through its own loader, which finds its libraries in its folder
            argv = [f"{folder}/{self._loaders[binary]}", "--library-path", folder, *argv]
        if sampler is not None and run_dir is not None:
            argv = sampler.device_argv(argv, run_dir)
        if self._options.affinity:
            argv = ["taskset", self._options.affinity, *argv]
        environment = [f"LD_LIBRARY_PATH={shlex.quote(folder)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"]
        if sme2_off and not self.two_builds:
            if self._mask is None:
                from pytest_sme2.run.native.build import build_mask_library

                self._mask = build_mask_library(self._own_build)  # set: unsupported() refused this otherwise
            mask_folder = self._push_binary(self._mask)
            environment.append(f"LD_PRELOAD={shlex.quote(f'{mask_folder}/{self._mask.name}')}")
        exports = " ".join(f"export {assignment} &&" for assignment in environment)
        return f"{exports} exec {' '.join(shlex.quote(word) for word in argv)}"

    def device_state(self) -> "DeviceState":
        """Governors, frequencies, temperatures, thermal status and battery of the device now (device_state.py)."""
        from pytest_sme2.run.device_state import STATE_SCRIPT, DeviceState

        return DeviceState.parse(self._shell(STATE_SCRIPT).stdout or "")

    def kernel_release(self) -> str:
        """``uname -r -v`` on the device (doctor)."""
        return (self._shell("uname -r -v").stdout or "").strip() or "unknown"

    def start_check(self, sme2: bool) -> str:
        """Push the runner for ``sme2`` (on, or off: with the masking library) and start it with ``--version``
        the way runs start it; its answer, or a RunnerError with what the device said (``pytest-sme2 doctor``)."""
        reason = self.unsupported(sme2)
        if reason is not None:
            raise UsageError(reason)
        binary = self._off if sme2 is False else self._on
        folder = self._push_binary(binary)
        command = self._launch(binary, folder, [f"{folder}/{binary.name}", "--version"], sme2 is False)
        done = self._shell(command)
        answer = (done.stdout or "").strip()
        if done.returncode != 0 or "pytest-sme2 runner" not in answer:
            said = ((done.stderr or "") + answer).strip()[-500:] or "nothing"
            raise RunnerError(f"the runner did not start on {self.facts.described} (`adb shell {command}` exited "
                              f"with status {done.returncode}{_signal_note(done.returncode)}; it said: {said})"
                              f"{_START_ADVICE}")
        return answer.splitlines()[-1]

    def _stream(self, command: str, out: IO[bytes], err: IO[bytes], spec: RunSpec, run_dir: str, shown: str,
                log: Path) -> int:
        """Run over shell,v2, writing stdout/stderr as they arrive; the exit status, or a RunnerError."""
        import adbutils

        deadline = time.monotonic() + spec.timeout_s
        try:
            connection = self._device.open_transport(timeout=60)
            connection.send_command(f"shell,v2:{command}")
            connection.check_okay()
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self._device_error(f"starting `{shown}`", exc, log) from None
        sock = connection.conn
        finished = False
        try:
            while True:
                header = self._read(sock, 5, deadline)
                kind, length = header[0], int.from_bytes(header[1:5], "little")
                data = self._read(sock, length, deadline) if length else b""
                if kind == 1:
                    out.write(data)
                    out.flush()
                elif kind == 2:
                    err.write(data)
                    err.flush()
                elif kind == 3:
                    finished = True
                    return data[0] if data else 255
        except socket.timeout:
            raise RunnerError(
                f"`{shown}` {spec.timed_out()} on {self.facts.described} and was killed; raise "
                f"it there if the model is that slow. Log: {log}\n{tail(log)}"
            ) from None
        except (_Lost, OSError) as exc:
            err.write(f"\npytest-sme2: the adb stream ended before the runner's exit status ({exc})\n".encode())
            err.flush()
            raise self._device_error(f"the run of `{shown}`", exc, log) from None
        finally:
            # A timeout, Ctrl-C or any exception before the exit status: the runner must not go on
            # on the device. adbd ends a shell whose socket closes; the kill is for devices that do not.
            connection.close()
            if not finished:
                self._kill(run_dir)

    @staticmethod
    def _read(sock: socket.socket, n: int, deadline: float) -> bytes:
        data = b""
        while len(data) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            sock.settimeout(remaining)
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise _Lost("connection closed")
            data += chunk
        return data

    def _kill(self, run_dir: str) -> None:
        """Kill the runner of a run that did not finish (its pid is in the run folder)."""
        import adbutils

        try:
            self._device.shell2(f"kill -9 $(cat {shlex.quote(run_dir + '/runner.pid')}) 2>/dev/null",
                                timeout=_CLEANUP_TIMEOUT_S, v2=True)
        except (adbutils.AdbError, OSError, EOFError):
            pass

    def _pull(self, run_dir: str, spec: RunSpec, out_dir: Path, log: Path, sampled: bool = False) -> None:
        import adbutils

        from pytest_sme2.evidence.samplers import PERF_DATA, SIMPLEPERF_SAMPLES

        wanted = [(OUTPUTS_FILE, False)] + ([(PERF_DATA, True), (SIMPLEPERF_SAMPLES, True)] if sampled else [])
        if spec.etdump:
            wanted.append((TIMED_ETDUMP, True))
            if spec.warmup > 0:
                wanted.append((WARMUP_ETDUMP, True))
        for name, required in wanted:
            remote = f"{run_dir}/{name}"
            try:
                present = self._device.sync.stat(remote).mtime is not None
                if present:
                    self._device.sync.pull_file(remote, out_dir / name)
            except (adbutils.AdbError, OSError, EOFError) as exc:
                raise self._device_error(f"pulling {remote}", exc, log) from None
            if required and not present and name not in (OUTPUTS_FILE, TIMED_ETDUMP, WARMUP_ETDUMP):
                raise RunnerError(f"the sampler on {self.facts.described} left no {remote}; log: {log}")
            if required and not present:
                raise EtdumpError(
                    f"the runner on {self.facts.described} exited 0 but {remote} never appeared; was the runner "
                    f"built with ET_EVENT_TRACER_ENABLED (ETDump support)? Log: {log}"
                )

    def _cleanup(self, remote: str) -> None:
        import adbutils

        try:
            socket.create_connection(self._server, timeout=3).close()
        except OSError:
            return  # the adb server is gone; adbutils would try to start a new one
        try:
            self._device.shell2(f"rm -rf {shlex.quote(remote)}", timeout=_CLEANUP_TIMEOUT_S, v2=True)
        except (adbutils.AdbError, OSError, EOFError):
            pass  # a lost device keeps its folder; the next session uses a new one
