"""pytester tests of the session outputs: terminal table, artifacts files, HTML extras, progress lines (under
xdist: tests/plugin/test_xdist_session.py)."""

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


SLOW_MODEL = '''
"""About a second per run on one thread (34 GFLOP): one 1024x1024 Linear applied 8 times to 2048 rows."""
import torch

class Slow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1024, 1024)

    def forward(self, x):
        for _ in range(32):  # each run well over the half-second progress interval (0.17 s at 8 on this EPYC)
            x = torch.relu(self.linear(x))
        return x

def get_eager_model():
    torch.manual_seed(0)
    return Slow().eval()

def get_example_inputs():
    return (torch.ones(2048, 1024),)
'''


SLOW_TEST = """

@pytest.mark.perf(runs=3, warmup=0)
@pytest.mark.model("slow")
def test_slow(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def _session_dir(project: pytest.Pytester) -> Path:
    (session,) = (project.path / "artifacts").glob("session-*")
    return session


def test_session_outputs_table_and_html_extra(sme2_project: pytest.Pytester) -> None:
    (sme2_project.path / "models" / "slow.py").write_text(SLOW_MODEL)
    sme2_project.makepyfile(PERF_TEST + SLOW_TEST)
    result = sme2_project.runpytest_inprocess(
        "-v", "--sme2-artifacts-dir=artifacts", "--html=report.html", "--self-contained-html"
    )
    out = result.stdout.str()
    # progress (-v: lines): the export and the variant, each when it starts and ends
    result.stdout.fnmatch_lines(
        [
            "sme2: exporting tiny fp32-xnnpack ...",
            "sme2: tiny fp32-xnnpack * (key *) in *",
            "sme2: running tiny fp32-xnnpack [[]host sme2=auto threads=1[]]: 1 warmup + 3 timed runs ...",
            "sme2: tiny fp32-xnnpack [[]host sme2=auto threads=1[]] done: 3/3 runs in *",
        ]
    )
    # one table of perf tests only
    result.stdout.fnmatch_lines(
        [
            "*= sme2 performance summary =*",
            "test * model * variant * median ms *verdict*",
            "test_tiny * tiny fp32-xnnpack * host sme2=auto threads=1 * 0.* *%*",
        ]
    )
    # The top category of a 40-microsecond model depends on timing (overhead vs its one GEMM), so any named one.
    assert re.search(r"^test_tiny .* (CONV|GEMM|DATA_MOVEMENT|ELEMENTWISE|OTHER) \d+%", out, re.MULTILINE), out
    assert "test_not_perf  " not in out
    # the host target reports timed runs: slow runs take longer than its half-second reporting interval
    result.stdout.fnmatch_lines(
        [
            "sme2: running slow fp32-xnnpack [[]host sme2=auto threads=1[]] run [12]/3",
            "sme2: slow fp32-xnnpack [[]host sme2=auto threads=1[]] done: 3/3 runs in *",
        ]
    )
    session = _session_dir(sme2_project)
    summary = json.loads((session / "summary.json").read_text())
    assert summary["schema_version"] == 3 and [t["nodeid"].rsplit("::")[1] for t in summary["tests"]] == [
        "test_slow",
        "test_tiny",
    ]
    (profile,) = summary["tests"][1]["profiles"]
    assert len(profile["e2e_ms"]) == 3 and profile["model"] == "tiny"
    assert "| test_tiny | tiny fp32-xnnpack |" in (session / "summary.md").read_text()
    log = (session / "progress.log").read_text()
    assert log.count("sme2: exporting") == 2 and "slow fp32-xnnpack [host sme2=auto threads=1] run 3/3" in log
    facts = json.loads((Path(profile["artifacts"]["timed_etdump"]).parent / "run.json").read_text())
    assert facts["target"]["name"] == "host" and facts["target"]["emulated"] is False and facts["spec"]["runs"] == 3
    import executorch.version

    assert facts["versions"]["executorch"] == executorch.version.__version__  # compare shows them (issue 66)
    timeline = Path(profile["artifacts"]["timeline_csv"])
    assert timeline.parent.parent.parent == session and timeline.name.endswith("_all_runs_timeline.csv")
    with timeline.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(r["name"] == "Method::execute" for r in rows) == 3
    assert any(r["name"].startswith("Convolution (NHWC, F32) IGEMM") for r in rows)
    html = (sme2_project.path / "report.html").read_text()
    # pytest-html collapses passed tests: the perf tests' table and the session report's link sit on top
    start = html.index("pytest-sme2: performance summary")
    top = html[start : html.index("</div>", start)]
    assert "test_tiny" in top and "test_slow" in top and "tiny fp32-xnnpack" in top
    assert f'href="artifacts/{session.name}/report.html"' in top and (session / "report.html").is_file()
    assert "Where time went" not in html or "data:image/png;base64" in html
    assert html.count("data:image/png;base64") >= 6  # latency, categories, top operators of each test


def test_a_report_that_cannot_be_built_fails_the_session_naming_why(sme2_project: pytest.Pytester) -> None:
    """A profile the report code cannot serialise once left no summary.json, no table and exit 0: the
    outputs asked for were dropped silently. The test itself stands; the session fails at its end."""
    sme2_project.makeconftest("""
        import pytest_sme2.profile.profile

        def broken(self, top=10):
            raise RuntimeError("this profile cannot be serialised")

        pytest_sme2.profile.profile.Profile.to_dict = broken
        """)
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_subprocess("--sme2-no-baselines", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*sme2: building the sme2 report of test_a_report*::test_tiny failed: RuntimeError: "
            "this profile cannot be serialised*the session fails for it*"
        ]
    )


def test_a_device_model_on_a_timing_target_says_nothing_was_modelled(sme2_project: pytest.Pytester) -> None:
    """A model author's trial: --sme2-target host --sme2-device apple-m4 was accepted and apple-m4 appeared nowhere."""
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_inprocess("--sme2-target=host", "--sme2-device=apple-m4", "--sme2-no-baselines")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "sme2: --sme2-device apple-m4: nothing was modelled: a device model prices the "
            "instructions of counted runs (the emulated target), and no run of this session was "
            "counted"
        ]
    )
    skipped = sme2_project.runpytest_inprocess("--sme2-target=host", "--sme2-device=apple-m4", "-k", "not_perf")
    skipped.assert_outcomes(passed=1, deselected=1)  # no profile at all: it is said all the same
    skipped.stdout.fnmatch_lines(["sme2: --sme2-device apple-m4: nothing was modelled*"])


def test_the_kit_timeline_holds_the_first_runs_the_option_asks_for_and_says_so(sme2_project: pytest.Pytester) -> None:
    """Issue 64: a 150,000-run session's timeline CSV was 307 MB; ``--sme2-kit-timeline-runs`` bounds it, and the
    profile and its ops stats still use every run."""
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_inprocess(
        "--sme2-target=host", "--sme2-no-baselines", "--sme2-artifacts-dir=artifacts", "--sme2-kit-timeline-runs=2"
    )
    result.assert_outcomes(passed=2)
    summary = json.loads((_session_dir(sme2_project) / "summary.json").read_text())
    (profile,) = summary["tests"][0]["profiles"]
    assert len(profile["e2e_ms"]) == 3 and profile["timeline_csv_runs"] == "2 of 3"
    with Path(profile["artifacts"]["timeline_csv"]).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted({r["run_index"] for r in rows}) == ["0", "1"]
    assert sum(r["name"] == "Method::execute" for r in rows) == 2
