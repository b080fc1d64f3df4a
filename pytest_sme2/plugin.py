"""pytest hooks and fixtures of pytest-sme2. Wiring only: the work is done elsewhere.

Precedence of run settings: runner(...) arguments > @pytest.mark.perf(...) >
command-line options > [tool.pytest.ini_options] > built-in defaults.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from .safe_files import write_file
from . import _processes, _storage, progress
from .errors import Sme2Error, UsageError
from .export import ExportedModel, Recipe
from .kernel_sampling import SamplingSettings
from .perf_samples import DEFAULT_PERIOD_NS
from .profile import Profile
from .runner import Runner, require_program
from .session import Settings, Sme2Session
from .targets import TARGET_NAMES, EmulatedTarget, RunSpec, check_target_name
from .emulation import DEFAULT_SVL_BITS
from .targets.base import DEFAULT_TIMEOUT_S, MAX_THREADS, MAX_TIMEOUT_S, THREADS_WHY, TIMEOUT_RANGE
from .targets.emulated import check_svl
from .targets.adb import AdbOptions, is_adb_target
from .verdicts import BASELINE_PROCESSES, MIN_BASELINE_PROCESSES

# Hook modules that extend this one (baselines and verdicts; reports and session outputs).
# Each reads a test's profiles through profiles_of(item) and the session through session_of(config).
pytest_plugins = ("pytest_sme2._baseline_hooks", "pytest_sme2._report_hooks")

_SESSION_KEY = pytest.StashKey[Sme2Session]()
_PROFILES_KEY = pytest.StashKey[list]()


def session_of(config: pytest.Config) -> Sme2Session | None:
    """The pytest-sme2 session of this pytest process (None before configure or when disabled)."""
    return config.stash.get(_SESSION_KEY, None)


def profiles_of(item: pytest.Item) -> list[Profile]:
    """The Profiles a test built with etdump_profile, in call order (empty if none)."""
    return item.stash.get(_PROFILES_KEY, [])


_DEFAULTS = {"threads": 1, "timeout": DEFAULT_TIMEOUT_S}
# Ini defaults of the numeric settings ("" = the target's default), shared by addini and setting_source.
_INI_DEFAULTS = {"runs": "", "warmup": "", "max_rounds": str(RunSpec.max_rounds), "emulated_svl": str(DEFAULT_SVL_BITS),
                 "baseline_processes": str(BASELINE_PROCESSES), "processes": "1",
                 "threads": str(_DEFAULTS["threads"]), "timeout": str(_DEFAULTS["timeout"]),
                 "kernel_sampling_hz": f"{1e9 / DEFAULT_PERIOD_NS:g}"}

MARKERS = (
    "sme2: an SME2 performance test (select with -m sme2)",
    "model(name, dtype='fp32', quant=None, partitioner='xnnpack'): the model and export recipe used by the "
    "exported_pte fixture; dtype fp32|fp16|int8, quant static|dynamic (int8), partitioner xnnpack|none",
    "perf(runs=None, warmup=None, threads=None, timeout=None, max_rounds=None): run settings for this test's runners",
    "latency: the test asserts on time (speedups, latencies); skipped before anything runs on emulated "
    "targets, whose timing is not hardware timing",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sme2", "pytest-sme2: ExecuTorch SME2 performance tests")
    group.addoption("--sme2-target", default=None, type=_target_option,
                    help=f"where programs run: {', '.join(TARGET_NAMES)} (default: ini sme2_target, else auto)")
    group.addoption("--sme2-runs", type=int, default=None,
                    help=f"timed runs per variant (default {RunSpec.runs}; {EmulatedTarget.default_runs} on the "
                         "emulated target)")
    group.addoption("--sme2-warmup", type=int, default=None,
                    help=f"warmup runs per variant (default {RunSpec.warmup}; {EmulatedTarget.default_warmup} on "
                         "the emulated target)")
    group.addoption("--sme2-max-rounds", type=int, default=None,
                    help="when the machine disturbs more than half of a variant's runs, run them again, up to this "
                         "many rounds in all (default 3; 1 never repeats)")
    group.addoption("--sme2-baseline-processes", type=int, default=None,
                    help=f"with --sme2-update-baselines: measure each variant this many times, each in a fresh "
                         f"process, so the gate knows how far its quantities move between processes (default "
                         f"{BASELINE_PROCESSES}; at least 3; not used on the emulated target, whose counts repeat)")
    parser.addini("sme2_baseline_processes", "processes a baseline update measures each variant in",
                  default=_INI_DEFAULTS["baseline_processes"])
    group.addoption("--sme2-processes", type=int, default=None,
                    help="measure each variant this many times, each in a fresh process, and judge their medians "
                         "against the baseline's processes (default 1; more catch smaller changes on a noisy machine "
                         "at the cost of a process start each)")
    parser.addini("sme2_processes", "processes each variant is measured in (checks)", default=_INI_DEFAULTS["processes"])
    group.addoption("--sme2-emulated-svl", type=int, default=None,
                    help=f"emulated target: SME streaming vector length in bits (default {DEFAULT_SVL_BITS}, like the M4)")
    group.addoption("--sme2-threads", type=int, default=None, help="runtime threads (default 1)")
    group.addoption("--sme2-timeout", type=float, default=None, help=f"seconds before a run is killed (default {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--sme2-runner", default=None,
                    help="local target: runner executable; SME2 off by masking (default: the built runner)")
    group.addoption("--sme2-runner-on", default=None, help="local target: runner build used for SME2 on")
    group.addoption("--sme2-runner-off", default=None, help="local target: runner build used for SME2 off")
    group.addoption("--sme2-cache-dir", default=None, help="export cache directory (default .sme2/cache)")
    group.addoption("--sme2-artifacts-dir", default=None,
                    help="root of per-session artifact folders (default .sme2/artifacts)")
    parser.addini("sme2_target", "default --sme2-target", default="auto")
    for name, help_text in _ADB_OPTIONS.items():
        group.addoption(f"--sme2-{name.replace('_', '-')}", default=None, help=help_text)
        parser.addini(f"sme2_{name}", help_text, default="")
    parser.addini("sme2_runs", "default timed runs per variant (empty: the target's default)", default="")
    parser.addini("sme2_warmup", "default warmup runs per variant (empty: the target's default)", default="")
    parser.addini("sme2_max_rounds", "rounds of runs at most when the machine disturbs more than half of them",
                  default=_INI_DEFAULTS["max_rounds"])
    parser.addini("sme2_emulated_svl", "emulated target: streaming vector length in bits",
                  default=_INI_DEFAULTS["emulated_svl"])
    group.addoption("--sme2-no-kernel-trace", action="store_true", default=False,
                    help="emulated target: skip the traced inference that names the SME kernels that ran")
    parser.addini("sme2_kernel_trace", "emulated target: name the SME kernels that ran (one traced inference "
                  "per variant)", type="bool", default=True)
    group.addoption("--sme2-latency-reference", default=None, choices=("on", "off"),
                    help="run pytest-sme2's reference program before each timed run so latency is gated relative "
                         "to it, cancelling drift of the machine (default: ini sme2_latency_reference, on); off for "
                         "a runner that is not pytest-sme2's")
    parser.addini("sme2_latency_reference", "run the reference program before each timed run (relative latency gate)",
                  type="bool", default=True)
    group.addoption("--sme2-kernel-sampling", default=None, choices=("on", "off"),
                    help="sample which kernels took each operator's time, in one more round per profile under Linux "
                         "perf (local target) or simpleperf (adb target); default: ini sme2_kernel_sampling, off")
    parser.addini("sme2_kernel_sampling", "sample which kernels took each operator's time (one more round per "
                  "profile)", type="bool", default=False)
    group.addoption("--sme2-kernel-sampling-hz", type=float, default=None,
                    help=f"kernel sampling: samples per second of CPU time (default {_INI_DEFAULTS['kernel_sampling_hz']})")
    parser.addini("sme2_kernel_sampling_hz", "kernel sampling: samples per second of CPU time",
                  default=_INI_DEFAULTS["kernel_sampling_hz"])
    group.addoption("--sme2-symfs", default=None,
                    help="kernel sampling: folder of unstripped copies of the runtime's libraries (by mapped path or "
                         "file name), to name kernels the shipped libraries leave unnamed")
    parser.addini("sme2_symfs", "kernel sampling: folder of unstripped library copies", default="")
    group.addoption("--sme2-history", default=None,
                    help="append every perf test's quantities to this JSON Lines history (pytest-sme2 history draws "
                         "it and flags where they changed); default: ini sme2_history, none")
    parser.addini("sme2_history", "JSON Lines history the gate's quantities are appended to (relative to the rootdir)",
                  default="")
    parser.addini("sme2_threads", "default runtime threads", default=_INI_DEFAULTS["threads"])
    parser.addini("sme2_timeout", "default run timeout in seconds", default=_INI_DEFAULTS["timeout"])
    parser.addini("sme2_runner", "local target: runner executable (SME2 off by masking)", default="")
    parser.addini("sme2_runner_on", "local target: runner build used for SME2 on", default="")
    parser.addini("sme2_runner_off", "local target: runner build used for SME2 off", default="")
    parser.addini("sme2_cache_dir", "export cache directory, relative to the rootdir", default=".sme2/cache")
    parser.addini("sme2_artifacts_dir", "artifacts root, relative to the rootdir", default=".sme2/artifacts")
    parser.addini("sme2_model_dirs", "directories whose *.py files are models (name = file stem)", type="paths",
                  default=[])
    parser.addini("sme2_models", "extra models, one 'name = module.path' or 'name = path/to/file.py' per line",
                  type="linelist", default=[])


_ADB_OPTIONS = {
    "adb_server": "adb target: adb server HOST:PORT (default: ADB_SERVER_SOCKET, ANDROID_ADB_SERVER_PORT, 5037)",
    "adb_affinity": "adb target: CPU affinity mask for the runner, in hex as taskset takes it (e.g. f0)",
    "adb_dir": "adb target: device folder for per-session files (default /data/local/tmp)",
    "adb_mask_library": "adb target: libsme2_mask.so built for the device, for SME2 off with one runner build",
    "adb_claim_timeout": f"adb target: seconds to wait for a device no other worker has claimed (default {AdbOptions.claim_timeout_s:g})",
}


def _target_option(value: str) -> str:
    """argparse type of --sme2-target: a usage error that names the choices for anything else."""
    import argparse

    try:
        return check_target_name(value)
    except Sme2Error as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Lowest valid value of each numeric run setting (checked at configure, so a bad value is one usage error
# before any test instead of a failure of every test). ``strict``: the value must be above it.
_LIMITS: dict[str, tuple[float, bool, str]] = {
    "runs": (1, False, "a whole number >= 1"),
    "warmup": (0, False, "a whole number >= 0"),
    "max_rounds": (1, False, "a whole number >= 1"),
    "baseline_processes": (MIN_BASELINE_PROCESSES, False, f"a whole number >= {MIN_BASELINE_PROCESSES}"),
    "processes": (1, False, "a whole number >= 1"),
    "threads": (1, False, f"a whole number from 1 to {MAX_THREADS} ({THREADS_WHY})"),
    "timeout": (0, True, TIMEOUT_RANGE),
    "adb_claim_timeout": (0, False, "a number of seconds >= 0"),
    "kernel_sampling_hz": (0, True, "a number of samples per second > 0 (at most 100000)"),
}


# Highest valid value, where there is one (the reasons are in targets/base.py, beside the bounds).
_MAXIMA: dict[str, float] = {"threads": MAX_THREADS, "timeout": MAX_TIMEOUT_S}


def setting_source(config: pytest.Config, name: str) -> str:
    """Where a setting's value comes from, as the user wrote it: ``--sme2-runs=0`` or ``ini sme2_runs = 0``
    (or the default), so an error about it names the place to fix."""
    option = config.getoption(f"sme2_{name}")
    if option is not None:
        return f"--sme2-{name.replace('_', '-')}={option}"
    value = config.getini(f"sme2_{name}")
    if value == _INI_DEFAULTS.get(name, ""):
        return f"the default (--sme2-{name.replace('_', '-')} or ini sme2_{name} changes it)"
    where = f" (in {config.inipath} or -o)" if config.inipath else " (-o)"
    return f"ini sme2_{name} = {value}{where}"


def _setting(config: pytest.Config, name: str, cast: Callable[[str], Any]) -> Any:
    option = config.getoption(f"sme2_{name}")
    value = option if option is not None else config.getini(f"sme2_{name}")
    if value == "":
        return None
    kind = "a whole number" if cast is int else "a number" if cast is float else "text"
    try:
        result = cast(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{setting_source(config, name)} is not {kind}") from None
    if name in _LIMITS:
        low, strict, what = _LIMITS[name]
        high = _MAXIMA.get(name, math.inf)
        if not math.isfinite(result) or result < low or (strict and result == low) or result > high:
            raise pytest.UsageError(f"{setting_source(config, name)} is invalid: it must be {what}")
    return result


def _session_dir(config: pytest.Config, root: Path) -> Path:
    """This session's folder: the time for reading, and a random part, because the time and pid are
    not unique (two containers with their own pid namespaces start in the same second as pid 1)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "sme2_session_dir" in workerinput:
        return Path(workerinput["sme2_session_dir"])
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return root / f"session-{stamp}-{os.getpid()}-{secrets.token_hex(4)}"


