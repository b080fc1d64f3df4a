"""The verdict where CI owners look (issue 28, item 3): the job summary and regression annotations under
GitHub Actions, from a real session whose baseline check fails; escaping and the outside-Actions case by unit."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_gate import UPDATE, _test_file

from pytest_sme2.errors import StorageError
from pytest_sme2.report.github import append_job_summary, regression_annotations

ACTIONS = {"GITHUB_ACTIONS": "true"}


def test_annotations_escape_what_github_reads_as_syntax_and_stay_silent_outside_actions() -> None:
    entry = {"nodeid": "perf/test_a.py::test_x[a,b]", "verdicts": [
        {"verdict": "regression", "message": "latency +30%: 1.0 ms -> 1.3 ms\nwhat changed: 100% done"},
        {"verdict": "ok", "message": "shares within tolerance"}]}
    lines = regression_annotations([entry], {"perf/test_a.py::test_x[a,b]": ("perf/test_a.py", 12)}, ACTIONS)
    assert lines == ["::error file=perf/test_a.py,line=12,title=pytest-sme2 regression%3A perf/test_a.py%3A%3A"
                     "test_x[a%2Cb]::latency +30%25: 1.0 ms -> 1.3 ms%0Awhat changed: 100%25 done"]
    assert regression_annotations([entry], {}, ACTIONS)[0].startswith("::error title=")  # no location: no file
    assert regression_annotations([entry], {}, {"GITHUB_ACTIONS": "false"}) == []


def test_the_job_summary_is_appended_not_replaced(tmp_path: Path) -> None:
    summary, markdown = tmp_path / "step_summary.md", tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    markdown.write_text("## pytest-sme2: SME2 performance")
    assert append_job_summary(markdown, {**ACTIONS, "GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert summary.read_text() == "# earlier step\n## pytest-sme2: SME2 performance\n"
    assert append_job_summary(markdown, {"GITHUB_STEP_SUMMARY": str(summary)}) is None  # not under Actions


def test_a_failing_session_under_actions_fills_the_job_summary_and_annotates_the_test(
        sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # this test needs the gate (conftest turns it off)
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    # The same test, now exported without the XNNPACK partitioner: the baseline check fails.
    sme2_project.makepyfile(test_gate=_test_file().replace('@pytest.mark.model("tiny")',
                                                           '@pytest.mark.model("tiny", partitioner="none")'))
    job_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(job_summary))
    result = sme2_project.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    text = job_summary.read_text()
    assert text.startswith("## pytest-sme2: SME2 performance") and "test_tiny" in text
    written = (sme2_project.path / "test_gate.py").read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(written) if text.startswith("@pytest.mark.baseline"))  # pytest's test line
    annotations = [l for l in result.stdout.lines if l.startswith("::error ")]
    assert annotations and all(l.startswith(f"::error file=test_gate.py,line={line},title=pytest-sme2 regression"
                                            "%3A test_gate.py%3A%3Atest_tiny::") for l in annotations)
    # A user's trial: one change gave 17 annotations (GitHub shows 10 a step), none naming the cause, none the
    # update. Now one per baseline file, as the terminal says it: the cause, what moved, the update command.
    [annotation] = annotations
    message = annotation.split("::", 2)[2].replace("%0A", "\n").replace("%25", "%")
    cause, moved = message.index("operator(s) fell out of the delegate"), message.index("graph nodes 100.0% -> 0.0%")
    assert cause < moved
    assert message.splitlines()[-1] == "if the change is intended, update the baseline: pytest test_gate.py::test_tiny " \
                                       "--sme2-update-baselines"
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
