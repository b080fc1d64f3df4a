"""Kernel time from samples (issue 14): placing samples in ETDump events, naming and classifying kernels.

The ETDumps here are synthetic (ExecuTorch's own schema), so every event's time is known and each
sample's expected place is computed from the layout below, not read from the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers_etdump import GAP_NS, RunSpec, write_etdump

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.etdump import read_run
from pytest_sme2.evidence.kernel_sampling import BETWEEN_OPS, DELEGATE_OUTSIDE_OPS, KernelNamer, KernelTime, attribute
from pytest_sme2.evidence.kernel_trace import kernel_kind
from pytest_sme2.evidence.perf_samples import Sample

OFFSET_NS = 5_000_000_000  # the runner's steady clock - ETDump clock
LIB = "/opt/et/lib/libexecutorch_backend_xnnpack.so"
PORTABLE = "/opt/et/lib/libportable_kernels.so"
# One run: a delegate call holding two XNNPACK operators, then one portable operator.
CONV_NS, GEMM_NS, DELEGATE_NS, ADD_NS, ADD_CALL_NS, E2E_NS = 40_000, 20_000, 70_000, 10_000, 12_000, 100_000
RUN = RunSpec(
    e2e_ns=E2E_NS,
    delegate_call_ns=DELEGATE_NS,
    delegate_instr=0,
    delegate_ops=[("Convolution (NHWC, F32) IGEMM #1", CONV_NS), ("Fully Connected (NC, F32) GEMM #1", GEMM_NS)],
    portable_ops=[("native_call_add.out", ADD_NS, ADD_CALL_NS, 1)],
)


def _layout(t0: int) -> dict[str, tuple[int, int]]:
    """Where helpers_etdump puts each event of RUN that starts at t0 (ETDump ns)."""
    delegate = t0 + GAP_NS
    conv = delegate + GAP_NS
    add_call = delegate + DELEGATE_NS + GAP_NS
    add = add_call + (ADD_CALL_NS - ADD_NS) // 2
    return {
        "execute": (t0, t0 + E2E_NS),
        "delegate": (delegate, delegate + DELEGATE_NS),
        "conv": (conv, conv + CONV_NS),
        "gemm": (conv + CONV_NS, conv + CONV_NS + GEMM_NS),
        "add": (add, add + ADD_NS),
    }


@pytest.fixture
def two_runs(tmp_path: Path):  # noqa: ANN201
    path = write_etdump(tmp_path / "timed.etdp", [RUN, RUN])
    second = E2E_NS + 10 * GAP_NS
    return read_run(path), [_layout(0), _layout(second)]


def _at(etdump_ns: int, symbol: str | None, library: str = LIB, period: int = 10_000) -> Sample:
    return Sample(etdump_ns + OFFSET_NS, 1, period, library, symbol, None)


def test_each_sample_lands_in_the_innermost_event_that_holds_it(two_runs) -> None:  # noqa: ANN001
    trace, runs = two_runs
    middle = lambda span: (span[0] + span[1]) // 2  # noqa: E731
    samples = []
    for run in runs:
        samples += [
            _at(middle(run["conv"]), "conv_kernel"),
            _at(middle(run["conv"]), "conv_kernel"),
            _at(middle(run["gemm"]), "gemm_kernel"),
            _at(middle(run["add"]), "add_kernel"),
            _at(run["delegate"][1] - 100, "xnn_setup"),  # after the last XNNPACK op, inside the call
            _at(run["execute"][1] - 100, "runtime"),
        ]  # after every operator, inside the run
    samples += [_at(runs[1]["execute"][1] + 5_000, "outside"), _at(-1_000, "before")]  # between/before runs
    kernel_time = attribute(samples, trace, OFFSET_NS, KernelNamer(), period_ns=10_000)
    assert (kernel_time.samples_total, kernel_time.samples_placed) == (len(samples), len(samples) - 2)
    placed = {(row.event, row.kernel): row.samples for row in kernel_time.kernels.itertuples()}
    assert placed == {
        ("Convolution (NHWC, F32) IGEMM #1", "conv_kernel"): 4,
        ("Fully Connected (NC, F32) GEMM #1", "gemm_kernel"): 2,
        ("native_call_add.out", "add_kernel"): 2,
        (DELEGATE_OUTSIDE_OPS, "xnn_setup"): 2,
        (BETWEEN_OPS, "runtime"): 2,
    }
    conv = kernel_time.ops.set_index("event").loc["Convolution (NHWC, F32) IGEMM #1"]
    # 4 samples of 10 us over 2 runs; the ETDump says 40 us per run
    assert conv["sampled_ms_per_run"] == pytest.approx(4 * 0.010 / 2)
    assert conv["etdump_ms_per_run"] == pytest.approx(CONV_NS / 1e6)
    assert conv["category"] == "CONV" and bool(conv["delegated"])


def test_xnnpack_operators_are_placed_where_their_truncated_microseconds_put_them(two_runs) -> None:  # noqa: ANN001
    # XNNPACK's per-operator times are whole microseconds, truncated; laid back to back, each later operator
    # really starts half a microsecond per earlier operator later than written
    trace, runs = two_runs
    written_conv_end = runs[0]["conv"][1]
    just_after = attribute([_at(written_conv_end + 200, "k")], trace, OFFSET_NS, KernelNamer())
    assert just_after.kernels["event"].tolist() == ["Convolution (NHWC, F32) IGEMM #1"]
    later = attribute([_at(written_conv_end + 700, "k")], trace, OFFSET_NS, KernelNamer())
    assert later.kernels["event"].tolist() == ["Fully Connected (NC, F32) GEMM #1"]


def test_durations_that_are_not_whole_microseconds_are_placed_as_written(tmp_path: Path) -> None:
    run = RunSpec(
        e2e_ns=E2E_NS,
        delegate_call_ns=DELEGATE_NS,
        delegate_instr=0,
        delegate_ops=[("Convolution (NHWC, F32) IGEMM #1", CONV_NS + 1), ("Add (ND) #1", 20_000)],
    )
    trace = read_run(write_etdump(tmp_path / "ns.etdp", [run]))
    written_conv_end = _layout(0)["conv"][1] + 1
    placed = attribute([_at(written_conv_end + 200, "k")], trace, OFFSET_NS, KernelNamer())
    assert placed.kernels["event"].tolist() == ["Add (ND) #1"]


def test_the_clock_offset_is_what_places_samples(two_runs) -> None:  # noqa: ANN001
    trace, runs = two_runs
    conv_middle = sum(runs[0]["conv"]) // 2
    shifted = attribute([_at(conv_middle, "k")], trace, OFFSET_NS + CONV_NS, KernelNamer(), period_ns=10_000)
    # read with an offset one convolution too large, the sample lands before the run began
    assert shifted.samples_placed == 0


def test_kernels_per_operator_share_dominant_kernel_and_sme_share(two_runs) -> None:  # noqa: ANN001
    trace, runs = two_runs
    conv = sum(runs[0]["conv"]) // 2
    gemm = sum(runs[0]["gemm"]) // 2
    sme2 = "kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
    neon = "xnn_f32_gemm_minmax_ukernel_4x8__neonfma_lane_ld64"
    samples = [_at(conv, sme2)] * 6 + [_at(conv, neon)] * 2 + [_at(gemm, neon)] * 2
    kernel_time = attribute(samples, trace, OFFSET_NS, KernelNamer(), period_ns=10_000)
    conv_kernels = kernel_time.kernels_of("Convolution (NHWC, F32) IGEMM #1")
    assert list(conv_kernels["kernel"]) == [sme2, neon]
    assert list(conv_kernels["share"]) == pytest.approx([0.75, 0.25])
    assert list(conv_kernels["kind"]) == ["SME2", "NEON"]
    assert kernel_time.kernels_of("Convolution (NHWC, F32) IGEMM #1 @0").equals(conv_kernels)  # by op id
    with pytest.raises(
        ValueError,
        match=r"no operator 'Convolution \(NHWC, F16\) IGEMM #1' was sampled.*"
        r"Convolution \(NHWC, F32\) IGEMM #1 @0",
    ):
        kernel_time.kernels_of("Convolution (NHWC, F16) IGEMM #1")  # a typo must not read as "no kernels"
    assert kernel_time.dominant_kernels(min_samples=1) == {
        "Convolution (NHWC, F32) IGEMM #1 @0": sme2,
        "Fully Connected (NC, F32) GEMM #1 @0": neon,
    }
    assert kernel_time.kind_share() == pytest.approx(6 / 10)  # SME kernels over CONV+GEMM samples
    assert kernel_time.kind_share(categories=["GEMM"]) == 0.0
    with pytest.raises(ValueError, match="unknown kernel kinds"):
        kernel_time.kind_share(kinds=["SME3"])
    again = KernelTime.from_dict(kernel_time.as_dict())
    assert again.dominant_kernels(min_samples=1) == kernel_time.dominant_kernels(min_samples=1)
    assert again.kind_share() == kernel_time.kind_share()


def test_operators_with_one_event_name_in_two_partitions_stay_apart(tmp_path: Path) -> None:
    # each XNNPACK partition numbers its operators from #1, so event names repeat across delegate calls
    first = RunSpec(
        e2e_ns=50_000, delegate_call_ns=20_000, delegate_instr=0, delegate_ops=[("Transpose (ND, X32) #1", 10_000)]
    )
    path = write_etdump(tmp_path / "t.etdp", [first])
    trace = read_run(path)
    assert len(trace.ops) == 1
    second_partition = RunSpec(
        e2e_ns=50_000, delegate_call_ns=20_000, delegate_instr=3, delegate_ops=[("Transpose (ND, X32) #1", 10_000)]
    )
    both = read_run(write_etdump(tmp_path / "u.etdp", [first, second_partition]))
    ids = [f"{key.name} @{key.instruction_id}" for key in both.ops]
    assert ids == ["Transpose (ND, X32) #1 @0", "Transpose (ND, X32) #1 @3"]
    in_op = 2 * GAP_NS + 5_000  # inside the transpose of each run, relative to its run's start
    second_run = 50_000 + 10 * GAP_NS
    kernel_time = attribute([_at(in_op, "a"), _at(second_run + in_op, "b")], both, OFFSET_NS, KernelNamer())
    assert kernel_time.dominant_kernels(min_samples=1) == {ids[0]: "a", ids[1]: "b"}
    with pytest.raises(ValueError, match="several operators"):
        kernel_time.kernels_of("Transpose (ND, X32) #1")


@pytest.mark.parametrize(
    "name, kind",
    [
        ("kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", "SME2"),
        ("xnn_f32_gemm_minmax_ukernel_1x32__neonsme2", "SME2"),
        ("xnn_pf32_gemm_minmax_ukernel_32x32__neonsme", "SME"),
        ("kai_run_matmul_clamp_f32_qai8dxp1x8_qsi4cxp4x8_1x4x32_neon_dotprod", "NEON"),
        ("xnn_f16_f32acc_gemm_minmax_ukernel_4x16__avx2_broadcast", "x86 SIMD"),
        ("libexecutorch_backend_xnnpack.so@0xf7ad0-0xf830a", "unnamed"),
        ("kai_get_m_step_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", "other"),  # a helper, not a kernel
        ("memcpy", "other"),
    ],
)
def test_kernel_kinds_follow_the_instruction_set_in_the_name(name: str, kind: str) -> None:
    assert kernel_kind(name) == kind


def _library(tmp_path: Path) -> tuple[Path, Path]:
    """A shared library with two functions, and its stripped copy (what wheels ship)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or shutil.which("strip") is None:
        pytest.skip("needs a C compiler and strip: apt-get install gcc binutils")
    source = tmp_path / "k.c"
    # not exported: like most XNNPACK kernels, only the unstripped copy's .symtab names it
    source.write_text(
        '__attribute__((noinline, visibility("hidden"))) int hidden_kernel(int x) {\n'
        "  int s = 0; for (int i = 0; i < x; ++i) s += i * x; return s; }\n"
        "int exported_entry(int x) { return hidden_kernel(x) + 1; }\n"
    )
    unstripped = tmp_path / "full" / "libk.so"
    unstripped.parent.mkdir()
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(unstripped), str(source)], check=True)
    stripped = tmp_path / "shipped" / "libk.so"
    stripped.parent.mkdir()
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(unstripped)], check=True)
    return unstripped, stripped


