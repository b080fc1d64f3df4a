"""What the reports show of emulated runs (issue 23, "Output that misleads"): emulated time is not time.

The synthetic run below is laid out by hand. Its emulator times change between
the two runs, as qemu's do; its counted instructions do not:

  event                                   time run 1 / run 2 (us)   instructions
  Method::execute                         1000 / 1400               10000
  DELEGATE_CALL                            800 / 1200                6500
    Convolution (NHWC, PF32) IGEMM #1      500 /  900                1000  (10%)
    Transpose (ND, X32) #1                 200 /  200                5000  (50%)
  OPERATOR_CALL                             80 /   80                2100
    native_layer_norm                       60 /   60                2000  (20%)

By time the convolution is the heaviest operator (50% and 64%), by counted
instructions the lightest of the three: the transpose (50%), then the layer
norm (20%), then the convolution (10%).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_etdump import RunSpec, emulated_metadata, write_counts, write_etdump

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, InstructionTrace
from pytest_sme2.profile.profile import Profile
from pytest_sme2.report.commands import analyze, compare_files, emulated_run
from pytest_sme2.report.entries import build_test_entry
from pytest_sme2.report.text import entry_text, profile_text
from pytest_sme2.run.targets.base import RUN_FACTS, RUNNER_LOG

CONV, TRANSPOSE, LAYER_NORM = (
    "Convolution (NHWC, PF32) IGEMM #1",
    "Transpose (ND, X32) #1",
    "native_call_native_layer_norm.out",
)
COUNTS = {
    "Method::execute": 10_000,
    "DELEGATE_CALL": 6_500,
    CONV: 1_000,
    TRANSPOSE: 5_000,
    "OPERATOR_CALL": 2_100,
    LAYER_NORM: 2_000,
}


def _run(e2e_us: int, call_us: int, conv_us: int) -> RunSpec:
    return RunSpec(
        e2e_ns=e2e_us * 1000,
        delegate_call_ns=call_us * 1000,
        delegate_instr=1,
        delegate_ops=[(CONV, conv_us * 1000), (TRANSPOSE, 200_000)],
        portable_ops=[(LAYER_NORM, 60_000, 80_000, 5)],
    )


def _write_counts(etdump: Path, scale: float = 1.0) -> Path:
    """instructions.json beside ``etdump`` from ``COUNTS``: a tenth of the convolution's are FP32 outer products."""

    def classes(name: str) -> dict[str, int]:
        value = int(COUNTS.get(name, 0) * scale)
        sme = value // 10 if name == CONV else 0
        return {"mopa_fp32": sme, "scalar": value - sme}

    return write_counts(etdump, {name: classes(name) for name in COUNTS})


def _emulated_etdump(folder: Path, counted: bool, scale: float = 1.0, slow: int = 0) -> Path:
    """An emulated run's folder: ETDump, runner.log with the qemu command, and (``counted``) instruction counts."""
    folder.mkdir(parents=True)
    etdump = write_etdump(
        folder / "timed.etdp", [_run(1000 + slow, 800 + slow, 500 + slow), _run(1400 + slow, 1200 + slow, 900 + slow)]
    )
    (folder / RUNNER_LOG).write_text("$ qemu-aarch64 -cpu max,sme=on ./executor_runner --model_path m.pte\n")
    if counted:
        _write_counts(etdump, scale)
    return etdump


def _profile(tmp_path: Path, counted: bool, sme2: bool = True) -> Profile:
    etdump = _emulated_etdump(tmp_path / f"run-{counted}-{sme2}", counted)
    instructions = InstructionTrace.from_counts(etdump.parent / COUNTS_FILE, etdump, None) if counted else None
    return Profile.from_etdump(
        etdump,
        model="m",
        recipe="fp32-xnnpack",
        variant=f"emulated sme2={sme2}",
        metadata=emulated_metadata(sme2, svl_bits=None),
        instructions=instructions,
    )


