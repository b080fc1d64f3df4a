"""Modelled device time (issue 26): exact numbers on a mix priced by hand, device files checked field by field,
and the refusals that keep modelled time from being read as something it is not.

The device file of these tests has round numbers (a 2 GHz core):

  resource   rates (instructions per ns)
  sme        mopa_fp32 4, za_vgx4 2
  neon       simd_fp 4 per cycle = 8 per ns
  rest       every other class 1
  pipeline   all 10
  memory     L2 up to 1,000 bytes: loads 10 GB/s, stores 5 GB/s; beyond: loads 1, stores 0.5

Operators priced by hand (instructions; bytes read / written; each resource's ns; the largest wins):

  A  mopa_fp32 4,000, scalar 100; 600 / 200 B   sme 1,000  rest 100  pipeline 410  memory 60+40=100    -> 1,000 ns (sme)
  B  simd_fp 8,000; 2,000 / 500 B (DRAM)        neon 1,000  pipeline 800  memory 2,000+1,000=3,000     -> 3,000 ns (memory)
  C  scalar 3,000, za_vgx4 100; bytes unknown   rest 3,000  sme 50  pipeline 310                       -> 3,000 ns (rest)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers_emulated import counted_profiles
from helpers_etdump import RunSpec, emulated_metadata, write_counts, write_etdump

from pytest_sme2 import assert_no_modelled_sme2_slowdown
from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.instruction_classes import NAMES
from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, InstructionTrace
from pytest_sme2.profile.device_model import Traffic, available_devices, load_device, modelled_time
from pytest_sme2.profile.profile import Profile

OTHERS = [n for n in NAMES if n not in ("mopa_fp32", "za_vgx4", "simd_fp")]
MEMORY_KEYS = ("l2_bytes", "l2_load_gb_per_s", "l2_store_gb_per_s", "dram_load_gb_per_s", "dram_store_gb_per_s")
DEVICE = "\n".join(
    [
        'name = "round"',
        'description = "a device with round numbers"',
        'validation = "test device"',
        "svl_bits = 512",
        "threads = 1",
        "clock_ghz = 2",
        'source.svl_bits = "test"',
        'source.threads = "test"',
        'source.clock_ghz = "test"',
        "[resources.sme]",
        "per_ns.mopa_fp32 = 4",
        "per_ns.za_vgx4 = 2",
        'source.mopa_fp32 = "test"',
        'source.za_vgx4 = "test"',
        "[resources.neon]",
        "per_cycle.simd_fp = 4",
        'source.simd_fp = "test"',
        "[resources.rest]",
        *[f"per_ns.{n} = 1" for n in OTHERS],
        *[f'source.{n} = "test"' for n in OTHERS],
        "[resources.pipeline]",
        "per_ns.all = 10",
        'source.all = "test"',
        "[memory]",
        "l2_bytes = 1000",
        "l2_load_gb_per_s = 10",
        "l2_store_gb_per_s = 5",
        "dram_load_gb_per_s = 1",
        "dram_store_gb_per_s = 0.5",
        *[f'source.{k} = "test"' for k in MEMORY_KEYS],
        "",
    ]
)


def _mix(**counts: int) -> list[float]:
    return [float(counts.get(n, 0)) for n in NAMES]


@pytest.fixture
def device_file(tmp_path: Path) -> Path:
    path = tmp_path / "round.toml"
    path.write_text(DEVICE)
    return path


def test_each_operator_costs_its_busiest_resource_or_its_bytes(device_file: Path) -> None:
    device = load_device(device_file)
    mix = np.array([_mix(mopa_fp32=4000, scalar=100), _mix(simd_fp=8000), _mix(scalar=3000, za_vgx4=100)])
    ns, bound = device.op_ns(mix, np.array([600, 2000, np.nan]), np.array([200, 500, np.nan]))
    # B: 2,500 bytes, 1,000 of them (the L2 size) at L2 rates (2,000/10 + 500/5 = 300 ns for all of them), the other
    # 1,500 at DRAM rates (2,000/1 + 500/0.5 = 3,000 ns for all of them): 0.4 x 300 + 0.6 x 3,000 = 1,920 ns
    assert ns.tolist() == [1000.0, 1920.0, 3000.0]
    assert bound == ["sme", "memory", "rest"]


def test_memory_time_is_continuous_across_the_l2_size(device_file: Path) -> None:
    """A model author's trial: a layer 0.4% wider, its bytes just over L2, was modelled 5.9x slower when every byte
    went to DRAM rates once they did not all fit. Now 4 bytes over a 1,000-byte L2 cost 4 bytes' worth more."""
    device = load_device(device_file)
    at, over = device.memory_ns(np.array([1000.0, 1004.0]), np.array([0.0, 0.0]))
    assert at == pytest.approx(100.0)  # 1,000 bytes at 10 GB/s
    assert over == pytest.approx(1000 / 1004 * 1004 / 10 + 4 / 1004 * 1004 / 1)  # 100 + 4 ns
    assert device.memory_ns(np.array([0.0]), np.array([0.0])).tolist() == [0.0]