def test_unnamed_code_is_named_by_its_function_range_and_by_an_unstripped_copy(tmp_path: Path) -> None:
    from pytest_sme2.system.elf import function_symbols

    unstripped, stripped = _library(tmp_path)
    symbols = function_symbols(unstripped)
    start = symbols.starts[symbols.names.index("hidden_kernel")]
    end = symbols.ends[symbols.names.index("hidden_kernel")]
    offset = next(o - v + start for v, o, size in symbols.loads if v <= start < v + size) + 1  # inside the function
    assert function_symbols(stripped).at_file_offset(offset) is None  # the shipped copy names nothing
    by_range = KernelNamer().name(str(stripped), None, offset)
    assert by_range == f"libk.so@0x{start:x}-0x{end:x}" and kernel_kind(by_range) == "unnamed"
    assert KernelNamer([unstripped.parent]).name(str(stripped), None, offset) == "hidden_kernel"
    # the profiler's own name is used when there is no unstripped copy
    assert KernelNamer().name(str(stripped), "from_perf", offset) == "from_perf"
    assert KernelNamer().name("[kernel.kallsyms]", "do_page_fault", None) == "do_page_fault"


def test_code_without_an_unwind_entry_is_named_by_the_gap_around_it(tmp_path: Path) -> None:
    """Hand-written assembly kernels carry no CFI, so no unwind entry: named by the functions around them."""
    from pytest_sme2.system.elf import function_symbols, unwind_function_ranges

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler: apt-get install gcc")
    (tmp_path / "a.c").write_text("int before_kernel(int x) { return x * 3 + 1; }\n")
    (tmp_path / "k.s").write_text(
        ".text\n.globl asm_kernel\n.hidden asm_kernel\n.type asm_kernel,@function\n"
        "asm_kernel:\n" + "  nop\n" * 64 + "  ret\n.size asm_kernel, .-asm_kernel\n"
    )
    (tmp_path / "b.c").write_text("int after_kernel(int x) { return x * 5 + 2; }\n")
    if shutil.which("strip") is None:
        pytest.skip("needs strip: apt-get install binutils")
    unstripped, library = tmp_path / "full.so", tmp_path / "libgap.so"
    subprocess.run(
        [
            compiler,
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
            str(unstripped),
            *(str(tmp_path / name) for name in ("a.c", "k.s", "b.c")),
        ],
        check=True,
    )
    subprocess.run(["strip", "--strip-all", "-o", str(library), str(unstripped)], check=True)  # as wheels ship
    symbols = function_symbols(unstripped)
    start = symbols.starts[symbols.names.index("asm_kernel")]
    ranges = unwind_function_ranges(library)
    assert not any(low <= start < high for low, high in ranges)  # really no unwind entry
    previous_end = max(high for _, high in ranges if high <= start)
    next_start = min(low for low, _ in ranges if low > start)
    offset = next(o - v + start for v, o, size in symbols.loads if v <= start < v + size) + 8
    name = KernelNamer().name(str(library), None, offset)
    assert name == f"libgap.so@0x{previous_end:x}-0x{next_start:x}" and kernel_kind(name) == "unnamed"


