"""pytest hooks for baselines, regression verdicts and pytest-benchmark results.

Every profile a test builds with ``etdump_profile`` (or ``compare_variants``)
is, after the test body passed:

1. recorded as a pytest-benchmark result from its per-run latencies (no
   second timing), so ``--benchmark-json/-autosave/-compare`` work on it;
2. checked against its stored baseline (see baselines.py and verdicts.py),
   or written there with ``--sme2-update-baselines``.

A failing verdict fails the test with the numbers, tolerance, p-value,
baseline file and update command. The terminal summary lists baselines no
test used. Works under pytest-xdist: workers report what they used through
test reports and ``workeroutput``; the controller prints the summary.
"""

from __future__ import annotations

import shlex
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .safe_files import write_file
from . import _storage, baselines, findings, verdicts
from .errors import MissingBaselineWarning, Sme2Error, UsageError
from .session import slug
from .targets.base import DEFAULT_TIMEOUT_S

MISSING_POLICIES = ("fail", "skip", "warn")
MARKER = (
    "baseline(latency=None, shares=None, coverage=None, sme_path=None, alpha=None, instructions=None, "
    "op_instructions=None, memory=None, min_effect_ms=None, missing=None, enabled=True): per-test baseline tolerances and policy "
    "for the regression gate (enabled=False turns the gate off for this test)"
)
_MARKER_KEYS = ("latency", "shares", "coverage", "sme_path", "alpha", "instructions", "op_instructions",
                "memory", "min_effect_ms", "missing", "enabled")
_USED = "sme2_baseline"  # report user property: what this test did with its baseline
_INI_TOLERANCES = {
    "latency": ("sme2_baseline_tolerance", "relative latency change allowed (0.10 = 10% slower)"),
    "shares": ("sme2_baseline_share_tolerance", "category share change allowed, in share points (0.05)"),
    "coverage": ("sme2_baseline_coverage_tolerance", "delegation coverage drop allowed, in share points (0.02)"),
    "sme_path": ("sme2_baseline_sme_path_tolerance", "SME path share drop allowed, in share points (0.05)"),
    "alpha": ("sme2_baseline_alpha", "significance level of every per-run test (Mann-Whitney U, 0.001)"),
    "min_effect_ms": ("sme2_baseline_min_effect_ms",
                      "smallest latency change in ms per run that can fail a test (0.02; for tiny models)"),
    "instructions": ("sme2_baseline_instruction_tolerance", "relative instruction-count change allowed (0.005)"),
    "memory": ("sme2_baseline_memory_tolerance", "relative growth of the program's planned memory allowed (0)"),
    "op_instructions": ("sme2_baseline_op_instruction_tolerance",
                        "relative change of one operator's counted instructions allowed (emulated target, 0.02)"),
}


@dataclass
class _GateConfig:
    root: Path
    update: bool
    accept_noisy: bool
    metric: str
    missing: str
    enabled: bool
    tolerances: verdicts.Tolerances
    inferences: int
    known_ids: set[str] = field(default_factory=set)
    reports: list[dict[str, Any]] = field(default_factory=list)

    @property
    def place(self) -> _storage.Place:
        return _storage.Place("baselines folder", self.root,
                              _storage.option_and_ini("--sme2-baselines-dir", "sme2_baselines_dir"))


_GATE_KEY = pytest.StashKey[_GateConfig]()
_ITEM_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sme2")
    group.addoption("--sme2-update-baselines", action="store_true", default=False,
                    help="write or refresh the stored baselines of the tests that run (like --snapshot-update)")
    group.addoption("--sme2-metric", default=None, choices=verdicts.METRICS,
                    help="what the regression gate compares: latency (default; tolerance plus significance) or "
                         "instructions (callgrind instructions per inference; deterministic, for shared CI)")
    group.addoption("--sme2-accept-noisy-baselines", action="store_true", default=False,
                    help="with --sme2-update-baselines: write baselines even when their runs fail the quality check "
                         "(too many disturbed runs, a wide or unstable median); the file records that")
    group.addoption("--sme2-benchmark-emulated", action="store_true", default=False,
                    help="also record emulated-target profiles as pytest-benchmark results (their time is the "
                         "emulator's; off by default so benchmark tables show hardware time only)")
    group.addoption("--sme2-baselines-dir", default=None, help="where baselines live (default: ini sme2_baselines_dir)")
    group.addoption("--sme2-no-baselines", action="store_true", default=False,
                    help="turn the baseline gate off for this run")
    parser.addini("sme2_baselines_dir", "baselines folder, relative to the rootdir", default="baselines")
    parser.addini("sme2_baselines", "check every profile against its stored baseline", type="bool", default=True)
    parser.addini("sme2_baseline_missing", "when a test has no baseline: fail | skip | warn", default="fail")
    parser.addini("sme2_metric", "default --sme2-metric: latency | instructions", default="latency")
    parser.addini("sme2_instruction_inferences", "inferences per callgrind run of the instruction metric",
                  default="10")
    defaults = verdicts.Tolerances()
    for key, (name, text) in _INI_TOLERANCES.items():
        parser.addini(name, text, default=str(getattr(defaults, key)))


