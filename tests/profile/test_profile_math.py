"""Profile semantics on synthetic ETDumps whose every time is known; expectations computed here by hand."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from helpers_etdump import RunSpec, execute_only, write_etdump

from pytest_sme2 import assert_delegation, assert_share, assert_speedup
from pytest_sme2.profile.profile import Profile

CONV = "Convolution (NHWC, F32) IGEMM #1"  # delegated, plain F32 kernel
FC = "Fully Connected (NC, PF32) GEMM #1"  # delegated, packed (SME2) kernel
TRANSPOSE = "Transpose (ND, X32) #1"
LAYER_NORM = "native_call_native_layer_norm.out"  # portable, OTHER
MUL = "native_call_mul.Scalar_out"  # portable, ELEMENTWISE
OPCALL_OVERHEAD_US = 10

# Per run, microseconds. Runs differ in length so medians, means and totals all differ.
RUNS = [
    # e2e, delegate call, conv, fc, transpose, layer_norm#instr1, mul#instr2, layer_norm#instr3
    dict(e2e=1100, dc=750, conv=400, fc=200, tr=100, ln1=150, mul=20, ln2=40),
    dict(e2e=1300, dc=900, conv=480, fc=260, tr=110, ln1=180, mul=30, ln2=40),
    dict(e2e=2000, dc=1400, conv=900, fc=300, tr=150, ln1=250, mul=20, ln2=40),
]
KW = dict(model="m", recipe="fp32-xnnpack", variant="v", delegation={"delegated_nodes": 9, "non_delegated_nodes": 1})
US = 1_000  # ns per us


def _spec(r: dict) -> RunSpec:
    return RunSpec(
        e2e_ns=r["e2e"] * US,
        delegate_call_ns=r["dc"] * US,
        delegate_instr=0,
        delegate_ops=[(CONV, r["conv"] * US), (FC, r["fc"] * US), (TRANSPOSE, r["tr"] * US)],
        portable_ops=[
            (LAYER_NORM, r["ln1"] * US, (r["ln1"] + OPCALL_OVERHEAD_US) * US, 1),
            (MUL, r["mul"] * US, (r["mul"] + OPCALL_OVERHEAD_US) * US, 2),
            (LAYER_NORM, r["ln2"] * US, (r["ln2"] + OPCALL_OVERHEAD_US) * US, 3),
        ],
    )


def total(key: str) -> float:
    """Sum over runs, in ms."""
    return sum(r[key] for r in RUNS) / 1000.0


def per_run(key: str) -> list[float]:
    return [r[key] / 1000.0 for r in RUNS]


# Run 3 (2000 us) is more than 1.5x the fastest (1100 us): the machine disturbed it, so it is left out of
# shares, coverage and SME path (medians of per-run values over the undisturbed runs 1 and 2).
UNDISTURBED = RUNS[:2]


def clean_median(value) -> float:  # noqa: ANN001 - a function of one run's dict
    return statistics.median(value(r) for r in UNDISTURBED)


@pytest.fixture(scope="module")
def etdump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_etdump(
        tmp_path_factory.mktemp("profile") / "p.etdp", [_spec(r) for r in RUNS], load_ns=3_000_000, init_ns=1_000_000
    )


@pytest.fixture(scope="module")
def profile(etdump: Path) -> Profile:
    return Profile.from_etdump(etdump, **KW)


# ---------------------------------------------------------------- latency


def test_latency(profile: Profile) -> None:
    assert profile.runs == 3
    np.testing.assert_allclose(profile.e2e_ms, per_run("e2e"), rtol=0, atol=1e-12)
    assert profile.median_ms == pytest.approx(1.3, abs=1e-12)  # median of 1.1, 1.3, 2.0
    assert profile.latency.median == pytest.approx(1.3, abs=1e-12)
    assert profile.latency.mean == pytest.approx((1.1 + 1.3 + 2.0) / 3, abs=1e-12)
    assert profile.load_ms == pytest.approx(3.0, abs=1e-12)
    assert profile.init_ms == pytest.approx(1.0, abs=1e-12)
    assert profile.label == "m fp32-xnnpack [v]"


# ------------------------------------------------------------- categories


KEYS = {"CONV": "conv", "GEMM": "fc", "DATA_MOVEMENT": "tr", "ELEMENTWISE": "mul"}


def _other_us(r: dict) -> float:
    return r["e2e"] - sum(r[key] for key in KEYS.values())


def _expected_shares() -> dict[str, float]:
    shares = {name: clean_median(lambda r, key=key: r[key] / r["e2e"]) for name, key in KEYS.items()}
    shares["OTHER"] = clean_median(lambda r: _other_us(r) / r["e2e"])
    return shares


def test_the_stalled_run_is_seen(profile: Profile) -> None:
    assert list(profile.clean) == [True, True, False]
    assert profile.disturbed_runs == 1
    assert profile.to_dict()["disturbed_runs"] == 1


def test_shares_by_hand(profile: Profile) -> None:
    expected = _expected_shares()
    assert profile.shares == pytest.approx(expected, abs=1e-12)
    for name, value in expected.items():
        assert profile.share(name) == pytest.approx(value, abs=1e-12)
    assert profile.share("data movement") == pytest.approx(expected["DATA_MOVEMENT"], abs=1e-12)


def test_share_is_median_of_undisturbed_runs_not_ratio_of_totals(profile: Profile) -> None:
    ratio_of_totals = total("conv") / total("e2e")
    median_of_all = statistics.median(r["conv"] / r["e2e"] for r in RUNS)
    median_of_clean = clean_median(lambda r: r["conv"] / r["e2e"])
    assert min(abs(median_of_clean - ratio_of_totals), abs(median_of_clean - median_of_all)) > 1e-3  # distinguishable
    assert profile.share("conv") == pytest.approx(median_of_clean, abs=1e-12)
    np.testing.assert_allclose(profile.share_samples("conv"), [r["conv"] / r["e2e"] for r in RUNS], rtol=0, atol=1e-12)


def test_total_shares_are_ratios_of_totals_and_sum_to_one(profile: Profile) -> None:
    totals = {name: total(key) / total("e2e") for name, key in KEYS.items()}
    totals["OTHER"] = sum(_other_us(r) for r in RUNS) / 1000 / total("e2e")
    assert profile.total_shares == pytest.approx(totals, abs=1e-12)
    assert sum(profile.total_shares.values()) == pytest.approx(1.0, abs=1e-12)


STALL_US = 5_000


def test_a_5ms_stall_in_one_operator_moves_no_share_coverage_or_sme_path(tmp_path: Path) -> None:
    """Forty steady runs of a 1.1 ms program, then the same with one run's Transpose stalled by 5 ms."""
    steady = [RUNS[0]] * 40
    stalled = [
        *steady[:17],
        {**RUNS[0], "tr": RUNS[0]["tr"] + STALL_US, "dc": RUNS[0]["dc"] + STALL_US, "e2e": RUNS[0]["e2e"] + STALL_US},
        *steady[18:],
    ]
    a = Profile.from_etdump(write_etdump(tmp_path / "a.etdp", [_spec(r) for r in steady]), **KW)
    b = Profile.from_etdump(write_etdump(tmp_path / "b.etdp", [_spec(r) for r in stalled]), **KW)
    assert (a.disturbed_runs, b.disturbed_runs) == (0, 1)
    assert b.shares == pytest.approx(a.shares, abs=1e-12)
    assert b.delegation_coverage == pytest.approx(a.delegation_coverage, abs=1e-12)
    assert b.sme_path_share == pytest.approx(a.sme_path_share, abs=1e-12)
    # A total over runs is moved by the one stall: what verdicts used to read.
    assert b.total_shares["DATA_MOVEMENT"] - a.total_shares["DATA_MOVEMENT"] > 0.05


