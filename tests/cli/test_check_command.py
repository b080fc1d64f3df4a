"""`pytest-sme2 check SESSION_DIR`: the gate without pytest judges a finished session as pytest did (issue 24).

Real sessions of the tiny model on the host target; the command is run as a user runs it (a subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_gate import UPDATE, _test_file

# Two tests: one keeps its recipe, one loses the XNNPACK delegate after the update (a structural regression).
TWO_TESTS = _test_file() + _test_file("other").replace("def test_tiny", "def test_other")


@pytest.fixture(autouse=True)
def _baseline_gate_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def _sessions(project: pytest.Pytester) -> list[Path]:
    return sorted(
        (p for p in (project.path / ".sme2" / "artifacts").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime
    )


def _check(project: pytest.Pytester, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", *args],
        cwd=project.path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _failure_block(text: str, start: str) -> list[str]:
    """The lines of a failure message from its headline to its update command (the verdict file path aside)."""
    lines = text.splitlines()
    first = lines.index(start)
    last = next(i for i in range(first, len(lines)) if lines[i].startswith("if the change is intended"))
    return [line for line in lines[first : last + 1] if not line.startswith("every verdict (")]


def test_check_judges_a_session_as_pytest_did(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=TWO_TESTS)
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=2)
    [updated] = _sessions(sme2_project)
    no_gate = _check(sme2_project, str(updated))
    assert no_gate.returncode == 2 and "no test in this session was judged against baselines" in no_gate.stderr

    passing = sme2_project.runpytest_inprocess()
    passing.assert_outcomes(passed=2)
    session = _sessions(sme2_project)[-1]
    ok = _check(sme2_project, str(session))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "passed test_gate.py::test_tiny" in ok.stdout and "0 of 2 test(s) failed" in ok.stdout

    regressed = TWO_TESTS.replace(
        '@pytest.mark.model("tiny")\ndef test_other', '@pytest.mark.model("tiny", partitioner="none")\ndef test_other'
    )
    assert regressed != TWO_TESTS
    sme2_project.makepyfile(test_gate=regressed)
    failing = sme2_project.runpytest_inprocess()
    failing.assert_outcomes(passed=1, failed=1)
    session = _sessions(sme2_project)[-1]
    judged = _check(sme2_project, str(session))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "FAILED test_gate.py::test_other" in judged.stdout and "passed test_gate.py::test_tiny" in judged.stdout
    headline = "sme2 baseline check failed:"
    in_pytest = _failure_block(failing.stdout.str(), headline)
    by_check = _failure_block(judged.stdout, headline)
    assert "fell out of the delegate" in "\n".join(in_pytest)
    assert by_check == in_pytest
    # every verdict, numbers included, the same as the session's own file
    written = sorted((session / "check").glob("*/baseline-verdicts~*.txt"))
    assert len(written) == 2  # one per test, passing ones too
    for ours in written:
        [theirs] = session.glob(f"{ours.parent.name}/baseline-verdicts~*.txt")
        assert ours.read_text() == theirs.read_text()
    assert sum("fell out of the delegate" in path.read_text() for path in written) == 1

    elsewhere = sme2_project.mkdir("other-baselines")
    missing = _check(
        sme2_project,
        str(session / "summary.json"),
        "--baselines",
        str(elsewhere),
        "--out",
        str(sme2_project.path / "out"),
    )
    assert missing.returncode == 1 and "no baseline for tiny fp32-xnnpack" in missing.stdout
    assert str(elsewhere) in missing.stdout
    # its advice records into the folder it judged against, not the session's (a user's trial, stop 49)
    assert (
        f"record it with: pytest test_gate.py::test_other --sme2-update-baselines --sme2-baselines-dir={elsewhere}"
        in missing.stdout
    )
    skipped = _check(sme2_project, str(session), "--baselines", str(elsewhere), "--missing", "skip")
    assert skipped.returncode == 0, skipped.stdout
    _nan_is_refused_by_field(sme2_project, session)


def _nan_is_refused_by_field(project: pytest.Pytester, session: Path) -> None:
    """A NaN in the records a summary.json keeps is refused, naming the file and the field, as in a baseline: a
    NaN planned_bytes read as "[improvement] planned memory nan bytes (+nan%)" and NaN latencies as inconclusive,
    both exit 0."""
    summary = json.loads((session / "summary.json").read_text())
    for field, forge in (
        ("memory.planned_bytes", lambda r: r["memory"].update(planned_bytes=float("nan"))),
        ("latency", lambda r: r["latency"].update(median_ms=float("nan"))),  # its statistics
        ("samples_ms", lambda r: r["samples_ms"].__setitem__(0, float("inf"))),
    ):
        forged = json.loads(json.dumps(summary))
        judged = next(t for t in forged["tests"] if "sme2_gate_input" in t)
        record = next(iter(judged["sme2_gate_input"]["files"][0]["records"].values()))
        forge(record)
        folder = project.mkdir(f"forged-{field}")
        (folder / "summary.json").write_text(json.dumps(forged))  # NaN and Infinity, as Python's json writes them
        done = _check(project, str(folder))
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{folder / 'summary.json'} is damaged: " in done.stderr and f"].{field} must be" in done.stderr


def test_check_refuses_what_is_not_a_session(tmp_path: Path) -> None:
    broken = tmp_path / "summary.json"
    broken.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "tests": [{"nodeid": "t", "profiles": [], "sme2_gate_input": {"rules": {"metric": "latency"}}}],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "rules in this summary are incomplete or damaged" in done.stderr
    assert "Traceback" not in done.stderr
    nothing = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert nothing.returncode == 2 and "does not exist" in nothing.stderr
    # a 2 GB file (sparse: no disk) is refused by its size, not read (which took 4.2 GB of memory), and a FIFO by
    # its kind, not waited on
    with broken.open("r+b") as out:
        out.truncate(2 << 30)
    huge = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", str(broken)], capture_output=True, text=True, timeout=120
    )
    assert huge.returncode == 2 and f"the session summary {broken} is 2 GiB, above the 128 MiB" in huge.stderr
    broken.unlink()
    os.mkfifo(broken)
    pipe = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert pipe.returncode == 2 and f"{broken} is a FIFO (named pipe), not a regular file" in pipe.stderr


GATE_OFF = """
import pytest

