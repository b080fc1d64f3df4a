"""The one table of pytest-sme2's settings: option, ini key, type, default, marker argument, help, validation.

pytest's options and ini keys are registered from it (``register``), values are read and checked through
it (``value``, ``source``), and docs/options.md's tables are rendered from it (``markdown_table``; a test
keeps the page equal to the rendering), so a default is written once and cannot drift between the code,
``pytest --help`` and the docs. The general settings are declared here; each target declares its own in its
module (``Option`` is system/option.py's), and the target registry contributes them to this table, after
``--sme2-target``. Nothing here imports pytest: the parser and config are passed in.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from pytest_sme2.errors import Sme2Error, UsageError
from pytest_sme2.evidence.perf_samples import DEFAULT_PERIOD_NS
from pytest_sme2.gate.gate import MISSING_POLICIES
from pytest_sme2.gate.quality import BASELINE_REPLICAS, MIN_BASELINE_REPLICAS
from pytest_sme2.gate.verdict import METRICS, SESSION_LATENCY, SESSION_SHARES, Tolerances
from pytest_sme2.measure.prune import DEFAULT_KEEP_SESSIONS, DEFAULT_MAX_SIZE, parse_size
from pytest_sme2.run.targets import RunSpec, check_target_name, target_class, target_names, target_options
from pytest_sme2.run.targets.base import (
    AUTO_REPLICAS,
    DEFAULT_TIMEOUT_S,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    THREADS_WHY,
    TIMEOUT_RANGE,
)
from pytest_sme2.run.targets.emulated import EmulatedTarget
from pytest_sme2.system.deprecated import renamed_setting
from pytest_sme2.system.option import GATE, REPORT, RUN, Option

__all__ = [
    "GATE",
    "REPORT",
    "RUN",
    "Option",
    "OPTIONS",
    "BY_NAME",
    "TOLERANCE_KEYS",
    "register",
    "value",
    "source",
    "resolve_path",
    "unknown_ini_keys",
    "renamed_in_use",
    "marker_arguments",
    "markdown_table",
    "target_table",
]


def _target_option(value: str) -> str:
    """argparse type of --sme2-target: a usage error that names the choices for anything else."""
    try:
        return check_target_name(value)
    except Sme2Error as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_TOLERANCE_TEXT = {
    "latency": ("baseline_tolerance", "relative latency change allowed (0.10 = 10% slower)", "(latency, relative)"),
    "alpha": (
        "baseline_alpha",
        "significance level of every time-based check (t-test between processes; 0.001)",
        "(t-test between processes, every time-based check)",
    ),
    "min_effect_ms": (
        "baseline_min_effect_ms",
        "smallest change in ms per run that can fail a test: of latency, and of a share (its points "
        "x the baseline's median run) (0.02; for tiny models)",
        "(smallest latency change, or share points x the run, that fails)",
    ),
    "shares": ("baseline_share_tolerance", "category share change allowed, in share points (0.05)", "(share points)"),
    "coverage": (
        "baseline_coverage_tolerance",
        "delegation coverage drop allowed, in share points (0.02)",
        "(share points)",
    ),
    "sme_path": (
        "baseline_sme_path_tolerance",
        "SME path share drop allowed, in share points (0.05)",
        "(share points)",
    ),
    "instructions": (
        "baseline_instruction_tolerance",
        "relative instruction-count change allowed (0.005)",
        "(relative)",
    ),
    "op_instructions": (
        "baseline_op_instruction_tolerance",
        "relative change of one operator's counted instructions allowed (emulated target, 0.02)",
        "(relative, one operator's counted instructions; emulated target)",
    ),
    "modelled": (
        "baseline_modelled_tolerance",
        "relative change of modelled device time allowed (emulated target with --sme2-device, 0.02)",
        "(relative, modelled device time end to end; emulated target with a device model)",
    ),
    "memory": (
        "baseline_memory_tolerance",
        "relative growth of the program's planned memory allowed (0)",
        "(relative growth of planned memory)",
    ),
    "load": (
        "baseline_load_tolerance",
        "relative change of Program::load_method allowed (0.40; counted instructions "
        "on the emulated target; on the local and adb targets per runner process, relative to the reference "
        "program's load)",
        "(relative, Program::load_method: counted instructions, or per process relative to the reference "
        "program's load)",
    ),
    "init": (
        "baseline_init_tolerance",
        "relative change of Method::init allowed, where XNNPACK packs weights (0.40; "
        "counted instructions on the emulated target; on the local and adb targets per runner process, "
        "relative to the reference program's load)",
        "(relative, Method::init: counted instructions, or per process relative to the reference program's " "load)",
    ),
    "peak_rss": (
        "baseline_peak_rss_tolerance",
        "relative growth of the runner's peak resident memory per run allowed " "(0.10; local and adb targets)",
        "(relative, the runner's peak resident memory; local and adb)",
    ),
    "session_latency": (
        "baseline_session_latency",
        "how far an unchanged program's relative latency moves between sessions beyond its processes "
        f"(sd, relative; {SESSION_LATENCY:g}), allowed for in every latency t-test (hardware targets)",
        "(sd between sessions, relative; not a tolerance: what the t-test allows for)",
    ),
    "session_shares": (
        "baseline_session_shares",
        "how far an unchanged program's shares, coverage and SME path share move between sessions beyond "
        f"its processes (sd, share points; {SESSION_SHARES:g}), allowed for in their t-tests (hardware targets)",
        "(sd between sessions, share points; not a tolerance: what the t-test allows for)",
    ),
}
# Ini name of each tolerance, by its Tolerances field (and @pytest.mark.baseline argument).
TOLERANCE_KEYS = {field: ini for field, (ini, _, _) in _TOLERANCE_TEXT.items()}

OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ running
    Option(
        "target",
        f"where programs run: {', '.join(target_names())} (default: ini sme2_target, else auto)",
        RUN,
        default="auto",
        parse=_target_option,
        ini_help="default --sme2-target",
        doc_default="`auto` (on a CPU with SME2 the native runner, `local`; else emulated when set up, else host); "
        "or a target of [docs/targets.md](targets.md), by name",
    ),
    *target_options(),  # each registered target's own (run/targets/registry.py)
    Option(
        "cooldown_temp",
        "adb and local targets: before each chunk of timed runs, wait until every thermal zone "
        "is at or below this many degrees C and Android's thermal status is below moderate",
        RUN,
        kind="float",
        low=0,
        what="degrees C >= 0",
        doc_default="no wait (device state is still recorded, and throttled chunks are left out)",
    ),
    Option(
        "cooldown_max_wait",
        "adb and local targets: the longest cooldown wait in seconds; a device still hot "
        "then runs, and its throttled chunks are left out",
        RUN,
        kind="float",
        default=300.0,
        low=0,
        what="a number of seconds >= 0",
        doc_default="300 s",
    ),
    Option(
        "runner",
        "local target: native runner executable; SME2 off by masking (default: the built native " "runner)",
        RUN,
        kind="path",
        ini_help="local target: native runner executable (SME2 off by masking)",
        doc_default="the built native runner (local target)",
    ),
    Option(
        "runner_on",
        "local target: native runner build used for SME2 on",
        RUN,
        kind="path",
        doc_default="none (local target, two builds)",
    ),
    Option(
        "runner_off",
        "local target: native runner build used for SME2 off",
        RUN,
        kind="path",
        doc_default="none (local target, two builds)",
    ),
    Option(
        "runs",
        f"timed runs per variant (default {RunSpec.runs}; {EmulatedTarget.default_runs} on the emulated " "target)",
        RUN,
        kind="int",
        low=1,
        what="a whole number >= 1",
        marker="perf(runs=...)",
        ini_help="default timed runs per variant (empty: the target's default)",
        doc_default=f"{RunSpec.runs} (emulated: {EmulatedTarget.default_runs})",
    ),
    Option(
        "max_rounds",
        "when the machine disturbs more than half of a variant's runs, run them again, up to this "
        f"many rounds in all (default {RunSpec.max_rounds}; 1 never repeats)",
        RUN,
        kind="int",
        default=RunSpec.max_rounds,
        low=1,
        what="a whole number >= 1",
        marker="perf(max_rounds=...)",
        ini_help="rounds of runs at most when the machine disturbs more than half of them",
        doc_default=f"{RunSpec.max_rounds} (more rounds of runs when over half are disturbed; 1 = never)",
    ),
    Option(
        "warmup",
        f"warmup runs per variant (default {RunSpec.warmup}; {EmulatedTarget.default_warmup} on the "
        "emulated target)",
        RUN,
        kind="int",
        low=0,
        what="a whole number >= 0",
        marker="perf(warmup=...)",
        ini_help="default warmup runs per variant (empty: the target's default)",
        doc_default=f"{RunSpec.warmup} (emulated: {EmulatedTarget.default_warmup})",
    ),
    Option(
        "threads",
        "runtime threads (default 1)",
        RUN,
        kind="int",
        default=1,
        low=1,
        high=MAX_THREADS,
        what=f"a whole number from 1 to {MAX_THREADS} ({THREADS_WHY})",
        marker="perf(threads=...)",
        ini_help="default runtime threads",
        doc_default=f"1 (at most {MAX_THREADS})",
    ),
    Option(
        "timeout",
        f"seconds before a run is killed (default {DEFAULT_TIMEOUT_S:g})",
        RUN,
        kind="float",
        default=DEFAULT_TIMEOUT_S,
        low=0,
        strict=True,
        high=MAX_TIMEOUT_S,
        what=TIMEOUT_RANGE,
        marker="perf(timeout=...)",
        ini_help="default run timeout in seconds",
        doc_default=f"{DEFAULT_TIMEOUT_S:g} s (at most {MAX_TIMEOUT_S:g} s, a day); a run's processes also end "
        "if pytest is killed, even with SIGKILL",
    ),
    Option(
        "kernel_sampling",
        "sample which kernels took each operator's time, in one more runner process per profile under "
        "Linux perf (local target) or simpleperf (adb target); default: ini sme2_kernel_sampling, off",
        RUN,
        kind="bool",
        default=False,
        switch="on/off",
        ini_help="sample which kernels took each operator's time (one more runner process per profile)",
        doc_default="off; `on` samples kernels in one more runner process per profile (local and adb targets)",
    ),
    Option(
        "kernel_sampling_hz",
        f"kernel sampling: samples per second of CPU time (default {1e9 / DEFAULT_PERIOD_NS:g})",
        RUN,
        kind="float",
        default=1e9 / DEFAULT_PERIOD_NS,
        low=0,
        strict=True,
        high=100_000,
        what="a number of samples per second > 0 (at most 100000)",
        ini_help="kernel sampling: samples per second of CPU time",
        doc_default=f"{1e9 / DEFAULT_PERIOD_NS:g} (samples per second of CPU time)",
    ),
    Option(
        "symfs",
        "kernel sampling: folder of unstripped copies of the runtime's libraries (by mapped path or "
        "file name), to name kernels the shipped libraries leave unnamed",
        RUN,
        kind="path",
        ini_help="kernel sampling: folder of unstripped library copies",
        doc_default="none (folder of unstripped library copies that name kernels)",
    ),
    Option(
        "history",
        "append every perf test's quantities to this JSON Lines history (pytest-sme2 history draws "
        "it and flags where they changed); default: ini sme2_history, none",
        RUN,
        kind="path",
        ini_help="JSON Lines history the gate's quantities are appended to (relative to the rootdir)",
        doc_default="none (JSON Lines file every perf test's quantities are appended to)",
    ),
    Option(
        "cache_dir",
        "export cache directory (default .sme2/cache)",
        RUN,
        kind="path",
        default=".sme2/cache",
        ini_help="export cache directory, relative to the rootdir",
        doc_default="`.sme2/cache`",
    ),
    Option(
        "artifacts_dir",
        "root of per-session artifact folders (default .sme2/artifacts)",
        RUN,
        kind="path",
        default=".sme2/artifacts",
        ini_help="artifacts root, relative to the rootdir",
        doc_default="`.sme2/artifacts`",
    ),
    Option(
        "max_size",
        "the most the export cache, result cache and session folders may hold together: at the end of each "
        "session the least recently used entries and oldest session folders beyond it are removed "
        f"(default {DEFAULT_MAX_SIZE}; e.g. 5GB, 500MB, 1.5GiB; 0: no bound; pytest-sme2 cache prune does it now)",
        RUN,
        default=DEFAULT_MAX_SIZE,
        check=parse_size,
        ini_help="most bytes the cache and session folders hold together (e.g. 10GB; 0: no bound)",
        doc_default=f"`{DEFAULT_MAX_SIZE}` (cache and session folders together; `0`: no bound; "
        "[docs/targets.md](targets.md#how-big-sme2-gets))",
    ),
    Option(
        "keep_sessions",
        f"session folders kept in the artifacts folder, the newest; older ones are removed at the end of each "
        f"session (default {DEFAULT_KEEP_SESSIONS}; 0: keep them all)",
        RUN,
        kind="int",
        default=DEFAULT_KEEP_SESSIONS,
        low=0,
        what="a whole number >= 0 (0: keep every session folder)",
        ini_help="newest session folders kept at the end of each session (0: all)",
        doc_default=f"{DEFAULT_KEEP_SESSIONS} (the newest session folders; `0`: all)",
    ),
    Option(
        "model_dirs",
        "directories whose *.py files are models (name = file stem)",
        RUN,
        kind="paths",
        option=False,
        doc_default="none (this repo: `models`)",
    ),
    Option(
        "models",
        "extra models, one 'name = module.path' or 'name = path/to/file.py' per line",
        RUN,
        kind="linelist",
        option=False,
        doc_default="none",
    ),
    # ------------------------------------------------------- baselines and the gate
    Option(
        "update_baselines",
        "write or refresh the stored baselines of the tests that run (like --snapshot-update)",
        GATE,
        kind="flag",
        ini=False,
        doc_default="off: compare",
    ),
    Option(
        "metric",
        "what the regression gate compares: latency (default; tolerance plus significance) or "
        "instructions (callgrind instructions per inference; deterministic, for shared CI)",
        GATE,
        default="latency",
        choices=METRICS,
        ini_help="default --sme2-metric: latency | instructions",
        doc_default="`latency`; or `instructions`",
    ),
    Option(
        "latency_reference",
        "run pytest-sme2's reference program before each timed run so latency is gated "
        "relative to it, cancelling drift of the machine (default: ini sme2_latency_reference, on); off for a "
        "runner that is not pytest-sme2's",
        GATE,
        kind="bool",
        default=True,
        switch="on/off",
        ini_help="run the reference program before each timed run (relative latency gate)",
        doc_default="`on` (`true`): gate on latency relative to the reference program",
    ),
    Option(
        "baselines_dir",
        "where baselines live (default: ini sme2_baselines_dir)",
        GATE,
        kind="path",
        default="baselines",
        ini_help="baselines folder, relative to the rootdir",
        doc_default="`baselines` (relative to the rootdir)",
    ),
    Option(
        "baselines",
        "turn the baseline gate off for this run",
        GATE,
        kind="bool",
        default=True,
        switch="--sme2-no-baselines",
        ini_help="check every profile against its stored baseline",
        doc_default="gate on (`true`)",
    ),
    Option(
        "baseline_missing",
        "when a test has no baseline: fail | skip | warn",
        GATE,
        default="fail",
        choices=MISSING_POLICIES,
        option=False,
        marker="baseline(missing=...)",
        doc_default="`fail`; or `skip`, `warn`",
    ),
    *(
        Option(
            ini,
            text,
            GATE,
            kind="float",
            default=getattr(Tolerances(), field),
            option=False,
            marker=f"baseline({field}=...)",
            doc_default=f"{getattr(Tolerances(), field)} {doc}",
        )
        for field, (ini, text, doc) in _TOLERANCE_TEXT.items()
    ),
    Option(
        "baseline_replicas",
        "with --sme2-update-baselines: measure each variant this many times (replicas), each begun in a "
        "fresh process, so the gate knows how far its quantities move between replicas (default "
        f"{BASELINE_REPLICAS}; at least {MIN_BASELINE_REPLICAS}; not used on the emulated target, whose counts "
        "repeat)",
        GATE,
        kind="int",
        default=BASELINE_REPLICAS,
        low=MIN_BASELINE_REPLICAS,
        what=f"a whole number >= {MIN_BASELINE_REPLICAS}",
        ini_help="replicas a baseline update measures each variant in",
        doc_default=f"{BASELINE_REPLICAS} (replicas an update measures each variant in, each in a fresh process; "
        f"at least {MIN_BASELINE_REPLICAS})",
        renamed_from=("baseline_processes",),
    ),
    Option(
        "replicas",
        "measure each variant this many times (replicas), each begun in a fresh process, and judge their "
        "medians against the baseline's replicas (default auto: each test as many as its baseline's quality check "
        "found it needs to see 1.5 tolerances, at most 10; one on the emulated target, whose counts repeat; "
        "a number: every test that many, and baselines are refused that such checks could not judge)",
        GATE,
        kind="int",
        default=AUTO_REPLICAS,
        low=1,
        specials=(AUTO_REPLICAS,),
        what="a whole number >= 1, or auto",
        ini_help="replicas each variant is measured in (checks; or auto)",
        doc_default="`auto` (per test, the replicas its baseline needs to see 1.5 tolerances, at most 10; 1 on "
        "the emulated target); or a number for every test",
        renamed_from=("processes",),
    ),
    Option(
        "accept_noisy_baselines",
        "with --sme2-update-baselines: write baselines even when their runs fail the "
        "quality check (too many disturbed runs, a wide or unstable median); the file records that",
        GATE,
        kind="flag",
        ini=False,
        doc_default="off: refuse records that fail the quality check",
    ),
    Option(
        "benchmark_emulated",
        "also record emulated-target profiles as pytest-benchmark results (their time is "
        "the emulator's; off by default so benchmark tables show hardware time only)",
        GATE,
        kind="flag",
        ini=False,
        doc_default="off: emulated profiles are not pytest-benchmark results",
    ),
    Option(
        "instruction_inferences",
        "inferences per callgrind run of the instruction metric",
        GATE,
        kind="int",
        default=10,
        option=False,
        low=1,
        what="a whole number >= 1",
        doc_default="10 (N of the instruction metric)",
    ),
    # ------------------------------------------------------------------ reports
    Option(
        "device",
        "emulated target: beside counted instructions, show modelled time on this device model "
        "(a shipped name such as apple-m4, or a .toml device file; docs/device_model.md); a model, not a "
        "measurement, and not yet validated against hardware",
        REPORT,
        ini_help="emulated target: device model whose modelled time the reports show (apple-m4, or a path)",
        doc_default="none: reports show counted instructions only (the device models are not yet validated)",
    ),
    Option(
        "session_report",
        "write the session's report.html with charts (also written with --html; otherwise "
        "draw it later with `pytest-sme2 report SESSION_DIR`)",
        REPORT,
        kind="bool",
        default=False,
        switch="--sme2-session-report",
        ini_help="write the session's report.html with charts at the end of every session",
        doc_default="off (`--html` draws it too; else `pytest-sme2 report SESSION_DIR` later)",
    ),
    Option(
        "kit_timeline_runs",
        "the kit-layout timeline CSV (*_all_runs_timeline.csv, one row per event per run) holds the first N timed "
        "runs; 0 holds every run. Its ops_stats CSV and the profile always use every run",
        REPORT,
        kind="int",
        default=10_000,
        low=0,
        what="a whole number >= 0",
        doc_default="10000 (a 150,000-run session's CSV was 307 MB; 0 = every run)",
    ),
    Option(
        "timeline",
        "write each test's timeline.json (Chrome trace-event JSON: open it in ui.perfetto.dev or "
        "chrome://tracing; docs/timeline.md): runs, delegate calls and operators, SME2 on and off side by side; "
        "on the emulated target its axis is counted instructions",
        REPORT,
        kind="bool",
        default=False,
        switch="--sme2-timeline",
        ini_help="write each test's timeline.json (Perfetto / chrome://tracing) in every session",
        doc_default="off (on whenever an HTML report is drawn: `--html` or `--sme2-session-report`)",
    ),
)

BY_NAME = {option.name: option for option in OPTIONS}


def register(group: Any, parser: Any) -> None:
    """Every option into pytest's ``sme2`` group and every ini key into its parser, from the table; a renamed
    setting's earlier spellings too (``Option.renamed``), so what users typed keeps working."""
    for option in (o for named in OPTIONS for o in (named, *named.renamed)):
        if option.option:
            if option.kind == "flag" or (option.switch or "").startswith("--"):
                group.addoption(option.flag_text, action="store_true", default=False, help=option.help)
            elif option.switch == "on/off":
                group.addoption(option.flag_text, default=None, choices=("on", "off"), help=option.help)
            else:
                kind = {"int": int, "float": float}.get(option.kind) if not option.specials else None
                group.addoption(
                    option.flag_text,
                    default=None,
                    help=option.help,
                    choices=option.choices,
                    **({"type": option.parse or kind} if (option.parse or kind) else {}),
                )
        if option.ini:
            ini_type = {"bool": "bool", "paths": "paths", "linelist": "linelist"}.get(option.kind)
            parser.addini(
                option.ini_key,
                option.ini_help or option.help,
                default=option.ini_default,
                **({"type": ini_type} if ini_type else {}),
            )