def test_other_per_run_is_e2e_minus_named(profile: Profile) -> None:
    frame = profile.category_ms
    assert len(frame) == 3
    for i, r in enumerate(RUNS):
        named_us = r["conv"] + r["fc"] + r["tr"] + r["mul"]
        assert frame["CONV"][i] == pytest.approx(r["conv"] / 1000, abs=1e-12)
        assert frame["GEMM"][i] == pytest.approx(r["fc"] / 1000, abs=1e-12)
        assert frame["DATA_MOVEMENT"][i] == pytest.approx(r["tr"] / 1000, abs=1e-12)
        assert frame["ELEMENTWISE"][i] == pytest.approx(r["mul"] / 1000, abs=1e-12)
        assert frame["OTHER"][i] == pytest.approx((r["e2e"] - named_us) / 1000, abs=1e-12)
        assert frame.iloc[i].sum() == pytest.approx(r["e2e"] / 1000, abs=1e-12)


# ------------------------------------------------------------- delegation


def test_delegation_coverage(profile: Profile) -> None:
    assert profile.delegation_coverage == pytest.approx(clean_median(lambda r: r["dc"] / r["e2e"]), abs=1e-12)
    assert profile.node_delegation_coverage == pytest.approx(9 / 10, abs=1e-12)


def test_node_coverage_unknown_without_record(etdump: Path) -> None:
    assert Profile.from_etdump(etdump).node_delegation_coverage is None


