"""pytest hooks and fixtures of pytest-sme2. Wiring only: the work is done elsewhere.

Precedence of run settings: runner(...) arguments > @pytest.mark.perf(...) >
command-line options > [tool.pytest.ini_options] > built-in defaults.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import pytest

from pytest_sme2.errors import EmulatedTimingError, Sme2DeprecationWarning, Sme2Error, UsageError
from pytest_sme2.run.targets import registry

try:  # the option table holds the registered targets' options: read the registration first
    registry.target_classes()
except Sme2Error as exc:  # it cannot be read (an install older than the checkout): one usage error, no traceback
    raise pytest.UsageError(str(exc)) from None

from pytest_sme2.evidence.kernel_sampling import SamplingSettings  # noqa: E402
from pytest_sme2.export.export import ExportedModel, Recipe  # noqa: E402
from pytest_sme2.measure.runner import Runner, require_program  # noqa: E402
from pytest_sme2.measure.session import Settings, Sme2Session, session_folder_name  # noqa: E402

if TYPE_CHECKING:  # what the fixtures return; imported where they run
    from pytest_sme2.measure.llm import LlmProfile
    from pytest_sme2.measure.thread_scaling import ThreadScaling
from pytest_sme2.plugin import options, progress, replica_count, third_party_noise  # noqa: E402
from pytest_sme2.profile.profile import Profile  # noqa: E402
from pytest_sme2.run.targets import RunSpec, TargetSettings, check_choice, target_options  # noqa: E402
from pytest_sme2.system import git_ignored, supervised, writable_folders  # noqa: E402
from pytest_sme2.system.plain_text import no_workflow_commands  # noqa: E402
from pytest_sme2.system.safe_files import write_file  # noqa: E402

# Hook modules that extend this one (baselines and verdicts; reports and session outputs; the .sme2/ bound).
# Each reads a test's profiles through profiles_of(item) and the session through session_of(config).
pytest_plugins = (
    "pytest_sme2.plugin.baseline_hooks",
    "pytest_sme2.plugin.report_hooks",
    "pytest_sme2.plugin.prune_hooks",
)

_SESSION_KEY = pytest.StashKey[Sme2Session]()
_PROFILES_KEY = pytest.StashKey[list]()
# The device model of --sme2-device (a DeviceModel; None without one), read once at configure: the gate keeps
# each counted run's modelled time on it in baselines and judges it (gate/checks/modelled.py).
DEVICE_KEY = pytest.StashKey[Any]()
# The folders of the session's places that did not exist at its start (`.sme2` by default): whichever exists at
# its end was created by it, and gets a .gitignore (git_ignored). Workers create them too; the controller marks.
_NEW_FOLDERS_KEY = pytest.StashKey[list]()
# What removes the log filters of third_party_noise.install at the session's end.
_NOISE_KEY = pytest.StashKey[Callable[[], None]]()


def session_of(config: pytest.Config) -> Sme2Session | None:
    """The pytest-sme2 session of this pytest process (None before configure or when disabled)."""
    return config.stash.get(_SESSION_KEY, None)


def profiles_of(item: pytest.Item) -> list[Profile]:
    """The Profiles a test built with etdump_profile, in call order (empty if none)."""
    return item.stash.get(_PROFILES_KEY, [])


MARKERS = (
    "sme2: an SME2 performance test (select with -m sme2)",
    "model(name, dtype='fp32', quant=None, partitioner='xnnpack'): the model and export recipe used by the "
    "exported_pte fixture; dtype fp32|fp16|int8, quant static|dynamic (int8), partitioner xnnpack|none",
    "perf(runs=None, warmup=None, threads=None, timeout=None, max_rounds=None): run settings for this test's runners",
    "latency: the test asserts on time (speedups, latencies); skipped before anything runs on emulated "
    "targets, whose timing is not hardware timing",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every option and ini key of pytest-sme2, from its one table (options.py)."""
    options.register(parser.getgroup("sme2", "pytest-sme2: ExecuTorch SME2 performance tests"), parser)


def setting_source(config: pytest.Config, name: str) -> str:
    """Where a setting's value comes from, as the user wrote it (options.source)."""
    return options.source(config, name)