def unknown_ini_keys(config: Any) -> list[str]:
    """The ini keys named like pytest-sme2's (``sme2_*``) that it does not have, each with the closest one it has:
    a misspelt key is otherwise only in pytest's warnings summary, and the setting silently keeps its default.

    Read through pytest's private ``Config._get_unknown_ini_keys`` (the public ``inicfg`` is deprecated in pytest 9);
    where it is missing nothing is said, as before."""
    import difflib

    try:
        unknown = sorted(config._get_unknown_ini_keys())
    except Exception:  # another pytest: the note is a help, not a check
        return []
    known = [option.ini_key for option in OPTIONS if option.ini]
    notes = []
    for key in unknown:
        if key.startswith("sme2"):
            close = difflib.get_close_matches(key, known, n=1)
            notes.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return notes


def _given(config: Any, option: Option) -> bool:
    """Whether ``option`` was set by the user: its option given, or its ini key other than the default."""
    given = config.getoption(option.dest) if option.option else None
    if given is not None and given is not False:
        return True
    return bool(option.ini) and config.getini(option.ini_key) != option.ini_default


def _spelling(config: Any, name: str) -> Option:
    """The setting as it was given: under its name, or under an earlier name (``Option.renamed_from``) when only
    that was set; the name wins when both are."""
    option = BY_NAME[name]
    if _given(config, option):
        return option
    return next((old for old in option.renamed if _given(config, old)), option)