# --------------------------------------------------------------- SME path


def test_sme_path(profile: Profile) -> None:
    # Only the FC ran a packed (PF32) kernel; CONV+GEMM time is conv + fc.
    assert profile.sme_path_share == pytest.approx(clean_median(lambda r: r["fc"] / (r["conv"] + r["fc"])), abs=1e-12)
    assert profile.sme_path_ops == 1


def test_sme_path_none_without_conv_or_gemm(tmp_path: Path) -> None:
    runs = [RunSpec(e2e_ns=500_000, delegate_call_ns=300_000, delegate_ops=[(TRANSPOSE, 100_000)])]
    p = Profile.from_etdump(write_etdump(tmp_path / "t.etdp", runs))
    assert p.sme_path_share is None
    assert p.sme_path_ops == 0


def test_sme_path_all_packed(tmp_path: Path) -> None:
    runs = [
        RunSpec(
            e2e_ns=900_000,
            delegate_call_ns=800_000,
            delegate_ops=[
                ("Convolution (NHWC, PF32) IGEMM #1", 300_000),
                (FC, 200_000),
                ("Convolution (NHWC, F32) DWConv #2", 100_000),
            ],
        )
    ]
    p = Profile.from_etdump(write_etdump(tmp_path / "t.etdp", runs))
    assert p.sme_path_share == pytest.approx(500 / 600, abs=1e-12)  # DWConv stays F32
    assert p.sme_path_ops == 2


# -------------------------------------------------------------- operators


def test_ops_table(profile: Profile) -> None:
    ops = profile.ops
    assert len(ops) == 6
    by_instr = {(row.event, row.instruction_id): row for row in ops.itertuples()}
    conv = by_instr[(CONV, 0)]
    assert conv.delegated and not conv.packed and conv.category == "CONV"
    assert conv.total_ms == pytest.approx(total("conv"), abs=1e-12)
    assert conv.median_ms == pytest.approx(statistics.median(per_run("conv")), abs=1e-12)
    assert conv.mean_ms == pytest.approx(statistics.mean(per_run("conv")), abs=1e-12)
    assert conv.share == pytest.approx(total("conv") / total("e2e"), abs=1e-12)
    assert conv.runs_ms == pytest.approx(per_run("conv"), abs=1e-12)
    fc = by_instr[(FC, 0)]
    assert fc.packed and fc.category == "GEMM" and fc.op == "Fully Connected (NC, PF32) GEMM"
    ln = by_instr[(LAYER_NORM, 1)]
    assert not ln.delegated and ln.category == "OTHER"


def test_top_ops_order(profile: Profile) -> None:
    totals = {
        CONV: total("conv"),
        FC: total("fc"),
        TRANSPOSE: total("tr"),
        (LAYER_NORM, 1): total("ln1"),
        MUL: total("mul"),
        (LAYER_NORM, 3): total("ln2"),
    }
    expected = sorted(totals.values(), reverse=True)
    top = profile.top_ops(4)
    assert len(top) == 4
    assert list(top["total_ms"]) == pytest.approx(expected[:4], abs=1e-12)
    assert list(top["event"][:3]) == [CONV, FC, LAYER_NORM]
    assert len(profile.top_ops(100)) == 6