def setting(config: pytest.Config, name: str) -> Any:
    """A setting's checked value (options.value); a bad one is a usage error before any test. Also the
    baseline hooks' reader."""
    try:
        return options.value(config, name)
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None


def _session_dir(config: pytest.Config, root: Path) -> Path:
    """This session's folder: the time for reading, and a random part, because the time and pid are
    not unique (two containers with their own pid namespaces start in the same second as pid 1)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "sme2_session_dir" in workerinput:
        return Path(workerinput["sme2_session_dir"])
    return root / session_folder_name()


def history_path(config: pytest.Config) -> Path | None:
    """The history file of --sme2-history / ini sme2_history (relative to the rootdir), or None."""
    return options.resolve_path(config, "history")


def _device_model(config: pytest.Config, given: str) -> Any:
    """The device model --sme2-device (ini sme2_device) names: a shipped name, or a device file, whose relative
    path is from the rootdir like every path setting (a session started in a subfolder finds the ini's file).
    It keeps the value as given, which the update command a failure prints repeats."""
    from pytest_sme2.profile.device_model import is_device_path, load_device

    path = options.resolve_path(config, "device") if is_device_path(given) else None
    return replace(load_device(path if path is not None else given), given=given)


def _kernel_sampling(config: pytest.Config) -> SamplingSettings | None:
    if not setting(config, "kernel_sampling"):
        return None
    hz = setting(config, "kernel_sampling_hz")  # at most 100 kHz: perf's cpu-clock cannot fire faster usefully
    symfs = options.resolve_path(config, "symfs")
    if symfs is not None and not symfs.is_dir():
        raise pytest.UsageError(
            f"--sme2-symfs (or ini sme2_symfs) {symfs} is not a folder; point it at a folder of "
            "unstripped copies of the runtime's libraries"
        )
    return SamplingSettings(period_ns=int(round(1e9 / hz)), symfs=(symfs,) if symfs is not None else ())


def _target_options(config: pytest.Config) -> dict[str, Any]:
    """Every registered target's own settings, read and checked (a bad value is a usage error whichever target
    runs), paths made absolute; the chosen target reads its own (run/targets/registry.py)."""
    return {
        option.name: options.resolve_path(config, option.name)
        if option.kind == "path"
        else setting(config, option.name)
        for option in target_options()
    }


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_NOISE_KEY] = third_party_noise.install(config)  # before anything imports torch or torchao
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    supervised.install_signal_handlers()  # SIGTERM/SIGHUP to pytest end the runners it started
    rootdir = config.rootpath
    settings = Settings(
        target=setting(config, "target"),
        runs=setting(config, "runs"),
        warmup=setting(config, "warmup"),
        max_rounds=setting(config, "max_rounds"),
        # A baseline update measures each variant in several processes (RunSpec.replicas); checks in
        # --sme2-replicas (default auto: per test, what its baseline needs), which the update's quality
        # check assumes of later checks.
        replicas=setting(config, "baseline_replicas" if setting(config, "update_baselines") else "replicas"),
        check_replicas=setting(config, "replicas"),
        threads=setting(config, "threads"),
        timeout_s=setting(config, "timeout"),
        cache_dir=options.required_path(config, "cache_dir"),
        session_dir=_session_dir(config, options.required_path(config, "artifacts_dir")),
        runner=options.resolve_path(config, "runner"),
        runner_on=options.resolve_path(config, "runner_on"),
        runner_off=options.resolve_path(config, "runner_off"),
        target_options=_target_options(config),
        latency_reference=setting(config, "latency_reference"),
        kernel_sampling=_kernel_sampling(config),
        cooldown_c=setting(config, "cooldown_temp"),
        cooldown_max_s=setting(config, "cooldown_max_wait"),
    )
    try:
        device = setting(config, "device")
        config.stash[DEVICE_KEY] = None
        if device:  # a device the reports cannot model is a usage error before any test
            config.stash[DEVICE_KEY] = _device_model(config, str(device))
        check_choice(
            settings.target,
            TargetSettings(
                settings.session_dir / "logs",
                settings.runner,
                settings.runner_on,
                settings.runner_off,
                options=settings.target_options,
            ),
        )
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    session = Sme2Session(settings)
    session.registry.root = rootdir  # where an unimportable model package is looked for (its error names the fix)
    for note in [] if hasattr(config, "workerinput") else options.renamed_in_use(config):  # once, not per worker
        config.issue_config_time_warning(Sme2DeprecationWarning(note), stacklevel=2)  # the old spelling still works
    unknown = options.unknown_ini_keys(config)
    if unknown:
        session.registry.settings_note = (
            f". Note: pytest-sme2 has no ini setting {', '.join(unknown)}; " "its settings: docs/options.md"
        )
    try:
        for directory in setting(config, "model_dirs"):
            session.registry.register_dir(Path(directory))
        for line in setting(config, "models"):
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
        supervised.end_all()  # nothing a target started outlives the session, whatever stopped it
        _keep_new_folders_out_of_git(config)
        config.stash.get(_NOISE_KEY, lambda: None)()


def _keep_new_folders_out_of_git(config: pytest.Config) -> None:
    """After everything this session writes (summaries, reports): the folders it created get their .gitignore."""
    for folder in config.stash.get(_NEW_FOLDERS_KEY, []):
        try:
            git_ignored.keep_out_of_git(folder)
        except OSError as exc:  # the session's results stand; only git would show the folder
            sys.stderr.write(
                f"pytest-sme2: could not write {folder / git_ignored.GITIGNORE} ({exc}); add "
                f"{folder.name}/ to your repository's .gitignore\n"
            )


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or getattr(config, "workerinput", None):
        return []
    from pytest_sme2.run.cpu import host_cpu

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
def failures_of_test(
    session: Sme2Session, nodeid: str, places: tuple[writable_folders.Place, ...] = ()
) -> Iterator[None]:
    """An Sme2Error fails (or errors, in setup) this test with its message, not a traceback; so does an
    OSError while writing into one of the session's folders or ``places`` (a full disk), as a StorageError
    naming the folder and the setting that moves it. An error's long detail (an export's traceback and
    torch log) goes into the test's artifacts folder, and the message says where."""
    try:
        yield
    except EmulatedTimingError:  # a skip of the rest of the test body, not a failure (baseline_hooks)
        raise
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
        raise pytest.fail.Exception(no_workflow_commands(message), pytrace=False) from None
    except OSError as exc:
        error = writable_folders.explain(exc, (*places, *session.places))
        if error is None:
            raise
        raise pytest.fail.Exception(no_workflow_commands(f"StorageError: {error}"), pytrace=False) from None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Folders that cannot be written stop the session before the first test, with one error each names."""
    sme2 = session.config.stash.get(_SESSION_KEY, None)
    if sme2 is None or getattr(session.config, "workerinput", None):
        return
    history_file = history_path(session.config)
    try:
        for place in sme2.session_places:
            writable_folders.check_writable(place)
        if history_file is not None:
            from pytest_sme2.gate.history import check_path

            check_path(history_file)
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    committed = [options.required_path(session.config, "baselines_dir")]  # never under a `*` of ours
    new = {git_ignored.first_created(place.root, committed) for place in sme2.session_places}
    session.config.stash[_NEW_FOLDERS_KEY] = sorted(folder for folder in new if folder is not None)


def _marker_kwargs(item: pytest.Item, name: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    marker = item.get_closest_marker(name)
    if marker is None:
        return {}
    unknown = sorted(set(marker.kwargs) - set(allowed))
    if unknown:
        raise UsageError(
            f"@pytest.mark.{name} got unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
        )
    return dict(marker.kwargs)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A @pytest.mark.latency test on the emulated target is skipped before any fixture runs: no export, no
    emulated run, and no export error of a model it would never time (README: "skipped before anything runs").
    A plain hook: pytest's own skip and skipif marks (a tryfirst hook) are applied before it, and it runs before
    pytest's fixture setup (registered earlier)."""
    session = session_of(item.config)
    if session is None or item.get_closest_marker("latency") is None:
        return
    try:
        emulated = session.target.info.emulated
    except Sme2Error:  # a target that cannot be set up: the fixtures report it, as a test error
        return
    if emulated:
        from pytest_sme2.run.targets.base import EMULATED_TIMING

        raise pytest.skip.Exception(
            f"{EMULATED_TIMING}: this @pytest.mark.latency test only runs on hardware " "targets",
            _use_item_location=True,
        )


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
            raise UsageError("exported_pte needs a model: add @pytest.mark.model('name', dtype='fp32') to the test")
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

    def export_pte(
        name: str, dtype: str = "fp32", quant: str | None = None, partitioner: str = "xnnpack"
    ) -> ExportedModel:
        with _as_test_failure(request):
            recipe = Recipe(dtype, quant, partitioner)
            with progress.exporting(request.config, name, recipe.label) as step:
                return step.ended(_session(request).export(name, recipe))

    return export_pte


