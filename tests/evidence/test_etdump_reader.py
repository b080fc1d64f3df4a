"""The ETDump reader against synthetic ETDumps with known times, and against ExecuTorch's Inspector."""

from __future__ import annotations

import random
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers_etdump import RunSpec, default_block, execute_block, write_etdump

from pytest_sme2.errors import EtdumpError
from pytest_sme2.evidence.etdump import (
    ExecutionTrace,
    _columns,
    read_blocks,
    read_run,
    read_trace,
)
from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump

CONV = "Convolution (NHWC, F32) IGEMM #1"
FC = "Fully Connected (NC, F32) GEMM #1"
TRANSPOSE = "Transpose (ND, X32) #1"
LAYER_NORM = "native_call_native_layer_norm.out"
LOAD_NS = 5_000_123
INIT_NS = 2_500_077

# Per run, in ns: E2E, DELEGATE_CALL, conv, fc, transpose, layer_norm kernel, its OPERATOR_CALL.
TABLE = [
    (1_000_000, 700_000, 300_123, 200_000, 50_001, 120_000, 130_000),
    (1_250_017, 800_000, 350_000, 230_009, 60_000, 150_003, 165_000),
    (900_000, 650_111, 280_000, 190_000, 45_000, 110_000, 118_000),
    (3_000_000, 2_000_000, 900_000, 700_000, 100_000, 400_000, 420_005),
]


def _spec(row) -> RunSpec:
    e2e, dc, conv, fc, tr, ln, opcall = row
    return RunSpec(
        e2e_ns=e2e,
        delegate_call_ns=dc,
        delegate_instr=0,
        delegate_ops=[(CONV, conv), (FC, fc), (TRANSPOSE, tr)],
        portable_ops=[(LAYER_NORM, ln, opcall, 1)],
    )


def _col(i: int) -> np.ndarray:
    return np.array([row[i] for row in TABLE]) / 1e6


@pytest.fixture(scope="module")
def etdump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("etdump") / "timed.etdp"
    return write_etdump(path, [_spec(r) for r in TABLE], load_ns=LOAD_NS, init_ns=INIT_NS)


def _row(trace, name: str) -> np.ndarray:
    matches = [i for i, key in enumerate(trace.ops) if key.name == name]
    assert len(matches) == 1, f"{name} appears {len(matches)} times in {trace.ops}"
    return trace.op_values[matches[0]]


# -------------------------------------------------------------- exact times


def test_blocks_are_read_in_order(etdump: Path) -> None:
    blocks = read_blocks(etdump)
    assert [b.name for b in blocks] == ["Default"] + ["Execute"] * len(TABLE)
    # 3 delegate ops + DELEGATE_CALL + kernel + OPERATOR_CALL + Method::execute
    assert [len(b.events) for b in blocks[1:]] == [7] * len(TABLE)
    assert blocks[1].events[-1].name == "Method::execute"


def test_read_run_gives_exact_times(etdump: Path) -> None:
    trace = read_run(etdump)
    assert trace.runs == len(TABLE)
    np.testing.assert_allclose(trace.execute_values, _col(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.delegate_values, _col(1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, CONV), _col(2), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, FC), _col(3), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, TRANSPOSE), _col(4), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, LAYER_NORM), _col(5), rtol=0, atol=1e-12)
    assert trace.load_value == pytest.approx(LOAD_NS / 1e6, abs=1e-12)
    assert trace.init_value == pytest.approx(INIT_NS / 1e6, abs=1e-12)
    assert trace.op_values.shape == (len(trace.ops), len(TABLE))
    assert trace.sources == [str(etdump)]


def test_op_keys(etdump: Path) -> None:
    trace = read_run(etdump)
    keys = {key.name: key for key in trace.ops}
    # OPERATOR_CALL with a kernel event inside is structure, not an op of its own.
    assert set(keys) == {CONV, FC, TRANSPOSE, LAYER_NORM}
    for name in (CONV, FC, TRANSPOSE):
        assert keys[name].delegated is True
        assert keys[name].instruction_id == 0
        assert keys[name].occurrence == 0
    assert keys[LAYER_NORM].delegated is False
    assert keys[LAYER_NORM].instruction_id == 1


def test_ticks_per_ms_scales(etdump: Path) -> None:
    trace = read_run(etdump, ticks_per_ms=1e3)  # pretend ticks are microseconds
    np.testing.assert_allclose(trace.execute_values, _col(0) * 1e3, rtol=1e-12)