def test_portable_ops_table(profile: Profile) -> None:
    portable = profile.portable_ops
    # Two layer_norm instances group into one row; mul is the other row.
    assert list(portable["op"]) == [LAYER_NORM, MUL]  # heaviest first
    ln = portable.iloc[0]
    ln_runs = [(r["ln1"] + r["ln2"]) / 1000 for r in RUNS]
    assert ln["count"] == 2
    assert ln["category"] == "OTHER"
    assert ln["total_ms"] == pytest.approx(sum(ln_runs), abs=1e-12)
    assert ln["share"] == pytest.approx(sum(ln_runs) / total("e2e"), abs=1e-12)
    mul = portable.iloc[1]
    assert mul["count"] == 1 and mul["category"] == "ELEMENTWISE"
    assert mul["total_ms"] == pytest.approx(total("mul"), abs=1e-12)


def test_portable_ops_median_per_run_is_a_median(profile: Profile) -> None:
    """The column is called median_ms_per_run; per-run totals 0.19, 0.22, 0.29 ms have median 0.22 (mean 0.2333)."""
    ln_runs = [(r["ln1"] + r["ln2"]) / 1000 for r in RUNS]
    assert statistics.median(ln_runs) != pytest.approx(statistics.mean(ln_runs), abs=1e-6)
    row = profile.portable_ops.iloc[0]
    assert row["median_ms_per_run"] == pytest.approx(statistics.median(ln_runs), abs=1e-12)


def test_unknown_ops_count_as_other_and_are_listed(tmp_path: Path) -> None:
    runs = [
        RunSpec(
            e2e_ns=1_000_000,
            delegate_call_ns=600_000,
            delegate_ops=[("Frobnicate (NC, F32) #1", 300_000), (CONV, 200_000)],
        )
    ]
    p = Profile.from_etdump(write_etdump(tmp_path / "u.etdp", runs))
    assert p.unclassified_ops == ["Frobnicate (NC, F32)"]
    assert p.share("other") == pytest.approx(0.8, abs=1e-12)  # 1000 - 200 conv
    assert p.share("conv") == pytest.approx(0.2, abs=1e-12)


def test_profile_without_operator_events(tmp_path: Path) -> None:
    """A runtime without per-op profiling writes only Method::execute and DELEGATE_CALL; a Profile must still work."""
    runs = [RunSpec(e2e_ns=1_000_000, delegate_call_ns=700_000), RunSpec(e2e_ns=1_200_000, delegate_call_ns=900_000)]
    p = Profile.from_etdump(write_etdump(tmp_path / "noops.etdp", runs), **KW)
    assert p.shares["OTHER"] == pytest.approx(1.0, abs=1e-12)
    assert p.delegation_coverage == pytest.approx((0.7 + 0.9 / 1.2) / 2, abs=1e-12)  # median of two runs
    assert len(p.portable_ops) == 0
    digest = json.loads(json.dumps(p.to_dict()))
    assert digest["portable_ops"] == [] and digest["top_ops"] == []


# ---------------------------------------------------------------- summary


def test_summary_is_json_and_consistent(profile: Profile) -> None:
    digest = profile.to_dict(top=3)
    text = json.dumps(digest)  # must not raise
    back = json.loads(text)
    required = {
        "model",
        "recipe",
        "variant",
        "runs",
        "latency",
        "load_ms",
        "init_ms",
        "shares",
        "delegation_coverage",
        "node_delegation_coverage",
        "sme_path_share",
        "sme_path_ops",
        "top_ops",
        "portable_ops",
        "unclassified_ops",
    }
    assert required <= set(back)
    assert (back["model"], back["recipe"], back["variant"], back["runs"]) == ("m", "fp32-xnnpack", "v", 3)
    assert back["latency"]["median_ms"] == pytest.approx(1.3, abs=1e-12)
    assert back["shares"] == pytest.approx(_expected_shares(), abs=1e-12)
    assert back["delegation_coverage"] == pytest.approx(profile.delegation_coverage, abs=1e-12)
    assert back["node_delegation_coverage"] == pytest.approx(0.9, abs=1e-12)
    assert back["sme_path_share"] == pytest.approx(profile.sme_path_share, abs=1e-12)
    assert back["total_shares"] == pytest.approx(profile.total_shares, abs=1e-12)
    assert back["sme_path_ops"] == 1
    assert [op["event"] for op in back["top_ops"]] == [CONV, FC, LAYER_NORM]
    assert [op["op"] for op in back["portable_ops"]] == [LAYER_NORM, MUL]
    assert back["unclassified_ops"] == []
    assert back["load_ms"] == pytest.approx(3.0, abs=1e-12)