def renamed_in_use(config: Any) -> list[str]:
    """A warning's text for each setting the user gave under an earlier name (it is still read, ``_spelling``)."""
    notes = []
    for option in OPTIONS:
        old = _spelling(config, option.name)
        if old is not option:
            where = source(config, option.name).split(" (", 1)[0]  # as written: no "(in tox.ini or -o)"
            new = option.flag_text if where.startswith("--") else f"ini {option.ini_key}"
            notes.append(renamed_setting(where, new))
    return notes


def source(config: Any, name: str) -> str:
    """Where a setting's value comes from, as the user wrote it: ``--sme2-runs=0`` or ``ini sme2_runs = 0``
    (or the default), so an error about it names the place to fix."""
    option = _spelling(config, name)
    given = config.getoption(option.dest) if option.option and option.kind not in ("flag",) else None
    if given is not None and given is not False:
        return f"{option.flag_text}={given}" if given is not True else option.flag_text
    if not option.ini:
        return f"the default ({option.flag_text} changes it)"
    value = config.getini(option.ini_key)
    if value == option.ini_default:
        changes = f"{option.flag_text} or ini {option.ini_key}" if option.option else f"ini {option.ini_key}"
        return f"the default ({changes} changes it)"
    where = f" (in {config.inipath} or -o)" if getattr(config, "inipath", None) else " (-o)"
    return f"ini {option.ini_key} = {value}{where}"