def test_a_profile_is_priced_per_operator_category_and_end_to_end(device_file: Path) -> None:
    ops = pd.DataFrame(
        {
            "event": ["a", "b", "c"],
            "op": ["a", "b", "c"],
            "category": ["CONV", "DATA_MOVEMENT", "CONV"],
            "delegated": [True, True, False],
        }
    )
    mix = np.array([_mix(mopa_fp32=4000, scalar=100), _mix(simd_fp=8000), _mix(scalar=3000, za_vgx4=100)])
    outside = np.array(_mix(scalar=500))  # 500 ns on "rest"
    on = modelled_time(
        load_device(device_file),
        "on",
        ops,
        mix,
        outside,
        Traffic(np.array([600, 2000, np.nan]), np.array([200, 500, np.nan])),
    )
    assert on.ops["modelled_ms"].tolist() == [0.001, 0.00192, 0.003]  # B: its bytes, as above
    assert on.outside_ops_ms == 0.0005
    assert on.e2e_ms == pytest.approx(0.00642)
    assert on.category_ms == pytest.approx(
        {"CONV": 0.004, "GEMM": 0.0, "DATA_MOVEMENT": 0.00192, "ELEMENTWISE": 0.0, "OTHER": 0.0005}
    )
    assert on.share("data_movement") == pytest.approx(1.92 / 6.42)
    # the same operators without outer products: A's 4,000 FMOPA become 64,000 NEON FMLA (8,000 ns)
    off_mix = np.array([_mix(simd_fp=64000, scalar=100), _mix(simd_fp=8000), _mix(scalar=3000, za_vgx4=100)])
    off = modelled_time(
        load_device(device_file),
        "off",
        ops,
        off_mix,
        outside,
        Traffic(np.array([600, 2000, np.nan]), np.array([200, 500, np.nan])),
    )
    speedup = on.speedup_over(off)
    assert speedup.value == pytest.approx(13.42 / 6.42) and speedup.low == speedup.high == speedup.value
    assert speedup.by_category["CONV"] == pytest.approx(11.0 / 4.0)
    assert speedup.by_category["DATA_MOVEMENT"] == pytest.approx(1.0)
    assert "modelled on round (test device)" in repr(speedup) and "not a measurement" in repr(speedup)
    with pytest.raises(TypeError, match="never mix"):
        on.speedup_over(object())  # type: ignore[arg-type]


