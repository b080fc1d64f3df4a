"""The target interface: where a .pte runs, and what a target class registers with.

A target answers three questions and does one thing:
- ``info``: what it is (name, CPU, SME2, fingerprint for baselines);
- ``unsupported(sme2)``: why it cannot give a requested SME2 setting (a skip
  reason), or None;
- ``kernel_sampler(period_ns)``: the sampler of which kernels ran, or a
  UsageError saying why it has none;
- ``run(pte, spec, out_dir)``: run warmup + timed iterations in one process
  and leave the ETDump(s), log and outputs in ``out_dir``.

Device, native-runner, host and emulated targets implement the same members.

A target *class* is registered by name (run/targets/registry.py, entry point group ``pytest_sme2.targets``) and
answers for itself (``RegisteredTarget``): the names ``--sme2-target`` writes it by, its own options, what can be
wrong with a choice before any test, how it is built from the session's settings (``TargetSettings``), and its
lines of ``pytest-sme2 doctor`` (``DoctorLine``).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol

import numpy as np

from pytest_sme2.errors import UsageError
from pytest_sme2.system.deprecated import renamed_attribute, warn_renamed
from pytest_sme2.system.option import Option

if TYPE_CHECKING:
    from pytest_sme2.evidence.samplers import Sampler
    from pytest_sme2.run.device_state import DeviceState
    from pytest_sme2.run.result_cache import ResultCache

WARMUP_ETDUMP = "warmup.etdp"
TIMED_ETDUMP = "timed.etdp"
RUNNER_LOG = "runner.log"
RUNNER_STDOUT = "runner.stdout"  # where the native runner prints its result line
# Written by the Runner into every run folder after a run: where it ran (TargetInfo) and how (RunSpec),
# so a tool reading the folder later (pytest-sme2 analyze/compare) knows, e.g., that its time is emulated.
RUN_FACTS = "run.json"
# the versions run.json records: the installed ones that exported and ran the program (export.tool_versions)
VERSION_KEYS = ("executorch", "torch", "torchao")
OUTPUTS = "outputs.pt"
# Why time-based checks are skipped on emulated targets (kernels and outputs there are real, time is not).
EMULATED_TIMING = "emulated timing is not hardware timing"
# Where SME2 on and off can run on a machine without SME2: the advice of every target that cannot.
EMULATED_ADVICE = "run SME2 on and off emulated here (--sme2-target=emulated, after pytest-sme2 setup-emulation)"


def emulated_advice(system: str) -> str:
    """The clause naming the emulated target (", or run SME2 on and off emulated here ..."), on Linux only, where
    qemu-user runs; "" elsewhere (macOS)."""
    return f", or {EMULATED_ADVICE}" if system == "Linux" else ""


# Upper bounds of run settings, checked where they enter (options, ini, markers, runner()).
# A day: a single run longer than that is a hang, not a slow model, and an unbounded timeout
# overflowed the waits (1e300 s in select()).
MAX_TIMEOUT_S = 86_400.0
# Seconds before one run (warmup + timed runs of a variant in one process) is killed, unless set.
DEFAULT_TIMEOUT_S = 600.0
TIMEOUT_RANGE = f"a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} (one day: a run that long is hung, not slow)"
# More threads than any CPU ExecuTorch runs on has cores (the largest servers have a few hundred) only
# cost memory and time: 100000 threads could not even be created ("can't allocate memory").
MAX_THREADS = 1024
THREADS_WHY = "no CPU has more than a few hundred cores, and more threads than cores only slow a run down"


# sme2_replicas = auto (the default): each test's checks measure as many processes as its stored baseline
# says they need to see 1.5 tolerances (gate.auto_replicas); a RunSpec always gets the resolved number.
AUTO_REPLICAS = "auto"


@dataclass(frozen=True)
class RunSpec:
    """One variant's run settings. ``sme2=None`` means whatever the target has."""

    sme2: bool | None = None
    threads: int = 1
    runs: int = 40  # enough for the latency gate to catch a 15% slowdown on a loaded 2-core VM (docs/performance.md)
    warmup: int = 3
    etdump: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Up to this many rounds of ``runs`` when the machine disturbs more than half of them (Runner.profile).
    max_rounds: int = 3
    # Replicas: independent measurements of the whole variant, each begun in a fresh process with a fresh
    # program load (a baseline update's --sme2-baseline-replicas): the gate compares quantities between
    # replicas, because their level moves between processes, not only between runs (stats.ReplicaShift).
    replicas: int = 1
    # Run in a process no earlier run used (the host target starts a new worker; runner-binary targets
    # start one per run anyway). Set by Runner for each replica; not a setting, so not stored.
    fresh_process: bool = field(default=False, compare=False, repr=False)
    # Where timeout_s was set (``--sme2-timeout=5``, ``@pytest.mark.perf(timeout=...)``...), for the message
    # of a run that hits it; not a run setting, so not compared, stored or shown in labels.
    timeout_source: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, minimum in (("threads", 1), ("runs", 1), ("warmup", 0), ("max_rounds", 1), ("replicas", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise UsageError(
                    f"{name}={value!r} is invalid: {name} must be an integer >= {minimum} "
                    f"(set it in @pytest.mark.perf({name}=...), runner({name}=...) or --sme2-{name})"
                )
        if self.threads > MAX_THREADS:
            raise UsageError(
                f"threads={self.threads!r} is invalid: threads must be an integer from 1 to {MAX_THREADS} "
                f"({THREADS_WHY}; set it in @pytest.mark.perf(threads=...), runner(threads=...) or --sme2-threads)"
            )
        if self.sme2 not in (True, False, None):
            raise UsageError(f"sme2={self.sme2!r} is invalid: use True, False or None (whatever the target has)")
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
            source = self.timeout_source or f"timeout={timeout!r}"
            raise UsageError(f"{source} is invalid: it must be {TIMEOUT_RANGE}")

    processes = renamed_attribute("RunSpec.processes", "replicas")

    @property
    def sme2_label(self) -> str:
        return {True: "sme2=on", False: "sme2=off", None: "sme2=auto"}[self.sme2]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("timeout_source")
        data.pop("fresh_process")
        return data

    def timed_out(self) -> str:
        """``timed out after N s`` and where N was set, so the user knows what to raise."""
        source = self.timeout_source or "RunSpec(timeout_s=...)"
        return f"timed out after {self.timeout_s:g} s (set by {source})"


_made_by_dataclass = RunSpec.__init__


@functools.wraps(_made_by_dataclass)
def _run_spec_init(self: RunSpec, *args: Any, processes: int | None = None, **kwargs: Any) -> None:
    """RunSpec's own constructor, also taking ``processes=``, the earlier spelling of ``replicas=``
    (system/deprecated.py), with a warning. Wrapped rather than a field, so ``dataclasses.replace`` and
    ``asdict`` never see the old name."""
    if processes is not None:
        warn_renamed("RunSpec(processes=)")
        kwargs.setdefault("replicas", processes)
    _made_by_dataclass(self, *args, **kwargs)


RunSpec.__init__ = _run_spec_init  # type: ignore[method-assign]


@dataclass(frozen=True)
class TargetInfo:
    name: str  # "host", "adb:SERIAL", ...
    cpu: str
    arch: str
    has_sme2: bool
    emulated: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """Separates hosts, devices, emulation and SME2-capable from non-capable CPUs.

        Baselines are stored per fingerprint. Device targets that know the
        device model or SoC (``details["device_model"]`` / ``details["soc"]``)
        add it, so two phones with the same CPU cores do not share baselines.
        """
        from pytest_sme2.run.cpu import CpuInfo

        def slug(text: str) -> str:
            return CpuInfo(text, self.arch, "", frozenset()).slug

        kind = "emulated" if self.emulated else self.name.split(":")[0]
        device = [slug(str(self.details[k])) for k in ("device_model", "soc") if self.details.get(k)]
        # The cores' governor where the target reads one (device_state.py): performance and schedutil time apart.
        # What fixes the clocks (device_state.py): the cores' governor where read, Android's fixed performance
        # mode, the cores the runner is pinned to. Runs under other settings are not comparable.
        governor = [f"gov-{slug(str(self.details['governor']))}"] if self.details.get("governor") else []
        fixed = ["fixedperf"] if self.details.get("fixed_performance_mode") else []
        pinned = [f"cpus-{self.details['affinity']}"] if self.details.get("affinity") else []
        return "-".join(
            [
                kind,
                self.arch,
                *device,
                slug(self.cpu),
                *governor,
                *fixed,
                *pinned,
                "sme2" if self.has_sme2 else "nosme2",
            ]
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fingerprint"] = self.fingerprint
        return data


@dataclass
class RunResult:
    """What a run left behind. ``wall_ms`` is the runner-side clock per timed run."""

    spec: RunSpec
    target: TargetInfo
    out_dir: Path
    wall_ms: np.ndarray
    timed_etdump: Path | None
    warmup_etdump: Path | None
    log: Path
    outputs: Path | None
    sme2_active: bool
    runtime_threads: int | None = None  # what the runtime reported, to prove the setting took
    # The reference program's time right before each timed run (reference_program.py), or None.
    reference_ms: np.ndarray | None = None
    # The reference program's method load right before each load of the model's (native_runner.STARTUP_REPEATS).
    reference_load_ms: np.ndarray | None = None
    # The steady clock (CLOCK_MONOTONIC on Linux/Android) minus the ETDump's clock, in ns, when the runtime
    # reported it: what places a sampling profiler's samples inside ETDump events (kernel_sampling.py).
    clock_offset_ns: int | None = None
    # Target-specific evidence for the profile's metadata, e.g. {"kernel_trace": {...}} under emulation.
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def artifacts(self) -> dict[str, str]:
        paths = {
            "timed_etdump": self.timed_etdump,
            "warmup_etdump": self.warmup_etdump,
            "log": self.log,
            "outputs": self.outputs,
        }
        return {k: str(v) for k, v in paths.items() if v is not None and Path(v).exists()}


class Target(Protocol):
    @property
    def info(self) -> TargetInfo: ...

    def unsupported(self, sme2: bool | None) -> str | None: ...

    def run(
        self, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path, reference: Path | None = None
    ) -> RunResult: ...

    # ``reference``: a program to run right before each timed inference, timed apart (reference_program.py).

    def kernel_sampler(self, period_ns: int) -> "Sampler":
        """The sampler that runs around this target's runner (samplers.py), or a UsageError saying why there
        is none and what to do: a capability of the target, asked of the target."""
        ...

    def device_state(self) -> "DeviceState | None":
        """The device's governors, frequencies, temperatures and thermal status now (device_state.py), read
        before and after every chunk; None where there is no device to read (host, emulated)."""
        ...

    def counts_instructions(self, spec: RunSpec) -> bool:
        """Whether a run of ``spec`` counts guest instructions in an emulator (the emulated target with ETDump
        and counting on): its cost is the emulator's, estimated before it starts (measure/count_estimate.py).
        A target that says True takes ``before_counting=`` in ``run`` and calls it once right before it
        emulates, not when a cache answers: the estimate is said there, and a hopeless run refused."""
        ...

    @property
    def side_by_side(self) -> int:
        """How many measurements of one test it makes at once (compare_variants' two sides): 1 unless a run's
        verdicts do not depend on what runs beside it, as counted instructions do not (system/side_by_side.py)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TargetSettings:
    """What a target is built from: its log folder, the runner binaries (--sme2-runner, --sme2-runner-on/-off; a
    target that runs no runner ignores them), the emulated result cache, and the values of the registered targets'
    own options by option name (``options``, as read and checked by the plugin; an absent one is its default)."""

    log_dir: Path
    runner: Path | None = None
    runner_on: Path | None = None
    runner_off: Path | None = None
    results: "ResultCache | None" = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def value(self, option: Option) -> Any:
        """The value of one of a target's options: as given, else the option's default."""
        return self.options.get(option.name, option.default)

    @property
    def runners(self) -> dict[str, Path | None]:
        """The runner binaries by the option that gave them, for errors that name it."""
        return {"--sme2-runner": self.runner, "--sme2-runner-on": self.runner_on, "--sme2-runner-off": self.runner_off}


# The states of a doctor line: READY, MISSING (something to fix; doctor exits 1) or INFO (a fact, nothing to fix).
READY, MISSING, INFO = "ok", "MISSING", "info"


@dataclass(frozen=True)
class DoctorLine:
    """One line of ``pytest-sme2 doctor``: what was looked at, its state, what was found, and the fix."""

    name: str
    state: str  # READY ("ok"), MISSING ("MISSING": doctor exits 1) or INFO ("info")
    detail: str
    fix: str = ""


class RegisteredTarget:
    """What a target class answers for, as the registry asks it (the defaults suit a target with no name argument,
    no options and no doctor lines). Subclass it and register the class under ``names[0]`` in the entry point
    group ``pytest_sme2.targets``; docs/design.md, "Adding a target", lists the files."""

    # How --sme2-target writes it: the first is the entry point's name; a form with ":" takes an argument
    # (``adb:SERIAL``), and ``check_name`` reads it.
    names: ClassVar[tuple[str, ...]] = ()
    # The target's own settings, contributed to the one option table (`pytest --help`, the ini, docs/options.md).
    options: ClassVar[tuple[Option, ...]] = ()
    # Whether ``pytest-sme2 doctor --sme2-target=NAME`` checks it as a session would (a device), beyond the lines
    # plain ``doctor`` shows for every target.
    checks_a_target: ClassVar[bool] = False
    # Measurements made at once (Target.side_by_side): one, for a target whose runs are timed.
    side_by_side: int = 1

    def counts_instructions(self, spec: RunSpec) -> bool:
        """False: a target whose runs are timed on hardware (Target.counts_instructions)."""
        return False

    @classmethod
    def check_name(cls, name: str) -> str:
        """``name`` if it names this target, else a UsageError saying how it is written."""
        if name != cls.names[0]:
            raise UsageError(
                f"--sme2-target={name!r} is not a {cls.names[0]} target; write it " f"{' or '.join(cls.names)}"
            )
        return name

    @classmethod
    def check(cls, name: str, settings: TargetSettings) -> None:
        """Everything about choosing this target that can be wrong before any test runs, as a UsageError (its
        settings, runner binaries it cannot run); nothing is started or built."""

    @classmethod
    def create(cls, name: str, settings: TargetSettings) -> Target:
        raise NotImplementedError(f"{cls.__name__} registers no way to build the target {name!r}")

    @classmethod
    def doctor(cls) -> list[DoctorLine]:
        """Its lines of plain ``pytest-sme2 doctor``: whether this machine can run it, each missing piece with its
        fix. Only looks: never installs, builds or starts anything."""
        return []

    @classmethod
    def doctor_target(cls, name: str, settings: TargetSettings) -> list[DoctorLine]:
        """``doctor --sme2-target=NAME``: the target as a session would use it (``checks_a_target``)."""
        raise NotImplementedError(f"{cls.__name__} has no check beyond plain doctor's lines")