def value(config: Any, name: str) -> Any:
    """A setting's value: the option if given, else the ini key, else the default; typed and checked.

    Raises UsageError naming where the bad value was written and what is valid. Paths are returned as
    written (``resolve_path`` makes them absolute); an unset number or text is None.
    """
    option = _spelling(config, name)
    if option.kind == "flag":
        return bool(config.getoption(option.dest))
    if option.kind == "bool":
        given = config.getoption(option.dest) if option.option else None
        ini = bool(config.getini(option.ini_key)) if option.ini else bool(option.default)
        if option.switch == "on/off":
            return given == "on" if given else ini
        if option.switch:  # --sme2-no-x turns an ini switch off; --sme2-x turns it on
            negative = option.switch.startswith("--sme2-no-")
            return (not negative) if given else ini
        return ini
    if option.kind in ("paths", "linelist"):
        return config.getini(option.ini_key)
    given = config.getoption(option.dest) if option.option else None
    raw = given if given is not None else (config.getini(option.ini_key) if option.ini else option.default)
    if isinstance(raw, str):
        raw = raw.strip()
    if raw == "" or raw is None:
        return None
    if option.kind in ("int", "float") and raw in option.specials:
        return raw
    if option.kind in ("int", "float"):
        cast = int if option.kind == "int" else float
        try:
            number = cast(raw)
        except (TypeError, ValueError):
            kind = ("a whole number" if cast is int else "a number") + "".join(f" or {w}" for w in option.specials)
            raise UsageError(f"{source(config, name)} is not {kind}") from None
        low = -math.inf if option.low is None else option.low
        high = math.inf if option.high is None else option.high
        if not math.isfinite(number) or number < low or (option.strict and number == low) or number > high:
            raise UsageError(f"{source(config, name)} is invalid: it must be {option.what}")
        return option.check(number, source(config, name)) if option.check else number
    if option.choices is not None and raw not in option.choices:
        raise UsageError(f"{option.ini_key} = {raw!r}; choose one of {', '.join(option.choices)}")
    return option.check(raw, source(config, name)) if option.check else raw


