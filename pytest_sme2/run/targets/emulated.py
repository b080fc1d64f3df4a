"""The emulated target: the aarch64 runner under qemu-aarch64 11.1 with SME2 on or off.

SME2 on is ``-cpu max`` with a 512-bit streaming vector length (like the M4,
configurable); SME2 off is ``-cpu max,sme=off``. Same runner binary, same
.pte (exported on the host), same inputs. Which kernels run, whether outputs
are right and how much of the model takes the SME2 path are real; the time
is not, so every Profile from here is marked emulated and latency verdicts
are skipped (see ``EMULATED_TIMING``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NoReturn

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.evidence.kernel_trace import kernel_trace_of
from pytest_sme2.evidence.qemu_counts import (
    COUNTS_FILE,
    COUNTS_VERSION,
    QEMU_LOG_FLAGS,
    AddressSpace,
    Boundaries,
    ExecutedBlocks,
    boundaries,
    count_events,
    read_counts,
    write_counts,
)
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.count_progress import ProgressWatcher, counted_so_far, how_far
from pytest_sme2.run.guest_loader import BIND_NOW, LoaderRange, loader_range
from pytest_sme2.run.kernel_libraries import runner_libraries
from pytest_sme2.run.native.build import COUNT_PLUGIN_NAME
from pytest_sme2.run.native.kernel_kit import kit_files
from pytest_sme2.run.result_cache import LoadedRunner, ResultCache, RunKey, code_digest, run_key
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
)
from pytest_sme2.run.targets.local import RunnerLaunch, check_runner, run_runner_process
from pytest_sme2.run.targets.native_runner import OUTPUTS_FILE, build_result, read_result
from pytest_sme2.system import supervised
from pytest_sme2.system.carried_loader import carried_loader
from pytest_sme2.system.option import RUN, Option
from pytest_sme2.system.safe_files import write_file

MAPS = "maps.txt"
# The counting plugin's working files in a counted run's folder (count_plugin.c), removed once counted.
PLUGIN_MARKERS, PLUGIN_SEGMENTS, PLUGIN_BLOCKS = "markers.txt", "segments.u64", "plugin-blocks.tsv"
PLUGIN_PROGRESS = "count-progress.txt"
# What a counted run leaves that its Profile is read from: kept by the result cache (result_cache.py).
KEPT_FILES = (TIMED_ETDUMP, WARMUP_ETDUMP, OUTPUTS_FILE, RUNNER_LOG, RUNNER_STDOUT, COUNTS_FILE, MAPS)
# Not in a counted run's key: the timeout changes no count, and ``sme2`` reaches the run only through the
# qemu CPU settings, which are in the key: SME2 "auto" and "on" emulate the same CPU, so they share answers.
_NOT_IN_KEY = ("timeout_s", "sme2")


def _release_reader(fifo: Path) -> None:
    """If qemu never opened the log FIFO (it failed first), open and close it so the counter sees EOF."""
    try:
        handle = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader waiting (it finished), or the FIFO is gone
        return
    os.close(handle)


SVL_CHOICES = (128, 256, 512, 1024, 2048)


def check_svl(svl_bits: int, source: str | None = None) -> int:
    """``svl_bits`` if qemu can emulate that streaming vector length, else a usage error naming ``source``
    (where the value was set)."""
    if svl_bits not in SVL_CHOICES:
        raise UsageError(
            f"{source or f'--sme2-emulated-svl={svl_bits}'} is not an SME streaming vector length; use one of "
            f"{', '.join(map(str, SVL_CHOICES))} bits"
        )
    return svl_bits


SVL = Option(
    "emulated_svl",
    f"emulated target: SME streaming vector length in bits (default "
    f"{emulation_setup.DEFAULT_SVL_BITS}, like the M4)",
    RUN,
    kind="int",
    default=emulation_setup.DEFAULT_SVL_BITS,
    check=check_svl,
    ini_help="emulated target: streaming vector length in bits",
    doc_default=f"{emulation_setup.DEFAULT_SVL_BITS} (bits)",
)
KERNEL_TRACE = Option(
    "kernel_trace",
    "emulated target: skip the traced inference that names the SME kernels that ran",
    RUN,
    kind="bool",
    default=True,
    switch="--sme2-no-kernel-trace",
    ini_help="emulated target: name the SME kernels that ran (one traced inference per variant)",
    doc_default="trace on (emulated target)",
)
FRESH = Option(
    "fresh",
    "emulated target: emulate every counted run again instead of answering it from the result "
    "cache (a fresh run still stores what it counted)",
    RUN,
    kind="bool",
    default=False,
    switch="--sme2-fresh",
    ini_help="emulated target: never answer a counted run from the result cache",
    doc_default="off: an unchanged counted run is answered from the result cache",
)
COUNTING_CHOICES = ("auto", "plugin", "log")
COUNTING = Option(
    "counting",
    "emulated target: where counted runs count instructions: plugin (inside qemu, pytest-sme2's TCG plugin on "
    "the qemu setup-emulation builds with plugins), log (from qemu's execution log, 2-3x slower) or auto "
    "(plugin where that qemu is built, else log)",
    RUN,
    choices=COUNTING_CHOICES,
    default="auto",
    ini_help="emulated target: count in the emulator (plugin), from qemu's log (log), or auto",
    doc_default="auto: in the emulator where setup-emulation built qemu with plugins",
)


def loaded_libraries(runner: Path) -> list[Path]:
    """Every shared library the runner loads under qemu: the ones shipped with it (RUNPATH, $ORIGIN), then the
    system ones from the aarch64 sysroot (QEMU_LD_PREFIX) by name, then the dynamic loader."""
    carried = carried_loader(runner)
    system = sorted(name for name in carried.libraries if name not in carried.bundled)
    return [
        *(carried.libraries[name] for name in carried.bundled),
        *(carried.libraries[name] for name in system),
        carried.loader,
    ]


def counted_threads_problem(threads: int) -> str:
    """Why a counted run takes one thread: with threads=2 recorded, 4 of 5 unchanged runs then
    failed (259,160 instructions in the baseline, 169,500-230,902 after), all labelled exact."""
    return (
        f"the emulated target counts a run of one thread exactly, not threads={threads}: with {threads} "
        f"threads XNNPACK's thread pool splits each operator's work between threads differently from run to "
        f"run and only the inference thread is counted, so the counts would move between identical runs and "
        f"the gate would judge noise. Use threads=1 here (@pytest.mark.perf(threads=1), runner(threads=1) or "
        f"--sme2-threads=1); mark a test that measures threads @pytest.mark.latency, so it runs on hardware "
        f"only (--sme2-target=local or adb); or run it uncounted with --sme2-no-kernel-trace"
    )


@dataclass(frozen=True)
class EmulatedOptions:
    """The emulated target's own options, as the session's settings give them (EmulatedTarget.options:
    --sme2-emulated-svl, --sme2-no-kernel-trace, --sme2-fresh, --sme2-counting), each at its option's default
    unless given. They travel together because they come together, from one TargetSettings (``of``)."""

    svl_bits: int = SVL.default
    trace_kernels: bool = KERNEL_TRACE.default
    fresh: bool = FRESH.default
    counting: str = COUNTING.default

    @classmethod
    def of(cls, settings: TargetSettings) -> "EmulatedOptions":
        """The options as ``settings`` give them (an absent one at its default)."""
        return cls(settings.value(SVL), settings.value(KERNEL_TRACE), settings.value(FRESH), settings.value(COUNTING))


@dataclass(frozen=True)
class _CountedRun:
    """One counted run as EmulatedTarget._counted_run set it up, what _count emulates: qemu's command, the
    program, its inputs, the spec, the run's folder, setarch (no address randomisation) and what counts (the
    counting plugin, or the program that reads qemu's log)."""

    qemu: list[str]
    pte: Path
    inputs: Path | None
    spec: RunSpec
    out_dir: Path
    setarch: str
    counter: Path