class _Emulated:
    class info:  # noqa: N801 - stands for a TargetInfo
        name = "emulated"
        emulated = True
        details: dict = {}


def test_the_emulated_target_is_not_sampled_and_says_where_its_kernels_come_from() -> None:
    from pytest_sme2.run.targets.emulated import EmulatedTarget

    with pytest.raises(UsageError, match="emulated timing is not hardware timing.*qemu's trace"):
        EmulatedTarget.kernel_sampler(_Emulated(), 1_000_000)  # type: ignore[arg-type]


def test_every_target_answers_for_its_kernel_sampler() -> None:
    """Sampling is a capability of the Target interface: each target class answers, none is found by type."""
    from pytest_sme2.run.targets.adb import AdbTarget
    from pytest_sme2.run.targets.emulated import EmulatedTarget
    from pytest_sme2.run.targets.host import HostTarget
    from pytest_sme2.run.targets.local import LocalTarget

    for target in (AdbTarget, EmulatedTarget, HostTarget, LocalTarget):
        assert callable(getattr(target, "kernel_sampler", None)), target


# --- the baseline check: an operator's dominant kernel replaced ------------------------------------------


def _record(**ops: tuple[int, dict[str, float]]) -> dict:
    return {"kernel_time": {op.replace("_", " "): {"samples": n, "kernels": k} for op, (n, k) in ops.items()}}