def resolve_path(config: Any, name: str) -> Path | None:
    """A path setting, relative to the rootdir unless absolute (``~`` expanded); None when unset."""
    raw = value(config, name)
    if not raw:
        return None
    path = Path(str(raw)).expanduser()
    return path if path.is_absolute() else Path(config.rootpath) / path


def required_path(config: Any, name: str) -> Path:
    """A path setting that has a default (the cache and artifacts folders): set to nothing is a UsageError."""
    path = resolve_path(config, name)
    if path is None:
        raise UsageError(f"{source(config, name)} is empty; give a folder, or leave it unset for its default")
    return path


def marker_arguments(marker: str) -> tuple[str, ...]:
    """The keyword arguments of ``@pytest.mark.<marker>`` that override a setting, in table order."""
    return tuple(
        o.marker.split("(", 1)[1].split("=", 1)[0] for o in OPTIONS if o.marker and o.marker.startswith(f"{marker}(")
    )


def _rows(options: tuple[Option, ...]) -> str:
    rows = ["| option | ini | default |", "|---|---|---|"]
    for option in options:
        flag = f"`{option.flag_text}`" if option.option else ""
        ini = f"`{option.ini_key}`" if option.ini else ""
        for old in option.renamed:  # an earlier spelling still works: said where the setting is listed
            flag += f" (deprecated: `{old.flag_text}`)" if option.option else ""
            ini += f" (deprecated: `{old.ini_key}`)" if option.ini else ""
        rows.append(f"| {flag} | {ini} | {option.doc_default} |".replace("|  |", "| |"))
    return "\n".join(rows)


def markdown_table(section: str) -> str:
    """docs/options.md's table of one section: option, ini key, default (the general settings: each target's own
    are in its section of docs/targets.md, ``target_table``)."""
    owned = set(target_options())
    return _rows(tuple(option for option in OPTIONS if option.section == section and option not in owned))


def target_table(name: str) -> str:
    """The table of one registered target's own options, in its section of docs/targets.md."""
    return _rows(target_class(name).options)
