"""The timeline (report/timeline.py): a valid trace-event JSON file in which every operator of each profile
appears in every run with the profile's own duration, nested in its delegate call and run.

Expected positions come from the synthetic ETDump's layout (tests/helpers_etdump.py), never from the code under
test; real models are checked in tests/test_e2e_models.py (host) and tests/evidence/test_qemu_counts.py
(emulated, counted instructions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers_etdump import GAP_NS, RunSpec, write_etdump
from test_report_plugin import PERF_TEST
from trace_event_format import TraceFormatError, validate

from pytest_sme2 import Profile
from pytest_sme2.evidence.etdump import op_id
from pytest_sme2.evidence.kernel_sampling import KernelTime
from pytest_sme2.report.timeline import INSTRUCTION_AXIS, timeline_document

CONV, GEMM = "Convolution (NHWC, F32) IGEMM #1", "Fully Connected (NC, F32) GEMM #2"


def _run(e2e_ns: int, conv_ns: int) -> RunSpec:
    return RunSpec(
        e2e_ns=e2e_ns,
        delegate_call_ns=conv_ns + 40_000,
        delegate_ops=[(CONV, conv_ns), (GEMM, 20_000)],
        portable_ops=[("native_call_cumsum.out", 5_000, 7_000, 3)],
    )


def _profile(path: Path, variant: str, conv_ns: list[int], throttled: list[bool] | None = None) -> Profile:
    etdump = write_etdump(path, [_run(200_000 + c, c) for c in conv_ns], load_ns=300_000, init_ns=100_000)
    profile = Profile.from_etdump(etdump, model="net", recipe="fp32-xnnpack", variant=variant)
    if throttled is not None:
        profile.throttled_runs = np.array(throttled)
    return profile


def _slices(document: dict) -> list[dict]:
    return [e for e in document["traceEvents"] if e["ph"] == "X"]


def test_every_operator_of_every_run_is_drawn_with_its_own_duration(tmp_path: Path) -> None:
    on = _profile(tmp_path / "on.etdp", "sme2=on", [50_000, 51_000, 49_000], throttled=[False, True, False])
    off = _profile(tmp_path / "off.etdp", "sme2=off", [400_000, 410_000])
    document = json.loads(json.dumps(timeline_document("test_net", [on, off])))  # what a reader gets
    slices = validate(document)
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert names == {"sme2=on · net fp32-xnnpack", "sme2=off · net fp32-xnnpack"}
    for pid, profile in ((1, on), (2, off)):
        mine = [e for e in slices if e["pid"] == pid]
        for row, key in enumerate(profile.trace.ops):
            drawn = sorted((e["args"]["run_index"], e["dur"]) for e in mine if e["name"] == op_id(key))
            # microseconds on the axis; the profile's milliseconds
            assert [run for run, _ in drawn] == list(range(profile.runs))
            np.testing.assert_allclose([dur / 1000 for _, dur in drawn], profile.trace.op_values[row], rtol=1e-12)
        runs = [e for e in mine if e["cat"].startswith("run")]
        np.testing.assert_allclose(sorted(e["dur"] / 1000 for e in runs), sorted(profile.e2e_ms), rtol=1e-12)
        (load,) = [e for e in mine if e["name"] == "Program::load_method"]
        (init,) = [e for e in mine if e["name"] == "Method::init"]
        assert (load["ts"], load["dur"], init["dur"]) == (0.0, 300.0, 100.0)  # the ETDump's layout, from 0
        assert init["ts"] == (300_000 + GAP_NS) / 1000
    # the second run of "on" was throttled: named and in its own category
    throttled = [e for e in slices if e["pid"] == 1 and "throttled" in e["cat"]]
    assert [e["name"] for e in throttled] == ["run 2 (disturbed, throttled)"] and throttled[0]["args"]["throttled"]
    # operators sit inside their delegate call, which sits inside its run: the GEMM starts where the conv ends
    first_run = [e for e in slices if e["pid"] == 1 and e["args"].get("run_index") == 0]
    conv = next(e for e in first_run if e["name"].startswith("Convolution"))
    gemm = next(e for e in first_run if e["name"].startswith("Fully Connected"))
    assert gemm["ts"] == pytest.approx(conv["ts"] + conv["dur"]) and conv["cat"] == "CONV" and gemm["cat"] == "GEMM"


def test_runner_processes_are_threads_each_from_zero(tmp_path: Path) -> None:
    first = _profile(tmp_path / "a.etdp", "v", [50_000, 60_000])
    second = _profile(tmp_path / "b.etdp", "v", [70_000])
    merged = Profile.concat([first, second])
    document = timeline_document("t", [merged])
    slices = validate(document)
    threads = {e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {1: "runner process 1: runs 1-2", 2: "runner process 2: runs 3-3"}
    assert sorted(e["args"]["run_index"] for e in slices if e["cat"] == "run") == [0, 1, 2]
    assert {e["tid"] for e in slices if e["ts"] == 0.0} == {1, 2}
    # run 3 is the second process's first run: its conv has the 70 us of that file
    (conv,) = [e for e in slices if e["args"].get("run_index") == 2 and e["name"].startswith("Convolution")]
    assert conv["tid"] == 2 and conv["dur"] == 70.0


def test_sampled_kernels_nest_in_their_operator_by_share(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "on.etdp", "sme2=on", [80_000])
    conv_id = op_id(next(k for k in profile.trace.ops if k.name == CONV))
    kernels = pd.DataFrame(
        [
            {
                "op": conv_id,
                "event": CONV,
                "category": "CONV",
                "delegated": True,
                "kernel": "kai_matmul_sme2_mopa",
                "library": "libxnnpack.so",
                "kind": "sme2",
                "samples": 30,
                "ms_per_run": 0.06,
                "share": 0.75,
            },
            {
                "op": conv_id,
                "event": CONV,
                "category": "CONV",
                "delegated": True,
                "kernel": "xnn_pack_lh",
                "library": "libxnnpack.so",
                "kind": "packing",
                "samples": 10,
                "ms_per_run": 0.02,
                "share": 0.25,
            },
        ]
    )
    profile.kernel_time = KernelTime(kernels, pd.DataFrame(columns=list(KernelTime._OP_COLUMNS)), runs=1)
    slices = validate(timeline_document("t", [profile]))
    (conv,) = [e for e in slices if e["name"] == conv_id]
    mopa, pack = (next(e for e in slices if e["name"] == name) for name in ("kai_matmul_sme2_mopa", "xnn_pack_lh"))
    assert (mopa["ts"], mopa["dur"]) == (conv["ts"], 60.0)
    assert (pack["ts"], pack["dur"]) == (pytest.approx(conv["ts"] + 60.0), 20.0)
    assert mopa["args"]["samples"] == 30 and "not a position" in mopa["args"]["note"]


def test_a_profile_without_positions_says_why_and_draws_nothing(tmp_path: Path) -> None:
    """Counts written before positions were counted (format 2, as helpers_etdump writes them) give no axis:
    the process says so, and the instruction axis is never replaced by the emulator's time."""
    from helpers_etdump import emulated_metadata
    from helpers_etdump import write_counts as write_instruction_counts

    from pytest_sme2.evidence.qemu_counts import InstructionTrace

    etdump = write_etdump(tmp_path / "e.etdp", [_run(260_000, 50_000)])
    counts = write_instruction_counts(etdump, {CONV: {"mopa_fp32": 100, "simd_fp": 50}})
    profile = Profile.from_etdump(
        etdump,
        model="net",
        recipe="fp32-xnnpack",
        variant="emulated sme2=on",
        metadata=emulated_metadata(),
        instructions=InstructionTrace.from_counts(counts, etdump, None),
    )
    document = timeline_document("t", [profile])
    assert _slices(document) == []
    (name,) = [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"]
    assert "no timeline: its counts were written without event positions" in name and "--sme2-fresh" in name
    assert INSTRUCTION_AXIS in document["otherData"]["axis"]


def test_the_validator_rejects_what_the_importers_would_misdraw() -> None:
    """The check of the format can fail: a partly overlapping slice, a missing field, an unknown phase."""
    ok = {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1}
    validate({"traceEvents": [ok, {**ok, "name": "b", "ts": 2, "dur": 5}]})
    with pytest.raises(TraceFormatError, match="overlaps a"):
        validate({"traceEvents": [ok, {**ok, "name": "b", "ts": 5, "dur": 10}]})
    with pytest.raises(TraceFormatError, match="dur"):
        validate({"traceEvents": [{k: v for k, v in ok.items() if k != "dur"}]})
    with pytest.raises(TraceFormatError, match="phase"):
        validate({"traceEvents": [{**ok, "ph": "Z"}]})
    with pytest.raises(TraceFormatError, match="traceEvents"):
        validate([ok])


def test_the_session_writes_each_tests_timeline_and_links_it(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "--sme2-timeline")
    result.assert_outcomes(passed=2)  # and the test that is no perf test gets no timeline
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    (entry,) = json.loads((session / "summary.json").read_text())["tests"]
    timeline = Path(entry["timeline"])
    assert timeline.name == "timeline.json" and timeline.parent == Path(entry["test_dir"])
    slices = validate(json.loads(timeline.read_text()))
    assert len([e for e in slices if e["cat"] == "run"]) == 3  # the three timed runs, not the warmup
    assert "- timeline (ui.perfetto.dev or chrome://tracing): `" in (session / "summary.md").read_text()


def test_a_timeline_that_cannot_be_written_fails_the_session_and_keeps_the_rest(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_sme2.report.timeline as timeline

    def refuse(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(timeline, "write_timeline", refuse)
    sme2_project.makepyfile(PERF_TEST)
    result = sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "-o", "sme2_timeline=true")
    assert result.ret != 0 and result.parseoutcomes()["passed"] == 2
    result.stdout.fnmatch_lines(["*writing the timeline of test_*.py::test_tiny failed: OSError*No space left*"])
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    (entry,) = json.loads((session / "summary.json").read_text())["tests"]
    assert "timeline" not in entry and entry["profiles"]  # the test's entry stands


def test_on_the_host_target_a_thread_is_a_request_to_its_worker(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "h.etdp", "host", [50_000])
    profile.metadata["target"] = {"name": "host"}
    document = timeline_document("t", [profile])
    assert [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"] == [
        "worker request 1: runs 1-1"
    ]