# --------------------------------------------------------- Inspector oracle


def test_reader_matches_inspector(etdump: Path) -> None:
    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = Inspector(etdump_path=str(etdump)).to_dataframe()
    trace = read_run(etdump)
    by_name = {key.name: trace.op_values[i] for i, key in enumerate(trace.ops)}
    expected_execute = {
        "Method::execute": trace.execute_values,
        "DELEGATE_CALL": trace.delegate_values,
        "OPERATOR_CALL": _col(6),  # not a reader op; checked against the known times
        **by_name,
    }
    expected_default = {"Program::load_method": [trace.load_value], "Method::init": [trace.init_value]}
    seen = {"Execute": set(), "Default": set()}
    for row in frame.itertuples():
        expected = (expected_execute if row.event_block_name == "Execute" else expected_default)[row.event_name]
        assert list(row.raw) == pytest.approx(list(expected), abs=1e-9), row.event_name
        seen[row.event_block_name].add(row.event_name)
    assert seen["Execute"] == set(expected_execute)
    assert seen["Default"] == set(expected_default)


# ------------------------------------------------------------- warmup files


def test_read_run_takes_load_and_init_from_warmup(tmp_path: Path) -> None:
    timed_rows = TABLE[:3]
    timed = write_etdump(tmp_path / "timed.etdp", [_spec(r) for r in timed_rows])
    warmup = write_etdump(tmp_path / "warmup.etdp", [_spec(TABLE[3])], load_ns=7_000_000, init_ns=1_234_567)
    alone = read_run(timed)
    assert alone.load_value is None and alone.init_value is None
    trace = read_run(timed, warmup)
    assert trace.runs == 3  # warmup runs are not timed runs
    np.testing.assert_allclose(trace.execute_values, [r[0] / 1e6 for r in timed_rows], rtol=0, atol=1e-12)
    assert trace.load_value == pytest.approx(7.0, abs=1e-12)
    assert trace.init_value == pytest.approx(1.234567, abs=1e-12)
    assert str(warmup) in trace.sources


def test_repeated_loads_after_the_runs_are_start_up_samples_not_the_runs_load(tmp_path: Path) -> None:
    """A runner given --startup_repeats writes its first load to the warmup file and the repeats in a "Default"
    block after the timed runs: the runs' load and init stay the first; every load is a start-up sample, in
    order; the timed file alone has no load of its runs (as `analyze` without --warmup says)."""
    runs = [_spec(r) for r in TABLE[:2]]
    blocks, t = [], 0
    for spec in runs:
        blocks.append(execute_block(spec, t))
        t += spec.e2e_ns + 10_000
    repeats = [(3_000_000, 2_000_000), (3_100_000, 2_100_000)]
    events = []
    for load, init in repeats:
        events += default_block(load, init, t)[1]
        t += load + init + 10_000
    timed = write_synthetic_etdump(tmp_path / "timed.etdp", [*blocks, ("Default", events)])
    warmup = write_etdump(tmp_path / "warmup.etdp", [_spec(TABLE[3])], load_ns=9_000_000, init_ns=8_000_000)
    alone = read_run(timed)
    assert alone.runs == 2 and alone.load_value is None and alone.init_value is None
    [(loads, inits)] = alone.startup_parts
    np.testing.assert_allclose(inits, [2.0, 2.1])
    trace = read_run(timed, warmup)
    assert trace.runs == 2 and trace.load_value == pytest.approx(9.0) and trace.init_value == pytest.approx(8.0)
    [(loads, inits)] = trace.startup_parts
    np.testing.assert_allclose(loads, [9.0, 3.0, 3.1])
    np.testing.assert_allclose(inits, [8.0, 2.0, 2.1])
    assert trace.spans.init == (trace.spans.init[0], trace.spans.init[0] + 8_000_000)  # drawn: the runs' own
    both = ExecutionTrace.concat([trace, read_run(timed, warmup)])
    assert len(both.startup_parts) == 2 and both.load_value == pytest.approx(9.0)
    assert ExecutionTrace.concat([trace, read_trace(warmup)]).startup_parts[1][0].tolist() == [9.0]
    assert not ExecutionTrace.concat([trace, read_trace(write_etdump(tmp_path / "none.etdp", runs))]).startup_parts


