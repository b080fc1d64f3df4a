"""History and change detection (issue 15): change points at the right session; a damaged history never loses a
record (appends from xdist workers: tests/plugin/test_xdist_session.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.cli import main
from pytest_sme2.errors import UsageError
from pytest_sme2.gate import history

STEP_AT = 14


def _synthetic(path: Path, sessions: int = 24) -> None:
    """A mobilenet-like series: 6.0 ms with 2% noise, then 6.9 ms (+15%) from session STEP_AT on; the counted
    instructions of an emulated target change exactly once at session 9; shares never change."""
    rng = np.random.default_rng(7)
    lines = []
    for i in range(sessions):
        facts = {
            "session": f"session-{i:02d}",
            "time": f"2026-11-{i + 1:02d}T00:00:00+00:00",
            "commit": f"{i:040x}",
            "target": "local-aarch64-m4-sme2",
        }
        latency = (6.0 if i < STEP_AT else 6.9) * (1 + rng.normal(0, 0.02))
        lines.append(
            history.digest(
                "perf_tests/test_m.py::test_m",
                {
                    "model": "m",
                    "recipe": "fp32",
                    "variant": "local sme2=on threads=1",
                    "emulated": False,
                    "latency": {"median_ms": latency},
                    "shares": {"CONV": 0.4 + rng.normal(0, 0.005), "OTHER": 0.6},
                    "delegation_coverage": 0.99,
                },
                facts,
            )
        )
        lines.append(
            history.digest(
                "perf_tests/test_m.py::test_m",
                {
                    "model": "m",
                    "recipe": "fp32",
                    "variant": "emulated sme2=on threads=1",
                    "emulated": True,
                    "basis": "instructions",
                    "instructions": {"per_inference": 1_000_000 if i < 9 else 1_020_000},
                    "latency": {"median_ms": 300 + rng.normal(0, 30)},
                },
                {**facts, "target": "emulated"},
            )
        )
    history.append(path, lines)


def test_a_step_change_is_flagged_at_the_session_it_began(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    _synthetic(path)
    found = history.changes(history.load(path))
    assert [(c.quantity, c.session, c.target) for c in found] == [
        ("median_ms", f"session-{STEP_AT:02d}", "local-aarch64-m4-sme2"),
        ("instructions_per_inference", "session-09", "emulated"),
    ]
    step = found[0]
    assert step.before == pytest.approx(6.0, rel=0.03) and step.after == pytest.approx(6.9, rel=0.03)
    assert step.commit == f"{STEP_AT:040x}"  # the first commit of the new level: where to start bisecting


def test_a_change_at_a_session_without_a_commit_says_unknown_commit_whole() -> None:
    """Issue 23 (output): a session outside git (or before the first commit) was printed as
    "(..., unknown comm)": the 12-character cut of a commit id was applied to the words."""
    change = history.Change("t.py::test_m", "v", "host", "median_ms", "s12", "2026-11-13", None, 1.0, 1.5, 12)
    assert str(change).endswith("(2026-11-13, unknown commit)")
    assert str(history.Change(*[*change.__dict__.values()][:6], "ab" * 20, 1.0, 1.5, 12)).endswith(
        "(2026-11-13, " + "ab" * 6 + ")"
    )


def test_emulated_time_is_never_kept_as_latency(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    _synthetic(path, sessions=3)
    emulated = [row for row in history.load(path) if row["emulated"]]
    assert emulated and all("median_ms" not in row["quantities"] for row in emulated)


def test_the_history_command_draws_the_series_and_lists_the_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "history.jsonl"
    _synthetic(path)
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "median_ms: " in out and f"from session session-{STEP_AT:02d}" in out
    page = (tmp_path / "out" / "history.html").read_text()
    assert page.count("data:image/png;base64,") >= 2 and "Change points" in page


def test_a_history_too_short_for_change_points_says_so_rather_than_stable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "history.jsonl"
    _synthetic(path, sessions=4)
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "no change points (" in out and "fewer than 10 sessions (the shortest 4)" in out
    assert "none can be found in them yet" in (tmp_path / "out" / "history.md").read_text()
    path.write_text("")
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "has no lines yet" in capsys.readouterr().err


def test_a_damaged_history_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    _synthetic(path, sessions=2)
    with open(path, "a") as handle:
        handle.write("{half a line\n")
    with pytest.raises(UsageError, match=r"history .*history.jsonl line 5 is not JSON"):
        history.load(path)


_ONE_TEST = """
import pytest

@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def _tiny_project(pytester: pytest.Pytester, cache: Path, history_setting: str) -> None:
    from conftest import TINY_MODEL, quick_host_ini

    (pytester.mkdir("models") / "tiny.py").write_text(TINY_MODEL)
    pytester.makeini(quick_host_ini(cache, f"sme2_history = {history_setting}"))
    pytester.makepyfile(_ONE_TEST)


def test_a_history_path_that_is_a_folder_stops_the_session_before_any_test(
    pytester: pytest.Pytester, shared_export_cache: Path
) -> None:
    """Issue 23 item 4: `--sme2-history hdir` with hdir a folder ran, passed and wrote no outputs at all."""
    _tiny_project(pytester, shared_export_cache, "hdir")
    pytester.mkdir("hdir")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-no-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*the history file *hdir is a folder; point --sme2-history (or ini sme2_history) "
            "at a file, e.g. *hdir/history.jsonl*"
        ]
    )