def test_operators_modelled_slower_with_sme2_are_paired_by_identity_and_named(device_file: Path) -> None:
    """The same program's operators: SME2 on (A: 4,000 za_vgx4 = 2,000 ns; B: 4,000 FMOPA = 1,000 ns) against
    SME2 off (A: 8,000 NEON = 1,000 ns; B: 64,000 NEON = 8,000 ns), listed in another order off: A is 2x
    slower with SME2, B 8x faster."""
    device = load_device(device_file)
    none = np.array([np.nan, np.nan])

    def priced(events: list[str], identities: list[str], mix: list[list[float]], label: str):  # noqa: ANN202
        ops = pd.DataFrame(
            {"event": events, "op": events, "category": ["GEMM", "CONV"][: len(events)], "delegated": [True, True]}
        )
        return modelled_time(device, label, ops, np.array(mix), np.array(_mix()), Traffic(none, none), identities)

    on = priced(
        ["GEMM PF32 #1", "CONV PF32 #1"],
        ["fc: linear", "conv: convolution"],
        [_mix(za_vgx4=4000), _mix(mopa_fp32=4000)],
        "on",
    )
    off = priced(
        ["CONV F32 #1", "GEMM F32 #1"],
        ["conv: convolution", "fc: linear"],
        [_mix(simd_fp=64000), _mix(simd_fp=8000)],
        "off",
    )
    slower = on.slower_than(off)
    assert slower[["identity", "event", "other_event"]].values.tolist() == [
        ["fc: linear", "GEMM PF32 #1", "GEMM F32 #1"]
    ]
    assert slower["modelled_ms"].tolist() == [0.002] and slower["other_ms"].tolist() == [0.001]
    assert slower["ratio"].tolist() == [2.0]
    assert on.slower_than(off, by=2.0).empty  # "more than by times slower"
    assert off.slower_than(on)["identity"].tolist() == ["conv: convolution"]


def _profile(tmp_path: Path, svl: int = 512, threads: int = 1, counted: bool = True) -> Profile:
    """A counted emulated run: a convolution (40 FMOPA, 60 scalar), a transpose (200 NEON), a portable layer norm
    (300 scalar), and 400 scalar instructions in Method::execute outside them."""
    conv, transpose, norm = (
        "Convolution (NHWC, PF32) IGEMM #1",
        "Transpose (ND, X32) #1",
        "native_call_native_layer_norm.out",
    )
    folder = tmp_path / f"run-{svl}-{threads}-{counted}"
    folder.mkdir()
    run = RunSpec(
        e2e_ns=1_000_000,
        delegate_call_ns=800_000,
        delegate_instr=1,
        delegate_ops=[(conv, 300_000), (transpose, 200_000)],
        portable_ops=[(norm, 60_000, 80_000, 5)],
    )
    etdump = write_etdump(folder / "timed.etdp", [run, run])
    instructions = None
    if counted:
        write_counts(
            etdump,
            {
                "Method::execute": {"mopa_fp32": 40, "simd_fp": 200, "scalar": 60 + 300 + 400},
                "DELEGATE_CALL": {"mopa_fp32": 40, "simd_fp": 200, "scalar": 60},
                "OPERATOR_CALL": {"scalar": 300},
                conv: {"mopa_fp32": 40, "scalar": 60},
                transpose: {"simd_fp": 200},
                norm: {"scalar": 300},
            },
        )
        instructions = InstructionTrace.from_counts(folder / COUNTS_FILE, etdump, None)
    return Profile.from_etdump(
        etdump,
        model="m",
        recipe="fp32-xnnpack",
        variant="emulated sme2=on",
        metadata=emulated_metadata(True, threads, svl),
        instructions=instructions,
    )


def test_profile_modelled_reads_the_counted_classes_and_the_instructions_outside_operators(
    tmp_path: Path, device_file: Path
) -> None:
    modelled = _profile(tmp_path).modelled(device_file)
    # conv: sme 10 ns, rest 60 ns, pipeline 10 ns -> 60; transpose: neon 25 ns, pipeline 20 -> 25; norm: 300 ns;
    # outside operators (the delegate call's and the runtime's own instructions): 400 scalar -> 400 ns
    assert modelled.ops["modelled_ms"].tolist() == pytest.approx([60e-6, 25e-6, 300e-6])
    assert modelled.ops["bound"].tolist() == ["rest", "neon", "rest"]
    assert modelled.outside_ops_ms == pytest.approx(400e-6)
    assert modelled.e2e_ms == pytest.approx(785e-6)
    assert modelled.category_ms["CONV"] == pytest.approx(60e-6)
    assert modelled.category_ms["DATA_MOVEMENT"] == pytest.approx(25e-6)