class EmulatedTarget(RegisteredTarget):
    # Emulated time is never compared and the counted run repeats exactly, so one inference after one
    # warmup (the steady state: the first inference also sets up XNNPACK's runtime) says everything.
    default_runs = 1
    default_warmup = 1

    names = ("emulated",)
    options = (SVL, KERNEL_TRACE, FRESH, COUNTING)

    @classmethod
    def check(cls, name: str, settings: TargetSettings) -> None:
        """Runner binaries given by option must be aarch64 builds (the streaming vector length is checked with
        its value, by its option)."""
        for role, path in settings.runners.items():
            if path is not None:
                check_runner(path, f"runner ({role})", arch="aarch64")

    @classmethod
    def create(
        cls, name: str, settings: TargetSettings, status: emulation_setup.EmulationStatus | None = None
    ) -> "EmulatedTarget":
        """From the session's settings; ``status``: the emulation's, when already read (the auto target)."""
        return cls(
            settings.log_dir, EmulatedOptions.of(settings), status, runner=settings.runner, results=settings.results
        )

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        """Whether qemu 11.1, the cross compiler and the aarch64 runner are set up (``pytest-sme2 setup-emulation``)."""
        try:
            status = emulation_setup.status()
        except Exception as exc:
            return [
                DoctorLine(
                    "emulated SME2 target", MISSING, f"{type(exc).__name__}: {exc}", emulation_setup.SETUP_COMMAND
                )
            ]
        if status.ready:
            return [
                DoctorLine(
                    "emulated SME2 target", READY, f"qemu {status.version} at {status.qemu}, runner " f"{status.runner}"
                ),
                DoctorLine(
                    "emulated counting",
                    READY if status.counting == "plugin" else INFO,
                    status.counting_note(),
                    "" if status.counting == "plugin" else emulation_setup.SETUP_COMMAND,
                ),
            ]
        from pytest_sme2.run.native.build import runtime_problem

        # An executorch without a runtime for the runner (1.4.1): no setup fixes that, another version does.
        fix = "pip install executorch==1.5.1" if runtime_problem() else emulation_setup.SETUP_COMMAND
        return [DoctorLine("emulated SME2 target", MISSING, status.problem or "not ready", fix)]

    def __init__(
        self,
        log_dir: Path,
        options: EmulatedOptions = EmulatedOptions(),
        status: emulation_setup.EmulationStatus | None = None,
        runner: Path | None = None,
        results: ResultCache | None = None,
    ):
        """``options``: the target's own (EmulatedOptions; ``fresh``: emulate every counted run again, still
        storing what it counts; ``counting``: where counted runs count, COUNTING); ``results``: the result cache
        counted runs are answered from and stored in (None: no cache)."""
        check_svl(options.svl_bits)
        if runner is not None:  # a user's build: the right architecture and executorch, or nothing runs
            check_runner(runner, "emulated target runner (--sme2-runner)", arch="aarch64")
        self._svl = options.svl_bits
        self._trace_kernels = options.trace_kernels
        self._status = status or emulation_setup.status(runner=runner)
        self._version_checked = False
        self._results = results
        self._fresh = options.fresh
        self._loaders: dict[tuple[str, ...], LoaderRange] = {}  # per qemu command: where the guest's loader is
        # plugin/progress.py's "run i/N" hook; here (instructions counted so far, 0, the run's SME2 setting):
        # counted runs only, the setting telling apart two counted side by side
        self.progress: Callable[[int, int, str], None] | None = None
        self.progress_unit = "instructions"
        counting = options.counting
        if counting not in COUNTING_CHOICES:
            raise UsageError(f"--sme2-counting={counting} is not one of {', '.join(COUNTING_CHOICES)}")
        self._counting = self._status.counting if counting == "auto" else counting
        if self._counting == "log" and self._status.ready and self._trace_kernels and self._status.log_qemu is None:
            raise UsageError(
                f"--sme2-counting=log reads qemu-user {emulation_setup.QEMU_SERIES}'s execution log, and it is not "
                f"set up; run `{emulation_setup.SETUP_COMMAND}`, or count in the emulator (--sme2-counting=auto)"
            )
        if self._counting == "plugin" and self._status.ready and self._status.plugin_header is None:
            raise UsageError(
                f"--sme2-counting=plugin: {self._status.counting_note()}; or count from the log with "
                "--sme2-counting=log"
            )

    @property
    def info(self) -> TargetInfo:
        st = self._status
        return TargetInfo(
            name="emulated",
            # the emulated CPU, not the emulator's version: both counting ways give the same counts, and the
            # version is kept beside it (a baseline recorded under another qemu says so when it is checked)
            cpu=f"qemu-aarch64 -cpu max SVL {self._svl}",
            arch="aarch64",
            has_sme2=True,
            emulated=True,
            details={
                "qemu": str(st.qemu),
                "qemu_version": st.version,
                "counting": self._counting,
                "runner": str(st.runner),
                "svl_bits": self._svl,
                "timing": EMULATED_TIMING,
            },
        )

    @property
    def _ready_runner(self) -> Path:
        """The runner of a ready target: nothing runs before ``unsupported`` said it is ready."""
        if self._status.runner is None:
            raise RunnerError(f"emulated SME2 target not ready: {self._status.problem}")
        return self._status.runner

    @property
    def _ready_qemu(self) -> Path:
        """qemu of a ready target: nothing runs before ``unsupported`` said it is ready."""
        if self._status.qemu is None:
            raise RunnerError(f"emulated SME2 target not ready: {self._status.problem}")
        return self._status.qemu

    def unsupported(self, sme2: bool | None) -> str | None:
        if not self._status.ready:
            return f"emulated SME2 target not ready: {self._status.problem}"
        return None

    def _check_runner_version(self) -> None:
        """A runner linked against another executorch than the exporter's is a clear error, once."""
        if self._version_checked:
            return
        from pytest_sme2.run.native.build import executorch_release

        st = self._status
        built = emulation_setup.runner_version(self._ready_qemu, self._ready_runner)
        wanted = executorch_release()
        if built is None:
            raise RunnerError(
                f"{st.runner} did not answer `--version` like pytest-sme2's runner; the emulated target needs "
                f"it: run `{emulation_setup.SETUP_COMMAND}` (or `pytest-sme2 build-runner --arch linux-aarch64`)"
            )
        if built != wanted:
            raise RunnerError(
                f"{st.runner} was built against executorch {built}, but programs are exported with executorch "
                f"{wanted}; rebuild it with `{emulation_setup.SETUP_COMMAND} --force`"
            )
        self._version_checked = True

    def device_state(self) -> None:
        """None: no device to read (this target's times are not a phone's or a board's)."""
        return None

    def kernel_sampler(self, period_ns: int) -> NoReturn:
        """None: emulated time is no time to sample; the kernels that ran come from qemu's trace instead."""
        raise UsageError(
            f"{self.info.name} target: {EMULATED_TIMING}, so its kernels are not sampled; there the "
            "kernels that ran come from qemu's trace (Profile.executed_sme_kernels) and the "
            "instructions counted per operator"
        )

    def run(
        self,
        pte: Path,
        inputs: Path | None,
        spec: RunSpec,
        out_dir: Path,
        reference: Path | None = None,
        before_counting: Callable[[], None] | None = None,
    ) -> RunResult:
        """``reference`` is not run: emulated time is never compared, so it would only cost emulation time.
        ``before_counting`` is called once right before a counted run emulates (after the result cache missed):
        where its estimate is said and a hopeless run refused (Target.counts_instructions).

        With ETDump on and counting on (the default), the run is counted: every block the
        inference executes is logged and cut into ETDump events (qemu_counts.py), and
        the result carries the path of the counts (``evidence["instruction_counts"]``).
        """
        st = self._status
        if not st.ready:
            raise UsageError(f"emulated SME2 target not ready: {st.problem}")
        self._check_runner_version()
        qemu = self.emulator_command(spec)
        if self._trace_kernels and spec.etdump:
            if spec.threads > 1:  # before the result cache: an answer counted so would be just as wrong
                raise UsageError(counted_threads_problem(spec.threads))
            return self._counted_run(qemu, pte, inputs, spec, out_dir, before_counting)
        env = {**os.environ, "QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)}
        launch = RunnerLaunch(qemu, self._ready_runner, env, self.info, sme2_active=spec.sme2 is not False)
        return run_runner_process(launch, pte, inputs, spec, out_dir)

    def emulator_command(self, spec: RunSpec) -> list[str]:
        """qemu and its CPU: ``-cpu max`` with this SVL for SME2 on, ``max,sme=off`` for SME2 off. A run counted
        from the log runs on qemu-user 11.1 where it is set up (the log path as it always ran), others on the
        emulator the status chose."""
        cpu = "max,sme=off" if spec.sme2 is False else emulation_setup.svl_cpu(self._svl)
        counted_from_log = self._counting == "log" and self._trace_kernels and spec.etdump
        qemu = (self._status.log_qemu if counted_from_log else None) or self._status.qemu
        return [str(qemu), "-cpu", cpu]

    @property
    def side_by_side(self) -> int:  # type: ignore[override] # computed per process, a constant elsewhere
        """A core each: counted instructions do not depend on what runs beside them (system/side_by_side.py)."""
        from pytest_sme2.system.side_by_side import cores_for_side_by_side

        return cores_for_side_by_side()

    def counts_instructions(self, spec: RunSpec) -> bool:
        """A run with ETDump on is counted unless counting is off (--sme2-no-kernel-trace)."""
        return bool(self._trace_kernels and spec.etdump)

    @property
    def counting(self) -> str:
        """Where this target's counted runs count: "plugin" or "log"."""
        return self._counting

    def _counted_run(
        self,
        qemu: list[str],
        pte: Path,
        inputs: Path | None,
        spec: RunSpec,
        out_dir: Path,
        before_counting: Callable[[], None] | None = None,
    ) -> RunResult:
        """The run counted per ETDump event (see qemu_counts.py), inside the emulator or from its log.

        The same program must count the same on every machine, so the guest sees the same
        address space each time: no address randomisation (setarch -R), a fixed working folder
        layout with short relative names, and an environment holding only what qemu needs.
        """
        setarch = shutil.which("setarch")
        if setarch is None:
            raise UsageError(
                "counting instructions on the emulated target needs `setarch` (util-linux): "
                "`sudo apt-get install util-linux`, or turn counting off with --sme2-no-kernel-trace"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        counter_binary = self._counter()
        key = None if self._results is None else self.result_key(pte, inputs, spec, counter_binary)
        results = self._results
        run = _CountedRun(qemu, pte, inputs, spec, out_dir, setarch, counter_binary)
        if key is None or results is None:
            return self._count(run, None, before_counting)
        with results.computing(key):
            if not self._fresh:
                stored = results.load(key, out_dir)
                stale = None if stored is None else _stale_counts(out_dir / COUNTS_FILE)
                if stored is not None and stale is None:
                    return self._cached_result(key, stored, spec, out_dir)
                if stale is not None:
                    results.discard(key, stale)
            return self._count(run, key, before_counting)

    def _counter(self) -> Path:
        """What counts: the counting plugin qemu loads, or the program that reads qemu's log."""
        from pytest_sme2.run.native.build import build_count_plugin, build_exec_counter

        if self._counting == "plugin" and self._status.plugin_header is not None:
            return build_count_plugin(self._status.plugin_header)
        return build_exec_counter()

    def _loader(self, base: list[str], env: dict[str, str] | None = None) -> LoaderRange:
        """Where ``base`` (setarch, qemu, CPU, and the plugin where one is loaded) maps the guest's loader and
        libraries (asked once per command). qemu places the guest's mappings around its own host mappings, so a
        plugin's allocations move them: the plugin must be loaded when asked as when counting."""
        loader = self._loaders.get(tuple(base))
        if loader is None:
            loader = loader_range(
                base, self._ready_runner, carried_loader(self._ready_runner).loader, env or self._guest_env()
            )
            self._loaders[tuple(base)] = loader
        return loader

    def counted_prefix(self, qemu: list[str], setarch: str, log: str) -> tuple[list[str], LoaderRange]:
        """The command a counted run from the log starts the runner behind, and where it maps the guest's loader:
        no address randomisation, every symbol bound at start-up and the loader's code left out of the execution
        log (guest_loader.py), the log written into ``log``."""
        base = [setarch, "-R", *qemu, *counted_guest_flags()]
        loader = self._loader(base)
        return [*base, *BIND_NOW, *QEMU_LOG_FLAGS, *loader.log_filter(), "-D", log], loader

    def plugin_prefix(
        self, qemu: list[str], setarch: str, plugin: Path, out_dir: Path
    ) -> tuple[list[str], LoaderRange, Boundaries]:
        """The command a run counted inside the emulator starts the runner behind (as :meth:`counted_prefix`, the
        loader left out of the counts by the plugin's ``skip``), and the event boundaries it marks: computed from
        where the loader's trace says the libraries are, checked against the run's own memory map afterwards."""
        if "," in str(plugin) or "=" in str(plugin):
            raise UsageError(
                f"the counting plugin's path {plugin} holds ',' or '=', which qemu's -plugin option cannot carry; "
                "set PYTEST_SME2_RUNNER_CACHE to a folder without them"
            )
        # asked with the plugin loaded as it will be (its allocations are the same whatever it marks)
        probe = f"{plugin},markers=/dev/null,out=/dev/null,blocks=/dev/null,skip=0-0"
        guest = counted_guest_flags()
        loader = self._loader(
            [setarch, "-R", *qemu[:1], "-plugin", probe, *qemu[1:], *_ONE_ARENA, *guest], _plugin_env()
        )
        bounds = boundaries(AddressSpace.of_libraries(loader.libraries))
        write_file(out_dir / PLUGIN_MARKERS, bounds.marker_lines())
        arguments = (
            f"{plugin},markers={PLUGIN_MARKERS},out={PLUGIN_SEGMENTS},blocks={PLUGIN_BLOCKS},"
            f"skip={loader.start:x}-{loader.end:x},progress={PLUGIN_PROGRESS}"
        )
        return (
            [setarch, "-R", *qemu[:1], "-plugin", arguments, *qemu[1:], *_ONE_ARENA, *guest, *BIND_NOW],
            loader,
            bounds,
        )

    @staticmethod
    def _guest_env() -> dict[str, str]:
        """All the guest sees of the host's environment, the same on every machine."""
        return {"QEMU_LD_PREFIX": str(emulation_setup.SYSROOT)}

    def _count(
        self, run: _CountedRun, key: RunKey | None, before_counting: Callable[[], None] | None = None
    ) -> RunResult:
        """Emulate and count one run (no cache lookup), and store it under ``key`` when given. Whatever happens,
        nothing of the count's working files is left behind but the counts."""
        qemu, pte, inputs, spec, out_dir, setarch = run.qemu, run.pte, run.inputs, run.spec, run.out_dir, run.setarch
        counter_binary = run.counter
        if before_counting is not None:
            before_counting()  # the estimate, or a refusal before qemu starts
        working = [out_dir / n for n in (PLUGIN_MARKERS, PLUGIN_SEGMENTS, PLUGIN_BLOCKS, PLUGIN_PROGRESS)]
        working += [out_dir / "blocks.tsv", out_dir / "blocks.u32", out_dir / "qemu-exec.fifo"]
        try:
            if counter_binary.name == COUNT_PLUGIN_NAME:
                result, blocks, loader, bounds = self._run_in_plugin(
                    qemu, pte, inputs, spec, out_dir, setarch, counter_binary
                )
            else:
                result, blocks, loader = self._run_from_log(qemu, pte, inputs, spec, out_dir, setarch, counter_binary)
                bounds = None
            space = AddressSpace.from_file(out_dir / MAPS)
            loader.check(space.text, str(out_dir / MAPS))
            _check_allocator_loaded(space, out_dir / MAPS)
            found = boundaries(space)
            if bounds is not None and found != bounds:
                raise RunnerError(
                    f"the counted run's memory map ({out_dir / MAPS}) put the profiler or XNNPACK elsewhere than the "
                    "loader's trace said before the run, so the counting plugin marked the wrong blocks; report this "
                    "with `qemu-aarch64 --version`, or count from the log with --sme2-counting=log"
                )
            counts = count_events(blocks(), space, found)
            path = write_counts(counts, result.timed_etdump, result.warmup_etdump, out_dir / COUNTS_FILE)
        finally:
            for file in working:
                file.unlink(missing_ok=True)  # the per-block working files: megabytes; the counts are what is kept
        result.evidence["kernel_trace"] = kernel_trace_of(counts).as_dict()
        result.evidence["counting"] = self._counting if bounds is not None else "log"
        if key is not None and self._results is not None:
            self._results.store(
                key, out_dir, [name for name in KEPT_FILES if (out_dir / name).is_file()], result.evidence
            )
            result.evidence["result_cache"] = {"key": key.short, "cached": False}
        result.evidence["instruction_counts"] = str(path)
        return result

    def _run_counted_runner(
        self, prefix: list[str], env: dict[str, str], pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path
    ) -> RunResult:
        """The runner behind a counted run's ``prefix``: the fixed layout, and its memory map written (MAPS)."""
        launch = RunnerLaunch(
            prefix,
            self._ready_runner,
            env,
            self.info,
            sme2_active=spec.sme2 is not False,
            extra_args=(f"--maps_path={MAPS}",),
            fixed_layout=True,
        )
        return run_runner_process(launch, pte, inputs, spec, out_dir)

    def _run_in_plugin(
        self, qemu: list[str], pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path, setarch: str, plugin: Path
    ) -> tuple[RunResult, Callable[[], ExecutedBlocks], LoaderRange, Boundaries]:
        """Run under the counting plugin (count_plugin.c); the blocks it counted are read once it exited."""
        prefix, loader, bounds = self.plugin_prefix(qemu, setarch, plugin, out_dir)
        progress = out_dir / PLUGIN_PROGRESS
        report = self.progress
        variant = spec.sme2_label
        watcher = ProgressWatcher(progress, None if report is None else lambda done: report(done, 0, variant))
        started = time.monotonic()
        try:
            result = self._run_counted_runner(prefix, _plugin_env(), pte, inputs, spec, out_dir)
        except RunnerError as exc:
            raise RunnerError(f"{exc}\n{how_far(progress)}") from None
        finally:
            watcher.stop()
        counted = counted_so_far(progress)  # the plugin writes its last figure at exit: the whole process's
        if counted is not None:  # what the next estimate of this model starts from (measure/count_records.py)
            result.evidence["counted_run"] = {"instructions": counted[1], "seconds": time.monotonic() - started}
        blocks, segments = out_dir / PLUGIN_BLOCKS, out_dir / PLUGIN_SEGMENTS
        if not blocks.is_file() or not segments.is_file():
            raise RunnerError(
                f"the counting plugin wrote no counts into {out_dir} (qemu's output is in {out_dir / RUNNER_LOG}); "
                "count from the log with --sme2-counting=log to compare"
            )
        return result, lambda: ExecutedBlocks.from_plugin(blocks, segments), loader, bounds

    def _run_from_log(
        self,
        qemu: list[str],
        pte: Path,
        inputs: Path | None,
        spec: RunSpec,
        out_dir: Path,
        setarch: str,
        counter_binary: Path,
    ) -> tuple[RunResult, Callable[[], ExecutedBlocks], LoaderRange]:
        """Run under qemu's execution log, read through a FIFO by exec_counter."""
        fifo = out_dir / "qemu-exec.fifo"
        prefix, loader = self.counted_prefix(qemu, setarch, fifo.name)
        blocks, sequence = out_dir / "blocks.tsv", out_dir / "blocks.u32"
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        counter = supervised.start(
            [str(counter_binary), str(blocks), str(sequence), str(fifo)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            result = self._run_counted_runner(prefix, self._guest_env(), pte, inputs, spec, out_dir)
        finally:
            _release_reader(fifo)
            try:
                _, errors = counter.communicate(timeout=120)
            except BaseException:  # a hung counter, or Ctrl-C while it drains the log
                supervised.end(counter)
                raise
            finally:
                fifo.unlink(missing_ok=True)
            supervised.forget(counter)
        summary = errors.decode(errors="replace").strip().splitlines()
        if counter.returncode != 0 or not summary or " 0 unbound" not in summary[-1]:
            raise RunnerError(
                f"the instruction counter failed on the emulated run in {out_dir} "
                f"(exit {counter.returncode}): {' '.join(summary[-2:])}"
            )
        return result, lambda: ExecutedBlocks.from_files(blocks, sequence), loader

    def result_key(self, pte: Path, inputs: Path | None, spec: RunSpec, counter: Path | None = None) -> RunKey:
        """Everything a counted run's answer depends on (result_cache.py): the program, inputs, runner, every
        library it loads (a kernel kit's too), qemu, the CPU settings (SVL, SME2 on/off), the run settings, the
        counting code and the counter (``counter``: its binary when the caller has it already, else found or
        built here)."""
        qemu, runner = self.emulator_command(spec), self._ready_runner
        counter = counter or self._counter()
        settings = {k: v for k, v in spec.as_dict().items() if k not in _NOT_IN_KEY}
        kits = [f for library in runner_libraries(pte, "aarch64") for f in kit_files(library)]
        return run_key(
            program=pte,
            inputs=inputs,
            runner=LoadedRunner(runner, (*loaded_libraries(runner), *kits, counter, _allocator())),
            emulator=Path(qemu[0]),
            cpu=" ".join(qemu[1:]),
            settings=settings,
            code=code_digest(),
        )

    def _cached_result(self, key: RunKey, stored: dict, spec: RunSpec, out_dir: Path) -> RunResult:
        """The RunResult of a counted run answered from the result cache, read from the files it copied."""
        shown = f"the counted run cached under key {key.short}"
        answer = read_result(out_dir / RUNNER_STDOUT, shown, str(self._status.runner))
        result = build_result(
            answer, spec, self.info, out_dir, out_dir / RUNNER_LOG, sme2_active=spec.sme2 is not False
        )
        result.evidence.update(stored)
        result.evidence["result_cache"] = {"key": key.short, "cached": True}
        result.evidence["instruction_counts"] = str(out_dir / COUNTS_FILE)
        return result

    def close(self) -> None:
        return None


# qemu with a plugin loaded places the guest's mappings by where its own threads' malloc arenas landed, which
# varies from run to run (2 layouts in 6 runs); with one arena the guest's layout repeats exactly (10 of 10), so
# the loader's trace before the run says where the libraries will be. The guest does not see the variable (-U).
_ONE_ARENA = ("-U", "MALLOC_ARENA_MAX")


def _allocator() -> Path:
    """The allocator a counted run's guest preloads (fixed_cost_alloc.c): glibc's malloc costs what the heap's
    history makes it cost, so an operator that allocates would count differently in another program."""
    from pytest_sme2.run.native.build import build_fixed_cost_allocator

    return build_fixed_cost_allocator()


def counted_guest_flags() -> tuple[str, ...]:
    """qemu's flags that give a counted run's guest the fixed-cost allocator (a path qemu finds on the host, as
    the sysroot holds no such file)."""
    return ("-E", f"LD_PRELOAD={_allocator()}")


def _check_allocator_loaded(space: AddressSpace, maps: Path) -> None:
    """A counted run whose guest did not load the fixed-cost allocator counted glibc's malloc instead, so its
    counts are not the ones every other counted run (and the baselines) hold: an error, never a silent mix."""
    allocator = os.path.realpath(_allocator())
    if not any(mapping.path == allocator for mapping in space.mappings):
        raise RunnerError(
            f"the counted run's memory map ({maps}) does not show {allocator}, the allocator every counted run "
            "preloads, so its counts would hold glibc's malloc: check that nothing unsets LD_PRELOAD in the guest "
            "(qemu's -E/-U options, QEMU_SET_ENV) and that the file is readable, then run again"
        )


def _plugin_env() -> dict[str, str]:
    """The environment of qemu for a run counted inside it: the guest's, and one malloc arena for qemu."""
    return {**EmulatedTarget._guest_env(), "MALLOC_ARENA_MAX": "1"}


def _stale_counts(counts: Path) -> str | None:
    """Why a cached answer's counts are not what this code writes (another format version), or None. The key
    holds the package's digest, so this means the entry was written by other code than its key says."""
    try:
        version, _ = read_counts(counts)
    except RunnerError as exc:
        return str(exc)
    return (
        None
        if version == COUNTS_VERSION
        else (f"its {COUNTS_FILE} is format {version}, and this pytest-sme2 " f"writes format {COUNTS_VERSION}")
    )
