"""Instruction counts under emulation: exact on a program whose counts are known, identical run to run on a
real model, and cut into the same events as the ETDump."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers_emulated import assert_cached_equals_fresh, counted_profiles

from pytest_sme2.evidence.qemu_counts import QEMU_LOG_FLAGS, AddressSpace, ExecutedBlocks
from pytest_sme2.run import emulation_setup as emulation
from pytest_sme2.run.native.build import build_exec_counter

STATUS = emulation.status()
needs_emulation = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")
needs_cross = pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None, reason="needs Debian's aarch64 cross compiler (make system-deps)"
)

# A function of exactly known cost: 2 setup instructions, then a 4-instruction loop body run N times
# (the loop ends in one block per pass under qemu, so every pass is one logged block), then a 5-instruction
# SME section (SMSTART, ZERO {ZA}, two ZA-free instructions, SMSTOP) and RET.
PROGRAM = textwrap.dedent("""
    .text
    .global counted
    .type counted, %function
    counted:
        mov x1, #0
        mov x2, x0
    1:  add x1, x1, #3
        eor x3, x1, x2
        subs x2, x2, #1
        b.ne 1b
        .inst 0xd503477f    // smstart (GCC 12 has no +sme; the encodings are the ISA's)
        .inst 0xc00800ff    // zero {za}
        mov x4, #1
        add x4, x4, #2
        .inst 0xd503467f    // smstop
        ret
    .size counted, .-counted

    .global main
    .type main, %function
    main:
        stp x29, x30, [sp, #-16]!
        mov x0, #1000
        bl counted
        mov w0, #0
        ldp x29, x30, [sp], #16
        ret
""")
LOOPS = 1000
SETUP, BODY, TAIL = 2, 4, 6  # instructions; TAIL counts SMSTART ... RET
SME_INSTRUCTIONS = 3  # SMSTART, ZERO {ZA}, SMSTOP


def _count_from_log(binary: Path, tmp_path: Path, attempt: int) -> ExecutedBlocks:
    if STATUS.log_qemu is None:
        pytest.skip("needs qemu-user 11.1 (`pytest-sme2 setup-emulation`)")
    log = tmp_path / f"log{attempt}.txt"
    env = {**os.environ, "QEMU_LD_PREFIX": str(emulation.SYSROOT)}
    subprocess.run(
        [str(STATUS.log_qemu), "-cpu", "max", *QEMU_LOG_FLAGS, "-D", str(log), str(binary)],
        env=env,
        check=True,
        timeout=120,
    )
    blocks_tsv, sequence = tmp_path / f"b{attempt}.tsv", tmp_path / f"s{attempt}.u32"
    subprocess.run([str(build_exec_counter()), str(blocks_tsv), str(sequence), str(log)], check=True)
    return ExecutedBlocks.from_files(blocks_tsv, sequence)


def _count_in_plugin(binary: Path, tmp_path: Path, attempt: int) -> ExecutedBlocks:
    if STATUS.plugin_header is None:
        pytest.skip(f"needs the qemu built with plugins: {STATUS.counting_note()}")
    from pytest_sme2.run.native.build import build_count_plugin

    blocks_tsv, segments = tmp_path / f"pb{attempt}.tsv", tmp_path / f"ps{attempt}.u64"
    plugin = f"{build_count_plugin(STATUS.plugin_header)},markers=/dev/null,out={segments},blocks={blocks_tsv}"
    env = {**os.environ, "QEMU_LD_PREFIX": str(emulation.SYSROOT)}
    subprocess.run([str(STATUS.qemu), "-plugin", plugin, "-cpu", "max", str(binary)], env=env, check=True, timeout=120)
    return ExecutedBlocks.from_plugin(blocks_tsv, segments)


@needs_emulation
@needs_cross
@pytest.mark.parametrize("count", [_count_from_log, _count_in_plugin], ids=["log", "plugin"])
def test_counts_of_a_program_with_known_instruction_counts_are_exact(count, tmp_path: Path) -> None:  # noqa: ANN001
    source = tmp_path / "counted.S"
    source.write_text(PROGRAM)
    binary = tmp_path / "counted"
    subprocess.run(["aarch64-linux-gnu-gcc", "-static", "-no-pie", "-o", str(binary), str(source)], check=True)
    totals = []
    for attempt in range(2):  # and the same again: the count is a property of the program
        blocks = count(binary, tmp_path, attempt)
        # the program's own text is where the binary is mapped: find it from the disassembly's symbol
        symbols = subprocess.run(
            ["aarch64-linux-gnu-nm", str(binary)], capture_output=True, text=True, check=True
        ).stdout
        start = int(next(line.split()[0] for line in symbols.splitlines() if line.endswith(" counted")), 16)
        size = (SETUP + BODY + TAIL) * 4
        # a static, non-PIE binary runs at its link address
        inside = (blocks.pcs >= start) & (blocks.pcs < start + size)
        executed = blocks.sequence.executed(blocks.pcs.size)
        totals.append((int((blocks.instructions * executed)[inside].sum()), int((blocks.sme * executed)[inside].sum())))
    assert totals[0] == (SETUP + BODY * LOOPS + TAIL, SME_INSTRUCTIONS)
    assert totals[1] == totals[0]


def test_the_counter_binds_a_reused_host_pointer_to_the_new_translation(tmp_path: Path) -> None:
    """qemu reuses host code memory after invalidating blocks: a listing seen later rebinds the pointer."""
    log = tmp_path / "log.txt"
    log.write_text(
        textwrap.dedent("""\
        ----------------
        IN: f
        0x0000000000400000:  d503201f  nop
        0x0000000000400004:  d65f03c0  ret

        Trace 0: 0x7f0000000100 [00000000/0000000000400000/00000001/00000200] f
        Trace 0: 0x7f0000000100 [00000000/0000000000400000/00000001/00000200] f
        Trace 1: 0x7f0000000200 [00000000/0000000000500000/00000001/00000200] other thread, not counted
        ----------------
        IN: g
        0x0000000000401000:  c00800ff  zero {za}
        0x0000000000401004:  d503201f  nop
        0x0000000000401008:  d503201f  nop

        Trace 0: 0x7f0000000100 [00000000/0000000000401000/00000001/00000200] g
        Trace 0: 0x7f0000000100 [00000000/0000000000401000/00000001/00000200] g
        """)
    )
    blocks_tsv, sequence = tmp_path / "b.tsv", tmp_path / "s.u32"
    done = subprocess.run(
        [str(build_exec_counter()), str(blocks_tsv), str(sequence), str(log)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stderr.strip().endswith("2 blocks, 4 executions, 0 unbound")
    blocks = ExecutedBlocks.from_files(blocks_tsv, sequence)
    assert blocks.sequence.ids.tolist() == [0, 0, 1, 1]
    assert blocks.instructions.tolist() == [2, 3] and blocks.sme.tolist() == [0, 1]


def test_addresses_are_named_by_library_and_function(tmp_path: Path) -> None:
    source = tmp_path / "lib.c"
    source.write_text("int kai_run_fake_sme2_mopa(int x) { return x * 3; }\nint other(int x) { return x + 1; }\n")
    library = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    nm = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    address = {line.split()[2]: int(line.split()[0], 16) for line in nm.stdout.splitlines() if " T " in line}
    base = 0x7F0000000000
    space = AddressSpace(f"{base:x}-{base + 0x100000:x} r-xp 00000000 08:01 42 {library}\n")
    assert space.locate(base + address["kai_run_fake_sme2_mopa"]) == (str(library), "kai_run_fake_sme2_mopa")
    assert space.locate(0x1000) == (None, None)
    assert space.function_range(str(library), "other")[0] == base + address["other"]


@pytest.fixture(scope="module")
def mobilenet_counted(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path):  # noqa: ANN201
    """mobilenet_v3_small fp32 (portable and delegated operators) counted twice with SME2 on, once off."""
    # fresh: the two SME2-on runs must both be emulated (the result cache would answer the second)
    return counted_profiles(
        tmp_path_factory.mktemp("counted"),
        "mobilenet_v3_small",
        (True, True, False),
        fresh=True,
        warmup=1,
        cache=shared_export_cache,
    )


def test_two_runs_of_a_real_model_count_the_same_for_every_event(mobilenet_counted) -> None:
    first, second, _ = mobilenet_counted
    a, b = first.instructions, second.instructions
    assert a.instructions.ops == b.instructions.ops == first.trace.ops
    np.testing.assert_array_equal(a.instructions.op_values, b.instructions.op_values)
    np.testing.assert_array_equal(a.sme.op_values, b.sme.op_values)
    assert a.instructions.execute_values.tolist() == b.instructions.execute_values.tolist()
    assert a.instructions.delegate_values.tolist() == b.instructions.delegate_values.tolist()
    assert first.instructions_per_inference == second.instructions_per_inference > 1_000_000
    # counts are named as counts, never as a time (issue 24: fields named _ms held instructions)
    assert a.instructions.unit == a.sme.unit == "instructions" and first.trace.unit == "ms"


def test_a_cached_answer_equals_the_fresh_counts_on_both_sides(
    mobilenet_counted, shared_export_cache: Path, tmp_path: Path
) -> None:
    """Issue 25 (a) for mobilenet_v3_small: the counts this file made fresh were stored; answered from the result
    cache, SME2 on and off give every counted quantity exactly (tests/run/test_result_cache.py: the other models)."""
    first, _, off = mobilenet_counted
    cached = counted_profiles(tmp_path, "mobilenet_v3_small", (True, False), warmup=1, cache=shared_export_cache)
    assert_cached_equals_fresh([first, off], cached)
    # the positions the timeline draws are stored with the counts: a cached answer draws the same timeline
    from pytest_sme2.report.timeline import timeline_document

    assert timeline_document("t", cached)["traceEvents"] == timeline_document("t", [first, off])["traceEvents"]


def test_the_timeline_of_a_real_model_is_in_counted_instructions_with_every_operator(mobilenet_counted) -> None:
    """Issue 28 item 1 on the emulated target: SME2 on and off as two processes, each operator of each profile in
    its run with exactly its counted instructions (1 ns of the axis = 1 instruction), nested in its delegate call,
    and no emulator time anywhere."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
    from trace_event_format import validate

    from pytest_sme2.evidence.etdump import op_id
    from pytest_sme2.report.timeline import timeline_document

    on, _, off = mobilenet_counted
    document = json.loads(json.dumps(timeline_document("test_mobilenet", [on, off])))
    slices = validate(document)
    names = [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"]
    assert len(names) == 2 and all("counted instructions (1 ns = 1 instruction)" in n for n in names)
    for pid, profile in ((1, on), (2, off)):
        counted = profile.instructions.instructions
        mine = [e for e in slices if e["pid"] == pid]
        by_name: dict[str, list[float]] = {}
        for e in mine:
            by_name.setdefault(e["name"], []).append(e["dur"])
        for row, key in enumerate(counted.ops):
            assert sorted(round(d * 1000) for d in by_name[op_id(key)]) == sorted(counted.op_values[row].astype(int))
        (run,) = [e for e in mine if e["cat"] == "run"]
        assert round(run["dur"] * 1000) == counted.execute_values[0] and run["args"]["instructions"] > 1_000_000
        (init,) = [e for e in mine if e["name"] == "Method::init"]
        assert round(init["dur"] * 1000) == counted.init_value and init["ts"] + init["dur"] <= run["ts"]
        # every delegated operator lies inside a delegate call; portable ones outside every call
        calls = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"] == "DELEGATE_CALL"]
        for e in mine:
            if "delegated" in e.get("args", {}):
                inside = any(a <= e["ts"] and e["ts"] + e["dur"] <= b + 1e-6 for a, b in calls)
                assert inside == e["args"]["delegated"], e
    assert any(not e["args"]["delegated"] for e in slices if "delegated" in e.get("args", {}))  # portable ops drawn
    assert not {"ms", "ns"} & {k for e in slices for k in e.get("args", {})}  # no emulator time


def test_events_nest_as_in_the_etdump_and_sme_runs_only_in_packed_operators(mobilenet_counted) -> None:
    on, _, off = mobilenet_counted
    counted = on.instructions.instructions
    ops = on.ops
    delegated = counted.op_values[ops["delegated"].to_numpy()].sum()
    portable = counted.op_values[~ops["delegated"].to_numpy()].sum()
    # every delegate operator lies inside a DELEGATE_CALL, every event inside Method::execute
    assert 0 < delegated <= counted.delegate_values.sum() <= counted.execute_values.sum()
    assert portable > 0 and delegated + portable <= counted.execute_values.sum()
    sme = on.ops["sme_instructions"]
    assert (sme[on.ops["packed"]] > 0).all(), "every packed (SME) operator executed SME instructions"
    assert (sme[~on.ops["packed"] & on.ops["category"].isin(["CONV", "GEMM"])] == 0).all()
    assert off.sme_instructions_per_inference == 0 and (off.ops["sme_instructions"] == 0).all()
    # SME2 changes the work's instruction count, not which events run outside the delegate
    assert on.instructions_per_inference < off.instructions_per_inference
    assert sorted(on.portable_ops["op"]) == sorted(off.portable_ops["op"])


def test_kernels_per_operator_name_the_sme2_kernels(mobilenet_counted) -> None:
    on, _, off = mobilenet_counted
    packed = on.ops[on.ops["packed"] & (on.ops["category"] == "GEMM")].iloc[0]
    names = " ".join(packed["kernels"])
    assert "sme2" in names, names
    assert any("sme2" in k for k in on.executed_sme_kernels) and off.executed_sme_kernels == ()


def test_instruction_mix_of_a_real_model_adds_up_and_names_fp32_outer_products(mobilenet_counted) -> None:
    """Issue 26's evidence: per operator, the instructions of each class, from a real fp32 model's counted runs."""
    from pytest_sme2.evidence.instruction_classes import NAMES, OUTER_PRODUCTS, SME_CLASSES

    on, second, off = mobilenet_counted
    for profile in (on, off):
        mix = profile.instruction_mix()
        assert list(mix["event"]) == list(profile.ops["event"])
        # every instruction is in exactly one class
        np.testing.assert_array_equal(mix[list(NAMES)].sum(axis=1).to_numpy(), profile.ops["instructions"].to_numpy())
    mix_on, mix_off = on.instruction_mix(), off.instruction_mix()
    # the same in a second emulated run
    np.testing.assert_array_equal(mix_on[list(NAMES)].to_numpy(), second.instruction_mix()[list(NAMES)].to_numpy())
    packed = on.ops["packed"].to_numpy()
    # fp32 SME2 kernels multiply with single-precision outer products, and with no other data type; the batch-1
    # fully connected layers of the squeeze-excite blocks (matrix-vector) use SME2 FMLA into ZA array vectors
    # instead (measured: GEMM #1, #2, #9, #10 ... with no FMOPA)
    assert ((mix_on["mopa_fp32"] + mix_on["za_vgx2"] + mix_on["za_vgx4"])[packed] > 0).all()
    convolutions = packed & (mix_on["category"] == "CONV").to_numpy()
    assert convolutions.any() and (mix_on.loc[convolutions, "mopa_fp32"] > 0).all()
    gemv = packed & (mix_on["mopa_fp32"] == 0).to_numpy()
    assert gemv.sum() >= 2 and set(mix_on.loc[gemv, "category"]) == {"GEMM"}
    assert (mix_on.loc[gemv, "za_vgx4"] > 0).all()
    assert (mix_on[["mopa_fp16", "mopa_int8"]] == 0).all().all()
    assert (mix_on.loc[~packed, list(OUTER_PRODUCTS)] == 0).all().all()
    assert (mix_off[list(SME_CLASSES)] == 0).all().all()
    # summary.json and baselines carry one inference's mix: all of its instructions, the operators' among them
    record = on.to_dict()["instructions"]
    assert sum(record["mix"].values()) == record["per_inference"]
    assert all(record["mix"][name] >= mix_on[name].sum() for name in NAMES)
    # without SME2 the same operators run NEON kernels: NEON arithmetic in each, most of their instructions
    heavy_off = mix_off[packed]
    assert (heavy_off["simd_fp"] > 0).all() and heavy_off["simd_fp"].sum() > heavy_off["scalar"].sum()


CONCATENATING_MODEL = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 8 * 8, 64)

    def forward(self, x):
        y = torch.cat([x, self.conv(x)], dim=1)           # XNNPACK: one node, two copy operators
        z = torch.cat([y, y, y], dim=1).sum(dim=1, keepdim=True)
        return self.fc(torch.cat([y[:, :8], y[:, 8:]], dim=1).flatten(1)) + z.mean()

def get_eager_model():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Net().eval()

def get_example_inputs():
    return (torch.randn(1, 8, 8, 8, generator=torch.Generator().manual_seed(1)),)
"""


@needs_emulation
def test_a_node_that_runs_several_operators_gets_all_of_them_and_no_other_node_is_shifted(tmp_path: Path) -> None:
    """XNNPACK's profiler logs a node once however many operators it runs (a concatenation runs one copy per
    input); a per-operator queue then gave each copy to the next logged node and carried the rest into the next
    delegate call: SqueezeSAM's transposes and max pools got outer products, and one call's operators more
    instructions than the call itself."""
    from pytest_sme2.evidence.etdump import _columns
    from pytest_sme2.evidence.qemu_counts import COUNTS_FILE

    (profile,) = counted_profiles(tmp_path, "concatenating", (True,), source=CONCATENATING_MODEL)
    mix = profile.instruction_mix()
    sme = mix[["mopa_fp32", "za_vgx2", "za_vgx4"]].sum(axis=1)
    packed = profile.ops["packed"].to_numpy()
    assert packed.sum() == 2 and (sme[packed] > 0).all() and (sme[~packed] == 0).all()
    copies = mix[mix["event"].str.startswith("Copy")]
    assert len(copies) >= 1 and (copies[["simd_fp", "scalar", "load_store"]].sum(axis=1) > 0).all()
    # every delegate call holds at least the instructions of the operators logged in it
    folder = Path(profile.artifacts["timed_etdump"]).parent
    document = json.loads((folder / COUNTS_FILE).read_text())["files"]["timed"]
    columns = _columns(folder / "timed.etdp")
    names = [columns.labels[i] for i in columns.label_id]
    inside = 0
    for name, count in zip(names, document["instructions"]):
        if name == "DELEGATE_CALL":
            assert inside <= count
            inside = 0
        elif not name.startswith(("Method::", "OPERATOR_CALL", "native_call", "Program::")):
            inside += count


def test_logged_operators_holding_more_than_their_delegate_call_are_refused() -> None:
    """The guard behind every counted run: a batch of logged operators is followed by the end of its delegate
    call, and together they cannot hold more instructions than that call (an attribution gone wrong)."""
    from pytest_sme2.errors import RunnerError
    from pytest_sme2.evidence.qemu_counts import DELEGATE, RUNTIME, _check_delegate_calls

    # Method::init, two operators (3 + 4) inside a call of 10, then Method::execute
    _check_delegate_calls([RUNTIME, DELEGATE, DELEGATE, RUNTIME, RUNTIME], [5, 3, 4, 10, 100])
    with pytest.raises(RunnerError, match="2 logged XNNPACK operator.*12 instructions.*the 10 of the delegate call"):
        _check_delegate_calls([DELEGATE, DELEGATE, RUNTIME, RUNTIME], [6, 6, 10, 100])
