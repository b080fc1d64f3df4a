"""pytest hooks for baselines, regression verdicts and pytest-benchmark results.

Every profile a test builds with ``etdump_profile`` (or ``compare_variants``)
is, after the test body passed:

1. recorded as a pytest-benchmark result from its per-run latencies (no
   second timing), so ``--benchmark-json/-autosave/-compare`` work on it;
2. checked against its stored baseline (see gate/baselines.py and gate/checks/),
   or written there with ``--sme2-update-baselines``.

A failing verdict fails the test with the numbers, tolerance, p-value,
baseline file and update command. The terminal summary lists baselines no
test used. Works under pytest-xdist: workers report what they used through
test reports and ``workeroutput``; the controller prints the summary.
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import EmulatedTimingError, Sme2Error, UsageError
from pytest_sme2.gate import baselines, gate
from pytest_sme2.gate.checks.modelled import JUDGE_WITH, NO_DEVICE_THIS_SESSION
from pytest_sme2.gate.gate import MISSING_POLICIES
from pytest_sme2.gate.record import RECORD_VERSION
from pytest_sme2.gate.verdict import Status, Tolerances, Verdict
from pytest_sme2.plugin import (
    DEVICE_KEY,
    failures_of_test,
    options,
    profiles_of,
    replica_count,
    session_of,
    setting,
)
from pytest_sme2.system import writable_folders
from pytest_sme2.system.plain_text import CommandFreeWriter, no_workflow_commands

_MARKER_KEYS = (*options.marker_arguments("baseline"), "enabled")
MARKER = (
    f"baseline({', '.join(f'{k}=None' for k in _MARKER_KEYS[:-1])}, enabled=True): per-test baseline "
    "tolerances and policy for the regression gate (enabled=False turns the gate off for this test)"
)
_USED = "sme2_baseline"  # report user property: what this test did with its baseline


@dataclass
class _GateConfig:
    root: Path
    update: bool
    accept_noisy: bool
    metric: str
    missing: str
    enabled: bool
    tolerances: Tolerances
    inferences: int
    known_ids: set[str] = field(default_factory=set)
    reports: list[dict[str, Any]] = field(default_factory=list)
    # Test files the command line narrowed to some of their tests (``file.py::test``): pytest collected only
    # those, so the file's other baselines are not known to be orphaned.
    narrowed_files: set[str] = field(default_factory=set)
    rootdir: Path | None = None  # what test ids' file paths are relative to: a deleted test file is found there

    @property
    def place(self) -> writable_folders.Place:
        return writable_folders.Place(
            "baselines folder", self.root, writable_folders.option_and_ini("--sme2-baselines-dir", "sme2_baselines_dir")
        )


_GATE_KEY = pytest.StashKey[_GateConfig]()
_ITEM_KEY = pytest.StashKey[dict]()
_INPUT_KEY = pytest.StashKey[dict]()  # what check_file judged: kept in summary.json for `pytest-sme2 check`
_REPLICAS_KEY = pytest.StashKey[int]()  # baseline_replicas' answer for the test: its baseline read once


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    try:
        tolerances = Tolerances(**{field: setting(config, ini) for field, ini in options.TOLERANCE_KEYS.items()})
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_GATE_KEY] = _GateConfig(
        root=options.required_path(config, "baselines_dir"),
        update=setting(config, "update_baselines"),
        accept_noisy=setting(config, "accept_noisy_baselines"),
        metric=setting(config, "metric"),
        missing=setting(config, "baseline_missing"),
        enabled=setting(config, "baselines"),
        tolerances=tolerances,
        inferences=setting(config, "instruction_inferences"),
        narrowed_files=_narrowed_files(config),
        rootdir=config.rootpath,
    )
    config.stash[replica_count.BASELINE_NEEDS] = baseline_replicas
    if getattr(config, "workerinput", None) is None:  # the controller (or a plain run) prints the summary
        config.pluginmanager.register(_GateTally(config.stash[_GATE_KEY]), "sme2-baseline-summary")


def _narrowed_files(config: pytest.Config) -> set[str]:
    """Node-id paths (rootdir-relative) of the files whose arguments name single tests (``file.py::test``)."""
    narrowed = set()
    for arg in config.args:
        if "::" not in str(arg):
            continue
        path = (config.invocation_params.dir / str(arg).split("::")[0]).resolve()
        try:
            narrowed.add(path.relative_to(config.rootpath.resolve()).as_posix())
        except ValueError:
            continue
    return narrowed


def pytest_sessionstart(session: pytest.Session) -> None:
    """An update that could not write its files stops before the first test, not after the last."""
    settings = session.config.stash.get(_GATE_KEY, None)
    if settings is None or not settings.update or not settings.enabled or getattr(session.config, "workerinput", None):
        return
    try:
        writable_folders.check_writable(settings.place)
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None


# ------------------------------------------------------------ known test ids
def pytest_collection_modifyitems(items: list[pytest.Item], config: pytest.Config) -> None:
    config.stash[_GATE_KEY].known_ids.update(item.nodeid for item in items)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[_GATE_KEY].known_ids.update(item.nodeid for item in items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand what it knows to the controller
        workeroutput["sme2_known_ids"] = sorted(session.config.stash[_GATE_KEY].known_ids)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    settings = node.config.stash.get(_GATE_KEY, None)
    output = getattr(node, "workeroutput", None) or {}
    if settings is not None:
        settings.known_ids.update(output.get("sme2_known_ids", []))


# ---------------------------------------------------------- the gate itself
def _marker_options(item: pytest.Item) -> dict[str, Any]:
    marker = item.get_closest_marker("baseline")
    if marker is None:
        return {}
    if marker.args:
        raise UsageError("@pytest.mark.baseline takes keyword arguments only, e.g. @pytest.mark.baseline(latency=0.15)")
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYS))
    if unknown:
        raise UsageError(
            f"@pytest.mark.baseline got unknown argument(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(_MARKER_KEYS)}"
        )
    overrides = {k: v for k, v in marker.kwargs.items() if v is not None}
    if overrides.get("missing", "fail") not in MISSING_POLICIES:
        raise UsageError(
            f"@pytest.mark.baseline(missing={overrides['missing']!r}): use one of {', '.join(MISSING_POLICIES)}"
        )
    return overrides


def _labelled(profiles: list[Any]) -> list[tuple[str, Any]]:
    """Profile labels, made unique within the test ("... #2" for a repeated variant)."""
    seen: Counter[str] = Counter()
    out = []
    for profile in profiles:
        seen[profile.label] += 1
        out.append((profile.label if seen[profile.label] == 1 else f"{profile.label} #{seen[profile.label]}", profile))
    return out


def _update_command(item: pytest.Item, settings: _GateConfig) -> str:
    extra = " --sme2-metric=instructions" if settings.metric == "instructions" else ""
    target = item.config.getoption("sme2_target")  # as the user passed it (not the ini default)
    extra += f" --sme2-target={target}" if target else ""
    folder = item.config.getoption("sme2_baselines_dir")  # from the command line: the ini's holds for the update too
    extra += f" {gate.BASELINES_DIR_OPTION}={shlex.quote(str(folder))}" if folder else ""
    device = item.config.stash.get(DEVICE_KEY, None)  # an update without it would drop the modelled time
    extra += f" --sme2-device={shlex.quote(device.option)}" if device is not None else ""
    # the node id is the rootdir's: from a subfolder, the pasted command found no test
    rootdir, here = item.config.rootpath, item.config.invocation_params.dir
    where = "" if Path(here).resolve() == Path(rootdir).resolve() else f"cd {shlex.quote(str(rootdir))} && "
    return f"{where}pytest {shlex.quote(item.nodeid)} --sme2-update-baselines{extra}"


def _check_replicas(config: pytest.Config) -> int | str:
    """How many replicas later checks measure (--sme2-replicas, or "auto"): the design a baseline must serve."""
    session = session_of(config)
    return session.settings.check_replicas if session is not None else 1


def _rules_of(item: pytest.Item, config: _GateConfig) -> gate.Rules | None:
    """The gate's rules for this test: the session's settings under its @pytest.mark.baseline; None when the
    gate is off for it. One reader for the verdicts and for the replicas sme2_replicas = auto measures."""
    overrides = _marker_options(item)
    if not config.enabled or overrides.pop("enabled", True) is False:
        return None
    return gate.Rules(
        root=config.root,
        metric=config.metric,
        tolerances=config.tolerances.replace(**{k: v for k, v in overrides.items() if k != "missing"}),
        missing=overrides.get("missing", config.missing),
        update=config.update,
        accept_noisy=config.accept_noisy,
        check_replicas=_check_replicas(item.config),
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A wrong @pytest.mark.baseline errors the test here, before its fixtures export or run anything (a plain
    hook: a test skipped by its skip or skipif mark is skipped first, and never judged)."""
    config = item.config.stash.get(_GATE_KEY, None)
    if config is None:
        return
    try:  # a wrong @pytest.mark.baseline is an error before the test exports or runs anything
        _rules_of(item, config)
    except UsageError as exc:
        raise pytest.fail.Exception(f"UsageError: {exc}", pytrace=False) from None


