"""Report writers on synthetic ETDumps whose every event time is known.

The two variants below are laid out by hand (tests/helpers_etdump.py), and
every expected number is worked out from those times in the comments, not
taken from the code under test:

SME2 off, 2 runs: Method::execute 1.0 ms; DELEGATE_CALL 0.8 ms holding
  "Convolution (NHWC, F32) IGEMM #1" 0.5 ms and "Transpose (ND, X32) #1" 0.1 ms;
  then portable native_layer_norm 0.06 ms inside an OPERATOR_CALL of 0.08 ms.
SME2 on, 2 runs: Method::execute 0.5 ms; DELEGATE_CALL 0.3 ms holding
  "Convolution (NHWC, PF32) IGEMM #1" 0.1 ms and the same transpose 0.1 ms;
  the same layer norm.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from helpers_etdump import RunSpec, write_etdump

from pytest_sme2.cli import main
from pytest_sme2.profile.profile import Profile
from pytest_sme2.report.advice import recommendations
from pytest_sme2.report.csv_export import OPS_STATS_COLUMNS, TIMELINE_COLUMNS, write_csvs
from pytest_sme2.report.entries import build_test_entry, verdicts_of
from pytest_sme2.report.html import session_html
from pytest_sme2.report.markdown import session_markdown
from pytest_sme2.report.summary import SCHEMA_VERSION, load_summary, session_summary, write_session
from pytest_sme2.report.table import COLUMNS, columns, summary_rows

CONV_OFF, CONV_ON, TRANSPOSE = (
    "Convolution (NHWC, F32) IGEMM #1",
    "Convolution (NHWC, PF32) IGEMM #1",
    "Transpose (ND, X32) #1",
)
LAYER_NORM = "native_call_native_layer_norm.out"


def _run(e2e_ns: int, call_ns: int, conv: str, conv_ns: int) -> RunSpec:
    return RunSpec(
        e2e_ns=e2e_ns,
        delegate_call_ns=call_ns,
        delegate_instr=1,
        delegate_ops=[(conv, conv_ns), (TRANSPOSE, 100_000)],
        portable_ops=[(LAYER_NORM, 60_000, 80_000, 5)],
    )


def _profile(path: Path, sme2: bool, emulated: bool = False) -> Profile:
    if sme2:
        write_etdump(path, [_run(500_000, 300_000, CONV_ON, 100_000)] * 2)
    else:
        write_etdump(path, [_run(1_000_000, 800_000, CONV_OFF, 500_000)] * 2)
    return Profile.from_etdump(
        path,
        model="m",
        recipe="fp32-xnnpack",
        variant=f"host sme2={'on' if sme2 else 'off'} threads=1",
        metadata={"run": {"sme2": sme2, "threads": 1}, "target": {"name": "host", "emulated": emulated}},
        artifacts={"timed_etdump": str(path)},
    )


@pytest.fixture
def entry(tmp_path: Path) -> dict:
    return build_test_entry(
        "test_m.py::test_m", [_profile(tmp_path / "on.etdp", True), _profile(tmp_path / "off.etdp", False)]
    )


def test_on_off_comparison_numbers(entry: dict) -> None:
    (comparison,) = entry["comparisons"]
    assert comparison["speedup"]["value"] == pytest.approx(2.0)  # 1.0 ms / 0.5 ms
    cats = {c["category"]: c for c in comparison["categories"]}
    assert cats["CONV"]["off_share"] == pytest.approx(0.5) and cats["CONV"]["on_share"] == pytest.approx(0.2)
    assert cats["CONV"]["speedup"]["value"] == pytest.approx(5.0)  # 0.5 ms / 0.1 ms
    # OTHER = E2E - named: off 1.0 - 0.5 - 0.1 = 0.4 (layer norm is OTHER), on 0.5 - 0.1 - 0.1 = 0.3 -> 60%
    assert cats["OTHER"]["off_share"] == pytest.approx(0.4) and cats["OTHER"]["on_share"] == pytest.approx(0.6)
    assert (comparison["bottleneck_off"], comparison["bottleneck_on"]) == ("CONV", "OTHER")
    ops = {op["op"]: op for op in comparison["operators"]}
    conv = ops["Convolution (NHWC, F32) IGEMM"]  # matched across the kernel-path change by kind and kernel
    assert conv["on_op"] == "Convolution (NHWC, PF32) IGEMM" and conv["on_packed"] and not conv["off_packed"]
    assert conv["speedup"]["value"] == pytest.approx(5.0)
    assert ops["Transpose (ND, X32)"]["speedup"]["value"] == pytest.approx(1.0)
    assert ops["Transpose (ND, X32)"]["on_share"] == pytest.approx(0.2)  # 0.1 / 0.5


def test_profile_entries_show_kernels_and_portable_ops_worth_delegating(entry: dict) -> None:
    on, off = entry["profiles"]
    assert on["e2e_ms"] == pytest.approx([0.5, 0.5])
    assert [(k["op"], k["packed"]) for k in on["kernels"]] == [("Convolution (NHWC, PF32) IGEMM", True)]
    assert on["sme_path_share"] == pytest.approx(1.0) and off["sme_path_share"] == pytest.approx(0.0)
    # layer norm 0.06 ms: 12% of 0.5 ms (on) and 6% of 1.0 ms (off), both above the 5% line
    assert on["worth_delegating"] == [LAYER_NORM] and off["worth_delegating"] == [LAYER_NORM]


def test_recommendations_name_their_evidence(entry: dict) -> None:
    assert recommendations(entry) == [
        # DELEGATE_CALL 0.3 of 0.5 ms (on) and 0.8 of 1.0 ms (off); SME path is 100% on, so no SME advice
        "host sme2=on threads=1: only 60% of E2E time is delegated; see the portable operators.",
        "host sme2=off threads=1: only 80% of E2E time is delegated; see the portable operators.",
        # 0.06 ms of 0.5 ms on, the larger of its two shares
        "Delegate `native_call_native_layer_norm.out`: it runs in the portable runtime and takes 12% of E2E time "
        "on host sme2=on threads=1.",
        # CONV 0.5 -> 0.1 ms (5x faster, 50% -> 20%), OTHER 0.4 -> 0.3 ms (1.33x) and 60% with SME2 on (see
        # test_on_off_comparison_numbers): CONV fell, OTHER did not grow (issue 65: "moved from" read as if it had)
        "With SME2, CONV is 5.00x faster (50% -> 20% of E2E time) and OTHER (1.33x faster) is now the largest "
        "(60%): optimise OTHER next (pooling, normalisation, softmax, portable kernels and delegate overhead).",
    ]


def test_summary_table_and_markdown(entry: dict, tmp_path: Path) -> None:
    rows = summary_rows([entry])
    assert len(rows) == 2 and len(rows[0]) == len(COLUMNS)
    on_row, off_row = rows
    assert on_row[1:4] == ["m fp32-xnnpack", "host sme2=on threads=1", "0.500"]
    assert on_row[4].startswith("2.00x [")
    assert on_row[5] == "CONV 50% -> 20% (5.00x faster); OTHER now 60%"  # CONV fell, OTHER took its place
    # no graph-node facts here: the run's share, saying it is one (DELEGATE_CALL 0.3 of 0.5 ms)
    assert on_row[6] == "60.0% of time (run)"
    assert on_row[7] == "no baseline check"
    assert off_row[4] == "" and off_row[5] == "CONV 50%" and off_row[6] == "80.0% of time (run)"
    # with them, the program's share of graph nodes is what the column shows, the same for SME2 on and off
    with_nodes = {**entry, "profiles": [{**p, "node_delegation_coverage": 0.75} for p in entry["profiles"]]}
    assert [row[6] for row in summary_rows([with_nodes])] == ["75.0% of nodes", "75.0% of nodes"]
    text = session_markdown(session_summary([entry], tmp_path))
    assert "| test_m | m fp32-xnnpack | host sme2=on threads=1 | 0.500 | 2.00x [" in text
    assert "portable ops worth delegating: `native_call_native_layer_norm.out`" in text


def test_markdown_shows_arrows_as_arrows_and_html_escapes_them(entry: dict, tmp_path: Path) -> None:
    """Issue 65: summary.md showed ``CONV 50% -&gt; OTHER 60%``: HTML's escaping in markdown, where a reader of the
    file (and any renderer that does not decode entities in table cells) sees the entity. HTML still escapes."""
    [shift] = {row[5] for row in summary_rows([entry]) if "->" in row[5]}  # the on row's category shift
    summary = session_summary([entry], tmp_path)
    markdown = session_markdown(summary)
    assert f"| {shift} |" in markdown and "&gt;" not in markdown and "&amp;" not in markdown
    page = session_html(summary)
    assert shift.replace(">", "&gt;") in page and shift not in page


def test_markdown_text_escapes_markup_with_backslashes_only() -> None:
    """Markdown's own escape for what would be markup (a tag, an entity, a blockquote), and no other character
    changed: ``->`` and ``R&D`` read as they are in the file and rendered alike."""
    from pytest_sme2.report.escape import text

    assert text("P=16 -> P=12, R&D") == "P=16 -> P=12, R&D"
    assert text("<b>x</b>") == "\\<b>x\\</b>"  # no tag: each "<" escaped
    assert text("&lt;b&gt; &#60;") == "\\&lt;b\\&gt; \\&#60;"  # shown as typed, not decoded into "<"
    assert text("> quoted") == "\\> quoted" and text("a > b") == "a > b"  # a blockquote only at the start


def test_emulated_records_label_time_and_give_no_speedup(tmp_path: Path) -> None:
    entry = build_test_entry(
        "t.py::t",
        [_profile(tmp_path / "on.etdp", True, emulated=True), _profile(tmp_path / "off.etdp", False, emulated=True)],
    )
    (comparison,) = entry["comparisons"]
    assert comparison["speedup"] is None and all(c["speedup"] is None for c in comparison["categories"])
    on_row = summary_rows([entry])[0]
    # emulated time is no latency: an emulated run without instruction counts has no size in the table
    assert on_row[3] == "n/a (emulated, not counted)" and on_row[4] == "n/a (emulated)"
    assert "0.500" not in session_markdown(session_summary([entry], tmp_path))
    page = session_html(session_summary([entry], tmp_path))
    assert "EMULATED target" in page and "Convolution (NHWC, PF32) IGEMM" in page


def test_csv_exports_use_the_kits_columns_and_event_times(tmp_path: Path) -> None:
    etdump = write_etdump(tmp_path / "off.etdp", [_run(1_000_000, 800_000, CONV_OFF, 500_000)] * 2)
    paths = write_csvs(etdump, tmp_path, "m_off", model_id="m fp32")
    with open(paths["timeline_csv"], newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == TIMELINE_COLUMNS
        timeline = list(reader)
    assert len(timeline) == 12  # conv, transpose, DELEGATE_CALL, layer norm, OPERATOR_CALL, Method::execute x 2 runs
    conv = [r for r in timeline if r["name"] == CONV_OFF]
    assert [r["run_index"] for r in conv] == ["0", "1"]
    assert float(conv[0]["duration_ms"]) == pytest.approx(0.5)
    assert conv[0]["type"] == "Convolution (NHWC, F32) IGEMM" and conv[0]["delegate_backend"] == "XnnpackBackend"
    # run 0 starts at 0: DELEGATE_CALL at 1 us (one gap), its first op one gap later
    assert float(conv[0]["start_us"]) == pytest.approx(2.0) and float(conv[0]["end_us"]) == pytest.approx(502.0)
    # kit semantics: share of the sum of all of the run's rows, 0.5 + 0.1 + 0.8 + 0.06 + 0.08 + 1.0 = 2.54 ms
    assert float(conv[0]["pct_total"]) == pytest.approx(0.5 / 2.54 * 100)
    execute = [r for r in timeline if r["name"] == "Method::execute"]
    assert execute[0]["delegate_backend"] == "portable" and float(execute[1]["duration_ms"]) == pytest.approx(1.0)
    with open(paths["ops_stats_csv"], newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == OPS_STATS_COLUMNS
        stats = {r["name"]: r for r in reader}
    assert stats["Method::execute"]["count"] == "1" and float(stats["Method::execute"]["total_ms"]) == pytest.approx(
        1.0
    )
    conv_stats = stats["Convolution (NHWC, F32) IGEMM"]
    assert conv_stats["model_id"] == "m fp32" and float(conv_stats["avg_ms"]) == pytest.approx(0.5)
    assert float(conv_stats["pct_total"]) == pytest.approx(0.5 / 2.54 * 100)


def test_the_timeline_is_written_a_bounded_chunk_at_a_time_with_each_run_numbered_from_its_own_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A many-run session's timeline is streamed (issue 64: 150,000 runs held 2.2 GB as a list of dicts): with
    chunks of 4 rows, runs of 6 rows straddle every chunk, and each row still has its run's place and share."""
    from pytest_sme2.report import csv_export

    etdump = write_etdump(tmp_path / "off.etdp", [_run(1_000_000, 800_000, CONV_OFF, 500_000)] * 3)
    whole = Path(write_csvs(etdump, tmp_path / "whole", "m", model_id="m")["timeline_csv"]).read_bytes()
    monkeypatch.setattr(csv_export, "_CHUNK_EVENTS", 4)
    chunked = Path(write_csvs(etdump, tmp_path / "chunked", "m", model_id="m")["timeline_csv"]).read_bytes()
    assert chunked == whole
    with open(tmp_path / "chunked" / "m_all_runs_timeline.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["node_id"] for r in rows] == [str(i) for i in range(6)] * 3
    assert [r["run_index"] for r in rows] == [str(i // 6) for i in range(18)]
    for run in "012":
        assert sum(float(r["pct_total"]) for r in rows if r["run_index"] == run) == pytest.approx(100.0)


def test_a_bounded_timeline_holds_the_first_runs_and_the_ops_stats_all(tmp_path: Path) -> None:
    # three runs whose conv takes 0.2, 0.4 and 0.9 ms: the stats' mean is all three's, 0.5 ms
    runs = [_run(2_000_000, 1_500_000, CONV_OFF, ns) for ns in (200_000, 400_000, 900_000)]
    etdump = write_etdump(tmp_path / "off.etdp", runs)
    paths = write_csvs(etdump, tmp_path, "m", model_id="m", timeline_runs=2)
    assert paths["timeline_runs"] == "2 of 3"
    with open(paths["timeline_csv"], newline="") as handle:
        assert sorted({r["run_index"] for r in csv.DictReader(handle)}) == ["0", "1"]
    with open(paths["ops_stats_csv"], newline="") as handle:
        conv = next(r for r in csv.DictReader(handle) if r["name"] == "Convolution (NHWC, F32) IGEMM")
    assert float(conv["avg_ms"]) == pytest.approx(0.5)
    assert "timeline_runs" not in write_csvs(etdump, tmp_path / "all", "m", model_id="m", timeline_runs=3)


def test_summary_json_round_trip_and_report_rebuild(
    entry: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "session"
    entry = {**entry, "outcome": "passed", "verdicts": [{"verdict": "ok", "message": "within 10%"}]}
    paths = write_session(session_summary([entry], session), session)
    data = json.loads(paths["json"].read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["tests"][0]["nodeid"] == "test_m.py::test_m"
    assert load_summary(session)["tests"][0]["verdicts"] == [{"verdict": "ok", "message": "within 10%"}]
    paths["html"].unlink()
    assert main(["report", str(session)]) == 0
    page = (session / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') >= 3 and "within 10%" in page
    assert "http://" not in page and "https://" not in page
    assert "summary.md" in capsys.readouterr().out


def test_verdicts_are_read_from_both_documented_properties() -> None:
    verdicts = verdicts_of(
        [
            ("sme2_verdicts", {"verdict": "regression", "message": "12% slower"}),
            ("sme2_baseline", {"failed": [], "missing": ["no baseline for x"], "written": [], "verdicts": []}),
            ("other", "ignored"),
        ]
    )
    assert verdicts == [
        {"verdict": "regression", "message": "12% slower"},
        {"verdict": "no baseline", "message": "no baseline for x"},
    ]


def test_sme2_variant_without_sme_kernels_is_called_out(tmp_path: Path) -> None:
    path = write_etdump(tmp_path / "on.etdp", [_run(1_000_000, 800_000, CONV_OFF, 500_000)] * 2)  # F32 kernels only
    profile = Profile.from_etdump(
        path,
        model="m",
        recipe="fp32-xnnpack",
        variant="host sme2=on threads=1",
        metadata={"run": {"sme2": True, "threads": 1}},
    )
    advice = recommendations(build_test_entry("t.py::t", [profile]))
    assert advice[0] == (
        "host sme2=on threads=1: only 0% of CONV+GEMM time ran packed SME kernels (PF32/PF16/PQS8; "
        "QP8 is not SME evidence); check that the dtype has SME2 kernels and the CPU really has SME2."
    )


def test_sme_path_advice_agrees_with_the_kernel_trace(tmp_path: Path) -> None:
    """Names without packed formats, but SME kernels executed (int8 dynamic QP8): no "0% ran SME" claim."""
    path = write_etdump(tmp_path / "on.etdp", [_run(1_000_000, 800_000, CONV_OFF, 500_000)] * 2)
    traced = {
        "sme_kernels": ["kai_run_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa"],
        "sme2_kernels": [],
        "functions": 1,
    }
    profile = Profile.from_etdump(
        path,
        model="m",
        recipe="int8-dynamic-xnnpack",
        variant="emulated sme2=on threads=1",
        metadata={"run": {"sme2": True, "threads": 1}, "kernel_trace": traced},
    )
    advice = recommendations(build_test_entry("t.py::t", [profile]))
    assert not any("only 0%" in line for line in advice)
    assert advice[0].startswith(
        "emulated sme2=on threads=1: 0% of CONV+GEMM time is in operators with packed SME "
        "formats (PF32/PF16/PQS8), and the kernel trace shows 1 SME/SME2 kernel(s) executed"
    )
    untraced = Profile.from_etdump(
        path,
        model="m",
        recipe="fp32",
        variant="emulated sme2=on threads=1",
        metadata={
            "run": {"sme2": True, "threads": 1},
            "kernel_trace": {"sme_kernels": [], "sme2_kernels": [], "functions": 1},
        },
    )
    assert "and the kernel trace shows no SME kernel executed" in recommendations(build_test_entry("t", [untraced]))[0]


def test_kernel_trace_evidence_is_shown_when_the_target_traced_kernels(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "on.etdp", True, emulated=True)
    kernels = ["xnn_pf32_gemm_minmax_ukernel_32x32__neonsme2", "kai_run_lhs_pack_f32p2vlx1_f32_sme"]
    profile.metadata["kernel_trace"] = {"sme_kernels": kernels, "sme2_kernels": kernels[:1], "functions": {}}
    entry = build_test_entry("t.py::t", [profile])
    assert entry["profiles"][0]["executed_sme_kernels"] == kernels
    page = session_html(session_summary([entry], tmp_path))
    assert "Kernel trace: 2 SME/SME2 kernel(s) executed" in page and f"<code>{kernels[0]}</code>" in page
    assert "kernel trace: 2 SME/SME2 kernel(s) executed" in session_markdown(session_summary([entry], tmp_path))
    untraced = build_test_entry("t.py::t", [_profile(tmp_path / "off.etdp", False)])
    assert untraced["profiles"][0]["executed_sme_kernels"] is None
    assert "Kernel trace" not in session_html(session_summary([untraced], tmp_path))


def test_html_and_terminal_count_the_same_runs_left_out(entry: dict, tmp_path: Path) -> None:
    from pytest_sme2.report.text import disturbed_text

    # a busy machine: one run disturbed itself, two more after a disturbed reference run (numbers set here)
    profile = dict(entry["profiles"][0], disturbed_runs=1, disturbed_references=2, runs=40)
    assert (
        disturbed_text(profile)
        == " (1 disturbed by the machine, 2 after a disturbed reference run: left out of verdicts)"
    )
    page = session_html(session_summary([dict(entry, profiles=[profile, entry["profiles"][1]])], tmp_path))
    assert "<td>3 of 40 (1 disturbed by the machine, 2 after a disturbed reference run)</td>" in page


def test_report_of_an_untrusted_session_folder_writes_no_link_and_no_markup(entry: dict, tmp_path: Path) -> None:
    """Issue 23 item 2: a shared session folder with ``summary.md -> ~/.bashrc`` and hostile strings in
    summary.json; ``pytest-sme2 report`` must leave the link's target alone and write the strings as text."""
    session = tmp_path / "session"
    hostile_id = "test_m.py::test_m[<img src=x onerror=alert(1)>|`x`]"
    entry = {**entry, "nodeid": hostile_id, "outcome": "passed"}
    write_session(session_summary([entry], session), session, html=False)
    data = json.loads((session / "summary.json").read_text())
    data["target"]["name"] = "x`;touch /tmp/PWNED;#"
    (session / "summary.json").write_text(json.dumps(data))
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("export PATH\n")
    (session / "summary.md").unlink()
    (session / "summary.md").symlink_to(bashrc)
    (session / "report.html").symlink_to(tmp_path / "elsewhere.html")
    assert main(["report", str(session)]) == 0
    assert bashrc.read_text() == "export PATH\n" and not (tmp_path / "elsewhere.html").exists()
    assert not (session / "summary.md").is_symlink() and not (session / "report.html").is_symlink()
    text = (session / "summary.md").read_text()
    outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)  # code spans show their text literally
    # no tag: its "<" escaped with markdown's backslash (an entity showed as "&lt;" to a reader of the file)
    assert re.search(r"(?<!\\)<", outside_code) is None and "\\<img src=x onerror=alert(1)>" in text
    # the target name sits in a code span that its own backtick cannot end: fence of two backticks
    assert "Target ``x`;touch /tmp/PWNED;#``" in text
    heading = next(line for line in text.splitlines() if line.startswith("### "))
    assert heading.startswith("### ``") and "\\|" in heading  # one code span, its pipe escaped for tables
    table_row = next(line for line in text.splitlines() if line.startswith("| test_m[") and "m fp32" in line)
    assert table_row.count(" | ") == len(COLUMNS) - 1  # the id's pipe did not add a column


@pytest.mark.parametrize(
    "hostile",
    ["javascript:alert(1)", " JaVa\tscript:alert(1)", "data:text/html,<b>x</b>", "https://example.invalid/x.etdp"],
)
@pytest.mark.parametrize("session_dir", [None, "session"])
def test_artifact_links_are_only_file_paths(entry: dict, tmp_path: Path, hostile: str, session_dir: str | None) -> None:
    """Issue 23 (weak): a summary.json whose artifact path is a ``javascript:`` (or any non-file) URL,
    with or without ``session_dir``: shown as escaped text, never an href; file paths stay links."""
    profiles = [
        dict(p, artifacts={"timed_etdump": hostile, "plain": "runs/on dir/a:b.etdp", "url": "file:///tmp/x.etdp"})
        for p in entry["profiles"]
    ]
    summary = session_summary([dict(entry, profiles=profiles)], tmp_path / "session")
    summary["session_dir"] = None if session_dir is None else str(tmp_path / session_dir)
    page = session_html(summary)
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs and all(not re.match(r"[a-z][a-z0-9+.-]*:", h, re.I) or h.startswith("file:") for h in hrefs), hrefs
    assert "runs/on%20dir/a%3Ab.etdp" in hrefs[0] or any("a%3Ab.etdp" in h for h in hrefs)
    assert "file:///tmp/x.etdp" in hrefs
    assert "<b>x</b>" not in page
    import html as _html

    assert _html.escape(hostile) in page  # the text is still shown


def test_compare_of_two_different_programs_warns_before_the_speedup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 (weak): ``compare`` of ETDumps of two different programs printed ``6.81x [4.68, 7.97]``
    with no warning. The same program with SME2 on and off (F32 -> PF32 kernels) gives no warning."""
    off, on = tmp_path / "off.etdp", tmp_path / "on.etdp"
    _profile(off, False), _profile(on, True)
    other = tmp_path / "other.etdp"
    write_etdump(
        other,
        [
            RunSpec(
                e2e_ns=150_000,
                delegate_call_ns=100_000,
                delegate_instr=2,
                delegate_ops=[("Fully Connected (NC, F32) GEMM #1", 50_000)],
                portable_ops=[("native_call_softmax.out", 20_000, 30_000, 4)],
            )
        ]
        * 2,
    )
    assert main(["compare", str(off), str(on)]) == 0
    assert "DIFFERENT PROGRAMS" not in capsys.readouterr().out
    assert main(["compare", str(off), str(other)]) == 0
    lines = capsys.readouterr().out.splitlines()
    warning = next(
        i for i, line in enumerate(lines) if line.startswith("WARNING: A and B are ETDumps of DIFFERENT PROGRAMS")
    )
    assert warning < next(i for i, line in enumerate(lines) if "speedup of B over A" in line)
    assert "native_call_softmax.out @4" in lines[warning] and "native_call_native_layer_norm.out @5" in lines[warning]
    assert "Fully Connected" in lines[warning] and "delegate call @2" in lines[warning]
    assert main(["compare", str(off), str(other), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["program_differences"]


def test_deeply_nested_files_are_named_not_internal_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23 (weak): deep nesting said "internal error RecursionError ... This is a bug"."""
    from pytest_sme2.errors import BaselineError
    from pytest_sme2.gate import baselines

    deep = "[" * 200_000 + "]" * 200_000
    session = tmp_path / "session"
    session.mkdir()
    (session / "summary.json").write_text('{"schema_version": %d, "tests": %s}' % (SCHEMA_VERSION, deep))
    assert main(["report", str(session)]) == 2
    err = capsys.readouterr().err
    assert f"{session / 'summary.json'} is nested too deeply" in err and "internal error" not in err
    stored = tmp_path / "baseline.json"
    stored.write_text(deep)
    with pytest.raises(BaselineError, match=rf"baseline {re.escape(str(stored))} cannot be used: nested too deeply"):
        baselines.load(stored)
    assert baselines.stored_test_id(stored) is None


def test_a_cached_counted_run_says_so_with_its_key_everywhere_it_is_shown(entry: dict, tmp_path: Path) -> None:
    """Issue 25: an answer from the result cache must not read like a fresh emulation."""
    from pytest_sme2.report.text import entry_text

    cached = json.loads(json.dumps(entry))
    cached["profiles"][0]["metadata"]["result_cache"] = {"key": "0123abcd4567ef89", "cached": True}
    cached["profiles"][1]["metadata"]["result_cache"] = {"key": "fedc", "cached": False}
    mark = "counted run from the result cache, key 0123abcd4567ef89"
    summary = session_summary([cached], tmp_path)
    for shown in (entry_text(cached), session_markdown(summary), session_html(summary)):
        assert shown.count(mark) == 1, shown
        assert "key fedc" not in shown
    assert "result cache" not in entry_text(entry)


def test_the_size_column_is_named_for_what_its_rows_hold() -> None:
    """Emulated time is not time: a table of counted emulated runs has no "ms" over its column of counts; a table
    of real runs says median ms; a session with both keeps the legend of both."""
    host, emulated = {"profiles": [{"emulated": False}]}, {"profiles": [{"emulated": True}, {"emulated": True}]}
    size = COLUMNS.index("median ms (emulated: instructions)")
    assert columns([host])[size] == "median ms"
    assert columns([emulated])[size] == "instructions per inference (emulated)"
    assert columns([host, emulated])[size] == "median ms (emulated: instructions)"
    assert all(
        len(columns(entries)) == len(COLUMNS) and columns(entries)[:size] == COLUMNS[:size]
        for entries in ([host], [emulated], [host, emulated])
    )


def test_a_ratio_below_one_reads_as_more_instructions_not_fewer() -> None:
    """A user's trial read "0.98x fewer instr" where SME2 on needed more instructions than off."""
    from pytest_sme2.report.table import fewer

    assert fewer(2.0) == "2.00x fewer instr"
    assert fewer(1.0) == "same instr"  # a user's trial read "1.00x fewer instr" for identical counts
    assert fewer(1.0004) == "about the same instr (1.0004x)" and fewer(1.006) == "1.01x fewer instr"
    assert fewer(0.8) == "1.25x more instr"  # 1 / 0.8
    assert fewer(0.5, "instructions") == "2.00x more instructions"
    assert fewer(None) == "n/a"


def test_a_passing_tests_inconclusive_verdict_is_not_shown_as_ok() -> None:
    """A CI owner's trial: a latency check too busy to judge ("[inconclusive] ... 6 undisturbed of 120 runs") was
    "ok" in summary.json, summary.md and the table; the terminal alone counted it. Improvements alike."""
    from pytest_sme2.gate.verdict import Verdict
    from pytest_sme2.report.entries import verdict_text, verdicts_of

    judged = [
        Verdict("share", "ok", "m fp32", "shares within tolerance"),
        Verdict("latency", "inconclusive", "m fp32", "latency not judged: this run has 6 undisturbed of 120 runs"),
        Verdict("latency", "improvement", "m fp32", "relative latency -30.0%"),
        Verdict("load", "skipped", "m fp32", "load not judged"),
    ]
    outcome = {
        "verdicts": [v.as_dict() for v in judged],
        "failed": [],
        "missing": [],
        "written": [],
        "unchanged": [],
        "findings": [],
        "notes": [],
    }
    rows = verdicts_of([("sme2_baseline", outcome)])
    assert [r["verdict"] for r in rows] == ["ok", "inconclusive", "improvement", "ok"]
    assert rows[1]["message"] == "[inconclusive] m fp32: latency not judged: this run has 6 undisturbed of 120 runs"
    assert verdict_text(rows) == "ok, inconclusive, improvement"


DS_CNN = '''
"""The executorch wheel's own MLPerf Tiny DS-CNN keyword spotter."""
import torch
from executorch.examples.models.mlperf_tiny.ds_cnn import DSCNNKWS


def get_eager_model():
    torch.manual_seed(0)
    return DSCNNKWS().eval()


def get_example_inputs():
    torch.manual_seed(1)
    return (torch.rand(1, 1, 49, 10),)
'''


def test_the_wheels_ds_cnn_summary_says_what_sme2_did_to_the_category_that_fell(tmp_path: Path) -> None:
    """Issue 65: ds_cnn's row read "GEMM 46% -> CONV 73%" (as if CONV had grown; its CONV instructions did not
    change). Counted SME2 on and off from the wheel's own model: the GEMMs fall with SME2, CONV is left largest."""
    from helpers_emulated import counted_profiles

    from pytest_sme2.report.table import category_shift

    on, off = counted_profiles(tmp_path, "ds_cnn", [True, False], source=DS_CNN)
    [comparison] = build_test_entry("t.py::t", [on, off])["comparisons"]
    cell = category_shift(comparison)
    assert re.fullmatch(r"GEMM \d+% -> \d+% \(\d+\.\d\dx fewer instr\); CONV now \d+%", cell), cell


def _summary(executorch: str, torch_version: str) -> dict:
    profile = {
        "variant": "emulated sme2=on threads=1",
        "metadata": {"export": {"executorch": executorch, "torch": torch_version}},
    }
    target = {"name": "emulated", "cpu": "qemu", "has_sme2": True, "emulated": True}
    return {"target": target, "tests": [{"nodeid": "t.py::t", "profiles": [profile], "comparisons": []}]}


def test_sessions_of_two_versions_side_by_side_are_told_apart_by_their_versions() -> None:
    """Issue 66: an upgrade's two sessions on one target read as the same column twice (`#2`)."""
    from pytest_sme2.report.combined import combine

    upgrade = combine([_summary("1.5.1+cpu", "2.13.0+cpu"), _summary("1.5.1+cpu", "2.14.1+cu130")])
    assert upgrade["targets"] == [
        "emulated (qemu, SME2, EMULATED) [executorch 1.5.1+cpu, torch 2.13.0+cpu]",
        "emulated (qemu, SME2, EMULATED) [executorch 1.5.1+cpu, torch 2.14.1+cu130]",
    ]
    assert set(upgrade["tests"][0]["variants"]["sme2=on threads=1"]) == set(upgrade["targets"])
    same = combine([_summary("1.5.1+cpu", "2.13.0+cpu"), _summary("1.5.1+cpu", "2.13.0+cpu")])
    assert same["targets"] == ["emulated (qemu, SME2, EMULATED)", "emulated (qemu, SME2, EMULATED) #2"]