def _typed(**ops: tuple[int, dict[str, float]]) -> Any:
    from pytest_sme2.gate.record import GateRecord

    return GateRecord.from_json(_record(**ops))


def test_a_replaced_dominant_kernel_fails_the_gate_naming_the_operator_and_both_kernels() -> None:
    from pytest_sme2.gate.checks.dominant_kernel import _dominant_kernels
    from pytest_sme2.gate.verdict import Status

    before = _typed(conv_1=(400, {"xnn_f32_igemm__neonfma": 0.97, "xnn_f32_igemm_1x8__neonfma": 0.03}))
    after = _typed(conv_1=(390, {"kai_run_matmul_f32_sme2_mopa": 0.95, "xnn_f32_igemm__neonfma": 0.05}))
    [verdict] = _dominant_kernels("local sme2=on", after, before)
    assert verdict.status == Status.REGRESSION and verdict.check == "dominant_kernel"
    assert (
        "conv 1: xnn_f32_igemm__neonfma (97% of its samples) -> kai_run_matmul_f32_sme2_mopa (95%)" in verdict.message
    )


@pytest.mark.parametrize(
    "before, after",
    [
        # two kernels sharing an operator trade places: no change of kernel
        ((200, {"main": 0.55, "remainder": 0.45}), (200, {"remainder": 0.52, "main": 0.48})),
        # too few samples on one side to say anything
        ((10, {"a": 1.0}), (200, {"b": 1.0})),
        ((200, {"a": 1.0}), (12, {"b": 1.0})),
    ],
)
def test_kernels_trading_places_or_too_few_samples_pass(before, after) -> None:  # noqa: ANN001
    from pytest_sme2.gate.checks.dominant_kernel import _dominant_kernels
    from pytest_sme2.gate.verdict import Status

    [verdict] = _dominant_kernels("x", _typed(op=after), _typed(op=before))
    assert verdict.status == Status.OK


