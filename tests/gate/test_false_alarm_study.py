"""benchmarks/study_false_alarms.py's bookkeeping: the bound it reports, how it reads `pytest-sme2 check`
(on its real output for real sessions of the tiny model) and an update's refusals, and how its table counts
pairs against independent sessions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers_gate import UPDATE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import study_false_alarms as study  # noqa: E402


def test_the_bound_needs_299_alarm_free_pairs_for_one_percent() -> None:
    assert study.upper_bound(0, 299) <= 0.01 < study.upper_bound(0, 298)
    # Clopper-Pearson one-sided 95% upper limit for 1 in 100, from published tables: 4.66%
    assert abs(study.upper_bound(1, 100) - 0.0466) < 0.0005
    assert study.upper_bound(0, 0) == 1.0


CHECK_OUTPUT = """passed test_perf.py::test_model[mobilenet_v3_small] (14 verdict(s), 2 inconclusive)
FAILED test_perf.py::test_model[toy_cnn]
relative latency +12.0% (p=1e-05) ...
if the change is intended, record it again with: pytest --sme2-update-baselines

passed test_perf.py::test_model[mynet] (no baseline for mynet fp32-xnnpack in /x; skipped)
passed test_perf.py::test_model[transformer_encoder] (12 verdict(s))
1 of 4 test(s) failed against /x; every verdict: /y
"""


def test_check_output_is_read_per_test() -> None:
    found = study.parse_check(CHECK_OUTPUT, Path("/y"))
    assert found["mobilenet_v3_small"]["verdict"] == "passed" and found["mobilenet_v3_small"]["inconclusive"] == 2
    assert found["transformer_encoder"] == {"verdict": "passed", "shown": "12 verdict(s)", "inconclusive": 0}
    assert found["mynet"]["verdict"] == "missing"
    assert found["toy_cnn"]["verdict"] == "failed"
    assert found["toy_cnn"]["message"].startswith("relative latency +12.0%")
    assert "record it again" in found["toy_cnn"]["message"] and "passed" not in found["toy_cnn"]["message"]


UPDATE_OUTPUT = """____________________________ test_model[toy_cnn] _____________________________
sme2 baseline check failed:
baseline not written to /b/toy.json: the runs are not good enough to judge later runs by:
  toy_cnn fp32-xnnpack: share of CONV moves by 4.5 points (sd) between its 10 processes
____________________________ test_model[mynet] _____________________________
something else failed
=========================== short test summary info ============================
"""


def test_refusals_name_the_refused_test_only() -> None:
    found = study.refusals(UPDATE_OUTPUT)
    assert list(found) == ["toy_cnn"]
    assert "share of CONV moves by 4.5 points" in found["toy_cnn"]


def _line(kind: str, **fields: object) -> dict:
    state = {"loadavg": [1.0, 1.0, 1.0], "other_busy_processes": 2, "time": "t"}
    return {"kind": kind, "target": "host", "condition": "load1", "work": "/w", "start": state, "end": state, **fields}


def test_table_counts_pairs_session_tests_and_sessions_apart() -> None:
    written = ["mobilenet_v3_small", "toy_cnn", "transformer_encoder"]  # mynet refused: no file
    lines = [_line("baseline", folder=f"b{i}", written=written, refused=[]) for i in range(2)]
    lines += [_line("session", session_dir=f"s{j}") for j in range(3)]
    lines += [
        _line("pair", baseline=f"b{i}", session=f"s{j}", test=t, verdict="passed")
        for i in range(2)
        for j in range(3)
        for t in ("a", "b")
    ]
    lines[-1]["verdict"] = "failed"  # b1 x s2 x b
    lines[-2]["verdict"] = "failed"  # b1 x s2 x a
    lines.append(_line("pair", baseline="b0", session="s0", test="c", verdict="missing"))
    lines.append(_line("pair", baseline="b0", session="s1", test="(none)", verdict="error", exit=2))
    [row] = study.summary_rows(lines)
    assert (row["pairs"], row["pair_alarms"]) == (12, 2)
    assert (row["session_tests"], row["session_test_alarms"]) == (6, 2)
    assert (row["judged_sessions"], row["session_alarms"]) == (3, 1)
    assert row["baselines_refused"] == 2 and row["refused_by_test"] == {"mynet": 2}  # from what was written
    assert row["missing_pairs"] == 1 and len(row["check_errors"]) == 1
    assert row["pair_bound"] < row["session_test_bound"] < row["session_bound"]  # fewer, so wider


MODEL_TEST = """
import pytest