def _path_setting(config: pytest.Config, name: str) -> Path | None:
    value = config.getoption(f"sme2_{name}") or config.getini(f"sme2_{name}")
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def history_path(config: pytest.Config) -> Path | None:
    """The history file of --sme2-history / ini sme2_history (relative to the rootdir), or None."""
    return _path_setting(config, "history")


def _kernel_sampling(config: pytest.Config) -> SamplingSettings | None:
    option = config.getoption("sme2_kernel_sampling")
    if not (option == "on" if option else config.getini("sme2_kernel_sampling")):
        return None
    hz = _setting(config, "kernel_sampling_hz", float)
    if hz > 100_000:  # perf's cpu-clock cannot fire faster than the kernel's timer slack allows; beyond it, noise
        raise pytest.UsageError(f"{setting_source(config, 'kernel_sampling_hz')} is invalid: it must be "
                                f"{_LIMITS['kernel_sampling_hz'][2]}")
    symfs = _path_setting(config, "symfs")
    if symfs is not None and not symfs.is_dir():
        raise pytest.UsageError(f"--sme2-symfs (or ini sme2_symfs) {symfs} is not a folder; point it at a folder of "
                                "unstripped copies of the runtime's libraries")
    return SamplingSettings(period_ns=int(round(1e9 / hz)), symfs=(symfs,) if symfs is not None else ())


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    _processes.install_signal_handlers()  # SIGTERM/SIGHUP to pytest end the runners it started
    rootdir = config.rootpath
    cache_dir = Path(config.getoption("sme2_cache_dir") or config.getini("sme2_cache_dir"))
    artifacts = Path(config.getoption("sme2_artifacts_dir") or config.getini("sme2_artifacts_dir"))
    settings = Settings(
        target=config.getoption("sme2_target") or config.getini("sme2_target"),
        runs=_setting(config, "runs", int),
        warmup=_setting(config, "warmup", int),
        max_rounds=_setting(config, "max_rounds", int),
        # A baseline update measures each variant in several processes (RunSpec.processes); checks in
        # --sme2-processes (default 1), which the update's quality check assumes of later checks.
        processes=_setting(config, "baseline_processes" if config.getoption("sme2_update_baselines") else "processes",
                           int),
        check_processes=_setting(config, "processes", int),
        threads=_setting(config, "threads", int),
        timeout_s=_setting(config, "timeout", float),
        cache_dir=cache_dir if cache_dir.is_absolute() else rootdir / cache_dir,
        session_dir=_session_dir(config, artifacts if artifacts.is_absolute() else rootdir / artifacts),
        runner=_path_setting(config, "runner"),
        runner_on=_path_setting(config, "runner_on"),
        runner_off=_path_setting(config, "runner_off"),
        svl_bits=_setting(config, "emulated_svl", int),
        kernel_trace=config.getini("sme2_kernel_trace") and not config.getoption("sme2_no_kernel_trace"),
        latency_reference=(config.getoption("sme2_latency_reference") == "on"
                           if config.getoption("sme2_latency_reference") else config.getini("sme2_latency_reference")),
        kernel_sampling=_kernel_sampling(config),
    )
    try:
        check_target_name(settings.target)
        check_svl(settings.svl_bits, setting_source(config, "emulated_svl"))
        if is_adb_target(settings.target):
            claim_timeout = _setting(config, "adb_claim_timeout", float)
            settings = replace(settings, adb=AdbOptions(
                server=_setting(config, "adb_server", str), affinity=_setting(config, "adb_affinity", str),
                device_dir=_setting(config, "adb_dir", str) or AdbOptions.device_dir,
                mask_library=_path_setting(config, "adb_mask_library"),
                claim_timeout_s=AdbOptions.claim_timeout_s if claim_timeout is None else claim_timeout))
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.target in ("local", "emulated"):  # a runner that cannot run there is an error before any test
        from .targets.local import check_runner

        arch = "aarch64" if settings.target == "emulated" else None
        for role, path in (("--sme2-runner", settings.runner), ("--sme2-runner-on", settings.runner_on),
                           ("--sme2-runner-off", settings.runner_off)):
            if path is not None:
                try:
                    check_runner(path, f"runner ({role})", arch=arch)
                except Sme2Error as exc:
                    raise pytest.UsageError(str(exc)) from None
    session = Sme2Session(settings)
    session.registry.root = rootdir  # where an unimportable model package is looked for (its error names the fix)
    try:
        for directory in config.getini("sme2_model_dirs"):
            session.registry.register_dir(Path(directory))
        for line in config.getini("sme2_models"):
            name, sep, target = line.partition("=")
            if not sep:
                raise UsageError(f"sme2_models line {line!r} is not 'name = module.path' or 'name = file.py'")
            target = target.strip()
            if target.endswith(".py") and not Path(target).is_absolute():
                target = str(rootdir / target)
            session.registry.register(name.strip(), target)
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SESSION_KEY] = session


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker writes into the controller's session folder."""
    node.workerinput["sme2_session_dir"] = str(node.config.stash[_SESSION_KEY].settings.session_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    try:
        if session is not None:
            session.close()
    finally:
        _processes.end_all()  # nothing a target started outlives the session, whatever stopped it


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or getattr(config, "workerinput", None):
        return []
    from .cpu import host_cpu

    cpu = host_cpu()
    s = session.settings
    return [
        f"sme2: target={s.target} host cpu='{cpu.name}' ({cpu.arch}, SME2 {'yes' if cpu.has_sme2 else 'no'}) "
        f"runs={s.runs if s.runs is not None else 'target default'} threads={s.threads}",
        f"sme2: models={', '.join(session.registry.names) or '(none)'}",
        f"sme2: cache={s.cache_dir} artifacts={s.session_dir}",
    ]


def _as_test_failure(request: pytest.FixtureRequest) -> contextlib.AbstractContextManager[None]:
    return failures_of_test(_session(request), request.node.nodeid)


@contextlib.contextmanager
def failures_of_test(session: Sme2Session, nodeid: str, places: tuple[_storage.Place, ...] = ()) -> Iterator[None]:
    """An Sme2Error fails (or errors, in setup) this test with its message, not a traceback; so does an
    OSError while writing into one of the session's folders or ``places`` (a full disk), as a StorageError
    naming the folder and the setting that moves it. An error's long detail (an export's traceback and
    torch log) goes into the test's artifacts folder, and the message says where."""
    try:
        yield
    except Sme2Error as exc:
        message = f"{type(exc).__name__}: {exc}"
        detail = getattr(exc, "detail", "")
        if detail:
            try:
                path = session.test_dir(nodeid) / f"{type(exc).__name__.lower()}.log"
                write_file(path, f"{message}\n\n{detail}\n")
                message += f"\nfull traceback and log: {path}"
            except OSError:  # the folder is not writable: the message alone still says what failed
                pass
        raise pytest.fail.Exception(message, pytrace=False) from None
    except OSError as exc:
        error = _storage.explain(exc, (*places, *session.places))
        if error is None:
            raise
        raise pytest.fail.Exception(f"StorageError: {error}", pytrace=False) from None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Folders that cannot be written stop the session before the first test, with one error each names."""
    sme2 = session.config.stash.get(_SESSION_KEY, None)
    if sme2 is None or getattr(session.config, "workerinput", None):
        return
    history_file = history_path(session.config)
    try:
        for place in sme2.session_places:
            _storage.check_writable(place)
        if history_file is not None:
            from .history import check_path

            check_path(history_file)
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None


def _marker_kwargs(item: pytest.Item, name: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    marker = item.get_closest_marker(name)
    if marker is None:
        return {}
    unknown = sorted(set(marker.kwargs) - set(allowed))
    if unknown:
        raise UsageError(f"@pytest.mark.{name} got unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return dict(marker.kwargs)


def _session(request: pytest.FixtureRequest) -> Sme2Session:
    return request.config.stash[_SESSION_KEY]


@pytest.fixture
def exported_pte(request: pytest.FixtureRequest) -> ExportedModel:
    """The .pte of the model named by ``@pytest.mark.model(name, dtype=, quant=, partitioner=)``.

    Exported with the recipe on first use and taken from the content-addressed
    export cache afterwards (across sessions and xdist workers). Path-like; also
    carries ``.etrecord_path``, ``.inputs_path``, ``.delegation`` and ``.from_cache``.
    """
    with _as_test_failure(request):
        marker = request.node.get_closest_marker("model")
        if marker is None:
            raise UsageError(
                "exported_pte needs a model: add @pytest.mark.model('name', dtype='fp32') to the test"
            )
        args = list(marker.args)
        kwargs = _marker_kwargs(request.node, "model", ("name", "dtype", "quant", "partitioner"))
        name = kwargs.pop("name", None) or (args.pop(0) if args else None)
        if not name or args:
            raise UsageError(
                f"@pytest.mark.model{tuple(marker.args)!r} is malformed: use @pytest.mark.model('name', dtype=...)"
            )
        recipe = Recipe(**kwargs)
        with progress.exporting(request.config, str(name), recipe.label) as step:
            return step.ended(_session(request).export(str(name), recipe))


@pytest.fixture
def export_pte(request: pytest.FixtureRequest) -> Callable[..., ExportedModel]:
    """Factory: ``export_pte(name, dtype='fp32', quant=None, partitioner='xnnpack')`` -> ExportedModel.

    For tests that compare several recipes of one model (fp32 vs int8, XNNPACK vs portable).
    """

    def export_pte(name: str, dtype: str = "fp32", quant: str | None = None,
                   partitioner: str = "xnnpack") -> ExportedModel:
        with _as_test_failure(request):
            recipe = Recipe(dtype, quant, partitioner)
            with progress.exporting(request.config, name, recipe.label) as step:
                return step.ended(_session(request).export(name, recipe))

    return export_pte


@pytest.fixture
def runner(request: pytest.FixtureRequest) -> Callable[..., Runner]:
    """Factory: ``runner(sme2=None, threads=, runs=, warmup=, timeout=)`` -> Runner for this test.

    ``sme2=True``/``False`` asks for SME2 on/off; ``None`` takes whatever the
    target has. A request the target cannot honour skips the test with the
    reason (naming the CPU and where SME2 can be had). Defaults come from
    @pytest.mark.perf, then --sme2-* options, then ini settings.
    """
    session = _session(request)
    with _as_test_failure(request):
        perf = _marker_kwargs(request.node, "perf", ("runs", "warmup", "threads", "timeout", "max_rounds"))
        if request.node.get_closest_marker("latency") is not None and session.target.info.emulated:
            from .targets.base import EMULATED_TIMING

            pytest.skip(f"{EMULATED_TIMING}: this @pytest.mark.latency test only runs on hardware targets")
        test_dir = session.test_dir(request.node.nodeid)
    calls = [0]  # one count of runs per test, so the run folders of all its runners are numbered in call order

    def make_runner(sme2: bool | None = None, *, threads: int | None = None, runs: int | None = None,
                    warmup: int | None = None, timeout: float | None = None) -> Runner:
        s = session.settings

        def pick(value: Any, key: str, default: Any) -> Any:
            return value if value is not None else perf.get(key, default)

        with _as_test_failure(request):
            default_runs, default_warmup = session.default_runs()
            spec = RunSpec(
                sme2=sme2,
                threads=pick(threads, "threads", s.threads),
                runs=pick(runs, "runs", default_runs),
                warmup=pick(warmup, "warmup", default_warmup),
                timeout_s=pick(timeout, "timeout", s.timeout_s),
                max_rounds=perf.get("max_rounds", s.max_rounds),
                processes=s.processes,
                timeout_source=(f"runner(timeout={timeout!r})" if timeout is not None else
                                f"@pytest.mark.perf(timeout={perf['timeout']!r})" if "timeout" in perf else
                                setting_source(request.config, "timeout")),
            )
            reason = session.target.unsupported(sme2)
        if reason:
            pytest.skip(reason)
        return Runner(session, spec, test_dir, request.node.nodeid, calls)

    return make_runner


@pytest.fixture
def etdump_profile(request: pytest.FixtureRequest) -> Callable[[Any, Runner], Profile]:
    """Function: ``etdump_profile(pte, runner)`` -> Profile of the runner's timed runs.

    Runs warmup + timed iterations with ETDump on, keeps every artifact in the
    session's artifacts folder and attaches the profile to this test's report
    (pytest-html section, terminal section, ``sme2_profiles`` user property).
    """
    profiles = request.node.stash.setdefault(_PROFILES_KEY, [])

    def etdump_profile(pte: Any, runner: Runner) -> Profile:
        with _as_test_failure(request):
            require_program(pte)
            if not isinstance(runner, Runner):
                raise UsageError(f"etdump_profile() needs a runner from the runner fixture, got {type(runner).__name__}")
            with progress.running(request.config, runner, pte):
                profile = runner.profile(pte)
        profiles.append(profile)
        return profile

    return etdump_profile


@pytest.fixture
def compare_variants(request: pytest.FixtureRequest) -> Callable[..., tuple[Profile, Profile]]:
    """Function: ``compare_variants(pte, runner_a, runner_b, rounds=4)`` -> (profile_a, profile_b).

    For speedup assertions between two variants (SME2 on/off, threads, recipes):
    runs A, B, A, B... in ``rounds`` chunks and merges each variant's chunks into
    one Profile, so drift of a shared machine hits both variants alike. Both
    profiles are attached to the test like etdump_profile's.
    """
    profiles = request.node.stash.setdefault(_PROFILES_KEY, [])

    def compare_variants(pte: Any, runner_a: Runner, runner_b: Runner, rounds: int = 4) -> tuple[Profile, Profile]:
        from .runner import alternate

        with _as_test_failure(request):
            require_program(pte)
            for name, value in (("runner_a", runner_a), ("runner_b", runner_b)):
                if not isinstance(value, Runner):
                    raise UsageError(f"compare_variants() needs {name} from the runner fixture, got {type(value).__name__}")
            pair = alternate(pte, runner_a, runner_b, rounds)
        profiles.extend(pair)
        return pair

    return compare_variants


@pytest.fixture(scope="session")
def sme2_session(request: pytest.FixtureRequest) -> Sme2Session:
    """The pytest-sme2 session: settings, model registry, export cache and target."""
    return request.config.stash[_SESSION_KEY]
