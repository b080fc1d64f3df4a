"""The emulated target: the aarch64 runner under qemu-aarch64 11.1 with SME2 on or off.

SME2 on is ``-cpu max`` with a 512-bit streaming vector length (like the M4,
configurable); SME2 off is ``-cpu max,sme=off``. Same runner binary, same
.pte (exported on the host), same inputs. Which kernels run, whether outputs
are right and how much of the model takes the SME2 path are real; the time
is not, so every Profile from here is marked emulated and latency verdicts
are skipped (see ``EMULATED_TIMING``).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from .. import emulation
from ..errors import RunnerError, UsageError
from ..kernel_trace import KernelTrace
from .base import EMULATED_TIMING, RunResult, RunSpec, TargetInfo
from .local import check_runner, run_runner_process

SVL_CHOICES = (128, 256, 512, 1024, 2048)


def check_svl(svl_bits: int) -> int:
    """``svl_bits`` if qemu can emulate that streaming vector length, else a usage error."""
    if svl_bits not in SVL_CHOICES:
        raise UsageError(
            f"--sme2-emulated-svl={svl_bits} is not an SME streaming vector length; use one of "
            f"{', '.join(map(str, SVL_CHOICES))} bits"
        )
    return svl_bits


class EmulatedTarget:
    # Emulation runs a mobilenet inference in about a second: fewer runs by default.
    default_runs = 2
    default_warmup = 0

    def __init__(self, log_dir: Path, svl_bits: int = emulation.DEFAULT_SVL_BITS,
                 status: emulation.EmulationStatus | None = None, runner: Path | None = None,
                 trace_kernels: bool = True):
        check_svl(svl_bits)
        if runner is not None:  # a user's build: the right architecture and executorch, or nothing runs
            check_runner(runner, "emulated target runner (--sme2-runner)", arch="aarch64")
        self._svl = svl_bits
        self._trace_kernels = trace_kernels
        self._status = status or emulation.status(runner=runner)
        self._version_checked = False

    @property
    def info(self) -> TargetInfo:
        st = self._status
        return TargetInfo(
            name="emulated", cpu=f"qemu-aarch64 {st.version or '?'} -cpu max SVL {self._svl}", arch="aarch64",
            has_sme2=True, emulated=True,
            details={"qemu": str(st.qemu), "runner": str(st.runner), "svl_bits": self._svl,
                     "timing": EMULATED_TIMING},
        )

    def unsupported(self, sme2: bool | None) -> str | None:
        if not self._status.ready:
            return f"emulated SME2 target not ready: {self._status.problem}"
        return None

    def _check_runner_version(self) -> None:
        """A runner linked against another executorch than the exporter's is a clear error, once."""
        if self._version_checked:
            return
        from ..native.build import executorch_release

        st = self._status
        built = emulation.runner_version(st.qemu, st.runner)
        wanted = executorch_release()
        if built is None:
            raise RunnerError(
                f"{st.runner} did not answer `--version` like pytest-sme2's runner; the emulated target needs "
                f"it: run `{emulation.SETUP_COMMAND}` (or `pytest-sme2 build-runner --arch linux-aarch64`)"
            )
        if built != wanted:
            raise RunnerError(
                f"{st.runner} was built against executorch {built}, but programs are exported with executorch "
                f"{wanted}; rebuild it with `{emulation.SETUP_COMMAND} --force`"
            )
        self._version_checked = True

    def run(self, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path,
            reference: Path | None = None) -> RunResult:
        """``reference`` is not run: emulated time is never compared, so it would only cost emulation time."""
        st = self._status
        if not st.ready:
            raise UsageError(f"emulated SME2 target not ready: {st.problem}")
        self._check_runner_version()
        cpu = "max,sme=off" if spec.sme2 is False else emulation.svl_cpu(self._svl)
        qemu = [str(st.qemu), "-cpu", cpu]
        env = {**os.environ, "QEMU_LD_PREFIX": str(emulation.SYSROOT)}
        result = run_runner_process(qemu, st.runner, env, pte, inputs, spec, out_dir, self.info,
                                    sme2_active=spec.sme2 is not False)
        if self._trace_kernels and spec.etdump:
            result.evidence["kernel_trace"] = self._kernel_trace(qemu, env, pte, inputs, spec, out_dir).as_dict()
        return result

    def _kernel_trace(self, qemu: list[str], env: dict[str, str], pte: Path, inputs: Path | None, spec: RunSpec,
                      out_dir: Path) -> KernelTrace:
        """One more inference with qemu's in_asm log, to name the SME/SME2 kernels that ran (kernel_trace.py)."""
        trace_dir = out_dir / "kernel-trace"
        trace_dir.mkdir(parents=True, exist_ok=True)
        log, maps = trace_dir / "qemu_in_asm.log", trace_dir / "maps.txt"
        run_runner_process([*qemu, "-d", "in_asm", "-D", str(log)], self._status.runner,
                           env, pte, inputs, replace(spec, runs=1, warmup=0, etdump=False), trace_dir, self.info,
                           sme2_active=spec.sme2 is not False, extra_args=(f"--maps_path={maps}",))
        trace = KernelTrace.from_files(log, maps)
        log.unlink()  # megabytes of disassembly; the kernel list is what is kept
        (trace_dir / "kernels.json").write_text(json.dumps(trace.as_dict(), indent=2) + "\n")
        return trace

    def close(self) -> None:
        return None

