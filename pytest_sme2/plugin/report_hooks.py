"""pytest hooks for reports and session outputs.

Per test (where the Profiles live: the worker under xdist), ``makereport``
turns the test's Profiles into a test entry (report/entries.py), writes the
reference kit's CSVs next to its ETDumps, and attaches the test entry to the
report: the ``sme2_record`` and ``sme2_profiles`` user properties, the
"sme2 profiles" text section and a pytest-html extra with charts.

Per session (the controller only under xdist, which sees every worker's
reports through ``pytest_runtest_logreport``), the test entries are gathered and
written to summary.json, summary.md and report.html in the session folder,
and the terminal shows one table of all perf tests.

Baseline verdicts are read, never computed, here: a ``sme2_verdicts`` user
property (a list of dicts with at least ``verdict``; see docs/artifacts.md)
on the item or any of its reports is shown with the test; without one the
reports say "no baseline check".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.gate.gate import GATE_INPUT
from pytest_sme2.plugin import options
from pytest_sme2.plugin.baseline_hooks import add_gate_sections
from pytest_sme2.report.entries import build_test_entry, verdicts_of
from pytest_sme2.system.safe_files import write_file

TEST_ENTRY_PROPERTY = "sme2_record"
PROFILES_PROPERTY = "sme2_profiles"
# An output the user asked for (history line, session summary) could not be written: the session fails.
OUTPUT_ERROR_PROPERTY = "sme2_output_error"
_RECORDS_KEY = pytest.StashKey[dict]()
_OUTPUT_ERRORS_KEY = pytest.StashKey[list]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _output_errors(config: pytest.Config) -> list[str]:
    """Outputs this session could not write, each one message (shown red at the end; exit status 1)."""
    return config.stash.setdefault(_OUTPUT_ERRORS_KEY, [])


def _test_entries(config: pytest.Config) -> dict[str, dict[str, Any]]:
    return config.stash.setdefault(_RECORDS_KEY, {})


def _write_csvs(entry: dict[str, Any], timeline_runs: int) -> None:
    """The kit-compatible CSVs of one profile, in its run folder next to its ETDumps; paths go into the entry
    (and ``timeline_runs``, "N of M", when the timeline CSV holds the first N of M runs)."""
    from pytest_sme2.measure.session import kit_variant, link_artifact
    from pytest_sme2.report.csv_export import write_csvs, write_kernels_csv
    from pytest_sme2.system.names import slug

    etdump = entry.get("artifacts", {}).get("timed_etdump")
    if not etdump:
        return
    out_dir = Path(etdump).parent
    variant = kit_variant(entry["variant"])  # sme2_on / sme2_off, as the kit's tools tell them apart
    prefix = slug(f"{entry['model']}_{entry['recipe']}_{variant}")
    # the variant in model_id: the kit's --compare keys runs by it, and SME2 on and off must stay apart
    model_id = f"{entry['model']} {entry['recipe']} [{variant}]"
    emulated = bool(entry.get("emulated"))
    written = write_csvs(etdump, out_dir, prefix, model_id=model_id, emulated=emulated, timeline_runs=timeline_runs)
    if "timeline_runs" in written:
        entry["timeline_csv_runs"] = written.pop("timeline_runs")
    entry["artifacts"].update(written)
    entry["artifacts"].update(
        write_kernels_csv(entry.get("kernel_time") or {}, out_dir, prefix, model_id, entry["variant"])
    )
    if emulated:  # emulator time: nothing under the names the kit's tools read as latency
        return
    # the kit's tools look for *.etdump: the same file under that name, a link (a copy doubled a 150,000-run
    # session's 86 MB ETDump)
    entry["artifacts"]["kit_etdump"] = str(link_artifact(Path(etdump), out_dir / f"{prefix}.etdump", protect=False))
    # the latency statistics the kit's robust analysis writes
    robust = out_dir / f"{prefix}_robust_stats.json"
    write_file(
        robust,
        json.dumps(
            {
                "model_id": model_id,
                "latency": entry.get("latency"),
                "relative_latency": entry.get("relative_latency"),
                "disturbed_runs": entry.get("disturbed_runs"),
            },
            indent=1,
        )
        + "\n",
    )
    entry["artifacts"]["robust_stats"] = str(robust)


_HISTORY_FACTS_KEY = pytest.StashKey[dict]()


def _append_history(config: pytest.Config, test_entry: dict[str, Any]) -> None:
    """With --sme2-history: one line per profile of this test appended to the history (history.py)."""
    from pytest_sme2.gate import history
    from pytest_sme2.plugin import history_path, session_of

    path = history_path(config)
    session = session_of(config)
    if path is None or session is None:
        return
    if _HISTORY_FACTS_KEY not in config.stash:  # once per process: the commit and target do not change
        config.stash[_HISTORY_FACTS_KEY] = history.session_facts(
            config.rootpath, session.settings.session_dir, session.target.info.fingerprint
        )
    facts = config.stash[_HISTORY_FACTS_KEY]
    history.append(path, [history.digest(test_entry["nodeid"], entry, facts) for entry in test_entry["profiles"]])


def _write_timeline(
    item: pytest.Item, report: pytest.TestReport, test_entry: dict[str, Any], profiles: list[Any], test_dir: Path
) -> None:
    """The test's timeline.json (report/timeline.py). A failure to write it costs the timeline only: the test's
    entry stands, and the session fails at its end naming what was not written."""
    from pytest_sme2.report.timeline import TIMELINE_FILE, write_timeline

    try:
        test_entry["timeline"] = str(write_timeline(test_dir / TIMELINE_FILE, item.nodeid, profiles))
    except Exception as exc:
        message = f"writing the timeline of {item.nodeid} failed: {type(exc).__name__}: {exc}"
        report.sections.append(("sme2 timeline error", message))
        report.user_properties.append((OUTPUT_ERROR_PROPERTY, message))


def _build(item: pytest.Item, report: pytest.TestReport) -> dict[str, Any] | None:
    from pytest_sme2.plugin import DEVICE_KEY, profiles_of, session_of

    profiles = profiles_of(item)
    if not profiles:
        return None
    test_entry = build_test_entry(item.nodeid, profiles, device=item.config.stash.get(DEVICE_KEY, None))
    session = session_of(item.config)
    if session is not None:
        test_entry["test_dir"] = str(session.test_dir(item.nodeid))
        if timeline_wanted(item.config):
            _write_timeline(item, report, test_entry, profiles, session.test_dir(item.nodeid))
    for entry in test_entry["profiles"]:
        _write_csvs(entry, options.value(item.config, "kit_timeline_runs"))
    test_entry["verdicts"] = verdicts_of([*item.user_properties, *report.user_properties])
    judged = [value for key, value in report.user_properties if key == GATE_INPUT]
    if judged:  # what `pytest-sme2 check SESSION_DIR` judges again
        test_entry[GATE_INPUT] = judged[-1]
    # One JSON round trip: what crosses to the xdist controller must be plain data.
    return json.loads(json.dumps(test_entry, default=str))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """pytest-sme2's one makereport wrapper: first the gate's sections and properties (baseline_hooks), then the
    report entry built from them, in that order by code (issue 67: two wrappers were ordered by tryfirst)."""
    report = yield
    add_gate_sections(item, call, report)
    if call.when != "call":
        return report
    try:
        test_entry = _build(item, report)
    except Exception as exc:  # a report problem must not take the session down; it is shown with the test,
        # and the session fails at its end naming it: its profiles are missing from every report and summary
        message = f"building the sme2 report of {item.nodeid} failed: {type(exc).__name__}: {exc}"
        report.sections.append(("sme2 report error", message))
        report.user_properties.append((OUTPUT_ERROR_PROPERTY, message))
        return report
    if test_entry is None:
        return report
    try:
        _append_history(item.config, test_entry)
    except Exception as exc:  # the test stands; the session fails at its end, saying why
        from pytest_sme2.plugin import session_of
        from pytest_sme2.system.writable_folders import explain

        session = session_of(item.config)
        why = (explain(exc, session.places) if isinstance(exc, OSError) and session is not None else None) or exc
        message = f"appending to the history file failed: {why}"
        report.sections.append(("sme2 history error", message))
        report.user_properties.append((OUTPUT_ERROR_PROPERTY, message))
    from pytest_sme2.report.text import entry_text

    # junitxml reads properties from the teardown report, made from the item's list.
    item.user_properties.append((PROFILES_PROPERTY, test_entry["profiles"]))
    report.user_properties.append((PROFILES_PROPERTY, test_entry["profiles"]))
    report.user_properties.append((TEST_ENTRY_PROPERTY, test_entry))
    report.sections.append(("sme2 profiles", entry_text(test_entry)))
    htmlpath = getattr(item.config.option, "htmlpath", None)
    if not htmlpath:  # charts cost about a second per test: draw them only for a pytest-html report
        return report
    try:
        from pytest_html import extras
    except ImportError:
        return report
    from pytest_sme2.report.html import extra_html

    base = Path(htmlpath).absolute().parent
    try:
        report.extras = [*getattr(report, "extras", []), extras.html(extra_html(test_entry, base))]
    except Exception as exc:
        report.sections.append(("sme2 report error", f"rendering the HTML section failed: {type(exc).__name__}: {exc}"))
    return report


class _Collector:
    """Gathers every perf test's test entry on the controller (or the only process)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.locations: dict[str, tuple[str, int]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test_entries = _test_entries(self.config)
        properties: list[tuple[str, Any]] = list(report.user_properties)  # pytest types the values as object
        test_entry = next((value for key, value in properties if key == TEST_ENTRY_PROPERTY), None)
        if test_entry is not None:
            test_entries[report.nodeid] = {
                **test_entry,
                "outcome": report.outcome,
                "duration_s": report.duration,
                "verdicts": list(test_entry.get("verdicts", [])),
            }
            path, line, _ = report.location  # the test's own line: where a CI annotation points
            self.locations[report.nodeid] = (path, (line or 0) + 1)
        for key, value in properties:
            if key == OUTPUT_ERROR_PROPERTY and value not in _output_errors(self.config):
                _output_errors(self.config).append(value)
        existing = test_entries.get(report.nodeid)
        if existing is None:
            return
        if report.when != "call" and report.failed:
            existing["outcome"] = "error" if report.when == "setup" else f"failed in {report.when}"
        for verdict in verdicts_of(properties):
            if verdict not in existing["verdicts"]:
                existing["verdicts"].append(verdict)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        test_entries = _test_entries(self.config)
        if test_entries:
            self._write(test_entries)
        if _output_errors(self.config) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # an output asked for is missing: never exit 0

    def _write(self, test_entries: dict[str, Any]) -> None:
        """summary.json, summary.md, the session HTML and the kit layout; a failure is an output error."""
        from pytest_sme2.plugin import session_of
        from pytest_sme2.report import kit_layout
        from pytest_sme2.report.summary import session_summary, write_session

        sme2 = session_of(self.config)
        if sme2 is None:  # test entries exist only when the plugin configured a session; nothing to write into
            return
        out_dir = sme2.settings.session_dir
        html = bool(getattr(self.config.option, "htmlpath", None)) or session_report_wanted(self.config)
        try:
            summary = session_summary(list(test_entries.values()), out_dir)
            paths = write_session(summary, out_dir, html=html)
            paths.update(kit_layout.write(summary["tests"], out_dir))
        except Exception as exc:  # never lose the session over a report; the session fails, saying why
            from pytest_sme2.system.writable_folders import explain

            why = explain(exc, sme2.places) if isinstance(exc, OSError) else None
            _output_errors(self.config).append(
                f"writing the session summary failed: {why or f'{type(exc).__name__}: {exc}'}"
            )
        else:
            self.config.stash[_OUTPUTS_KEY] = paths
            self._job_summary(Path(paths["markdown"]))

    def _job_summary(self, markdown: Path) -> None:
        """Under GitHub Actions, summary.md into the job summary (report/github.py); a failure is an output error."""
        import os

        from pytest_sme2.errors import StorageError
        from pytest_sme2.report.github import STEP_SUMMARY, append_job_summary

        try:
            append_job_summary(markdown, os.environ)
        except (OSError, StorageError) as exc:
            _output_errors(self.config).append(
                f"appending {markdown} to ${STEP_SUMMARY} ({os.environ.get(STEP_SUMMARY)}) " f"failed: {exc}"
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        """pytest-html: the perf tests' table and the session report's link at the top of its page."""
        test_entries = _test_entries(self.config)
        if not test_entries:
            return
        from pytest_sme2.plugin import session_of
        from pytest_sme2.report.html import pytest_html_summary
        from pytest_sme2.report.summary import REPORT_HTML, session_summary

        sme2 = session_of(self.config)
        if sme2 is None:
            return
        # With --html the session's report.html is always drawn (pytest_sessionfinish above).
        report = sme2.settings.session_dir / REPORT_HTML
        tests = session_summary(list(test_entries.values()), None)["tests"]
        prefix.append(pytest_html_summary(tests, report, Path(self.config.option.htmlpath).absolute().parent))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        import os

        from pytest_sme2.plugin import DEVICE_KEY
        from pytest_sme2.report.github import regression_annotations
        from pytest_sme2.system.plain_text import CommandFreeWriter

        test_entries = _test_entries(self.config)
        guarded = CommandFreeWriter(terminalreporter)  # the table and notes show labels and paths from files
        if test_entries:
            self._summary_table(guarded, test_entries)
            for line in regression_annotations(test_entries.values(), self.locations, os.environ):
                terminalreporter.write_line(line)  # GitHub Actions: an annotation on the test's line (ours)
        device = self.config.stash.get(DEVICE_KEY, None)
        counted = any(
            p.get("emulated") and p.get("instructions")
            for entry in (test_entries or {}).values()
            for p in entry.get("profiles") or []
        )
        if device is not None and not counted:  # said: otherwise ignored on the host target without a word
            guarded.write_line(
                f"sme2: --sme2-device {device.option}: nothing was modelled: a device model "
                f"prices the instructions of counted runs (the emulated target), and no run "
                f"of this session was counted"
            )
        for error in _output_errors(self.config):
            guarded.write_line(f"sme2: {error}; the session fails for it", red=True)

    def _summary_table(self, terminalreporter: Any, test_entries: dict[str, Any]) -> None:
        from pytest_sme2.report.summary import session_summary
        from pytest_sme2.report.table import columns, modelled_labels, result_cache_line, summary_rows, text_table

        tests = session_summary(list(test_entries.values()), None)["tests"]
        terminalreporter.write_sep("=", "sme2 performance summary")
        for line in text_table(columns(tests), summary_rows(tests)):
            terminalreporter.write_line(line)
        for label in modelled_labels(tests):
            terminalreporter.write_line(f"sme2: {label}")
        cached = result_cache_line(tests)
        if cached:
            terminalreporter.write_line(cached)
        outputs = self.config.stash.get(_OUTPUTS_KEY, None)
        if isinstance(outputs, dict):
            report = outputs.get("html") or (
                f"not drawn (--html or --sme2-session-report draws it; later: "
                f"pytest-sme2 report {Path(outputs['json']).parent})"
            )
            terminalreporter.write_line(
                f"sme2: summary {outputs['json']}, markdown {outputs['markdown']}, report {report}"
            )


_OUTPUTS_KEY = pytest.StashKey[Any]()


def timeline_wanted(config: pytest.Config) -> bool:
    """--sme2-timeline or ini sme2_timeline, or an HTML report (which links each test's timeline)."""
    from pytest_sme2.plugin.options import value

    return (
        bool(value(config, "timeline"))
        or bool(getattr(config.option, "htmlpath", None))
        or session_report_wanted(config)
    )


def session_report_wanted(config: pytest.Config) -> bool:
    """--sme2-session-report or ini sme2_session_report: write report.html at the end of every session."""
    from pytest_sme2.plugin.options import value

    return bool(value(config, "session_report"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_sme2.plugin import progress, session_of

    def session_dir() -> Path | None:
        session = session_of(config)
        return session.settings.session_dir if session is not None else None

    progress.install(config, session_dir)
    session = session_of(config)
    if session is not None:  # a device cooling down is said where progress is
        session.say = progress.sayer(config)
    if not _is_worker(config):
        config.pluginmanager.register(_Collector(config), "sme2-report-collector")
