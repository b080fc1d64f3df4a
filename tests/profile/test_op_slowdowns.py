"""Operators SME2 made slower, measured (issue 27, item 4): op_pairs.sme2_slowdowns, its assertion and reports.

Synthetic ETDumps whose every time is known: a GEMV-like fully connected operator that takes 40% longer with
SME2 on (XNNPACK #10719), a convolution SME2 made 3x faster, a transpose the same on both sides.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers_etdump import RunSpec, write_etdump

from pytest_sme2 import assert_no_sme2_slowdown
from pytest_sme2.errors import UsageError
from pytest_sme2.profile.op_pairs import sme2_slowdowns
from pytest_sme2.profile.profile import Profile
from pytest_sme2.report.entries import compare
from pytest_sme2.report.text import slowdown_text

US = 1_000
CONV_OFF, CONV_ON = "Convolution (NHWC, F32) IGEMM #1", "Convolution (NHWC, PF32) IGEMM #1"
FC_OFF, FC_ON = "Fully Connected (NC, F32) GEMM #1", "Fully Connected (NC, PF32) GEMM #1"
TRANSPOSE = "Transpose (ND, X32) #1"


def _profile(
    tmp_path: Path, name: str, sme2: bool, conv_us: float, fc_us: float, runs: int = 30, stall_fc_in: int = 0
) -> Profile:
    rng = np.random.default_rng(7 if sme2 else 8)
    specs = []
    for i in range(runs):
        jitter = 1 + rng.uniform(-0.01, 0.01)
        conv, fc, tr = int(conv_us * US * jitter), int(fc_us * US * jitter), int(50 * US * jitter)
        if i < stall_fc_in:
            fc += 4_000 * US  # a 4 ms stall inside the operator: a disturbed run, never evidence
        call = conv + fc + tr + 10 * US
        specs.append(
            RunSpec(
                e2e_ns=call + 20 * US,
                delegate_call_ns=call,
                delegate_ops=[(CONV_ON if sme2 else CONV_OFF, conv), (FC_ON if sme2 else FC_OFF, fc), (TRANSPOSE, tr)],
            )
        )
    path = write_etdump(tmp_path / f"{name}.etdp", specs)
    return Profile.from_etdump(
        path,
        model="gemv",
        recipe="fp32-xnnpack",
        variant=f"local sme2={'on' if sme2 else 'off'} threads=1",
        metadata={"run": {"sme2": sme2, "threads": 1}},
    )


def test_an_operator_slower_with_sme2_is_named_with_its_interval(tmp_path: Path) -> None:
    on = _profile(tmp_path, "on", True, conv_us=100, fc_us=140)
    off = _profile(tmp_path, "off", False, conv_us=300, fc_us=100)
    slower = sme2_slowdowns(on, off)
    # the convolution sped up, the transpose did not move
    assert [s.op for s in slower] == ["Fully Connected (NC, F32) GEMM"]
    s = slower[0]
    assert s.on_op == "Fully Connected (NC, PF32) GEMM" and s.category == "GEMM"
    assert 1.35 < s.slowdown.low < s.slowdown.value < s.slowdown.high < 1.45
    assert abs(s.on_ms - 0.140) < 0.002 and abs(s.off_ms - 0.100) < 0.002
    with pytest.raises(
        AssertionError,
        match=r"(?s)1 operator\(s\) measured slower with SME2 on \(gemv fp32-xnnpack "
        r"\[local sme2=on.*Fully Connected \(NC, F32\) GEMM \(GEMM\): "
        r"\d+\.\d us off -> 1[34]\d\.\d us on, 1\.4\dx slower \[1\.\d\d, 1\.\d\d\]",
    ):
        assert_no_sme2_slowdown(on, off)
    comparison = compare(on, off)
    assert [op["op"] for op in comparison["slower_with_sme2"]] == ["Fully Connected (NC, F32) GEMM"]
    assert slowdown_text(comparison).startswith("1 operator(s) slower with SME2 on than off")


def test_small_differences_and_stalls_are_not_slowdowns(tmp_path: Path) -> None:
    # 3% slower: within the 5% a process-level shift can be; a 4 ms stall in 10 runs of the operator: left out.
    on = _profile(tmp_path, "on", True, conv_us=100, fc_us=103, stall_fc_in=10)
    off = _profile(tmp_path, "off", False, conv_us=300, fc_us=100)
    assert on.disturbed_runs == 10
    assert sme2_slowdowns(on, off) == []
    assert_no_sme2_slowdown(on, off)
    assert slowdown_text(compare(on, off)).startswith("No operator is measurably slower")
    assert [s.op for s in sme2_slowdowns(on, off, min_slowdown=0.0)] == ["Fully Connected (NC, F32) GEMM"]


def test_emulated_profiles_are_refused(tmp_path: Path) -> None:
    from helpers_etdump import emulated_metadata

    on = _profile(tmp_path, "on", True, conv_us=100, fc_us=140)
    off = _profile(tmp_path, "off", False, conv_us=300, fc_us=100)
    on.metadata.update(emulated_metadata(sme2=True))
    on = Profile(on.trace, model=on.model, recipe=on.recipe, variant=on.variant, metadata=on.metadata)
    with pytest.raises(UsageError, match="emulated time is not time.*assert_no_modelled_sme2_slowdown"):
        sme2_slowdowns(on, off)


def test_a_real_model_whose_kernels_do_not_change_shows_no_slowdown(tmp_path: Path, exported_toy_cnn) -> None:
    """End to end on the adb stand-in: toy_cnn's runner on this x86 machine runs the same kernels with SME2 "on"
    and off (there is no SME2 to hide), so any operator named slower would be noise called significant."""
    from adb_standin import AdbStandin, namespaces_available

    from pytest_sme2.measure.runner import Runner, alternate
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run.targets import RunSpec

    if namespaces_available() is not None:
        pytest.skip(str(namespaces_available()))
    with AdbStandin(tmp_path / "standin") as standin:
        standin.add_device("SAME-1", sme2=True)
        session = Sme2Session(
            Settings(
                target="adb:SAME-1",
                cache_dir=tmp_path / "cache",
                session_dir=tmp_path / "a",
                target_options={"adb_server": standin.address},
            )
        )
        try:
            on, off = (
                Runner(session, RunSpec(sme2=sme2, runs=40, warmup=2), session.test_dir(f"s{sme2}"))
                for sme2 in (True, False)
            )
            on, off = alternate(exported_toy_cnn, on, off)
        finally:
            session.close()
    assert on.runs == off.runs >= 40 and len(on.ops) > 3
    assert sme2_slowdowns(on, off) == []
    assert compare(on, off)["slower_with_sme2"] == []
