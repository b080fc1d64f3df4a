"""A deterministic cost metric for shared CI: instructions per inference under callgrind.

Latency on a shared machine moves by tens of percent between processes;
the number of instructions a program executes does not (about 1e-6 run to
run here). We run the host native runner under ``valgrind --tool=callgrind``
twice, with N inferences and with one, ETDump off and one thread, and take

    instructions per inference = (Ir(N) - Ir(1)) / (N - 1)

which cancels process start-up, program load and method init. It measures
the host CPU's code path for the program (the x86/Arm build of XNNPACK that
runs here), so it catches an extra operator or a slower kernel choice, not
SME2 speed on other hardware.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.targets.base import DEFAULT_TIMEOUT_S, RunSpec

VALGRIND_PACKAGE = "valgrind"
DEFAULT_INFERENCES = 5


@dataclass(frozen=True)
class InstructionCount:
    """Instructions per inference of one program, with the raw counts it came from."""

    per_inference: float
    total_n: int
    total_1: int
    inferences: int
    seconds: float
    runner: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise UsageError(
            "--sme2-metric=instructions needs valgrind; install it with `sudo apt-get install valgrind` "
            "(or `make system-deps`)"
        )
    return path


def read_callgrind_total(path: Path) -> int:
    """The total Ir of a callgrind output file ("totals:" line, else "summary:")."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as exc:
        raise RunnerError(f"callgrind wrote no output file {path} ({exc}); see the runner log beside it") from None
    for key in ("totals:", "summary:"):
        for line in lines:
            if line.startswith(key):
                try:
                    return int(line.split()[1])
                except (IndexError, ValueError):
                    break
    raise RunnerError(f"callgrind output {path} has no 'totals:' or 'summary:' line; is it truncated?")


def count_instructions(
    pte: Path,
    inputs: Path | None,
    out_dir: Path,
    inferences: int = DEFAULT_INFERENCES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> InstructionCount:
    """Instructions per inference of ``pte`` on the host native runner (see the module docstring)."""
    from pytest_sme2.run.native.build import build_runner
    from pytest_sme2.run.targets.local import LocalTarget, RunnerLaunch, run_runner_process

    if inferences < 2:
        raise UsageError(f"instruction counting needs at least 2 inferences to cancel load and init, got {inferences}")
    valgrind = find_valgrind()
    binary = build_runner()
    info = LocalTarget(out_dir / "logs", runner=binary).info
    started = time.perf_counter()
    totals = {}
    for n in (inferences, 1):
        run_dir = out_dir / f"callgrind-{n}"
        run_dir.mkdir(parents=True, exist_ok=True)
        output = run_dir / "callgrind.out"
        prefix = [valgrind, "--tool=callgrind", f"--callgrind-out-file={output}"]
        spec = RunSpec(sme2=None, threads=1, runs=n, warmup=0, etdump=False, timeout_s=timeout_s)
        launch = RunnerLaunch(prefix, binary, dict(os.environ), info, sme2_active=False)
        run_runner_process(launch, Path(pte), inputs, spec, run_dir)
        totals[n] = read_callgrind_total(output)
    return InstructionCount(
        per_inference=(totals[inferences] - totals[1]) / (inferences - 1),
        total_n=totals[inferences],
        total_1=totals[1],
        inferences=inferences,
        seconds=time.perf_counter() - started,
        runner=str(binary),
    )