def _number(config: pytest.Config, name: str, cast: type) -> Any:
    value = config.getini(name)
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{name} = {value!r} is not a valid {cast.__name__}") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    missing = config.getini("sme2_baseline_missing").strip()
    if missing not in MISSING_POLICIES:
        raise pytest.UsageError(f"sme2_baseline_missing = {missing!r}; choose one of {', '.join(MISSING_POLICIES)}")
    metric = config.getoption("sme2_metric") or config.getini("sme2_metric").strip()
    if metric not in verdicts.METRICS:
        raise pytest.UsageError(f"sme2_metric = {metric!r}; choose one of {', '.join(verdicts.METRICS)}")
    try:
        tolerances = verdicts.Tolerances(**{k: _number(config, name, float) for k, (name, _) in _INI_TOLERANCES.items()})
    except Sme2Error as exc:
        raise pytest.UsageError(str(exc)) from None
    root = Path(config.getoption("sme2_baselines_dir") or config.getini("sme2_baselines_dir")).expanduser()
    config.stash[_GATE_KEY] = _GateConfig(
        root=root if root.is_absolute() else config.rootpath / root,
        update=config.getoption("sme2_update_baselines"),
        accept_noisy=config.getoption("sme2_accept_noisy_baselines"),
        metric=metric,
        missing=missing,
        enabled=config.getini("sme2_baselines") and not config.getoption("sme2_no_baselines"),
        tolerances=tolerances,
        inferences=_number(config, "sme2_instruction_inferences", int),
    )
    if getattr(config, "workerinput", None) is None:  # the controller (or a plain run) prints the summary
        config.pluginmanager.register(_Summary(config.stash[_GATE_KEY]), "sme2-baseline-summary")


def pytest_sessionstart(session: pytest.Session) -> None:
    """An update that could not write its files stops before the first test, not after the last."""
    gate = session.config.stash.get(_GATE_KEY, None)
    if gate is None or not gate.update or not gate.enabled or getattr(session.config, "workerinput", None):
        return
    try:
        _storage.check_writable(gate.place)
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
    gate = node.config.stash.get(_GATE_KEY, None)
    output = getattr(node, "workeroutput", None) or {}
    if gate is not None:
        gate.known_ids.update(output.get("sme2_known_ids", []))


# ---------------------------------------------------------- the gate itself
def _marker_options(item: pytest.Item) -> dict[str, Any]:
    marker = item.get_closest_marker("baseline")
    if marker is None:
        return {}
    if marker.args:
        raise UsageError("@pytest.mark.baseline takes keyword arguments only, e.g. @pytest.mark.baseline(latency=0.15)")
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYS))
    if unknown:
        raise UsageError(f"@pytest.mark.baseline got unknown argument(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(_MARKER_KEYS)}")
    options = {k: v for k, v in marker.kwargs.items() if v is not None}
    if options.get("missing", "fail") not in MISSING_POLICIES:
        raise UsageError(f"@pytest.mark.baseline(missing={options['missing']!r}): use one of {', '.join(MISSING_POLICIES)}")
    return options


def _labelled(profiles: list[Any]) -> list[tuple[str, Any]]:
    """Profile labels, made unique within the test ("... #2" for a repeated variant)."""
    seen: Counter[str] = Counter()
    out = []
    for profile in profiles:
        seen[profile.label] += 1
        out.append((profile.label if seen[profile.label] == 1 else f"{profile.label} #{seen[profile.label]}", profile))
    return out


def _update_command(item: pytest.Item, gate: _GateConfig) -> str:
    extra = " --sme2-metric=instructions" if gate.metric == "instructions" else ""
    target = item.config.getoption("sme2_target")
    extra += f" --sme2-target={target}" if target else ""
    return f"pytest {shlex.quote(item.nodeid)} --sme2-update-baselines{extra}"