def test_modelled_time_is_refused_where_the_model_does_not_hold(tmp_path: Path, device_file: Path) -> None:
    with pytest.raises(UsageError, match="not counted by instruction class.*--sme2-no-kernel-trace .* skips it"):
        _profile(tmp_path, counted=False).modelled(device_file)  # emulated: the kernel trace was skipped
    with pytest.raises(UsageError, match="vector length of 128 bits.*--sme2-emulated-svl=512"):
        _profile(tmp_path, svl=128).modelled(device_file)
    with pytest.raises(UsageError, match="4 threads.*share one SME unit"):
        _profile(tmp_path, threads=4).modelled(device_file)
    with pytest.raises(UsageError, match="no device model 'pixel-99'.*apple-m4"):
        _profile(tmp_path).modelled("pixel-99")


@pytest.mark.parametrize(
    "change, message",
    [
        (('source.mopa_fp32 = "test"\n', ""), "resources.sme.per_ns.mopa_fp32 has no source"),
        (("per_ns.mopa_fp32 = 4", "per_ns.mopa_fp32 = -4"), "must be a positive number"),
        (("per_ns.mopa_fp32 = 4", "per_ns.mopa_fp33 = 4"), "mopa_fp33 names no instruction class"),
        (("per_ns.all = 10\nsource.all", "per_ns.scalar = 10\nsource.scalar"), None),  # valid: scalar on two resources
        (('[resources.neon]\nper_cycle.simd_fp = 4\nsource.simd_fp = "test"\n', ""), "no resource executes.*simd_fp"),
        (("dram_store_gb_per_s = 0.5\n", ""), "memory.dram_store_gb_per_s must be a positive number"),
        (('source.clock_ghz = "test"\n', ""), "clock_ghz has no source"),
        # out of each number's physical range: a rate whose reciprocal is infinite, a fraction of a thread, a vector
        # length no CPU has, a byte count that is not whole
        (("per_ns.mopa_fp32 = 4", "per_ns.mopa_fp32 = 1e-320"), r"per_ns.mopa_fp32 must be .* from 1e-06 to 10000"),
        (("per_cycle.simd_fp = 4", "per_cycle.simd_fp = 1e-320"), r"per_cycle.simd_fp must be .* from 1e-06"),
        (("clock_ghz = 2", "clock_ghz = 1e300"), r"clock_ghz .* must be .* from 0.01 to 20 \(GHz"),
        (("threads = 1", "threads = 0.5"), r"threads must be a positive number from 1 to 1024"),
        (("threads = 1", "threads = 1.5"), r"threads must be a whole number, not 1.5"),
        (("svl_bits = 512", "svl_bits = 1e300"), r"svl_bits must be .* from 128 to 2048"),
        (("svl_bits = 512", "svl_bits = 384"), r"svl_bits must be a power of two"),
        (("l2_bytes = 1000", "l2_bytes = 1000.5"), r"memory.l2_bytes must be a whole number"),
        (("dram_load_gb_per_s = 1", "dram_load_gb_per_s = 1e-320"), r"memory.dram_load_gb_per_s must be .* \(GB/s"),
        (('validation = "test device"', 'validation = "test\\n::error::forged"'), r"'validation' must be one line"),
    ],
)
def test_a_device_file_without_a_source_or_with_a_bad_number_names_the_field(
    tmp_path: Path, change: tuple[str, str], message: str | None
) -> None:
    old, new = change
    assert old in DEVICE
    path = tmp_path / "edited.toml"
    path.write_text(DEVICE.replace(old, new))
    if message is None:
        load_device(path)
        return
    with pytest.raises(UsageError, match=message) as raised:
        load_device(path)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "huge"])