def test_no_kernel_check_when_either_side_was_not_sampled() -> None:
    from pytest_sme2.gate.checks.dominant_kernel import _dominant_kernels
    from pytest_sme2.gate.record import GateRecord

    assert _dominant_kernels("x", GateRecord(), _typed(op=(200, {"a": 1.0}))) == []
    assert _dominant_kernels("x", _typed(op=(200, {"a": 1.0})), GateRecord(kernel_time=None)) == []


def test_a_stored_kernel_record_of_the_wrong_shape_names_the_field() -> None:
    from pytest_sme2.gate.record import GateRecord

    good = {"latency": None, "samples_ms": [1.0], "shares": {}, **_record(op=(200, {"a": 1.0}))}
    assert GateRecord.problem(good, "p") is None
    bad = {**good, "kernel_time": {"op": {"samples": 200, "kernels": {"a": 3}}}}
    assert (
        GateRecord.problem(bad, "p")
        == "p.kernel_time['op'].kernels['a'] must be a fraction between 0 and 1, or null (it is int 3)"
    )


def test_perf_forbidden_to_users_says_how_to_allow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.evidence import perf_samples
    from pytest_sme2.evidence.samplers import PerfSampler

    monkeypatch.setattr(perf_samples.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(perf_samples, "_paranoid_level", lambda: 3)
    monkeypatch.setattr(perf_samples.shutil, "which", lambda name: "/usr/bin/perf")
    with pytest.raises(UsageError, match=r"perf_event_paranoid is 3.*sysctl kernel.perf_event_paranoid=2"):
        PerfSampler.here(100_000)
    monkeypatch.setattr(perf_samples, "_paranoid_level", lambda: 2)  # users may sample their own code only
    assert perf_samples.permission_problem() is None and perf_samples.sampling_event() == "cpu-clock:u"


def _profile_with_kernels(tmp_path: Path, samples: list) -> "object":
    from pytest_sme2 import Profile

    path = write_etdump(tmp_path / "timed.etdp", [RUN, RUN])
    profile = Profile.from_etdump(path, variant="local sme2=on threads=1")
    profile.kernel_time = attribute(samples, profile.trace, OFFSET_NS, KernelNamer())
    return profile


def test_assert_kernel_share_passes_fails_with_the_top_kernels_and_skips_without_samples(tmp_path: Path) -> None:
    from pytest_sme2 import assert_kernel_share

    conv = sum(_layout(0)["conv"]) // 2
    sme2 = "kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
    profile = _profile_with_kernels(tmp_path, [_at(conv, sme2)] * 9 + [_at(conv, "xnn_f32_igemm__neonfma")])
    assert assert_kernel_share(profile, at_least=0.9) == pytest.approx(0.9)
    with pytest.raises(
        AssertionError,
        match=r"90.0% of the sampled time of CONV\+GEMM operators went to SME2/SME "
        r"kernels, less than 95%\. Top kernels: kai_run_matmul",
    ):
        assert_kernel_share(profile, at_least=0.95)
    profile.kernel_time = None
    with pytest.raises(pytest.skip.Exception, match="--sme2-kernel-sampling=on"):
        assert_kernel_share(profile, at_least=0.5)
    profile.kernel_time = KernelTime.unavailable("Linux perf is missing: apt-get install linux-perf")
    with pytest.raises(pytest.skip.Exception, match="apt-get install linux-perf"):
        assert_kernel_share(profile, at_least=0.5)


def test_runs_in_which_the_runner_lost_its_core_are_left_out(tmp_path: Path) -> None:
    # two 400 us runs at a 10 us period: 40 samples each when the runner has its core; the second run
    # got only 16 (it waited while another job ran), so its operators' sampled time would read low
    long_run = RunSpec(
        e2e_ns=400_000,
        delegate_call_ns=350_000,
        delegate_instr=0,
        delegate_ops=[("Convolution (NHWC, F32) IGEMM #1", 300_000)],
    )
    trace = read_run(write_etdump(tmp_path / "long.etdp", [long_run, long_run]))
    second = 400_000 + 10 * GAP_NS
    on_cpu = [_at(t, "k") for t in range(2 * GAP_NS + 5_000, 2 * GAP_NS + 300_000, 10_000)]  # 30 in the conv
    on_cpu += [_at(t, "rt") for t in range(2 * GAP_NS + 305_000, 395_000, 10_000)]  # 10 more in the run
    lost = [_at(second + t, "k") for t in range(2 * GAP_NS + 5_000, 2 * GAP_NS + 160_000, 10_000)]  # 16
    kernel_time = attribute(on_cpu + lost, trace, OFFSET_NS, KernelNamer(), period_ns=10_000)
    assert (kernel_time.runs, kernel_time.runs_left_out) == (1, 1)
    conv = kernel_time.ops.set_index("event").loc["Convolution (NHWC, F32) IGEMM #1"]
    assert conv["samples"] == 30 and conv["sampled_ms_per_run"] == pytest.approx(0.300)
    assert conv["etdump_ms_per_run"] == pytest.approx(0.300)


def test_the_kernel_line_says_its_round_is_not_the_timed_one() -> None:
    from pytest_sme2.report.text import kernel_time_text

    # two operators of 1.25 and 0.5 ms per run in the sampled process's ETDump (one without an ETDump time)
    line = kernel_time_text(
        {
            "available": True,
            "runs": 30,
            "samples_placed": 500,
            "samples_total": 620,
            "sme_kernel_share_conv_gemm": 0.25,
            "kind_ms_per_run": {"SME2": 0.4},
            "top_kernels": [],
            "ops": [{"etdump_ms_per_run": 1.25}, {"etdump_ms_per_run": 0.5}, {"etdump_ms_per_run": None}],
        }
    )
    assert line.startswith(
        "kernels (a separate sampled process of 30 runs, about 1.750 ms each in its ETDump; "
        "500 of 620 samples fell in those runs"
    )
    assert "CPU time per run SME2 0.400 ms" in line
