"""The host target: this machine's CPU through ExecuTorch's Python binding.

The binding runs in a supervised child process (``host_worker``), started
once and reused, so import cost is paid once per pytest worker while a
segfault in the runtime, an XNNPACK abort or a hang is an error of one test.
Warmup and timed runs happen in the same process, back to back.

SME2: the binding's XNNPACK picks SME2 kernels whenever the CPU has them and
cannot be told otherwise in-process, so on this target ``sme2=True`` needs an
SME2 CPU and ``sme2=False`` needs a CPU without it; the other request is
skipped with a reason that says where it can be had.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NoReturn

import numpy as np

from pytest_sme2.errors import ProgramError, RunnerError, UsageError
from pytest_sme2.run.cpu import CpuInfo, host_cpu
from pytest_sme2.run.kernel_libraries import binding_libraries, raise_if_missing_kernels
from pytest_sme2.run.targets.base import (
    INFO,
    OUTPUTS,
    READY,
    RUNNER_LOG,
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
from pytest_sme2.run.targets.native_runner import reference_samples
from pytest_sme2.system import supervised
from pytest_sme2.system.safe_files import write_file

_LOG_TAIL_LINES = 25
# Longest single wait in select(): a timeout of any size then never reaches select() whole (OverflowError).
_WAIT_SLICE_S = 1.0


WORKER_SCRIPT = Path(__file__).with_name("host_worker.py")
# The worker runs by its path, not with ``-m pytest_sme2.run.targets.host_worker``: -m imports the pytest_sme2
# package first (the public API: pandas, scipy's statistics), 0.47 s of a fresh worker's 1.7 s start on this
# 2-core machine, and every measurement starts several workers. The worker imports nothing of the
# package. Through -c, not as a script, so the worker's folder (host.py, local.py, ...) is never on sys.path.
_RUN_BY_PATH = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def worker_command(reply_fd: int) -> list[str]:
    """The command line of a host worker answering on file descriptor ``reply_fd``."""
    return [sys.executable, "-c", _RUN_BY_PATH, str(WORKER_SCRIPT), str(reply_fd)]


class WorkerOutOfStep(Exception):
    """The worker sent something other than the answer to the request outstanding: it cannot be trusted
    with another request (the parent stops it)."""


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


class _Worker:
    """One child process speaking the JSON-lines protocol."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.process = supervised.start(
            worker_command(write_fd),
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            env=env,
        )
        os.close(write_fd)
        self._reply = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self._sent = 0  # id of the last request; each answer and progress line must echo the outstanding one

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_size(self) -> int:
        self._log.flush()
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")

    def request(
        self, payload: dict, timeout_s: float, on_progress: Callable[[int, int], None] | None = None
    ) -> dict | None:
        """Send a request and return its answer; None means the worker died before answering.

        Progress lines (``{"id": n, "progress": i, "of": n}``) before the answer go to ``on_progress``.
        Anything but a clean answer to this request (a timeout, an answer to another request, an
        exception in the wait or in ``on_progress``, Ctrl-C) stops the worker before it propagates:
        otherwise its answer would wait in the pipe and the next request would take it as its own.
        """
        self._sent += 1
        ident = self._sent
        try:
            return self._exchange({**payload, "id": ident}, ident, timeout_s, on_progress)
        except BaseException:
            self.kill()
            raise

    def _exchange(
        self, payload: dict, ident: int, timeout_s: float, on_progress: Callable[[int, int], None] | None
    ) -> dict | None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(payload) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                ready, _, _ = select.select([self._reply], [], [], min(remaining, _WAIT_SLICE_S))
                if not ready:
                    continue
                chunk = self._reply.read(65536)
                if not chunk:
                    return None
                self._buffer += chunk
            line, _, self._buffer = self._buffer.partition(b"\n")
            message = json.loads(line)
            if not isinstance(message, dict) or message.get("id") != ident:
                answered = message.get("id") if isinstance(message, dict) else None
                raise WorkerOutOfStep(
                    f"the worker answered request {answered!r} while request {ident!r} was "
                    f"outstanding: {line[:200].decode(errors='replace')}"
                )
            if "progress" not in message:
                return message
            if on_progress is not None:
                on_progress(int(message["progress"]), int(message["of"]))

    def kill(self) -> None:
        supervised.end(self.process)
        for stream in (self.process.stdin, self._reply, self._log):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.alive() and self.process.stdin is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class HostTarget(RegisteredTarget):
    """Runs programs on this machine's CPU via the Python binding in a child process."""

    names = ("host",)

    @classmethod
    def create(cls, name: str, settings: TargetSettings) -> "HostTarget":
        return cls(settings.log_dir)

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        """Whether this CPU has SME2: what the host target (and the local one) can give SME2-on tests."""
        cpu = host_cpu()
        if cpu.has_sme2:
            return [DoctorLine("SME2 on this host", READY, f"{cpu.name} ({cpu.arch}) has SME2")]
        # the fix points at the two other places SME2 runs; the emulated target's own line says whether it is ready
        return [
            DoctorLine(
                "SME2 on this host",
                INFO,
                f"{cpu.name} ({cpu.arch}) has no SME2: SME2-on tests skip on the " "host target",
                "SME2 runs on the emulated target (its line says whether it is ready) or an SME2 device " "over adb",
            )
        ]

    def __init__(
        self,
        log_dir: Path,
        cpu: CpuInfo | None = None,
        sme2_advice: str | None = None,
        sme2_off_advice: str | None = None,
    ):
        self._cpu = cpu or host_cpu()
        self._sme2_advice = sme2_advice  # where else SME2 can be had (e.g. the emulated target's setup)
        self._sme2_off_advice = sme2_off_advice  # on an SME2 CPU: what the native runner needs (targets/auto.py)
        self._log_dir = log_dir
        self._worker: _Worker | None = None
        # Called with (run, runs) after each timed run; set by whoever shows progress (progress.py).
        self.progress: Callable[[int, int], None] | None = None

    @property
    def info(self) -> TargetInfo:
        cpu = self._cpu
        return TargetInfo(
            name="host",
            cpu=cpu.name,
            arch=cpu.arch,
            has_sme2=cpu.has_sme2,
            details={"system": cpu.system, "runtime": "executorch python binding"},
        )

    def unsupported(self, sme2: bool | None) -> str | None:
        cpu = self._cpu
        if sme2 is True and not cpu.has_sme2:
            return (
                f"SME2 requested but the host CPU '{cpu.name}' ({cpu.arch}) has no SME2; run on a CPU that "
                "has it (Apple M4 Mac, Armv9.2 Android phone or Linux board) with the host target"
                + (f", or {self._sme2_advice}" if self._sme2_advice else emulated_advice(cpu.system))
            )
        if sme2 is False and cpu.has_sme2:
            return (
                f"SME2 off requested but the host CPU '{cpu.name}' has SME2 and the ExecuTorch Python binding "
                "always uses it; "
                + (
                    self._sme2_off_advice
                    or "SME2-off runs need the native runner with SME2 masked "
                    "off: use --sme2-target=auto or local (`pytest-sme2 build-runner`)"
                )
            )
        return None

    def _ensure_worker(self) -> _Worker:
        if self._worker is None or not self._worker.alive():
            if self._worker is not None:
                self._worker.kill()
            self._worker = _Worker(self._log_dir / f"host-worker-{os.getpid()}.log")
        return self._worker

    def device_state(self) -> None:
        """None: no device to read (this target's times are not a phone's or a board's)."""
        return None

    def kernel_sampler(self, period_ns: int) -> NoReturn:
        """None: the host target runs ExecuTorch's Python binding in a long-lived worker, which no sampler wraps."""
        raise UsageError(
            "the host target does not sample kernels: it runs ExecuTorch's Python binding in a "
            "long-lived worker; use --sme2-target=local (pytest-sme2 build-runner builds its runner), "
            "whose runs are sampled with Linux perf"
        )

    def run(
        self, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path, reference: Path | None = None
    ) -> RunResult:
        out_dir.mkdir(parents=True, exist_ok=True)
        if spec.fresh_process and self._worker is not None:  # an independent replica: nothing shared with earlier runs
            self._worker.close()
            self._worker = None
        worker = self._ensure_worker()
        offset = worker.log_size()
        payload = {
            "pte": str(pte),
            "inputs": str(inputs) if inputs else None,
            "threads": spec.threads,
            "runs": spec.runs,
            "warmup": spec.warmup,
            "etdump": spec.etdump,
            "out_dir": str(out_dir),
            "warmup_name": WARMUP_ETDUMP,
            "timed_name": TIMED_ETDUMP,
            "outputs_name": OUTPUTS,
            "reference": str(reference) if reference is not None else None,
            "kernel_libraries": binding_libraries(pte),
        }
        log_path = out_dir / RUNNER_LOG
        command = f"host worker: run {pte} (threads={spec.threads}, warmup={spec.warmup}, runs={spec.runs})"

        def kept_log() -> str:
            """This run's part of the worker's log, kept in the run folder (not through a link)."""
            log = worker.log_since(offset)
            write_file(log_path, log)
            return log

        try:
            answer = worker.request({**payload, "progress": self.progress is not None}, spec.timeout_s, self.progress)
        except BaseException as exc:  # request() stopped the worker for every exception: Ctrl-C included
            self._worker = None
            if isinstance(exc, TimeoutError):
                log = kept_log()
                raise RunnerError(
                    f"{command} {spec.timed_out()} and was killed; raise it there if the model "
                    f"is that slow. Log: {log_path}\n{_tail(log)}"
                ) from None
            if isinstance(exc, Exception):
                log = kept_log()
                raise RunnerError(
                    f"{command} failed while waiting for its answer ({type(exc).__name__}: {exc}); the worker was "
                    f"stopped, so the next run starts a fresh one and cannot take this run's answer. Log: {log_path}"
                    f"\n{_tail(log)}"
                ) from exc
            raise
        if answer is None:
            worker.process.wait()
            log = kept_log()
            self._worker = None
            raise RunnerError(
                f"{command}: the runner process {_exit_description(worker.process.returncode)} "
                f"(log kept at {log_path}). Last lines:\n{_tail(log)}"
            )
        log = kept_log()
        if not answer["ok"]:
            message = f"{answer['error']}\nruntime log ({log_path}):\n{_tail(log)}"
            if answer.get("kind") == "program":
                raise_if_missing_kernels(log_path, pte, self.info.name, binding=True)
                raise ProgramError(message)
            raise RunnerError(f"{command} failed: {message}")
        return RunResult(
            spec=spec,
            target=self.info,
            out_dir=out_dir,
            wall_ms=np.asarray(answer["wall_ms"], dtype=float),
            timed_etdump=Path(answer["timed_etdump"]) if answer.get("timed_etdump") else None,
            warmup_etdump=Path(answer["warmup_etdump"]) if answer.get("warmup_etdump") else None,
            log=log_path,
            outputs=Path(answer["outputs"]) if answer.get("outputs") else None,
            sme2_active=self._cpu.has_sme2,
            runtime_threads=answer.get("threads"),
            reference_ms=reference_samples(answer, spec, reference is not None, log_path),
        )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
