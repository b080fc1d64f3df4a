"""The native runner's contract, shared by every target that runs it (local, emulated, adb).

What the runner is told (its command line), what it answers (one
``PYTEST_SME2_RESULT {json}`` line on stdout) and what it leaves (ETDumps and
an outputs tensor file), plus how a failed run is described. Targets differ
only in where the process runs and how files get there and back.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.targets.base import OUTPUTS, TIMED_ETDUMP, WARMUP_ETDUMP, RunResult, RunSpec, TargetInfo

RESULT_PREFIX = "PYTEST_SME2_RESULT "
OUTPUTS_FILE = "outputs.bin"
INPUTS_FILE = "inputs.bin"
TAIL_LINES = 25


@dataclass(frozen=True)
class RunnerFiles:
    """Where the runner reads and writes, as paths on the machine that runs it."""

    pte: str
    timed_etdump: str
    warmup_etdump: str
    outputs: str
    inputs: str | None = None
    reference: str | None = None  # reference program run before each inference (relative latency)
    warmup_inputs: str | None = None  # the warmup runs' own calls (call_plan.py)
    call_flags: tuple[str, ...] = ()  # how the inputs split into calls and which methods they call (call_plan.py)
    kernel_libraries: tuple[str, ...] = ()  # loaded before the program (kernel_libraries.runner_libraries)


def two_builds(runner_on: Path | None, runner_off: Path | None) -> bool:
    """Whether SME2 on/off come from two runner builds; one of the pair alone is a UsageError."""
    if (runner_on is None) != (runner_off is None):
        missing = "--sme2-runner-off" if runner_off is None else "--sme2-runner-on"
        raise UsageError(f"two-build mode needs both --sme2-runner-on and --sme2-runner-off; {missing} is missing")
    return runner_on is not None


def pick_build(sme2: bool | None, has_sme2: bool, runner_on: Path, runner_off: Path) -> Path:
    """The build for a variant: the SME2-off one for sme2=False, and for None on a CPU without SME2."""
    return runner_off if sme2 is False or (sme2 is None and not has_sme2) else runner_on


# How many times pytest-sme2's runner loads the model's method, each load right after a timed load of the reference
# program, when it is given one (hardware targets). One load per process judged against the reference program's
# inference moved unchanged mobilenet_v3_small's init by +54% beside two busy jobs; the median of the 7 loads after
# the first (cold) one, each divided by the reference load just before it, stayed within 3% idle and busy
# (docs/gate.md, "Load, init and peak memory"). 7 model and 7 reference loads more per traced runner process
# (~70 ms for mobilenet_v3_small on an x86 core); untraced runs (Runner.time) have no ETDump to read them from.
STARTUP_REPEATS = 8


def runner_arguments(binary: str, files: RunnerFiles, spec: RunSpec) -> list[str]:
    """The runner's argv (flags as in ExecuTorch's executor_runner where they overlap). With a reference program
    (which only pytest-sme2's runner takes) and an ETDump, the method is loaded STARTUP_REPEATS times."""
    command = [
        binary,
        f"--model_path={files.pte}",
        f"--num_executions={spec.runs}",
        f"--warmup={spec.warmup}",
        f"--cpu_threads={spec.threads}",
        f"--outputs_path={files.outputs}",
    ]
    if spec.etdump:
        command += [f"--etdump_path={files.timed_etdump}", f"--warmup_etdump_path={files.warmup_etdump}"]
    if files.inputs is not None:
        command.append(f"--inputs_path={files.inputs}")
    if files.warmup_inputs is not None:
        command.append(f"--warmup_inputs_path={files.warmup_inputs}")
    command += list(files.call_flags)
    command += [f"--kernel_library={library}" for library in files.kernel_libraries]
    if files.reference is not None:
        command.append(f"--reference_path={files.reference}")
        if spec.etdump:
            command.append(f"--startup_repeats={STARTUP_REPEATS}")
    return command


def tail(path: Path) -> str:
    """The last non-empty lines of a log, for error messages."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return "\n".join(lines[-TAIL_LINES:])


def usage_advice(code: int, log: Path) -> str:
    """Why a runner refused its arguments, where the log says it is a runner older than these flags."""
    if code != 2 or "unknown argument '--startup_repeats" not in tail(log):
        return ""
    return (
        "; this runner was built from an older pytest-sme2's sme2_runner.cpp, which has no --startup_repeats: "
        "rebuild it from this version (`pytest-sme2 build-runner`, or its CMake build for the device) or run "
        "without the reference program (--sme2-latency-reference=off)"
    )


def exit_description(code: int) -> str:
    """'exited with status N' or 'was killed by SIGNAME' for a subprocess return code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def read_result(stdout_path: Path, shown: str, binary: str) -> dict[str, Any]:
    """The runner's result line from its stdout, or a RunnerError that says what ran."""
    try:
        text = stdout_path.read_text(errors="replace")
    except OSError:
        text = ""
    line = next((line for line in text.splitlines() if line.startswith(RESULT_PREFIX)), None)
    if line is None:
        raise RunnerError(
            f"`{shown}` exited 0 but printed no '{RESULT_PREFIX.strip()}' line; is {binary} pytest-sme2's "
            f"runner? stdout: {stdout_path}"
        )
    try:
        answer = json.loads(line[len(RESULT_PREFIX) :])
    except json.JSONDecodeError as exc:
        raise RunnerError(
            f"`{shown}` printed a result line that is not JSON ({exc.msg} at column {exc.colno + len(RESULT_PREFIX)}): "
            f"{_shown_line(line)}; is {binary} pytest-sme2's runner, of this version? stdout: {stdout_path}"
        ) from None
    wrong = _answer_problem(answer)
    if wrong:
        raise RunnerError(
            f"`{shown}` printed a result line without what pytest-sme2 needs ({wrong}): {_shown_line(line)}; "
            f"is {binary} pytest-sme2's runner, of this version? stdout: {stdout_path}"
        )
    return answer


def _numbers(value: Any, whole: bool = False) -> bool:
    kinds = (int,) if whole else (int, float)
    return isinstance(value, list) and all(isinstance(x, kinds) and not isinstance(x, bool) and x >= 0 for x in value)


# What a result line holds: key -> (check, what it must be); latency_ms is required, the rest optional.
_ANSWER = {
    "latency_ms": (_numbers, "a list of milliseconds, one per timed run"),
    "reference_ms": (_numbers, "a list of milliseconds, one per timed run"),
    "reference_load_ms": (_numbers, "a list of milliseconds, one per load of the model's method"),
    "planned_buffers": (lambda v: _numbers(v, whole=True), "a list of buffer sizes in bytes"),
    "peak_rss_kb": (
        lambda v: _numbers(v if isinstance(v, list) else [v], whole=True),
        "kB of peak memory (a whole number, or one per run)",
    ),
    "threads": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "clock_offset_ns": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number of nanoseconds"),
}


def _answer_problem(answer: Any) -> str | None:
    if not isinstance(answer, dict):
        return f"a JSON object expected, got {type(answer).__name__}"
    if "latency_ms" not in answer:
        return "no 'latency_ms'"
    for key, (check, what) in _ANSWER.items():
        if key in answer and answer[key] is not None and not check(answer[key]):
            return f"{key!r} must be {what}"
    return None


def _shown_line(line: str, limit: int = 200) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "...")