@pytest.mark.parametrize("name", [pytest.param("tiny", marks=pytest.mark.model("tiny{recipe}"))])
def test_model(name, exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def test_real_sessions_judged_against_a_baseline_folder(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study's judge runs the real `pytest-sme2 check` on a real session: an unchanged one passes, one whose
    operator fell out of the delegate fails with that message, and a folder without the test's baseline is
    'missing' (not a judged pair)."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the suite turns the gate off there
    sme2_project.makepyfile(test_perf=MODEL_TEST.format(recipe=""))
    folder = sme2_project.path / "baselines-1"
    sme2_project.runpytest_inprocess(*UPDATE, f"--sme2-baselines-dir={folder}").assert_outcomes(passed=1)
    files = study.baseline_files(folder)
    assert list(files) == ["tiny"] and study.asked_replicas(files["tiny"]) == 1  # the ini's sme2_replicas

    def session() -> Path:
        sme2_project.runpytest_inprocess(f"--sme2-baselines-dir={folder}")
        return max((sme2_project.path / ".sme2" / "artifacts").glob("session-*"), key=lambda p: p.stat().st_mtime)

    unchanged = session()
    assert study.judge(sme2_project.path, folder, unchanged, sme2_project.path / "out1")["tiny"]["verdict"] == "passed"
    sme2_project.makepyfile(test_perf=MODEL_TEST.format(recipe='", partitioner="none'))
    changed = study.judge(sme2_project.path, folder, session(), sme2_project.path / "out2")["tiny"]
    assert changed["verdict"] == "failed" and "fell out of the delegate" in changed["message"], changed
    empty = sme2_project.mkdir("empty")
    assert study.judge(sme2_project.path, empty, unchanged, sme2_project.path / "out3")["tiny"]["verdict"] == "missing"


def _baseline(folder: Path, test: str, asked: list[int]) -> None:
    path = folder / "host-x86_64" / f"test_perf.py_test_model_{test}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    profiles = {f"{test} v{i}": {"quality": {"auto": True, "check_replicas": n}} for i, n in enumerate(asked)}
    path.write_text(json.dumps({"test": f"test_perf.py::test_model[{test}]", "profiles": profiles}))


def test_sessions_measure_what_the_most_demanding_baseline_asks(tmp_path: Path) -> None:
    """The union folder holds, per test, the baseline file asking for the most processes (its largest record)."""
    first, second = tmp_path / "b1", tmp_path / "b2"
    _baseline(first, "a", [2, 7])
    _baseline(first, "b", [3])
    _baseline(second, "a", [4])
    _baseline(second, "b", [9, 1])
    _baseline(second, "c", [1])
    assert study.build_union(tmp_path, [first, second]) == {"a": 7, "b": 9, "c": 1}
    union = study.baseline_files(tmp_path / "baselines-union")
    assert sorted(union) == ["a", "b", "c"] and len(list((tmp_path / "baselines-union").rglob("*.json"))) == 3
    assert {test: study.asked_replicas(path) for test, path in union.items()} == {"a": 7, "b": 9, "c": 1}


def test_the_table_counts_the_newest_judging_and_held_out_sessions() -> None:
    """A gate change judges the recorded pairs again (rejudge): the table counts that code's verdicts, not both;
    ``sessions_from`` keeps only sessions recorded after a setting was chosen."""
    lines = [_line("baseline", folder="b0", written=["toy_cnn"], refused=[])]
    lines += [_line("session", session_dir=f"s{j}", start={**_line("x")["start"], "time": f"T{j}"}) for j in range(3)]
    for j in range(3):  # the old code called every session's toy_cnn a regression; the new one passes them
        lines.append(_line("pair", baseline="b0", session=f"s{j}", test="toy_cnn", verdict="failed", commit="old"))
        lines.append(
            _line("pair", baseline="b0", session=f"s{j}", test="toy_cnn", verdict="passed", judged="J", judged_by="new")
        )
    [row] = study.summary_rows(lines)
    assert (row["judged_by"], row["pairs"], row["pair_alarms"]) == ("new", 3, 0)
    [old] = study.summary_rows(lines, judged_by="old")
    assert (old["pairs"], old["pair_alarms"]) == (3, 3)
    [held_out] = study.summary_rows(lines, sessions_from="T1")
    assert (held_out["sessions"], held_out["pairs"]) == (2, 2)