# ---------------------------------------------------------------- speedup

ON_NS = [1_000_000 + ((i * 37) % 21 - 10) * 1_000 for i in range(15)]  # 1.0 ms +- 10 us
OFF_NS = [3_000_000 + ((i * 13) % 11 - 5) * 2_000 for i in range(15)]  # 3.0 ms +- 10 us


@pytest.fixture(scope="module")
def on_off(tmp_path_factory: pytest.TempPathFactory) -> tuple[Profile, Profile]:
    d = tmp_path_factory.mktemp("speedup")
    on = Profile.from_etdump(execute_only(d / "on.etdp", ON_NS), model="m", recipe="fp32-xnnpack", variant="sme2-on")
    off = Profile.from_etdump(
        execute_only(d / "off.etdp", OFF_NS), model="m", recipe="fp32-xnnpack", variant="sme2-off"
    )
    return on, off


@pytest.mark.filterwarnings("ignore::pytest_sme2.errors.OneProcessIntervalWarning")  # one process a side, on purpose
def test_speedup_value_and_interval(on_off) -> None:
    on, off = on_off
    on_ms = [ns / 1e6 for ns in ON_NS]
    off_ms = [ns / 1e6 for ns in OFF_NS]
    expected = statistics.median(off_ms) / statistics.median(on_ms)
    speedup = on.speedup_over(off)
    assert speedup.value == pytest.approx(expected, rel=1e-12)
    assert speedup.low <= speedup.value <= speedup.high
    # Any resampled median ratio lies between the extreme sample ratios.
    assert min(off_ms) / max(on_ms) <= speedup.low
    assert speedup.high <= max(off_ms) / min(on_ms)
    assert (speedup.this, speedup.other) == (on.label, off.label)
    assert (speedup.this_runs, speedup.other_runs) == (15, 15)
    assert speedup.this_median_ms == pytest.approx(statistics.median(on_ms), abs=1e-12)
    assert speedup.other_median_ms == pytest.approx(statistics.median(off_ms), abs=1e-12)
    # The other way round is the reciprocal.
    assert off.speedup_over(on).value == pytest.approx(1 / expected, rel=1e-12)


@pytest.mark.filterwarnings("ignore::pytest_sme2.errors.OneProcessIntervalWarning")  # one process a side, on purpose
def test_speedup_repr_names_both_sides(on_off) -> None:
    on, off = on_off
    text = repr(on.speedup_over(off))
    assert "m fp32-xnnpack [sme2-on]" in text and "m fp32-xnnpack [sme2-off]" in text
    assert f"{statistics.median(ON_NS) / 1e6:.3f}" in text
    assert f"{statistics.median(OFF_NS) / 1e6:.3f}" in text
    assert json.dumps(on.speedup_over(off).as_dict())


# ------------------------------------------------------------- assertions


@pytest.mark.filterwarnings("ignore::pytest_sme2.errors.OneProcessIntervalWarning")  # one process a side, on purpose
def test_assert_speedup(on_off) -> None:
    on, off = on_off
    expected = statistics.median(OFF_NS) / statistics.median(ON_NS)
    assert assert_speedup(on, off, at_least=2.0).value == pytest.approx(expected, rel=1e-12)
    with pytest.raises(AssertionError) as info:
        assert_speedup(on, off, at_least=5.0)
    message = str(info.value)
    assert f"{expected:.2f}" in message
    assert "5.00" in message
    assert on.label in message and off.label in message