def test_read_trace_concatenates_files(tmp_path: Path) -> None:
    a = write_etdump(tmp_path / "a.etdp", [_spec(r) for r in TABLE[:2]])
    b = write_etdump(tmp_path / "b.etdp", [_spec(r) for r in TABLE[2:]])
    trace = read_trace(a, b)
    np.testing.assert_allclose(trace.execute_values, _col(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, FC), _col(3), rtol=0, atol=1e-12)


def test_traces_in_different_units_are_not_joined(tmp_path: Path) -> None:
    path = write_etdump(tmp_path / "a.etdp", [_spec(r) for r in TABLE[:2]])
    times = read_trace(path)
    counts = read_trace(
        path, ticks_per_ms=1.0, values=[np.ones(len(_columns(path).start), dtype=np.int64)], unit="instructions"
    )
    assert (times.unit, counts.unit) == ("ms", "instructions")
    assert ExecutionTrace.concat([counts, counts]).unit == "instructions"
    with pytest.raises(ValueError, match="different units"):
        ExecutionTrace.concat([times, counts])


# ------------------------------------------------------- op identity quirks


def test_duplicate_names_in_one_instruction_get_distinct_occurrences(tmp_path: Path) -> None:
    add = "Add (ND) #1"
    runs = [
        RunSpec(e2e_ns=500_000, delegate_call_ns=300_000, delegate_ops=[(add, 100_000), (add, 40_000)]),
        RunSpec(e2e_ns=600_000, delegate_call_ns=300_000, delegate_ops=[(add, 110_000), (add, 45_000)]),
    ]
    trace = read_run(write_etdump(tmp_path / "dup.etdp", runs))
    assert len(trace.ops) == 2
    assert {k.name for k in trace.ops} == {add}
    assert sorted(k.occurrence for k in trace.ops) == [0, 1]
    assert len(set(trace.ops)) == 2
    by_occurrence = {k.occurrence: trace.op_values[i] for i, k in enumerate(trace.ops)}
    np.testing.assert_allclose(by_occurrence[0], [0.100, 0.110], rtol=0, atol=1e-12)
    np.testing.assert_allclose(by_occurrence[1], [0.040, 0.045], rtol=0, atol=1e-12)


def test_same_name_in_two_delegates_is_two_ops(tmp_path: Path) -> None:
    # XNNPACK numbers ops per delegate: "#1" repeats across subgraphs.
    events = [
        SyntheticEvent(1_000, 101_000, delegate_name=CONV, instruction_id=0),
        SyntheticEvent(500, 150_000, name="DELEGATE_CALL", instruction_id=0),
        SyntheticEvent(200_000, 230_000, delegate_name=CONV, instruction_id=2),
        SyntheticEvent(190_000, 240_000, name="DELEGATE_CALL", instruction_id=2),
        SyntheticEvent(0, 300_000, name="Method::execute"),
    ]
    trace = read_run(write_synthetic_etdump(tmp_path / "two.etdp", [("Execute", events)]))
    assert sorted(k.instruction_id for k in trace.ops) == [0, 2]
    assert trace.delegate_values[0] == pytest.approx((149_500 + 50_000) / 1e6, abs=1e-12)
    times = {k.instruction_id: trace.op_values[i, 0] for i, k in enumerate(trace.ops)}
    assert times == {0: pytest.approx(0.1, abs=1e-12), 2: pytest.approx(0.03, abs=1e-12)}


def test_operator_call_without_kernel_event_is_kept(tmp_path: Path) -> None:
    runs = [
        RunSpec(e2e_ns=400_000, portable_ops=[(None, 0, 77_000, 5), (LAYER_NORM, 50_000, 60_000, 6)]),
        RunSpec(e2e_ns=400_000, portable_ops=[(None, 0, 88_000, 5), (LAYER_NORM, 55_000, 60_000, 6)]),
    ]
    trace = read_run(write_etdump(tmp_path / "opcall.etdp", runs))
    keys = {k.name: (i, k) for i, k in enumerate(trace.ops)}
    assert set(keys) == {"OPERATOR_CALL[5]", LAYER_NORM}
    i, key = keys["OPERATOR_CALL[5]"]
    assert key.delegated is False
    assert key.instruction_id == 5
    np.testing.assert_allclose(trace.op_values[i], [0.077, 0.088], rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.delegate_values, [0.0, 0.0])