def test_a_history_path_that_is_a_fifo_is_named_as_one(pytester: pytest.Pytester, shared_export_cache: Path) -> None:
    """A FIFO as the history file: the session stops before any test naming it (appending at the end failed with
    "File or stream is not seekable." and no file name), and so do an append and `pytest-sme2 history`."""
    import os

    from pytest_sme2.errors import StorageError

    _tiny_project(pytester, shared_export_cache, "pipe")
    os.mkfifo(pytester.path / "pipe")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-no-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*the history file *pipe is a FIFO (named pipe), not a regular file; point "
            "--sme2-history (or ini sme2_history) at a regular file*"
        ]
    )
    with pytest.raises(StorageError, match=r"cannot append to .*pipe: it is a FIFO \(named pipe\), not a regular"):
        history.append(pytester.path / "pipe", [{"version": 1}])
    with pytest.raises(UsageError, match=r"history .*pipe is a FIFO \(named pipe\), not a regular file"):
        history.load(pytester.path / "pipe")


def test_a_history_that_cannot_be_appended_fails_the_session_and_keeps_its_outputs(
    pytester: pytest.Pytester, shared_export_cache: Path
) -> None:
    """Issue 23 item 4: the history write fails mid-session (here: a link planted at its name); the test's
    result, summary.json and summary.md are still written, the message says why, the exit status is 1."""
    _tiny_project(pytester, shared_export_cache, "h.jsonl")
    victim = pytester.path / "victim"
    victim.write_text("DATA\n")
    (pytester.path / "h.jsonl").symlink_to(victim)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--sme2-no-baselines", "--sme2-artifacts-dir", "art"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*sme2: appending to the history file failed: *symbolic link*; the session fails for it"]
    )
    assert victim.read_text() == "DATA\n"
    (session,) = (p for p in (pytester.path / "art").iterdir() if p.is_dir())  # beside it, its .gitignore
    assert (session / "summary.json").is_file() and (session / "summary.md").is_file()


def test_a_history_cut_short_keeps_the_next_record_whole(pytester: pytest.Pytester, shared_export_cache: Path) -> None:
    """Issue 23 item 7: a history file whose last line lost its end swallowed the next session's record."""
    path = pytester.path / "p.jsonl"
    _synthetic(path, sessions=2)
    whole = path.read_text()
    path.write_text(whole[: len(whole) - 40])  # as `head -c` leaves it: the last line cut, no newline
    _tiny_project(pytester, shared_export_cache, "p.jsonl")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-no-baselines").assert_outcomes(passed=1)
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and lines[:3] == whole.splitlines()[:3]
    with pytest.raises(UsageError, match=r"line 4 is not JSON"):  # the cut line alone is damaged
        history.load(path)
    path.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    assert history.load(path)[-1]["test"].endswith("::test_tiny")


def _step_with_nans(path: Path) -> None:
    """+50% latency from session 12 on, NaN latency in sessions 3 and 15, infinity in 20 (broken runs)."""
    lines = []
    for i in range(24):
        facts = {
            "session": f"session-{i:02d}",
            "time": f"2026-11-{i + 1:02d}T00:00:00+00:00",
            "commit": f"{i:040x}",
            "target": "local",
        }
        latency = (
            float("nan")
            if i in (3, 15)
            else float("inf")
            if i == 20
            else (6.0 if i < 12 else 9.0) * (1 + 0.01 * (i % 3))
        )
        lines.append(
            history.digest(
                "t.py::test_m",
                {"model": "m", "recipe": "fp32", "variant": "v", "latency": {"median_ms": latency}},
                facts,
            )
        )
    history.append(path, lines)


def test_nan_values_are_left_out_so_the_step_is_found_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 (weak): NaN values hid a +50% step ("no change points")."""
    path = tmp_path / "history.jsonl"
    _step_with_nans(path)
    found = history.changes(history.load(path))
    assert [(c.quantity, c.session) for c in found] == [("median_ms", "session-12")]
    assert found[0].after == pytest.approx(1.5 * found[0].before, rel=0.05)
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "from session session-12" in out
    assert "3 non-finite value(s)" in out and "in session session-15" in out and "session-20" in out


def test_damaged_history_lines_are_skipped_with_their_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 (weak): one bad history line blocked the whole file; a deeply nested line said
    "internal error ... This is a bug"."""
    path = tmp_path / "history.jsonl"
    _synthetic(path)
    lines = path.read_text().splitlines()
    lines[4] = "{half a line"
    lines[9] = "[" * 100_000 + "]" * 100_000
    lines[20] = json.dumps({"not": "a history line"})
    path.write_text("\n".join(lines) + "\n")
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"from session session-{STEP_AT:02d}" in out  # the rest still analysed
    assert "Skipped 3 damaged line(s)" in out and "line(s) 5, 10, 21" in out
    assert "line(s) 5, 10, 21" in (tmp_path / "out" / "history.md").read_text()
    strict = tmp_path / "strict.jsonl"
    strict.write_text(lines[0] + "\n" + lines[9] + "\n")
    with pytest.raises(UsageError, match="line 2 is nested too deeply"):
        history.load(strict)
    path.write_text("{bad\n[1]\n")
    assert main(["history", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "no usable line: lines 1, 2 are damaged" in capsys.readouterr().err


def test_a_history_larger_than_a_history_can_be_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    """Issue 64 (weak): `pytest-sme2 history` on a 600 MB history file held 1.3 GB of memory, with no bound."""
    path = tmp_path / "history.jsonl"
    with open(path, "wb") as out:
        out.truncate(600 << 20)  # sparse: 600 MiB on paper
    with pytest.raises(UsageError, match=r"the history file .*history.jsonl is 600 MiB, above the 256 MiB a history"):
        history.load(path)