def test_assert_share(profile: Profile) -> None:
    conv = clean_median(lambda r: r["conv"] / r["e2e"])
    assert assert_share(profile, "conv", at_most=0.9, at_least=0.1) == pytest.approx(conv, abs=1e-12)
    with pytest.raises(AssertionError) as info:
        assert_share(profile, "conv", at_most=0.25)
    message = str(info.value)
    assert f"{conv * 100:.1f}%" in message and "25.0%" in message and profile.label in message
    with pytest.raises(AssertionError) as info:
        assert_share(profile, "Data Movement", at_least=0.5)
    message = str(info.value)
    dm = clean_median(lambda r: r["tr"] / r["e2e"])
    assert f"{dm * 100:.1f}%" in message and "50.0%" in message and profile.label in message


def test_assert_delegation(profile: Profile) -> None:
    coverage = clean_median(lambda r: r["dc"] / r["e2e"])
    assert assert_delegation(profile, 0.5) == pytest.approx(coverage, abs=1e-12)
    with pytest.raises(AssertionError) as info:
        assert_delegation(profile, 0.95)
    message = str(info.value)
    assert f"{coverage * 100:.1f}%" in message and "95.0%" in message and profile.label in message
    assert LAYER_NORM in message  # names the heaviest portable operator

    assert assert_delegation(profile, 0.85, by="nodes") == pytest.approx(0.9, abs=1e-12)
    with pytest.raises(AssertionError) as info:
        assert_delegation(profile, 0.95, by="nodes")
    message = str(info.value)
    assert "90.0%" in message and "95.0%" in message and profile.label in message
    with pytest.raises(ValueError, match="by="):
        assert_delegation(profile, 0.5, by="ops")


def test_assert_delegation_by_nodes_without_record(etdump: Path) -> None:
    bare = Profile.from_etdump(etdump, model="m", recipe="r", variant="v")
    with pytest.raises(AssertionError, match="unknown"):
        assert_delegation(bare, 0.5, by="nodes")


def test_delegate_time_outside_every_delegate_operator_is_its_own_part_of_other(tmp_path: Path) -> None:
    # 100 us runs: a 70 us delegate call holding 40 + 20 us of XNNPACK operators, so 10 us of it is in no operator
    run = RunSpec(
        e2e_ns=100_000,
        delegate_call_ns=70_000,
        delegate_instr=0,
        delegate_ops=[("Convolution (NHWC, F32) IGEMM #1", 40_000), ("Fully Connected (NC, F32) GEMM #1", 20_000)],
    )
    profile = Profile.from_etdump(write_etdump(tmp_path / "d.etdp", [run, run, run]))
    assert profile.delegate_outside_ops_share() == pytest.approx(0.10)
    assert profile.share("other") == pytest.approx(0.40)  # it stays in OTHER, now with its part named
    assert profile.to_dict()["other_delegate_outside_ops"] == pytest.approx(0.10)


def _every_run_of_off_disturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a busy machine: every timed run of the SME2-off profile disturbed, none of the on profile's."""
    monkeypatch.setattr(
        Profile, "clean", property(lambda self: np.full(self.e2e_ms.size, "sme2-off" not in self.label))
    )


def test_a_speedup_with_every_run_of_a_side_disturbed_says_so_and_what_to_do(on_off, monkeypatch) -> None:
    from pytest_sme2 import RunnerError

    on, off = on_off
    _every_run_of_off_disturbed(monkeypatch)
    with pytest.raises(RunnerError) as raised:
        on.speedup_over(off)
    message = str(raised.value)
    assert f"every one of the 15 timed runs of {off.label} was disturbed" in message
    assert "--sme2-runs" in message and "quieter machine" in message


@pytest.mark.filterwarnings("ignore::pytest_sme2.errors.OneProcessIntervalWarning")
def test_the_report_of_a_pair_with_every_run_of_a_side_disturbed_still_stands(on_off, monkeypatch) -> None:
    # A busy CI machine made the report itself fail ("numerator: no samples") and the session with it.
    from pytest_sme2.report.entries import compare

    on, off = on_off
    assert compare(on, off)["speedup"] is not None  # the same pair, runs undisturbed: a speedup
    _every_run_of_off_disturbed(monkeypatch)
    compared = compare(on, off)
    assert compared["speedup"] is None
    assert {c["category"] for c in compared["categories"]}  # the rest of the comparison is there
