"""The pytest-sme2 command on real ETDumps of toy_cnn, and on bad inputs (exit 2, clear message)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from pytest_sme2 import Profile, Recipe
from pytest_sme2.cli import main
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.report.entries import build_test_entry
from pytest_sme2.report.summary import SCHEMA_VERSION, session_summary, write_session
from pytest_sme2.run.targets import RunSpec


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> tuple[Profile, Profile]:
    """Two real profiles of toy_cnn: 1 and 2 threads (a real A/B with different runs)."""
    root = tmp_path_factory.mktemp("cli")
    session = Sme2Session(Settings(target="host", cache_dir=shared_export_cache, session_dir=root / "artifacts"))
    session.registry.register_dir(REPO / "models")
    try:
        exported = session.export("toy_cnn", Recipe())
        return tuple(
            Runner(session, RunSpec(runs=6, warmup=1, threads=threads), session.test_dir(f"t{threads}")).profile(
                exported
            )
            for threads in (1, 2)
        )  # type: ignore[return-value]
    finally:
        session.close()


def test_analyze_prints_the_profile_as_tables(
    toy_runs: tuple[Profile, Profile], capsys: pytest.CaptureFixture[str]
) -> None:
    profile = toy_runs[0]
    etdump, etrecord = profile.artifacts["timed_etdump"], profile.artifacts["etrecord"]
    assert main(["analyze", etdump, "--etrecord", etrecord, "--warmup", profile.artifacts["warmup_etdump"]]) == 0
    out = capsys.readouterr().out
    for text in (
        "E2E median",
        "categories:",
        "CONV",
        "top operators:",
        "Convolution (NHWC, F32) IGEMM",
        "portable operators:",
    ):
        assert text in out
    load_init = f"load {profile.load_ms:.3f} ms, init {profile.init_ms:.3f} ms"
    assert load_init in out, out  # taken from the warmup ETDump, which holds them
    assert main(["analyze", etdump, "--json"]) == 0
    digest = json.loads(capsys.readouterr().out)
    assert digest["runs"] == 6 and len(digest["e2e_ms"]) == 6
    assert digest["latency"]["median_ms"] == pytest.approx(profile.median_ms)


@pytest.mark.filterwarnings("ignore::pytest_sme2.errors.OneProcessIntervalWarning")  # one process a side, on purpose
def test_compare_gives_speedup_with_interval_and_deltas(
    toy_runs: tuple[Profile, Profile], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = (p.artifacts["timed_etdump"] for p in toy_runs)
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    expected = toy_runs[1].speedup_over(toy_runs[0])
    assert (
        f"E2E speedup of B over A (median A / median B, 95% bootstrap CI): {expected.value:.2f}x "
        f"[{expected.low:.2f}, {expected.high:.2f}]" in out
    )
    assert "CONV" in out and "Convolution (NHWC, F32) IGEMM" in out
    assert main(["compare", a, b, "--min-speedup", "1000"]) == 1
    assert "below --min-speedup" in capsys.readouterr().err


def test_report_rebuilds_html_and_markdown(
    toy_runs: tuple[Profile, Profile], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "session"
    write_session(
        session_summary([{**build_test_entry("t.py::t", list(toy_runs)), "outcome": "passed"}], session), session
    )
    (session / "report.html").unlink()
    (session / "summary.md").unlink()
    assert main(["report", str(session), "--out", str(tmp_path / "out")]) == 0
    assert "toy_cnn fp32-xnnpack" in (tmp_path / "out" / "summary.md").read_text()
    assert (tmp_path / "out" / "report.html").read_text().count("data:image/png;base64,") >= 3
    assert "report.html" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["analyze", "{missing}"], "ETDump {missing} does not exist"),
        (["analyze", "{garbage}"], "{garbage} is not an ETDump"),
        (["analyze", "{tmp}"], "is not a file"),
        (["compare", "{garbage}", "{garbage}"], "{garbage}"),
        (["report", "{tmp}"], "has no summary.json"),
        (["report", "{missing}"], "does not exist"),
        (["report", "{old_schema}"], "has schema_version 0"),
        # The right version, the wrong shape (issue 13, case 5): once a KeyError and exit 1.
        (["report", "{wrong_shape}"], "summary.json is damaged: tests[0] has no 'profiles' list"),
        (["report", "{empty}", "--out", "{garbage}/out"], "cannot write the report into {garbage}/out"),
    ],
)
def test_bad_inputs_exit_2_naming_the_file(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = {
        "missing": str(tmp_path / "nope.etdp"),
        "garbage": str(tmp_path / "garbage.etdp"),
        "tmp": str(tmp_path),
        "old_schema": str(tmp_path / "old"),
        "wrong_shape": str(tmp_path / "wrong"),
        "empty": str(tmp_path / "empty"),
    }
    Path(names["garbage"]).write_bytes(b"not an etdump at all, just text")
    for name, text in (
        ("old_schema", '{"schema_version": 0, "tests": []}'),
        ("wrong_shape", json.dumps({"schema_version": SCHEMA_VERSION, "tests": [{"nodeid": "t.py::t"}]})),
        ("empty", json.dumps({"schema_version": SCHEMA_VERSION, "tests": []})),
    ):
        Path(names[name]).mkdir()
        (Path(names[name]) / "summary.json").write_text(text)
    assert main([arg.format(**names) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert message.format(**names) in err and err.startswith(f"pytest-sme2 {argv[0]}: ")


def test_doctor_lists_what_this_machine_can_do_and_exits_for_ci() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "doctor"], capture_output=True, text=True, timeout=300
    )
    lines = run.stdout.splitlines()
    assert run.returncode in (0, 1), run.stderr
    for name in (
        "torch",
        "executorch",
        "SME2 on this host",
        "native runner",
        "emulated SME2 target",
        "kernel sampling",
        "adb devices",
    ):
        assert any(name in line for line in lines), f"doctor does not report {name!r}:\n{run.stdout}"
    missing = [line for line in lines if line.lstrip().startswith("MISSING")]
    assert run.returncode == (1 if missing else 0)
    for index, line in enumerate(lines):  # every missing piece comes with its fix
        if line.lstrip().startswith("MISSING"):
            assert "fix: " in lines[index + 1]


@pytest.mark.parametrize("bound", ["nan", "inf", "0", "-1", "fast"])
def test_min_speedup_must_be_a_finite_positive_number(bound: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "a.etdp", "b.etdp", "--min-speedup", bound])
    assert exit_info.value.code == 2 and f"--min-speedup: {bound!r} is not a" in capsys.readouterr().err


def test_a_crash_inside_a_command_is_one_message_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sme2.report import commands

    def broken(directory: Path, out_dir: Path | None) -> dict[str, Path]:
        raise KeyError("profiles")

    monkeypatch.setattr(commands, "rebuild_report", broken)
    monkeypatch.delenv("PYTEST_SME2_TRACEBACK", raising=False)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("pytest-sme2 report: internal error KeyError: 'profiles'") and "PYTEST_SME2_TRACEBACK=1" in err
    )
    monkeypatch.setenv("PYTEST_SME2_TRACEBACK", "1")
    with pytest.raises(KeyError):
        main(["report", str(tmp_path)])


def test_unknown_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2


def test_compare_of_emulated_runs_computes_no_speedup_and_says_why(
    toy_runs: tuple[Profile, Profile], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    folders = []
    for name, profile in zip("ab", toy_runs):  # the same files, as if an emulated target had written them
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(profile.artifacts["timed_etdump"], folder / "timed.etdp")
        (folder / "runner.log").write_text("$ /usr/bin/setarch -R /cache/qemu/qemu-aarch64 -cpu max runner\n")
        folders.append(folder / "timed.etdp")
    assert main(["compare", *map(str, folders)]) == 0
    out = capsys.readouterr().out
    assert "E2E speedup" not in out and " ms" not in out  # emulator time is no time: no ms headline either
    assert "compare cannot judge speed from emulated ETDumps" in out and "emulated timing is not hardware timing" in out


def test_compare_shows_the_versions_of_two_runs_side_by_side(
    toy_runs: tuple[Profile, Profile], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upgrade compared (issue 66): each run folder's run.json records the versions that exported and ran it."""
    import shutil

    folders = []
    for name, profile, executorch in zip("ab", toy_runs, ("1.4.1", "1.5.1")):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(profile.artifacts["timed_etdump"], folder / "timed.etdp")
        versions = {"executorch": executorch, "torch": "2.13.0", "torchao": "0.18.0"}
        facts = {"version": 1, "target": {"name": "host", "emulated": False}, "versions": versions}
        (folder / "run.json").write_text(json.dumps(facts))
        folders.append(str(folder / "timed.etdp"))
    assert main(["compare", *folders]) == 0
    out = capsys.readouterr().out
    assert "versions differ, A -> B: executorch 1.4.1 -> 1.5.1 (A: executorch 1.4.1, torch 2.13.0" in out
    assert main(["compare", *folders, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["versions"]["a"]["executorch"] == "1.4.1" and result["versions"]["b"]["executorch"] == "1.5.1"
    assert main(["compare", folders[1], folders[1]]) == 0
    assert "versions (A and B): executorch 1.5.1, torch 2.13.0, torchao 0.18.0" in capsys.readouterr().out


def test_report_of_an_artifacts_folder_lists_its_sessions(
    toy_runs: tuple[Profile, Profile], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "artifacts"
    for stamp in ("20261101-000000-1", "20261102-000000-2"):
        write_session(
            session_summary([build_test_entry("t::x", [toy_runs[0]])], root / f"session-{stamp}"),
            root / f"session-{stamp}",
            html=False,
        )
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert "holds 2 session(s)" in out and out.index("20261101") < out.index("20261102")
    assert f"pytest-sme2 report {root / 'session-20261102-000000-2'}" in out


def test_combined_report_refuses_a_session_twice_and_names_targets_without_a_test(
    toy_runs: tuple[Profile, Profile], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "artifacts"
    first, second = root / "session-20261101-000000-1", root / "session-20261102-000000-2"
    write_session(
        session_summary([build_test_entry("t::x", [toy_runs[0]]), build_test_entry("t::y", [toy_runs[0]])], first),
        first,
        html=False,
    )
    write_session(session_summary([build_test_entry("t::x", [toy_runs[0]])], second), second, html=False)
    assert main(["report", str(root)]) == 0
    listing = capsys.readouterr().out
    assert f"{first}  host (" in listing and ", 2 tests" in listing and ", 1 tests" in listing
    assert main(["report", str(first), str(first / ".." / first.name), "--out", str(tmp_path / "c")]) == 2
    assert f"session {first} is given twice" in capsys.readouterr().err
    assert main(["report", str(first), str(second), "--out", str(tmp_path / "c")]) == 0
    markdown = (tmp_path / "c" / "combined.md").read_text()
    y = markdown[markdown.index("### `t::y`") :]
    assert y.splitlines()[2].startswith("No profile on host (") and y.splitlines()[2].count("host (") == 1
    assert "Emulated targets show" not in markdown  # no session here is emulated


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (
            "emulated",
            "'emulated' is this machine's own target, which `pytest-sme2 doctor` without --sme2-target checks",
        ),
        ("emulatd", "'emulatd' is not a target (targets: adb, adb:SERIAL, auto, emulated, host, local)"),
        ("adb:bad/serial", "'bad/serial' is not a device serial"),
    ],
)
def test_doctor_device_target_other_than_adb_is_a_usage_error(
    target: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's trial: `doctor --sme2-target=emulated` (a valid target) and a typo both printed "MISSING device"
    and exited 1, a finding; they are usage (exit 2) with what --sme2-target means here, before any check runs."""
    assert main(["doctor", f"--sme2-target={target}"]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.out == ""


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """A user's trial: `pytest-sme2 --version` was a usage error."""
    from pytest_sme2 import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"pytest-sme2 {__version__}"


def test_check_says_how_many_of_a_passing_tests_verdicts_were_inconclusive() -> None:
    """A CI owner's trial: `pytest-sme2 check` printed "passed ... (13 verdict(s))" for a test whose latency was
    too disturbed to judge; the terminal's baseline summary said "1 inconclusive"."""
    from pytest_sme2.cli import _verdict_counts
    from pytest_sme2.gate.verdict import Verdict

    def judged(*statuses: str) -> list[dict]:
        return [Verdict("latency", status, "m", f"check {i}").as_dict() for i, status in enumerate(statuses)]

    assert (
        _verdict_counts(judged("ok", "inconclusive", "ok", "improvement", "inconclusive"))
        == "5 verdict(s), 1 improvement, 2 inconclusive"
    )
    assert _verdict_counts(judged("ok")) == "1 verdict(s)"
    # the status is read, never the text: a message that reads like another status counts as its own
    assert (
        _verdict_counts([Verdict("latency", "ok", "m", "[inconclusive] said the message").as_dict()]) == "1 verdict(s)"
    )