@pytest.fixture
def export_llm(request: pytest.FixtureRequest) -> Callable[..., ExportedModel]:
    """Factory: ``export_llm(config, name=None)`` -> ExportedModel of ExecuTorch's own LLM export.

    ``config``: ExecuTorch's ``LlmConfig``, or a mapping of its dotted fields set on its defaults
    (``{"base.params": "params.json", "model.use_kv_cache": True, "backend.xnnpack.enabled": True}``). The program
    is what ``export_llama`` ships, with its ETRecord, cached by config and file content (export/llm_export.py);
    ``name`` labels it in baselines (default: the params file's stem). Profile it with ``llm_profile``.
    """

    def export_llm(config: Any, name: str | None = None) -> ExportedModel:
        from pytest_sme2.export.llm_export import export_llm as export
        from pytest_sme2.export.llm_export import llm_config, recipe_of

        with _as_test_failure(request):
            session = _session(request)
            made = llm_config(config)
            label = name or "llm"
            with progress.exporting(request.config, label, f"export_llama {recipe_of(made).label}") as step:
                return step.ended(export(made, session.settings.cache_dir, name))

    return export_llm


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
        perf = _marker_kwargs(request.node, "perf", options.marker_arguments("perf"))
        test_dir = session.test_dir(request.node.nodeid)
    calls = [0]  # one count of runs per test, so the run folders of all its runners are numbered in call order

    def make_runner(
        sme2: bool | None = None,
        *,
        threads: int | None = None,
        runs: int | None = None,
        warmup: int | None = None,
        timeout: float | None = None,
        **unknown: Any,
    ) -> Runner:
        with _as_test_failure(request):
            if unknown:  # a typo (runner(sme=True)) names what runner() takes, as the markers' checks do
                raise UsageError(
                    f"runner() got {', '.join(f'{k}=' for k in unknown)}, which it does not take; "
                    f"it takes sme2=, threads=, runs=, warmup= and timeout="
                )
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
                replicas=replica_count.replicas_for(request.node, s.replicas),
                timeout_source=(
                    f"runner(timeout={timeout!r})"
                    if timeout is not None
                    else f"@pytest.mark.perf(timeout={perf['timeout']!r})"
                    if "timeout" in perf
                    else setting_source(request.config, "timeout")
                ),
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
                raise UsageError(
                    f"etdump_profile() needs a runner from the runner fixture, got {type(runner).__name__}"
                )
            with progress.running(request.config, runner, pte) as step:
                profile = step.ended(runner.profile(pte))
        profiles.append(profile)
        return profile

    return etdump_profile


