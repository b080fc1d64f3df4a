"""pytester tests of the session outputs: terminal table, artifacts files, HTML extras, progress lines, xdist."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

PERF_TEST = """
import pytest

@pytest.mark.perf(runs=3, warmup=1)
@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())

def test_not_perf():
    pass
"""


def _session_dir(project: pytest.Pytester) -> Path:
    (session,) = (project.path / "artifacts").glob("session-*")
    return session


def test_session_outputs_table_and_html_extra(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "--html=report.html",
                                              "--self-contained-html")
    out = result.stdout.str()
    # progress: the export and the variant, each when it starts and ends
    result.stdout.fnmatch_lines(["sme2: exporting tiny fp32-xnnpack ...", "sme2: tiny fp32-xnnpack ready in *",
                                 "sme2: running tiny fp32-xnnpack [[]host sme2=auto threads=1[]]: 1 warmup + 3 timed runs ...",
                                 "sme2: tiny fp32-xnnpack [[]host sme2=auto threads=1[]] done: 3/3 runs in *"])
    # one table of perf tests only
    result.stdout.fnmatch_lines(["*= sme2 performance summary =*", "test * model * variant * median ms *verdict*",
                                 "test_tiny * tiny fp32-xnnpack * host sme2=auto threads=1 * 0.* OTHER* *%*"])
    assert "test_not_perf  " not in out
    session = _session_dir(sme2_project)
    summary = json.loads((session / "summary.json").read_text())
    assert summary["schema_version"] == 1 and [t["nodeid"] for t in summary["tests"]] == [
        "test_session_outputs_table_and_html_extra.py::test_tiny"]
    (profile,) = summary["tests"][0]["profiles"]
    assert len(profile["e2e_ms"]) == 3 and profile["model"] == "tiny"
    assert "| test_tiny | tiny fp32-xnnpack |" in (session / "summary.md").read_text()
    assert (session / "progress.log").read_text().count("sme2: ") == 4
    timeline = Path(profile["artifacts"]["timeline_csv"])
    assert timeline.parent.parent.parent == session and timeline.name.endswith("_all_runs_timeline.csv")
    with timeline.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(r["name"] == "Method::execute" for r in rows) == 3
    assert any(r["name"].startswith("Convolution (NHWC, F32) IGEMM") for r in rows)
    html = (sme2_project.path / "report.html").read_text()
    assert "Where time went" not in html or "data:image/png;base64" in html
    assert html.count("data:image/png;base64") >= 3  # latency, categories, top operators


def test_xdist_controller_gathers_every_workers_tests(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(PERF_TEST + PERF_TEST.replace("test_tiny", "test_other").replace("def test_not_perf",
                                                                                           "def test_not_perf_2"))
    result = sme2_project.runpytest_subprocess("-q", "-n", "2", "-p", "xdist", "--sme2-artifacts-dir=artifacts")
    assert "sme2: running" not in result.stdout.str()  # -q, and workers never print progress
    result.stdout.fnmatch_lines(["*sme2 performance summary*", "test_other *", "test_tiny *"])
    session = _session_dir(sme2_project)
    summary = json.loads((session / "summary.json").read_text())
    assert [t["nodeid"].rsplit("::", 1)[1] for t in summary["tests"]] == ["test_other", "test_tiny"]
    log = (session / "progress.log").read_text()
    # each line names its worker; which worker ran which test is xdist's choice
    assert len(re.findall(r"\[gw[01]\] sme2: running tiny", log)) == 2