def _records(item: pytest.Item, gate: _GateConfig, labelled: list[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    records = {}
    for label, profile in labelled:
        instructions = None
        if gate.metric == "instructions":
            from .instructions import count_instructions

            pte = Path(profile.artifacts["pte"])
            inputs = profile.artifacts.get("inputs")
            count = count_instructions(pte, Path(inputs) if inputs else None,
                                       pte.parent / f"instructions-{slug(label)}", inferences=gate.inferences,
                                       timeout_s=float(profile.metadata.get("run", {}).get("timeout_s", DEFAULT_TIMEOUT_S)))
            instructions = count.as_dict()
        records[label] = baselines.record_of(profile, instructions)
    return records


def _pair_records(records: dict[str, dict[str, Any]], stored: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Which stored record each current profile is judged against.

    Same label first. A profile whose recipe changed (say partitioner xnnpack
    -> none) has a new label; if exactly one stored record of the same model
    and variant is left over, it is compared with that one, so the structural
    change is reported as regressions (with a recipe note) instead of as a
    missing baseline.
    """
    pairs = {label: label for label in records if label in stored}
    leftover = [label for label in stored if label not in pairs]
    for label, record in records.items():
        if label in pairs:
            continue
        same = [old for old in leftover if (stored[old].get("model"), stored[old].get("variant"))
                == (record.get("model"), record.get("variant"))]
        if len(same) == 1 and not any(other in pairs for other in same):
            pairs[label] = same[0]
            leftover.remove(same[0])
    return pairs


def _check_one_file(item: pytest.Item, gate: _GateConfig, tolerances: verdicts.Tolerances, missing: str,
                    fingerprint: str, target: dict[str, Any], records: dict[str, dict[str, Any]],
                    outcome: dict[str, Any]) -> list[str]:
    """Write or judge one baseline file; return failure lines (empty if all is well)."""
    path = baselines.baseline_path(gate.root, fingerprint, item.nodeid)
    legacy = baselines.legacy_baseline_path(gate.root, fingerprint, item.nodeid)
    if legacy == path or not legacy.is_file() or baselines.stored_test_id(legacy) != item.nodeid:
        legacy = None  # no file of this test under the name older versions gave it
    outcome["paths"].append(str(path))
    update = _update_command(item, gate)
    if gate.update:
        owner = baselines.stored_test_id(path) if path.is_file() else None
        if owner is not None and owner != item.nodeid:
            return [f"baseline not written to {path}: that file belongs to test {owner!r}; "
                    f"move it away (it is never overwritten by another test's update)"]
        refused = _assess_quality(records, tolerances, gate.accept_noisy, _check_processes(item.config))
        if refused:
            outcome["refused"].append(str(path))
            return [f"baseline not written to {path}: the runs are not good enough to judge later runs by:",
                    *refused,
                    "ways out: run again on a quieter machine; more runs (--sme2-runs or "
                    "@pytest.mark.perf(runs=...)) or processes (--sme2-baseline-processes, and --sme2-processes for "
                    "the checks that will use it); a tolerance the "
                    "quantity can meet (@pytest.mark.baseline(latency=..., shares=...)); or, knowing the risk, "
                    "write it anyway with --sme2-accept-noisy-baselines (the file then records the problems)"]
        baselines.write(baselines.Baseline(path, item.nodeid, fingerprint, records, target,
                                           baselines.recorded_now(item.config.rootpath)))
        outcome["written"].append(str(path))
        if legacy is not None:
            legacy.unlink()  # its record now lives under the collision-free name
            outcome["written"][-1] += f" (moved from {legacy.name})"
        return []
    if legacy is not None and not path.exists():
        path = legacy  # recorded by an older pytest-sme2; the next update moves it
    stored = baselines.load(path)  # BaselineError names the file; the test fails, the file stays
    pairs = _pair_records(records, stored.profiles) if stored is not None else {}
    absent = [label for label in records if label not in pairs]
    if stored is not None:
        if stored.test_id != item.nodeid:
            raise baselines.BaselineError(
                f"baseline {path} belongs to test {stored.test_id!r}, not {item.nodeid!r}; rename or remove it")
        compared = set(pairs.values())
        outcome["unused_labels"] += [f"{path} :: {label}" for label in stored.profiles if label not in compared]
    judged: list[verdicts.Verdict] = []
    for label, record in records.items():
        if label in pairs:
            judged += verdicts.judge(label, record, stored.profiles[pairs[label]], tolerances, gate.metric)
    ordered = findings.findings(judged)
    outcome["verdicts"] += [str(v) for v in judged]
    outcome["failed"] += [str(v) for f in ordered for v in f.verdicts if v.failed]  # root cause first
    outcome.setdefault("notes", []).extend(str(v) for f in ordered for v in f.verdicts if v.status == verdicts.NOTE)
    written = _write_verdicts(item, fingerprint, ordered, judged) if judged else None
    failures: list[str] = findings.message_lines(ordered) if findings.failed(ordered) else []
    if failures and written is not None:
        failures.append(f"every verdict ({len(judged)}, root cause first): {written}")
    if absent:
        text = (f"no baseline for {', '.join(absent)} on target {fingerprint} in {path}; "
                f"record it with: {update}")
        outcome["missing"].append(text)
        if missing == "fail":
            failures.append(text)
        elif missing == "warn":
            warnings.warn(MissingBaselineWarning(f"{item.nodeid}: {text}"))
    if failures:  # the baseline block: once per baseline file (one file holds every variant of the test)
        recorded = stored.recorded if stored is not None else {}
        when = f" ({baselines.recorded_text(recorded)})"
        failures.append(f"baseline: {path}{when if stored else ''}")
        if outcome["failed"]:  # a regression; a missing record already said how to record it
            failures.append(f"if the change is intended, update the baseline: {update}")
    return failures


def _write_verdicts(item: pytest.Item, fingerprint: str, ordered: list[findings.Finding],
                    judged: list[verdicts.Verdict]) -> Path | None:
    """Every verdict of one baseline file into the test's session folder, findings first: the failing
    message stays short and names this file. None when the plugin's session is not there."""
    from .plugin import session_of

    session = session_of(item.config)
    if session is None:
        return None
    path = session.test_dir(item.nodeid) / f"baseline-verdicts~{slug(fingerprint, limit=40)}.txt"
    lines = ["findings, root cause first:"]
    lines += [f"  [{f.cause_name}] {f.line()}" for f in ordered] or ["  none"]
    lines += ["", f"every verdict ({len(judged)}):"] + [f"  {v}" for v in judged]
    write_file(path, "\n".join(lines) + "\n")
    return path


def _check_processes(config: pytest.Config) -> int:
    """How many processes later checks measure (--sme2-processes): the design a baseline must serve."""
    from .plugin import session_of

    session = session_of(config)
    return session.settings.check_processes if session is not None else 1


def _assess_quality(records: dict[str, dict[str, Any]], tolerances: verdicts.Tolerances,
                    accept_noisy: bool, check_processes: int = 1) -> list[str]:
    """Put each record's quality into it; the reasons to refuse the file (empty: write it)."""
    refused = []
    for label, record in records.items():
        quality, problems = verdicts.baseline_quality(record, tolerances, check_processes)
        if problems and accept_noisy:
            quality["accepted_despite"] = problems
        record["quality"] = quality
        refused += [f"  {label}: {problem}" for problem in problems]
    return [] if accept_noisy else refused


def _gate(item: pytest.Item) -> None:
    from .plugin import profiles_of

    profiles = profiles_of(item)
    gate = item.config.stash.get(_GATE_KEY, None)
    if not profiles or gate is None:
        return
    _record_benchmarks(item, profiles)
    options = _marker_options(item)
    if not gate.enabled or options.pop("enabled", True) is False:
        return
    missing = options.pop("missing", gate.missing)
    tolerances = gate.tolerances.replace(**options)
    outcome: dict[str, Any] = {"paths": [], "written": [], "refused": [], "verdicts": [], "failed": [],
                               "missing": [], "unused_labels": [], "fingerprints": []}
    item.stash[_ITEM_KEY] = outcome
    by_target: dict[str, tuple[dict[str, Any], list[tuple[str, Any]]]] = {}
    for label, profile in _labelled(profiles):
        target = profile.metadata.get("target", {})
        fingerprint = target.get("fingerprint") or "unknown-target"
        by_target.setdefault(fingerprint, (target, []))[1].append((label, profile))
    failures: list[str] = []
    for fingerprint, (target, labelled) in by_target.items():
        outcome["fingerprints"].append(fingerprint)
        records = _records(item, gate, labelled)
        failures += _check_one_file(item, gate, tolerances, missing, fingerprint, target, records, outcome)
    if failures:
        pytest.fail("sme2 baseline check failed:\n" + "\n".join(failures), pytrace=False)
    if outcome["missing"] and missing == "skip":
        pytest.skip("; ".join(outcome["missing"]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    result = yield  # a failing or skipped test body raises here: nothing to gate
    from .plugin import failures_of_test, session_of

    session = session_of(item.config)
    if session is None:  # the plugin's session was never configured: no profiles to gate
        return result
    # A broken baseline, or writing one (or counting instructions) into a folder that cannot be written.
    with failures_of_test(session, item.nodeid, (item.config.stash[_GATE_KEY].place,)):
        _gate(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    outcome = item.stash.get(_ITEM_KEY, None)
    if call.when == "call" and outcome is not None:
        report.user_properties.append((_USED, outcome))
        lines = ([f"written {p}" for p in outcome["written"]] + [f"refused {p}" for p in outcome["refused"]]
                 + outcome["verdicts"] + outcome["missing"])
        if lines:
            report.sections.append(("sme2 baselines", "\n".join(lines)))
    return report


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
    with_emulated = item.config.getoption("sme2_benchmark_emulated", False)
    for label, profile in _labelled(profiles):
        if profile.emulated and not with_emulated:
            continue  # emulated time is the emulator's: not a benchmark result unless asked for
        source = _BenchmarkSource(
            name=f"{item.name}[{label}]",
            fullname=f"{item.nodeid}[{label}]",
            group=f"sme2 {profile.model} {profile.recipe}",
            param=callspec.id if callspec else None,
            params=dict(callspec.params) if callspec else None,
            extra_info={"sme2_variant": profile.variant, "sme2_emulated": profile.emulated,
                        "sme2_timer": "ETDump Method::execute", "sme2_fingerprint":
                        profile.metadata.get("target", {}).get("fingerprint")},
        )
        metadata = Metadata(source, iterations=1, options={"timer": "etdump", "warmup": profile.metadata.get(
            "run", {}).get("warmup"), "min_rounds": profile.runs, "disable_gc": False, "min_time": 0, "max_time": 0})
        for ms in profile.e2e_ms:
            metadata.stats.update(float(ms) / 1000.0)
        bench_session.benchmarks.append(metadata)


# ------------------------------------------------------------- the summary
class _Summary:
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.reports += [value for name, value in report.user_properties if name == _USED and isinstance(value, dict)]

    def unused(self) -> list[str]:
        """Stored files of the session's targets whose test no longer exists, and variants no test profiled."""
        gate, reports = self.gate, self.reports
        used = {p for r in reports for p in r["paths"]}
        files = {nodeid.split("::")[0] for nodeid in gate.known_ids}
        unused = []
        for fingerprint in sorted({f for r in reports for f in r["fingerprints"]}):
            for path in baselines.stored(gate.root, fingerprint):
                test_id = baselines.stored_test_id(path)
                if str(path) in used or test_id is None or test_id.split("::")[0] not in files:
                    continue  # another test file's baseline (not run now) or unreadable (its test says why)
                if test_id not in gate.known_ids:
                    unused.append(f"{path} (test {test_id} no longer exists)")
        return unused + [f"{entry} (variant no longer profiled by its test)" for r in reports for entry in r["unused_labels"]]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.reports:
            return
        reports = self.reports
        verdict_lines = [v for r in reports for v in r["verdicts"]]
        improvements = [v for v in verdict_lines if v.startswith(f"[{verdicts.IMPROVEMENT}]")]
        inconclusive = [v for v in verdict_lines if v.startswith(f"[{verdicts.INCONCLUSIVE}]")]
        unused = self.unused()
        terminalreporter.section("sme2 baselines")
        terminalreporter.write_line(
            f"{len({p for r in reports for p in r['paths']})} baseline file(s) ({self._measure(reports)}): "
            f"{sum(len(r['written']) for r in reports)} written, "
            f"{sum(len(r.get('refused', [])) for r in reports)} refused, {sum(len(r['failed']) for r in reports)} "
            f"regression(s), {len(improvements)} improvement(s), {len(inconclusive)} inconclusive, "
            f"{sum(len(r['missing']) for r in reports)} missing"
        )
        for line in improvements + inconclusive:
            terminalreporter.write_line(f"  {line}")
        if unused:
            terminalreporter.write_line(f"{len(unused)} unused baseline(s) (no test used them; delete them if obsolete):")
            for line in unused:
                terminalreporter.write_line(f"  {line}")