def baseline_replicas(item: pytest.Item) -> int:
    """How many replicas the checks of ``item``'s stored baseline on this target need (gate.auto_replicas),
    read with the test's own tolerances, as its verdicts will be; 1 when the gate is off for it or the target
    cannot be set up (the runner reports that, as a test failure). Registered at configure for
    plugin/replica_count.py, the one place the replica count is decided. Read once a test: a test that asks for
    several runners (SME2 on and off) gets the same answer without loading its baseline file again."""
    if _REPLICAS_KEY not in item.stash:
        item.stash[_REPLICAS_KEY] = _baseline_replicas(item)
    return item.stash[_REPLICAS_KEY]


def _baseline_replicas(item: pytest.Item) -> int:
    config = item.config.stash.get(_GATE_KEY, None)
    session = session_of(item.config)
    if config is None or session is None:
        return 1
    rules = _rules_of(item, config)  # a wrong marker failed the test at setup, before this
    if rules is None:
        return 1
    try:
        fingerprint = session.target.info.fingerprint
    except Sme2Error:
        return 1
    return gate.auto_replicas(rules.root, fingerprint, item.nodeid, rules.tolerances)


def _gate(item: pytest.Item, body_failed: str | None = None) -> None:
    """Judge (or, updating, write) the test's profiles against its baseline file per target; ``body_failed``: the
    test's own body failed with this, so an update writes nothing and says why (the profiles are what a failing
    test measured), and a check still judges them (the caller shows the verdicts beside the failure)."""
    profiles = profiles_of(item)
    config = item.config.stash.get(_GATE_KEY, None)
    if not profiles or config is None:
        return
    _record_benchmarks(item, profiles)
    rules = _rules_of(item, config)
    if rules is None:
        return
    outcome = gate.new_outcome()
    item.stash[_ITEM_KEY] = outcome
    if body_failed is not None and config.update:
        for fingerprint in sorted(
            {p.metadata.get("target", {}).get("fingerprint") or "unknown-target" for p in profiles}
        ):
            path = baselines.baseline_path(rules.root, fingerprint, item.nodeid)
            outcome["fingerprints"].append(fingerprint)
            outcome["paths"].append(str(path))  # its stored file (if any) is this test's, not unused
            outcome["not_written"].append(f"{path}: the test failed ({body_failed}); fix it, then update again")
        return
    session = session_of(item.config)
    verdicts_dir = session.test_dir(item.nodeid) if session is not None else None
    update = _update_command(item, config)
    by_target: dict[str, tuple[dict[str, Any], list[tuple[str, Any]]]] = {}
    for label, profile in _labelled(profiles):
        target = profile.metadata.get("target", {})
        fingerprint = target.get("fingerprint") or "unknown-target"
        by_target.setdefault(fingerprint, (target, []))[1].append((label, profile))
    # What `pytest-sme2 check` judges again later: the rules and each file's records (summary.json).
    judged: dict[str, Any] = {
        "record_version": RECORD_VERSION,  # what its records' and rules' keys are (gate.current_gate_input)
        "rules": rules.as_dict(),
        "test_id": item.nodeid,
        "update_command": update,
        "files": [],
    }
    item.stash[_INPUT_KEY] = judged
    failures: list[str] = []
    for fingerprint, (target, labelled) in by_target.items():
        outcome["fingerprints"].append(fingerprint)
        records = gate.records_of(labelled, config.metric, config.inferences, item.config.stash.get(DEVICE_KEY, None))
        if not config.update:
            judged["files"].append(
                {
                    "fingerprint": fingerprint,
                    "target": target,
                    "records": {label: record.to_json() for label, record in records.items()},
                }
            )
        failures += gate.check_file(
            gate.GateFile(item.nodeid, fingerprint, target, records),
            rules,
            update,
            outcome,
            verdicts_dir=verdicts_dir,
            repo_root=item.config.rootpath,
        )
    if failures:
        pytest.fail(no_workflow_commands(gate.FAILED_HEADLINE + "\n" + "\n".join(failures)), pytrace=False)
    if outcome["missing"] and rules.missing == "skip":
        pytest.skip("; ".join(outcome["missing"]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    try:
        result = yield  # a failing or skipped test body raises here...
    except (pytest.skip.Exception, KeyboardInterrupt, SystemExit, pytest.exit.Exception):
        raise  # ...a skip or an interrupt: nothing to gate
    except EmulatedTimingError as error:
        # ...but for a timing read of emulated profiles (speedup_over), the project's own error, which stands
        # as a skip: the profiles built before it are exact counts, and a test that asserts a speedup beside
        # them (docs/writing_tests.md, "A speedup in one test") would otherwise gate nothing on the emulated target.
        try:
            _gate_after_body(item)
        except pytest.skip.Exception as missing:  # sme2_baseline_missing = skip: both reasons, in one skip
            raise _judged_skip(item, error, str(getattr(missing, "msg", missing))) from None
        except BaseException as failure:  # the gate's failure stands alone: not "During handling of ... skip"
            failure.__suppress_context__ = True
            raise
        raise _judged_skip(item, error) from None
    except (Exception, pytest.fail.Exception) as error:  # noqa: BLE001 - the body's failure stands; the gate's
        # verdicts go beside it (pytest.fail's exception is no Exception: a body's pytest.fail is a failure too)
        _gate_after_failed_body(item, error)
        raise
    _gate_after_body(item)
    return result


def _gate_after_body(item: pytest.Item, body_failed: str | None = None) -> None:
    session = session_of(item.config)
    if session is None:  # the plugin's session was never configured: no profiles to gate
        return
    # A broken baseline, or writing one (or counting instructions) into a folder that cannot be written.
    with failures_of_test(session, item.nodeid, (item.config.stash[_GATE_KEY].place,)):
        _gate(item, body_failed)


def _gate_after_failed_body(item: pytest.Item, error: BaseException) -> None:
    """The test's body failed (its own assertion, say): the profiles it built before are still judged and their
    verdicts shown beside the failure ("sme2 baselines" in its report, makereport below), which stays the
    test's failure; an update writes no baseline of a failing test and the summary lists it. Issue 65: a failing
    threshold silenced the gate, and nothing said that a new variant had no baseline or an old one went unused."""
    first = (str(getattr(error, "msg", None) or error).strip().splitlines() or [""])[0][:200]
    why = f"{type(error).__name__}: {first}" if first else type(error).__name__
    try:
        _gate_after_body(item, why)
    except (pytest.fail.Exception, pytest.skip.Exception) as gated:  # its lines are in the outcome: shown beside
        outcome = item.stash.get(_ITEM_KEY, None)
        if outcome is not None and not outcome["findings"] and not outcome["missing"]:
            outcome["findings"].append(str(getattr(gated, "msg", gated)))  # e.g. a broken baseline file
    except Exception as broken:  # noqa: BLE001 - the gate's own trouble never hides the body's failure
        outcome = item.stash.setdefault(_ITEM_KEY, gate.new_outcome())
        outcome["findings"].append(f"the gate could not judge this test's profiles: {type(broken).__name__}: {broken}")


def _judged_skip(item: pytest.Item, skip: BaseException, judged: str | None = None) -> BaseException:
    """The timing skip, saying that the lines after it did not run and what the gate did with the profiles
    built before it: ``judged``, or read from the test's gate outcome (written, passed, or nothing to judge)."""
    if judged is None:
        outcome = item.stash.get(_ITEM_KEY, None)
        if outcome is None:
            judged = "the gate judged nothing (no profile built before it, or the gate is off for this test)"
        elif outcome["written"]:
            judged = f"the profiles built before it were written as baselines ({len(outcome['written'])} file(s))"
        elif outcome.get("unchanged"):
            judged = "the profiles built before it equal their baselines, which were kept as they were"
        elif outcome["missing"]:
            judged = "the profiles built before it have no baseline yet: " + "; ".join(outcome["missing"])
        else:
            judged = "the profiles built before it passed their baselines (counted instructions)"
    message = f"{getattr(skip, 'msg', skip)}; the lines after it did not run; {judged}"
    return pytest.skip.Exception(message, _use_item_location=True)


def add_gate_sections(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """Put the gate's outcome into a test's call report: its lines as the "sme2 baselines" section and what
    `pytest-sme2 check` judges again as user properties. Called by the one makereport wrapper (report_hooks),
    before the report entry is built from these properties: an order written in code, not left to hook order."""
    outcome = item.stash.get(_ITEM_KEY, None)
    if call.when == "call" and outcome is not None:
        report.user_properties.append((_USED, outcome))
        judged = item.stash.get(_INPUT_KEY, None)
        if judged is not None and judged["files"]:
            report.user_properties.append((gate.GATE_INPUT, judged))  # into summary.json (report hooks)
        lines = (
            [f"written {p}" for p in outcome["written"]]
            + [f"refused {p}" for p in outcome["refused"]]
            + [f"not written {p}" for p in outcome.get("not_written", [])]
            + (outcome["findings"] if report.failed else [])  # a failed body: the gate's own failure lines too
            + [str(Verdict.from_dict(v)) for v in outcome["verdicts"]]
            + outcome["missing"]
        )
        if lines:
            report.sections.append(("sme2 baselines", "\n".join(lines)))


# -------------------------------------------------------- pytest-benchmark
@dataclass
class _BenchmarkSource:
    """What pytest_benchmark.stats.Metadata reads from its fixture, for a result we did not time."""

    name: str
    fullname: str
    group: str | None
    param: str | None
    params: dict[str, Any] | None
    extra_info: dict[str, Any]
    cprofile_stats: Any = None
    has_error: bool = False


def _record_benchmarks(item: pytest.Item, profiles: list[Any]) -> None:
    """Each profile's per-run E2E latencies as one pytest-benchmark result (seconds, one iteration per round)."""
    bench_session = getattr(item.config, "_benchmarksession", None)
    if bench_session is None or bench_session.disabled:
        return
    from pytest_benchmark.stats import Metadata

    callspec = getattr(item, "callspec", None)
    with_emulated = setting(item.config, "benchmark_emulated")
    for label, profile in _labelled(profiles):
        if profile.emulated and not with_emulated:
            continue  # emulated time is the emulator's: not a benchmark result unless asked for
        source = _BenchmarkSource(
            name=f"{item.name}[{label}]",
            fullname=f"{item.nodeid}[{label}]",
            group=f"sme2 {profile.model} {profile.recipe}",
            param=callspec.id if callspec else None,
            params=dict(callspec.params) if callspec else None,
            extra_info={
                "sme2_variant": profile.variant,
                "sme2_emulated": profile.emulated,
                "sme2_timer": "ETDump Method::execute",
                "sme2_fingerprint": profile.metadata.get("target", {}).get("fingerprint"),
            },
        )
        metadata = Metadata(
            source,
            iterations=1,
            options={
                "timer": "etdump",
                "warmup": profile.metadata.get("run", {}).get("warmup"),
                "min_rounds": profile.runs,
                "disable_gc": False,
                "min_time": 0,
                "max_time": 0,
            },
        )
        for ms in profile.e2e_ms:
            metadata.stats.update(float(ms) / 1000.0)
        bench_session.benchmarks.append(metadata)


# ------------------------------------------------------------- the summary
class _GateTally:
    """Collects every test's gate outcome from its report (also from xdist workers) and prints the summary."""

    def _measure(self, reports: list[dict[str, Any]]) -> str:
        """What the gate compared: counted instructions on the emulated target, else the chosen metric."""
        fingerprints = {f for r in reports for f in r["fingerprints"]}
        if fingerprints and all(f.startswith("emulated") for f in fingerprints):
            return "counted instructions, emulated target"
        return self.gate.metric

    def __init__(self, gate: _GateConfig):
        self.gate = gate
        self.reports: list[dict[str, Any]] = []

    @staticmethod
    def _regressions(reports: list[dict[str, Any]]) -> str:
        """Failing verdicts, and in how many tests: one change can fail many quantities of one test (a user's
        trial read "20 regression(s)" beside two failed tests)."""
        verdict_count = sum(len(r["failed"]) for r in reports)
        tests = sum(1 for r in reports if r["failed"])
        return f"{verdict_count} regression(s)" + (f" in {tests} test(s)" if verdict_count else "")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.reports += [
                value for name, value in report.user_properties if name == _USED and isinstance(value, dict)
            ]

    def unused(self) -> list[str]:
        """Stored files of the session's targets whose test no longer exists, and variants no test profiled."""
        settings, reports = self.gate, self.reports
        used = {p for r in reports for p in r["paths"]}
        files = {nodeid.split("::")[0] for nodeid in settings.known_ids}
        # A deleted test file is only known for a folder this session collected from: baselines of another project
        # sharing the folder (or node ids of another rootdir) are never called deletable.
        folders = {str(Path(f).parent) for f in files}
        unused = []
        for fingerprint in sorted({f for r in reports for f in r["fingerprints"]}):
            for path in baselines.stored(settings.root, fingerprint):
                test_id = baselines.stored_test_id(path)
                test_file = None if test_id is None else test_id.split("::")[0]
                if (
                    test_file is not None
                    and str(path) not in used
                    and settings.rootdir is not None
                    and str(Path(test_file).parent) in folders
                    and not (settings.rootdir / test_file).exists()
                ):
                    unused.append(f"{path} (its test file {test_file} no longer exists)")
                    continue
                if str(path) in used or test_file not in files or test_file in settings.narrowed_files:
                    continue  # another test file's baseline (not run now), one of a file the command line
                    # narrowed to some of its tests, or unreadable (its test says why)
                if test_id not in settings.known_ids:
                    unused.append(f"{path} (test {test_id} no longer exists)")
        return unused + [
            f"{entry} (variant no longer profiled by its test)" for r in reports for entry in r["unused_labels"]
        ]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.reports:
            return
        terminalreporter = CommandFreeWriter(terminalreporter)  # labels, paths and verdicts read from files
        reports = self.reports
        judged = [Verdict.from_dict(v) for r in reports for v in r["verdicts"]]
        improvements = [v for v in judged if v.status == Status.IMPROVEMENT]
        inconclusive = [v for v in judged if v.status == Status.INCONCLUSIVE]
        unused = self.unused()
        unchanged = sum(len(r.get("unchanged", [])) for r in reports)
        not_written = sum(len(r.get("not_written", [])) for r in reports)
        terminalreporter.section("sme2 baselines")
        terminalreporter.write_line(
            f"{len({p for r in reports for p in r['paths']})} baseline file(s) ({self._measure(reports)}): "
            f"{sum(len(r['written']) for r in reports)} written, "
            + (f"{unchanged} unchanged (kept as they were), " if unchanged else "")
            + f"{sum(len(r.get('refused', [])) for r in reports)} refused, "
            + (f"{not_written} not written (their tests failed), " if not_written else "")
            + f"{sum(len(r.get('ok', [])) for r in reports)} ok, {self._regressions(reports)}, "
            f"{len(improvements)} improvement(s), {len(inconclusive)} inconclusive, "
            f"{sum(len(r['missing']) for r in reports)} missing"
        )
        for verdict in improvements + inconclusive:
            terminalreporter.write_line(f"  {verdict}")
        for written in (w for r in reports for w in r["written_caveats"]):
            terminalreporter.write_line(f"  written: {written}")
        for line in (w for r in reports for w in r.get("not_written", [])):
            terminalreporter.write_line(f"  not written: {line}")
        not_modelled = [v for v in judged if v.check == "modelled" and v.status == Status.SKIPPED]
        unmodelled = [str(v.evidence[JUDGE_WITH]) for v in not_modelled if JUDGE_WITH in v.evidence]
        if unmodelled:  # in the summary too: in the verdicts file alone a modelled regression goes unseen
            terminalreporter.write_line(
                f"  {len(unmodelled)} modelled device time check(s) not judged: the baselines "
                f"hold modelled time and {NO_DEVICE_THIS_SESSION}; add "
                f"--sme2-device {' / '.join(sorted(set(unmodelled)))} to judge them"
            )
        others = [v for v in not_modelled if JUDGE_WITH not in v.evidence]
        if others:  # e.g. baselines priced by another pricing method (a review): the lines say how to record them
            terminalreporter.write_line(f"  {len(others)} modelled device time check(s) not judged:")
            for verdict in others[:5]:
                terminalreporter.write_line(f"    {verdict}")
            if len(others) > 5:
                terminalreporter.write_line(f"    ... and {len(others) - 5} more (summary.json has every verdict)")
        if unused:
            terminalreporter.write_line(
                f"{len(unused)} unused baseline(s) (no test used them; delete them if obsolete):"
            )
            for line in unused:
                terminalreporter.write_line(f"  {line}")
