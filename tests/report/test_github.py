"""The verdict where CI owners look (issue 28, item 3): the job summary and regression annotations under
GitHub Actions, from a real session whose baseline check fails; escaping and the outside-Actions case by unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from helpers_gate import UPDATE, _test_file

from pytest_sme2.errors import StorageError
from pytest_sme2.report.github import append_job_summary, regression_annotations

ACTIONS = {"GITHUB_ACTIONS": "true"}


def test_annotations_escape_what_github_reads_as_syntax_and_stay_silent_outside_actions() -> None:
    entry = {
        "nodeid": "perf/test_a.py::test_x[a,b]",
        "verdicts": [
            {"verdict": "regression", "message": "latency +30%: 1.0 ms -> 1.3 ms\nwhat changed: 100% done"},
            {"verdict": "ok", "message": "shares within tolerance"},
        ],
    }
    lines = regression_annotations([entry], {"perf/test_a.py::test_x[a,b]": ("perf/test_a.py", 12)}, ACTIONS)
    assert lines == [
        "::error file=perf/test_a.py,line=12,title=pytest-sme2 regression%3A perf/test_a.py%3A%3A"
        "test_x[a%2Cb]::latency +30%25: 1.0 ms -> 1.3 ms%0Awhat changed: 100%25 done"
    ]
    assert regression_annotations([entry], {}, ACTIONS)[0].startswith("::error title=")  # no location: no file
    assert regression_annotations([entry], {}, {"GITHUB_ACTIONS": "false"}) == []


def test_the_job_summary_is_appended_not_replaced(tmp_path: Path) -> None:
    summary, markdown = tmp_path / "step_summary.md", tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    markdown.write_text("## pytest-sme2: SME2 performance")
    assert append_job_summary(markdown, {**ACTIONS, "GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert summary.read_text() == "# earlier step\n## pytest-sme2: SME2 performance\n"
    assert append_job_summary(markdown, {"GITHUB_STEP_SUMMARY": str(summary)}) is None  # not under Actions


def _regressed_under_actions(
    project: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    change_baseline: Callable[[Path], None] | None = None,
) -> tuple[Any, Path]:
    """A baseline recorded, (changed by ``change_baseline``,) then the same test exported without the XNNPACK
    partitioner under GitHub Actions, so its baseline check fails: pytest's result and the job summary file."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # this test needs the gate (conftest turns it off)
    project.makepyfile(test_gate=_test_file())
    project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    if change_baseline is not None:
        [path] = (project.path / "baselines").rglob("*.json")
        change_baseline(path)
    project.makepyfile(
        test_gate=_test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("tiny", partitioner="none")')
    )
    job_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(job_summary))
    result = project.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    return result, job_summary