@pytest.fixture
def llm_profile(request: pytest.FixtureRequest) -> Callable[..., LlmProfile]:
    """Function: ``llm_profile(pte, runner, prefill=P, decode=D, prefill_method='forward', decode_method='forward',
    prefill_chunk=None)`` -> LlmProfile with ``.prefill`` and ``.decode`` Profiles and their per-token figures;
    ``prefill_chunk``: tokens per prefill call for a program with static shapes (the prompt then in chunks).

    ``pte``: an exported model (its example tokens make the prompt), or a .pte path, such as the output of
    ExecuTorch's own LLM export (tokens 1, 2, 3 ..., int64, as its llama runner passes them).
    A language model as ExecuTorch's llama runner calls it (``method(tokens, input_pos)``): the prefill of P tokens,
    then D decode steps at successive positions over the KV cache the prefill filled, in one runner process.
    Each phase is attached to the test like etdump_profile's profiles and gated against its own baseline (the
    phase is in the variant's label). Per token: tokens per second on hardware, instructions per token on the
    emulated target (measure/llm.py).
    """
    profiles = request.node.stash.setdefault(_PROFILES_KEY, [])

    def llm_profile(
        pte: Any,
        runner: Runner,
        prefill: int = 8,
        decode: int = 8,
        prefill_method: str = "forward",
        decode_method: str = "forward",
        prefill_chunk: int | None = None,
    ) -> LlmProfile:
        from pytest_sme2.measure.llm import LlmSequence, example_calls, llm_phases

        with _as_test_failure(request):
            require_program(pte)
            if not isinstance(runner, Runner):
                raise UsageError(f"llm_profile() needs a runner from the runner fixture, got {type(runner).__name__}")
            sequence = LlmSequence(prefill, decode, prefill_method, decode_method, prefill_chunk)
            example = example_calls(pte)
            with progress.running(request.config, runner, pte) as step:
                phases = step.ended(llm_phases(pte, runner, sequence, example))
        profiles.extend(phases.profiles)
        return phases

    return llm_profile