def test_a_device_path_that_is_no_regular_file_or_too_large_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    """A FIFO or /dev/zero is not "no device file at X (did you mean X?)", and a file past the bound is refused
    by its size, before a byte of it is read (a sparse 300 MB file: read whole it took 941 MB of memory)."""
    import os

    if kind == "fifo":
        path = tmp_path / "pipe.toml"
        os.mkfifo(path)
        expected = r"the device file .*pipe.toml is a FIFO \(named pipe\), not a regular file"
    elif kind == "/dev/zero":
        path = Path("/dev/zero")
        expected = r"the device file /dev/zero is a character device, not a regular file"
    else:
        path = tmp_path / "huge.toml"
        with path.open("wb") as out:
            out.truncate(300 * 1024 * 1024)
        expected = r"the device file .*huge.toml is 300 MiB, above the 1 MiB a device file can be"
    with pytest.raises(UsageError, match=expected):
        load_device(str(path))


def test_every_shipped_device_covers_every_class_with_a_sourced_number() -> None:
    assert "apple-m4" in available_devices()
    for name in available_devices():
        device = load_device(name)  # the checks above: every number positive and sourced, every class executed
        assert device.svl_bits == 512 and device.threads == 1
        for resource in device.resources:
            assert set(resource.sources) == set(resource.per_ns)
    m4 = load_device("apple-m4")
    sme = next(r for r in m4.resources if r.name == "sme_compute")
    # the published M4 ratios the model must keep: FP16 widening and INT8 outer products half the FP32 rate
    # (2 and 4 TFLOPS/TOPS for 2x and 4x the work per instruction), 4-vector ZA operations half the 2-vector rate
    assert sme.per_ns["mopa_fp16"] / sme.per_ns["mopa_fp32"] == pytest.approx(0.5, abs=0.01)
    assert sme.per_ns["mopa_int8"] / sme.per_ns["mopa_fp32"] == pytest.approx(0.5, abs=0.01)
    assert sme.per_ns["za_vgx4"] / sme.per_ns["za_vgx2"] == pytest.approx(0.5, abs=0.01)