def test_a_failing_session_under_actions_fills_the_job_summary_and_annotates_the_test(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result, job_summary = _regressed_under_actions(sme2_project, monkeypatch, tmp_path)
    text = job_summary.read_text()
    assert text.startswith("## pytest-sme2: SME2 performance") and "test_tiny" in text
    written = (sme2_project.path / "test_gate.py").read_text().splitlines()
    line = 1 + next(
        i for i, text in enumerate(written) if text.startswith("@pytest.mark.baseline")
    )  # pytest's test line
    annotations = [out for out in result.stdout.lines if out.startswith("::error ")]
    assert annotations and all(
        out.startswith(
            f"::error file=test_gate.py,line={line},title=pytest-sme2 regression" "%3A test_gate.py%3A%3Atest_tiny::"
        )
        for out in annotations
    )
    # A user's trial: one change gave 17 annotations (GitHub shows 10 a step), none naming the cause, none the
    # update. Now one per baseline file, as the terminal says it: the cause, what moved, the update command.
    [annotation] = annotations
    message = annotation.split("::", 2)[2].replace("%0A", "\n").replace("%25", "%")
    cause, moved = message.index("node(s) fell out of the delegate"), message.index("graph nodes 100.0% -> 0.0%")
    assert cause < moved
    assert (
        message.splitlines()[-1] == "if the change is intended, update the baseline: pytest test_gate.py::test_tiny "
        "--sme2-update-baselines"
    )
    # the job summary too: the cause and the update command under the test, not only "verdict: regression, note"
    assert "fell out of the delegate" in text and "update the baseline: pytest test_gate.py::test_tiny" in text


def test_the_job_summary_is_never_written_through_a_link(tmp_path: Path) -> None:
    markdown, victim, link = tmp_path / "summary.md", tmp_path / "victim.txt", tmp_path / "step_summary.md"
    markdown.write_text("## pytest-sme2")
    victim.write_text("untouched\n")
    link.symlink_to(victim)
    with pytest.raises(StorageError, match="it is a symbolic link"):
        append_job_summary(markdown, {**ACTIONS, "GITHUB_STEP_SUMMARY": str(link)})
    assert victim.read_text() == "untouched\n"


FORGED = "\n::error file=evil.py,line=1::FORGED\n::stop-commands::tok"
# What decides which stored record a test is judged against: forged, the check would be another check (a
# mismatch or a missing record, said without the file's text); tests/gate/test_baselines.py forges those too.
_WHICH_RECORD = {("test",), ("model",), ("variant",)}


def _forge_strings(value: object, path: tuple = ()) -> object:
    """``value`` with FORGED after every string, but the ones that pick the record (_WHICH_RECORD)."""
    if isinstance(value, dict):
        return {key: _forge_strings(item, (*path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_forge_strings(item, path) for item in value]
    if isinstance(value, str) and path[-1:] not in _WHICH_RECORD and path[:1] != ("test",):
        return value + FORGED
    return value


def _starts_a_command(line: str) -> bool:
    """Whether GitHub's runner would read ``line`` as a workflow command (it skips leading blanks)."""
    return line.lstrip().startswith("::")


def test_a_forged_baseline_can_issue_no_workflow_command_nor_job_summary_line(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every string field of a baseline file (a pull request can edit it) forged with a line break and commands,
    then a real regression under GitHub Actions: no output line is a command the plugin did not write, and the job
    summary gains no line from the file."""
    import json
    import re

    def forge(baseline: Path) -> None:
        baseline.write_text(json.dumps(_forge_strings(json.loads(baseline.read_text()))))

    result, job_summary = _regressed_under_actions(sme2_project, monkeypatch, tmp_path, forge)
    ours = "::error file=test_gate.py,line="
    assert [
        line
        for line in result.stdout.lines + result.stderr.lines
        if _starts_a_command(line) and not line.startswith(ours)
    ] == []
    summary = job_summary.read_text().splitlines()
    assert [line for line in summary if re.match(r"\s*(?:[-*+]\s+)*\\?::", line)] == []
    assert "holds the control character '\\n'" in result.stdout.str()  # the file is refused, by field


def test_printed_lines_never_start_a_workflow_command_and_file_text_stays_on_one_line() -> None:
    """The guard where text is written, for text no reader checked (a message quoting a summary or cache file)."""
    from pytest_sme2.system.plain_text import CommandFreeWriter, no_workflow_commands, one_line

    message = no_workflow_commands("failed:\n::error file=a.py::x\n  \r::stop-commands::tok\nkept :: inside")
    assert [line for line in message.splitlines() if _starts_a_command(line)] == []
    assert message.endswith("kept :: inside")
    assert (
        one_line("2026-01-01" + FORGED + "\x1b[2J")
        == "2026-01-01\\n::error file=evil.py,line=1::FORGED\\n::stop-commands::tok\\x1b[2J"
    )
    written: list[str] = []

    class Reporter:
        def write_line(self, line: str, **markup: object) -> None:
            written.append(line)

    CommandFreeWriter(Reporter()).write_line("::warning::from a file")
    assert written == ["\\::warning::from a file"]