@pytest.mark.baseline(enabled=False)
@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    with open("processes.txt", "w") as out:
        out.write(str(len(profile.replica_sizes)))
"""


def test_auto_replicas_measure_what_the_baseline_needs(sme2_project: pytest.Pytester) -> None:
    """sme2_replicas = auto: a check measures as many processes as its baseline's quality check said."""
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE, "-o", "sme2_replicas=auto").assert_outcomes(passed=1)
    [path] = sorted((sme2_project.path / "baselines").rglob("*.json"))
    data = json.loads(path.read_text())
    [record] = data["profiles"].values()
    assert record["quality"]["auto"] is True and 1 <= record["quality"]["check_replicas"] <= 10
    record["quality"]["check_replicas"] = 3  # as a noisier machine would have found
    path.write_text(json.dumps(data))

    def measured(*args: str) -> int:
        sme2_project.runpytest_inprocess(*args).assert_outcomes(passed=1)
        summary = json.loads((_sessions(sme2_project)[-1] / "summary.json").read_text())
        [test] = summary["tests"]
        [entry] = test["sme2_gate_input"]["files"]
        [judged] = entry["records"].values()
        return len(judged["replica_sizes"])

    assert measured("-o", "sme2_replicas=auto") == 3
    assert measured() == 1  # a number (this project's ini: 1) measures that many in every test
    ini = sme2_project.path / "tox.ini"  # pytester.makeini's file
    ini.write_text(ini.read_text().replace("sme2_replicas = 1", ""))
    assert measured() == 3  # the default is auto
    # The gate off for this test (its marker): nothing judges the processes, so auto measures one.
    sme2_project.makepyfile(test_gate=GATE_OFF)
    sme2_project.runpytest_inprocess("-o", "sme2_replicas=auto").assert_outcomes(passed=1)
    assert (sme2_project.path / "processes.txt").read_text() == "1"
    bad = sme2_project.runpytest_inprocess("-o", "sme2_replicas=often")
    assert "ini sme2_replicas = often (in " in bad.stderr.str()
    assert "is not a whole number or auto" in bad.stderr.str()