@pytest.fixture(scope="module")
def mlp_counted(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> dict[bool, Profile]:
    """The bundled mlp, fp32, counted under emulation with SME2 on and off (from the run's result cache when
    another test counted it already: the counts are the same either way)."""
    on, off = counted_profiles(
        tmp_path_factory.mktemp("modelled"), "mlp", (True, False), warmup=1, cache=shared_export_cache
    )
    return {True: on, False: off}


def test_a_real_model_modelled_on_the_m4_is_bound_by_outer_products_with_sme2_and_neon_without(mlp_counted) -> None:
    on, off = mlp_counted[True].modelled("apple-m4"), mlp_counted[False].modelled("apple-m4")
    for modelled, profile in ((on, mlp_counted[True]), (off, mlp_counted[False])):
        assert list(modelled.ops["event"]) == list(profile.ops["event"])
        assert (modelled.ops["modelled_ms"] > 0).all() and modelled.outside_ops_ms >= 0
        assert modelled.e2e_ms == pytest.approx(modelled.ops["modelled_ms"].sum() + modelled.outside_ops_ms)
        assert sum(modelled.category_ms.values()) == pytest.approx(modelled.e2e_ms)
        assert "modelled on apple-m4" in modelled.device.label
        # no operator beats the device's peak: the M4's FP32 FMOPA rate (2 TFLOPS) with SME2, four 128-bit NEON
        # FMA pipes at 4.465 GHz (143 GFLOPS, vfpbench on an M4 Pro) without; the FLOPs are the exported
        # program's (work.py)
        peak_gflops = 3.896 * 512 if modelled is on else 4 * 4.465 * 8
        flops = profile.ops["flops"].to_numpy(dtype=float)
        assert (modelled.ops["modelled_ms"].to_numpy() * 1e6 >= np.nan_to_num(flops) / peak_gflops * 0.999).all()
    gemm = on.ops["category"] == "GEMM"
    assert gemm.any() and set(on.ops.loc[gemm, "bound"]) == {"sme_compute"}
    assert set(off.ops.loc[gemm, "bound"]) == {"fp_simd"}
    speedup = on.speedup_over(off)
    instruction_ratio = mlp_counted[False].instructions_per_inference / mlp_counted[True].instructions_per_inference
    # an FMOPA does the work of 64 NEON FMLAs in the time of about 4.6: faster, but far less than the instruction
    # ratio says
    assert 2.0 < speedup.value < instruction_ratio / 2
    assert speedup.by_category["GEMM"] > 2.0
    # the same counts give the same modelled times
    again = mlp_counted[True].modelled("apple-m4")
    assert again.ops["modelled_ms"].tolist() == on.ops["modelled_ms"].tolist()
    # batch 64: every GEMM is faster with SME2 (operators paired by graph node across the two runs)
    assert set(on.ops["identity"]) == set(off.ops["identity"]) and all(":" in i for i in on.ops["identity"])
    assert_no_modelled_sme2_slowdown(mlp_counted[True], mlp_counted[False])


GEMV = """
import torch

def get_eager_model():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8)).eval()

def get_example_inputs():
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(1)),)
"""


def test_a_batch_1_linear_model_is_flagged_slower_with_sme2_on_the_m4(tmp_path: Path) -> None:
    """XNNPACK #10719's case on a real program: at batch 1 (matrix-vector) the packed SME2 kernels run SME2
    FMLA into ZA array vectors plus a fixed cost per call (streaming mode, ZA zeroed and stored, predicates). For
    8 x 8 layers the M4 model prices that above NEON's loads and FMLAs (10.9 against 9.2 ns a layer), so both are
    flagged. At 32 x 32 it does not (21 against 25 ns): the first layer's flag that case once had was the
    dynamic loader's lazy binding counted inside its first call, which counted runs no longer do. (#10719
    measured a vivo X300, not the M4.)"""
    on, off = counted_profiles(tmp_path, "gemv", (True, False), source=GEMV)
    mix = on.instruction_mix()
    assert (mix["za_vgx4"] + mix["za_vgx2"]).sum() > 0 and mix["mopa_fp32"].sum() == 0  # GEMV kernels, no FMOPA
    with pytest.raises(AssertionError) as failed:
        assert_no_modelled_sme2_slowdown(on, off)
    message = str(failed.value)
    assert "modelled slower with SME2 on than off on apple-m4" in message and "not a measurement" in message
    # both layers, each by its graph node: the same shape, the same per-call cost
    assert "0: aten.linear.default" in message and "2: aten.linear.default" in message


def test_bad_arguments_and_swapped_profiles_are_refused_naming_the_fix(tmp_path: Path, device_file: Path) -> None:
    """A model author's trial: slower_than(by=-1.0) and a negative tolerance listed faster operators as "0.83x
    slower", and assert_no_modelled_sme2_slowdown(off, on) named NEON kernels as the SME2 side."""
    from pytest_sme2.gate.assertions import assert_no_modelled_sme2_slowdown

    on = _profile(tmp_path)
    modelled = on.modelled(device_file)
    for by in (-1.0, 0.5, float("nan")):
        with pytest.raises(UsageError, match=r"slower_than\(by=.*a number >= 1"):
            modelled.slower_than(modelled, by=by)
    with pytest.raises(UsageError, match=r"tolerance=-0.5.*a number >= 0"):
        assert_no_modelled_sme2_slowdown(on, on, device=device_file, tolerance=-0.5)
    import copy

    off = copy.copy(on)  # the same counts, asked with SME2 on: passed second, as if swapped
    on.metadata = {**on.metadata, "run": {**(on.metadata.get("run") or {}), "sme2": False}}
    off.metadata = {**off.metadata, "run": {**(off.metadata.get("run") or {}), "sme2": True}}
    with pytest.raises(UsageError, match="ran with SME2 off .* with SME2 on; pass the SME2-on profile first"):
        assert_no_modelled_sme2_slowdown(on, off, device=device_file)
    text = repr(modelled)
    assert text.startswith("ModelledTime(") and "end to end" in text and len(text) < 400