def test_op_missing_from_a_run_is_zero_there(tmp_path: Path) -> None:
    runs = [
        RunSpec(e2e_ns=400_000, delegate_call_ns=200_000, delegate_ops=[(CONV, 100_000), (FC, 50_000)]),
        RunSpec(e2e_ns=400_000, delegate_call_ns=200_000, delegate_ops=[(CONV, 120_000)]),
    ]
    trace = read_run(write_etdump(tmp_path / "missing.etdp", runs))
    np.testing.assert_allclose(_row(trace, FC), [0.05, 0.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(_row(trace, CONV), [0.10, 0.12], rtol=0, atol=1e-12)


# -------------------------------------------------------------------- errors


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.etdp"
    with pytest.raises(EtdumpError, match=re.escape(str(path))):
        read_run(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.etdp"
    path.write_bytes(b"")
    with pytest.raises(EtdumpError, match=r"(?s)empty.*") as info:
        read_run(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("cut", ["10", "half", "len-7"])
def test_truncated_file(etdump: Path, tmp_path: Path, cut: str) -> None:
    data = etdump.read_bytes()
    length = {"10": 10, "half": len(data) // 2, "len-7": len(data) - 7}[cut]
    path = tmp_path / f"cut{length}.etdp"
    path.write_bytes(data[:length])
    with pytest.raises(EtdumpError, match="truncated") as info:
        read_run(path)
    assert str(path) in str(info.value)


def test_every_truncation_is_an_etdump_error(etdump: Path, tmp_path: Path) -> None:
    data = etdump.read_bytes()
    path = tmp_path / "cut.etdp"
    # every header-sized cut, every cut near the end, and a stride through the middle
    lengths = sorted(set(range(24)) | set(range(0, len(data), 23)) | set(range(len(data) - 24, len(data))))
    for length in lengths:
        path.write_bytes(data[:length])
        try:
            read_blocks(path)
        except EtdumpError:
            continue
        except Exception as exc:  # noqa: BLE001 - the point is which type escapes
            pytest.fail(f"cut at {length} of {len(data)} bytes raised {type(exc).__name__}: {exc}")
        pytest.fail(f"cut at {length} of {len(data)} bytes was accepted")


def test_truncation_with_consistent_size_prefix_is_an_etdump_error(etdump: Path, tmp_path: Path) -> None:
    """A cut file whose size prefix was rewritten to match must fail inside the bounds checks, not crash."""
    data = etdump.read_bytes()
    path = tmp_path / "cut.etdp"
    for length in (16, 40, len(data) // 3, len(data) // 2, (2 * len(data)) // 3):
        path.write_bytes(struct.pack("<I", length - 4) + data[4:length])
        with pytest.raises(EtdumpError):
            read_blocks(path)


def test_pte_is_not_an_etdump(tmp_path: Path) -> None:
    path = tmp_path / "model.pte"
    path.write_bytes(b"<\x00\x00\x00ET12eh00 \x00\x00\x00" + bytes(200))
    with pytest.raises(EtdumpError, match="not an ETDump") as info:
        read_run(path)
    assert str(path) in str(info.value)


def test_random_bytes_are_not_an_etdump(tmp_path: Path) -> None:
    data = random.Random(1234).randbytes(2048)
    assert data[8:12] != b"ED00"
    path = tmp_path / "random.etdp"
    path.write_bytes(data)
    with pytest.raises(EtdumpError, match="not an ETDump"):
        read_run(path)


def test_execute_block_without_method_execute(tmp_path: Path) -> None:
    events = [
        SyntheticEvent(1_000, 2_000, delegate_name=CONV, instruction_id=0),
        SyntheticEvent(500, 3_000, name="DELEGATE_CALL", instruction_id=0),
    ]
    path = write_synthetic_etdump(tmp_path / "noexec.etdp", [default_block(1_000, 1_000), ("Execute", events)])
    with pytest.raises(EtdumpError, match="Method::execute") as info:
        read_run(path)
    assert str(path) in str(info.value)


def test_only_default_block_has_no_runs(tmp_path: Path) -> None:
    path = write_synthetic_etdump(tmp_path / "loadonly.etdp", [default_block(1_000, 2_000)])
    with pytest.raises(EtdumpError, match="no Execute runs") as info:
        read_run(path)
    assert str(path) in str(info.value)


def test_one_bad_run_among_good_ones_is_reported(tmp_path: Path) -> None:
    good = execute_block(_spec(TABLE[0]), 0)
    bad = ("Execute", [SyntheticEvent(0, 10, name="DELEGATE_CALL", instruction_id=0)])
    path = write_synthetic_etdump(tmp_path / "mixed.etdp", [good, bad])
    with pytest.raises(EtdumpError, match="Method::execute"):
        read_run(path)


def test_an_etdump_without_the_runtimes_size_prefix_reads_the_same(tmp_path: Path) -> None:
    # serialize_to_etdump_flatcc (Python) writes the flatbuffer alone; the runtime prefixes its size
    from pytest_sme2.evidence.etdump import read_run
    from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump

    prefixed = write_synthetic_etdump(
        tmp_path / "prefixed.etdp",
        [
            ("Execute", [SyntheticEvent(0, 1_500, name="Method::execute")]),
            ("Execute", [SyntheticEvent(5_000, 7_000, name="Method::execute")]),
        ],
    )
    bare = tmp_path / "bare.etdp"
    bare.write_bytes(prefixed.read_bytes()[4:])
    assert read_run(bare).execute_values.tolist() == read_run(prefixed).execute_values.tolist() == [0.0015, 0.002]


def test_header_and_size_checked_before_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23 (weak): ``analyze`` of a 4 GB file read it all (20 s, 4.2 GB RSS) before looking at its
    8-byte header. Sparse files here: a 4 GB non-ETDump and a 3 GB file with an ETDump header are both
    refused from their header and size, naming the file, without reading them."""
    import resource
    import time

    from pytest_sme2.cli import main

    junk = tmp_path / "big.bin"
    with open(junk, "wb") as f:
        f.write(b"PK\x03\x04not an etdump")
        f.truncate(4 * 2**30)
    fake = tmp_path / "huge.etdp"
    with open(fake, "wb") as f:
        f.write(struct.pack("<I", 3 * 2**30 - 4) + b"\x10\x00\x00\x00ED00")
        f.truncate(3 * 2**30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    with pytest.raises(EtdumpError, match=re.escape(f"{junk} is not an ETDump")):
        read_blocks(junk)
    with pytest.raises(
        EtdumpError, match=rf"{re.escape(str(fake))} is {3 * 2**30} bytes, more than a flatbuffer can hold"
    ):
        read_blocks(fake)
    assert main(["analyze", str(junk)]) == 2
    assert f"{junk} is not an ETDump" in capsys.readouterr().err
    assert time.monotonic() - start < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KiB: nothing near 3-4 GB read
    with pytest.raises(EtdumpError, match="not a regular file"):
        read_blocks("/dev/zero")
    with pytest.raises(EtdumpError, match="is not an ETDump: it is a folder|not a regular file"):
        read_blocks(tmp_path)


def test_the_fast_writer_and_executorchs_serializer_write_etdumps_the_reader_reads_alike(tmp_path: Path) -> None:
    """The synthetic writer builds the flatbuffer itself (ExecuTorch's serializer goes through JSON and flatc: 121 s
    for 200,000 events); what it writes must read exactly as what ExecuTorch's own serializer writes."""
    from pytest_sme2.evidence.etdump import read_blocks

    run = [
        SyntheticEvent(10, 20, delegate_name="Fully Connected (NC, F32) GEMM #1", instruction_id=1),
        SyntheticEvent(21, 30, delegate_name="Fully Connected (NC, F32) GEMM #1", instruction_id=1),
        SyntheticEvent(9, 31, name="DELEGATE_CALL", instruction_id=1),
        SyntheticEvent(32, 2**40, name="native_call_add.out", instruction_id=2),
        SyntheticEvent(5, 2**41, name="Method::execute"),
    ]
    blocks = [("Default", [SyntheticEvent(1, 4, name="Program::load_method")]), ("Execute", run), ("Execute", run)]
    built = read_blocks(write_synthetic_etdump(tmp_path / "built.etdp", blocks))
    serialized = read_blocks(write_synthetic_etdump(tmp_path / "flatc.etdp", blocks, serializer="executorch"))
    assert built == serialized
    assert [e.label for e in built[1].events][:2] == ["Fully Connected (NC, F32) GEMM #1"] * 2
    assert built[2].events[4].end == 2**41 and built[1].events[2].instruction_id == 1