def build_result(
    answer: dict[str, Any],
    spec: RunSpec,
    info: TargetInfo,
    out_dir: Path,
    log: Path,
    sme2_active: bool,
    reference: bool = False,
) -> RunResult:
    """The RunResult of a finished run whose files are in ``out_dir`` under the standard names.

    ``reference``: whether the runner was given a reference program, so its times must be in the answer.
    """
    if len(answer["latency_ms"]) != spec.runs:
        raise RunnerError(
            f"the runner reported {len(answer['latency_ms'])} times in 'latency_ms' for {spec.runs} "
            f"timed runs; is it pytest-sme2's runner, of this version? Log: {log}"
        )
    reference_ms = reference_samples(answer, spec, reference, log)
    outputs_bin = out_dir / OUTPUTS_FILE
    outputs_pt = None
    if outputs_bin.exists():
        import torch

        from pytest_sme2.run.native.tensorfile import read_tensors

        outputs_pt = out_dir / OUTPUTS
        torch.save([torch.from_numpy(a.copy()) for a in read_tensors(outputs_bin)], outputs_pt)
    evidence: dict[str, Any] = {}
    if "planned_buffers" in answer or "peak_rss_kb" in answer:
        evidence["memory"] = {
            "planned_buffers": answer.get("planned_buffers"),
            "peak_rss_kb": answer.get("peak_rss_kb"),
        }
    return RunResult(
        spec=spec,
        target=info,
        out_dir=out_dir,
        evidence=evidence,
        wall_ms=np.asarray(answer["latency_ms"], dtype=float),
        timed_etdump=out_dir / TIMED_ETDUMP if spec.etdump else None,
        warmup_etdump=out_dir / WARMUP_ETDUMP if spec.etdump and spec.warmup > 0 else None,
        log=log,
        outputs=outputs_pt,
        sme2_active=sme2_active,
        runtime_threads=answer.get("threads"),
        reference_ms=reference_ms,
        reference_load_ms=reference_loads(answer, spec, reference_ms is not None, log),
        clock_offset_ns=answer.get("clock_offset_ns"),
    )


def reference_loads(answer: dict[str, Any], spec: RunSpec, expected: bool, log: Path) -> np.ndarray | None:
    """The reference program's load before each load of the model's: one, or STARTUP_REPEATS when traced; None
    where the runner was not given a reference program or reports none (then load and init are not divided)."""
    loads = answer.get("reference_load_ms")
    if not expected or loads is None:
        return None
    wanted = STARTUP_REPEATS if spec.etdump else 1
    if len(loads) != wanted:
        raise RunnerError(
            f"the runner reported {len(loads)} times in 'reference_load_ms' for {wanted} loads of the "
            f"method (--startup_repeats); is it pytest-sme2's runner, of this version? Log: {log}"
        )
    return np.asarray(loads, dtype=float)


def reference_samples(answer: dict[str, Any], spec: RunSpec, expected: bool, log: Path) -> np.ndarray | None:
    """The reference program's per-run times from a runner's answer; one per timed run when one was given."""
    if not expected:
        return None
    samples = answer.get("reference_ms")
    if samples is None or len(samples) != spec.runs:
        got = "none" if samples is None else f"{len(samples)} times for {spec.runs} runs"
        raise RunnerError(
            f"the runner was given a reference program but reported {got} in 'reference_ms'; a runner that is not "
            f"pytest-sme2's cannot interleave it: use pytest-sme2's runner or --sme2-latency-reference=off. Log: {log}"
        )
    return np.asarray(samples, dtype=float)