def _operator_lines(text: str) -> list[tuple[float, str]]:
    """(share, operator) of the per-operator lines of a profile's text, in the order shown."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%") and "[" in line:
            found.append((float(parts[0].rstrip("%")), parts[1]))
    return found


def test_terminal_operator_lines_of_a_counted_emulated_run_are_instruction_shares_sorted(tmp_path: Path) -> None:
    text = entry_text(build_test_entry("t.py::t", [_profile(tmp_path, counted=True)]))
    lines = _operator_lines(text)
    assert [share for share, _ in lines] == [50.0, 20.0, 10.0]  # of counted instructions, heaviest first
    assert [name for _, name in lines] == ["Transpose", "native_call_native_layer_norm.out", "Convolution"]
    assert "counted instructions" in text


def test_terminal_shows_no_emulator_time_shares_per_operator_without_counts(tmp_path: Path) -> None:
    text = entry_text(build_test_entry("t.py::t", [_profile(tmp_path, counted=False)]))
    assert _operator_lines(text) == []
    assert "per-operator shares not shown" in text


def test_e2e_line_of_an_emulated_run_shows_no_latency_interval_or_cv(tmp_path: Path) -> None:
    for counted in (True, False):
        text = entry_text(build_test_entry("t.py::t", [_profile(tmp_path / str(counted), counted=counted)]))
        assert "E2E median" not in text and "CV" not in text and "95% CI" not in text and " ms" not in text, text
    counted_text = entry_text(build_test_entry("t.py::t", [_profile(tmp_path / "again", counted=True)]))
    assert "10,000 instructions per inference" in counted_text


def test_one_hardware_run_gets_no_interval_and_no_cv(tmp_path: Path) -> None:
    path = write_etdump(tmp_path / "one.etdp", [_run(1000, 800, 500)])
    profile = Profile.from_etdump(
        path, model="m", recipe="fp32", variant="host", metadata={"target": {"name": "host", "emulated": False}}
    )
    text = profile_text(build_test_entry("t.py::t", [profile])["profiles"][0])
    assert "E2E 1.000 ms, 1 run" in text
    assert "CI" not in text and "CV" not in text and "p10" not in text


def test_analyze_of_a_counted_emulated_run_sorts_by_instructions_and_shows_no_ms(tmp_path: Path) -> None:
    etdump = _emulated_etdump(tmp_path / "run", counted=True)
    text = analyze(etdump, None, None, as_json=False)
    top = text.split("top operators:")[1].split("portable operators:")[0]
    order = [name for name in (TRANSPOSE, LAYER_NORM, CONV) if name in top]
    assert order == [TRANSPOSE, LAYER_NORM, CONV]
    assert top.index(TRANSPOSE) < top.index(LAYER_NORM) < top.index(CONV)
    assert "50.0%" in top and "median ms" not in top
    assert " ms" not in text.split("categories:")[1]


def test_analyze_of_an_uncounted_emulated_run_shows_no_emulator_time_per_operator(tmp_path: Path) -> None:
    etdump = _emulated_etdump(tmp_path / "run", counted=False)
    text = analyze(etdump, None, None, as_json=False)
    assert "per-operator shares not shown" in text
    assert CONV not in text.split("top operators:")[1].split("portable operators:")[0]


def _facts(folder: Path, emulated: object) -> None:
    (folder / RUN_FACTS).write_text(json.dumps({"version": 1, "target": {"name": "x", "emulated": emulated}}))


def test_the_run_folder_says_where_it_ran_and_its_word_wins_over_the_log(tmp_path: Path) -> None:
    etdump = _emulated_etdump(tmp_path / "run", counted=True)
    assert emulated_run(etdump)  # a folder from before run.json: its runner.log shows qemu
    (etdump.parent / RUNNER_LOG).unlink()
    _facts(etdump.parent, True)
    assert emulated_run(etdump)  # no log: run.json says emulated
    assert "instructions" in analyze(etdump, None, None, as_json=False).split("categories:")[1]
    (etdump.parent / RUNNER_LOG).write_text("$ qemu-aarch64 -cpu max ./runner\n")
    _facts(etdump.parent, False)
    assert not emulated_run(etdump)  # run.json says a host ran it, whatever the log's first line


@pytest.mark.parametrize("text", ["{not json", "[]", '{"target": {"emulated": "yes"}}'])
def test_a_damaged_run_json_is_named_with_the_way_out(tmp_path: Path, text: str) -> None:
    etdump = _emulated_etdump(tmp_path / "run", counted=False)
    (etdump.parent / RUN_FACTS).write_text(text)
    with pytest.raises(UsageError, match=r"run\.json.*move it away"):
        emulated_run(etdump)


def test_compare_of_emulated_etdumps_has_no_ms_headline(tmp_path: Path) -> None:
    off = _emulated_etdump(tmp_path / "off", counted=True, scale=2.0, slow=-300)  # less emulator time, more work
    on = _emulated_etdump(tmp_path / "on", counted=True)
    text, _ = compare_files(off, on, as_json=False)
    head = "\n".join(text.splitlines()[:3])
    assert " ms" not in head and "median" not in head
    assert "20,000 instructions per inference" in head and "10,000 instructions per inference" in head
    assert "2.00x fewer instructions" in head
    uncounted_off = _emulated_etdump(tmp_path / "off2", counted=False)
    uncounted_on = _emulated_etdump(tmp_path / "on2", counted=False)
    text, _ = compare_files(uncounted_off, uncounted_on, as_json=False)
    assert " ms" not in text and "cannot judge speed from emulated ETDumps" in text


@pytest.mark.parametrize("counted", [True, False])
def test_sme_path_and_sme_instruction_share_have_distinct_names_in_every_report(tmp_path: Path, counted: bool) -> None:
    from pytest_sme2.report.html import entry_html
    from pytest_sme2.report.markdown import session_markdown
    from pytest_sme2.report.summary import session_summary

    test_entry = build_test_entry("t.py::t", [_profile(tmp_path, counted=counted)])
    html = entry_html(test_entry)
    markdown = session_markdown(session_summary([test_entry], None))
    terminal = entry_text(test_entry)
    for output in (html, markdown, terminal):
        assert "SME share of CONV+GEMM" not in output and "SME path share" not in output
        assert "SME path (share of CONV+GEMM" in output
        assert ("SME instructions (share of CONV+GEMM instructions that are SME encodings)" in output) == counted


def test_an_uncounted_emulated_run_calls_its_time_shares_emulator_time(tmp_path: Path) -> None:
    text = entry_text(build_test_entry("t.py::t", [_profile(tmp_path, counted=False)]))
    assert "of time" not in text and "CONV+GEMM time" not in text
    # no export behind this synthetic run, so no share of graph nodes: the run's share, named as the run's
    assert "delegation: 82.9% of emulator time (not time) (this run)" in text


def _timed_keys(value: object, where: str = "") -> list[str]:
    """Where a key named in ms (``*_ms``, ``*_ms_*``) holds a value, outside metadata and artifact paths."""
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("metadata", "artifacts"):
                continue
            if (key.endswith("_ms") or "_ms_" in key) and inner not in (None, [], {}):
                found.append(f"{where}.{key}")
            found += _timed_keys(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _timed_keys(inner, f"{where}[{i}]")
    return found


@pytest.mark.parametrize("counted", [True, False])
def test_summary_json_of_an_emulated_run_holds_no_emulator_milliseconds(tmp_path: Path, counted: bool) -> None:
    """summary.json is read by programs, which do not read docs: no latency key, no per-run or per-operator ms."""
    entry = build_test_entry("t.py::t", [_profile(tmp_path, counted=counted)])
    profile = json.loads(json.dumps(entry["profiles"][0], default=str))
    assert profile["emulated"] is True and profile["runs"] == 2
    assert profile["latency"] is None and profile["e2e_ms"] is None and profile["wall_latency"] is None
    assert profile["load_ms"] is None and profile["init_ms"] is None
    for op in profile["top_ops"] + profile["portable_ops"]:
        assert not {"median_ms", "mean_ms", "total_ms", "median_ms_per_run", "share"} & set(op), op
    assert _timed_keys(profile) == []
    if counted:
        assert [op["instructions"] for op in profile["top_ops"]][:1] == [5_000.0]


def test_a_test_reading_latency_of_an_emulated_profile_is_skipped_as_a_timing_check(tmp_path: Path) -> None:
    from pytest_sme2.errors import EmulatedTimingError

    profile = _profile(tmp_path, counted=True)
    for read in (lambda: profile.median_ms, lambda: profile.latency):
        # the project's own error, not pytest's skip: a Profile works outside pytest (the plugin maps it to a skip)
        with pytest.raises(EmulatedTimingError, match="not hardware timing"):
            read()
    assert (
        repr(profile) == "Profile(m fp32-xnnpack [emulated sme2=True]: emulated, 10,000 instructions per "
        "inference, 2 runs)"
    )


def test_html_of_an_emulated_run_shows_no_ms_of_its_portable_operators(tmp_path: Path) -> None:
    from pytest_sme2.report.html import entry_html

    for counted in (True, False):
        html = entry_html(build_test_entry("t.py::t", [_profile(tmp_path / str(counted), counted=counted)]))
        assert "native_call_native_layer_norm.out" in html
        assert "ms per run" not in html and "Latency per run" not in html and "median ms" not in html, counted
    counted_html = entry_html(build_test_entry("t.py::t", [_profile(tmp_path / "again", counted=True)]))
    assert "instructions per inference" in counted_html and "<td>2.0 k</td>" in counted_html


def test_min_speedup_of_emulated_etdumps_is_not_judged_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's trial: compare --min-speedup on emulated ETDumps exited 1 ("below --min-speedup"), a finding, where
    nothing was measured; by the CLI's contract that is 2 (the command could not do its job)."""
    from pytest_sme2.cli import main

    off = _emulated_etdump(tmp_path / "off", counted=True, scale=2.0)
    on = _emulated_etdump(tmp_path / "on", counted=True)
    assert main(["compare", str(off), str(on), "--min-speedup", "2"]) == 2
    err = capsys.readouterr().err
    assert "--min-speedup 2 not judged" in err and "emulated target" in err and "below" not in err


