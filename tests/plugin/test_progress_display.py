"""Progress on a real terminal: shown past pytest's capture, and pytest's result letters stay on one line.

These run pytest in a subprocess (real fd capture, which in-process pytester runs do not have) and, for
the transient status, under a pseudo-terminal whose output is rendered the way a terminal shows it.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_versions import needs_binding_etdump

TWO_TESTS = """
import pytest

@pytest.mark.perf(runs=3, warmup=1)
@pytest.mark.model("tiny")
def test_a(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())

@pytest.mark.perf(runs=3, warmup=1)
@pytest.mark.model("tiny")
def test_b(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def _render(raw: str) -> list[str]:
    """The screen lines a terminal shows for ``raw``: text, CR, LF, erase-to-end-of-line, cursor left;
    colours dropped. Enough for what pytest and the status write."""
    lines: list[list[str]] = [[]]
    col = 0
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\x1b":
            match = re.match(r"\x1b\[([\d;]*)([A-Za-z])", raw[i:])
            assert match, f"unexpected escape sequence {raw[i:i + 8]!r}"
            number, command = match.groups()
            if command == "K":
                del lines[-1][col:]
            elif command == "D":
                col = max(0, col - int(number or 1))
            # anything else (colours) changes nothing on the screen's text
            i += match.end()
            continue
        if ch == "\n":
            lines.append([])
            col = 0
        elif ch == "\r":
            col = 0
        else:
            line = lines[-1]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
        i += 1
    return ["".join(line).rstrip() for line in lines]


def _run_in_pty(args: list[str], cwd: Path) -> str:
    """Run pytest with stdout on a pseudo-terminal of 100 columns; return everything it wrote."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm", "PY_COLORS": "0"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=600)
    os.close(controller)
    return b"".join(chunks).decode("utf-8", "replace")


def test_default_verbosity_into_a_pipe_keeps_the_letters_on_one_line(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_p=TWO_TESTS)
    result = sme2_project.runpytest_subprocess("-p", "no:cacheprovider", "--sme2-artifacts-dir=artifacts")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert re.search(r"^test_p\.py \.\. +\[100%\]$", out, re.MULTILINE), out
    assert "sme2: running" not in out  # a status cannot be erased in a pipe; -v shows lines
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    assert (session / "progress.log").read_text().count("timed runs ...") == 2


def test_a_measurement_of_several_processes_says_how_many(sme2_project: pytest.Pytester) -> None:
    """A baseline update (3 processes in this project), or a check sme2_replicas = auto sends to several,
    takes that many times longer: the progress line says why."""
    sme2_project.makepyfile(test_p=TWO_TESTS)
    result = sme2_project.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "--sme2-artifacts-dir=artifacts",
        "--sme2-update-baselines",
        "--sme2-accept-noisy-baselines",
        "-k",
        "test_a",
    )
    result.assert_outcomes(passed=1)
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    log = (session / "progress.log").read_text()
    assert log.count("timed runs in each of 3 fresh processes ...") == 1, log


def test_compare_variants_says_what_it_runs_and_how(sme2_project: pytest.Pytester) -> None:
    """compare_variants announced its two variants nowhere: a real model's pair ran for minutes without a line.
    On the host target (timed runs) the two alternate, and the line says so."""
    sme2_project.makepyfile(
        test_pair="""
import pytest

@pytest.mark.perf(runs=3, warmup=0)
@pytest.mark.model("tiny")
def test_pair(exported_pte, runner, compare_variants):
    compare_variants(exported_pte, runner(threads=1), runner(threads=2), rounds=1)
"""
    )
    result = sme2_project.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-artifacts-dir=artifacts")
    result.assert_outcomes(passed=1)
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    log = (session / "progress.log").read_text()
    assert re.search(r"running tiny \S+ \[host \S+ threads=1\] and \[host \S+ threads=2\] alternating \.\.\.", log), log
    assert re.search(r"threads=2\] done in [\d.]+ s", log), log


def test_verbose_shows_progress_lines_past_the_capture(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_p=TWO_TESTS)
    result = sme2_project.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "sme2: running tiny fp32-xnnpack [[]host sme2=auto threads=1[]]: 1 warmup + 3 timed runs ...",
            "sme2: tiny fp32-xnnpack [[]host sme2=auto threads=1[]] done: 3/3 runs in *",
            "test_p.py::test_a PASSED*",
            "sme2: running tiny fp32-xnnpack *",
            "test_p.py::test_b PASSED*",
        ]
    )
    assert "Captured stdout" not in result.stdout.str()


@needs_binding_etdump
def test_default_verbosity_on_a_terminal_shows_a_status_and_erases_it(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_p=TWO_TESTS)
    raw = _run_in_pty(["-p", "no:cacheprovider"], sme2_project.path)
    assert "sme2: running tiny fp32-xnnpack" in raw, raw[-3000:]  # the status was written
    screen = _render(raw)
    letters = [line for line in screen if line.startswith("test_p.py")]
    assert len(letters) == 1 and re.fullmatch(r"test_p\.py \.\. +\[100%\]", letters[0]), screen
    assert not any("sme2: running" in line or "sme2: exporting" in line for line in screen), screen


@pytest.mark.parametrize(
    ("error", "ended"),
    [
        (KeyboardInterrupt(), "was interrupted"),
        (pytest.exit.Exception("stop"), "was interrupted"),
        (RuntimeError("broken"), "failed"),
    ],
)
def test_a_step_ended_by_ctrl_c_reads_interrupted_not_failed(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, ended: str
) -> None:
    """A user's trial: Ctrl-C mid-export printed "export of mynet fp32-xnnpack failed after 1.0 s"."""
    from pytest_sme2.plugin import progress

    said: list[str] = []
    monkeypatch.setattr(progress, "_progress", lambda config: type("P", (), {"say": staticmethod(said.append)})())
    with pytest.raises(type(error)):
        with progress._step(None, "export of m fp32-xnnpack", "exporting m", "exported m"):  # type: ignore[arg-type]
            raise error
    assert said[0] == "sme2: exporting m ..."
    assert said[1].startswith(f"sme2: export of m fp32-xnnpack {ended} after ") and said[1].endswith(" s")


def _cached(key: str | None) -> object:
    """A profile's stand-in: only the result cache's record, which the run step's end line reads."""
    from types import SimpleNamespace

    return SimpleNamespace(metadata={"result_cache": {"key": key, "cached": True}} if key else {})


@pytest.mark.parametrize(
    ("prefill_key", "decode_key"), [("a1" * 8, "b2" * 8), ("a1" * 8, None)], ids=["both cached", "one cached"]
)
def test_an_llm_run_from_the_result_cache_does_not_say_its_runs_were_done(
    monkeypatch: pytest.MonkeyPatch, prefill_key: str, decode_key: str | None
) -> None:
    """Issue 65: an LLM re-run said "done: 1/1 runs in 9.3 s" where the next line said every counted run came from
    the result cache; the end line now says which came from the cache (each phase is a counted run of its own)."""
    from types import SimpleNamespace

    from pytest_sme2.measure.llm import LlmProfile, LlmSequence
    from pytest_sme2.plugin import progress

    said: list[str] = []
    monkeypatch.setattr(progress, "_progress", lambda config: type("P", (), {"say": staticmethod(said.append)})())
    target = SimpleNamespace(side_by_side=1)  # no ``progress``: a target that does not report runs one by one
    runner = SimpleNamespace(
        spec=SimpleNamespace(runs=1, warmup=0), label="emulated", replicas=1, session=SimpleNamespace(target=target)
    )
    phases = LlmProfile(LlmSequence(4, 2), _cached(prefill_key), _cached(decode_key))  # type: ignore[arg-type]
    with progress.running(None, runner, SimpleNamespace(label="llama")) as step:  # type: ignore[arg-type]
        assert step.ended(phases) is phases
    end = said[-1]
    keys = [k for k in (prefill_key, decode_key) if k]
    assert "done" not in end and "runs in" not in end, end
    assert "from the result cache" in end and all(key in end for key in keys), end
    assert f"{len(keys)} " in end.split("from the result cache")[0], end  # how many came from it
    if len(keys) < 2:
        assert "1 emulated" in end, end  # the phase that really ran is said apart
    else:
        assert "none emulated" in end, end


def test_a_run_that_really_ran_says_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fresh end line is unchanged: ``done: N/N runs``."""
    from types import SimpleNamespace

    from pytest_sme2.plugin import progress

    said: list[str] = []
    monkeypatch.setattr(progress, "_progress", lambda config: type("P", (), {"say": staticmethod(said.append)})())
    runner = SimpleNamespace(
        spec=SimpleNamespace(runs=3, warmup=0), label="host", replicas=1, session=SimpleNamespace(target=object())
    )
    with progress.running(None, runner, SimpleNamespace(label="tiny")) as step:  # type: ignore[arg-type]
        step.ended(_cached(None))
    assert said[-1].startswith("sme2: tiny [host] done: 3/3 runs in ") and "cache" not in said[-1], said