@pytest.fixture
def compare_variants(request: pytest.FixtureRequest) -> Callable[..., tuple[Profile, Profile]]:
    """Function: ``compare_variants(pte, runner_a, runner_b, rounds=4)`` -> (profile_a, profile_b).

    For speedup assertions between two variants (SME2 on/off, threads, recipes):
    runs A, B, A, B... in ``rounds`` chunks and merges each variant's chunks into
    one Profile, so drift of a shared machine hits both variants alike. Both
    profiles are attached to the test like etdump_profile's. A target whose runs do
    not disturb each other (the emulated one: counted instructions) makes both sides
    at once instead, a core each (``Target.side_by_side``; under xdist the cores are
    shared out among the workers).
    """
    profiles = request.node.stash.setdefault(_PROFILES_KEY, [])

    def compare_variants(pte: Any, runner_a: Runner, runner_b: Runner, rounds: int = 4) -> tuple[Profile, Profile]:
        from pytest_sme2.measure.runner import alternate

        with _as_test_failure(request):
            require_program(pte)
            for name, value in (("runner_a", runner_a), ("runner_b", runner_b)):
                if not isinstance(value, Runner):
                    raise UsageError(
                        f"compare_variants() needs {name} from the runner fixture, got {type(value).__name__}"
                    )
            with progress.comparing(request.config, runner_a, runner_b, pte) as step:
                pair = step.ended(alternate(pte, runner_a, runner_b, rounds))
        profiles.extend(pair)
        return pair

    return compare_variants


@pytest.fixture
def sme2_thread_scaling(request: pytest.FixtureRequest, runner: Callable[..., Runner]) -> Callable[..., ThreadScaling]:
    """Function: ``sme2_thread_scaling(pte, threads=(1, 2, 4), rounds=4)`` -> ThreadScaling.

    SME2 on against off at each thread count, on and off alternating in chunks at each (as compare_variants),
    with the speedup per thread count and per category (``.table()``, ``.slower()``, ``str()``); every profile is
    attached to the test, so the reports show each thread count's comparison and a table of speedup by threads.
    A target that cannot run SME2 on or off skips the test; the emulated target, whose time is not time, too.
    """
    profiles = request.node.stash.setdefault(_PROFILES_KEY, [])

    def sme2_thread_scaling(pte: Any, threads: Sequence[int] = (1, 2, 4), rounds: int = 4) -> ThreadScaling:
        from pytest_sme2.measure.thread_scaling import thread_scaling
        from pytest_sme2.run.targets.base import EMULATED_TIMING

        with _as_test_failure(request):
            require_program(pte)
            if _session(request).target.info.emulated:
                pytest.skip(
                    f"{EMULATED_TIMING}: SME2 speedup by threads needs measured time (the local target on "
                    "an SME2 CPU, or a phone over adb)"
                )
            scaling, made = thread_scaling(pte, runner, threads, rounds)
        profiles.extend(made)
        return scaling

    return sme2_thread_scaling


@pytest.fixture(scope="session")
def sme2_session(request: pytest.FixtureRequest) -> Sme2Session:
    """The pytest-sme2 session: settings, model registry, export cache and target."""
    return request.config.stash[_SESSION_KEY]