def test_an_etdump_copied_out_of_its_run_folder_is_not_read_as_latency_without_a_warning(tmp_path: Path) -> None:
    """A user's trial: an emulated ETDump copied out of its folder (no run.json, no runner.log) read as
    "E2E 180.043 ms" and compare gave a 0.98x "speedup"; where it ran cannot be known then, and the output says so."""
    import shutil

    etdump = _emulated_etdump(tmp_path / "run", counted=False)
    assert "WARNING" not in analyze(etdump, None, None, as_json=False)  # its folder says: emulated
    alone = tmp_path / "copied"
    alone.mkdir()
    shutil.copy(etdump, alone / "timed.etdp")
    text = analyze(alone / "timed.etdp", None, None, as_json=False)
    assert text.startswith(f"WARNING: {alone / 'timed.etdp'} has no run.json or runner.log beside it")
    assert "emulator time, not latency" in text
    other = tmp_path / "copied2"
    other.mkdir()
    shutil.copy(etdump, other / "timed.etdp")
    compared, _ = compare_files(alone / "timed.etdp", other / "timed.etdp", as_json=False)
    assert compared.count("where it ran is unknown") == 2


def test_a_comparison_of_uncounted_emulated_runs_holds_no_emulator_milliseconds(tmp_path: Path) -> None:
    """The review of the change above: an on/off comparison of emulated runs without counts still carried
    emulator ms per category and operator (summary.json, compare --json, an HTML table of them)."""
    from pytest_sme2.report.html import entry_html

    entry = build_test_entry(
        "t.py::t",
        [_profile(tmp_path / "on", counted=False, sme2=True), _profile(tmp_path / "off", counted=False, sme2=False)],
    )
    [comparison] = entry["comparisons"]
    rows = comparison["categories"] + comparison["operators"]
    assert rows and all(row["off_median_ms"] is None and row["on_median_ms"] is None for row in rows)
    assert all(k["share"] is None for p in entry["profiles"] for k in p["kernels"])  # no emulator-time share
    assert "median ms" not in entry_html(entry)
