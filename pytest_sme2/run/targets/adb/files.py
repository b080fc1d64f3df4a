"""What moves between this machine and the device for a run: the runner with its bundled libraries (or, for a
glibc runner, its carried loader and C and C++ libraries, which a phone does not have), the kernel kits a program
needs, the reference program, once per session each; the command line that starts a runner on the device; and
the ETDumps, outputs and samples pulled back. Every word of a device shell command goes through ``shlex.quote``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.errors import EtdumpError, RunnerError
from pytest_sme2.run.kernel_libraries import runner_libraries
from pytest_sme2.run.targets.adb.connection import AdbConnection
from pytest_sme2.run.targets.base import TIMED_ETDUMP, WARMUP_ETDUMP, RunSpec
from pytest_sme2.run.targets.native_runner import OUTPUTS_FILE
from pytest_sme2.system.carried_loader import carried_loader, needs_carried_loader
from pytest_sme2.system.elf import bundled_libraries, executable_arch

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import SimpleperfSampler


class DeviceFiles:
    """The session's folder on the device (``session_dir``) and what has been pushed into it."""

    def __init__(self, connection: AdbConnection, session_dir: str):
        self._connection = connection
        self.session_dir = session_dir
        self.pushed: dict[Path, str] = {}  # local binary, kit root or reference program -> its folder on the device
        self._loaders: dict[Path, str] = {}  # pushed glibc program -> its carried loader's file name
        connection.on_lost = self.pushed.clear  # a reconnected device gets everything pushed again

    def push_binary(self, binary: Path) -> str:
        """Push a runner (or the mask library) with its bundled libraries once; returns its folder. A glibc
        runner also gets its loader and the C and C++ libraries, which a phone does not have."""
        if binary in self.pushed:
            return self.pushed[binary]
        folder = f"{self.session_dir}/bin-{len(self.pushed)}"
        self._connection.shell(f"mkdir -p {shlex.quote(folder)}")
        self._connection.push(binary, f"{folder}/{binary.name}", 0o755)
        if needs_carried_loader(binary):
            carried = carried_loader(binary)
            libraries = carried.libraries
            self._connection.push(carried.loader, f"{folder}/{carried.loader_name}", 0o755)
            self._loaders[binary] = carried.loader_name
        else:
            libraries = bundled_libraries(binary)
        for name, library in libraries.items():
            self._connection.push(library, f"{folder}/{name}", 0o644)
        self.pushed[binary] = folder
        return folder

    def push_kits(self, pte: Path, binary: Path) -> tuple[str, ...]:
        """Push the kernel kits the program needs (kernel_libraries.runner_libraries) once per session, each in
        its own layout, where its library finds its stand-ins; returns the libraries' device paths."""
        from pytest_sme2.run.native.kernel_kit import kit_files, kit_root

        paths = []
        for library in runner_libraries(pte, executable_arch(binary)):
            root = kit_root(library)
            if root not in self.pushed:
                folder = f"{self.session_dir}/kit-{len(self.pushed)}"
                for file in kit_files(library):
                    remote = f"{folder}/{file.relative_to(root).as_posix()}"
                    self._connection.shell(f"mkdir -p {shlex.quote(remote.rsplit('/', 1)[0])}")
                    self._connection.push(file, remote)
                self.pushed[root] = folder
            paths.append(f"{self.pushed[root]}/{library.relative_to(root).as_posix()}")
        return tuple(paths)

    def push_reference(self, reference: Path) -> str:
        """Push the reference program once per session (it is megabytes and the same for every run)."""
        if reference not in self.pushed:
            folder = f"{self.session_dir}/reference-{len(self.pushed)}"
            self._connection.shell(f"mkdir -p {shlex.quote(folder)}")
            self._connection.push(reference, f"{folder}/{reference.name}")
            self.pushed[reference] = folder
        return f"{self.pushed[reference]}/{reference.name}"

    def launch(
        self,
        binary: Path,
        folder: str,
        argv: list[str],
        affinity: str | None,
        preload: str | None,
        run_dir: str | None = None,
        sampler: "SimpleperfSampler | None" = None,
    ) -> str:
        """``export ... && exec ...``: the runner ``argv`` started the way every run starts it (through its carried
        loader, under simpleperf and taskset when asked, with ``preload``, the masking library, for SME2 off)."""
        if binary in self._loaders:  # started through its own loader, which finds its libraries in its folder
            argv = [f"{folder}/{self._loaders[binary]}", "--library-path", folder, *argv]
        if sampler is not None and run_dir is not None:
            argv = sampler.device_argv(argv, run_dir)
        if affinity:
            argv = ["taskset", affinity, *argv]
        environment = [f"LD_LIBRARY_PATH={shlex.quote(folder)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"]
        if preload is not None:
            environment.append(f"LD_PRELOAD={shlex.quote(preload)}")
        exports = " ".join(f"export {assignment} &&" for assignment in environment)
        return f"{exports} exec {' '.join(shlex.quote(word) for word in argv)}"

    def pull(
        self, run_dir: str, spec: RunSpec, out_dir: Path, log: Path, described: str, sampled: bool = False
    ) -> None:
        """The run's outputs, ETDumps and (``sampled``) samples into ``out_dir``; a missing ETDump or sample file
        is an error naming what should have written it."""
        from pytest_sme2.evidence.samplers import PERF_DATA, SIMPLEPERF_SAMPLES

        wanted = [(OUTPUTS_FILE, False)] + ([(PERF_DATA, True), (SIMPLEPERF_SAMPLES, True)] if sampled else [])
        if spec.etdump:
            wanted.append((TIMED_ETDUMP, True))
            if spec.warmup > 0:
                wanted.append((WARMUP_ETDUMP, True))
        for name, required in wanted:
            remote = f"{run_dir}/{name}"
            present = self._connection.pull_if_present(remote, out_dir / name, log)
            if required and not present and name not in (OUTPUTS_FILE, TIMED_ETDUMP, WARMUP_ETDUMP):
                raise RunnerError(f"the sampler on {described} left no {remote}; log: {log}")
            if required and not present:
                raise EtdumpError(
                    f"the runner on {described} exited 0 but {remote} never appeared; was the runner "
                    f"built with ET_EVENT_TRACER_ENABLED (ETDump support)? Log: {log}"
                )
